//! Free loopback ports, and waiting until something listens on one.
//!
//! A port is chosen some time before the server that gets it binds it, and
//! the kernel hands ports from its ephemeral range to every outgoing
//! connection meanwhile (the nodes of a test open many, to the databases and
//! to Redis). So ports come from just below that range, where no outgoing
//! connection lands, walked by one cursor per process so that two tests of
//! one binary never get the same port, from an offset set by the process id
//! so that two test processes rarely start on the same ones.

use std::net::TcpListener;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::KitError;

/// How many ports below the ephemeral range the kit hands out.
const SPAN: u16 = 16_384;

/// `n` distinct free loopback ports from below the kernel's ephemeral range
/// (see the module docs). Every candidate is bound until all are chosen, so
/// one that something else listens on is passed over.
pub fn free_ports(n: usize) -> Result<Vec<u16>, KitError> {
    let range = below_ephemeral(&std::fs::read_to_string(EPHEMERAL).unwrap_or_default());
    let mut held = Vec::with_capacity(n);
    for _ in 0..range.len() {
        if held.len() == n {
            break;
        }
        if let Ok(l) = TcpListener::bind(("127.0.0.1", next_candidate(&range))) {
            held.push(l);
        }
    }
    if held.len() < n {
        return Err(KitError::io("bind a loopback port")(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("only {} of {n} ports in {range:?} are free", held.len()),
        )));
    }
    held.iter().map(|l| l.local_addr().map(|a| a.port())).collect::<Result<_, _>>().map_err(KitError::io("read a bound port"))
}

/// One free loopback port (see [`free_ports`]).
pub fn free_port() -> Result<u16, KitError> {
    Ok(free_ports(1)?[0])
}

/// Where Linux keeps the ephemeral range (`low high`).
const EPHEMERAL: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// The [`SPAN`] ports just below the ephemeral range that `proc` (the
/// contents of [`EPHEMERAL`]) states, never below 1024; without a readable
/// range, below Linux's default one.
fn below_ephemeral(proc: &str) -> Range<u16> {
    let low = proc.split_whitespace().next().and_then(|w| w.parse::<u16>().ok()).unwrap_or(32_768);
    let start = low.saturating_sub(SPAN).max(1024);
    start..low.max(start + 1)
}

/// The process's next port in `range`, cycling.
fn next_candidate(range: &Range<u16>) -> u16 {
    static CURSOR: AtomicUsize = AtomicUsize::new(0);
    let offset = std::process::id() as usize * 7_919;
    let step = CURSOR.fetch_add(1, Ordering::Relaxed);
    range.start + ((offset + step) % range.len()) as u16
}

/// Blocks until a TCP connect to `addr` succeeds; `log` names where the
/// server's own account is, for the error.
pub fn wait_for_port(addr: &str, within: Duration, log: &str) -> Result<(), KitError> {
    let deadline = Instant::now() + within;
    while std::net::TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            return Err(KitError::NotListening { addr: addr.to_string(), within, log: log.to_string() });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_of_one_call_are_distinct() {
        let ports = free_ports(20).unwrap();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 20, "{ports:?}");
    }

    #[test]
    fn ports_of_successive_calls_are_distinct_and_below_the_ephemeral_range() {
        let range = below_ephemeral(&std::fs::read_to_string(EPHEMERAL).unwrap_or_default());
        let mut ports: Vec<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        assert!(ports.iter().all(|p| range.contains(p)), "{ports:?} not all in {range:?}");
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 50);
    }

    #[test]
    fn the_range_sits_below_the_stated_ephemeral_one() {
        assert_eq!(below_ephemeral("32768\t60999\n"), 16_384..32_768);
        assert_eq!(below_ephemeral("10000 65000"), 1024..10_000);
        assert_eq!(below_ephemeral(""), 16_384..32_768);
        assert_eq!(below_ephemeral("1024 2000"), 1024..1025);
    }

    #[test]
    fn waiting_for_a_port_sees_a_listener_and_times_out_without_one() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        wait_for_port(&addr, Duration::from_secs(1), "").unwrap();
        drop(l);
        let err = wait_for_port(&addr, Duration::from_millis(100), "; see x.log").unwrap_err();
        assert!(err.to_string().ends_with("; see x.log"), "{err}");
    }
}
