//! Agent chat as users get it: time to first token AT THE CLIENT, through the service and a
//! LiteLLM proxy, against the raw scripted upstream, all in one run.
//!
//! First, a guard that fails the run (exit 1): the SECOND chat on one kept-alive connection (a
//! hand-driven HTTP/1.1 socket, so it is truly the same connection) must not wait more than
//! 20 ms between its response headers and its first line. That was the Nagle / delayed-ACK
//! stall of about 40 ms a socket without TCP_NODELAY gives every answer after the first.
//!
//! Then, for each path (raw upstream, `POST /api/agent/{id}/chat`, the external API's
//! `POST /api/openapi/v1/agent/chat` with app credentials, LiteLLM), on kept-alive connections
//! (one pooled client reused across requests, as browsers and HTTP client libraries do) and on
//! a new connection per request, at concurrency 1 and CONCURRENCY:
//! - first token p50/p99 at the client, and the time added over the raw upstream;
//! - streams/s and streams per CPU-second of the server process (`/proc/<pid>/stat`);
//! - the time after the last token until the stream ends (stored messages, memory round, title).
//!
//! At concurrency 1 each path alternates with the raw upstream round by round ("added" is the
//! round's difference), so the path's connection is reused back to back, as a pooled client
//! does under load. At CONCURRENCY "added" is the difference of the percentiles, and each row
//! is measured after a few seconds of the same load that are not counted.
//!
//! Then the same rows driven by aiohttp, a Python client with its default connection pool (the
//! client the issue that set these goals measured with; `chat_aiohttp.py`, run by the Python
//! of AIOHTTP_PYTHON, skipped when unset): the goals are checked against its own raw upstream.
//!
//! Last, what tracing costs: the service's chat with traces off, on (OTLP to a sink in this
//! process that answers at once) and sampled at 10%, three servers side by side measured in
//! interleaved rounds; the goal is that tracing keeps at least 90% of the streams per server
//! CPU-second.
//!
//! The service is the `agent-platform` binary (SERVER_BIN, built with the bench-local profile)
//! on a fresh database of DATABASE_URL's server, reached on its Unix socket when the stack names
//! one (`bench_server::start_service`); LiteLLM runs from LITELLM_BIN (skipped when
//! unset). Every service chat does its real work: agent and model lookups, quota, history (20
//! messages), the stored user and assistant messages.
//!
//! For the concurrency runs a second table says where the whole machine's CPU went per stream:
//! the server, Postgres (every `postgres` process) and the client and upstream (this process,
//! and the aiohttp process for its rows).
//!
//! Run with `make bench-chat` (only this benchmark) or `make bench`;
//! `CHAT_BENCH_ONLY=concurrency make bench-chat` runs only the kept-alive concurrency rows of the
//! raw upstream and the two service paths (about a minute); `CHAT_BENCH_ONLY=tracing` only what
//! tracing costs (about four minutes); `CHAT_BENCH_ONLY=aiohttp` only the rows with aiohttp
//! (about three minutes).

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api_tests::bench_server::{
    cpu_seconds, percentile_ms, start_service, try_cpu_seconds, wait_ready, OneConnection, Server, ADMIN_PASSWORD,
};
use api_tests::free_port;
use api_tests::model_server::{ModelServer, GOOD_KEY};
use futures::StreamExt;
use serde_json::{json, Value};

const TOKENS: usize = 50;
const WARMUP: usize = 30;
/// Load before each concurrency row's measured window.
const LOAD_WARMUP: Duration = Duration::from_secs(3);
const ROUNDS: usize = 300;
const CONCURRENCY: usize = 32;
const DURATION: Duration = Duration::from_secs(10);
/// Well under the ~40 ms of a delayed ACK, well over a loaded machine's scheduling noise.
const GUARD_LIMIT: Duration = Duration::from_millis(20);
const OPEN_ID: &str = "bench-user";

/// All CPUs' ticks so far and the idle ones among them (`/proc/stat`, idle + iowait).
fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let cpu: Vec<u64> = stat
        .lines()
        .next()
        .expect("the cpu line")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    (cpu.iter().sum(), cpu[3] + cpu[4])
}

/// CPU seconds of every process named `name` (Postgres: one process per connection).
fn cpu_of_named(name: &str) -> f64 {
    let mut total = 0.0;
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // A process may end between the listing and the reads.
        let named = std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name);
        if named {
            total += try_cpu_seconds(pid).unwrap_or(0.0);
        }
    }
    total
}

/// Where the whole machine's CPU went during a concurrency run.
struct MachineShare {
    /// Busy share of all CPUs.
    busy: f64,
    /// CPU milliseconds per stream: the server, Postgres, this process (client and upstream).
    server_ms: Option<f64>,
    postgres_ms: f64,
    bench_ms: f64,
}

/// Sum over the process and its children (LiteLLM may fork workers).
fn tree_cpu_seconds(pid: u32) -> f64 {
    let mut total = cpu_seconds(pid);
    if let Ok(children) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
        for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            total += tree_cpu_seconds(child);
        }
    }
    total
}

