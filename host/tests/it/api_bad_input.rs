//! Bad input sweep: every gRPC method of `proto/chitin.proto` (Journal,
//! Ownership, Admin, Coordination) and every HTTP path of the metrics
//! listener gets the malformed requests that apply to it, against real
//! `chitin node` processes:
//!
//! - `node-01`: cluster mode on a fresh PostgreSQL database and a fresh Redis
//!   namespace `chitin-test-<uuid>` (so Coordination is live), seeded with a
//!   config, `[metrics] auth_token` and `[api] admin_token` set (its Admin
//!   calls carry the token with `chitin::rollout::exec::BearerAuth`);
//! - `node-02`: cluster mode, UNPROVISIONED (Bootstrap's own checks, and every
//!   other method refused until it has a config);
//! - a standalone node (no Redis: Coordination and Bootstrap refused).
//!
//! Variants: empty or missing required fields, oversized stream, request id,
//! payload and whole messages (the limits of `chitin::node::journal` and the
//! per-service decoding limits), out-of-range numbers, unknown application,
//! deployment and instance ids, invalid JSON and invalid configs, a config
//! that is not newer, Bootstrap of a provisioned node, undecodable protobuf
//! (wrong wire types, invalid UTF-8, truncated), unknown methods, and on HTTP
//! a missing or wrong bearer token, an unknown path, a wrong method and a
//! request that is not HTTP.
//!
//! The admin token: every Admin method of node-01 (Status, Bootstrap,
//! UpdateConfig, GetConfig, ReloadPolicies, Drain, UpgradeStatus,
//! FinalizeUpgrade) is called without a token,
//! with a wrong one, with `Bearer ` and an empty token, with the token but no
//! `Bearer ` prefix, with another scheme, with the token plus a byte and with
//! the metrics token; each must be UNAUTHENTICATED with the message that says
//! which (missing or wrong). The UpdateConfig sent is a valid newer config
//! and the Drain a real drain, so a call let through would show in the
//! snapshot. An undecodable Admin request without the token is refused as
//! UNAUTHENTICATED too (the token is checked before the body is decoded).
//! The Admin service of a node without `[api] admin_token` (node-02, the
//! standalone node) needs none and ignores a stray one.
//!
//! Every plane's token: node-01 also has `[api] client_token` (Journal,
//! Ownership, Coordination) and `[cluster] peer_token` (Peer, and the
//! client plane too, for forwards). Every method of every service is sent
//! an undecodable request without a token, with a wrong one, and with each
//! of the admin, client and peer tokens: a token its plane does not take is
//! UNAUTHENTICATED with the plane's message, one it takes gets through to
//! the decoder (INVALID_ARGUMENT `malformed request`), so no handler runs
//! either way. `forwarded = true` needs the peer token: with the client
//! token it is PERMISSION_DENIED, before the request is validated.
//!
//! Bounded answers: names with a NUL byte are refused before the database,
//! and a Read of three 1 MiB entries stops at its byte budget after two,
//! saying so and where to continue.
//!
//! Each case asserts the exact status code and a substring of the message
//! that says what was wrong; lookups of an unknown id that are documented to
//! answer empty (not an error) are asserted as such. Before and after the
//! sweep the test snapshots (with the admin token) what the requests could
//! have changed — Status, GetConfig, a journal stream, held leases, affinity
//! and deployment lists, the commit counter, every Redis key of the
//! namespace, the unprovisioned node's data dir — and requires it unchanged.
//! The cases run one at a time, are table-driven, and no assertion depends on
//! timing.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use crate::support::cluster::*;
use crate::support::coord::TestNs;
use anyhow::{Context, Result, bail};
use chitin::api::grpc::MAX_MESSAGE_BYTES;
use chitin::api::proto::{
    self, admin_client::AdminClient, coordination_client::CoordinationClient, journal_client::JournalClient,
    ownership_client::OwnershipClient, peer_client::PeerClient,
};
use chitin::coord::Keys;
use chitin::node::journal::{MAX_PAYLOAD, MAX_REQUEST_ID, MAX_STREAM};
use chitin::rollout::exec::{Admin, BearerAuth};
use chitin::security::Plane;
use prost::bytes::{Buf, BufMut};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// node-01's `[metrics] auth_token`.
const TOKEN: &str = "sweep-token";
/// node-01's `[api] admin_token`.
const ADMIN_TOKEN: &str = "sweep-admin-token";
/// The Admin service's answer to a call without `authorization: Bearer …`.
const NEEDS_TOKEN: &str = "the admin plane needs `authorization: Bearer <[api] admin_token>`; set CHITIN_ADMIN_TOKEN";
/// The Admin service's answer to a call with another bearer token.
const WRONG_TOKEN: &str = "wrong admin token; set CHITIN_ADMIN_TOKEN to the node's [api] admin_token";
/// node-01's `[api] client_token`.
const CLIENT_TOKEN: &str = "sweep-client-token";
/// node-01's `[cluster] peer_token`.
const PEER_TOKEN: &str = "sweep-peer-token";
/// The answer to `forwarded = true` from a client.
const NOT_A_PEER: &str = "`forwarded = true` is for node-to-node calls and needs `authorization: Bearer <[cluster] peer_token>`";
/// The Admin service's decoding limit (`api::grpc::router`).
const ADMIN_MAX: usize = 64 << 20;
/// tonic's default decoding limit (Ownership, Coordination).
const DEFAULT_MAX: usize = 4 << 20;

type Call = Pin<Box<dyn Future<Output = Result<String, Status>> + Send>>;

/// One malformed request and the answer it must get.
struct Case {
    name: String,
    call: Call,
    expect: Expect,
}

enum Expect {
    /// Refused with this code and a message containing this text.
    Refused(Code, String),
    /// Documented to succeed (an unknown id looked up): the answer, rendered
    /// with `{:?}`, contains this text.
    Answers(String),
}

/// `client.rpc(request)` as a boxed call whose success renders the answer.
macro_rules! rpc {
    ($client:expr, $method:ident, $request:expr) => {{
        let mut client = $client.clone();
        let request = $request;
        Box::pin(async move { client.$method(request).await.map(|r| format!("{:?}", r.into_inner())) }) as Call
    }};
}

fn refused(name: impl Into<String>, call: Call, code: Code, says: impl Into<String>) -> Case {
    Case { name: name.into(), call, expect: Expect::Refused(code, says.into()) }
}

fn answers(name: impl Into<String>, call: Call, says: impl Into<String>) -> Case {
    Case { name: name.into(), call, expect: Expect::Answers(says.into()) }
}

