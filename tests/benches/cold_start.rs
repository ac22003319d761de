//! Per function binary: stripped size, zipped size (the Lambda deployment package: one
//! `bootstrap` file, deflated), and init time: process start to its first request for an event
//! at the Lambda Runtime API (config, database pool, migrations check, clients), median and max
//! of several starts, with traces off and on (an OTLP endpoint set). The functions are configured
//! as deployed: S3 for storage and SQS for the queues, whose clients are built at start (nothing
//! is sent to them before a request).
//!
//! Run with `make bench` (bench-local profile: optimised and stripped like release, without LTO).

use std::io::Write;
use std::time::Duration;

use api_tests::lambda_emulator::{binary, function_env, Emulator};
use api_tests::{spawn, Store};

const STARTS: usize = 7;

fn zipped_size(bytes: &[u8]) -> usize {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut out);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .unix_permissions(0o755);
    zip.start_file("bootstrap", options).expect("zip entry");
    zip.write_all(bytes).expect("zip data");
    zip.finish().expect("zip finish");
    out.into_inner().len()
}

fn functions() -> Vec<String> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../functions");
    let mut names: Vec<String> = std::fs::read_dir(root)
        .expect("functions directory")
        .filter_map(|e| {
            let manifest = std::fs::read_to_string(e.ok()?.path().join("Cargo.toml")).ok()?;
            let bin = manifest.split("[[bin]]").nth(1)?;
            bin.lines()
                .find_map(|l| l.trim().strip_prefix("name = ").map(|n| n.trim_matches('"').to_owned()))
        })
        .collect();
    names.sort();
    names
}

fn mb(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Median and max init of `STARTS` starts of `path` with `env`.
async fn inits(path: &std::path::Path, env: &[(String, String)]) -> (f64, f64) {
    let mut inits: Vec<Duration> = Vec::with_capacity(STARTS);
    for _ in 0..STARTS {
        let f = Emulator::start(path.to_path_buf(), env).await;
        inits.push(f.init_time().await);
    }
    inits.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(inits[STARTS / 2]), ms(inits[STARTS - 1]))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let app = spawn(Store::Filesystem).await;
    let deployed = [
        ("STORAGE_BACKEND", "s3"),
        ("S3_BUCKET", "agent-platform-bench"),
        ("QUEUE_BACKEND", "sqs"),
        (
            "SQS_INGEST_QUEUE_URL",
            "https://sqs.us-east-1.amazonaws.com/000000000000/ingest",
        ),
        (
            "SQS_MEMORY_QUEUE_URL",
            "https://sqs.us-east-1.amazonaws.com/000000000000/memory",
        ),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "bench"),
        ("AWS_SECRET_ACCESS_KEY", "bench"),
    ];
    let mut env = function_env(&app);
    env.retain(|(key, _)| !deployed.iter().any(|(k, _)| k == key));
    env.extend(deployed.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    // Traces on: the exporter is built at start; nothing listens there, and nothing is sent
    // before the first request.
    let mut traced = env.clone();
    traced.push(("OTEL_EXPORTER_OTLP_ENDPOINT".into(), "http://127.0.0.1:4318".into()));
    println!("| function | binary (MB) | zipped (MB) | init median (ms) | init max (ms) | init median, traces on (ms) | init max, traces on (ms) |");
    println!("|---|---|---|---|---|---|---|");
    for name in functions() {
        let path = binary(&name);
        let bytes = std::fs::read(&path).expect("read binary");
        let (median, max) = inits(&path, &env).await;
        let (traced_median, traced_max) = inits(&path, &traced).await;
        println!(
            "| {name} | {:.1} | {:.1} | {median:.1} | {max:.1} | {traced_median:.1} | {traced_max:.1} |",
            mb(bytes.len()),
            mb(zipped_size(&bytes)),
        );
    }
}
