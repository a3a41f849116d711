//! Free loopback ports, and waiting until something listens on one.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use super::KitError;

/// `n` distinct free loopback ports. Every listener stays bound until all
/// are chosen, so the kernel cannot hand the same port out twice; once they
/// are dropped another process may take one, which the server that then
/// fails to bind reports.
pub fn free_ports(n: usize) -> Result<Vec<u16>, KitError> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(KitError::io("bind 127.0.0.1:0"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()
        .map_err(KitError::io("read a bound port"))
}

/// One free loopback port (see [`free_ports`]).
pub fn free_port() -> Result<u16, KitError> {
    Ok(free_ports(1)?[0])
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
    fn waiting_for_a_port_sees_a_listener_and_times_out_without_one() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        wait_for_port(&addr, Duration::from_secs(1), "").unwrap();
        drop(l);
        let err = wait_for_port(&addr, Duration::from_millis(100), "; see x.log").unwrap_err();
        assert!(err.to_string().ends_with("; see x.log"), "{err}");
    }
}