async fn start_litellm(http: &reqwest::Client, upstream: &str, model: &str, dir: &std::path::Path) -> Option<Server> {
    let bin = std::env::var("LITELLM_BIN").ok()?;
    let config = dir.join("litellm.yaml");
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: {model}\n    litellm_params:\n      model: openai/{model}\n      api_base: {upstream}\n      api_key: {GOOD_KEY}\n"
        ),
    )
    .expect("write LiteLLM config");
    let port = free_port();
    let mut child = Command::new(bin)
        .arg("--config")
        .arg(&config)
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--num_workers", "1"])
        .env("LITELLM_LOG", "ERROR")
        .env("LITELLM_MASTER_KEY", GOOD_KEY)
        // With a DATABASE_URL LiteLLM would try to use it for its own tables.
        .env_remove("DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start LiteLLM");
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(http, &format!("{base}/health/liveliness"), &mut child).await;
    Some(Server { child, base })
}

async fn json_post(http: &reqwest::Client, url: &str, token: Option<&str>, body: Value) -> Value {
    let mut req = http.post(url).json(&body);
    if let Some(t) = token {
        req = req.header("Svc-Auth", t);
    }
    req.send().await.expect("request").json().await.expect("json")
}

/// How the client reaches the server.
#[derive(Clone, Copy, PartialEq)]
enum Conn {
    /// One pooled client reused across requests.
    KeptAlive,
    /// A new TCP connection per request (no idle connections kept).
    New,
}

impl Conn {
    fn label(self) -> &'static str {
        match self {
            Conn::KeptAlive => "kept-alive",
            Conn::New => "new per request",
        }
    }

    fn client(self) -> reqwest::Client {
        let idle = match self {
            Conn::KeptAlive => CONCURRENCY * 2,
            Conn::New => 0,
        };
        reqwest::Client::builder()
            .pool_max_idle_per_host(idle)
            .build()
            .expect("client")
    }
}

/// One way of asking for the same answer.
#[derive(Clone)]
enum Target {
    Raw {
        url: String,
        body: Value,
    },
    Service {
        url: String,
        token: String,
    },
    External {
        url: String,
        app_id: String,
        app_token: String,
        agent_id: i64,
    },
    Litellm {
        url: String,
        body: Value,
    },
}

/// When the parts of one streamed answer arrived, from the request's start.
struct Timing {
    first: Duration,
    last: Duration,
    /// The end-of-answer marker (`done` line, `[DONE]` event).
    done: Duration,
    end: Duration,
}

/// Occurrences of `pat` in `buf` that end after `old` (bytes already scanned).
fn new_matches(buf: &[u8], old: usize, pat: &[u8]) -> usize {
    let from = old.saturating_sub(pat.len() - 1);
    buf[from..].windows(pat.len()).filter(|w| *w == pat).count()
}

impl Target {
    fn name(&self) -> &'static str {
        match self {
            Target::Raw { .. } => "raw upstream",
            Target::Service { .. } => "service `/agent/{id}/chat`",
            Target::External { .. } => "external `/openapi/v1/agent/chat`",
            Target::Litellm { .. } => "LiteLLM proxy",
        }
    }

    fn is_service(&self) -> bool {
        matches!(self, Target::Service { .. } | Target::External { .. })
    }

    /// Where the request goes, its headers and its body.
    fn parts(&self, conversation: &str) -> (&str, Vec<(&'static str, String)>, Value) {
        match self {
            Target::Raw { url, body } | Target::Litellm { url, body } => {
                (url, vec![("Authorization", format!("Bearer {GOOD_KEY}"))], body.clone())
            }
            Target::Service { url, token } => (
                url,
                vec![("Svc-Auth", token.clone())],
                json!({ "conversationId": conversation, "content": "benchmark" }),
            ),
            Target::External {
                url,
                app_id,
                app_token,
                agent_id,
            } => (
                url,
                vec![("Svc-App-Id", app_id.clone()), ("Svc-Token", app_token.clone())],
                json!({ "agentId": agent_id, "openId": OPEN_ID,
                        "conversationId": conversation, "content": "benchmark" }),
            ),
        }
    }

    fn request(&self, http: &reqwest::Client, conversation: &str) -> reqwest::RequestBuilder {
        let (url, headers, body) = self.parts(conversation);
        headers
            .into_iter()
            .fold(http.post(url), |req, (name, value)| req.header(name, value))
            .json(&body)
    }

    /// The target as `chat_aiohttp.py` takes it.
    fn aiohttp_spec(&self) -> Value {
        let (url, headers, body) = self.parts("ttfb");
        let headers: serde_json::Map<String, Value> = headers
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Value::String(v)))
            .collect();
        json!({ "name": self.name(), "url": url, "headers": headers, "body": body,
                "done": String::from_utf8_lossy(self.done_marker()) })
    }

    fn done_marker(&self) -> &'static [u8] {
        if self.is_service() {
            b"\"type\":\"done\""
        } else {
            b"[DONE]"
        }
    }

    /// Streams one answer and reads it to the end.
    async fn stream(&self, http: &reqwest::Client, conversation: &str) -> Timing {
        let start = Instant::now();
        let resp = self.request(http, conversation).send().await.expect("stream request");
        assert!(resp.status().is_success(), "{}: status {}", self.name(), resp.status());
        let mut body = resp.bytes_stream();
        let (mut buf, mut tokens) = (Vec::new(), 0usize);
        let (mut first, mut last, mut done) = (None, None, None);
        while let Some(chunk) = body.next().await {
            let old = buf.len();
            buf.extend_from_slice(&chunk.expect("chunk"));
            let at = start.elapsed();
            let n = new_matches(&buf, old, b"tok ");
            if n > 0 {
                first.get_or_insert(at);
                last = Some(at);
                tokens += n;
            }
            if done.is_none() && new_matches(&buf, old, self.done_marker()) > 0 {
                done = Some(at);
            }
        }
        assert_eq!(tokens, TOKENS, "{}: a whole answer", self.name());
        let end = start.elapsed();
        Timing {
            first: first.expect("a first token"),
            last: last.expect("a last token"),
            done: done.unwrap_or(end),
            end,
        }
    }
}

