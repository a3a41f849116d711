//! What the database benchmarks share: a fresh database per run on the
//! server of `CHITIN_BENCH_POSTGRES_URL` (default: the local PostgreSQL).

use chitin::testkit::{create_database, drop_database, with_database};

pub fn admin_url() -> String {
    std::env::var("CHITIN_BENCH_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// Creates `chitin_bench_<random>`: its name and URL.
pub async fn fresh_db() -> (String, String) {
    let name = format!("chitin_bench_{}", uuid::Uuid::new_v4().simple());
    create_database(&admin_url(), &name).await.unwrap();
    let url = with_database(&admin_url(), &name);
    (name, url)
}

pub async fn drop_db(name: &str) {
    drop_database(&admin_url(), name).await.unwrap();
}
