//! Logging and tracing set-up. Logs: JSON lines by default (CloudWatch), human-readable with
//! LOG_FORMAT=pretty. Traces: exported over OTLP (HTTP/protobuf) when the standard variables
//! name an endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! with `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_TRACES_SAMPLER[_ARG]`); without one nothing is built and nothing is exported.

use std::sync::OnceLock;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithHttpConfig as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

static TRACES: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The filter when RUST_LOG says nothing: the service at info, sqlx's statement logs only when
/// slow or failing.
const DEFAULT_FILTER: &str = "info,sqlx=warn";

/// RUST_LOG (or the default), with MCP's library held to errors unless RUST_LOG names it: at
/// info it logs every notification a tenant's MCP server sends, tool payloads included. The
/// Lambda runtime is held to info the same way: at trace it logs every event whole, the
/// callers' tokens and passwords among them. Named means a directive for that very target: one
/// for a module of it (`lambda_runtime::runtime=info`) leaves the others to the default level.
fn filter(rust_log: Option<String>) -> EnvFilter {
    let spec = rust_log
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_FILTER.to_owned());
    let names = |target: &str| {
        spec.split(',')
            .any(|directive| directive.split(['=', '[']).next().is_some_and(|t| t.trim() == target))
    };
    let spec = match (names("rmcp"), names("lambda_runtime")) {
        (true, true) => spec,
        (true, false) => format!("{spec},lambda_runtime=info"),
        (false, true) => format!("{spec},rmcp=error"),
        (false, false) => format!("{spec},rmcp=error,lambda_runtime=info"),
    };
    EnvFilter::try_new(&spec).unwrap_or_else(|_| EnvFilter::new(format!("{DEFAULT_FILTER},rmcp=error")))
}

/// JSON lines, each with the fields of every span it was logged in (`spans`, outermost first),
/// the request's `request_id` and `trace_id` among them: with the innermost span's alone, a
/// line logged inside a child span (a store's, a tool's, a recall's failure) could not be found
/// by the id a user reports.
fn json_lines<S, W>(writer: W) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .with_target(false)
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(true)
        .with_writer(writer)
}

/// Installs the global subscriber; later calls are ignored (tests build many apps).
pub fn init() {
    let filter = filter(std::env::var("RUST_LOG").ok());
    let pretty = std::env::var("LOG_FORMAT").map(|v| v == "pretty").unwrap_or(false);
    let logs = if pretty {
        tracing_subscriber::fmt::layer().with_target(false).boxed()
    } else {
        json_lines(std::io::stdout).boxed()
    };
    let traces = exporter().map(|provider| {
        let tracer = provider.tracer("agent-platform");
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        let _ = TRACES.set(provider);
        // Thread names and busy/idle times cost per span and say nothing to the reader.
        // Context activation would attach an OpenTelemetry context at every poll of every
        // instrumented future (a streamed chat's task is polled once per token); nothing here
        // reads the active context: propagation takes it from the tracing span itself.
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_context_activation(false)
            // The service's own spans whatever RUST_LOG says (a quieter log must not cut the
            // traces), and none of its libraries' (connection and session internals).
            .with_filter(Targets::new().with_target("shared", Level::INFO))
    });
    let installed = tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(traces)
        .try_init();
    if installed.is_ok() {
        log_panics();
    }
}

/// Makes a panic a log line of the span it happened in (a streamed answer's task, a queued
/// message), with the request's id: the default hook writes plain text to standard error,
/// outside the JSON lines, so a stream cut by a panic in its task left no line to find it by.
/// The default hook still runs after (a test's failure message, a backtrace when asked).
fn log_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("a panic without a message");
        let location = info.location().map(|l| format!("{}:{}", l.file(), l.line()));
        tracing::error!(panic = message, location, "panicked");
        default(info);
    }));
}

/// The OTLP exporter the environment asks for, if any.
fn exporter() -> Option<SdkTracerProvider> {
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    let endpoint = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
        .iter()
        .find_map(|key| std::env::var(key).ok().filter(|v| !v.trim().is_empty()))
        .filter(|_| !disabled)?;
    let mut builder = opentelemetry_otlp::SpanExporter::builder().with_http();
    if let Some(client) = plain_http_client(&endpoint) {
        builder = builder.with_http_client(client);
    }
    match builder.build() {
        Ok(exporter) => Some(
            SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(
                    opentelemetry_sdk::Resource::builder()
                        .with_attributes(lambda_attributes())
                        .build(),
                )
                .build(),
        ),
        Err(e) => {
            eprintln!("traces are not exported: the OTLP exporter could not be built: {e}");
            None
        }
    }
}

