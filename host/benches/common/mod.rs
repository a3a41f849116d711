//! What the database benchmarks share: a fresh database per run on the
//! server of `CHITIN_BENCH_POSTGRES_URL` (default: the local PostgreSQL) or,
//! where a bench says so, of `CHITIN_BENCH_MYSQL_URL` (default: the local
//! MariaDB).

use chitin::testkit::{create_database, drop_database, with_database};

pub fn admin_url() -> String {
    std::env::var("CHITIN_BENCH_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

#[allow(dead_code)] // not every bench measures MySQL
pub fn mysql_admin_url() -> String {
    std::env::var("CHITIN_BENCH_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

/// Creates `chitin_bench_<random>` on the PostgreSQL server: its name and URL.
#[allow(dead_code)]
pub async fn fresh_db() -> (String, String) {
    fresh_db_on(&admin_url()).await
}

/// Creates `chitin_bench_<random>` on the server of `admin`: its name and URL.
pub async fn fresh_db_on(admin: &str) -> (String, String) {
    let name = format!("chitin_bench_{}", uuid::Uuid::new_v4().simple());
    create_database(admin, &name).await.unwrap();
    let url = with_database(admin, &name);
    (name, url)
}

#[allow(dead_code)]
pub async fn drop_db(name: &str) {
    drop_db_on(&admin_url(), name).await
}

pub async fn drop_db_on(admin: &str, name: &str) {
    drop_database(admin, name).await.unwrap();
}
