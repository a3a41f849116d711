//! What a `cluster.redis_url` names: one server, a master that Redis
//! Sentinel watches, or a Redis Cluster. Pure: parsed once into
//! [`RedisTarget`], which `coord::conn` connects to.
//!
//! The two multi-server forms list their servers the way Sentinel and
//! Cluster clients commonly do, comma-separated in the host part:
//!
//! - `redis+sentinel://[[user]:password@]host:port[,host:port…]/master[/db]`:
//!   the Sentinels to ask, the name they monitor the master under, and the
//!   database number; the password is the master's (Sentinels are asked
//!   without one).
//! - `redis+cluster://[[user]:password@]host:port[,host:port…]`: seed nodes
//!   of a Redis Cluster (any reachable one tells the rest); the password is
//!   every node's.

/// One server, a Sentinel-watched master, or a Redis Cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// `redis://`, `rediss://`, `unix://`: the URL as the redis client takes it.
    Single(String),
    /// `redis+sentinel://`.
    Sentinel {
        /// `redis://host:port` of each Sentinel, in the order given.
        sentinels: Vec<String>,
        /// The name the Sentinels monitor the master under.
        master: String,
        /// `redis://[[user]:password@]host/db` carrying what the master
        /// connection needs besides its address (which Sentinel answers).
        node: String,
    },
    /// `redis+cluster://`: `redis://[[user]:password@]host:port` of each seed.
    Cluster(Vec<String>),
}

/// The scheme of a Sentinel URL.
pub(crate) const SENTINEL_SCHEME: &str = "redis+sentinel://";
/// The scheme of a Redis Cluster URL.
pub(crate) const CLUSTER_SCHEME: &str = "redis+cluster://";

/// The schemes of one server's URL.
const SINGLE_SCHEMES: [&str; 4] = ["redis://", "rediss://", "unix://", "redis+unix://"];

impl RedisTarget {
    /// Parses `url`; the error says what is wrong with it and how a right
    /// one looks (it never repeats the password).
    pub fn parse(url: &str) -> Result<RedisTarget, String> {
        if let Some(rest) = url.strip_prefix(SENTINEL_SCHEME) {
            let (auth, hosts, path) = split(rest)?;
            let mut segments = path.split('/');
            let master = segments.next().unwrap_or_default();
            if master.is_empty() {
                return Err(format!(
                    "names no master: write the name the Sentinels monitor it under after the hosts, \
                     {SENTINEL_SCHEME}host:26379,host:26379/mymaster"
                ));
            }
            let db = match segments.next() {
                None | Some("") => "0",
                Some(db) if db.parse::<u32>().is_ok() => db,
                Some(db) => {
                    return Err(format!("has database {db:?} after the master name: it must be a number, as in /mymaster/0"));
                }
            };
            if segments.next().is_some() {
                return Err("has more path than /master/db".into());
            }
            Ok(RedisTarget::Sentinel {
                sentinels: hosts.iter().map(|h| format!("redis://{h}")).collect(),
                master: master.to_string(),
                node: format!("redis://{auth}127.0.0.1/{db}"),
            })
        } else if let Some(rest) = url.strip_prefix(CLUSTER_SCHEME) {
            let (auth, hosts, path) = split(rest)?;
            if !path.is_empty() {
                return Err("has a path: a Redis Cluster has only database 0, so write the seed nodes alone".into());
            }
            Ok(RedisTarget::Cluster(hosts.iter().map(|h| format!("redis://{auth}{h}")).collect()))
        } else if ["rediss+sentinel://", "rediss+cluster://"].iter().any(|s| url.starts_with(s)) {
            Err("asks for TLS to Sentinel or Redis Cluster, which chitin does not speak yet: \
                 use redis+sentinel:// or redis+cluster:// on a private network, or one rediss:// server"
                .into())
        } else if SINGLE_SCHEMES.iter().any(|s| url.starts_with(s)) {
            Ok(RedisTarget::Single(url.to_string()))
        } else {
            Err("must start with redis://, rediss://, unix://, redis+sentinel:// or redis+cluster://".into())
        }
    }

