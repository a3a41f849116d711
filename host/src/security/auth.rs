//! The bearer tokens of the three gRPC planes and the metrics listener.
//!
//! | plane | services | token | the CLI sends |
//! |---|---|---|---|
//! | admin | `Admin` | `api.admin_token` | `CHITIN_ADMIN_TOKEN` |
//! | client | `Journal`, `Ownership`, `Coordination` | `api.client_token` (or the peer token) | `CHITIN_CLIENT_TOKEN` |
//! | peer | `Peer`, and `Journal.Append` with `forwarded = true` | `cluster.peer_token` | (nodes only) |
//!
//! Under TLS with `tls.peer_ca_file`, a caller whose certificate that CA
//! signed is a peer too, token or not: the client and peer planes accept it
//! ([`Guard::with_peer_ca`]), and the peer plane is closed to everyone else
//! even without a peer token.
//!
//! A plane without a token is open (the listeners are loopback unless every
//! plane has one, see [`super::exposure`]). The check is the first thing a
//! call meets ([`Gatekeeper`]): an unauthenticated caller costs no protocol
//! check, database read, decoding or log line (a summary is logged at most
//! every ten seconds). A standalone node's Peer plane is closed to everyone.
//!
//! Each token setting holds one token or several ([`Tokens`]): every one is
//! accepted, the first is sent. Each `…_token_file` (one token per line) is
//! read into its `…_token` at start ([`read_token_files`]) and again on
//! SIGHUP ([`Credentials::reload`]), so a token rotates without a restart:
//! the new one is accepted, then sent, then the old one dropped
//! (docs/security.md). Comparison is constant-time.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tonic::codegen::http;
use tonic::{Request, Status};

use arc_swap::ArcSwap;

use super::tls::PeerCa;
use crate::settings::{Settings, Tokens};

/// Compares without stopping at the first difference, so the time taken does
/// not tell a caller how much of a guess was right.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub use crate::settings::well_formed;

/// Why a token file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("cannot read `{key}` = {path}: {source}; create the file with the token, or unset `{key}`", path = .path.display())]
    Read { key: &'static str, path: PathBuf, source: std::io::Error },
    #[error(
        "`{key}` = {path} does not hold usable tokens: it must hold one token per line (the first is the one \
         sent; more during a rotation), each printable ASCII without spaces and at least {min} characters (blank \
         lines are ignored)",
        path = .path.display(),
        min = crate::redact::MIN_SECRET
    )]
    Malformed { key: &'static str, path: PathBuf },
    #[error("{first} and {second} hold the same token; each plane needs its own, or a holder of one could act as the other")]
    Shared { first: &'static str, second: &'static str },
}

/// The tokens of a token file's text: one per line, blank lines and
/// surrounding whitespace ignored, at least one, each [`well_formed`].
fn parse_tokens(text: &str) -> Option<Tokens> {
    let tokens: Vec<String> = text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect();
    (!tokens.is_empty() && tokens.iter().all(|t| well_formed(t))).then(|| Tokens::new(tokens))
}

/// The tokens of the token file at `path`, the setting `key`.
fn read_token(key: &'static str, path: &Path) -> Result<Tokens, TokenFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read { key, path: path.to_owned(), source })?;
    parse_tokens(&text).ok_or_else(|| TokenFileError::Malformed { key, path: path.to_owned() })
}

