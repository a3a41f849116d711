//! What the integration tests share: real clusters of `chitin node`
//! processes (`cluster`), the durable store's scenarios run on every dialect
//! (`lease`), Redis namespaces for the coordination tests (`coord`), and the
//! Prometheus exposition parser of the operator tests (`ops`).

pub mod cluster;
pub mod coord;
pub mod lease;
pub mod ops;
