//! A TCP forwarder a test moves from one server to another, as a failover
//! manager moves a virtual IP or a DNS name: clients keep one address, and
//! the move resets every connection open through it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinSet};

use super::KitError;

/// Forwards connections to its loopback port on to the current target port.
pub struct Switch {
    /// The loopback port clients connect to.
    pub port: u16,
    /// Where new connections go.
    target: Arc<AtomicU16>,
    /// The forwarding of every open connection; aborted on a move.
    open: Arc<std::sync::Mutex<JoinSet<()>>>,
    accept: AbortHandle,
}

impl Switch {
    /// Listens on a free loopback port and forwards to `target` (a loopback port).
    pub async fn start(target: u16) -> Result<Switch, KitError> {
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(KitError::io("bind the switch"))?;
        let port = listener.local_addr().map_err(KitError::io("the switch's address"))?.port();
        let target = Arc::new(AtomicU16::new(target));
        let open = Arc::new(std::sync::Mutex::new(JoinSet::new()));
        let accept = {
            let (target, open) = (target.clone(), open.clone());
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    let to = target.load(Ordering::SeqCst);
                    let mut set = open.lock().unwrap_or_else(|e| e.into_inner());
                    set.spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(("127.0.0.1", to)).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    // Reap the finished ones so that a long test holds only the open.
                    while set.try_join_next().is_some() {}
                }
            })
            .abort_handle()
        };
        Ok(Switch { port, target, open, accept })
    }

    /// Sends new connections to `target` and drops every open one (their
    /// clients see the connection reset), as a moved address does.
    pub fn point_at(&self, target: u16) {
        self.target.store(target, Ordering::SeqCst);
        self.open.lock().unwrap_or_else(|e| e.into_inner()).abort_all();
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.accept.abort();
        self.open.lock().unwrap_or_else(|e| e.into_inner()).abort_all();
    }
}