/// One table row.
struct Row {
    target: &'static str,
    /// One of the service's own paths (the goals are about these).
    service: bool,
    conn: Conn,
    concurrency: usize,
    timings: Vec<Timing>,
    /// Per-round differences to the raw upstream (concurrency 1 only).
    added: Vec<Duration>,
    streams_per_s: f64,
    /// None for the raw upstream, which runs inside this process.
    per_cpu_s: Option<f64>,
    /// Concurrency runs only.
    machine: Option<MachineShare>,
}

impl Row {
    fn first(&self) -> Vec<Duration> {
        self.timings.iter().map(|t| t.first).collect()
    }

    fn first_ms(&self, p: f64) -> f64 {
        percentile_ms(&mut self.first(), p)
    }

    /// Added first-token time at quantile `p` over `raw` of the same run.
    fn added_ms(&self, raw: &Row, p: f64) -> f64 {
        if self.added.is_empty() {
            self.first_ms(p) - raw.first_ms(p)
        } else {
            percentile_ms(&mut self.added.clone(), p)
        }
    }

    fn print(&self, raw: &Row) {
        let mut tail: Vec<_> = self.timings.iter().map(|t| t.end.saturating_sub(t.last)).collect();
        let mut after_done: Vec<_> = self.timings.iter().map(|t| t.end.saturating_sub(t.done)).collect();
        let added = if std::ptr::eq(self, raw) {
            "- | -".to_owned()
        } else {
            format!("{:.2} | {:.2}", self.added_ms(raw, 0.5), self.added_ms(raw, 0.99))
        };
        println!(
            "| {} | {} | {} | {:.2} | {:.2} | {added} | {:.1} | {} | {:.2} / {:.2} | {:.2} |",
            self.target,
            self.conn.label(),
            self.concurrency,
            self.first_ms(0.5),
            self.first_ms(0.99),
            self.streams_per_s,
            self.per_cpu_s.map_or("-".to_owned(), |v| format!("{v:.0}")),
            percentile_ms(&mut tail, 0.5),
            percentile_ms(&mut tail, 0.99),
            percentile_ms(&mut after_done, 0.99),
        );
    }
}

fn print_header() {
    println!(
        "| path | connection | concurrency | first token p50 | first token p99 | added p50 | added p99 | streams/s | streams per server CPU-s | after last token p50 / p99 | after done line p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
}

/// The machine's CPU per stream in the concurrency runs: whatever the service leaves to
/// Postgres or the client is paid for by the same two cores.
fn print_machine_shares(rows: &[Row]) {
    println!("\nwhere the machine's CPU went at concurrency {CONCURRENCY} (CPU ms per stream)");
    println!("| path | connection | machine busy | server | Postgres | client and upstream |");
    println!("|---|---|---|---|---|---|");
    for row in rows {
        let Some(m) = &row.machine else { continue };
        println!(
            "| {} | {} | {:.0}% | {} | {:.2} | {:.2} |",
            row.target,
            row.conn.label(),
            m.busy * 100.0,
            m.server_ms.map_or("-".to_owned(), |v| format!("{v:.2}")),
            m.postgres_ms,
            m.bench_ms
        );
    }
}

/// ROUNDS streams of `target`, each after one of `raw` on the same client (the pair's
/// difference is the added time); `pid` is the server process whose CPU is counted.
async fn sequential(http: &reqwest::Client, raw: &Target, target: &Target, pid: Option<u32>, conn: Conn) -> (Row, Row) {
    let (mut raw_t, mut timings) = (vec![], vec![]);
    let cpu_before = pid.map(tree_cpu_seconds);
    for _ in 0..ROUNDS {
        raw_t.push(raw.stream(http, "ttfb").await);
        timings.push(target.stream(http, "ttfb").await);
    }
    let server_cpu = pid.zip(cpu_before).map(|(p, before)| tree_cpu_seconds(p) - before);
    sequential_rows((raw, raw_t), (target, timings), server_cpu, conn)
}

/// The rows of alternating rounds of `raw` and `target`; `server_cpu` is what the server used.
fn sequential_rows(
    (raw, raw_t): (&Target, Vec<Timing>),
    (target, timings): (&Target, Vec<Timing>),
    server_cpu: Option<f64>,
    conn: Conn,
) -> (Row, Row) {
    let added = raw_t
        .iter()
        .zip(&timings)
        .map(|(r, t)| t.first.saturating_sub(r.first))
        .collect();
    let busy = |t: &[Timing]| t.iter().map(|t| t.end).sum::<Duration>().as_secs_f64();
    let row = |target: &Target, timings: Vec<Timing>, added, per_cpu_s| Row {
        target: target.name(),
        service: target.is_service(),
        conn,
        concurrency: 1,
        streams_per_s: timings.len() as f64 / busy(&timings),
        timings,
        added,
        per_cpu_s,
        machine: None,
    };
    let per_cpu_s = server_cpu.map(|s| ROUNDS as f64 / s.max(0.01));
    (row(raw, raw_t, vec![], None), row(target, timings, added, per_cpu_s))
}

/// CONCURRENCY streams in flight for `duration`, one conversation per worker.
async fn load(http: &reqwest::Client, target: &Target, duration: Duration) -> Vec<Timing> {
    let deadline = Instant::now() + duration;
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|i| {
            let (http, target) = (http.clone(), target.clone());
            tokio::spawn(async move {
                let conversation = format!("load-{i}");
                let mut timings = vec![];
                while Instant::now() < deadline {
                    timings.push(target.stream(&http, &conversation).await);
                }
                timings
            })
        })
        .collect();
    let mut timings = vec![];
    for w in workers {
        timings.extend(w.await.expect("worker"));
    }
    timings
}

