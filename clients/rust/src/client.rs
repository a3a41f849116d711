//! [`Client`]: appends, reads and lookups over several nodes.
//!
//! An append goes to the holder of its stream's shard (asked once per
//! stream through `Ownership.Route`, then remembered) or else to the node
//! the client is on; any node accepts it and forwards, so routing saves a hop
//! and is never needed for correctness. A failed attempt is judged by
//! [`classify`]; the next one carries the **same request id** and goes to the
//! holder the answer named, or else to the next node of the list. After
//! [`Options::attempts`] the answer is [`AppendOutcome::NotApplied`] only if
//! every attempt certainly did not apply, otherwise
//! [`AppendOutcome::Unknown`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::body::Body;
use tonic::codegen::{StdError, http};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Endpoint;
use tonic::{Code, Request, Status};
use tower::util::BoxCloneSyncService;

use crate::nodes::{Nodes, Unreachable, uri};
use crate::outcome::{Attempt, Holder, classify, describe};
use crate::proto::{self, journal_client::JournalClient, ownership_client::OwnershipClient};

/// How a client retries.
#[derive(Clone, Debug)]
pub struct Options {
    /// Attempts per append (and nodes tried per read or lookup, at least
    /// every node once). Default 6.
    pub attempts: u32,
    /// Longest one attempt may take; a node waits up to its lease TTL +
    /// renew interval + 1 s for a shard's takeover. Default 30 s.
    pub attempt_timeout: Duration,
    /// Pause before retrying at another node, doubling up to
    /// `max_backoff`. Default 100 ms.
    pub backoff: Duration,
    /// Longest pause between attempts. Default 2 s.
    pub max_backoff: Duration,
    /// The connect timeout of the default dialer. Default 3 s.
    pub connect_timeout: Duration,
    /// Send an append to its shard's holder (asked through `Route` once
    /// per stream). Default true.
    pub route: bool,
    /// The application journal streams route through. Default `journal`.
    pub application: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            attempts: 6,
            attempt_timeout: Duration::from_secs(30),
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(3),
            route: true,
            application: "journal".into(),
        }
    }
}

/// Any channel to a node: a [`tonic::transport::Channel`] or the caller's own service
/// around one (see [`boxed`]).
pub type BoxChannel = BoxCloneSyncService<http::Request<Body>, http::Response<Body>, ChannelError>;

/// A boxed channel's failure: the channel's own error, which stays the
/// source, so tonic and [`crate::never_sent`] read its causes as before.
/// (A concrete type rather than a boxed `dyn Error`: futures that hold a
/// client stay provably `Send`.)
#[derive(Debug)]
pub struct ChannelError(StdError);

impl std::fmt::Display for ChannelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ChannelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

/// `service` (a [`tonic::transport::Channel`], or a wrapper that explains TLS failures, say)
/// as a [`BoxChannel`].
pub fn boxed<S>(service: S) -> BoxChannel
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + Sync + 'static,
    S::Error: Into<StdError>,
    S::Future: Send + 'static,
{
    BoxCloneSyncService::new(tower::ServiceExt::map_err(service, |e: S::Error| ChannelError(e.into())))
}

/// Opens a channel to an address (TLS, timeouts: the caller's choice). An
/// error means nothing was sent.
pub type Dial = Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<BoxChannel, String>> + Send>> + Send + Sync>;

/// A channel whose calls carry `authorization: Bearer <token>` when a token is set.
pub type Conn = InterceptedService<BoxChannel, Auth>;

/// Adds the bearer token (the node's `[api] client_token`) to every call,
/// and with the `otel` feature the caller's trace context.
#[derive(Clone, Default)]
pub struct Auth(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert("authorization", v.clone());
        }
        #[cfg(feature = "otel")]
        crate::trace_context::inject(request.metadata_mut());
        Ok(request)
    }
}

/// An append that was applied (now, or earlier under the same request id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The request id it was applied under.
    pub request_id: String,
    /// Its sequence in its stream.
    pub sequence: u64,
    /// The lease epoch of the holder that committed it.
    pub epoch: u64,
    /// The shard its stream belongs to.
    pub shard: String,
    /// The holder that committed it, by name.
    pub holder: String,
    /// The address of the node that answered.
    pub node: String,
    /// Attempts made (1: the first one answered).
    pub attempts: u32,
}