/// Whether `text` contains each ` … `-separated part of `says`, in order.
fn says_all(text: &str, says: &str) -> bool {
    let mut rest = text;
    for part in says.split(" … ") {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// Runs every case in order; returns one line per case that got another answer.
async fn sweep(cases: Vec<Case>) -> Vec<String> {
    let mut wrong = Vec::new();
    for case in cases {
        let got = case.call.await;
        let ok = match (&case.expect, &got) {
            (Expect::Refused(code, says), Err(s)) => s.code() == *code && says_all(s.message(), says),
            (Expect::Answers(says), Ok(answer)) => says_all(answer, says),
            _ => false,
        };
        if !ok {
            let expected = match &case.expect {
                Expect::Refused(code, says) => format!("{code:?} containing {says:?}"),
                Expect::Answers(says) => format!("an answer containing {says:?}"),
            };
            let got = match got {
                Ok(a) => format!("Ok({})", a.chars().take(300).collect::<String>()),
                Err(s) => format!("{:?}: {:?}", s.code(), s.message().chars().take(300).collect::<String>()),
            };
            wrong.push(format!("{}: expected {expected}, got {got}", case.name));
        }
    }
    wrong
}

// ---------------------------------------------------------------- raw gRPC

/// Sends bytes as they are (not a protobuf message of the method's type).
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let mut out = vec![0; buf.remaining()];
        buf.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}

/// `bytes` as the request of `path`; `streaming` for a server-streaming
/// method; `authorization` as that metadata, when given.
fn raw(channel: &Channel, path: &str, bytes: Vec<u8>, streaming: bool, authorization: Option<String>) -> Call {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    let path = PathAndQuery::try_from(path.to_string()).expect("a path");
    Box::pin(async move {
        grpc.ready().await.map_err(|e| Status::unavailable(e.to_string()))?;
        let mut request = tonic::Request::new(bytes);
        // A caller of this release: the protocol layer lets it through to
        // the plane's guard and the decoder, which the sweep is about.
        chitin::upgrade::wire::stamp(request.metadata_mut());
        if let Some(value) = authorization {
            request.metadata_mut().insert("authorization", value.parse().expect("an ASCII header value"));
        }
        if streaming {
            grpc.server_streaming(request, path, RawCodec).await.map(|_| "a stream".to_string())
        } else {
            grpc.unary(request, path, RawCodec).await.map(|r| format!("{:?}", r.into_inner()))
        }
    })
}

/// The first field of a method's request message.
#[derive(Clone, Copy, PartialEq)]
enum First {
    /// A string (field 1).
    Str,
    /// A bool (field 1), then a string (field 2): DeploymentListRequest.
    BoolThenStr,
    /// No fields.
    Nothing,
}

/// Every method: path, its request's first field, server streaming.
const METHODS: &[(&str, First, bool)] = &[
    ("/chitin.v1.Journal/Append", First::Str, false),
    ("/chitin.v1.Journal/Read", First::Str, false),
    ("/chitin.v1.Ownership/Route", First::Str, false),
    ("/chitin.v1.Ownership/Held", First::Nothing, false),
    ("/chitin.v1.Ownership/WatchOwnership", First::Nothing, true),
    ("/chitin.v1.Ownership/Acknowledge", First::BoolThenStr, false),
    ("/chitin.v1.Admin/Status", First::Nothing, false),
    ("/chitin.v1.Admin/Bootstrap", First::Str, false),
    ("/chitin.v1.Admin/UpdateConfig", First::Str, false),
    ("/chitin.v1.Admin/GetConfig", First::Nothing, false),
    ("/chitin.v1.Admin/ReloadPolicies", First::Nothing, false),
    ("/chitin.v1.Admin/Drain", First::Nothing, false),
    ("/chitin.v1.Admin/UpgradeStatus", First::Nothing, false),
    ("/chitin.v1.Admin/FinalizeUpgrade", First::Str, false),
    ("/chitin.v1.Admin/Load", First::Str, false),
    ("/chitin.v1.Coordination/Dispatch", First::Str, false),
    ("/chitin.v1.Coordination/AffinityOwner", First::Str, false),
    ("/chitin.v1.Coordination/AffinityList", First::Str, false),
    ("/chitin.v1.Coordination/AffinityRelease", First::Str, false),
    ("/chitin.v1.Coordination/Instances", First::Nothing, false),
    ("/chitin.v1.Coordination/CleanupStale", First::Nothing, false),
    ("/chitin.v1.Coordination/DeploymentStart", First::Str, false),
    ("/chitin.v1.Coordination/DeploymentUpdate", First::Str, false),
    ("/chitin.v1.Coordination/DeploymentFinish", First::Str, false),
    ("/chitin.v1.Coordination/DeploymentShow", First::Str, false),
    ("/chitin.v1.Coordination/DeploymentList", First::BoolThenStr, false),
    ("/chitin.v1.Peer/Notice", First::Str, false),
    ("/chitin.v1.Peer/NodeDown", First::Str, false),
];

/// A node's tokens, by plane.
#[derive(Clone, Copy, Default)]
struct Tokens<'a> {
    admin: Option<&'a str>,
    client: Option<&'a str>,
    peer: Option<&'a str>,
}

/// The plane of a method path.
fn plane(path: &str) -> Plane {
    if path.starts_with("/chitin.v1.Admin/") {
        Plane::Admin
    } else if path.starts_with("/chitin.v1.Peer/") {
        Plane::Peer
    } else {
        Plane::Client
    }
}

impl Tokens<'_> {
    /// The `authorization` a call of `path` carries to be let through.
    fn authorization(&self, path: &str) -> Option<String> {
        let token = match plane(path) {
            Plane::Admin => self.admin,
            Plane::Client => self.client,
            Plane::Peer => self.peer,
        };
        token.map(|t| format!("Bearer {t}"))
    }
}

/// Every method with every token of `tokens` (and none, and a wrong one):
/// the tokens its plane takes reach the decoder, the others are refused.
fn token_cases(channel: &Channel, node: &str, tokens: Tokens<'_>) -> Vec<Case> {
    let mut cases = Vec::new();
    for &(path, _, streaming) in METHODS {
        let plane = plane(path);
        let offered = [
            ("without a token", None, false),
            ("with a wrong token", Some("not-a-token-of-this-cluster"), false),
            ("with the admin token", tokens.admin, plane == Plane::Admin),
            ("with the client token", tokens.client, plane == Plane::Client),
            // Forwards arrive on the client plane with the peer token.
            ("with the peer token", tokens.peer, plane != Plane::Admin),
        ];
        for (how, token, taken) in offered {
            let token = match (how, token) {
                ("without a token", _) => None,
                (_, Some(t)) => Some(t),
                (_, None) => continue,
            };
            let call = raw(channel, path, vec![0x0f], streaming, token.map(|t| format!("Bearer {t}")));
            let name = format!("{node} {path} {how}");
            cases.push(match (taken, token) {
                (true, _) => refused(name, call, Code::InvalidArgument, "malformed request: failed to decode Protobuf message"),
                (false, None) => refused(name, call, Code::Unauthenticated, plane.missing()),
                (false, Some(_)) => refused(name, call, Code::Unauthenticated, plane.wrong()),
            });
        }
    }
    cases
}

/// Undecodable requests for every method: truncated, an invalid wire type,
/// and where the message has fields a wrong type and invalid UTF-8. Each
/// call carries its plane's token when the node has one. A standalone
/// node's Peer plane is closed before anything is decoded.
fn undecodable_cases(channel: &Channel, node: &str, tokens: Tokens<'_>, standalone: bool) -> Vec<Case> {
    let mut cases = Vec::new();
    for &(path, first, streaming) in METHODS {
        let closed = standalone && plane(path) == Plane::Peer;
        let auth = tokens.authorization(path);
        let mut bodies: Vec<(&str, Vec<u8>)> = vec![
            // Field 1, 5 bytes long, 1 byte sent.
            ("truncated", vec![0x0a, 0x05, b'a']),
            // Field 1 with wire type 7, which does not exist.
            ("invalid wire type", vec![0x0f]),
        ];
        match first {
            First::Str => {
                bodies.push(("a number where a string is", vec![0x08, 0x01]));
                bodies.push(("invalid UTF-8 in a string", vec![0x0a, 0x02, 0xff, 0xfe]));
            }
            First::BoolThenStr => {
                bodies.push(("a string where a bool is", vec![0x0a, 0x01, b'a']));
                bodies.push(("invalid UTF-8 in a string", vec![0x12, 0x02, 0xff, 0xfe]));
            }
            First::Nothing => {}
        }
        for (what, body) in bodies {
            let (code, says) = match closed {
                true => (Code::PermissionDenied, "its Peer plane is closed"),
                false => (Code::InvalidArgument, "malformed request: failed to decode Protobuf message"),
            };
            cases.push(refused(format!("{node} {path}: {what}"), raw(channel, path, body, streaming, auth.clone()), code, says));
        }
    }
    // Authentication runs before methods are looked up, so an unknown
    // method, of a known service or not, carries the client plane's token;
    // the health service is open.
    for path in ["/chitin.v1.Journal/Delete", "/chitin.v1.Nope/Append", "/grpc.health.v1.Health/Nope"] {
        let auth = tokens.authorization(path);
        cases.push(refused(
            format!("{node} {path}: unknown method"),
            raw(channel, path, Vec::new(), false, auth),
            Code::Unimplemented,
            format!("no gRPC method `{path}`"),
        ));
    }
    if tokens.client.is_some() {
        let path = "/chitin.v1.Journal/Delete";
        cases.push(refused(
            format!("{node} {path}: unknown method, without a token"),
            raw(channel, path, Vec::new(), false, None),
            Code::Unauthenticated,
            Plane::Client.missing(),
        ));
    }
    cases
}