/// Reads every `…_token_file` into its `…_token` (the settings rules forbid
/// setting both), checks that no two planes share a token, and registers
/// every token with the redaction.
pub fn read_token_files(s: &mut Settings) -> Result<(), TokenFileError> {
    let slots: [(&'static str, &mut Option<Tokens>, &Option<PathBuf>); 4] = [
        ("api.admin_token_file", &mut s.api.admin_token, &s.api.admin_token_file),
        ("api.client_token_file", &mut s.api.client_token, &s.api.client_token_file),
        ("cluster.peer_token_file", &mut s.cluster.peer_token, &s.cluster.peer_token_file),
        ("metrics.auth_token_file", &mut s.metrics.auth_token, &s.metrics.auth_token_file),
    ];
    let mut seen: Vec<(&'static str, String)> = Vec::new();
    for (key, tokens, file) in slots {
        if let Some(path) = file {
            *tokens = Some(read_token(key, path)?);
        }
        let name = key.trim_end_matches("_file");
        for t in tokens.iter().flat_map(Tokens::all) {
            super::redact::register_secret(t);
            // The metrics token guards only reads; sharing it with a gRPC
            // plane is still one secret in two places, so it is refused alike.
            if let Some((first, _)) =
                seen.iter().find(|(other_name, other)| *other_name != name && constant_time_eq(other.as_bytes(), t.as_bytes()))
            {
                return Err(TokenFileError::Shared { first, second: name });
            }
            seen.push((name, t.to_owned()));
        }
    }
    Ok(())
}

/// Whether `given` is one of `accepted`. Every candidate is compared, so
/// the time taken does not tell which one matched.
fn accepts(accepted: &[Arc<str>], given: &str) -> bool {
    accepted.iter().fold(false, |hit, t| constant_time_eq(t.as_bytes(), given.as_bytes()) | hit)
}

fn arcs(tokens: &Option<Tokens>) -> Vec<Arc<str>> {
    tokens.iter().flat_map(Tokens::all).map(|t| Arc::from(t.as_str())).collect()
}

/// A group of services sharing one token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plane {
    Admin,
    Client,
    Peer,
}

impl Plane {
    fn name(self) -> &'static str {
        match self {
            Plane::Admin => "admin",
            Plane::Client => "client",
            Plane::Peer => "peer",
        }
    }

    /// The setting holding the plane's token, as messages name it.
    pub fn setting(self) -> &'static str {
        match self {
            Plane::Admin => "[api] admin_token",
            Plane::Client => "[api] client_token",
            Plane::Peer => "[cluster] peer_token",
        }
    }

    /// What a caller without a token is told.
    pub fn missing(self) -> String {
        let how = match self {
            Plane::Admin => "set CHITIN_ADMIN_TOKEN".to_owned(),
            Plane::Client => "set CHITIN_CLIENT_TOKEN".to_owned(),
            Plane::Peer => "only the cluster's nodes call it, each with the same [cluster] peer_token or a certificate of the \
                 cluster CA ([tls] peer_ca_file)"
                .to_owned(),
        };
        format!("the {} plane needs `authorization: Bearer <{}>`; {how}", self.name(), self.setting())
    }

    /// What a caller with another token is told.
    pub fn wrong(self) -> String {
        let how = match self {
            Plane::Admin => "set CHITIN_ADMIN_TOKEN to the node's [api] admin_token",
            Plane::Client => "set CHITIN_CLIENT_TOKEN to the node's [api] client_token",
            Plane::Peer => "every node of the cluster must have the same [cluster] peer_token",
        };
        format!("wrong {} token; {how}", self.name())
    }
}

/// Who a request authenticated as; the gRPC listener's authentication puts it
/// in the request's extensions for the handlers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// The plane has no token and the caller showed none that counts.
    Anonymous,
    /// With the plane's own token.
    Plane(Plane),
    /// With the cluster's peer token, or a certificate of the cluster CA:
    /// another node.
    Peer,
}

impl Caller {
    /// The caller of `request` (anonymous when no guard ran).
    pub fn of<T>(request: &Request<T>) -> Caller {
        request.extensions().get::<Caller>().copied().unwrap_or(Caller::Anonymous)
    }
}

/// The bearer token of `metadata`, if it has one.
fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "))
}

/// The server side of one plane: refuses a call unless it carries the
/// plane's token (or, where accepted, the peer token or a certificate of the
/// cluster CA); says who the caller is. [`Gatekeeper`] picks the plane.
#[derive(Clone, Debug)]
pub struct Guard {
    plane: Plane,
    /// The plane's tokens (none: the plane is open).
    tokens: Vec<Arc<str>>,
    /// The peer tokens, where they are accepted too.
    peer: Vec<Arc<str>>,
    /// The cluster CA, where a node certificate is accepted (the client and
    /// peer planes).
    peer_ca: Option<PeerCa>,
}

impl Guard {
    /// The guard of `plane` with the tokens of `s` (after [`read_token_files`]).
    pub fn new(plane: Plane, s: &Settings) -> Guard {
        let peer = arcs(&s.cluster.peer_token);
        match plane {
            Plane::Admin => Guard { plane, tokens: arcs(&s.api.admin_token), peer: Vec::new(), peer_ca: None },
            Plane::Client => Guard { plane, tokens: arcs(&s.api.client_token), peer, peer_ca: None },
            Plane::Peer => Guard { plane, tokens: peer.clone(), peer, peer_ca: None },
        }
    }

