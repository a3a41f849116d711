//! The durable store against SQLite files in temporary directories, one fresh database per test.

#[macro_use]
mod lease_common;

lease_tests!(chitin::lease::Dialect::Sqlite);
