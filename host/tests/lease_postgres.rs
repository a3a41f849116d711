//! The durable store against the PostgreSQL server on 127.0.0.1:5432, one fresh database per test.

#[macro_use]
mod lease_common;

lease_tests!(chitin::lease::Dialect::Postgres);