    /// The same guard, taking a certificate of the cluster CA as a peer's
    /// credential where the plane accepts peers (not on the admin plane).
    pub fn with_peer_ca(mut self, peer_ca: Option<PeerCa>) -> Guard {
        if self.plane != Plane::Admin {
            self.peer_ca = peer_ca;
        }
        self
    }

    /// Whether a caller without any credential gets through.
    fn open(&self) -> bool {
        self.tokens.is_empty() && !(self.plane == Plane::Peer && self.peer_ca.is_some())
    }

    /// Who `metadata` authenticates as, or the refusal; `cluster_certificate`
    /// says (asked only when it matters) whether the caller's TLS
    /// certificate is one of the cluster CA.
    pub fn check(&self, headers: &http::HeaderMap, cluster_certificate: impl FnOnce() -> bool) -> Result<Caller, Status> {
        let given = bearer(headers);
        if given.is_some_and(|g| accepts(&self.peer, g)) || (self.peer_ca.is_some() && cluster_certificate()) {
            return Ok(Caller::Peer);
        }
        match given {
            Some(g) if accepts(&self.tokens, g) => Ok(Caller::Plane(self.plane)),
            // An open plane ignores a stray token.
            _ if self.open() => Ok(Caller::Anonymous),
            Some(_) => Err(Status::unauthenticated(self.plane.wrong())),
            None => Err(Status::unauthenticated(self.plane.missing())),
        }
    }
}

/// The plane of a gRPC method path: `Admin` and `Peer` by their service,
/// none for the standard health service (probes carry no token; it tells
/// only whether the node serves), everything else (`Journal`, `Ownership`,
/// `Coordination`, and unknown paths, so that probing them needs a token
/// too) the client plane.
pub fn plane_of(path: &str) -> Option<Plane> {
    if path.starts_with("/chitin.v1.Admin/") {
        Some(Plane::Admin)
    } else if path.starts_with("/chitin.v1.Peer/") {
        Some(Plane::Peer)
    } else if path.starts_with("/grpc.health.v1.Health/") {
        None
    } else {
        Some(Plane::Client)
    }
}

/// The one check at the door of the gRPC listener, before anything else a
/// call could cost (the protocol check and its database read, decoding,
/// logging): the [`Guard`] of the call's plane, and the Peer plane closed on
/// a standalone node, which has no peers.
#[derive(Clone, Debug)]
pub struct Gatekeeper {
    admin: Guard,
    client: Guard,
    peer: Guard,
    standalone: bool,
    /// The cluster CA, when a node certificate makes a caller a peer.
    peer_ca: Option<PeerCa>,
}

impl Gatekeeper {
    /// The guards of `s` (after [`read_token_files`]); `peer_ca` makes a
    /// caller with a certificate of the cluster CA a peer.
    pub fn new(s: &Settings, peer_ca: Option<PeerCa>) -> Gatekeeper {
        let guard = |plane| Guard::new(plane, s).with_peer_ca(peer_ca.clone());
        Gatekeeper {
            admin: guard(Plane::Admin),
            client: guard(Plane::Client),
            peer: guard(Plane::Peer),
            standalone: !s.cluster.enabled,
            peer_ca,
        }
    }

