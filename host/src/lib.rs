//! chitin: a cluster control plane for sharded services, extended with
//! WebAssembly policy plugins.
//!
//! - [`policy`]: the wasmtime host that loads and calls policy components.

pub mod policy;