/// For a collector on plain HTTP (the ADOT layer on localhost, a sidecar), an exporter client
/// without TLS: the library's default client loads the system's certificate store when it is
/// built, about 4 ms of every cold start for nothing. None for https: the default then.
fn plain_http_client(endpoint: &str) -> Option<reqwest13::blocking::Client> {
    if !endpoint.trim().starts_with("http://") {
        return None;
    }
    // The exporter's own default, overridable the standard way (milliseconds).
    let timeout_ms = ["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"]
        .iter()
        .find_map(|key| std::env::var(key).ok()?.trim().parse().ok())
        .unwrap_or(10_000);
    // Built on a thread of its own, as the library does: the blocking client starts a runtime.
    std::thread::spawn(move || {
        reqwest13::blocking::Client::builder()
            .timeout(std::time::Duration::from_millis(timeout_ms))
            .tls_certs_only([])
            .build()
    })
    .join()
    .ok()?
    .ok()
}

/// Which function, version and region a Lambda process serves (none elsewhere), so one
/// stack's traces tell its functions apart.
fn lambda_attributes() -> Vec<opentelemetry::KeyValue> {
    use opentelemetry::KeyValue;
    let Ok(name) = std::env::var("AWS_LAMBDA_FUNCTION_NAME") else {
        return vec![];
    };
    let mut attributes = vec![
        KeyValue::new("cloud.provider", "aws"),
        KeyValue::new("cloud.platform", "aws_lambda"),
        KeyValue::new("faas.name", name),
    ];
    for (key, var) in [
        ("faas.version", "AWS_LAMBDA_FUNCTION_VERSION"),
        ("cloud.region", "AWS_REGION"),
    ] {
        if let Ok(value) = std::env::var(var) {
            attributes.push(KeyValue::new(key, value));
        }
    }
    attributes
}

/// Whether spans are exported.
pub fn tracing_enabled() -> bool {
    TRACES.get().is_some()
}

/// Whether model-call spans carry the prompt and answer text
/// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, the variable OpenTelemetry's GenAI
/// instrumentations read). Off by default: prompts hold what users wrote.
pub fn capture_content() -> bool {
    static CAPTURE: OnceLock<bool> = OnceLock::new();
    *CAPTURE.get_or_init(|| {
        tracing_enabled()
            && std::env::var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
                .is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"))
    })
}

/// Continues the trace an incoming W3C `traceparent` names (none: a new trace), and puts its
/// trace id on `span` so every log line of the request carries it.
pub fn continue_trace(span: &tracing::Span, headers: &http::HeaderMap) {
    continue_from(span, &opentelemetry_http::HeaderExtractor(headers));
}

/// `continue_trace` for a queued message, from the `traceparent` its sender attached.
pub fn continue_message_trace(span: &tracing::Span, traceparent: Option<&str>) {
    let carrier: std::collections::HashMap<String, String> = traceparent
        .map(|v| (TRACEPARENT.to_owned(), v.to_owned()))
        .into_iter()
        .collect();
    continue_from(span, &carrier);
}

fn continue_from(span: &tracing::Span, carrier: &dyn opentelemetry::propagation::Extractor) {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    if !tracing_enabled() {
        return;
    }
    let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(carrier));
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
    let trace_id = span.context().span().span_context().trace_id();
    span.record("trace_id", tracing::field::display(trace_id));
}

/// The id of the request being served (its `x-request-id`), kept on its span for the work it
/// hands on: a queued message carries it, so a worker's log lines name the request that queued
/// the work, with traces off too.
struct RequestId(String);

/// Keeps `id` on `span`, the request's, for `request_id`.
pub fn keep_request_id(span: &tracing::Span, id: &str) {
    use tracing_subscriber::registry::LookupSpan as _;
    span.with_subscriber(|(span_id, dispatch)| {
        let registry = dispatch.downcast_ref::<tracing_subscriber::Registry>();
        if let Some(span) = registry.and_then(|r| r.span(span_id)) {
            span.extensions_mut().insert(RequestId(id.to_owned()));
        }
    });
}

/// The id of the request the current span is part of; None outside one, and when its span is
/// not recorded (logging below INFO).
pub fn request_id() -> Option<String> {
    use tracing_subscriber::registry::LookupSpan as _;
    tracing::Span::current()
        .with_subscriber(|(span_id, dispatch)| {
            let registry = dispatch.downcast_ref::<tracing_subscriber::Registry>()?;
            registry
                .span(span_id)?
                .scope()
                .find_map(|span| span.extensions().get::<RequestId>().map(|id| id.0.clone()))
        })
        .flatten()
}

/// The W3C header (and SQS message attribute, and MCP `_meta` key) that carries a trace.
pub const TRACEPARENT: &str = "traceparent";

/// Adds the current span's `traceparent` to an outgoing request, so the server called (a model
/// endpoint, an MCP server, a client node) continues the same trace.
pub fn inject(headers: &mut http::HeaderMap) {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    if !tracing_enabled() {
        return;
    }
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&context, &mut opentelemetry_http::HeaderInjector(headers))
    });
}