/// The counters a measured window is read from.
struct Snapshot {
    at: Instant,
    server: Option<f64>,
    machine: (u64, u64),
    postgres: f64,
    bench: f64,
}

impl Snapshot {
    /// Now, with `pid` the server process whose CPU is counted.
    fn take(pid: Option<u32>) -> Self {
        Self {
            at: Instant::now(),
            server: pid.map(tree_cpu_seconds),
            machine: machine_ticks(),
            postgres: cpu_of_named("postgres"),
            bench: cpu_seconds(std::process::id()),
        }
    }
}

/// A measured window: how long it lasted, the server's CPU seconds in it, and the machine's
/// CPU per stream.
struct Window {
    secs: f64,
    server_cpu: Option<f64>,
    share: MachineShare,
}

/// What a window of `streams` streams between two snapshots cost; `client_cpu_s` is the CPU of
/// a client outside this process.
fn window(before: &Snapshot, after: &Snapshot, streams: usize, client_cpu_s: f64) -> Window {
    let n = streams as f64;
    let server_cpu = before.server.zip(after.server).map(|(b, a)| a - b);
    let (all, idle) = (after.machine.0 - before.machine.0, after.machine.1 - before.machine.1);
    let share = MachineShare {
        busy: 1.0 - idle as f64 / all.max(1) as f64,
        server_ms: server_cpu.map(|s| s * 1000.0 / n),
        postgres_ms: (after.postgres - before.postgres) * 1000.0 / n,
        bench_ms: (after.bench - before.bench + client_cpu_s) * 1000.0 / n,
    };
    Window {
        secs: after.at.duration_since(before.at).as_secs_f64(),
        server_cpu,
        share,
    }
}

/// A concurrency row from its timings and the window they were measured in.
fn concurrency_row(
    target: &Target,
    conn: Conn,
    timings: Vec<Timing>,
    Window {
        secs,
        server_cpu,
        share,
    }: Window,
) -> Row {
    let n = timings.len() as f64;
    Row {
        target: target.name(),
        service: target.is_service(),
        conn,
        concurrency: CONCURRENCY,
        timings,
        added: vec![],
        streams_per_s: n / secs,
        per_cpu_s: server_cpu.map(|s| n / s.max(0.01)),
        machine: Some(share),
    }
}

/// CONCURRENCY streams in flight for DURATION, after LOAD_WARMUP of the same load that is not
/// counted (connections of the server's pool opened and their statements prepared, the tables
/// of a fresh database past their first statistics); `pid` is the server process whose CPU is
/// counted.
async fn concurrent(http: &reqwest::Client, target: &Target, pid: Option<u32>, conn: Conn) -> Row {
    load(http, target, LOAD_WARMUP).await;
    let before = Snapshot::take(pid);
    let timings = load(http, target, DURATION).await;
    let measured = window(&before, &Snapshot::take(pid), timings.len(), 0.0);
    concurrency_row(target, conn, timings, measured)
}

/// The same rows driven by a Python client: aiohttp with its default pool
/// (`chat_aiohttp.py`, run by the interpreter in AIOHTTP_PYTHON), as a partner's backend would
/// call the service; the issue that set the goals measured with it.
struct Aiohttp {
    python: String,
}

/// What one job of `chat_aiohttp.py` gave back.
struct AiohttpRun {
    timings: std::collections::HashMap<String, Vec<Timing>>,
    window: Window,
}

impl Aiohttp {
    fn from_env() -> Option<Self> {
        std::env::var("AIOHTTP_PYTHON").ok().map(|python| Self { python })
    }