/// How an append ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppendOutcome {
    /// Applied, now or earlier under the same request id.
    Applied(Applied),
    /// Certainly not committed by any attempt: safe to give the id up, or to
    /// send again (same id) to `go_to`, the shard's holder when known.
    NotApplied {
        /// The request id no attempt applied.
        request_id: String,
        /// The last attempt's failure, in words.
        reason: String,
        /// The shard's holder, when an answer or `Route` named it.
        go_to: Option<Holder>,
    },
    /// Some attempt may have committed and none confirmed it: retry later
    /// with the same request id, which applies at most once.
    Unknown {
        /// The request id to send again.
        request_id: String,
        /// The last attempt's failure, in words.
        reason: String,
        /// Attempts made.
        attempts: u32,
    },
}

impl AppendOutcome {
    /// The request id, whatever the outcome.
    pub fn request_id(&self) -> &str {
        match self {
            AppendOutcome::Applied(a) => &a.request_id,
            AppendOutcome::NotApplied { request_id, .. } | AppendOutcome::Unknown { request_id, .. } => request_id,
        }
    }

    /// The applied append, or an error saying why not.
    pub fn applied(self) -> Result<Applied, Error> {
        match self {
            AppendOutcome::Applied(a) => Ok(a),
            other => Err(Error::NotConfirmed(other)),
        }
    }
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Refused before it ran, for a reason a retry does not change.
    #[error("the node refused the request ({code:?}): {message}")]
    Refused {
        /// The gRPC status code.
        code: Code,
        /// The node's message: what was wrong.
        message: String,
    },
    /// No node of the list answered.
    #[error(transparent)]
    Unreachable(#[from] Unreachable),
    /// [`AppendOutcome::applied`] of an append that was not confirmed.
    #[error("{}", outcome_text(.0))]
    NotConfirmed(AppendOutcome),
    /// A failure of a call that is not retried at another node (a lookup's
    /// NOT_FOUND, for example).
    #[error("{}", describe(.0))]
    Status(Status),
}

fn outcome_text(o: &AppendOutcome) -> String {
    match o {
        AppendOutcome::Applied(a) => format!("applied at sequence {}", a.sequence),
        AppendOutcome::NotApplied { request_id, reason, go_to } => {
            let go = go_to.as_ref().map(|h| format!("; the holder is {} at {}", h.name, h.address)).unwrap_or_default();
            format!("not applied (request id {request_id}): {reason}{go}")
        }
        AppendOutcome::Unknown { request_id, reason, attempts } => format!(
            "outcome unknown after {attempts} attempts: {reason}; retry with --request-id {request_id}, which applies at most once"
        ),
    }
}

/// Builds a [`Client`].
pub struct ClientBuilder {
    nodes: Nodes,
    options: Options,
    token: Option<String>,
    dial: Option<Dial>,
    start_at: usize,
}

impl ClientBuilder {
    /// Start at the node with this index in the list (default 0), so that
    /// many clients of one list spread over its nodes.
    pub fn start_at(mut self, index: usize) -> Self {
        self.start_at = index;
        self
    }

    /// Attempts, timeouts and routing ([`Options`]).
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    /// The client token (`[api] client_token` of the nodes).
    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// How to open a channel to an address (default: plaintext, lazy, with
    /// [`Options::connect_timeout`]).
    pub fn dial(mut self, dial: Dial) -> Self {
        self.dial = Some(dial);
        self
    }

