//! The fence adapters for an application's own data (`chitin_client::fence`),
//! against real servers: a PostgreSQL and a MariaDB database that are not
//! chitin's, and Redis. Per store: a claim only ever raises the epoch; a
//! claim waits for the older holder's open transaction and every later
//! write under the older token is refused; claiming a split's child retires
//! the parent's token.

use std::time::Duration;

use chitin::lease::Dialect;
use chitin_client::fence::table;
use chitin_client::fence::{FenceError, LeaseToken};
use sqlx::{MySqlPool, PgPool};

use crate::support::coord::TestNs;
use crate::support::lease::TestDb;

fn token(shard: &str, holder: u128, epoch: u64) -> LeaseToken {
    LeaseToken { shard: shard.into(), holder: uuid::Uuid::from_u128(holder), epoch }
}

fn is_lost(r: Result<impl Sized, FenceError>) -> bool {
    matches!(r, Err(FenceError::Lost { .. }))
}

/// The same scenario on both SQL dialects, through the adapter's functions.
macro_rules! sql_scenario {
    ($name:ident, $dialect:expr, $pool:ty, $connect:path, $migrate:path, $claim:path, $begin:path, $insert:literal, $count:literal) => {
        #[tokio::test(flavor = "multi_thread")]
        async fn $name() {
            let db = TestDb::create($dialect).await.unwrap();
            let pool: $pool = $connect(&db.url).await.unwrap();
            $migrate(&pool).await.unwrap();
            $migrate(&pool).await.expect("the migration is idempotent");
            sqlx::query("CREATE TABLE app_writes (k VARCHAR(64) NOT NULL, epoch BIGINT NOT NULL)").execute(&pool).await.unwrap();
            let (old, new) = (token("s1", 1, 5), token("s1", 2, 6));

            // An unclaimed shard takes no write; a claim makes it writable.
            assert!(is_lost($begin(&pool, &old).await), "a write before the claim");
            $claim(&pool, &old, None).await.unwrap();
            $claim(&pool, &old, None).await.expect("claiming again with the same token is a no-op");

            // The old holder's transaction is open when the new holder claims:
            // the claim waits for it, and it commits.
            let mut tx = $begin(&pool, &old).await.unwrap();
            sqlx::query($insert).bind("k").bind(5i64).execute(&mut *tx).await.unwrap();
            let claiming = tokio::spawn({
                let (pool, new) = (pool.clone(), new.clone());
                async move { $claim(&pool, &new, None).await }
            });
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert!(!claiming.is_finished(), "the claim did not wait for the older epoch's open transaction");
            tx.commit().await.expect("a transaction that checked before the claim commits");
            claiming.await.unwrap().unwrap();

            // After the claim: every write under the older token is refused, a
            // claim of the older epoch too; the new holder writes.
            assert!(is_lost($begin(&pool, &old).await), "a write under the deposed token");
            let stale = $claim(&pool, &old, None).await;
            assert!(matches!(stale, Err(FenceError::Superseded { stored: 6, .. })), "{stale:?}");
            let mut tx = $begin(&pool, &new).await.unwrap();
            sqlx::query($insert).bind("k").bind(6i64).execute(&mut *tx).await.unwrap();
            tx.commit().await.unwrap();

            // A split: claiming a child retires the parent's token.
            let child = token("s1_a", 3, 1);
            $claim(&pool, &child, Some("s1")).await.unwrap();
            assert!(is_lost($begin(&pool, &new).await), "the parent's token writes after a child claimed");
            let again = $claim(&pool, &token("s1", 2, 7), None).await;
            assert!(matches!(again, Err(FenceError::Retired { .. })), "{again:?}");
            $begin(&pool, &child).await.expect("the child writes").commit().await.unwrap();

            let rows: Vec<(i64,)> = sqlx::query_as($count).fetch_all(&pool).await.unwrap();
            assert_eq!(rows, vec![(5,), (6,)], "exactly the two admitted writes, in epoch order");
            pool.close().await;
            db.drop_db().await.unwrap();
        }
    };
}

// case: fence-postgres
sql_scenario!(
    postgres_fence_table_claims_wait_refuse_and_retire,
    Dialect::Postgres,
    PgPool,
    PgPool::connect,
    table::migrate_postgres,
    table::claim_postgres,
    table::begin_postgres,
    "INSERT INTO app_writes (k, epoch) VALUES ($1, $2)",
    "SELECT epoch FROM app_writes ORDER BY epoch"
);

// case: fence-mariadb
sql_scenario!(
    mariadb_fence_table_claims_wait_refuse_and_retire,
    Dialect::MySql,
    MySqlPool,
    MySqlPool::connect,
    table::migrate_mysql,
    table::claim_mysql,
    table::begin_mysql,
    "INSERT INTO app_writes (k, epoch) VALUES (?, ?)",
    "SELECT epoch FROM app_writes ORDER BY epoch"
);

