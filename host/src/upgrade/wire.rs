//! The protocol version on every call: what a caller stamps on its
//! requests, and how a node judges it.
//!
//! A caller sends the range of protocols it speaks, `chitin-protocol`
//! (highest) and `chitin-protocol-min` (lowest), and its `chitin-version`.
//! A node serves a call when that range overlaps its own window; the call
//! then runs at the highest protocol both speak. A call without the headers
//! comes from 0.1.0 (or an application's plain gRPC client): protocol 1.

use tonic::codegen::http;
use tonic::metadata::{Ascii, AsciiMetadataValue, MetadataMap, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status};

use super::version::{BINARY_VERSION, MIN_PROTOCOL, PROTOCOL};

/// The highest protocol the caller speaks.
pub const PROTOCOL_HEADER: &str = "chitin-protocol";
/// The lowest protocol the caller speaks (absent: the same as the highest).
pub const PROTOCOL_MIN_HEADER: &str = "chitin-protocol-min";
/// The caller's chitin version, for messages.
pub const VERSION_HEADER: &str = "chitin-version";

/// Stamps this binary's protocol range and version on a request.
pub fn stamp(metadata: &mut MetadataMap) {
    metadata.insert(PROTOCOL_HEADER, AsciiMetadataValue::from(PROTOCOL));
    metadata.insert(PROTOCOL_MIN_HEADER, AsciiMetadataValue::from(MIN_PROTOCOL));
    metadata.insert(VERSION_HEADER, AsciiMetadataValue::from_static(BINARY_VERSION));
}

/// The client-side interceptor that stamps every call.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stamp;

impl tonic::service::Interceptor for Stamp {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        stamp(request.metadata_mut());
        Ok(request)
    }
}

/// A channel whose every call is stamped.
pub type Versioned = InterceptedService<Channel, Stamp>;

/// `channel`, stamping every call.
pub fn versioned(channel: Channel) -> Versioned {
    InterceptedService::new(channel, Stamp)
}

/// What a caller says it speaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub min: u32,
    pub max: u32,
    pub version: Option<String>,
    /// Whether it sent the protocol header at all (a chitin ≥ 0.2 binary).
    pub stamped: bool,
}

impl Caller {
    /// A 0.1.0 caller: no headers.
    pub fn unstamped() -> Caller {
        Caller { min: 1, max: 1, version: None, stamped: false }
    }

    /// The caller of a request with these HTTP headers.
    pub fn from_headers(headers: &http::HeaderMap) -> Result<Caller, Status> {
        let text = |name: &str| headers.get(name).map(|v| v.to_str().unwrap_or("<not ASCII>").to_string());
        let number = |name: &str, value: String| {
            value.trim().parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                Status::invalid_argument(format!("metadata `{name}: {value}` is not a protocol number (a positive integer)"))
            })
        };
        let Some(max) = text(PROTOCOL_HEADER) else {
            return Ok(Caller::unstamped());
        };
        let max = number(PROTOCOL_HEADER, max)?;
        let min = match text(PROTOCOL_MIN_HEADER) {
            Some(v) => number(PROTOCOL_MIN_HEADER, v)?,
            None => max,
        };
        if min > max {
            return Err(Status::invalid_argument(format!(
                "metadata `{PROTOCOL_MIN_HEADER}: {min}` is above `{PROTOCOL_HEADER}: {max}`"
            )));
        }
        Ok(Caller { min, max, version: text(VERSION_HEADER), stamped: true })
    }

    fn describe(&self) -> String {
        let version = match &self.version {
            Some(v) => format!("chitin {v}"),
            None if self.stamped => "a chitin of unknown version".to_string(),
            None => "a caller without protocol metadata (chitin 0.1.0 or a plain gRPC client)".to_string(),
        };
        format!("{version}, speaking protocol {}", range(self.min, self.max))
    }
}

fn range(min: u32, max: u32) -> String {
    if min == max { min.to_string() } else { format!("{min}..={max}") }
}

/// The protocols a node serves a call with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub min: u32,
    pub max: u32,
}

impl Window {
    /// Everything this binary serves.
    pub const FULL: Window = Window { min: MIN_PROTOCOL, max: PROTOCOL };
}

