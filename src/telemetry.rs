//! Structured logs with `tracing`: human-readable by default, JSON with `LOG_FORMAT=json`; and,
//! when a collector is named (`OTEL_EXPORTER_OTLP_ENDPOINT`), the same spans exported as
//! OpenTelemetry traces over OTLP/HTTP.
//!
//! The spans: `http` for each request (method, route, `x-request-id`) and `run` for each turn
//! of a run (run id, engine, node), linked to the span of the request that queued it. The run
//! transition log line carries the trace id, so a run's log lines lead to its traces.

use std::io::IsTerminal;
use std::sync::OnceLock;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::config::{Config, ConfigError, LogFormat, OtlpProtocol, TraceExport};

/// The trace exporter, kept to flush it at exit.
static TRACES: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Changes the log filter while the service runs (`PUT /v1/management/system/settings`).
static FILTER: OnceLock<(
    tracing_subscriber::reload::Handle<EnvFilter, tracing_subscriber::Registry>,
    std::sync::Mutex<String>,
)> = OnceLock::new();

/// The log filter in force.
pub fn log_filter() -> String {
    FILTER
        .get()
        .map(|(_, text)| text.lock().expect("filter lock").clone())
        .unwrap_or_default()
}

/// Puts `filter` in force until the service stops (its `LOG_LEVEL` stands at the next start).
pub fn set_log_filter(filter: &str) -> Result<(), String> {
    let parsed = EnvFilter::try_new(filter).map_err(|e| e.to_string())?;
    let (handle, text) = FILTER.get().ok_or("logging is not set up")?;
    handle.reload(parsed).map_err(|e| e.to_string())?;
    *text.lock().expect("filter lock") = filter.to_owned();
    Ok(())
}

/// Installs the global subscriber (logs go to stderr and the [`crate::log_book`]; traces to the
/// collector when one is named). Fails on an unparsable filter or an exporter that cannot be
/// built.
pub fn init(config: &Config) -> Result<(), ConfigError> {
    let filter = EnvFilter::try_new(&config.log_filter).map_err(|e| {
        ConfigError::new(
            "LOG_LEVEL",
            format!("'{}' is not a log level or filter: {e}", config.log_filter),
        )
    })?;
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match config.log_format {
        LogFormat::Json => logs.json().flatten_event(true).boxed(),
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).boxed(),
    };
    let traces = match &config.traces {
        Some(export) => Some(tracer(export, &config.node_id)?),
        None => None,
    };
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(logs)
        .with(crate::log_book::BookLayer)
        .with(traces)
        .try_init();
    // A second init (tests in one process) keeps the first subscriber.
    if installed.is_ok() {
        let _ = FILTER.set((handle, std::sync::Mutex::new(config.log_filter.clone())));
    }
    Ok(())
}

/// Sends the spans not yet exported; called once the service stopped.
pub fn flush() {
    if let Some(provider) = TRACES.get()
        && let Err(e) = provider.shutdown()
    {
        eprintln!("skill-runner: the last traces were not exported: {e}");
    }
}

fn tracer<S>(
    export: &TraceExport,
    node_id: &str,
) -> Result<impl tracing_subscriber::Layer<S>, ConfigError>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    // The exporter's HTTP client needs the process-wide crypto provider (a second install is a
    // no-op).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let protocol = match export.protocol {
        OtlpProtocol::HttpProtobuf => Protocol::HttpBinary,
        OtlpProtocol::HttpJson => Protocol::HttpJson,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(&export.url)
        .with_protocol(protocol)
        .build()
        .map_err(|e| {
            ConfigError::new(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("cannot export traces to {}: {e}", export.url),
            )
        })?;
    let batches = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(export.delay)
                .build(),
        )
        .build();
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(export.service_name.clone())
        .with_attributes([
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("service.instance.id", node_id.to_owned()),
        ])
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(batches)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("skill-runner");
    let _ = TRACES.set(provider);
    Ok(tracing_opentelemetry::layer().with_tracer(tracer))
}
