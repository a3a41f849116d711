//! What a policy instance may reach: the WASI interfaces that a Rust
//! `wasm32-wasip2` guest imports (std brings them even when the policy does
//! no I/O), none of which waits, and the files and sockets that other
//! languages' toolchains import (CPython imports all of them), through which
//! nothing can be opened.
//!
//! | interface | what the guest gets |
//! |---|---|
//! | `wasi:cli/environment` | no variables, no arguments, no working directory |
//! | `wasi:cli/exit` | a trap |
//! | `wasi:cli/stdin` | a closed stream: every read ends at once |
//! | `wasi:cli/stdout`, `stderr` | a 4 KiB buffer; a trap's message shows its own call's part; an instance past half of it is replaced |
//! | `wasi:cli/terminal-*` | no terminal |
//! | `wasi:io/error`, `poll`, `streams` | streams and pollables that never wait: `poll`, `pollable.block` and the `blocking-*` stream calls return at once when they can, and otherwise stop the call ([`Blocked`]) |
//! | `wasi:clocks/wall-clock`, `monotonic-clock` | clocks frozen at zero; a subscription is ready only when it is already due (a duration or instant of 0) |
//! | `wasi:random/random`, `insecure`, `insecure-seed` | a fixed-seed generator ([`Deterministic`]), restarted with every instance |
//! | `wasi:filesystem/*` | no preopened directory, so no file or directory can be opened ([`denied`]) |
//! | `wasi:sockets/*` | every socket creation and name lookup fails with `access-denied` ([`denied`]) |
//!
//! Anything else (HTTP, …) is not linked: a component importing it is
//! refused at load with the import named ([`check_imports`]).
//!
//! Why not wait: epoch interruption stops guest code, not a host function
//! blocked on the real clock. A guest that sleeps would hold the slot's
//! mutex, and the node's lease round with it, for as long as it asks.

use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::cli::{WasiCli, WasiCliView as _};
use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView as _};
use wasmtime_wasi::p2::bindings::sync::io::{poll, streams};
use wasmtime_wasi::p2::bindings::{cli, clocks, io as async_io, random};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable, StreamError, StreamResult};
use wasmtime_wasi::{HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::budget::MemoryBudget;
use super::engine::engine;

pub(crate) mod denied;

/// Bytes of guest stdout/stderr kept for error messages.
const OUTPUT_CAPACITY: usize = 4096;

/// Most random bytes one call may ask for: the host builds the list before
/// it reaches the guest's (limited) memory.
const MAX_RANDOM_BYTES: u64 = 1 << 20;

/// The interfaces linked that a guest may use, without their `@version`:
/// what a Rust `wasm32-wasip2` guest imports (`wasi:random/*` for std's
/// `HashMap` seed and for crates that ask for random bytes). The files and
/// sockets of [`denied::INTERFACES`] are linked too, empty.
pub const PROVIDED: &[&str] = &[
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
];

/// The interface of the types the slots share: types only, nothing to call.
const TYPES: &str = "chitin:policy/types";

/// A guest tried to wait: a poll, a `block` or a blocking stream call that
/// could not complete at once. The call is stopped with this error.
#[derive(Debug, thiserror::Error)]
#[error("the policy tried to wait in `{call}`; policies may not sleep or block, so the call was stopped")]
pub struct Blocked {
    /// The WASI function called, e.g. `wasi:io/poll.poll`.
    pub call: &'static str,
}

/// The store data of one instance.
pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    output: MemoryOutputPipe,
    random: Deterministic,
    /// Memory and tables of the instance, counted together.
    pub budget: MemoryBudget,
}

impl State {
    /// A fresh sandbox whose memories and tables may hold `memory_bytes` in all.
    pub fn new(memory_bytes: u64) -> State {
        let output = MemoryOutputPipe::new(OUTPUT_CAPACITY);
        // Arguments, environment, preopens and network stay empty; stdin is
        // closed (the builder's default).
        let wasi = WasiCtxBuilder::new()
            .stdout(output.clone())
            .stderr(output.clone())
            .wall_clock(Frozen)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        State { wasi, table: ResourceTable::new(), output, random: Deterministic::new(), budget: MemoryBudget::new(memory_bytes) }
    }

    /// What the guest wrote to stdout and stderr from byte `from` on (the
    /// length before a call: what that call wrote).
    pub fn output_since(&self, from: usize) -> Vec<u8> {
        self.output.contents().get(from..).unwrap_or_default().to_vec()
    }

