//! Tries every way out through files and sockets, with std as any guest
//! would (std reaches `wasi:filesystem` and `wasi:sockets` through
//! wasi-libc): on `place-replicas` it lists and opens files, creates one,
//! connects to each node's address over TCP, binds and sends over UDP and
//! resolves a host name. It refuses the call with one line per attempt,
//! `attempt: ok` or `attempt: denied (error)`, so the host's test can see
//! that each one was refused rather than that the guest stopped early.
wit_bindgen::generate!({ path: "../../../wit/since_v0.1.0", world: "placement-policy" });

use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs, UdpSocket};

use exports::chitin::policy::placement::*;

struct ReachesOut;

fn attempt<T>(report: &mut Vec<String>, what: String, result: std::io::Result<T>) {
    report.push(match result {
        Ok(_) => format!("{what}: ok"),
        Err(e) => format!("{what}: denied ({e})"),
    });
}

impl Guest for ReachesOut {
    fn place_replicas(request: PlacementRequest) -> Result<Vec<ShardPlacement>, PolicyError> {
        let mut report = Vec::new();
        attempt(&mut report, "list /".into(), std::fs::read_dir("/"));
        attempt(&mut report, "list .".into(), std::fs::read_dir("."));
        let read = std::fs::File::open("/etc/passwd").and_then(|mut f| f.read_to_string(&mut String::new()));
        attempt(&mut report, "read /etc/passwd".into(), read);
        attempt(&mut report, "create escape.txt".into(), std::fs::write("escape.txt", b"out"));
        for node in &request.nodes {
            attempt(&mut report, format!("tcp connect {}", node.address), TcpStream::connect(&node.address));
            let sent = UdpSocket::bind("0.0.0.0:0").and_then(|s| s.send_to(b"out", &node.address));
            attempt(&mut report, format!("udp send {}", node.address), sent);
        }
        attempt(&mut report, "resolve localhost".into(), ("localhost", 80).to_socket_addrs());
        Err(PolicyError::Unsupported(report.join("\n")))
    }
    fn rebalance(_request: RebalanceRequest) -> Result<Vec<ReplicaMove>, PolicyError> {
        Ok(Vec::new())
    }
    fn preferred_holders(_request: RankingRequest) -> Result<Vec<HolderRanking>, PolicyError> {
        Ok(Vec::new())
    }
}

export!(ReachesOut);
