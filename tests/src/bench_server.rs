//! The service as a separate process for benchmarks that measure it from outside: the
//! `agent-platform` binary (SERVER_BIN) on a fresh database, and what its process uses.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{free_port, fresh_database, on_unix_socket};

pub const ADMIN_PASSWORD: &str = "bench-password";

/// A running server process, killed when dropped.
pub struct Server {
    pub child: Child,
    pub base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| panic!("{key} must be set (run `make bench`)"))
}

/// Waits until `url` answers 2xx; panics when `child` exits first or after two minutes.
pub async fn wait_ready(http: &reqwest::Client, url: &str, child: &mut Child) {
    for _ in 0..600 {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{url}: the process exited with {status}");
        }
        if http.get(url).send().await.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{url} did not become ready");
}

/// Starts the service on a fresh database with files under `storage` and the in-process
/// queue; `extra` adds or overrides environment variables. Returns it with its database URL.
/// The service reaches the database on the server's Unix socket, as `make run` does, when the
/// stack has one (`DATABASE_SOCKET_URL`; unset it to measure over TCP); the URL returned is
/// the TCP one. Its pool is the size it ships with (`DB_MAX_CONNECTIONS` from the caller's
/// environment, 10 when unset): a bigger one, on a database with two cores, queued a burst of
/// chats' statements inside Postgres instead of in the pool, and cost CPU per chat.
pub async fn start_service(
    http: &reqwest::Client,
    storage: &std::path::Path,
    extra: &[(&str, &str)],
) -> (Server, String) {
    let port = free_port();
    let database = fresh_database().await;
    let reached = match std::env::var_os("DATABASE_SOCKET_URL") {
        Some(_) => on_unix_socket(&database),
        None => database.clone(),
    };
    let mut child = Command::new(env("SERVER_BIN"))
        .env("PORT", port.to_string())
        .env("DATABASE_URL", &reached)
        .env("JWT_SECRET", "b".repeat(64))
        .env("ENCRYPTION_KEY", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
        .env("ADMIN_USERNAME", "admin")
        .env("ADMIN_PASSWORD", ADMIN_PASSWORD)
        .env("STORAGE_BACKEND", "fs")
        .env("STORAGE_DIR", storage)
        .env("QUEUE_BACKEND", "memory")
        .env("RUST_LOG", "warn")
        .envs(extra.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the service");
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(http, &format!("{base}/health"), &mut child).await;
    (Server { child, base }, database)
}

/// CPU seconds (user + system) a process has used.
pub fn cpu_seconds(pid: u32) -> f64 {
    try_cpu_seconds(pid).expect("process stat")
}

/// `cpu_seconds`, or None when the process is gone.
pub fn try_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap_or(0.0) + fields[12].parse::<f64>().unwrap_or(0.0);
    Some(ticks / 100.0)
}

/// Resident memory of a process, in MiB.
pub fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kib| kib / 1024.0)
        .unwrap_or(0.0)
}

/// The `p` quantile (0..=1) of `values`, in milliseconds; sorts `values`.
pub fn percentile_ms(values: &mut [Duration], p: f64) -> f64 {
    crate::percentile::percentile(values, p).as_secs_f64() * 1000.0
}

/// One HTTP/1.1 connection driven by hand, so that successive requests are known to share one
/// TCP socket (a pooling client may open another one at will). Only what the chat guard
/// needs: a request with a body, a chunked streamed answer read to its end.
pub struct OneConnection {
    stream: tokio::net::TcpStream,
    host: String,
    buf: Vec<u8>,
    /// When the last read returned: the arrival time of everything in `buf` read by it.
    read_at: std::time::Instant,
}

impl OneConnection {
    /// Connects to `base` (`http://127.0.0.1:PORT`).
    pub async fn open(base: &str) -> Self {
        let host = base.strip_prefix("http://").expect("an http:// base URL").to_owned();
        let stream = tokio::net::TcpStream::connect(&host).await.expect("connect");
        Self {
            stream,
            host,
            buf: Vec::new(),
            read_at: std::time::Instant::now(),
        }
    }

    async fn fill(&mut self) {
        use tokio::io::AsyncReadExt;
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk).await.expect("read");
        assert!(n > 0, "the server closed the connection mid-answer");
        self.read_at = std::time::Instant::now();
        self.buf.extend_from_slice(&chunk[..n]);
    }

    /// Reads until `buf` holds `needle`; returns the index just past it.
    async fn read_past(&mut self, needle: &[u8]) -> usize {
        loop {
            if let Some(i) = self.buf.windows(needle.len()).position(|w| w == needle) {
                return i + needle.len();
            }
            self.fill().await;
        }
    }

    /// POSTs JSON `body` to `path` with `headers` and reads the chunked answer to its end.
    /// Returns the time from the arrival of the response headers to the arrival of the first
    /// complete body line (zero when both came in one read).
    pub async fn post_stream(&mut self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Duration {
        use tokio::io::AsyncWriteExt;
        let mut req = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            self.host,
            body.len()
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        // One write: the request must not itself wait on Nagle.
        self.stream.write_all(&bytes).await.expect("write request");

        let head_end = self.read_past(b"\r\n\r\n").await;
        let headers_at = self.read_at;
        let head = String::from_utf8_lossy(&self.buf[..head_end]).to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 200"), "answer: {head}");
        assert!(head.contains("transfer-encoding: chunked"), "a streamed answer: {head}");
        self.buf.drain(..head_end);

        let mut first_line = None;
        loop {
            let size_end = self.read_past(b"\r\n").await;
            let size_text = String::from_utf8_lossy(&self.buf[..size_end - 2]).into_owned();
            let size_hex = size_text.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_hex, 16).expect("a chunk size");
            // Chunk data and its CRLF; the last chunk (size 0) is followed by an empty trailer line.
            while self.buf.len() < size_end + size + 2 {
                self.fill().await;
            }
            if first_line.is_none() && self.buf[size_end..size_end + size].contains(&b'\n') {
                first_line = Some(self.read_at.saturating_duration_since(headers_at));
            }
            self.buf.drain(..size_end + size + 2);
            if size == 0 {
                break;
            }
        }
        first_line.expect("an answer line")
    }
}
