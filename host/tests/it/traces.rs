//! OpenTelemetry traces through real nodes into an OTLP receiver the test
//! starts: a forwarded append is one trace across two nodes, continuing the
//! caller's `traceparent`; the other spans the nodes make are there too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use chitin::api::proto;
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;

use crate::support::cluster::*;

/// One received span: the node that sent it and its ids.
#[derive(Clone, Debug)]
struct Received {
    node: String,
    name: String,
    trace: String,
    id: String,
    parent: String,
    attributes: HashMap<String, String>,
}

/// An OTLP/gRPC trace receiver keeping every span it is sent.
#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<Received>>>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let text = |v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>| match v.as_ref().and_then(|v| v.value.as_ref())
        {
            Some(Value::StringValue(s)) => s.clone(),
            Some(Value::BoolValue(b)) => b.to_string(),
            Some(Value::IntValue(i)) => i.to_string(),
            other => format!("{other:?}"),
        };
        let mut kept = self.0.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            let node = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.instance.id")
                .map(|a| text(&a.value))
                .unwrap_or_default();
            for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                kept.push(Received {
                    node: node.clone(),
                    name: span.name,
                    trace: hex(&span.trace_id),
                    id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    attributes: span.attributes.iter().map(|a| (a.key.clone(), text(&a.value))).collect(),
                });
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Receiver {
    /// Listens on a free loopback port; its address.
    async fn start(&self) -> Result<String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let service = TraceServiceServer::new(self.clone());
        tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming).await;
        });
        Ok(format!("http://{addr}"))
    }

    fn spans(&self) -> Vec<Received> {
        self.0.lock().unwrap().clone()
    }

    /// Waits until `done` holds of the spans received (the nodes export in
    /// batches, every five seconds).
    async fn wait_for(&self, what: &str, done: impl Fn(&[Received]) -> bool) -> Result<Vec<Received>> {
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let spans = self.spans();
            if done(&spans) {
                return Ok(spans);
            }
            if Instant::now() > deadline {
                let names: Vec<String> = spans.iter().map(|s| format!("{} {} {}", s.node, s.name, s.trace)).collect();
                bail!("{what}: not received within 40 s; received:\n{}", names.join("\n"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forwarded_append_is_one_trace_across_two_nodes_continuing_the_callers() -> Result<()> {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await?;
    let mut c = Cluster::new(Dialect::Postgres, 2, 8, 2, move |_, s| s.tracing.otlp_endpoint = Some(endpoint.clone())).await?;
    c.wait_settled(Duration::from_secs(60)).await?;

    // Appends through node-01, each in a trace of the caller's, until one
    // lands on a shard node-02 holds: node-01 forwarded it.
    let mut journal = c.nodes[0].journal().await?;
    let caller_span = "00f067aa0ba902b7";
    let mut forwarded = None;
    for i in 0..64u32 {
        let trace = format!("4bf92f3577b34da6a3ce929d{i:08x}");
        let mut request = tonic::Request::new(proto::AppendRequest {
            stream: format!("traced-{i}"),
            request_id: format!("t-{i}"),
            payload: b"x".to_vec(),
            forwarded: false,
        });
        request.metadata_mut().insert("traceparent", format!("00-{trace}-{caller_span}-01").parse()?);
        if journal.append(request).await?.into_inner().holder == "node-02" {
            forwarded = Some(trace);
            break;
        }
    }
    let Some(trace) = forwarded else { bail!("no append of 64 landed on node-02: {:?}", c.status().await?) };

    // The chain, waited for whole (the spans of one node can straddle two
    // export batches): node-01's call continues the caller's span, its
    // append and forward are inside it; node-02's call continues that
    // forward (its context carried in the request) and holds the append.
    // (A forward the holder bounced would add spans beside the chain.)
    let chain = |all: &[Received]| -> Option<[Received; 5]> {
        let t: Vec<&Received> = all.iter().filter(|s| s.trace == trace).collect();
        let child = |node: &str, name: &str, parent: &str| -> Vec<Received> {
            t.iter().filter(|s| s.node == node && s.name.ends_with(name) && s.parent == parent).map(|s| (*s).clone()).collect()
        };
        for call in child("node-01", "Journal/Append", caller_span) {
            for append in child("node-01", "append", &call.id) {
                for forward in child("node-01", "forward", &append.id) {
                    for remote_call in child("node-02", "Journal/Append", &forward.id) {
                        if let Some(remote_append) = child("node-02", "append", &remote_call.id).pop() {
                            return Some([call, append, forward, remote_call, remote_append]);
                        }
                    }
                }
            }
        }
        None
    };
    let spans = receiver
        .wait_for(&format!("caller → node-01 call → append → forward → node-02 call → append (trace {trace})"), |all| {
            chain(all).is_some()
        })
        .await?;
    let [_, append, _, _, remote_append] = chain(&spans).expect("waited for");
    assert_eq!(append.attributes.get("forwarded").map(String::as_str), Some("false"), "{append:?}");
    assert_eq!(remote_append.attributes.get("forwarded").map(String::as_str), Some("true"), "{remote_append:?}");

    // The Rust client (feature `otel`) sends the context current in the
    // calling task: the node's call continues it.
    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    let (app_trace, app_span) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let caller = opentelemetry::trace::SpanContext::new(
        opentelemetry::trace::TraceId::from_hex(app_trace)?,
        opentelemetry::trace::SpanId::from_hex(app_span)?,
        opentelemetry::trace::TraceFlags::SAMPLED,
        true,
        Default::default(),
    );
    let cx = opentelemetry::Context::new().with_remote_span_context(caller);
    let client = chitin_client::Client::builder(chitin_client::Nodes::new([c.nodes[0].api.as_str()])?).build()?;
    let outcome = client.append("traced-by-the-client", b"x").with_context(cx).await?;
    assert!(matches!(outcome, chitin_client::AppendOutcome::Applied(_)), "{outcome:?}");
    let spans = receiver
        .wait_for("the client's call in the application's trace", |all| {
            all.iter().any(|s| s.trace == app_trace && s.name.ends_with("Journal/Append") && s.parent == app_span)
        })
        .await?;
    assert!(spans.iter().any(|s| s.trace == app_trace && s.name == "append"), "the append joined the trace too");

    // The nodes' own work is traced too: rounds, takeovers, policy calls in
    // a round's trace (the call runs on a blocking thread, its span still
    // the round's child).
    let spans = receiver
        .wait_for("rounds, takeovers and policy calls", |all| {
            let rounds: Vec<&Received> = all.iter().filter(|s| s.name == "lease_round").collect();
            all.iter().any(|s| s.name == "takeover")
                && all.iter().any(|s| s.name == "policy_call" && rounds.iter().any(|r| r.trace == s.trace))
        })
        .await?;
    let policy = spans.iter().find(|s| s.name == "policy_call").expect("waited for");
    assert!(policy.attributes.contains_key("slot"), "{policy:?}");
    c.teardown().await
}