/// The current span's W3C `traceparent`, for what is not an HTTP header: a queued message's
/// attribute, an MCP request's `_meta`, a gRPC call's metadata. None when traces are off.
pub fn traceparent() -> Option<String> {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    if !tracing_enabled() {
        return None;
    }
    let context = tracing::Span::current().context();
    let mut carrier = std::collections::HashMap::new();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&context, &mut carrier));
    carrier.remove(TRACEPARENT)
}

/// The longest an invocation waits for its spans to be sent. The exporter's own wait is 5 s,
/// a worker's whole margin for its answer and a quarter of API Gateway's limit: a slow
/// collector made a finished batch time out (and be redone), or a response a 504.
const FLUSH_AT_MOST: std::time::Duration = std::time::Duration::from_secs(2);

/// Sends the spans ended so far; a Lambda function calls it before an invocation returns,
/// since its process may be frozen right after. Spans a slow collector has not taken within
/// `FLUSH_AT_MOST` are given up on (and said so in the log).
pub async fn flush() {
    if let Some(provider) = TRACES.get().cloned() {
        let sent = tokio::task::spawn_blocking(move || provider.force_flush());
        if tokio::time::timeout(FLUSH_AT_MOST, sent).await.is_err() {
            tracing::warn!(
                waited_ms = FLUSH_AT_MOST.as_millis() as u64,
                "the trace collector did not take this invocation's spans in time; they may be lost"
            );
        }
    }
}

/// Installs the process-wide rustls crypto provider. Two providers get linked (AWS SDK and
/// sqlx) and rustls refuses to guess between them.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// Log lines written to memory, for tests that read what was logged.
#[cfg(test)]
#[derive(Clone, Default)]
pub(crate) struct CapturedLines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

#[cfg(test)]
impl CapturedLines {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Used by the HTTP layer's tests only.
    #[cfg(feature = "http")]
    pub(crate) fn clear(&self) {
        self.0.lock().unwrap().clear();
    }

    /// Plain log lines written here, on this thread, until the guard is dropped.
    #[cfg(feature = "http")]
    pub(crate) fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }
}

#[cfg(test)]
impl std::io::Write for CapturedLines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{filter, json_lines, CapturedLines};
    use tracing_subscriber::layer::SubscriberExt;

    /// The one JSON line `run` logs.
    fn logged(run: impl FnOnce()) -> serde_json::Value {
        let lines = CapturedLines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::registry().with(json_lines(move || writer.clone()));
        tracing::subscriber::with_default(subscriber, run);
        serde_json::from_str(lines.text().trim()).unwrap()
    }

    #[test]
    fn a_line_logged_in_a_child_span_carries_the_request_id() {
        let line = logged(|| {
            let request = tracing::info_span!("request", request_id = "abc-123");
            let _request = request.enter();
            let child = tracing::info_span!("knowledge_retrieval", rag.id = 7);
            let _child = child.enter();
            tracing::warn!("knowledge base store failed");
        });
        assert_eq!(line["spans"][0]["request_id"], "abc-123", "{line}");
        assert_eq!(line["spans"][1]["rag.id"], 7, "{line}");
    }

    #[test]
    fn a_panic_is_a_line_of_its_request() {
        super::log_panics();
        let line = logged(|| {
            let request = tracing::info_span!("request", request_id = "abc-123");
            let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _request = request.enter();
                panic!("index {} out of bounds", 7);
            }));
            assert!(unwound.is_err());
        });
        assert_eq!(line["message"], "panicked", "{line}");
        assert_eq!(line["panic"], "index 7 out of bounds", "{line}");
        assert!(line["location"].as_str().unwrap().contains("telemetry.rs"), "{line}");
        assert_eq!(line["spans"][0]["request_id"], "abc-123", "{line}");
    }

    #[test]
    fn the_mcp_library_logs_only_errors_unless_named() {
        for rust_log in [
            None,
            Some(""),
            Some("info"),
            Some("debug,sqlx=warn"),
            Some("debug,rmcp::transport::worker=warn"),
        ] {
            let f = filter(rust_log.map(str::to_owned)).to_string();
            assert!(f.contains("rmcp=error"), "{rust_log:?}: {f}");
        }
        let named = filter(Some("info,rmcp=debug".to_owned())).to_string();
        assert!(named.contains("rmcp=debug") && !named.contains("rmcp=error"), "{named}");
    }

    #[test]
    fn the_lambda_runtime_logs_no_events_unless_named() {
        for rust_log in [
            "trace",
            "trace,lambda_runtime::runtime=info",
            "trace,lambda_runtime_api_client=warn",
        ] {
            let f = filter(Some(rust_log.to_owned())).to_string();
            assert!(f.contains("lambda_runtime=info"), "{rust_log}: {f}");
        }
        let named = filter(Some("info,lambda_runtime=trace".to_owned())).to_string();
        assert!(!named.contains("lambda_runtime=info"), "{named}");
    }
}