    /// Whether every key of a namespace must share one hash slot.
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisTarget::Cluster(_))
    }
}

/// `[auth@]h:p[,h:p…][/path]` → (`auth@` or empty, hosts, path).
fn split(rest: &str) -> Result<(&str, Vec<&str>, &str), String> {
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (auth, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (&authority[..userinfo.len() + 1], hosts),
        None => ("", authority),
    };
    let hosts: Vec<&str> = hosts.split(',').collect();
    for h in &hosts {
        let port_ok = h.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            return Err(format!("lists {h:?} where each server must be host:port, as in redis-1:26379,redis-2:26379"));
        }
    }
    Ok((auth, hosts, path))
}

/// The hash tag of `namespace`: the text between its first `{` and the
/// next `}` when that is not empty, as Redis Cluster reads a key's tag.
/// Every key of a namespace with a tag (`{chitin}`) lives in one hash
/// slot, whatever follows it.
pub fn hash_tag(namespace: &str) -> Option<&str> {
    let open = namespace.find('{')?;
    let len = namespace[open + 1..].find('}')?;
    (len > 0).then(|| &namespace[open + 1..open + 1 + len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        let single = |u: &str| RedisTarget::Single(u.to_string());
        let cases: &[(&str, RedisTarget)] = &[
            ("redis://127.0.0.1:6379", single("redis://127.0.0.1:6379")),
            ("rediss://:pw@r:6380/2", single("rediss://:pw@r:6380/2")),
            ("unix:///run/redis.sock", single("unix:///run/redis.sock")),
            (
                "redis+sentinel://s1:26379,s2:26380/mymaster",
                RedisTarget::Sentinel {
                    sentinels: vec!["redis://s1:26379".into(), "redis://s2:26380".into()],
                    master: "mymaster".into(),
                    node: "redis://127.0.0.1/0".into(),
                },
            ),
            (
                "redis+sentinel://app:p%40ss@s1:26379/mymaster/3",
                RedisTarget::Sentinel {
                    sentinels: vec!["redis://s1:26379".into()],
                    master: "mymaster".into(),
                    node: "redis://app:p%40ss@127.0.0.1/3".into(),
                },
            ),
            (
                "redis+cluster://:pw@c1:7000,c2:7001",
                RedisTarget::Cluster(vec!["redis://:pw@c1:7000".into(), "redis://:pw@c2:7001".into()]),
            ),
            ("redis+cluster://c1:7000", RedisTarget::Cluster(vec!["redis://c1:7000".into()])),
        ];
        for (url, want) in cases {
            assert_eq!(&RedisTarget::parse(url).unwrap(), want, "{url}");
        }
    }

    #[test]
    fn refusals_say_what_is_wrong_and_never_repeat_the_password() {
        let cases = [
            ("redis+sentinel://:secret@s1:26379", "names no master"),
            ("redis+sentinel://:secret@s1:26379/", "names no master"),
            ("redis+sentinel://s1:26379/m/x", "must be a number"),
            ("redis+sentinel://s1:26379/m/0/1", "more path"),
            ("redis+sentinel://:secret@s1,s2:26379/m", "\"s1\""),
            ("redis+cluster://:secret@c1:7000/0", "only database 0"),
            ("redis+cluster://c1:7000,", "\"\""),
            ("redis+cluster://:7000", "host:port"),
            ("rediss+cluster://c1:7000", "TLS"),
            ("http://:secret@r:6379", "must start with redis://"),
        ];
        for (url, want) in cases {
            let e = RedisTarget::parse(url).unwrap_err();
            assert!(e.contains(want), "{url}: {e}");
            assert!(!e.contains("secret"), "{url}: {e}");
        }
    }

    #[test]
    fn hash_tags_as_redis_cluster_reads_them() {
        let cases = [
            ("{chitin}", Some("chitin")),
            ("app-{orders}-coord", Some("orders")),
            ("chitin", None),
            ("{}chitin", None),
            ("{chitin", None),
            ("chitin}{", None),
        ];
        for (ns, want) in cases {
            assert_eq!(hash_tag(ns), want, "{ns}");
        }
    }
}
