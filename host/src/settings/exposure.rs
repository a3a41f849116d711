//! Safe defaults: a listener other hosts can reach serves only authenticated
//! planes, unless the operator says otherwise in so many words
//! (`api.insecure_listen = true`).
//!
//! Every listener defaults to loopback. A non-loopback `api.listen` needs a
//! token on each plane it serves (admin, client, and in cluster mode peer);
//! a non-loopback `metrics.listen` needs `metrics.auth_token` (`/readyz`
//! stays open for load balancers either way). Mutual TLS guards both
//! instead (`[tls]` with `client_ca_file`): only holders of a certificate of
//! the configured CAs can connect at all. TLS without client certificates
//! does not count: it hides the traffic, not the planes, from whoever can
//! connect.

use std::net::SocketAddr;

use super::Settings;

/// Whether `listen` (an `IP:port`) accepts connections from other hosts:
/// anything but a loopback address (`0.0.0.0` and `[::]` are every address).
/// An address that does not parse is another rule's refusal, not this one's.
pub fn reachable_from_elsewhere(listen: &str) -> bool {
    listen.parse::<SocketAddr>().is_ok_and(|a| !a.ip().to_canonical().is_loopback())
}

/// One listener that other hosts can reach without a token on every plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unguarded {
    /// `api.listen` or `metrics.listen`.
    pub key: &'static str,
    /// The listen address.
    pub listen: String,
    /// The token settings that would guard it, none of them set.
    pub missing: Vec<&'static str>,
}

impl Unguarded {
    /// The rule, with what to set.
    pub fn rule(&self) -> String {
        format!(
            "is not a loopback address, so other hosts can reach this listener, yet no token guards {}: set {} \
             (or the `_file` form), or require client certificates (tls.client_ca_file with tls.cert_file and \
             tls.key_file), or listen on 127.0.0.1, or set api.insecure_listen = true to accept \
             unauthenticated callers knowingly (docs/security.md)",
            if self.missing.len() == 1 { "its plane" } else { "these planes" },
            self.missing.join(" and "),
        )
    }
}

/// Whether `inline` or `file` sets a token.
fn set<T, U>(inline: &Option<T>, file: &Option<U>) -> bool {
    inline.is_some() || file.is_some()
}

/// The token settings each listener's planes lack (none under mutual TLS).
fn missing_tokens(s: &Settings) -> [(&'static str, &String, Vec<&'static str>); 2] {
    if s.tls.requires_client_certificates() {
        return [("api.listen", &s.api.listen, Vec::new()), ("metrics.listen", &s.metrics.listen, Vec::new())];
    }
    let mut api = Vec::new();
    if !set(&s.api.admin_token, &s.api.admin_token_file) {
        api.push("api.admin_token");
    }
    if !set(&s.api.client_token, &s.api.client_token_file) {
        api.push("api.client_token");
    }
    if s.cluster.enabled && !set(&s.cluster.peer_token, &s.cluster.peer_token_file) {
        api.push("cluster.peer_token");
    }
    let mut metrics = Vec::new();
    if !set(&s.metrics.auth_token, &s.metrics.auth_token_file) {
        metrics.push("metrics.auth_token");
    }
    [("api.listen", &s.api.listen, api), ("metrics.listen", &s.metrics.listen, metrics)]
}

/// The listeners other hosts could reach without a token on every plane,
/// ignoring `api.insecure_listen` (see [`refused`] and [`insecure`]).
pub fn unguarded(s: &Settings) -> Vec<Unguarded> {
    missing_tokens(s)
        .into_iter()
        .filter(|(_, listen, missing)| !missing.is_empty() && reachable_from_elsewhere(listen))
        .map(|(key, listen, missing)| Unguarded { key, listen: listen.clone(), missing })
        .collect()
}

/// What the node refuses to start with.
pub fn refused(s: &Settings) -> Vec<Unguarded> {
    if s.api.insecure_listen { Vec::new() } else { unguarded(s) }
}

/// Whether the node runs an unguarded reachable listener because
/// `api.insecure_listen` allows it: warned at start, shown in `/health` and
/// `Admin.Status`.
pub fn insecure(s: &Settings) -> bool {
    s.api.insecure_listen && !unguarded(s).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_or_not() {
        let cases = [
            ("127.0.0.1:50051", false),
            ("127.8.9.10:1", false),
            ("[::1]:50051", false),
            ("[::ffff:127.0.0.1]:1", false),
            ("0.0.0.0:50051", true),
            ("[::]:50051", true),
            ("10.0.0.11:50051", true),
            ("not an address", false),
        ];
        for (listen, want) in cases {
            assert_eq!(reachable_from_elsewhere(listen), want, "{listen}");
        }
    }

    #[test]
    fn a_reachable_listener_needs_every_plane_guarded() {
        let mut s = Settings::default();
        assert_eq!(unguarded(&s), [], "the defaults are loopback");
        s.api.listen = "0.0.0.0:50051".into();
        s.metrics.listen = "0.0.0.0:9090".into();
        s.cluster.enabled = true;
        let keys = |s: &Settings| refused(s).into_iter().map(|u| (u.key, u.missing)).collect::<Vec<_>>();
        assert_eq!(
            keys(&s),
            [
                ("api.listen", vec!["api.admin_token", "api.client_token", "cluster.peer_token"]),
                ("metrics.listen", vec!["metrics.auth_token"]),
            ]
        );
        s.api.admin_token = Some("a-token".into());
        s.api.client_token_file = Some("/etc/chitin/client".into());
        s.metrics.auth_token = Some("m-token".into());
        assert_eq!(keys(&s), [("api.listen", vec!["cluster.peer_token"])]);
        s.cluster.enabled = false;
        assert_eq!(keys(&s), []);
        assert!(!insecure(&s));

        let mut open = Settings::default();
        open.api.listen = "0.0.0.0:50051".into();
        open.api.insecure_listen = true;
        assert_eq!(refused(&open), []);
        assert!(insecure(&open));
        // The flag alone, on loopback, is not insecure.
        open.api.listen = "127.0.0.1:50051".into();
        assert!(!insecure(&open));
    }

    #[test]
    fn mutual_tls_guards_every_plane_and_tls_alone_does_not() {
        let mut s = Settings::default();
        s.api.listen = "0.0.0.0:50051".into();
        s.metrics.listen = "0.0.0.0:9090".into();
        s.cluster.enabled = true;
        s.tls.cert_file = Some("/etc/chitin/node.pem".into());
        s.tls.key_file = Some("/etc/chitin/node.key".into());
        s.tls.peer_ca_file = Some("/etc/chitin/ca.pem".into());
        assert_eq!(refused(&s).len(), 2, "TLS without client certificates lets anyone connect");
        s.tls.client_ca_file = Some("/etc/chitin/clients.pem".into());
        assert_eq!(refused(&s), []);
        s.tls.cert_file = None;
        assert_eq!(refused(&s).len(), 2, "a client CA without the node's certificate is no TLS at all");
    }

    #[test]
    fn the_rule_says_what_to_set() {
        let u = Unguarded { key: "api.listen", listen: "0.0.0.0:1".into(), missing: vec!["api.admin_token", "api.client_token"] };
        let rule = u.rule();
        assert!(rule.contains("set api.admin_token and api.client_token"), "{rule}");
        assert!(rule.contains("api.insecure_listen = true"), "{rule}");
        assert!(rule.contains("tls.client_ca_file"), "{rule}");
    }
}