    /// Whether `chain` (the caller's TLS certificates, leaf first) is a
    /// node certificate of the cluster CA.
    pub fn verifies(&self, chain: Option<&[rustls::pki_types::CertificateDer<'static>]>) -> bool {
        self.peer_ca.as_ref().zip(chain).is_some_and(|(ca, chain)| ca.verifies(chain))
    }

    /// Who a call to `path` with `metadata` is, or its refusal;
    /// `cluster_certificate` as in [`Guard::check`].
    pub fn check(
        &self,
        path: &str,
        headers: &http::HeaderMap,
        cluster_certificate: impl FnOnce() -> bool,
    ) -> Result<Caller, Status> {
        match plane_of(path) {
            None => Ok(Caller::Anonymous),
            Some(Plane::Peer) if self.standalone => Err(Status::permission_denied(
                "this node runs standalone ([cluster] enabled = false): it has no peers, and its Peer plane is closed",
            )),
            Some(Plane::Admin) => self.admin.check(headers, cluster_certificate),
            Some(Plane::Client) => self.client.check(headers, cluster_certificate),
            Some(Plane::Peer) => self.peer.check(headers, cluster_certificate),
        }
    }
}

/// The tokens a node checks and sends, as read now: from the settings at
/// start, and again from the token files on each [`Credentials::reload`]
/// (SIGHUP). Every call takes the set current when it arrives, so a reload
/// neither drops a connection nor fails a call in flight.
pub struct Credentials {
    /// The settings the node started with: the token files a reload reads,
    /// and the inline tokens, which only a restart changes.
    settings: Settings,
    peer_ca: Option<PeerCa>,
    current: ArcSwap<Accepted>,
}

/// One generation of [`Credentials`].
#[derive(Debug)]
pub struct Accepted {
    /// The gRPC listener's check.
    pub gatekeeper: Gatekeeper,
    /// `/health`, `/metrics` and the status page's tokens (none: open).
    pub metrics: Vec<Arc<str>>,
    /// The peer token this node sends on node-to-node calls: the first.
    pub peer: Option<Arc<str>>,
}

impl Accepted {
    fn of(s: &Settings, peer_ca: Option<PeerCa>) -> Accepted {
        Accepted {
            gatekeeper: Gatekeeper::new(s, peer_ca),
            metrics: arcs(&s.metrics.auth_token),
            peer: s.cluster.peer_token.as_ref().and_then(Tokens::current).map(Arc::from),
        }
    }

    /// Whether `given` is one of the metrics tokens.
    pub fn metrics_accepts(&self, given: &str) -> bool {
        accepts(&self.metrics, given)
    }

    /// How many tokens each plane accepts, for the log (never the tokens).
    fn counts(&self) -> String {
        let g = &self.gatekeeper;
        format!(
            "admin {}, client {}, peer {}, metrics {}",
            g.admin.tokens.len(),
            g.client.tokens.len(),
            g.peer.tokens.len(),
            self.metrics.len()
        )
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("current", &self.current.load().counts()).finish_non_exhaustive()
    }
}

impl Credentials {
    /// The credentials of `s` (after [`read_token_files`]); `peer_ca` makes
    /// a caller with a certificate of the cluster CA a peer.
    pub fn new(s: &Settings, peer_ca: Option<PeerCa>) -> Credentials {
        let current = ArcSwap::from_pointee(Accepted::of(s, peer_ca.clone()));
        Credentials { settings: s.clone(), peer_ca, current }
    }

    /// The set current now.
    pub fn current(&self) -> Arc<Accepted> {
        self.current.load_full()
    }

    /// Reads every token file again and, if all of them are good, makes
    /// their tokens the current set; otherwise keeps the current set and
    /// says what was wrong. Returns the accepted counts, for the log.
    pub fn reload(&self) -> Result<String, TokenFileError> {
        let mut s = self.settings.clone();
        read_token_files(&mut s)?;
        let next = Accepted::of(&s, self.peer_ca.clone());
        let counts = next.counts();
        self.current.store(Arc::new(next));
        Ok(counts)
    }
}

/// The environment variable with a plane's token for the CLI.
pub fn token_env(plane: Plane) -> &'static str {
    match plane {
        Plane::Admin => "CHITIN_ADMIN_TOKEN",
        Plane::Client => "CHITIN_CLIENT_TOKEN",
        Plane::Peer => "CHITIN_PEER_TOKEN",
    }
}

