//! Fresh databases in a configured PostgreSQL or MySQL/MariaDB server: one
//! per test or chaos run, dropped afterwards, so that runs never share state.

use sqlx::Connection;

use super::KitError;

/// `url` with its database name replaced by `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let after_scheme = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[after_scheme..].find('/').map(|i| after_scheme + i);
    let root = path_start.map_or(base, |i| &base[..i]);
    match query {
        Some(q) => format!("{root}/{db}?{q}"),
        None => format!("{root}/{db}"),
    }
}

/// Creates database `db` on the server of `admin_url` (PostgreSQL or MySQL).
pub async fn create_database(admin_url: &str, db: &str) -> Result<(), KitError> {
    run_admin(admin_url, &format!("CREATE DATABASE {db}")).await
}

/// Drops database `db`; on PostgreSQL its open connections are ended.
pub async fn drop_database(admin_url: &str, db: &str) -> Result<(), KitError> {
    let sql = if is_postgres(admin_url) {
        format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    } else {
        format!("DROP DATABASE IF EXISTS {db}")
    };
    run_admin(admin_url, &sql).await
}

fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres")
}

fn is_mysql(url: &str) -> bool {
    url.starts_with("mysql") || url.starts_with("mariadb")
}

async fn run_admin(admin_url: &str, sql: &str) -> Result<(), KitError> {
    let connect = |source| KitError::Sql { what: format!("connect to {admin_url}"), source };
    let run = |source| KitError::Sql { what: sql.to_string(), source };
    let statement = || sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()));
    if is_postgres(admin_url) {
        let mut c = sqlx::PgConnection::connect(admin_url).await.map_err(connect)?;
        statement().execute(&mut c).await.map_err(run)?;
        let _ = c.close().await;
    } else if is_mysql(admin_url) {
        let mut c = sqlx::MySqlConnection::connect(admin_url).await.map_err(connect)?;
        statement().execute(&mut c).await.map_err(run)?;
        let _ = c.close().await;
    } else {
        return Err(KitError::UnsupportedUrl(admin_url.to_string()));
    }
    Ok(())
}

/// A database created for one test or run: `<prefix><random>` beside the
/// one `admin_url` names. Drop it with [`FreshDb::drop_db`]; a test that
/// panics first leaves it behind under its recognisable prefix.
#[derive(Clone, Debug)]
pub struct FreshDb {
    /// The server's URL as given (naming any database to connect to).
    pub admin_url: String,
    pub name: String,
    /// The fresh database's URL.
    pub url: String,
}

impl FreshDb {
    /// Creates `<prefix><32 hex digits>`.
    pub async fn create(admin_url: &str, prefix: &str) -> Result<FreshDb, KitError> {
        FreshDb::create_named(admin_url, &format!("{prefix}{}", uuid::Uuid::new_v4().simple())).await
    }

    /// Creates database `name`.
    pub async fn create_named(admin_url: &str, name: &str) -> Result<FreshDb, KitError> {
        create_database(admin_url, name).await?;
        Ok(FreshDb { admin_url: admin_url.to_string(), name: name.to_string(), url: with_database(admin_url, name) })
    }

    /// Drops the database.
    pub async fn drop_db(&self) -> Result<(), KitError> {
        drop_database(&self.admin_url, &self.name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_name_is_replaced() {
        for (url, want) in [
            ("postgres://u@h:5432/postgres", "postgres://u@h:5432/x"),
            ("mysql://root@h:3306", "mysql://root@h:3306/x"),
            ("postgres://h/db?sslmode=disable", "postgres://h/x?sslmode=disable"),
            ("mariadb://root@h:3306/test?x=1", "mariadb://root@h:3306/x?x=1"),
        ] {
            assert_eq!(with_database(url, "x"), want, "{url}");
        }
    }

    #[tokio::test]
    async fn a_sqlite_url_is_refused_with_the_reason() {
        let err = create_database("sqlite:///tmp/x.db", "x").await.unwrap_err();
        assert!(matches!(err, KitError::UnsupportedUrl(_)), "{err}");
        assert!(err.to_string().contains("SQLite cannot be shared"), "{err}");
    }
}
