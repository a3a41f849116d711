//! Logs and traces.
//!
//! Logs go to stderr ([`init_logging`]). A node's process sets them up
//! after reading its settings ([`init_node`]), so that when they name an
//! OTLP collector (`[tracing] otlp_endpoint`) the same subscriber also sends
//! OpenTelemetry spans there. (The exporting layer is there from the start:
//! `tracing-opentelemetry` finds a span's context by downcasting the
//! subscriber, which a layer swapped in later through `reload` would hide.)
//!
//! The spans are those made with [`trace_span!`] (target [`TARGET`]): a gRPC
//! call ([`traced_call`], the parent taken from the caller's W3C
//! `traceparent`), an append, a forward (whose request carries the
//! forward's own context, [`inject`], so the holder's spans join the trace),
//! a lease round, a handoff, a takeover and a policy call. They go to the
//! exporter only, never to the log, so logs read as they always have.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

use crate::settings::TracingSettings;

/// The target of every span meant for the exporter.
pub const TARGET: &str = "chitin::trace";

/// A span for the exporter: `trace_span!("append", stream = %s)`.
macro_rules! trace_span {
    ($name:literal $(, $($fields:tt)*)?) => {
        tracing::info_span!(target: $crate::telemetry::TARGET, $name $(, $($fields)*)?)
    };
}
pub(crate) use trace_span;

type Exporting = tracing_opentelemetry::OpenTelemetryLayer<Registry, opentelemetry_sdk::trace::Tracer>;

/// Set while spans are exported: until then none is made.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are being exported.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`), as JSON lines
/// when `json`; every line passes the redaction, so no URL password or
/// token reaches a log.
pub fn init_logging(json: bool) {
    install(json, None);
}

/// A node's logs, and its traces when `settings` name a collector;
/// `instance` is the node's name (`service.instance.id`). Must run inside
/// the runtime (the exporter's channel lives there).
pub fn init_node(json: bool, settings: &TracingSettings, instance: &str) -> Result<Option<Tracing>, TracingError> {
    let Some(endpoint) = &settings.otlp_endpoint else {
        install(json, None);
        return Ok(None);
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .with_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| TracingError::Exporter { endpoint: endpoint.clone(), reason: e.to_string() })?;
    let resource = Resource::builder()
        .with_service_name(settings.service_name.clone())
        .with_attribute(opentelemetry::KeyValue::new("service.instance.id", instance.to_owned()))
        .with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(settings.sample_ratio))))
        .build();
    install(json, Some(tracing_opentelemetry::layer().with_tracer(provider.tracer("chitin"))));
    ENABLED.store(true, Ordering::Relaxed);
    tracing::info!(%endpoint, ratio = settings.sample_ratio, "sending traces");
    Ok(Some(Tracing { provider }))
}

/// Installs the process's subscriber: the log, and the exporting layer
/// when there is one, each seeing only its own (the log never shows the
/// spans of [`TARGET`], the exporter sees nothing else). Both filters are
/// static per callsite, so a disabled log line or span costs one check.
fn install(json: bool, exporting: Option<Exporting>) {
    let log_filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info".into())
        .add_directive(format!("{TARGET}=off").parse().expect("a valid directive"));
    let log = tracing_subscriber::fmt::layer().with_writer(crate::security::redact::RedactingStderr);
    let log = if json { log.json().boxed() } else { log.boxed() };
    let exporting = exporting.map(|layer| layer.with_filter(Targets::new().with_target(TARGET, tracing::Level::INFO)));
    let _ = tracing_subscriber::registry().with(exporting).with(log.with_filter(log_filter)).try_init();
}

/// Why traces cannot be sent.
#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    #[error("cannot set up the OTLP exporter for `tracing.otlp_endpoint` = {endpoint}: {reason}")]
    Exporter { endpoint: String, reason: String },
}

/// Spans being exported; [`Tracing::shutdown`] sends what is buffered.
pub struct Tracing {
    provider: SdkTracerProvider,
}

impl Tracing {
    /// Stops exporting after sending the spans still buffered (up to the
    /// exporter's timeout).
    pub fn shutdown(self) {
        ENABLED.store(false, Ordering::Relaxed);
        if let Err(e) = self.provider.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(error = %e, "traces not all sent at shutdown");
        }
    }
}

/// Puts the current span's context on an outgoing call as `traceparent`
/// (W3C trace context), so the callee's spans join this trace.
pub fn inject(metadata: &mut tonic::metadata::MetadataMap) {
    if enabled() {
        TraceContextPropagator::new()
            .inject_context(&tracing::Span::current().context(), &mut chitin_client::MetadataInjector(metadata));
    }
}

/// Runs a gRPC call in a `grpc` span whose parent is the caller's
/// `traceparent`, if it sent one. (After authentication: a refused caller
/// costs no span.)
pub async fn traced_call(req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    if !enabled() {
        return next.run(req).await;
    }
    let parent = TraceContextPropagator::new().extract(&Incoming(req.headers()));
    let span = trace_span!("grpc", otel.name = %req.uri().path(), otel.kind = "server", rpc.system = "grpc");
    let _ = span.set_parent(parent);
    next.run(req).instrument(span).await
}

/// A request's headers as the propagator reads them.
struct Incoming<'a>(&'a axum::http::HeaderMap);

impl Extractor for Incoming<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}
