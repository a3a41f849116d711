//! What one failed append attempt means, read from the status's code and
//! the `chitin-outcome` trailers ([`crate::proto::outcome`]): pure, so the
//! client, the node's forwarding and the fault suite judge it alike.

use tonic::{Code, Status};

use crate::proto::outcome as keys;

/// A shard's holder as a not-applied answer (or a route lookup) names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its node name.
    pub name: String,
    /// Its gRPC address: send the same request there.
    pub address: String,
}

/// One failed attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// Certainly not committed: the node said so, or the request never left
    /// (connection refused). Retry anywhere with the same request id;
    /// `holder` is where to go, when the node knew it.
    NotApplied {
        /// Why, in words.
        reason: String,
        /// The shard's holder, when the node named it.
        holder: Option<Holder>,
    },
    /// May have committed (the node said unknown, the call timed out, the
    /// connection broke): retry with the same request id, which applies at
    /// most once.
    Unknown(String),
    /// Refused before it ran, for a reason a retry does not change (invalid
    /// request, a request id applied before with another payload, missing or
    /// wrong token, no common protocol).
    Refused {
        /// The gRPC status code.
        code: Code,
        /// The node's message: what was wrong.
        message: String,
    },
}

/// The meaning of a failed append's `status`.
pub fn classify(status: &Status) -> Attempt {
    let meta = status.metadata();
    let get = |key: &str| meta.get(key).and_then(|v| v.to_str().ok()).map(str::to_owned);
    match get(keys::KEY).as_deref() {
        Some(keys::NOT_APPLIED) => {
            let holder = match (get(keys::HOLDER), get(keys::HOLDER_ADDRESS)) {
                (Some(name), Some(address)) if !address.is_empty() => Some(Holder { name, address }),
                _ => None,
            };
            return Attempt::NotApplied { reason: status.message().to_string(), holder };
        }
        Some(keys::UNKNOWN) => return Attempt::Unknown(status.message().to_string()),
        _ => {}
    }
    match status.code() {
        Code::InvalidArgument
        | Code::Unauthenticated
        | Code::PermissionDenied
        | Code::FailedPrecondition
        | Code::AlreadyExists => Attempt::Refused { code: status.code(), message: status.message().to_string() },
        _ if never_sent(status) => Attempt::NotApplied { reason: format!("not sent: {}", describe(status)), holder: None },
        _ => Attempt::Unknown(describe(status)),
    }
}

/// Whether the call failed before the request left this process: the
/// connection was refused or the address is not available, so nothing ran.
pub fn never_sent(status: &Status) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(io.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::AddrNotAvailable)
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// A status as one line, with its transport cause (tonic's message alone
/// says only "transport error").
pub fn describe(status: &Status) -> String {
    let mut text = format!("{:?}: {}", status.code(), status.message());
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = source {
        text.push_str(&format!(": {e}"));
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(status: Status, pairs: &[(&'static str, &str)]) -> Status {
        let mut s = status;
        for (k, v) in pairs {
            s.metadata_mut().insert(*k, v.parse().unwrap());
        }
        s
    }

    #[test]
    fn the_trailers_decide_not_the_code() {
        let s = with(
            Status::unavailable("not applied: x"),
            &[(keys::KEY, keys::NOT_APPLIED), (keys::HOLDER, "node-02"), (keys::HOLDER_ADDRESS, "127.0.0.1:7")],
        );
        assert_eq!(
            classify(&s),
            Attempt::NotApplied {
                reason: "not applied: x".into(),
                holder: Some(Holder { name: "node-02".into(), address: "127.0.0.1:7".into() })
            }
        );
        let s = with(Status::unavailable("no holder"), &[(keys::KEY, keys::NOT_APPLIED)]);
        assert!(matches!(classify(&s), Attempt::NotApplied { holder: None, .. }));
        let s = with(Status::unknown("db"), &[(keys::KEY, keys::UNKNOWN)]);
        assert_eq!(classify(&s), Attempt::Unknown("db".into()));
    }

    #[test]
    fn without_trailers_only_a_refusal_is_certain() {
        // UNAVAILABLE without the trailer may come from a broken connection
        // after the request was sent: it may have committed.
        assert!(matches!(classify(&Status::unavailable("transport error")), Attempt::Unknown(_)));
        assert!(matches!(classify(&Status::deadline_exceeded("timeout")), Attempt::Unknown(_)));
        for s in [Status::invalid_argument("bad"), Status::unauthenticated("token"), Status::permission_denied("p")] {
            assert!(matches!(classify(&s), Attempt::Refused { .. }), "{s:?}");
        }
    }
}
