//! Logs and traces. Logs go to stderr (human or JSON, filtered by `PGVS3_LOG`). Traces are
//! exported over OTLP/HTTP only when `OTEL_EXPORTER_OTLP_ENDPOINT` (or the traces-only
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; the exporter reads the other standard `OTEL_*`
//! variables itself (`OTEL_EXPORTER_OTLP_PROTOCOL` = `http/protobuf` or `http/json`, headers,
//! timeout, `OTEL_BSP_*` batching, `OTEL_SERVICE_NAME`).
//!
//! Every request of every protocol runs in one span made by [`request_span`]: a W3C
//! `traceparent` sent by the client becomes its parent, and the store's database spans nest
//! beneath it.

use std::io::IsTerminal as _;
use std::sync::OnceLock;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// How logs are written (`--log-format`).
#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

/// Set when traces are exported: only then is a client's `traceparent` worth parsing.
static PROPAGATOR: OnceLock<TraceContextPropagator> = OnceLock::new();

/// Keeps the trace exporter alive; [`Telemetry::shutdown`] flushes what is still buffered.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// Installs the global subscriber. Must run inside the Tokio runtime (the exporter uses it).
pub fn init(format: LogFormat) -> Telemetry {
    let filter = tracing_subscriber::EnvFilter::try_new(log_directives(std::env::var("PGVS3_LOG").ok()))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(log_directives(None)));
    let mut logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    // Colours only for a terminal (a terminal still honours NO_COLOR): escape codes are noise in
    // a file or a log collector, and styling every span field costs each request's span.
    if !std::io::stderr().is_terminal() {
        logs = logs.with_ansi(false);
    }
    let logs = match format {
        LogFormat::Human => logs.boxed(),
        LogFormat::Json => logs.json().boxed(),
    };
    let (provider, setup_error) = match exporter_configured().then(tracer_provider) {
        Some(Ok(provider)) => (Some(provider), None),
        Some(Err(err)) => (None, Some(err)),
        None => (None, None),
    };
    let traces = provider.as_ref().map(|provider| {
        let _ = PROPAGATOR.set(TraceContextPropagator::new());
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("pgvs3"))
            .with_filter(tracing_subscriber::filter::filter_fn(|metadata| {
                let target = metadata.target();
                // The exporter's own HTTP client must not trace itself into a feedback loop, and
                // s3s's spans (signature checks) would only bury the request's own.
                !(target.starts_with("opentelemetry")
                    || target.starts_with("hyper")
                    || (target.starts_with("s3s") && metadata.is_span()))
            }))
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(logs)
        .with(traces)
        .init();
    if let Some(err) = setup_error {
        tracing::error!(error = %err, "OTLP trace export is configured but could not start; traces are off");
    }
    Telemetry { provider }
}

/// The log filter: `PGVS3_LOG` (default `info`), with s3s's own events off unless it names
/// them. s3s logs every failed request at ERROR, client faults included (twice for a refused
/// one), and a malformed XML body whole: anyone could fill the log. The gateway logs server
/// faults itself, at error level, where it maps them (`s3/errors.rs`).
fn log_directives(configured: Option<String>) -> String {
    let configured = configured.filter(|text| !text.trim().is_empty());
    match configured {
        Some(text) if text.contains("s3s") => text,
        Some(text) => format!("{text},s3s=off"),
        None => "info,s3s=off".to_owned(),
    }
}

fn exporter_configured() -> bool {
    ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
}

fn tracer_provider() -> anyhow::Result<SdkTracerProvider> {
    use opentelemetry_otlp::WithExportConfig as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol()?)
        .build()?;
    // Exports run on Tokio: the HTTP client (hyper) needs its reactor.
    let processor = opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
        exporter,
        opentelemetry_sdk::runtime::Tokio,
    )
    .build();
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("pgvs3");
    }
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource.build())
        .build())
}

/// The OTLP encoding asked for; protobuf unless told otherwise, as the specification says.
fn protocol() -> anyhow::Result<opentelemetry_otlp::Protocol> {
    let asked = ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|value| !value.is_empty()));
    match asked.as_deref() {
        None | Some("http/protobuf") => Ok(opentelemetry_otlp::Protocol::HttpBinary),
        Some("http/json") => Ok(opentelemetry_otlp::Protocol::HttpJson),
        Some(other) => anyhow::bail!(
            "OTLP protocol {other:?} is not supported: use http/protobuf or http/json (the collector's port 4318)"
        ),
    }
}

impl Telemetry {
    /// Exports the spans still buffered; call once, on the way out.
    pub async fn shutdown(self) {
        if let Some(provider) = self.provider {
            // Shutdown blocks until the export task has flushed, and that task needs a worker.
            let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
            if let Ok(Err(err)) = flushed {
                eprintln!("pgvs3: flushing traces: {err}");
            }
        }
    }
}

