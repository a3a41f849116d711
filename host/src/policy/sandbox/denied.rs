//! Files and sockets as a policy sees them: the interfaces are linked, so
//! that a component whose toolchain imports them (CPython via componentize-py
//! imports all of `wasi:filesystem` and `wasi:sockets`) loads, and nothing
//! can be opened through them.
//!
//! A file or socket exists for a guest only as a handle the host gave it,
//! and only these functions make one from nothing:
//!
//! | function | here |
//! |---|---|
//! | `wasi:filesystem/preopens.get-directories` | no directories |
//! | `wasi:sockets/tcp-create-socket.create-tcp-socket` | `access-denied` |
//! | `wasi:sockets/udp-create-socket.create-udp-socket` | `access-denied` |
//! | `wasi:sockets/ip-name-lookup.resolve-addresses` | `access-denied` |
//!
//! Every other function of those packages takes a descriptor, a socket or
//! an address stream, so with none of them ever made it cannot run: the
//! methods of `wasi:filesystem/types`, `wasi:sockets/tcp` and `udp` are
//! wasmtime-wasi's own (unreachable), and those of the address stream here
//! trap. `wasi:sockets/instance-network` and `network` are wasmtime-wasi's:
//! the network handle is a token that every use of it above refuses. The
//! guest's `WasiCtx` also denies TCP, UDP and name lookups, in case.
//!
//! The four constructors are chitin's own rather than wasmtime-wasi's (which
//! would consult the context's preopens and network permissions) so that no
//! host code that opens, connects, resolves or waits is reachable at all,
//! whatever the context says.

use wasmtime::component::{HasData, Linker, Resource};
use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemView as _};
use wasmtime_wasi::p2::bindings::filesystem::preopens;
use wasmtime_wasi::p2::bindings::sockets::ip_name_lookup::{self, ResolveAddressStream};
use wasmtime_wasi::p2::bindings::sockets::network::{self, ErrorCode, IpAddress, Network};
use wasmtime_wasi::p2::bindings::sockets::{instance_network, tcp_create_socket};
use wasmtime_wasi::p2::bindings::sync::{filesystem, sockets};
use wasmtime_wasi::p2::{DynPollable, SocketError, SocketResult, TcpSocket, UdpSocket};
use wasmtime_wasi::sockets::{WasiSockets, WasiSocketsView as _};

use super::State;

/// The interfaces linked here, without their `@version`.
pub(crate) const INTERFACES: &[&str] = &[
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "wasi:sockets/ip-name-lookup",
];

/// Links [`INTERFACES`] into `l`.
pub(crate) fn add_to_linker(l: &mut Linker<State>) -> wasmtime::Result<()> {
    // The constructors: ours, and they give nothing.
    preopens::add_to_linker::<State, Denied>(l, |_| Denied)?;
    tcp_create_socket::add_to_linker::<State, Denied>(l, |_| Denied)?;
    sockets::udp_create_socket::add_to_linker::<State, Denied>(l, |_| Denied)?;
    ip_name_lookup::add_to_linker::<State, Denied>(l, |_| Denied)?;
    // The methods of handles that never exist, and the network token.
    filesystem::types::add_to_linker::<State, WasiFilesystem>(l, State::filesystem)?;
    sockets::tcp::add_to_linker::<State, WasiSockets>(l, State::sockets)?;
    sockets::udp::add_to_linker::<State, WasiSockets>(l, State::sockets)?;
    instance_network::add_to_linker::<State, WasiSockets>(l, State::sockets)?;
    network::add_to_linker::<State, WasiSockets>(l, &Default::default(), State::sockets)?;
    Ok(())
}

/// The host of the constructors: it holds nothing, so it can give nothing.
struct Denied;

impl HasData for Denied {
    type Data<'a> = Denied;
}

fn denied<T>() -> SocketResult<T> {
    Err(ErrorCode::AccessDenied.into())
}

/// The trap of a method called on a handle that cannot exist (the
/// component model lets a guest hold only handles the host made).
fn no_such_handle(what: &str) -> wasmtime::Error {
    wasmtime::format_err!("the policy sandbox never makes a {what}, yet one was used")
}

/// The socket constructors' error codes (their interfaces use `network`'s).
impl network::Host for Denied {
    fn convert_error_code(&mut self, error: SocketError) -> wasmtime::Result<ErrorCode> {
        error.downcast()
    }
    fn network_error_code(&mut self, _error: Resource<wasmtime::Error>) -> wasmtime::Result<Option<ErrorCode>> {
        // The `network` interface linked is wasmtime-wasi's; this and the
        // `drop` below only complete the trait.
        Ok(None)
    }
}

impl network::HostNetwork for Denied {
    fn drop(&mut self, _network: Resource<Network>) -> wasmtime::Result<()> {
        Err(no_such_handle("network"))
    }
}

impl preopens::Host for Denied {
    fn get_directories(&mut self) -> wasmtime::Result<Vec<(Resource<filesystem::types::Descriptor>, String)>> {
        Ok(Vec::new())
    }
}

impl tcp_create_socket::Host for Denied {
    fn create_tcp_socket(&mut self, _family: tcp_create_socket::IpAddressFamily) -> SocketResult<Resource<TcpSocket>> {
        denied()
    }
}

impl sockets::udp_create_socket::Host for Denied {
    fn create_udp_socket(&mut self, _family: sockets::udp_create_socket::IpAddressFamily) -> SocketResult<Resource<UdpSocket>> {
        denied()
    }
}

impl ip_name_lookup::Host for Denied {
    fn resolve_addresses(&mut self, _network: Resource<Network>, _name: String) -> SocketResult<Resource<ResolveAddressStream>> {
        denied()
    }
}

impl ip_name_lookup::HostResolveAddressStream for Denied {
    fn resolve_next_address(&mut self, _stream: Resource<ResolveAddressStream>) -> SocketResult<Option<IpAddress>> {
        Err(SocketError::trap(no_such_handle("resolve-address-stream")))
    }
    fn subscribe(&mut self, _stream: Resource<ResolveAddressStream>) -> wasmtime::Result<Resource<DynPollable>> {
        Err(no_such_handle("resolve-address-stream"))
    }
    fn drop(&mut self, _stream: Resource<ResolveAddressStream>) -> wasmtime::Result<()> {
        Err(no_such_handle("resolve-address-stream"))
    }
}