    /// The client; an error only for a token no header can carry.
    pub fn build(self) -> Result<Client, Error> {
        let token = match self.token {
            Some(t) => Some(format!("Bearer {t}").parse().map_err(|_| Error::Refused {
                code: Code::InvalidArgument,
                message: "the token must be printable ASCII without spaces".into(),
            })?),
            None => None,
        };
        let connect_timeout = self.options.connect_timeout;
        let dial = self.dial.unwrap_or_else(|| {
            Arc::new(move |address: String| {
                Box::pin(async move {
                    Endpoint::from_shared(uri(&address))
                        .map(|e| boxed(e.connect_timeout(connect_timeout).connect_lazy()))
                        .map_err(|e| format!("{address}: {e}"))
                })
            })
        });
        let start_at = self.start_at % self.nodes.len();
        Ok(Client(Arc::new(Inner {
            nodes: self.nodes,
            options: self.options,
            auth: Auth(token),
            dial,
            channels: Mutex::default(),
            routes: Mutex::default(),
            current: AtomicUsize::new(start_at),
            map: Mutex::default(),
        })))
    }
}

/// A client of several nodes; cheap to clone (one shared state).
#[derive(Clone)]
pub struct Client(Arc<Inner>);

struct Inner {
    nodes: Nodes,
    options: Options,
    auth: Auth,
    dial: Dial,
    /// Channels by address, opened on first use.
    channels: Mutex<HashMap<String, BoxChannel>>,
    /// Stream → its holder's address, as `Route` or a not-applied answer said.
    routes: Mutex<HashMap<String, String>>,
    /// The index of the node asked when no holder is known.
    current: AtomicUsize,
    /// The assignment map appends are routed by, once one is started.
    map: Mutex<Option<tokio::sync::watch::Receiver<Arc<crate::Assignments>>>>,
}

/// Streams whose holder a client remembers, at most.
const ROUTES_KEPT: usize = 4096;

impl Client {
    /// A builder of a client of `nodes`, tried in order.
    pub fn builder(nodes: Nodes) -> ClientBuilder {
        ClientBuilder { nodes, options: Options::default(), token: None, dial: None, start_at: 0 }
    }

    /// A client with the default options, no token, plaintext.
    pub fn new(nodes: Nodes) -> Client {
        Client::builder(nodes).build().expect("no token to check")
    }

    /// The nodes it tries.
    pub fn nodes(&self) -> &Nodes {
        &self.0.nodes
    }

    /// Its options.
    pub fn options(&self) -> &Options {
        &self.0.options
    }

    /// A signed channel to `address`; the error means nothing was sent.
    pub async fn conn(&self, address: &str) -> Result<Conn, String> {
        let cached = self.0.channels.lock().expect("not poisoned").get(address).cloned();
        let channel = match cached {
            Some(c) => c,
            None => {
                let c = (self.0.dial)(address.to_string()).await?;
                self.0.channels.lock().expect("not poisoned").insert(address.to_string(), c.clone());
                c
            }
        };
        Ok(InterceptedService::new(channel, self.0.auth.clone()))
    }

    /// Forgets the channel to `address` (a broken one is dialled afresh).
    pub(crate) fn forget(&self, address: &str) {
        self.0.channels.lock().expect("not poisoned").remove(address);
    }

    fn current(&self) -> String {
        let n = self.0.nodes.addresses();
        n[self.0.current.load(Ordering::Relaxed) % n.len()].clone()
    }

    /// Moves on to the next node of the list (as after a failure there).
    pub fn move_on(&self) {
        self.next_node(&self.current());
    }