/// A request span with the given leading fields, then the ones every request records. Each use
/// is a call site of its own, because a span's field set is fixed where it is declared.
macro_rules! request_span_with {
    ($protocol:expr $(, $($leading:tt)+)?) => {
        tracing::info_span!(
            "request",
            $($($leading)+,)?
            protocol = $protocol,
            operation = tracing::field::Empty,
            bucket = tracing::field::Empty,
            bytes_in = tracing::field::Empty,
            bytes_out = tracing::field::Empty,
            status = tracing::field::Empty,
        )
    };
}

/// The span one request of `protocol` runs in. The protocol front fills in `operation`,
/// `bucket`, `bytes_in`, `bytes_out` and `status` as it learns them (see [`finish`]).
pub fn request_span(protocol: &'static str, headers: Option<&http::HeaderMap>) -> Span {
    let Some(propagator) = PROPAGATOR.get() else {
        // No traces: the `otel.*` fields would only be formatted into every request's log
        // context and never read.
        return request_span_with!(protocol);
    };
    let span = request_span_with!(
        protocol,
        otel.name = protocol,
        otel.kind = "server",
        otel.status_code = tracing::field::Empty
    );
    if let Some(headers) = headers {
        let parent = propagator.extract(&opentelemetry_http::HeaderExtractor(headers));
        // Fails only for a span no subscriber records; then there is nothing to parent.
        let _ = span.set_parent(parent);
    }
    span
}

/// Names the request's span after its operation (`S3 GetObject`, `RESP SET`, ...).
pub fn name_operation(span: &Span, protocol_title: &str, operation: &str) {
    span.record("operation", operation);
    rename(span, protocol_title, operation);
}

/// The OpenTelemetry span's name, when traces are exported.
fn rename(span: &Span, protocol_title: &str, operation: &str) {
    if PROPAGATOR.get().is_some() {
        // The layer fixes a span's name once it has started; the OpenTelemetry span itself
        // can still be renamed.
        span.context()
            .span()
            .update_name(format!("{protocol_title} {operation}"));
    }
}

/// Records the outcome; `failed` marks the span as an error (a server-side failure, not a
/// client's mistake).
pub fn finish(span: &Span, status: &str, failed: bool) {
    span.record("status", status);
    if failed {
        span.record("otel.status_code", "ERROR");
    }
}

/// Everything a request's span learns once its answer's head is known.
pub struct Answer<'a> {
    pub operation: &'a str,
    pub bucket: Option<&'a str>,
    pub bytes_in: Option<u64>,
    pub bytes_out: Option<u64>,
    pub status: &'a str,
    /// A server-side failure (the span is marked as an error), not a client's mistake.
    pub failed: bool,
}

/// [`name_operation`] and [`finish`] with the request's bucket and byte counts, in one call to
/// the subscriber: each `record` is a dispatch of its own through the filter and the log layer
/// (five per S3 request were ~1.6% of the gateway's CPU per 4 KiB GET, docs/benchmarks.md).
pub fn answered(span: &Span, protocol_title: &str, answer: &Answer<'_>) {
    tracing::record_all!(
        span,
        operation = answer.operation,
        bucket = answer.bucket,
        bytes_in = answer.bytes_in,
        bytes_out = answer.bytes_out,
        status = answer.status,
    );
    rename(span, protocol_title, answer.operation);
    if answer.failed {
        span.record("otel.status_code", "ERROR");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::log_directives;

    /// Log lines, as the human format writes them, into memory.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn an_answer_recorded_at_once_shows_in_the_requests_log_context() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let span = super::request_span("s3", None);
            let answer = super::Answer {
                operation: "GetObject",
                bucket: Some("photos"),
                bytes_in: None,
                bytes_out: Some(4096),
                status: "200",
                failed: false,
            };
            super::answered(&span, "S3", &answer);
            span.in_scope(|| tracing::info!("answered"));
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains(
                r#"request{protocol="s3" operation="GetObject" bucket="photos" bytes_out=4096 status="200"}"#
            ),
            "{text}"
        );
        // A field the answer does not know stays out of the line.
        assert!(!text.contains("bytes_in"), "{text}");
    }

    #[test]
    fn s3s_events_are_off_unless_the_filter_names_them() {
        assert_eq!(log_directives(None), "info,s3s=off");
        assert_eq!(log_directives(Some(" ".into())), "info,s3s=off");
        assert_eq!(log_directives(Some("debug".into())), "debug,s3s=off");
        assert_eq!(log_directives(Some("info,s3s=debug".into())), "info,s3s=debug");
        assert!(tracing_subscriber::EnvFilter::try_new(log_directives(Some("warn".into()))).is_ok());
    }
}