// ---------------------------------------------------------------- HTTP

/// One HTTP/1.0 exchange with raw request text; (status, body).
async fn http_raw(addr: &str, request: String) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr)).await??;
    s.write_all(request.as_bytes()).await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await??;
    let out = String::from_utf8_lossy(&out).into_owned();
    let code = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).context("no status line")?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((code, body))
}

fn http(method: &str, path: &str, authorization: Option<&str>) -> String {
    let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    format!("{method} {path} HTTP/1.0\r\nHost: chitin\r\nContent-Length: 0\r\n{auth}\r\n")
}

/// `Authorization: Basic` of `user:password`.
fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

/// (name, request text, status, body substring).
fn http_cases() -> Vec<(&'static str, String, u16, &'static str)> {
    let bearer = |t: &str| format!("Bearer {t}");
    let right = bearer(TOKEN);
    let wrong = bearer("not-the-token");
    let longer = bearer(&format!("{TOKEN}x"));
    vec![
        ("GET /health without a token", http("GET", "/health", None), 401, "missing `Authorization: Bearer"),
        ("GET /health, wrong token", http("GET", "/health", Some(&wrong)), 401, "wrong bearer token"),
        ("GET /health, the token plus a byte", http("GET", "/health", Some(&longer)), 401, "wrong bearer token"),
        // (A header value's trailing space is not part of it: this is `Bearer`.)
        ("GET /health, empty bearer token", http("GET", "/health", Some("Bearer ")), 401, "missing `Authorization: Bearer"),
        (
            "GET /health, Basic auth",
            http("GET", "/health", Some("Basic c3dlZXA6dG9rZW4=")),
            401,
            "missing `Authorization: Bearer",
        ),
        ("GET /health, the token without `Bearer`", http("GET", "/health", Some(TOKEN)), 401, "missing `Authorization: Bearer"),
        ("GET /metrics without a token", http("GET", "/metrics", None), 401, "missing `Authorization: Bearer"),
        ("GET /metrics, wrong token", http("GET", "/metrics", Some(&wrong)), 401, "wrong bearer token"),
        ("POST /health", http("POST", "/health", Some(&right)), 405, "method POST is not allowed on `/health`; use GET"),
        ("DELETE /metrics", http("DELETE", "/metrics", Some(&right)), 405, "method DELETE is not allowed on `/metrics`"),
        ("PUT /readyz", http("PUT", "/readyz", None), 405, "method PUT is not allowed on `/readyz`"),
        ("GET /nope", http("GET", "/nope", Some(&right)), 404, "no such path `/nope`; this listener serves GET /health"),
        ("GET /health/extra", http("GET", "/health/extra", Some(&right)), 404, "no such path `/health/extra`"),
        ("POST /nope", http("POST", "/nope", None), 404, "no such path `/nope`"),
        // hyper answers before any route: the status alone says it.
        ("not HTTP at all", "HELLO\r\n\r\n".to_string(), 400, ""),
        // Controls: the right token and the open probe pass.
        ("GET /health, right token", http("GET", "/health", Some(&right)), 200, "\"status\":\"healthy\""),
        ("GET /readyz without a token", http("GET", "/readyz", None), 200, "ready"),
        // The status page: the token as bearer or as the Basic-auth password.
        ("GET / without a token", http("GET", "/", None), 401, "the status page needs the metrics token"),
        ("GET /, Basic with a wrong password", http("GET", "/", Some(&basic("x", "nope"))), 401, "the status page needs"),
        ("GET /, Basic without a colon", http("GET", "/", Some("Basic bm9jb2xvbg==")), 401, "the status page needs"),
        ("GET /, Basic not base64", http("GET", "/", Some("Basic %%%")), 401, "the status page needs"),
        ("POST /", http("POST", "/", Some(&right)), 405, "method POST is not allowed on `/`"),
        ("GET /, Basic with the token", http("GET", "/", Some(&basic("anyone", TOKEN))), 200, "<!doctype html>"),
        ("GET /, bearer token", http("GET", "/", Some(&right)), 200, "id=\"nodes\""),
    ]
}

// ---------------------------------------------------------------- state

/// Everything the sweep could change, without what moves by itself
/// (heartbeat times, lease expiry countdowns, instance documents).
#[derive(Debug, PartialEq)]
struct Snapshot {
    status: String,
    config: (String, u64, String),
    journal: Vec<(u64, String, Vec<u8>, u64)>,
    held: Vec<(String, u64)>,
    my_targets: Vec<String>,
    deployments: String,
    fenced_commits: String,
    redis: BTreeMap<String, String>,
    unprovisioned: (String, u64, String, bool),
    standalone: (String, u64, String),
}

impl Snapshot {
    /// One line per part that differs.
    fn changes(&self, after: &Snapshot) -> Vec<String> {
        let mut out = Vec::new();
        macro_rules! compare {
            ($($field:ident),*) => {$(
                if self.$field != after.$field {
                    out.push(format!(
                        "the sweep changed {}:\n  before: {:?}\n  after:  {:?}",
                        stringify!($field), self.$field, after.$field
                    ));
                }
            )*};
        }
        compare!(status, config, journal, held, my_targets, deployments, fenced_commits, redis, unprovisioned, standalone);
        out
    }
}

/// A channel whose calls carry a token.
type Signed = InterceptedService<Channel, BearerAuth>;

struct Nodes {
    /// node-01's client plane, with the client token.
    journal: JournalClient<Signed>,
    ownership: OwnershipClient<Signed>,
    /// node-01's Admin service, with the admin token.
    admin: Admin,
    coord: CoordinationClient<Signed>,
    metrics: String,
    ns: TestNs,
    unprovisioned: AdminClient<Channel>,
    unprovisioned_data: std::path::PathBuf,
    standalone: AdminClient<Channel>,
}

impl Nodes {
    async fn snapshot(&self) -> Result<Snapshot> {
        let s = self.admin.clone().status(proto::StatusRequest {}).await?.into_inner();
        let nodes: Vec<_> = s.nodes.iter().map(|n| (&n.name, &n.uuid, &n.state, &n.address, n.shards_held)).collect();
        let leases: Vec<_> =
            s.leases.iter().map(|l| (&l.shard, &l.application, &l.holder, &l.holder_uuid, &l.holder_address, l.epoch)).collect();
        let status = format!("{} {} v{} {nodes:?} {leases:?} unowned={:?}", s.node, s.state, s.config_version, s.unowned);
        let c = self.admin.clone().get_config(proto::GetConfigRequest {}).await?.into_inner();
        let read = proto::ReadRequest { stream: "sweep".into(), from: 0, limit: 0 };
        let journal = self.journal.clone().read(read).await?.into_inner();
        let held = self.ownership.clone().held(proto::HeldRequest {}).await?.into_inner();
        let mine = self.coord.clone().affinity_list(proto::InstanceRequest::default()).await?.into_inner();
        let deployments = self.coord.clone().deployment_list(proto::DeploymentListRequest::default()).await?.into_inner();
        let (code, metrics) = http_raw(&self.metrics, http("GET", "/metrics", Some(&format!("Bearer {TOKEN}")))).await?;
        anyhow::ensure!(code == 200, "/metrics: {code} {metrics}");
        let fenced_commits = metrics.lines().find(|l| l.starts_with("chitin_fenced_commits_total")).unwrap_or("").to_string();
        let u = self.unprovisioned.clone().get_config(proto::GetConfigRequest {}).await?.into_inner();
        let stored = chitin::node::stored::config_path(&self.unprovisioned_data).exists();
        let st = self.standalone.clone().get_config(proto::GetConfigRequest {}).await?.into_inner();
        Ok(Snapshot {
            status,
            config: (c.config_json, c.config_version, c.state),
            journal: journal.entries.into_iter().map(|e| (e.sequence, e.request_id, e.payload, e.epoch)).collect(),
            held: held.leases.into_iter().map(|l| (l.shard, l.epoch)).collect(),
            my_targets: mine.targets,
            deployments: deployments.json,
            fenced_commits,
            redis: self.redis_state(),
            unprovisioned: (u.config_json, u.config_version, u.state, stored),
            standalone: (st.config_json, st.config_version, st.state),
        })
    }

