//! The caller's OpenTelemetry context on every call (feature `otel`): the
//! global propagator writes it into the call's metadata, so a node the
//! application calls continues the application's trace. With the W3C
//! propagator (`TraceContextPropagator`, what OpenTelemetry SDKs install)
//! that is `traceparent` and `tracestate`; without one set, nothing is sent.

use opentelemetry::propagation::Injector;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};

/// Writes the context current in this task into `metadata`.
pub(crate) fn inject(metadata: &mut MetadataMap) {
    let cx = opentelemetry::Context::current();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut Outgoing(metadata)));
}

/// A call's metadata as an OpenTelemetry propagator writes it (keys and
/// values that are no valid metadata are left out).
pub struct Outgoing<'a>(pub &'a mut MetadataMap);

impl Injector for Outgoing<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (MetadataKey::from_bytes(key.as_bytes()), MetadataValue::try_from(value)) {
            self.0.insert(k, v);
        }
    }
}
