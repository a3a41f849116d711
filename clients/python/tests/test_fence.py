"""chitin_client.fence against real servers: a PostgreSQL and a MariaDB
database of the test's own (not chitin's) and Redis. The same cases as the
Rust crate's (host/tests/it/app_fence.rs): a claim only raises the epoch,
waits for the older holder's open transaction and refuses its later writes;
a split child's claim retires the parent."""

import os
import threading
import time
import uuid
from urllib.parse import urlparse

import pymysql
import psycopg
import pytest
import redis

from chitin_client import fence

PG = urlparse(os.environ.get("CHITIN_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres"))
MY = urlparse(os.environ.get("CHITIN_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"))
REDIS = os.environ.get("CHITIN_TEST_REDIS_URL", "redis://127.0.0.1:6379")

OLD = fence.Token("s1", str(uuid.UUID(int=1)), 5)
NEW = fence.Token("s1", str(uuid.UUID(int=2)), 6)
CHILD = fence.Token("s1_a", str(uuid.UUID(int=3)), 1)


def pg_connect(db):
    return psycopg.connect(host=PG.hostname, port=PG.port or 5432, user=PG.username or "postgres", dbname=db)


def my_connect(db):
    return pymysql.connect(host=MY.hostname, port=MY.port or 3306, user=MY.username or "root", password=MY.password or "", database=db)


@pytest.fixture(params=["postgres", "mariadb"])
def store(request):
    """(connect, dialect) for a fresh database of the test's own."""
    name = f"chitin_py_{uuid.uuid4().hex[:12]}"
    if request.param == "postgres":
        admin = psycopg.connect(host=PG.hostname, port=PG.port or 5432, user=PG.username or "postgres", dbname=PG.path.lstrip("/"), autocommit=True)
        admin.execute(f"CREATE DATABASE {name}")
        yield (lambda: pg_connect(name)), fence.POSTGRES, "%s"
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        admin.close()
    else:
        admin = my_connect(MY.path.lstrip("/") or None)
        with admin.cursor() as c:
            c.execute(f"CREATE DATABASE {name}")
        yield (lambda: my_connect(name)), fence.MYSQL, "%s"
        with admin.cursor() as c:
            c.execute(f"DROP DATABASE {name}")
        admin.close()


# case: fence-postgres
# case: fence-mariadb
def test_a_claim_waits_for_the_older_epoch_refuses_it_after_and_a_child_retires_the_parent(store):
    connect, dialect, ph = store
    a, b = connect(), connect()
    fence.migrate(a, dialect)
    fence.migrate(a, dialect)  # idempotent
    cur = a.cursor()
    cur.execute("CREATE TABLE app_writes (k VARCHAR(64) NOT NULL, epoch BIGINT NOT NULL)")
    a.commit()

    with pytest.raises(fence.Lost):
        with fence.fenced(a, dialect, OLD):
            pass
    fence.claim(a, dialect, OLD)
    fence.claim(a, dialect, OLD)  # the same token again: a no-op

    # The old holder's transaction is open when the new holder claims.
    claimed = []
    with fence.fenced(a, dialect, OLD) as c:
        c.execute(f"INSERT INTO app_writes (k, epoch) VALUES ({ph}, {ph})", ("k", 5))
        t = threading.Thread(target=lambda: claimed.append(fence.claim(b, dialect, NEW)))
        t.start()
        time.sleep(0.5)
        assert t.is_alive(), "the claim did not wait for the older epoch's open transaction"
    t.join(30)
    assert claimed == [None]

    with pytest.raises(fence.Lost):
        with fence.fenced(a, dialect, OLD) as c:
            c.execute(f"INSERT INTO app_writes (k, epoch) VALUES ({ph}, {ph})", ("k", 99))
    with pytest.raises(fence.Superseded):
        fence.claim(a, dialect, OLD)
    with fence.fenced(b, dialect, NEW) as c:
        c.execute(f"INSERT INTO app_writes (k, epoch) VALUES ({ph}, {ph})", ("k", 6))

    fence.claim(b, dialect, CHILD, parent="s1")
    with pytest.raises(fence.Lost):
        with fence.fenced(b, dialect, NEW):
            pass
    with pytest.raises(fence.Retired):
        fence.claim(b, dialect, NEW._replace(epoch=7))

    cur = a.cursor()
    cur.execute("SELECT epoch FROM app_writes ORDER BY epoch")
    assert [r[0] for r in cur.fetchall()] == [5, 6]
    a.close()
    b.close()


# case: fence-redis
def test_redis_fence_refuses_stale_writes_and_retires_parents():
    client = redis.Redis.from_url(REDIS)
    prefix = f"chitin-test-{uuid.uuid4().hex[:12]}:"
    key = f"{prefix}{{s1}}:counter"
    f = fence.RedisFence(client, prefix)
    try:
        with pytest.raises(fence.Lost):
            f.write(OLD, [("INCRBY", key, 1)])
        f.claim(OLD)
        assert f.write(OLD, [("INCRBY", key, 1), ("INCRBY", key, 1)]) == [1, 2]
        f.claim(NEW)
        with pytest.raises(fence.Lost):
            f.write(OLD, [("INCRBY", key, 1)])
        with pytest.raises(fence.Superseded):
            f.claim(OLD)
        assert f.write(NEW, [("INCRBY", key, 1)]) == [3]
        f.claim(CHILD, parent="s1")
        with pytest.raises(fence.Lost):
            f.write(NEW, [("INCRBY", key, 1)])
        with pytest.raises(fence.Retired):
            f.claim(NEW._replace(epoch=7))
        assert int(client.get(key)) == 3
    finally:
        for k in client.scan_iter(f"{prefix}*"):
            client.delete(k)