#[tokio::test(flavor = "multi_thread")]
// case: fence-redis
async fn redis_fence_claims_refuse_stale_writes_and_retire_parents() {
    use chitin_client::fence::redis::RedisFence;
    let ns = TestNs::new();
    let client = redis::Client::open(ns.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let fence = RedisFence::new(format!("{}:", ns.ns));
    let key = format!("{}:{{s1}}:counter", ns.ns);
    let incr = || {
        let mut c = redis::cmd("INCRBY");
        c.arg(&key).arg(1);
        c
    };
    let (old, new) = (token("s1", 1, 5), token("s1", 2, 6));

    assert!(is_lost(fence.write(&mut conn, &old, &[incr()]).await), "a write before the claim");
    fence.claim(&mut conn, &old, None).await.unwrap();
    let replies = fence.write(&mut conn, &old, &[incr(), incr()]).await.unwrap();
    assert_eq!(replies, vec![redis::Value::Int(1), redis::Value::Int(2)]);

    fence.claim(&mut conn, &new, None).await.unwrap();
    assert!(is_lost(fence.write(&mut conn, &old, &[incr()]).await), "a write under the deposed token");
    let stale = fence.claim(&mut conn, &old, None).await;
    assert!(matches!(stale, Err(FenceError::Superseded { stored: 6, .. })), "{stale:?}");
    assert_eq!(fence.write(&mut conn, &new, &[incr()]).await.unwrap(), vec![redis::Value::Int(3)]);

    let child = token("s1_a", 3, 1);
    fence.claim(&mut conn, &child, Some("s1")).await.unwrap();
    assert!(is_lost(fence.write(&mut conn, &new, &[incr()]).await), "the parent's token writes after a child claimed");
    let again = fence.claim(&mut conn, &token("s1", 2, 7), None).await;
    assert!(matches!(again, Err(FenceError::Retired { .. })), "{again:?}");

    let stored: i64 = redis::cmd("GET").arg(&key).query_async(&mut conn).await.unwrap();
    assert_eq!(stored, 3, "only the admitted writes ran");
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_single_statement_write_carries_the_check() {
    let db = TestDb::create(Dialect::Postgres).await.unwrap();
    let pool = PgPool::connect(&db.url).await.unwrap();
    table::migrate_postgres(&pool).await.unwrap();
    sqlx::query("CREATE TABLE orders (id BIGINT PRIMARY KEY)").execute(&pool).await.unwrap();
    // The documented statement (examples/ownership.md): the check in a WITH.
    let write = |t: LeaseToken, id: i64| {
        let pool = pool.clone();
        async move {
            sqlx::query(
                "WITH fence AS (SELECT 1 FROM chitin_fence WHERE shard_id = $1 AND epoch = $2 AND holder = $3 \
                 AND NOT retired FOR SHARE) INSERT INTO orders (id) SELECT $4 FROM fence RETURNING id",
            )
            .bind(&t.shard)
            .bind(t.epoch as i64)
            .bind(t.holder)
            .bind(id)
            .fetch_optional(&pool)
            .await
            .unwrap()
            .is_some()
        }
    };
    let (old, new) = (token("s", 1, 1), token("s", 2, 2));
    table::claim_postgres(&pool, &old, None).await.unwrap();
    assert!(write(old.clone(), 1).await, "the current token writes");
    table::claim_postgres(&pool, &new, None).await.unwrap();
    assert!(!write(old, 2).await, "the deposed token wrote");
    assert!(write(new, 3).await);
    let ids: Vec<(i64,)> = sqlx::query_as("SELECT id FROM orders ORDER BY id").fetch_all(&pool).await.unwrap();
    assert_eq!(ids, vec![(1,), (3,)]);
    pool.close().await;
    db.drop_db().await.unwrap();
}

/// Instances that start together migrate at once: every one succeeds. (Two
/// bare `CREATE TABLE IF NOT EXISTS` at once can fail on PostgreSQL's
/// catalog; eight psql processes at once did in two rounds of five here.)
#[tokio::test(flavor = "multi_thread")]
async fn instances_starting_together_all_migrate_the_fence_on_postgres() {
    for round in 0..6 {
        let db = TestDb::create(Dialect::Postgres).await.unwrap();
        let mut pools = Vec::new();
        for _ in 0..8 {
            pools.push(PgPool::connect(&db.url).await.unwrap());
        }
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(pools.len()));
        let tasks: Vec<_> = pools
            .into_iter()
            .map(|pool| {
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    table::migrate_postgres(&pool).await
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap_or_else(|e| panic!("round {round}: a migration failed beside the others: {e}"));
        }
    }
}