    /// Every key of the namespace with its content; instance documents (their
    /// heartbeat time moves) by name only.
    fn redis_state(&self) -> BTreeMap<String, String> {
        let mut c = self.ns.raw();
        let instances = format!("{}:instances:", self.ns.ns);
        let mut out = BTreeMap::new();
        for key in self.ns.all_keys() {
            let kind: String = redis::cmd("TYPE").arg(&key).query(&mut c).unwrap();
            let value = match kind.as_str() {
                "string" if key.starts_with(&instances) => "an instance document".to_string(),
                "string" => redis::cmd("GET").arg(&key).query::<Option<String>>(&mut c).unwrap().unwrap_or_default(),
                "set" => {
                    let mut m: Vec<String> = redis::cmd("SMEMBERS").arg(&key).query(&mut c).unwrap();
                    m.sort();
                    format!("{m:?}")
                }
                other => format!("a {other}"),
            };
            out.insert(key, value);
        }
        out
    }

    /// Waits until two snapshots a little over a lease renewal apart agree.
    async fn settled(&self, within: Duration) -> Result<Snapshot> {
        let deadline = Instant::now() + within;
        let mut last = self.snapshot().await?;
        loop {
            tokio::time::sleep(Duration::from_millis(1200)).await;
            let now = self.snapshot().await?;
            let ready = now.status.contains(" active v") && !now.held.is_empty();
            if ready && now == last {
                return Ok(now);
            }
            if Instant::now() > deadline {
                bail!("the cluster did not settle within {within:?}: {now:#?}");
            }
            last = now;
        }
    }
}

