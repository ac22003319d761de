//! Real MCP servers and an OAuth2 server for the MCP tests, started as child processes from
//! the packages `localstack/install.sh mcp` installs (found through MCP_TOOLS_DIR, else the
//! default cache path), plus a log capture for checking that no secret is logged.

use crate::free_port;
use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Where the npm packages and the Python venv are, installed or not.
fn tools_location() -> PathBuf {
    std::env::var("MCP_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/agent-platform/mcp"))
}

/// Where the npm packages and the Python venv are; they must be installed.
pub fn tools_dir() -> PathBuf {
    let dir = tools_location();
    assert!(
        dir.join("node_modules/.bin/mcp-server-everything").exists(),
        "MCP test servers missing in {}: run `bash localstack/install.sh mcp` (make test does)",
        dir.display()
    );
    dir
}

fn fixture(name: &str) -> String {
    format!("{}/fixtures/mcp/{name}", env!("CARGO_MANIFEST_DIR"))
}

const EVERYTHING_BIN: &str = "node_modules/.bin/mcp-server-everything";

/// The command and args that start `server-everything` over stdio.
pub fn everything_stdio() -> (String, Vec<String>) {
    let bin = tools_dir().join(EVERYTHING_BIN);
    (bin.display().to_string(), vec!["stdio".to_owned()])
}

/// The command and args that start the Python SDK's stdio server (`stdio_server.py`), which
/// exits when its stdin closes.
pub fn python_stdio() -> (String, Vec<String>) {
    let python = tools_dir().join("venv/bin/python");
    (python.display().to_string(), vec![fixture("stdio_server.py")])
}

/// `MCP_STDIO_COMMANDS` for tests: the `server-everything` binary they start, and `node` and
/// `x`, which tests save as commands but never start.
pub fn stdio_commands() -> String {
    format!("x,node,{}", tools_location().join(EVERYTHING_BIN).display())
}

/// `extra` with stdio servers turned on for `commands` (from `stdio_commands`).
pub fn with_stdio<'a>(commands: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut vars = vec![("MCP_STDIO_ENABLED", "true"), ("MCP_STDIO_COMMANDS", commands)];
    vars.extend_from_slice(extra);
    vars
}

/// A server process; killed when dropped. Its stdout lines are kept for assertions.
pub struct Fixture {
    _child: Child,
    pub port: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Fixture {
    async fn start(mut cmd: Command, port: u16) -> Self {
        cmd.stdout(Stdio::piped()).stderr(Stdio::null()).kill_on_drop(true);
        let mut child = cmd.spawn().expect("start fixture server");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("stdout");
        let sink = lines.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                sink.lock().unwrap().push(line);
            }
        });
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return Self {
                    _child: child,
                    port,
                    lines,
                };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("fixture server on port {port} did not start");
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// How many stdout lines start with `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with(prefix))
            .count()
    }
}

/// `server-everything` over `sse` (`/sse`) or `streamableHttp` (`/mcp`).
pub async fn everything(transport: &str) -> Fixture {
    everything_on(transport, free_port()).await
}

/// The same on a given port, e.g. to restart a server where its clients know it.
pub async fn everything_on(transport: &str, port: u16) -> Fixture {
    let (bin, _) = everything_stdio();
    let mut cmd = Command::new(bin);
    cmd.arg(transport).env("PORT", port.to_string());
    Fixture::start(cmd, port).await
}

/// How many tools the guarded server lists (`add`, `shout`, `session_id`, `trace_parent`,
/// `wait`).
pub const GUARDED_TOOLS: usize = 5;

/// The Python SDK server that wants a credential: `["bearer", TOKEN]`, `["apikey", HEADER,
/// VALUE]` or `["jwt", ISSUER]`, over Streamable HTTP at `/mcp`.
pub async fn guarded(args: &[&str]) -> Fixture {
    guarded_over("streamable-http", args).await
}

/// The same server over the SSE transport, at `/sse`.
pub async fn guarded_sse(args: &[&str]) -> Fixture {
    guarded_over("sse", args).await
}

async fn guarded_over(transport: &str, args: &[&str]) -> Fixture {
    let port = free_port();
    let mut cmd = Command::new(tools_dir().join("venv/bin/python"));
    cmd.arg(fixture("guarded_server.py"))
        .arg(port.to_string())
        .args(args)
        .env("FIXTURE_TRANSPORT", transport);
    Fixture::start(cmd, port).await
}

/// oauth2-mock-server issuing tokens to one client: valid for `ttl` seconds, advertised as
/// `expires_in = advertised` seconds. Token endpoint `/token`; issuer `http://localhost:PORT`.
pub async fn oauth(client_id: &str, client_secret: &str, ttl: u64, advertised: u64) -> Fixture {
    let port = free_port();
    let mut cmd = Command::new("node");
    cmd.arg(fixture("oauth_server.mjs"))
        .args([port.to_string(), client_id.to_owned(), client_secret.to_owned()])
        .args([ttl.to_string(), advertised.to_string()])
        .env("MCP_TOOLS_DIR", tools_dir());
    Fixture::start(cmd, port).await
}

/// Everything logged on this thread at DEBUG and above, for the life of the guard. Tests that
/// use it run on the current-thread runtime, so the app's tasks log on the same thread.
pub struct LogCapture {
    buf: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

#[derive(Clone)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    pub fn start() -> Self {
        // While one dispatcher exists in the process, tracing-core lets the first thread to
        // reach a callsite decide for every thread, and one without a subscriber decides
        // "never" (tokio-rs/tracing#3611, #2874): another test's thread then silenced this
        // one's request span now and then. A second dispatcher, kept for the process, keeps
        // tracing on its general path, which asks every dispatcher.
        static SECOND: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
        SECOND.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = Buf(buf.clone());
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        Self {
            buf,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock().unwrap()).into_owned()
    }
}
