//! The durable store's scenarios (`support::lease`) on every dialect, one
//! fresh database per test: PostgreSQL on 127.0.0.1:5432, MariaDB/MySQL on
//! 127.0.0.1:3306, and SQLite files in temporary directories.

mod postgres {
    crate::support::lease::lease_tests!(chitin::lease::Dialect::Postgres);
}

mod mysql {
    crate::support::lease::lease_tests!(chitin::lease::Dialect::MySql);
}

mod sqlite {
    crate::support::lease::lease_tests!(chitin::lease::Dialect::Sqlite);
}
