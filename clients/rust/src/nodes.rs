//! A list of node addresses, as `--node a,b,c` or `CHITIN_NODES` gives it,
//! and the one failover rule for a call that must reach some node.

use std::fmt;
use std::future::Future;
use std::str::FromStr;

/// Node gRPC addresses (`host:port`, or a URI `http://host:port` /
/// `https://host:port`) in preference order; never empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nodes(Vec<String>);

/// Why a node list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodesError {
    /// No address at all.
    #[error("no node address given; pass one or more, comma-separated: host:port[,host:port…]")]
    Empty,
    /// An empty entry (two commas in a row, a trailing comma).
    #[error("node address #{position} is empty (in `{list}`); separate addresses with single commas")]
    Blank {
        /// Its position in the list, from 1.
        position: usize,
        /// The whole list as given.
        list: String,
    },
    /// An entry that is no address.
    #[error("`{address}` is not a node address: {why}; expected host:port (e.g. 127.0.0.1:50051) or http(s)://host:port")]
    Bad {
        /// The entry.
        address: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

impl Nodes {
    /// The addresses, each checked.
    pub fn new<I, S>(addresses: I) -> Result<Nodes, NodesError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let list: Vec<String> = addresses.into_iter().map(Into::into).collect();
        if list.is_empty() {
            return Err(NodesError::Empty);
        }
        for a in &list {
            check_address(a)?;
        }
        Ok(Nodes(list))
    }

    /// One node.
    pub fn one(address: impl Into<String>) -> Result<Nodes, NodesError> {
        Nodes::new([address.into()])
    }

    /// The addresses, in the order they are tried.
    pub fn addresses(&self) -> &[String] {
        &self.0
    }

    /// How many there are (never 0).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true (a list has at least one address); for clippy's sake.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The only address, or an error naming the command's reason when the
    /// list has several (a call about one node must not fail over).
    pub fn single(&self, why: &str) -> Result<&str, String> {
        match self.0.as_slice() {
            [only] => Ok(only),
            _ => Err(format!("{why}; give one address, not {} ({self})", self.0.len())),
        }
    }

    /// Connects with `connect` to each node in turn and returns the first
    /// that answers, with its address; the error lists every node's failure.
    pub async fn first_reachable<T, E, F, Fut>(&self, mut connect: F) -> Result<(String, T), Unreachable>
    where
        F: FnMut(String) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: fmt::Display,
    {
        let mut failures = Vec::new();
        for address in &self.0 {
            match connect(address.clone()).await {
                Ok(t) => return Ok((address.clone(), t)),
                Err(e) => failures.push((address.clone(), e.to_string())),
            }
        }
        Err(Unreachable { failures })
    }
}

/// No node of a list could be reached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", unreachable_text(.failures))]
pub struct Unreachable {
    /// Each address tried, with its failure, in order.
    pub failures: Vec<(String, String)>,
}

fn unreachable_text(failures: &[(String, String)]) -> String {
    match failures {
        [(_, only)] => only.clone(),
        _ => {
            let each: Vec<String> = failures.iter().map(|(a, e)| format!("{a}: {e}")).collect();
            format!("none of the {} nodes answered ({})", failures.len(), each.join("; "))
        }
    }
}

/// Checks one address: `host:port` with a numeric port, or a URI with an
/// http or https scheme.
pub fn check_address(address: &str) -> Result<(), NodesError> {
    let bad = |why| Err(NodesError::Bad { address: address.to_string(), why });
    if address.chars().any(char::is_whitespace) {
        return bad("it contains whitespace");
    }
    let rest = match address.split_once("://") {
        Some(("http" | "https", rest)) => rest,
        Some(_) => return bad("the scheme must be http or https"),
        None => address,
    };
    let authority = rest.split('/').next().unwrap_or_default();
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => Ok(()),
        Some((_, port)) if !port.is_empty() && !port.parse::<u16>().is_ok_and(|p| p > 0) => {
            bad("the port is not a number 1..=65535")
        }
        _ if address.contains("://") => Ok(()),
        _ => bad("it has no port"),
    }
}

/// The URI of an address: `http://` is added to a bare `host:port`.
pub fn uri(address: &str) -> String {
    if address.contains("://") { address.to_string() } else { format!("http://{address}") }
}

impl FromStr for Nodes {
    type Err = NodesError;

    /// `a:1,b:2`; spaces around commas are ignored.
    fn from_str(list: &str) -> Result<Nodes, NodesError> {
        if list.trim().is_empty() {
            return Err(NodesError::Empty);
        }
        let parts: Vec<&str> = list.split(',').map(str::trim).collect();
        if let Some(i) = parts.iter().position(|p| p.is_empty()) {
            return Err(NodesError::Blank { position: i + 1, list: list.to_string() });
        }
        Nodes::new(parts)
    }
}

impl fmt::Display for Nodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_list() {
        let n: Nodes = "127.0.0.1:1, b:2 ,https://c:3".parse().unwrap();
        assert_eq!(n.addresses(), ["127.0.0.1:1", "b:2", "https://c:3"]);
        assert_eq!(n.to_string(), "127.0.0.1:1,b:2,https://c:3");
        assert_eq!("[::1]:50051".parse::<Nodes>().unwrap().len(), 1);
    }

    #[test]
    // case: node-list
    fn bad_lists_say_what_is_wrong() {
        assert_eq!("".parse::<Nodes>(), Err(NodesError::Empty));
        assert!(matches!("a:1,,b:2".parse::<Nodes>(), Err(NodesError::Blank { position: 2, .. })));
        let err = |s: &str| s.parse::<Nodes>().unwrap_err().to_string();
        assert!(err("a:1,b").contains("`b` is not a node address: it has no port"), "{}", err("a:1,b"));
        assert!(err("a:http").contains("the port is not a number"));
        assert!(err("ftp://a:1").contains("scheme must be http or https"));
        assert!(err("a:0").contains("the port is not a number 1..=65535"));
        assert!(err(":5").contains("it has no port") || err(":5").contains("not a node address"));
    }

    #[test]
    fn single_refuses_a_list() {
        let n: Nodes = "a:1,b:2".parse().unwrap();
        let e = n.single("drain acts on one node").unwrap_err();
        assert!(e.contains("give one address, not 2 (a:1,b:2)"), "{e}");
        assert_eq!(Nodes::one("a:1").unwrap().single("x"), Ok("a:1"));
    }

    #[tokio::test]
    async fn first_reachable_tries_in_order_and_lists_failures() {
        let n: Nodes = "a:1,b:2,c:3".parse().unwrap();
        let got = n.first_reachable(|a| async move { if a == "b:2" { Ok(7) } else { Err(format!("{a} down")) } }).await;
        assert_eq!(got, Ok(("b:2".to_string(), 7)));
        let none = n.first_reachable(|a| async move { Err::<(), _>(format!("{a} down")) }).await.unwrap_err();
        assert_eq!(none.to_string(), "none of the 3 nodes answered (a:1: a:1 down; b:2: b:2 down; c:3: c:3 down)");
    }
}