    /// Moves on from `failed` to the next node of the list.
    fn next_node(&self, failed: &str) {
        let n = self.0.nodes.addresses();
        let at = self.0.current.load(Ordering::Relaxed) % n.len();
        if n[at] == failed {
            let _ = self.0.current.compare_exchange(at, (at + 1) % n.len(), Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    fn backoff(&self, retry: u32) -> Duration {
        self.0.options.backoff.saturating_mul(1 << retry.min(5)).min(self.0.options.max_backoff)
    }

    /// Appends `payload` to `stream` under a fresh random request id.
    pub async fn append(&self, stream: &str, payload: &[u8]) -> Result<AppendOutcome, Error> {
        self.append_with_id(stream, &uuid::Uuid::new_v4().to_string(), payload).await
    }

    /// Appends under `request_id`: however many attempts it takes, the
    /// append applies at most once (a repeated id returns the first answer).
    pub async fn append_with_id(&self, stream: &str, request_id: &str, payload: &[u8]) -> Result<AppendOutcome, Error> {
        let request = proto::AppendRequest {
            stream: stream.to_string(),
            request_id: request_id.to_string(),
            payload: payload.to_vec(),
            forwarded: false,
        };
        let mut maybe_applied = false;
        // The holder the last not-applied answer named: the next attempt's target.
        let mut go_to: Option<Holder> = None;
        let mut named: Option<Holder> = None;
        // Only the first attempt asks `Route`: after a failure the holder
        // may be gone, and any node of the list waits for the takeover.
        let mut use_route = true;
        let mut last_reason = String::new();
        let mut pauses = 0u32;
        let attempts = self.0.options.attempts.max(1);
        for attempt in 1..=attempts {
            let routed = match go_to.take() {
                Some(h) => Some(h.address),
                None if use_route => self.route_of(stream).await,
                None => None,
            };
            let target = routed.clone().unwrap_or_else(|| self.current());
            let answer = match self.conn(&target).await {
                Ok(conn) => {
                    let mut r = Request::new(request.clone());
                    r.set_timeout(self.0.options.attempt_timeout);
                    JournalClient::new(conn).append(r).await.map_err(|s| classify(&s))
                }
                Err(e) => Err(Attempt::NotApplied { reason: format!("not sent: {e}"), holder: None }),
            };
            let failure = match answer {
                Ok(r) => {
                    let r = r.into_inner();
                    return Ok(AppendOutcome::Applied(Applied {
                        request_id: request_id.to_string(),
                        sequence: r.sequence,
                        epoch: r.epoch,
                        shard: r.shard,
                        holder: r.holder,
                        node: target,
                        attempts: attempt,
                    }));
                }
                Err(Attempt::Refused { code, message }) => return Err(Error::Refused { code, message }),
                Err(f) => f,
            };
            self.unroute(stream);
            use_route = false;
            match failure {
                Attempt::NotApplied { reason, holder } => {
                    last_reason = reason;
                    if let Some(h) = holder.filter(|h| h.address != target) {
                        // Follow the named holder at once.
                        named = Some(h.clone());
                        go_to = Some(h);
                        continue;
                    }
                }
                Attempt::Unknown(reason) => {
                    maybe_applied = true;
                    last_reason = reason;
                    self.forget(&target);
                }
                Attempt::Refused { .. } => unreachable!("returned above"),
            }
            if routed.is_none() {
                self.next_node(&target);
            }
            if attempt < attempts {
                tokio::time::sleep(self.backoff(pauses)).await;
                pauses += 1;
            }
        }
        Ok(if maybe_applied {
            AppendOutcome::Unknown { request_id: request_id.to_string(), reason: last_reason, attempts }
        } else {
            // Where to go next: the holder an answer named, or as the
            // cluster says now.
            let go_to = match named {
                Some(h) => Some(h),
                None => self.route_stream(stream).await.ok().and_then(holder_of),
            };
            AppendOutcome::NotApplied { request_id: request_id.to_string(), reason: last_reason, go_to }
        })
    }

    /// The holder address to send `stream`'s appends to, when routing is on
    /// and the cluster names one.
    async fn route_of(&self, stream: &str) -> Option<String> {
        if let Some(address) = self.mapped(stream) {
            return Some(address);
        }
        if !self.0.options.route {
            return None;
        }
        if let Some(a) = self.0.routes.lock().expect("not poisoned").get(stream) {
            return Some(a.clone());
        }
        let lease = self.route(&self.0.options.application, crate::stream_key(stream)).await.ok()?;
        let address = holder_of(lease)?.address;
        let mut routes = self.0.routes.lock().expect("not poisoned");
        if routes.len() >= ROUTES_KEPT {
            routes.clear();
        }
        routes.insert(stream.to_string(), address.clone());
        Some(address)
    }

    /// The holder address the assignment map names for `stream`, when this
    /// client follows a map that has one.
    fn mapped(&self, stream: &str) -> Option<String> {
        let map = self.0.map.lock().expect("not poisoned").clone()?;
        let assignments = map.borrow();
        let a = assignments.route(&self.0.options.application, crate::stream_key(stream))?;
        (!a.holder_address.is_empty()).then(|| a.holder_address.clone())
    }

    /// Starts following the whole assignment map (a `WatchAssignments`
    /// stream at the first node that answers, again after every break) and
    /// routes this client's appends by it from then on, with no `Route`
    /// call: each goes to the holder the map names, and to a node's forward
    /// only when the map is stale. Every clone of this client shares it;
    /// drop every clone of the map to stop. Needs a Tokio runtime.
    pub fn assignment_map(&self) -> crate::AssignmentMap {
        let map = crate::AssignmentMap::start(self.clone(), String::new());
        *self.0.map.lock().expect("not poisoned") = Some(map.subscribe());
        map
    }

    fn unroute(&self, stream: &str) {
        self.0.routes.lock().expect("not poisoned").remove(stream);
    }

    /// Runs an idempotent call at the current node, moving on to the next
    /// after a failure that may be the node's (unreachable, unavailable,
    /// timed out); every node is tried at least once.
    pub async fn any_node<T, F, Fut>(&self, mut call: F) -> Result<T, Error>
    where
        F: FnMut(Conn) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let tries = self.0.nodes.len().max(self.0.options.attempts as usize);
        let mut failures = Vec::new();
        for i in 0..tries {
            let address = self.current();
            let failure = match self.conn(&address).await {
                Ok(conn) => match call(conn).await {
                    Ok(t) => return Ok(t),
                    Err(s) => match classify(&s) {
                        Attempt::Refused { code, message } => return Err(Error::Refused { code, message }),
                        _ if !matches!(
                            s.code(),
                            Code::Unavailable | Code::Unknown | Code::DeadlineExceeded | Code::Cancelled
                        ) =>
                        {
                            return Err(Error::Status(s));
                        }
                        _ => {
                            self.forget(&address);
                            describe(&s)
                        }
                    },
                },
                Err(e) => e,
            };
            failures.push((address.clone(), failure));
            self.next_node(&address);
            if (i + 1) % self.0.nodes.len() == 0 && i + 1 < tries {
                tokio::time::sleep(self.backoff(i as u32)).await;
            }
        }
        Err(Error::Unreachable(Unreachable { failures }))
    }

    /// Which node holds the shard covering `key` of `application`, at which epoch.
    pub async fn route(&self, application: &str, key: u32) -> Result<proto::ShardLease, Error> {
        let request = proto::RouteRequest { application: application.to_string(), key };
        self.any_node(|c| {
            let r = request.clone();
            async move { OwnershipClient::new(c).route(r).await.map(tonic::Response::into_inner) }
        })
        .await
    }

    /// The lease of the shard `stream`'s appends go to.
    pub async fn route_stream(&self, stream: &str) -> Result<proto::ShardLease, Error> {
        self.route(&self.0.options.application, crate::stream_key(stream)).await
    }

    /// Reports load the application served since its previous report
    /// (`Ownership.ReportLoad`): counted with the node's appends, shown by
    /// `chitin cluster load`, given to the drain, rebalance and split
    /// policies. Sent to the current node (the one beside the application
    /// comes first in its list); a report retried after a failure may count
    /// twice, which a load estimate tolerates. `Refused` names the first bad
    /// sample. The number of samples counted.
    pub async fn report_load(&self, samples: Vec<proto::LoadSample>) -> Result<u32, Error> {
        let request = proto::ReportLoadRequest { samples };
        self.any_node(|c| {
            let r = request.clone();
            async move { OwnershipClient::new(c).report_load(r).await.map(|r| r.into_inner().counted) }
        })
        .await
    }

    /// `limit` entries of `stream` from sequence `from` (any node answers).
    pub async fn read(&self, stream: &str, from: u64, limit: u32) -> Result<proto::ReadResponse, Error> {
        let request = proto::ReadRequest { stream: stream.to_string(), from, limit };
        self.any_node(|c| {
            let r = request.clone();
            async move { JournalClient::new(c).read(r).await.map(tonic::Response::into_inner) }
        })
        .await
    }

    /// Watches the ownership events of the first node of the list that
    /// answers; see [`crate::OwnershipWatch`].
    pub fn watch_ownership(&self) -> crate::OwnershipWatch {
        crate::OwnershipWatch::new(self.clone(), false)
    }

    /// A watch that takes part in handoffs: the node answers DRAINING by
    /// waiting for [`crate::OwnershipWatch::released`] (or its
    /// `release_timeout_ms`) before it gives the shard away, serving the
    /// shard's writes meanwhile. Open it beside your node only, and answer
    /// every `Draining`.
    pub fn watch_ownership_acknowledging(&self) -> crate::OwnershipWatch {
        crate::OwnershipWatch::new(self.clone(), true)
    }
}

/// The holder a lease names, if it has one with an address.
fn holder_of(lease: proto::ShardLease) -> Option<Holder> {
    (!lease.holder_address.is_empty()).then_some(Holder { name: lease.holder, address: lease.holder_address })
}
