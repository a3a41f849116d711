//! The durable store's scenarios (`support::lease`) on every dialect, one
//! fresh database per test: PostgreSQL on 127.0.0.1:5432, MariaDB/MySQL on
//! 127.0.0.1:3306, and SQLite files in temporary directories.

use crate::support::lease;

/// Generates one `#[tokio::test]` per scenario for a dialect.
macro_rules! lease_tests {
    ($dialect:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn migrate_idempotent() {
            lease::run($dialect, lease::migrate_idempotent).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn round_leases() {
            lease::run($dialect, lease::round_leases).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn append_batch() {
            lease::run($dialect, lease::append_batch).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn group_commit_survives_a_cancelled_caller() {
            lease::run($dialect, lease::group_commit_survives_a_cancelled_caller).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn leases_on_liveness() {
            lease::run($dialect, lease::leases_on_liveness).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn registration() {
            lease::run($dialect, lease::registration).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn acquire_renew_expire() {
            lease::run($dialect, lease::acquire_renew_expire).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn epochs_increase() {
            lease::run($dialect, lease::epochs_increase).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn stale_token_writes_nothing() {
            lease::run($dialect, lease::stale_token_writes_nothing).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn expired_token_writes_nothing() {
            lease::run($dialect, lease::expired_token_writes_nothing).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn request_id_idempotent() {
            lease::run($dialect, lease::request_id_idempotent).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn concurrent_appends() {
            lease::run($dialect, lease::concurrent_appends).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn cluster_meta() {
            lease::run($dialect, lease::cluster_meta).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn application_fence_sql() {
            lease::run($dialect, lease::application_fence_sql).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn handover_waits_for_fenced_transaction() {
            lease::run($dialect, lease::handover_waits_for_fenced_transaction).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn deregister_frees_leases() {
            lease::run($dialect, lease::deregister_frees_leases).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn targeted_queries() {
            lease::run($dialect, lease::targeted_queries).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn split_retires_parent() {
            lease::run($dialect, lease::split_retires_parent).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn concurrent_split_seed() {
            lease::run($dialect, lease::concurrent_split_seed).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn split_waits_for_fenced_transaction() {
            lease::run($dialect, lease::split_waits_for_fenced_transaction).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn handoff_budget_is_database_wide() {
            lease::run($dialect, lease::handoff_budget_is_database_wide).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn handover_refuses_leaving() {
            lease::run($dialect, lease::handover_refuses_leaving).await
        }
    };
}

mod postgres {
    use super::*;
    lease_tests!(chitin::lease::Dialect::Postgres);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lock_wait_ends_the_attempt() {
        lease::run(chitin::lease::Dialect::Postgres, lease::lock_wait_ends_the_attempt).await
    }

    /// Nodes of a cluster start together (SQLite serves one node).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_registration() {
        lease::run(chitin::lease::Dialect::Postgres, lease::concurrent_registration).await
    }
}

mod mysql {
    use super::*;
    lease_tests!(chitin::lease::Dialect::MySql);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lock_wait_ends_the_attempt() {
        lease::run(chitin::lease::Dialect::MySql, lease::lock_wait_ends_the_attempt).await
    }

    /// Nodes of a cluster start together (SQLite serves one node).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_registration() {
        lease::run(chitin::lease::Dialect::MySql, lease::concurrent_registration).await
    }
}

mod sqlite {
    use super::*;
    lease_tests!(chitin::lease::Dialect::Sqlite);
}
