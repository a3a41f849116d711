//! The durable store against the MariaDB/MySQL server on 127.0.0.1:3306, one fresh database per test.

#[macro_use]
mod lease_common;

lease_tests!(chitin::lease::Dialect::MySql);