/// The protocol a call runs at, or FAILED_PRECONDITION naming both sides'
/// versions and what to do.
pub fn judge(caller: &Caller, window: Window) -> Result<u32, Status> {
    if caller.max >= window.min && caller.min <= window.max {
        return Ok(caller.max.min(window.max));
    }
    let advice = if caller.max < window.min {
        "the caller is older than this cluster allows: upgrade it to this node's release (the cluster was finalized past it, or it is more than one release behind)"
    } else {
        "this node is older than the caller: upgrade this node (one release at a time), or run a caller of this node's release"
    };
    Err(Status::failed_precondition(format!(
        "protocol mismatch: the caller is {}; this node runs chitin {BINARY_VERSION} and serves protocol {} here; {advice}",
        caller.describe(),
        range(window.min, window.max),
    )))
}

/// The client side of every chitin call (the CLI, the rollout executor,
/// node-to-node calls): this binary's protocol metadata ([`stamp`]), and
/// `authorization: Bearer <token>` when a token is set (the server checks
/// it first, `security::auth`).
/// Clones share the token, so [`BearerAuth::set`] changes what every
/// channel made with one sends from its next call on (a live rotation).
#[derive(Clone, Debug, Default)]
pub struct BearerAuth(std::sync::Arc<arc_swap::ArcSwapOption<MetadataValue<Ascii>>>);

impl BearerAuth {
    pub fn new(token: Option<&str>) -> BearerAuth {
        let auth = BearerAuth::default();
        auth.set(token);
        auth
    }

    /// Sends `token` from now on (none: no `authorization`).
    pub fn set(&self, token: Option<&str>) {
        self.0.store(token.and_then(|t| format!("Bearer {t}").parse().ok()).map(std::sync::Arc::new));
    }
}

impl tonic::service::Interceptor for BearerAuth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        stamp(req.metadata_mut());
        if let Some(v) = self.0.load().as_deref() {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
        pairs.iter().map(|(k, v)| (http::HeaderName::from_static(k), http::HeaderValue::from_static(v))).collect()
    }

    #[test]
    fn callers_are_read_from_their_headers() {
        assert_eq!(Caller::from_headers(&headers(&[])).unwrap(), Caller::unstamped());
        let c = Caller::from_headers(&headers(&[
            ("chitin-protocol", "3"),
            ("chitin-protocol-min", "2"),
            ("chitin-version", "0.3.1"),
        ]))
        .unwrap();
        assert_eq!(c, Caller { min: 2, max: 3, version: Some("0.3.1".into()), stamped: true });
        assert_eq!(Caller::from_headers(&headers(&[("chitin-protocol", "2")])).unwrap().min, 2);
        for bad in [
            &[("chitin-protocol", "two")][..],
            &[("chitin-protocol", "0")],
            &[("chitin-protocol", "2"), ("chitin-protocol-min", "3")],
        ] {
            let e = Caller::from_headers(&headers(bad)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad:?}: {e:?}");
            assert!(e.message().contains("chitin-protocol"), "{e:?}");
        }
    }

    #[test]
    fn this_binary_stamps_what_it_speaks() {
        let mut md = MetadataMap::new();
        stamp(&mut md);
        let caller = Caller::from_headers(&md.into_headers()).unwrap();
        assert_eq!((caller.min, caller.max, caller.version.as_deref()), (MIN_PROTOCOL, PROTOCOL, Some(BINARY_VERSION)));
    }

    #[test]
    fn overlapping_ranges_are_served_at_the_highest_common_protocol() {
        let w = |min, max| Window { min, max };
        let c = |min, max| Caller { min, max, version: Some("x".into()), stamped: true };
        assert_eq!(judge(&Caller::unstamped(), w(1, 2)).ok(), Some(1));
        assert_eq!(judge(&c(1, 2), w(1, 2)).ok(), Some(2));
        assert_eq!(judge(&c(2, 3), w(1, 2)).ok(), Some(2), "the next release talks to this one");
        assert_eq!(judge(&c(1, 2), w(2, 2)).ok(), Some(2), "a 0.2 caller in a finalized cluster");
        let old = judge(&Caller::unstamped(), w(2, 2)).unwrap_err();
        assert_eq!(old.code(), tonic::Code::FailedPrecondition);
        assert!(old.message().contains("chitin 0.1.0") && old.message().contains(BINARY_VERSION), "{old:?}");
        assert!(old.message().contains("upgrade it"), "{old:?}");
        let new = judge(&Caller { min: 3, max: 4, version: Some("0.4.0".into()), stamped: true }, w(1, 2)).unwrap_err();
        assert!(
            new.message().contains("chitin 0.4.0, speaking protocol 3..=4") && new.message().contains("upgrade this node"),
            "{new:?}"
        );
    }
}