    /// Bytes the guest wrote so far.
    pub fn output_len(&self) -> usize {
        self.output.contents().len()
    }

    /// Whether the output buffer is past half full: the instance is then
    /// replaced after its call, so that a guest that prints on every call
    /// never finds the buffer full (a full pipe fails the guest's write,
    /// which std turns into a trap).
    pub fn output_half_full(&self) -> bool {
        self.output_len() > OUTPUT_CAPACITY / 2
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// A wall clock that always reads zero: policies get time only through their input.
struct Frozen;

impl HostWallClock for Frozen {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

/// The linker every slot instantiates with.
pub fn linker() -> &'static Linker<State> {
    static LINKER: std::sync::OnceLock<Linker<State>> = std::sync::OnceLock::new();
    LINKER.get_or_init(|| {
        let mut linker = Linker::new(engine());
        add_to_linker(&mut linker).expect("link the policy sandbox");
        linker
    })
}

fn add_to_linker(l: &mut Linker<State>) -> wasmtime::Result<()> {
    cli::environment::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::exit::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::stdin::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::stdout::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::stderr::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::terminal_input::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::terminal_output::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::terminal_stdin::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::terminal_stdout::add_to_linker::<State, WasiCli>(l, State::cli)?;
    cli::terminal_stderr::add_to_linker::<State, WasiCli>(l, State::cli)?;
    clocks::wall_clock::add_to_linker::<State, WasiClocks>(l, State::clocks)?;
    async_io::error::add_to_linker::<State, Table>(l, |s| &mut s.table)?;
    poll::add_to_linker::<State, Sandbox>(l, Sandbox::view)?;
    streams::add_to_linker::<State, Sandbox>(l, Sandbox::view)?;
    clocks::monotonic_clock::add_to_linker::<State, Sandbox>(l, Sandbox::view)?;
    random::random::add_to_linker::<State, Sandbox>(l, Sandbox::view)?;
    random::insecure::add_to_linker::<State, Sandbox>(l, Sandbox::view)?;
    random::insecure_seed::add_to_linker::<State, Sandbox>(l, Sandbox::view)?;
    denied::add_to_linker(l)
}

/// Why `component` cannot run in the sandbox, if it cannot: the first
/// import the sandbox does not provide, named.
pub fn check_imports(component: &Component) -> Result<(), String> {
    let ty = component.component_type();
    for (name, item) in ty.imports(engine()) {
        let interface = name.split_once('@').map_or(name, |(path, _)| path);
        // `chitin:policy/types` holds only types (guests import it for the
        // records they share); every other import must be provided.
        let linked = PROVIDED.contains(&interface) || denied::INTERFACES.contains(&interface);
        let provided = matches!(item.ty, ComponentItem::ComponentInstance(_)) && (linked || interface == TYPES);
        if !provided {
            return Err(format!(
                "it imports `{name}`, which the policy sandbox does not provide; a policy may import only {}, \
                 and {} (through which nothing can be opened)",
                PROVIDED.join(", "),
                denied::INTERFACES.join(", ")
            ));
        }
    }
    Ok(())
}

/// The resource table alone, for `wasi:io/error`.
struct Table;

impl HasData for Table {
    type Data<'a> = &'a mut ResourceTable;
}

/// The host side of the interfaces chitin implements itself.
struct Sandbox;

impl HasData for Sandbox {
    type Data<'a> = NoWait<'a>;
}

impl Sandbox {
    fn view(state: &mut State) -> NoWait<'_> {
        NoWait { table: &mut state.table, random: &mut state.random }
    }
}

/// `wasi:io`, `monotonic-clock` and `wasi:random` as a policy sees them.
pub struct NoWait<'a> {
    table: &'a mut ResourceTable,
    random: &'a mut Deterministic,
}

/// Runs `future` as far as it goes without waiting: its output when it is
/// ready at the first poll, else [`Blocked`] naming `call`.
fn at_once<T>(call: &'static str, future: impl Future<Output = T>) -> Result<T, Blocked> {
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => Ok(out),
        Poll::Pending => Err(Blocked { call }),
    }
}

/// [`at_once`] for a call that returns a trappable result.
fn now<T>(call: &'static str, future: impl Future<Output = wasmtime::Result<T>>) -> wasmtime::Result<T> {
    at_once(call, future)?
}

/// [`at_once`] for a stream call: blocking stops the call as a trap.
fn stream_now<T>(call: &'static str, future: impl Future<Output = StreamResult<T>>) -> StreamResult<T> {
    at_once(call, future).map_err(|b| StreamError::Trap(b.into()))?
}

