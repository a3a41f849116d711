//! The network of a chaos run that can cut it: each node in its own
//! network namespace on a private bridge (root and `ip netns` available).

use std::process::Command;

use super::ChaosError;

/// A private bridge `chb<run>` at `10.<a>.<b>.1/24` with one namespace per
/// node; node `k` is `10.<a>.<b>.<10+k>`. Nodes reach each other over the
/// bridge (no forwarding needed) and the run's Redis and PostgreSQL at the
/// bridge address. Removed when dropped.
pub struct Network {
    run: String,
    prefix: String,
    namespaces: Vec<String>,
}

fn ip(args: &[&str]) -> Result<(), ChaosError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| ChaosError::Ip { args: args.join(" "), stderr: format!("cannot run `ip` (iproute2): {e}") })?;
    if !out.status.success() {
        return Err(ChaosError::Ip { args: args.join(" "), stderr: String::from_utf8_lossy(&out.stderr).trim().to_string() });
    }
    Ok(())
}

impl Network {
    /// Builds the bridge and `nodes` namespaces; an error says why the
    /// machine does not allow it (the run then skips network cuts).
    pub fn create(run: &str, nodes: usize, salt: u64) -> Result<Network, ChaosError> {
        let prefix = format!("10.{}.{}", 100 + salt % 100, (salt >> 8) % 250 + 1);
        let mut net = Network { run: run.to_string(), prefix, namespaces: Vec::new() };
        let bridge = net.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{}/24", net.host()), "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        for k in 0..nodes {
            let ns = format!("chitin-{run}-{k}");
            ip(&["netns", "add", &ns])?;
            net.namespaces.push(ns.clone());
            let (outer, inner) = (net.veth(k), format!("cvi{run}{k}"));
            ip(&["link", "add", &outer, "type", "veth", "peer", "name", &inner])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["link", "set", &outer, "master", &bridge])?;
            ip(&["link", "set", &outer, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", net.node_ip(k)), "dev", &inner])?;
            ip(&["-n", &ns, "link", "set", &inner, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    fn bridge(&self) -> String {
        format!("chb{}", self.run)
    }

    fn veth(&self, k: usize) -> String {
        format!("cvo{}{k}", self.run)
    }

    /// The servers' address on the bridge.
    pub fn host(&self) -> String {
        format!("{}.1", self.prefix)
    }

    /// The bridge's /24, which the private PostgreSQL trusts.
    pub fn subnet(&self) -> String {
        format!("{}.0/24", self.prefix)
    }

    /// Node `k`'s address inside its namespace.
    pub fn node_ip(&self, k: usize) -> String {
        format!("{}.{}", self.prefix, 10 + k)
    }

    /// Node `k`'s namespace.
    pub fn namespace(&self, k: usize) -> &str {
        &self.namespaces[k]
    }

    /// Cuts node `k` off: its link to the bridge goes down, so it reaches
    /// nothing and nothing reaches it.
    pub fn cut(&self, k: usize) -> Result<(), ChaosError> {
        ip(&["link", "set", &self.veth(k), "down"])
    }

    /// Undoes [`Network::cut`].
    pub fn heal(&self, k: usize) -> Result<(), ChaosError> {
        ip(&["link", "set", &self.veth(k), "up"])
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}