/// The plane's token from the environment, when set and not empty.
pub fn token_from_env(plane: Plane) -> Option<String> {
    std::env::var(token_env(plane)).ok().filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_holds_one_token_per_line() {
        let cases: [(&str, Option<&[&str]>); 10] = [
            ("tok1\n", Some(&["tok1"])),
            ("tok1", Some(&["tok1"])),
            ("  new-2 \r\n\n old-1\n", Some(&["new-2", "old-1"])),
            ("\n\ntok1\n\n", Some(&["tok1"])),
            ("", None),
            ("\n  \n", None),
            ("two words\n", None),
            ("okay\nnon-ascii-é\n", None),
            // Too short to be masked in the logs, alone or in a rotation.
            ("abc\n", None),
            ("new-token\nold\n", None),
        ];
        for (text, want) in cases {
            let parsed = parse_tokens(text);
            let got: Option<Vec<&str>> = parsed.as_ref().map(|t| t.all().iter().map(String::as_str).collect());
            assert_eq!(got.as_deref(), want, "{text:?}");
        }
    }

    fn meta(authorization: Option<&str>) -> http::HeaderMap {
        let mut m = http::HeaderMap::new();
        if let Some(a) = authorization {
            m.insert("authorization", a.parse().unwrap());
        }
        m
    }

    fn settings() -> Settings {
        let mut s = Settings::default();
        s.api.admin_token = Some("admin-tok".into());
        s.api.client_token = Some("client-tok".into());
        s.cluster.peer_token = Some("peer-tok".into());
        s
    }

    #[test]
    fn each_plane_takes_its_token_and_the_client_plane_the_peer_token_too() {
        let s = settings();
        let (admin, client, peer) = (Guard::new(Plane::Admin, &s), Guard::new(Plane::Client, &s), Guard::new(Plane::Peer, &s));
        let b = |t: &str| meta(Some(&format!("Bearer {t}")));
        assert_eq!(admin.check(&b("admin-tok"), || false).unwrap(), Caller::Plane(Plane::Admin));
        assert_eq!(client.check(&b("client-tok"), || false).unwrap(), Caller::Plane(Plane::Client));
        assert_eq!(client.check(&b("peer-tok"), || false).unwrap(), Caller::Peer);
        assert_eq!(peer.check(&b("peer-tok"), || false).unwrap(), Caller::Peer);
        for (guard, token) in
            [(&admin, "peer-tok"), (&admin, "client-tok"), (&peer, "client-tok"), (&peer, "admin-tok"), (&client, "admin-tok")]
        {
            let e = guard.check(&b(token), || false).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{token}");
            assert!(e.message().starts_with("wrong "), "{}", e.message());
        }
        let e = client.check(&meta(None), || false).unwrap_err();
        assert_eq!(e.message(), Plane::Client.missing());
        assert!(e.message().contains("CHITIN_CLIENT_TOKEN"));
        // `Bearer` without the space is no bearer token at all.
        assert_eq!(admin.check(&meta(Some("admin-tok")), || false).unwrap_err().message(), Plane::Admin.missing());
    }

    #[test]
    fn an_open_plane_ignores_stray_tokens_but_still_knows_a_peer() {
        let mut s = Settings::default();
        s.cluster.peer_token = Some("peer-tok".into());
        let client = Guard::new(Plane::Client, &s);
        assert_eq!(client.check(&meta(None), || false).unwrap(), Caller::Anonymous);
        assert_eq!(client.check(&meta(Some("Bearer nope")), || false).unwrap(), Caller::Anonymous);
        assert_eq!(client.check(&meta(Some("Bearer peer-tok")), || false).unwrap(), Caller::Peer);
        assert_eq!(Guard::new(Plane::Admin, &s).check(&meta(Some("Bearer peer-tok")), || false).unwrap(), Caller::Anonymous);
    }

    /// A CA file of a fresh CA (the guard only needs it to exist; which
    /// certificates it verifies is `tests/tls.rs`' business).
    fn peer_ca(dir: &Path) -> PeerCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let path = dir.join("ca.pem");
        std::fs::write(&path, params.self_signed(&key).unwrap().pem()).unwrap();
        PeerCa::load(&path).unwrap()
    }

    #[test]
    fn a_cluster_certificate_makes_a_peer_except_on_the_admin_plane() {
        let dir = tempfile::tempdir().unwrap();
        let ca = peer_ca(dir.path());
        let s = Settings::default();
        let peer = Guard::new(Plane::Peer, &s).with_peer_ca(Some(ca.clone()));
        let client = Guard::new(Plane::Client, &s).with_peer_ca(Some(ca.clone()));
        let admin = Guard::new(Plane::Admin, &s).with_peer_ca(Some(ca));
        assert_eq!(peer.check(&meta(None), || true).unwrap(), Caller::Peer);
        assert_eq!(client.check(&meta(None), || true).unwrap(), Caller::Peer);
        assert_eq!(admin.check(&meta(None), || true).unwrap(), Caller::Anonymous, "a node certificate is no admin credential");
        // Without the certificate the peer plane is closed, token or not.
        let e = peer.check(&meta(None), || false).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(e.message().contains("[tls] peer_ca_file"), "{}", e.message());
        assert_eq!(client.check(&meta(None), || false).unwrap(), Caller::Anonymous, "the client plane has no token here");
        // The certificate is looked at only when no peer token decided.
        let mut s = Settings::default();
        s.cluster.peer_token = Some("peer-tok".into());
        let peer = Guard::new(Plane::Peer, &s).with_peer_ca(Some(peer_ca(dir.path())));
        assert_eq!(peer.check(&meta(Some("Bearer peer-tok")), || panic!("not asked")).unwrap(), Caller::Peer);
    }

    #[test]
    fn the_admin_messages_are_the_documented_ones() {
        assert_eq!(
            Plane::Admin.missing(),
            "the admin plane needs `authorization: Bearer <[api] admin_token>`; set CHITIN_ADMIN_TOKEN"
        );
        assert_eq!(Plane::Admin.wrong(), "wrong admin token; set CHITIN_ADMIN_TOKEN to the node's [api] admin_token");
    }

    #[test]
    fn every_token_of_a_list_is_accepted_and_the_first_is_sent() {
        let mut s = Settings::default();
        s.api.client_token = Some(Tokens::new(vec!["client-new".into(), "client-old".into()]));
        s.cluster.peer_token = Some(Tokens::new(vec!["peer-new".into(), "peer-old".into()]));
        let client = Guard::new(Plane::Client, &s);
        let b = |t: &str| meta(Some(&format!("Bearer {t}")));
        for (token, caller) in [
            ("client-new", Caller::Plane(Plane::Client)),
            ("client-old", Caller::Plane(Plane::Client)),
            ("peer-new", Caller::Peer),
            ("peer-old", Caller::Peer),
        ] {
            assert_eq!(client.check(&b(token), || false).unwrap(), caller, "{token}");
        }
        assert!(client.check(&b("client-older"), || false).is_err());
        assert_eq!(Credentials::new(&s, None).current().peer.as_deref(), Some("peer-new"));
    }

    #[test]
    fn a_reload_takes_the_files_tokens_or_keeps_the_current_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.token");
        std::fs::write(&path, "old-token\n").unwrap();
        let mut s = Settings::default();
        s.api.client_token_file = Some(path.clone());
        read_token_files(&mut s).unwrap();
        let credentials = Credentials::new(&s, None);
        let passes = |t: &str| {
            let given = meta(Some(&format!("Bearer {t}")));
            credentials.current().gatekeeper.check("/chitin.v1.Journal/Append", &given, || false).is_ok()
        };
        assert!(passes("old-token") && !passes("new-token"));

        std::fs::write(&path, "new-token\n\n  old-token  \n").unwrap();
        assert_eq!(credentials.reload().unwrap(), "admin 0, client 2, peer 0, metrics 0");
        assert!(passes("new-token") && passes("old-token"));

        std::fs::write(&path, "new-token\n").unwrap();
        credentials.reload().unwrap();
        assert!(passes("new-token") && !passes("old-token"));

        for bad in ["", "two words\n"] {
            std::fs::write(&path, bad).unwrap();
            let e = credentials.reload().unwrap_err().to_string();
            assert!(e.contains("api.client_token_file") && e.contains("one token per line"), "{e}");
            assert!(passes("new-token"), "a bad file took the tokens in use away");
        }
    }

    #[test]
    fn token_files_are_read_trimmed_checked_and_not_shared() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let mut s = Settings::default();
        s.api.client_token_file = Some(file("client", "from-a-file-1\n"));
        read_token_files(&mut s).unwrap();
        assert_eq!(s.api.client_token, Some("from-a-file-1".into()));

        let mut s = Settings::default();
        s.api.admin_token_file = Some(file("bad", "two words\n"));
        let e = read_token_files(&mut s).unwrap_err().to_string();
        assert!(e.contains("api.admin_token_file") && e.contains("printable ASCII"), "{e}");

        let mut s = Settings::default();
        s.api.admin_token_file = Some(dir.path().join("absent"));
        let e = read_token_files(&mut s).unwrap_err().to_string();
        assert!(e.contains("cannot read `api.admin_token_file`"), "{e}");

        let mut s = Settings::default();
        s.api.client_token = Some("same-token".into());
        s.cluster.peer_token_file = Some(file("peer", "same-token"));
        let e = read_token_files(&mut s).unwrap_err().to_string();
        assert!(e.contains("api.client_token and cluster.peer_token hold the same token"), "{e}");
    }
}