impl poll::Host for NoWait<'_> {
    fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        now("wasi:io/poll.poll", async_io::poll::Host::poll(self.table, pollables))
    }
}

impl poll::HostPollable for NoWait<'_> {
    fn ready(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<bool> {
        now("wasi:io/poll.pollable.ready", async_io::poll::HostPollable::ready(self.table, pollable))
    }
    fn block(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        now("wasi:io/poll.pollable.block", async_io::poll::HostPollable::block(self.table, pollable))
    }
    fn drop(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        async_io::poll::HostPollable::drop(self.table, pollable)
    }
}

impl streams::Host for NoWait<'_> {
    fn convert_stream_error(&mut self, err: StreamError) -> wasmtime::Result<streams::StreamError> {
        streams::Host::convert_stream_error(&mut *self.table, err)
    }
}

impl streams::HostInputStream for NoWait<'_> {
    fn drop(&mut self, stream: Resource<DynInputStream>) -> wasmtime::Result<()> {
        now("wasi:io/streams.input-stream.drop", async_io::streams::HostInputStream::drop(self.table, stream))
    }
    fn read(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<Vec<u8>> {
        streams::HostInputStream::read(&mut *self.table, stream, len)
    }
    fn blocking_read(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<Vec<u8>> {
        stream_now(
            "wasi:io/streams.input-stream.blocking-read",
            async_io::streams::HostInputStream::blocking_read(self.table, stream, len),
        )
    }
    fn skip(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        streams::HostInputStream::skip(&mut *self.table, stream, len)
    }
    fn blocking_skip(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        stream_now(
            "wasi:io/streams.input-stream.blocking-skip",
            async_io::streams::HostInputStream::blocking_skip(self.table, stream, len),
        )
    }
    fn subscribe(&mut self, stream: Resource<DynInputStream>) -> wasmtime::Result<Resource<DynPollable>> {
        streams::HostInputStream::subscribe(&mut *self.table, stream)
    }
}

impl streams::HostOutputStream for NoWait<'_> {
    fn drop(&mut self, stream: Resource<DynOutputStream>) -> wasmtime::Result<()> {
        now("wasi:io/streams.output-stream.drop", async_io::streams::HostOutputStream::drop(self.table, stream))
    }
    fn check_write(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<u64> {
        streams::HostOutputStream::check_write(&mut *self.table, stream)
    }
    fn write(&mut self, stream: Resource<DynOutputStream>, bytes: Vec<u8>) -> StreamResult<()> {
        streams::HostOutputStream::write(&mut *self.table, stream, bytes)
    }
    fn blocking_write_and_flush(&mut self, stream: Resource<DynOutputStream>, bytes: Vec<u8>) -> StreamResult<()> {
        stream_now(
            "wasi:io/streams.output-stream.blocking-write-and-flush",
            async_io::streams::HostOutputStream::blocking_write_and_flush(self.table, stream, bytes),
        )
    }
    fn flush(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<()> {
        streams::HostOutputStream::flush(&mut *self.table, stream)
    }
    fn blocking_flush(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<()> {
        stream_now(
            "wasi:io/streams.output-stream.blocking-flush",
            async_io::streams::HostOutputStream::blocking_flush(self.table, stream),
        )
    }
    fn subscribe(&mut self, stream: Resource<DynOutputStream>) -> wasmtime::Result<Resource<DynPollable>> {
        streams::HostOutputStream::subscribe(&mut *self.table, stream)
    }
    fn write_zeroes(&mut self, stream: Resource<DynOutputStream>, len: u64) -> StreamResult<()> {
        streams::HostOutputStream::write_zeroes(&mut *self.table, stream, len)
    }
    fn blocking_write_zeroes_and_flush(&mut self, stream: Resource<DynOutputStream>, len: u64) -> StreamResult<()> {
        stream_now(
            "wasi:io/streams.output-stream.blocking-write-zeroes-and-flush",
            async_io::streams::HostOutputStream::blocking_write_zeroes_and_flush(self.table, stream, len),
        )
    }
    fn splice(&mut self, dst: Resource<DynOutputStream>, src: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        streams::HostOutputStream::splice(&mut *self.table, dst, src, len)
    }
    fn blocking_splice(&mut self, dst: Resource<DynOutputStream>, src: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        stream_now(
            "wasi:io/streams.output-stream.blocking-splice",
            async_io::streams::HostOutputStream::blocking_splice(self.table, dst, src, len),
        )
    }
}

/// A subscription to the frozen monotonic clock: due at once, or never
/// (the clock never advances, so a later instant never comes).
struct Subscription {
    due: bool,
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for Subscription {
    async fn ready(&mut self) {
        if !self.due {
            std::future::pending::<()>().await;
        }
    }
}

impl NoWait<'_> {
    fn subscription(&mut self, due: bool) -> wasmtime::Result<Resource<DynPollable>> {
        let resource = self.table.push(Subscription { due })?;
        wasmtime_wasi::p2::subscribe(self.table, resource)
    }
}

impl clocks::monotonic_clock::Host for NoWait<'_> {
    fn now(&mut self) -> wasmtime::Result<u64> {
        Ok(0)
    }
    fn resolution(&mut self) -> wasmtime::Result<u64> {
        Ok(1_000_000_000)
    }
    fn subscribe_instant(&mut self, when: u64) -> wasmtime::Result<Resource<DynPollable>> {
        self.subscription(when == 0)
    }
    fn subscribe_duration(&mut self, duration: u64) -> wasmtime::Result<Resource<DynPollable>> {
        self.subscription(duration == 0)
    }
}

impl random::random::Host for NoWait<'_> {
    fn get_random_bytes(&mut self, len: u64) -> wasmtime::Result<Vec<u8>> {
        self.random.bytes(len)
    }
    fn get_random_u64(&mut self) -> wasmtime::Result<u64> {
        Ok(self.random.next_u64())
    }
}

impl random::insecure::Host for NoWait<'_> {
    fn get_insecure_random_bytes(&mut self, len: u64) -> wasmtime::Result<Vec<u8>> {
        self.random.bytes(len)
    }
    fn get_insecure_random_u64(&mut self) -> wasmtime::Result<u64> {
        Ok(self.random.next_u64())
    }
}