/// A channel to `addr` once its admin plane answers (with `admin_token`).
async fn channel(addr: &str, admin_token: Option<&str>, within: Duration) -> Result<Channel> {
    let deadline = Instant::now() + within;
    loop {
        match tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?.connect().await {
            Ok(c) => {
                let mut admin = AdminClient::with_interceptor(c.clone(), BearerAuth::new(admin_token));
                if admin.get_config(proto::GetConfigRequest {}).await.is_ok() {
                    return Ok(c);
                }
            }
            Err(e) if Instant::now() > deadline => bail!("{addr} not up within {within:?}: {e}"),
            Err(_) => {}
        }
        if Instant::now() > deadline {
            bail!("the admin plane of {addr} did not answer within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `authorization` exactly as given (`BearerAuth` always writes
/// `Bearer <token>`).
#[derive(Clone)]
struct RawAuthorization(String);

impl Interceptor for RawAuthorization {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        chitin::upgrade::wire::stamp(request.metadata_mut());
        request.metadata_mut().insert("authorization", self.0.parse().expect("an ASCII header value"));
        Ok(request)
    }
}

/// One call of every Admin method: reads, and requests that would change the
/// node if they ran (Bootstrap again, a newer config, a reload, a drain).
fn every_admin_call<I>(
    admin: &AdminClient<InterceptedService<Channel, I>>,
    config: &str,
    newer: &str,
) -> Vec<(&'static str, Call)>
where
    I: Interceptor + Clone + Send + Sync + 'static,
{
    vec![
        ("Status", rpc!(admin, status, proto::StatusRequest {})),
        ("Bootstrap", rpc!(admin, bootstrap, bootstrap("node-01", config))),
        ("UpdateConfig", rpc!(admin, update_config, update_config(newer))),
        ("GetConfig", rpc!(admin, get_config, proto::GetConfigRequest {})),
        ("ReloadPolicies", rpc!(admin, reload_policies, proto::ReloadPoliciesRequest::default())),
        ("Drain", rpc!(admin, drain, proto::DrainRequest {})),
        ("UpgradeStatus", rpc!(admin, upgrade_status, proto::UpgradeStatusRequest {})),
        ("FinalizeUpgrade", rpc!(admin, finalize_upgrade, proto::FinalizeUpgradeRequest { version: String::new() })),
    ]
}

fn append(stream: impl Into<String>, request_id: impl Into<String>, payload: Vec<u8>) -> proto::AppendRequest {
    proto::AppendRequest { stream: stream.into(), request_id: request_id.into(), payload, forwarded: false }
}

fn forwarded(stream: impl Into<String>, request_id: impl Into<String>) -> proto::AppendRequest {
    proto::AppendRequest { forwarded: true, ..append(stream, request_id, b"p".to_vec()) }
}

fn notice(holder_uuid: &str) -> proto::OwnershipNotice {
    proto::OwnershipNotice { shard: "s".into(), epoch: 1, holder_uuid: holder_uuid.into(), holder: "n".into() }
}

/// A Read of `stream` from `from` rendered as its sequence numbers and how it ended.
fn summary(journal: &JournalClient<Signed>, stream: &str, from: u64) -> Call {
    let (mut client, request) = (journal.clone(), read(stream, from));
    Box::pin(async move {
        let r = client.read(request).await?.into_inner();
        let seqs: Vec<u64> = r.entries.iter().map(|e| e.sequence).collect();
        Ok(format!("{} entries {seqs:?}, truncated: {}, next_from: {}", seqs.len(), r.truncated, r.next_from))
    })
}

fn read(stream: impl Into<String>, from: u64) -> proto::ReadRequest {
    proto::ReadRequest { stream: stream.into(), from, limit: 0 }
}

fn route(application: &str) -> proto::RouteRequest {
    proto::RouteRequest { application: application.into(), key: 7 }
}

fn bootstrap(node_id: &str, config_json: impl Into<String>) -> proto::BootstrapRequest {
    proto::BootstrapRequest { node_id: node_id.into(), config_json: config_json.into() }
}

fn update_config(config_json: impl Into<String>) -> proto::UpdateConfigRequest {
    proto::UpdateConfigRequest { config_json: config_json.into() }
}

fn target(id: impl Into<String>) -> proto::TargetRequest {
    proto::TargetRequest { target_id: id.into() }
}

fn dispatch(id: impl Into<String>, command: Vec<u8>) -> proto::DispatchRequest {
    proto::DispatchRequest { target_id: id.into(), command }
}

fn instance(id: &str) -> proto::InstanceRequest {
    proto::InstanceRequest { instance_id: id.into() }
}

fn start(state: &str, description: String) -> proto::DeploymentStartRequest {
    proto::DeploymentStartRequest { description, state: state.into(), ..Default::default() }
}

fn update(id: &str, state: &str, completed: u64, total: u64) -> proto::DeploymentUpdateRequest {
    proto::DeploymentUpdateRequest { deployment_id: id.into(), state: state.into(), completed, total, ..Default::default() }
}

fn finish(id: &str, state: &str) -> proto::DeploymentFinishRequest {
    proto::DeploymentFinishRequest { deployment_id: id.into(), state: state.into(), message: String::new() }
}

fn show(id: &str) -> proto::DeploymentShowRequest {
    proto::DeploymentShowRequest { deployment_id: id.into() }
}

fn list(instance_id: &str) -> proto::DeploymentListRequest {
    proto::DeploymentListRequest { active_only: false, instance_id: instance_id.into() }
}

/// A config JSON edited as a value.
fn edited(config: &str, edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v: serde_json::Value = serde_json::from_str(config).unwrap();
    edit(&mut v);
    serde_json::to_string(&v).unwrap()
}

fn deployment_id(json: &str) -> String {
    serde_json::from_str::<serde_json::Value>(json).unwrap()["deployment_id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_requests_are_refused_clearly_and_change_nothing() {
    // A cluster node (node-01, seeded) and an unprovisioned one (node-02).
    // Lease and liveness timings are relaxed from the cluster tests' so a
    // slow machine never moves a lease or expires an instance mid-sweep.
    let mut cluster = Cluster::new(Dialect::Postgres, 2, 4, 0, |name, s| {
        s.metrics.auth_token = Some(TOKEN.into());
        s.leases.ttl_secs = Some(15.0);
        s.leases.renew_interval_secs = Some(1.0);
        s.cluster.liveness_timeout_secs = 60.0;
        s.cluster.heartbeat_interval_secs = 2.0;
        if name == "node-01" {
            s.api.admin_token = Some(ADMIN_TOKEN.into());
            s.api.client_token = Some(CLIENT_TOKEN.into());
            s.cluster.peer_token = Some(PEER_TOKEN.into());
        } else {
            s.cluster.config_file = None;
        }
    })
    .await
    .unwrap();
    let ns = TestNs { keys: Keys::new(&cluster.namespace), ns: cluster.namespace.clone(), url: "redis://127.0.0.1:6379".into() };
    for node in &mut cluster.nodes {
        node.start().unwrap();
    }

    // A standalone node.
    let dir = tempfile::tempdir().unwrap();
    let mut standalone = standalone_node(dir.path(), "standalone", |_| {}).unwrap();

    cluster.nodes[0].wait_ready(Duration::from_secs(60)).await.unwrap();
    standalone.wait_ready(Duration::from_secs(60)).await.unwrap();
    let main = channel(&cluster.nodes[0].api, Some(ADMIN_TOKEN), Duration::from_secs(10)).await.unwrap();
    let fresh = channel(&cluster.nodes[1].api, None, Duration::from_secs(60)).await.with_context(|| cluster.logs()).unwrap();
    let alone = channel(&standalone.api, None, Duration::from_secs(10)).await.unwrap();
    let signed = |token: &str| InterceptedService::new(main.clone(), BearerAuth::new(Some(token)));
    let nodes = Nodes {
        journal: JournalClient::new(signed(CLIENT_TOKEN)),
        ownership: OwnershipClient::new(signed(CLIENT_TOKEN)),
        admin: AdminClient::with_interceptor(
            chitin::security::tls::NodeChannel::new(main.clone(), None),
            BearerAuth::new(Some(ADMIN_TOKEN)),
        ),
        coord: CoordinationClient::new(signed(CLIENT_TOKEN)),
        metrics: cluster.nodes[0].metrics.clone(),
        ns,
        unprovisioned: AdminClient::new(fresh.clone()),
        unprovisioned_data: cluster.dir.path().join("node-02"),
        standalone: AdminClient::new(alone.clone()),
    };
    let (journal, ownership, admin, coord) = (&nodes.journal, &nodes.ownership, &nodes.admin, &nodes.coord);

    // State for the requests to leave alone: journal entries, a claimed
    // target, a running and a finished deployment.
    for i in 0..3 {
        journal.clone().append(append("sweep", format!("seed-{i}"), format!("entry {i}").into_bytes())).await.unwrap();
    }
    // Three entries of the largest payload: more than one Read answers.
    for i in 0..3 {
        journal.clone().append(append("big", format!("big-{i}"), vec![b'0' + i; MAX_PAYLOAD])).await.unwrap();
    }
    coord.clone().dispatch(dispatch("target-1", b"run".to_vec())).await.unwrap();
    let running = coord.clone().deployment_start(start("running", "sweep: running".into())).await.unwrap().into_inner();
    let running = deployment_id(&running.json);
    let done = coord.clone().deployment_start(start("running", "sweep: done".into())).await.unwrap().into_inner();
    let done = deployment_id(&done.json);
    coord.clone().deployment_finish(finish(&done, "succeeded")).await.unwrap();
    let config = admin.clone().get_config(proto::GetConfigRequest {}).await.unwrap().into_inner().config_json;
    let file_config = std::fs::read_to_string(cluster.config_path()).unwrap();

    let before = nodes.settled(Duration::from_secs(40)).await.with_context(|| cluster.logs()).unwrap();
    assert_eq!(before.journal.len(), 3);
    assert_eq!(before.my_targets, ["target-1"]);
    assert_eq!(before.config.1, 1);
    assert!(before.redis.keys().any(|k| k.contains(":affinity:target-1")), "{:?}", before.redis);
    assert_eq!(before.unprovisioned.2, "UNPROVISIONED");

    let unknown_uuid = "0190f5a4-0000-7000-8000-000000000000";
    let big = |n: usize| "x".repeat(n);
    let invalid_config = edited(&file_config, |v| {
        v["version"] = 2.into();
        v["applications"][0]["shards"][0]["replicas"][0]["node_id"] = "ghost".into();
    });
    let without_me = edited(&config, |v| {
        v["version"] = 2.into();
        v["nodes"].as_array_mut().unwrap().retain(|n| n["id"] != "node-01");
        for shard in v["applications"][0]["shards"].as_array_mut().unwrap() {
            shard["replicas"].as_array_mut().unwrap().retain(|r| r["node_id"] != "node-01");
        }
    });
    let older = edited(&config, |v| v["version"] = 0.into());

    use Code::{AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied, Unauthenticated, Unavailable};
    let as_peer = JournalClient::new(signed(PEER_TOKEN));
    let peer = PeerClient::new(signed(PEER_TOKEN));
    #[rustfmt::skip]
    let mut cases = vec![
        // ------------------------------------------------ Journal
        refused("Append: empty stream", rpc!(journal, append, append("", "r", b"p".to_vec())), InvalidArgument, format!("stream must be 1..={MAX_STREAM} bytes, got 0")),
        refused("Append: stream too long", rpc!(journal, append, append(big(MAX_STREAM + 1), "r", b"p".to_vec())), InvalidArgument, format!("stream must be 1..={MAX_STREAM} bytes, got {}", MAX_STREAM + 1)),
        refused("Append: empty request_id", rpc!(journal, append, append("sweep", "", b"p".to_vec())), InvalidArgument, format!("request_id must be 1..={MAX_REQUEST_ID} bytes, got 0")),
        refused("Append: request_id too long", rpc!(journal, append, append("sweep", big(MAX_REQUEST_ID + 1), b"p".to_vec())), InvalidArgument, format!("request_id must be 1..={MAX_REQUEST_ID} bytes, got {}", MAX_REQUEST_ID + 1)),
        refused("Append: payload too large", rpc!(journal, append, append("sweep", "r-big", vec![7; MAX_PAYLOAD + 1])), InvalidArgument, format!("payload must be at most {MAX_PAYLOAD} bytes, got {}", MAX_PAYLOAD + 1)),
        refused("Append: message over the Journal limit", rpc!(journal, append, append("sweep", "r-huge", vec![7; MAX_MESSAGE_BYTES + 1])), InvalidArgument, format!("request too large: found … bytes, the limit is: {MAX_MESSAGE_BYTES} bytes")),
        refused("Read: empty stream", rpc!(journal, read, read("", 0)), InvalidArgument, format!("stream must be 1..={MAX_STREAM} bytes, got 0")),
        refused("Read: stream too long", rpc!(journal, read, read(big(MAX_STREAM + 1), 0)), InvalidArgument, format!("got {}", MAX_STREAM + 1)),
        refused("Read: from beyond a sequence number", rpc!(journal, read, read("sweep", u64::MAX)), InvalidArgument, format!("from must be at most {}, got {}", i64::MAX, u64::MAX)),
        answers("Read: a stream never written is empty", rpc!(journal, read, read("never-written", 0)), "entries: []"),
        answers("Read: past the end is empty", rpc!(journal, read, read("sweep", i64::MAX as u64)), "entries: []"),
        refused("Append: a NUL byte in stream", rpc!(journal, append, append("a\0b", "r", b"p".to_vec())), InvalidArgument, "stream must not contain a NUL byte (found at byte 1)"),
        refused("Append: a NUL byte in request_id", rpc!(journal, append, append("sweep", "r\0", b"p".to_vec())), InvalidArgument, "request_id must not contain a NUL byte (found at byte 1)"),
        refused("Read: a NUL byte in stream", rpc!(journal, read, read("\0", 0)), InvalidArgument, "stream must not contain a NUL byte (found at byte 0)"),
        answers("Read: three 1 MiB entries stop at the byte budget after two", summary(journal, "big", 0), "2 entries [1, 2], truncated: true, next_from: 3"),
        answers("Read: the rest from next_from", summary(journal, "big", 3), "1 entries [3], truncated: false, next_from: 4"),
        answers("Read: two 1 MiB entries fill the budget exactly", summary(journal, "big", 2), "2 entries [2, 3], truncated: false, next_from: 4"),
        refused("Append: forwarded with the client token", rpc!(journal, append, forwarded("sweep", "fwd-1")), PermissionDenied, NOT_A_PEER),
        refused("Append: forwarded with the client token, before validation", rpc!(journal, append, forwarded("", "")), PermissionDenied, NOT_A_PEER),
        refused("Append: forwarded with the peer token gets past the check", rpc!(as_peer, append, forwarded("", "fwd-2")), InvalidArgument, "stream must be 1..="),
        refused("Peer Notice with the peer token is served", rpc!(peer, notice, notice("not-a-uuid")), InvalidArgument, "holder_uuid `not-a-uuid` is not a UUID"),
        // ------------------------------------------------ Ownership
        refused("Route: empty application", rpc!(ownership, route, route("")), InvalidArgument, "application must not be empty"),
        refused("Route: unknown application", rpc!(ownership, route, route("nope")), NotFound, "unknown application `nope`"),
        refused("Route: application over the size limit", rpc!(ownership, route, route(&big(DEFAULT_MAX))), InvalidArgument, format!("request too large: … the limit is: {DEFAULT_MAX} bytes")),
        // ------------------------------------------------ Admin
        refused("Bootstrap: empty node_id", rpc!(admin, bootstrap, bootstrap("", config.clone())), InvalidArgument, "node_id must not be empty"),
        refused("Bootstrap: config_json not JSON", rpc!(admin, bootstrap, bootstrap("node-01", "{")), InvalidArgument, "config_json: "),
        refused("Bootstrap: empty config_json", rpc!(admin, bootstrap, bootstrap("node-01", "")), InvalidArgument, "config_json: "),
        refused("Bootstrap: a provisioned node", rpc!(admin, bootstrap, bootstrap("node-01", config.clone())), AlreadyExists, "already provisioned as `node-01`; use UpdateConfig"),
        refused("Bootstrap: a provisioned node, another id", rpc!(admin, bootstrap, bootstrap("node-02", file_config.clone())), AlreadyExists, "already provisioned as `node-01`"),
        refused("UpdateConfig: empty config_json", rpc!(admin, update_config, update_config("")), InvalidArgument, "config_json: "),
        refused("UpdateConfig: not JSON", rpc!(admin, update_config, update_config("not json")), InvalidArgument, "config_json: "),
        refused("UpdateConfig: a JSON array", rpc!(admin, update_config, update_config("[]")), InvalidArgument, "config_json: "),
        refused("UpdateConfig: a string version", rpc!(admin, update_config, update_config(edited(&config, |v| v["version"] = "two".into()))), InvalidArgument, "config_json: "),
        refused("UpdateConfig: a negative version", rpc!(admin, update_config, update_config(edited(&config, |v| v["version"] = (-1).into()))), InvalidArgument, "config_json: "),
        refused("UpdateConfig: the same version", rpc!(admin, update_config, update_config(config.clone())), FailedPrecondition, "the new version 1 is not greater than the old version 1"),
        refused("UpdateConfig: a lower version", rpc!(admin, update_config, update_config(older)), FailedPrecondition, "is not greater than the old version 1"),
        refused("UpdateConfig: a replica on an unknown node", rpc!(admin, update_config, update_config(invalid_config.clone())), FailedPrecondition, "node `ghost` is not in the config"),
        refused("UpdateConfig: a config without this node", rpc!(admin, update_config, update_config(without_me)), FailedPrecondition, "node-01"),
        refused("FinalizeUpgrade: not a version", rpc!(admin, finalize_upgrade, proto::FinalizeUpgradeRequest { version: "banana".into() }), InvalidArgument, "version: `banana` is not a chitin version"),
        refused("FinalizeUpgrade: a release past this node", rpc!(admin, finalize_upgrade, proto::FinalizeUpgradeRequest { version: "9.9".into() }), FailedPrecondition, "cannot finalize at 9.9, a release it does not know"),
        refused("FinalizeUpgrade: back to 0.1", rpc!(admin, finalize_upgrade, proto::FinalizeUpgradeRequest { version: "0.1".into() }), FailedPrecondition, "finalize never goes back"),
        refused("UpdateConfig: over the Admin limit", rpc!(admin, update_config, update_config(big(ADMIN_MAX))), InvalidArgument, format!("request too large: … the limit is: {ADMIN_MAX} bytes")),
        // ------------------------------------------------ Coordination
        refused("Dispatch: empty target_id", rpc!(coord, dispatch, dispatch("", b"c".to_vec())), InvalidArgument, "target_id must not be empty"),
        refused("Dispatch: whitespace in target_id", rpc!(coord, dispatch, dispatch("a b", b"c".to_vec())), InvalidArgument, "invalid target id \"a b\": it contains whitespace"),
        refused("Dispatch: a by-instance target_id", rpc!(coord, dispatch, dispatch("by-instance:x", b"c".to_vec())), InvalidArgument, "would collide with the by-instance sets"),
        refused("Dispatch: command over the size limit", rpc!(coord, dispatch, dispatch("target-2", vec![0; DEFAULT_MAX])), InvalidArgument, format!("request too large: … the limit is: {DEFAULT_MAX} bytes")),
        refused("AffinityOwner: empty target_id", rpc!(coord, affinity_owner, target("")), InvalidArgument, "target_id must not be empty"),
        refused("AffinityOwner: whitespace in target_id", rpc!(coord, affinity_owner, target("a\tb")), InvalidArgument, "it contains whitespace"),
        refused("AffinityOwner: a by-instance target_id", rpc!(coord, affinity_owner, target("by-instance:x")), InvalidArgument, "would collide"),
        answers("AffinityOwner: an unclaimed target has no owner", rpc!(coord, affinity_owner, target("never-claimed")), "owner: \"\""),
        refused("AffinityList: ':' in instance_id", rpc!(coord, affinity_list, instance("a:b")), InvalidArgument, "invalid instance id \"a:b\": contains `:`"),
        refused("AffinityList: whitespace in instance_id", rpc!(coord, affinity_list, instance("a b")), InvalidArgument, "invalid instance id \"a b\": contains whitespace"),
        answers("AffinityList: an unknown instance owns nothing", rpc!(coord, affinity_list, instance("ghost")), "targets: []"),
        refused("AffinityRelease: empty target_id", rpc!(coord, affinity_release, target("")), InvalidArgument, "target_id must not be empty"),
        refused("AffinityRelease: whitespace in target_id", rpc!(coord, affinity_release, target("a b")), InvalidArgument, "it contains whitespace"),
        refused("AffinityRelease: a by-instance target_id", rpc!(coord, affinity_release, target("by-instance:x")), InvalidArgument, "would collide"),
        answers("AffinityRelease: an unclaimed target", rpc!(coord, affinity_release, target("never-claimed")), "released: false"),
        refused("DeploymentStart: unknown state", rpc!(coord, deployment_start, start("bogus", String::new())), InvalidArgument, "unknown deployment state \"bogus\""),
        refused("DeploymentStart: a terminal state", rpc!(coord, deployment_start, start("succeeded", String::new())), InvalidArgument, "cannot start in state succeeded"),
        refused("DeploymentStart: description over the size limit", rpc!(coord, deployment_start, start("", big(DEFAULT_MAX))), InvalidArgument, format!("request too large: … the limit is: {DEFAULT_MAX} bytes")),
        refused("DeploymentUpdate: empty deployment_id", rpc!(coord, deployment_update, update("", "", 0, 0)), InvalidArgument, "invalid deployment id \"\": not a UUID"),
        refused("DeploymentUpdate: not a UUID", rpc!(coord, deployment_update, update("d-1", "", 0, 0)), InvalidArgument, "invalid deployment id \"d-1\": not a UUID"),
        refused("DeploymentUpdate: unknown deployment", rpc!(coord, deployment_update, update(unknown_uuid, "running", 0, 0)), NotFound, format!("deployment {unknown_uuid} not found")),
        refused("DeploymentUpdate: unknown state", rpc!(coord, deployment_update, update(&running, "paused", 0, 0)), InvalidArgument, "unknown deployment state \"paused\""),
        refused("DeploymentUpdate: completed beyond total", rpc!(coord, deployment_update, update(&running, "", 5, 3)), InvalidArgument, "completed = 5 must not exceed total = 3"),
        refused("DeploymentUpdate: completed without total", rpc!(coord, deployment_update, update(&running, "", 5, 0)), InvalidArgument, "completed = 5 needs total"),
        refused("DeploymentUpdate: back to pending", rpc!(coord, deployment_update, update(&running, "pending", 0, 0)), FailedPrecondition, "cannot go from running to pending"),
        refused("DeploymentUpdate: a finished deployment", rpc!(coord, deployment_update, update(&done, "running", 0, 0)), FailedPrecondition, "is already succeeded; terminal states are final"),
        refused("DeploymentFinish: empty state", rpc!(coord, deployment_finish, finish(&running, "")), InvalidArgument, "state must be succeeded, failed or cancelled"),
        refused("DeploymentFinish: a non-terminal state", rpc!(coord, deployment_finish, finish(&running, "running")), InvalidArgument, "finish needs a terminal state"),
        refused("DeploymentFinish: unknown state", rpc!(coord, deployment_finish, finish(&running, "done")), InvalidArgument, "unknown deployment state \"done\""),
        refused("DeploymentFinish: not a UUID", rpc!(coord, deployment_finish, finish("d-1", "failed")), InvalidArgument, "not a UUID"),
        refused("DeploymentFinish: unknown deployment", rpc!(coord, deployment_finish, finish(unknown_uuid, "failed")), NotFound, "not found"),
        refused("DeploymentFinish: a finished deployment", rpc!(coord, deployment_finish, finish(&done, "failed")), FailedPrecondition, "terminal states are final"),
        refused("DeploymentShow: empty deployment_id", rpc!(coord, deployment_show, show("")), InvalidArgument, "not a UUID"),
        refused("DeploymentShow: not a UUID", rpc!(coord, deployment_show, show("d-1")), InvalidArgument, "invalid deployment id \"d-1\""),
        refused("DeploymentShow: unknown deployment", rpc!(coord, deployment_show, show(unknown_uuid)), NotFound, format!("no deployment {unknown_uuid}")),
        refused("DeploymentList: ':' in instance_id", rpc!(coord, deployment_list, list("a:b")), InvalidArgument, "invalid instance id \"a:b\""),
        answers("DeploymentList: an unknown instance has none", rpc!(coord, deployment_list, list("ghost")), "json: \"[]\""),
    ];

    // The unprovisioned node: Bootstrap's own checks, and nothing else served.
    let (fresh_admin, fresh_journal) = (AdminClient::new(fresh.clone()), JournalClient::new(fresh.clone()));
    let (fresh_ownership, fresh_coord) = (OwnershipClient::new(fresh.clone()), CoordinationClient::new(fresh.clone()));
    #[rustfmt::skip]
    let unprovisioned = [
        refused("node-02 Bootstrap: empty node_id", rpc!(fresh_admin, bootstrap, bootstrap("", file_config.clone())), InvalidArgument, "node_id must not be empty"),
        refused("node-02 Bootstrap: config_json not JSON", rpc!(fresh_admin, bootstrap, bootstrap("node-02", "nope")), InvalidArgument, "config_json: "),
        refused("node-02 Bootstrap: an invalid config", rpc!(fresh_admin, bootstrap, bootstrap("node-02", invalid_config.clone())), InvalidArgument, "the config is not valid: [replica-node-unknown]"),
        refused("node-02 Bootstrap: a node id not in the config", rpc!(fresh_admin, bootstrap, bootstrap("node-09", file_config.clone())), InvalidArgument, "node id `node-09` is not a node of the config"),
        refused("node-02 Bootstrap: another node's id", rpc!(fresh_admin, bootstrap, bootstrap("node-03", file_config.clone())), FailedPrecondition, "set to `node-02` (by [cluster] instance_id"),
        refused("node-02 UpdateConfig: before Bootstrap", rpc!(fresh_admin, update_config, update_config(file_config.clone())), Unavailable, "this node is UNPROVISIONED"),
        refused("node-02 Drain: before Bootstrap", rpc!(fresh_admin, drain, proto::DrainRequest {}), Unavailable, "this node is UNPROVISIONED"),
        refused("node-02 ReloadPolicies: before Bootstrap", rpc!(fresh_admin, reload_policies, proto::ReloadPoliciesRequest::default()), Unavailable, "this node is UNPROVISIONED"),
        refused("node-02 Append: before Bootstrap", rpc!(fresh_journal, append, append("sweep", "r", b"p".to_vec())), Unavailable, "this node is UNPROVISIONED"),
        refused("node-02 Read: before Bootstrap", rpc!(fresh_journal, read, read("sweep", 0)), Unavailable, "this node is UNPROVISIONED"),
        refused("node-02 Route: before Bootstrap", rpc!(fresh_ownership, route, route("journal")), Unavailable, "this node is UNPROVISIONED"),
        refused("node-02 Held: before Bootstrap", rpc!(fresh_ownership, held, proto::HeldRequest {}), Unavailable, "this node is UNPROVISIONED"),
        refused("node-02 Dispatch: before Bootstrap", rpc!(fresh_coord, dispatch, dispatch("target-1", Vec::new())), Unavailable, "this node is UNPROVISIONED"),
        refused("node-02 DeploymentList: before Bootstrap", rpc!(fresh_coord, deployment_list, list("")), Unavailable, "this node is UNPROVISIONED"),
    ];
    cases.extend(unprovisioned);

    // The standalone node: no cluster config to take, no Redis to coordinate.
    let (alone_admin, alone_coord) = (AdminClient::new(alone.clone()), CoordinationClient::new(alone.clone()));
    let no_redis = "a standalone node has no Redis coordination";
    #[rustfmt::skip]
    let standalone_cases = [
        refused("standalone Bootstrap", rpc!(alone_admin, bootstrap, bootstrap("node-01", file_config.clone())), FailedPrecondition, "a standalone node takes no cluster config"),
        refused("standalone AffinityOwner", rpc!(alone_coord, affinity_owner, target("t")), FailedPrecondition, no_redis),
        refused("standalone AffinityList", rpc!(alone_coord, affinity_list, instance("")), FailedPrecondition, no_redis),
        refused("standalone AffinityRelease", rpc!(alone_coord, affinity_release, target("t")), FailedPrecondition, no_redis),
        refused("standalone Instances", rpc!(alone_coord, instances, proto::Empty {}), FailedPrecondition, no_redis),
        refused("standalone CleanupStale", rpc!(alone_coord, cleanup_stale, proto::Empty {}), FailedPrecondition, no_redis),
        refused("standalone DeploymentStart", rpc!(alone_coord, deployment_start, start("", String::new())), FailedPrecondition, no_redis),
        refused("standalone DeploymentUpdate", rpc!(alone_coord, deployment_update, update(unknown_uuid, "", 0, 0)), FailedPrecondition, no_redis),
        refused("standalone DeploymentFinish", rpc!(alone_coord, deployment_finish, finish(unknown_uuid, "failed")), FailedPrecondition, no_redis),
        refused("standalone DeploymentShow", rpc!(alone_coord, deployment_show, show(unknown_uuid)), FailedPrecondition, no_redis),
        refused("standalone DeploymentList", rpc!(alone_coord, deployment_list, list("")), FailedPrecondition, no_redis),
    ];
    cases.extend(standalone_cases);

    // The admin token of node-01: every Admin method refused, before it runs,
    // for each way the token can be missing or wrong. The UpdateConfig is a
    // valid newer config and the Drain a real drain: were either served, the
    // snapshot after the sweep would differ.
    let newer = edited(&config, |v| v["version"] = 2.into());
    let bearer = |token: &str| AdminClient::with_interceptor(main.clone(), BearerAuth::new(Some(token)));
    let header = |value: String| AdminClient::with_interceptor(main.clone(), RawAuthorization(value));
    #[rustfmt::skip]
    let variants: Vec<(&str, Vec<(&str, Call)>, &str)> = vec![
        ("without a token", every_admin_call(&AdminClient::with_interceptor(main.clone(), BearerAuth::new(None)), &config, &newer), NEEDS_TOKEN),
        ("with a wrong token", every_admin_call(&bearer("not-the-admin-token"), &config, &newer), WRONG_TOKEN),
        // HTTP/2 keeps the trailing space: an empty token, not a missing one.
        ("with `Bearer ` and an empty token", every_admin_call(&bearer(""), &config, &newer), WRONG_TOKEN),
        ("with the token plus a byte", every_admin_call(&bearer(&format!("{ADMIN_TOKEN}x")), &config, &newer), WRONG_TOKEN),
        ("with the metrics token", every_admin_call(&bearer(TOKEN), &config, &newer), WRONG_TOKEN),
        ("with the token but no `Bearer `", every_admin_call(&header(ADMIN_TOKEN.to_string()), &config, &newer), NEEDS_TOKEN),
        ("with Basic auth", every_admin_call(&header("Basic c3dlZXA6dG9rZW4=".to_string()), &config, &newer), NEEDS_TOKEN),
    ];
    for (how, calls, says) in variants {
        for (method, call) in calls {
            cases.push(refused(format!("node-01 {method} {how}"), call, Unauthenticated, says));
        }
    }
    // The token is checked before the body is decoded.
    for &(path, _, streaming) in METHODS.iter().filter(|(p, _, _)| p.starts_with("/chitin.v1.Admin/")) {
        cases.push(refused(
            format!("node-01 {path}: undecodable, without a token"),
            raw(&main, path, vec![0x0f], streaming, None),
            Unauthenticated,
            NEEDS_TOKEN,
        ));
        let wrong = Some("Bearer not-the-admin-token".to_string());
        cases.push(refused(
            format!("node-01 {path}: undecodable, a wrong token"),
            raw(&main, path, vec![0x0f], streaming, wrong),
            Unauthenticated,
            WRONG_TOKEN,
        ));
    }
    // Controls: the token is served; the client plane takes the client and
    // the peer token; nodes without `[api] admin_token` ignore a stray one.
    let stray = || RawAuthorization("Bearer not-the-admin-token".to_string());
    let journal_peer = JournalClient::new(signed(PEER_TOKEN));
    let ownership_peer = OwnershipClient::new(signed(PEER_TOKEN));
    let coord_peer = CoordinationClient::new(signed(PEER_TOKEN));
    let fresh_stray = AdminClient::with_interceptor(fresh.clone(), stray());
    let alone_stray = AdminClient::with_interceptor(alone.clone(), stray());
    #[rustfmt::skip]
    let served = [
        answers("node-01 Status with the admin token", rpc!(admin, status, proto::StatusRequest {}), "node: \"node-01\""),
        answers("node-01 GetConfig with the admin token", rpc!(admin, get_config, proto::GetConfigRequest {}), "config_version: 1"),
        answers("Journal Read with the client token", rpc!(journal, read, read("sweep", 0)), "request_id: \"seed-0\""),
        answers("Journal Read with the peer token", rpc!(journal_peer, read, read("sweep", 0)), "request_id: \"seed-0\""),
        answers("Ownership Route with the client token", rpc!(ownership, route, route("journal")), "application: \"journal\""),
        answers("Ownership Held with the peer token", rpc!(ownership_peer, held, proto::HeldRequest {}), "leases: ["),
        answers("Coordination AffinityList with the client token", rpc!(coord, affinity_list, instance("")), "target-1"),
        answers("Coordination DeploymentShow with the peer token", rpc!(coord_peer, deployment_show, show(&done)), "succeeded"),
        refused("Journal Read without the client token", rpc!(JournalClient::new(main.clone()), read, read("sweep", 0)), Unauthenticated,
            "the client plane needs `authorization: Bearer <[api] client_token>`; set CHITIN_CLIENT_TOKEN"),
        refused("Coordination Dispatch with the admin token", rpc!(CoordinationClient::new(signed(ADMIN_TOKEN)), dispatch, dispatch("target-9", b"c".to_vec())), Unauthenticated,
            "wrong client token; set CHITIN_CLIENT_TOKEN to the node's [api] client_token"),
        answers("node-02 GetConfig with a stray token", rpc!(fresh_stray, get_config, proto::GetConfigRequest {}), "UNPROVISIONED"),
        answers("standalone GetConfig with a stray token", rpc!(alone_stray, get_config, proto::GetConfigRequest {}), "config_version: "),
    ];
    cases.extend(served);

    // Undecodable requests and unknown methods, on every node.
    let tokens = Tokens { admin: Some(ADMIN_TOKEN), client: Some(CLIENT_TOKEN), peer: Some(PEER_TOKEN) };
    cases.extend(undecodable_cases(&main, "node-01", tokens, false));
    cases.extend(undecodable_cases(&fresh, "node-02", Tokens::default(), false));
    cases.extend(undecodable_cases(&alone, "standalone", Tokens::default(), true));
    // Every method with and without each token.
    cases.extend(token_cases(&main, "node-01", tokens));

    let count = cases.len();
    let mut wrong = sweep(cases).await;
    for (name, request, status, says) in http_cases() {
        match http_raw(&nodes.metrics, request).await {
            Ok((code, body)) if code == status && body.contains(says) => {}
            Ok((code, body)) => wrong.push(format!("HTTP {name}: expected {status} containing {says:?}, got {code} {body:?}")),
            Err(e) => wrong.push(format!("HTTP {name}: {e:#}")),
        }
    }

    // Nothing changed, and every node still runs.
    let after = nodes.snapshot().await.unwrap();
    wrong.extend(before.changes(&after));
    for node in cluster.nodes.iter_mut().chain([&mut standalone]) {
        if !node.is_running() {
            wrong.push(format!("{} exited:\n{}", node.name, node.log_text()));
        }
    }
    assert!(wrong.is_empty(), "{} problem(s) in a sweep of {count} gRPC and HTTP cases:\n{}", wrong.len(), wrong.join("\n"));

    drop(standalone);
    cluster.teardown().await.unwrap();
}
