//! The service as a separate process for benchmarks that measure it from outside: the
//! `agent-platform` binary (SERVER_BIN) on a fresh database, and what its process uses.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{free_port, fresh_database};

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
pub async fn start_service(
    http: &reqwest::Client,
    storage: &std::path::Path,
    extra: &[(&str, &str)],
) -> (Server, String) {
    let port = free_port();
    let database = fresh_database().await;
    let mut child = Command::new(env("SERVER_BIN"))
        .env("PORT", port.to_string())
        .env("DATABASE_URL", &database)
        .env("JWT_SECRET", "b".repeat(64))
        .env("ENCRYPTION_KEY", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
        .env("ADMIN_USERNAME", "admin")
        .env("ADMIN_PASSWORD", ADMIN_PASSWORD)
        .env("STORAGE_BACKEND", "fs")
        .env("STORAGE_DIR", storage)
        .env("QUEUE_BACKEND", "memory")
        .env("DB_MAX_CONNECTIONS", "20")
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
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("process stat");
    let after_name = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap_or(0.0) + fields[12].parse::<f64>().unwrap_or(0.0);
    ticks / 100.0
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