impl random::insecure_seed::Host for NoWait<'_> {
    fn insecure_seed(&mut self) -> wasmtime::Result<(u64, u64)> {
        Ok(Deterministic::SEED)
    }
}

/// The randomness of a policy: SplitMix64 from a fixed seed, restarted with
/// every instance. Policies must decide alike on every node, so their
/// "random" choices are the same everywhere; nothing secret may come from it.
pub struct Deterministic {
    state: u64,
}

impl Deterministic {
    /// The seed of the generator, also what `insecure-seed` returns.
    pub const SEED: (u64, u64) = (0x6368_6974_696e_2d70, 0x6f6c_6963_792d_7631);

    /// The generator at the start of its sequence.
    pub fn new() -> Deterministic {
        Deterministic { state: Self::SEED.0 }
    }

    /// The next 64 bits of the sequence.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The next `len` bytes of the sequence; at most [`MAX_RANDOM_BYTES`].
    pub fn bytes(&mut self, len: u64) -> wasmtime::Result<Vec<u8>> {
        if len > MAX_RANDOM_BYTES {
            wasmtime::bail!("the policy asked for {len} random bytes; at most {MAX_RANDOM_BYTES} per call");
        }
        let mut out = Vec::with_capacity(len as usize);
        while out.len() < len as usize {
            let word = self.next_u64().to_le_bytes();
            let take = (len as usize - out.len()).min(8);
            out.extend_from_slice(&word[..take]);
        }
        Ok(out)
    }
}

impl Default for Deterministic {
    fn default() -> Self {
        Deterministic::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_restarts_from_its_seed() {
        let (mut a, mut b) = (Deterministic::new(), Deterministic::new());
        let first = a.bytes(20).unwrap();
        assert_eq!(first, b.bytes(20).unwrap());
        assert_eq!(first.len(), 20);
        assert_ne!(first, vec![0; 20], "deterministic, not zeroed");
        assert_ne!(a.next_u64(), Deterministic::new().next_u64(), "the sequence moves on");
        assert!(a.bytes(MAX_RANDOM_BYTES + 1).is_err());
    }

    #[test]
    fn a_call_that_would_wait_is_blocked_and_one_that_need_not_runs() {
        assert_eq!(at_once("ready", async { 7 }).unwrap(), 7);
        let err = at_once("wasi:io/poll.poll", std::future::pending::<()>()).unwrap_err();
        assert_eq!(err.call, "wasi:io/poll.poll");
        assert!(err.to_string().contains("may not sleep or block"), "{err}");
    }

    #[test]
    fn the_embedded_defaults_import_only_what_the_sandbox_provides() {
        let plugin = super::super::Plugin::load(&super::super::PluginSource::Default, None).unwrap();
        check_imports(plugin.component()).unwrap();
    }
}