    fn version(&self) -> String {
        let out = Command::new(&self.python)
            .args([
                "-c",
                "import aiohttp, platform; print(aiohttp.__version__, platform.python_version())",
            ])
            .output()
            .expect("run AIOHTTP_PYTHON");
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        match text.split_once(' ') {
            Some((aiohttp, python)) => format!("aiohttp {aiohttp} on Python {python}"),
            None => panic!(
                "AIOHTTP_PYTHON has no aiohttp: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    /// Runs one job (see the script), taking snapshots where it marks its measured part.
    async fn run(&self, job: Value, pid: Option<u32>) -> AiohttpRun {
        use std::io::{BufRead, Write};
        let python = self.python.clone();
        let work = move || {
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/chat_aiohttp.py");
            let mut child = Command::new(python)
                .arg(script)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start chat_aiohttp.py");
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(job.to_string().as_bytes()).expect("send the job");
            drop(stdin);
            let (mut before, mut after, mut out) = (None, None, None);
            for line in std::io::BufReader::new(child.stdout.take().expect("stdout")).lines() {
                let line = line.expect("a line");
                match line.as_str() {
                    "start" => before = Some(Snapshot::take(pid)),
                    "end" => after = Some(Snapshot::take(pid)),
                    _ => out = Some(serde_json::from_str::<Value>(&line).expect("the result")),
                }
            }
            assert!(child.wait().expect("wait").success(), "chat_aiohttp.py failed");
            let out = out.expect("a result line");
            let timings: std::collections::HashMap<String, Vec<Timing>> = out["timings"]
                .as_object()
                .expect("timings")
                .iter()
                .map(|(name, list)| {
                    let list = list.as_array().expect("a list").iter().map(timing_of).collect();
                    (name.clone(), list)
                })
                .collect();
            let streams = timings.values().map(Vec::len).sum();
            let client_cpu = out["cpu_s"].as_f64().expect("cpu_s");
            let window = window(&before.expect("start"), &after.expect("end"), streams, client_cpu);
            AiohttpRun { timings, window }
        };
        tokio::task::spawn_blocking(work).await.expect("the aiohttp job")
    }

    async fn sequential(&self, raw: &Target, target: &Target, pid: Option<u32>, conn: Conn) -> (Row, Row) {
        let job = json!({ "mode": "sequential", "targets": [raw.aiohttp_spec(), target.aiohttp_spec()],
                          "rounds": ROUNDS, "warmup": WARMUP, "tokens": TOKENS,
                          "new_connections": conn == Conn::New });
        let mut run = self.run(job, pid).await;
        let mut take = |t: &Target| run.timings.remove(t.name()).expect("the target's timings");
        let (raw_t, timings) = (take(raw), take(target));
        sequential_rows((raw, raw_t), (target, timings), run.window.server_cpu, conn)
    }

    async fn concurrent(&self, target: &Target, pid: Option<u32>, conn: Conn) -> Row {
        let job = json!({ "mode": "concurrent", "targets": [target.aiohttp_spec()], "concurrency": CONCURRENCY,
                          "warmup_s": LOAD_WARMUP.as_secs_f64(), "duration_s": DURATION.as_secs_f64(),
                          "tokens": TOKENS, "new_connections": conn == Conn::New });
        let mut run = self.run(job, pid).await;
        let timings = run.timings.remove(target.name()).expect("the target's timings");
        concurrency_row(target, conn, timings, run.window)
    }

    /// Concurrency 1 and CONCURRENCY for the raw upstream and `targets` on both kinds of
    /// connection, printed with the goals.
    async fn rows(&self, raw: &Target, targets: &[(Target, Option<u32>)]) {
        let mut rows = vec![];
        for conn in [Conn::KeptAlive, Conn::New] {
            let mut raw_rows = vec![];
            for (t, pid) in targets {
                let (raw_row, row) = self.sequential(raw, t, *pid, conn).await;
                raw_rows.push(raw_row);
                rows.push(row);
            }
            rows.push(merged(raw_rows));
            rows.push(self.concurrent(raw, None, conn).await);
            for (t, pid) in targets {
                rows.push(self.concurrent(t, *pid, conn).await);
            }
        }
        println!("\nthe same with {} (ms)", self.version());
        print_table(&rows, raw.name(), &[Conn::KeptAlive, Conn::New]);
        print_machine_shares(&rows);
        print_goals(&rows, raw.name());
    }
}

/// `[first, last, done, end]` in seconds, as `chat_aiohttp.py` writes a streamed answer.
fn timing_of(v: &Value) -> Timing {
    let at = |i: usize| Duration::from_secs_f64(v[i].as_f64().expect("seconds"));
    Timing {
        first: at(0),
        last: at(1),
        done: at(2),
        end: at(3),
    }
}

/// One raw row at concurrency 1: all its rounds, across the paths it alternated with.
fn merged(mut raw_rows: Vec<Row>) -> Row {
    let mut raw_row = raw_rows.remove(0);
    for r in raw_rows {
        raw_row.timings.extend(r.timings);
    }
    raw_row
}

/// The raw upstream's row of the same connection kind and concurrency.
fn raw_of<'a>(rows: &'a [Row], raw: &str, conn: Conn, concurrency: usize) -> &'a Row {
    rows.iter()
        .find(|r| r.target == raw && r.conn == conn && r.concurrency == concurrency)
        .expect("a raw row")
}

/// The rows by connection kind and concurrency, the raw upstream first in each group.
fn print_table(rows: &[Row], raw: &str, conns: &[Conn]) {
    print_header();
    for &conn in conns {
        for concurrency in [1, CONCURRENCY] {
            let reference = raw_of(rows, raw, conn, concurrency);
            reference.print(reference);
            for row in rows
                .iter()
                .filter(|r| r.conn == conn && r.concurrency == concurrency && !std::ptr::eq(*r, reference))
            {
                row.print(reference);
            }
        }
    }
}

/// The goals for the service's rows, each against the raw upstream of the same run.
fn print_goals(rows: &[Row], raw: &str) {
    println!("\ngoals (each against the raw upstream of the same run):");
    for row in rows.iter().filter(|r| r.service) {
        let reference = raw_of(rows, raw, row.conn, row.concurrency);
        let who = format!("{}, {}, concurrency {}", row.target, row.conn.label(), row.concurrency);
        if row.concurrency == 1 {
            let (p50, p99) = (row.added_ms(reference, 0.5), row.added_ms(reference, 0.99));
            println!(
                "  {}: {who}: added first token p50 {p50:.2} ms < 2 ms",
                verdict(p50 < 2.0)
            );
            println!(
                "  {}: {who}: added first token p99 {p99:.2} ms < 10 ms",
                verdict(p99 < 10.0)
            );
        } else {
            let (p99, limit) = (row.first_ms(0.99), 3.0 * reference.first_ms(0.99) + 10.0);
            println!(
                "  {}: {who}: first token p99 {p99:.2} ms < 3 x raw p99 + 10 ms = {limit:.2} ms",
                verdict(p99 < limit)
            );
            if row.conn == Conn::KeptAlive {
                let per_cpu = row.per_cpu_s.unwrap_or(0.0);
                println!(
                    "  {}: {who}: {per_cpu:.0} streams per server CPU-second >= 1,000",
                    verdict(per_cpu >= 1000.0)
                );
            }
        }
    }
}

/// The guard: the second chat on one hand-driven connection, per service path. Returns the
/// worst of the values (each a median over three connections, so one scheduling hiccup on a
/// busy machine does not fail the run while a stall on every connection does).
async fn keepalive_guard(base: &str, agent: (&str, &str), external: (&str, &[(&str, &str)], Value)) -> Duration {
    let (agent_path, token) = agent;
    let agent_headers = [("Svc-Auth", token)];
    let agent_body = json!({ "conversationId": "guard", "content": "benchmark" });
    let (ext_path, ext_headers, ext_body) = external;
    let mut worst = Duration::ZERO;
    for (name, path, headers, body) in [
        ("service", agent_path, &agent_headers[..], agent_body),
        ("external", ext_path, ext_headers, ext_body),
    ] {
        let body = body.to_string().into_bytes();
        let mut seconds = vec![];
        for _ in 0..3 {
            let mut conn = OneConnection::open(base).await;
            let first = conn.post_stream(path, headers, &body).await;
            let second = conn.post_stream(path, headers, &body).await;
            println!(
                "keep-alive guard, {name}: headers -> first line {:.2} ms on a connection's first chat, {:.2} ms on its second",
                first.as_secs_f64() * 1000.0,
                second.as_secs_f64() * 1000.0
            );
            seconds.push(second);
        }
        seconds.sort();
        worst = worst.max(seconds[1]);
    }
    worst
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}

/// The service, started on a fresh database with `extra` variables, with an admin token, a
/// model on the scripted `upstream`, an agent on it and an app for the external API.
struct Prepared {
    service: Server,
    token: String,
    agent_id: i64,
    app_id: String,
    app_token: String,
}

async fn prepare(
    http: &reqwest::Client,
    storage: &std::path::Path,
    upstream: &str,
    model: &str,
    extra: &[(&str, &str)],
) -> Prepared {
    // Counted as in production, but the load comes from one user and one app far above the defaults.
    let mut env = vec![
        ("RATE_LIMIT_USER_REQUESTS", "1000000"),
        ("RATE_LIMIT_APP_REQUESTS", "1000000"),
    ];
    env.extend_from_slice(extra);
    let (service, _) = start_service(http, storage, &env).await;
    let api = format!("{}/api", service.base);
    let login = json_post(
        http,
        &format!("{api}/user/login"),
        None,
        json!({ "username": "admin", "password": ADMIN_PASSWORD }),
    )
    .await;
    let token = login["data"]["token"].as_str().expect("token").to_owned();
    let provider = json_post(
        http,
        &format!("{api}/ai-model/provider"),
        Some(&token),
        json!({ "providerName": "Bench", "providerKey": "bench" }),
    )
    .await;
    let config = json_post(
        http,
        &format!("{api}/ai-model/config"),
        Some(&token),
        json!({
        "providerId": provider["data"], "modelName": "bench", "modelKey": model, "modelType": "CHAT",
        "apiKey": GOOD_KEY, "apiEndpoint": upstream }),
    )
    .await;
    let agent = json_post(
        http,
        &format!("{api}/agent"),
        Some(&token),
        json!({ "name": "Bench", "chatModelId": config["data"] }),
    )
    .await;
    let agent_id = agent["data"].as_i64().expect("agent id");
    // An agent bound to no app is open to every app (docs/external.md).
    let app = json_post(
        http,
        &format!("{api}/app"),
        Some(&token),
        json!({ "appId": "bench", "appName": "bench app" }),
    )
    .await;
    let app_id = app["data"]["appId"].as_str().expect("appId").to_owned();
    let app_token = app["data"]["token"].as_str().expect("app token").to_owned();
    Prepared {
        service,
        token,
        agent_id,
        app_id,
        app_token,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    shared::telemetry::install_crypto_provider();
    let dir = tempfile::tempdir().expect("temp dir");
    let upstream = ModelServer::start().await;
    let model = format!("chat-bench-{TOKENS}");
    let http = Conn::KeptAlive.client();

    let Prepared {
        service,
        token,
        agent_id,
        app_id,
        app_token,
    } = prepare(&http, dir.path(), &upstream.base_url, &model, &[]).await;
    let api = format!("{}/api", service.base);

    let agent_path = format!("/api/agent/{agent_id}/chat");
    let ext_path = "/api/openapi/v1/agent/chat";
    let guard = keepalive_guard(
        &service.base,
        (&agent_path, &token),
        (
            ext_path,
            &[("Svc-App-Id", &app_id), ("Svc-Token", &app_token)],
            json!({ "agentId": agent_id, "openId": OPEN_ID, "conversationId": "guard", "content": "benchmark" }),
        ),
    )
    .await;
    let guard_ok = guard <= GUARD_LIMIT;
    println!(
        "keep-alive guard: second chat on one connection waits {:.2} ms between headers and first line (limit {} ms): {}\n",
        guard.as_secs_f64() * 1000.0,
        GUARD_LIMIT.as_millis(),
        verdict(guard_ok)
    );
    if !guard_ok {
        drop(service);
        std::process::exit(1);
    }

    let openai_body =
        json!({ "model": model, "stream": true, "messages": [{ "role": "user", "content": "benchmark" }] });
    let raw = Target::Raw {
        url: format!("{}/chat/completions", upstream.base_url),
        body: openai_body.clone(),
    };
    // CHAT_BENCH_ONLY=tracing: only what tracing costs (three servers of its own).
    if std::env::var("CHAT_BENCH_ONLY").as_deref() == Ok("tracing") {
        drop(service);
        tracing_cost(&http, &raw, dir.path(), &upstream.base_url, &model).await;
        return;
    }
    let service_pid = service.child.id();
    // CHAT_BENCH_ONLY=concurrency: the kept-alive concurrency rows of the raw upstream and the
    // two service paths, for a quick look at the tail (a minute instead of ten).
    let only = std::env::var("CHAT_BENCH_ONLY").ok();
    let quick = only.as_deref() == Some("concurrency");
    let litellm = match quick {
        true => None,
        false => start_litellm(&http, &upstream.base_url, &model, dir.path()).await,
    };
    let mut targets = vec![
        (
            Target::Service {
                url: format!("{api}/agent/{agent_id}/chat"),
                token,
            },
            Some(service_pid),
        ),
        (
            Target::External {
                url: format!("{}{ext_path}", service.base),
                app_id,
                app_token,
                agent_id,
            },
            Some(service_pid),
        ),
    ];
    if let Some(l) = &litellm {
        let target = Target::Litellm {
            url: format!("{}/v1/chat/completions", l.base),
            body: openai_body,
        };
        targets.push((target, Some(l.child.id())));
    }

    // CHAT_BENCH_ONLY=aiohttp: only the rows driven by aiohttp.
    if only.as_deref() == Some("aiohttp") {
        let aiohttp = Aiohttp::from_env().expect("AIOHTTP_PYTHON must be set");
        aiohttp.rows(&raw, &targets).await;
        return;
    }
    let mut rows = vec![];
    if quick {
        let http = Conn::KeptAlive.client();
        for _ in 0..WARMUP {
            for (t, _) in &targets {
                t.stream(&http, "ttfb").await;
            }
        }
        print_header();
        let reference = concurrent(&http, &raw, None, Conn::KeptAlive).await;
        reference.print(&reference);
        rows.push(reference);
        for (t, pid) in &targets {
            let row = concurrent(&http, t, *pid, Conn::KeptAlive).await;
            row.print(&rows[0]);
            rows.push(row);
        }
        print_machine_shares(&rows);
        return;
    }
    for conn in [Conn::KeptAlive, Conn::New] {
        let http = conn.client();
        for _ in 0..WARMUP {
            raw.stream(&http, "ttfb").await;
            for (t, _) in &targets {
                t.stream(&http, "ttfb").await;
            }
        }
        let mut raw_rows = vec![];
        for (t, pid) in &targets {
            let (raw_row, row) = sequential(&http, &raw, t, *pid, conn).await;
            raw_rows.push(raw_row);
            rows.push(row);
        }
        rows.push(merged(raw_rows));
        rows.push(concurrent(&http, &raw, None, conn).await);
        for (t, pid) in &targets {
            rows.push(concurrent(&http, t, *pid, conn).await);
        }
    }

    println!(
        "agent chat: {TOKENS}-token answers, zero upstream delay; concurrency 1 = {ROUNDS} streams per path, \
         concurrency {CONCURRENCY} = {}s per path (ms)",
        DURATION.as_secs()
    );
    print_table(&rows, raw.name(), &[Conn::KeptAlive, Conn::New]);
    if litellm.is_none() {
        println!("(LITELLM_BIN unset: LiteLLM not measured)");
    }
    print_machine_shares(&rows);
    print_goals(&rows, raw.name());
    match Aiohttp::from_env() {
        Some(aiohttp) => aiohttp.rows(&raw, &targets).await,
        None => println!("\n(AIOHTTP_PYTHON unset: the rows with aiohttp not measured)"),
    }

    // The other servers would share the two cores with the next part.
    drop(litellm);
    drop(service);
    tracing_cost(&http, &raw, dir.path(), &upstream.base_url, &model).await;
}

/// A collector that takes OTLP/HTTP exports and answers at once, counting what it got: the
/// service's own cost of tracing is measured, not a trace store's.
struct OtlpSink {
    url: String,
    bytes: Arc<AtomicUsize>,
}

impl OtlpSink {
    async fn start() -> Self {
        let bytes = Arc::new(AtomicUsize::new(0));
        let counted = bytes.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                counted.fetch_add(body.len(), Ordering::Relaxed);
                async {
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the sink");
        let url = format!("http://{}", listener.local_addr().expect("sink address"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, bytes }
    }
}

/// Rounds of the concurrency part per tracing mode, interleaved: one 10 s run per mode moved
/// by up to 8% from run to run on the 2-core machine, more than the difference looked for, and
/// the rounds of one mode spread by up to 11% in a run of three; the median of five holds
/// better against one slow minute of the machine.
const COST_ROUNDS: usize = 5;

/// What tracing costs the agent chat: three services started side by side on fresh databases,
/// traces off (no endpoint), on (every trace exported to `OtlpSink`), and sampled at 10%
/// (`parentbased_traceidratio`); kept-alive connections. Concurrency 1 once per mode against
/// the raw upstream; concurrency CONCURRENCY in COST_ROUNDS rounds that take the modes in
/// turn (off, on, 10%, off, ...), so a slower minute of the machine hits every mode; the
/// median round of each mode is shown.
async fn tracing_cost(http: &reqwest::Client, raw: &Target, storage: &std::path::Path, upstream: &str, model: &str) {
    let sink = OtlpSink::start().await;
    let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", sink.url.as_str());
    let sampled = [
        endpoint,
        ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0.1"),
    ];
    let modes: [(&str, &[(&str, &str)]); 3] = [("off", &[]), ("on", &[endpoint]), ("sampled 10%", &sampled)];
    let mut services = vec![];
    for (label, env) in modes {
        let p = prepare(http, storage, upstream, model, env).await;
        let target = Target::Service {
            url: format!("{}/api/agent/{}/chat", p.service.base, p.agent_id),
            token: p.token.clone(),
        };
        for _ in 0..WARMUP {
            raw.stream(http, "ttfb").await;
            target.stream(http, "ttfb").await;
        }
        services.push((label, p, target));
    }
    let mut alone = vec![];
    for (_, p, target) in &services {
        alone.push(sequential(http, raw, target, Some(p.service.child.id()), Conn::KeptAlive).await);
    }
    let mut rounds: Vec<Vec<Row>> = services.iter().map(|_| vec![]).collect();
    for _ in 0..COST_ROUNDS {
        for (i, (_, p, target)) in services.iter().enumerate() {
            rounds[i].push(concurrent(http, target, Some(p.service.child.id()), Conn::KeptAlive).await);
        }
    }
    println!(
        "\ntracing cost: service `/agent/{{id}}/chat`, kept-alive, {TOKENS}-token answers; concurrency 1 = {ROUNDS} streams, \
         concurrency {CONCURRENCY} = median of {COST_ROUNDS} interleaved {}s rounds (ms)",
        DURATION.as_secs()
    );
    println!(
        "| traces | c=1 first token p50 | c=1 first token p99 | c=1 added p50 | c={CONCURRENCY} first token p50 | c={CONCURRENCY} first token p99 | c={CONCURRENCY} streams/s | streams per server CPU-s (each round) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut per_cpu = vec![];
    for (((label, _, _), (raw_row, one)), mut runs) in services.iter().zip(&alone).zip(rounds) {
        runs.sort_by(|a, b| a.per_cpu_s.partial_cmp(&b.per_cpu_s).expect("numbers"));
        let each: Vec<String> = runs
            .iter()
            .map(|r| format!("{:.0}", r.per_cpu_s.unwrap_or(0.0)))
            .collect();
        let median = &runs[runs.len() / 2];
        println!(
            "| {label} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.0} ({}) |",
            one.first_ms(0.5),
            one.first_ms(0.99),
            one.added_ms(raw_row, 0.5),
            median.first_ms(0.5),
            median.first_ms(0.99),
            median.streams_per_s,
            median.per_cpu_s.unwrap_or(0.0),
            each.join(", "),
        );
        per_cpu.push(median.per_cpu_s.unwrap_or(0.0));
    }
    println!(
        "  spans exported while measuring: {:.0} KB of OTLP protobuf",
        sink.bytes.load(Ordering::Relaxed) as f64 / 1024.0
    );
    for (i, label) in [(1, "on"), (2, "sampled 10%")] {
        let kept = per_cpu[i] / per_cpu[0];
        println!(
            "  {}: traces {label}: {:.0}% of the streams per server CPU-second with traces off (at least 90%)",
            verdict(kept >= 0.9),
            kept * 100.0
        );
    }
}
