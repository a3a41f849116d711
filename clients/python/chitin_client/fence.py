"""Fencing an application's own data, the same way as the Rust crate's
``chitin_client::fence::table`` and ``fence::redis`` (docs/clients.md,
examples/ownership.md): a fence row per shard beside your data, whose epoch
only rises.

1. **Claim** before serving a shard (on ``ACQUIRED`` or for each shard of a
   ``Held`` snapshot): :func:`claim` writes your epoch into the shard's row,
   waiting for the older holder's open write transactions; a split child's
   claim retires its parent's row in the same transaction.
2. **Check** first in every write transaction: :func:`fenced` opens a cursor
   whose first statement is the check, commits on success and rolls back on
   any error.

Any DB-API 2.0 connection works (psycopg, PyMySQL, mysqlclient …) with the
``format`` parameter style (``%s``); pass :data:`POSTGRES` or :data:`MYSQL`.
For Redis (redis-py), :class:`RedisFence` runs the same rules as scripts.

    from chitin_client import fence
    token = fence.Token.from_lease(lease)           # from Held / Route
    fence.claim(conn, fence.POSTGRES, token, parent=lease.parent)
    with fence.fenced(conn, fence.POSTGRES, token) as cur:
        cur.execute("INSERT INTO orders (id) VALUES (%s)", (7,))

The statements below are the Rust crate's constants, verbatim (a test keeps
them equal), with the placeholders rewritten for DB-API drivers.
"""

import re
from contextlib import contextmanager
from typing import Any, Iterator, List, NamedTuple, Optional, Sequence

__all__ = [
    "Dialect",
    "Lost",
    "MYSQL",
    "POSTGRES",
    "RedisFence",
    "Retired",
    "Superseded",
    "Token",
    "claim",
    "fenced",
    "migrate",
]


class Lost(Exception):
    """The token may not write (a newer holder claimed, the shard was split,
    or it was never claimed): nothing was written; route the key again."""


class Superseded(Exception):
    """A claim found a newer epoch (or another holder at this one): stop
    serving the shard."""


class Retired(Exception):
    """A claim found the shard retired (split, and a child claimed)."""


class Token(NamedTuple):
    """A lease as a fencing token: shard, holder UUID (text), epoch."""

    shard: str
    holder: str
    epoch: int

    @classmethod
    def from_lease(cls, lease: Any) -> "Token":
        """The token of a ``ShardLease`` (``Held``, ``Route``)."""
        if not lease.holder_uuid:
            raise ValueError(f"shard {lease.shard} has no holder: wait for one and ask again")
        return cls(lease.shard, lease.holder_uuid.lower(), int(lease.epoch))


def _format(sql: str) -> str:
    """``$1``/``?`` placeholders (in order) as DB-API ``%s``."""
    return re.sub(r"\$\d+|\?", "%s", sql)


class Dialect(NamedTuple):
    migration: str
    claim: str
    retire: str
    read: str
    check: str


# clients/rust/src/fence/table.rs: POSTGRES_MIGRATION, POSTGRES_CLAIM,
# POSTGRES_RETIRE, POSTGRES_READ, POSTGRES_CHECK.
POSTGRES = Dialect(
    migration="""DO $$ BEGIN
  PERFORM pg_advisory_xact_lock(27980661893770854);
  CREATE TABLE IF NOT EXISTS chitin_fence (
    shard_id TEXT PRIMARY KEY,
    epoch BIGINT NOT NULL,
    holder UUID,
    retired BOOLEAN NOT NULL DEFAULT FALSE,
    claimed_at TIMESTAMPTZ NOT NULL DEFAULT now());
END $$""",
    claim=_format(
        "INSERT INTO chitin_fence (shard_id, epoch, holder) VALUES ($1, $2, $3) "
        "ON CONFLICT (shard_id) DO UPDATE SET epoch = EXCLUDED.epoch, holder = EXCLUDED.holder, claimed_at = now() "
        "WHERE chitin_fence.epoch < EXCLUDED.epoch AND NOT chitin_fence.retired"
    ),
    retire=_format(
        "INSERT INTO chitin_fence (shard_id, epoch, retired) VALUES ($1, 0, TRUE) "
        "ON CONFLICT (shard_id) DO UPDATE SET retired = TRUE"
    ),
    read=_format("SELECT epoch, holder::text AS holder, retired FROM chitin_fence WHERE shard_id = $1"),
    check=_format(
        "SELECT 1 FROM chitin_fence WHERE shard_id = $1 AND epoch = $2 AND holder = $3 AND NOT retired FOR SHARE"
    ),
)

# The MySQL/MariaDB twins (MYSQL_*).
MYSQL = Dialect(
    migration="""CREATE TABLE IF NOT EXISTS chitin_fence (
    shard_id VARBINARY(255) NOT NULL PRIMARY KEY,
    epoch BIGINT NOT NULL,
    holder CHAR(36) NULL,
    retired BOOLEAN NOT NULL DEFAULT FALSE,
    claimed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB""",
    claim=_format(
        "INSERT INTO chitin_fence (shard_id, epoch, holder) VALUES (?, ?, ?) "
        "ON DUPLICATE KEY UPDATE "
        "holder = IF(NOT retired AND epoch < VALUES(epoch), VALUES(holder), holder), "
        "claimed_at = IF(NOT retired AND epoch < VALUES(epoch), CURRENT_TIMESTAMP(6), claimed_at), "
        "epoch = IF(NOT retired AND epoch < VALUES(epoch), VALUES(epoch), epoch)"
    ),
    retire=_format(
        "INSERT INTO chitin_fence (shard_id, epoch, retired) VALUES (?, 0, TRUE) ON DUPLICATE KEY UPDATE retired = TRUE"
    ),
    read=_format("SELECT epoch, holder, retired FROM chitin_fence WHERE shard_id = ?"),
    check=_format(
        "SELECT 1 FROM chitin_fence WHERE shard_id = ? AND epoch = ? AND holder = ? AND NOT retired LOCK IN SHARE MODE"
    ),
)


@contextmanager
def _transaction(conn: Any) -> Iterator[Any]:
    """A cursor whose work commits when the block ends and rolls back on any
    error (``Lost``, ``Superseded`` and ``Retired`` included)."""
    cur = conn.cursor()
    try:
        yield cur
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    finally:
        cur.close()


def migrate(conn: Any, dialect: Dialect) -> None:
    """Creates the fence table if it is missing."""
    with _transaction(conn) as cur:
        cur.execute(dialect.migration)


def claim(conn: Any, dialect: Dialect, token: Token, parent: Optional[str] = None) -> None:
    """Claims ``token``'s shard for its epoch before serving it, retiring
    ``parent`` in the same transaction; raises :class:`Superseded` or
    :class:`Retired` (and writes nothing) when the shard is not ours."""
    with _transaction(conn) as cur:
        cur.execute(dialect.claim, (token.shard, token.epoch, token.holder))
        cur.execute(dialect.read, (token.shard,))
        epoch, holder, retired = cur.fetchone()
        if retired:
            raise Retired(f"the fence of shard {token.shard} is retired (split, and a child claimed)")
        if int(epoch) != token.epoch or str(holder or "").lower() != token.holder:
            raise Superseded(f"the fence of shard {token.shard} holds epoch {epoch}, this claim {token.epoch}")
        if parent:
            cur.execute(dialect.retire, (parent,))


@contextmanager
def fenced(conn: Any, dialect: Dialect, token: Token) -> Iterator[Any]:
    """A cursor in a transaction whose first statement is the check: commits
    when the block ends, rolls back on any error; raises :class:`Lost` (and
    writes nothing) when the token may not write."""
    with _transaction(conn) as cur:
        cur.execute(dialect.check, (token.shard, token.epoch, token.holder))
        if cur.fetchone() is None:
            raise Lost(f"the lease of shard {token.shard} at epoch {token.epoch} is lost: route the key again")
        yield cur


# clients/rust/src/fence/redis.rs: CLAIM_SCRIPT and WRITE_SCRIPT.
CLAIM_SCRIPT = r"""
local cur = redis.call('HMGET', KEYS[1], 'epoch', 'holder', 'retired')
if cur[3] == '1' then return {'retired', cur[1] or '0'} end
local stored = tonumber(cur[1] or '0')
local epoch = tonumber(ARGV[1])
if stored > epoch or (stored == epoch and cur[2] ~= ARGV[2]) then return {'superseded', tostring(stored)} end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'holder', ARGV[2])
if KEYS[2] then redis.call('HSET', KEYS[2], 'retired', '1') end
return {'ok', ARGV[1]}
"""

WRITE_SCRIPT = r"""
local cur = redis.call('HMGET', KEYS[1], 'epoch', 'holder', 'retired')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or cur[3] == '1' then return {0, cur[1] or 'none'} end
local i, replies = 4, {}
for c = 1, tonumber(ARGV[3]) do
  local n, args = tonumber(ARGV[i]), {}
  for a = 1, n do args[a] = ARGV[i + a] end
  i = i + n + 1
  replies[c] = redis.call(unpack(args))
end
return {1, replies}
"""


class RedisFence:
    """The fence of an application's Redis data under ``prefix``, over a
    redis-py client; the same keys and scripts as the Rust ``RedisFence``."""

    def __init__(self, client: Any, prefix: str):
        self._claim = client.register_script(CLAIM_SCRIPT)
        self._write = client.register_script(WRITE_SCRIPT)
        self.prefix = prefix

    def key(self, shard: str) -> str:
        return f"{self.prefix}fence:{{{shard}}}"

    def claim(self, token: Token, parent: Optional[str] = None) -> None:
        keys = [self.key(token.shard)] + ([self.key(parent)] if parent else [])
        status, stored = self._claim(keys=keys, args=[token.epoch, token.holder])
        status = status.decode() if isinstance(status, bytes) else status
        if status == "retired":
            raise Retired(f"the fence of shard {token.shard} is retired (split, and a child claimed)")
        if status != "ok":
            raise Superseded(f"the fence of shard {token.shard} holds epoch {int(stored)}, this claim {token.epoch}")

    def write(self, token: Token, commands: Sequence[Sequence[Any]]) -> List[Any]:
        """Runs ``commands`` (each a sequence: name, then arguments)
        atomically if the fence holds ``token``; raises :class:`Lost` (and
        runs nothing) if not."""
        args: List[Any] = [token.epoch, token.holder, len(commands)]
        for command in commands:
            args.append(len(command))
            args.extend(command)
        allowed, replies = self._write(keys=[self.key(token.shard)], args=args)
        if allowed != 1:
            raise Lost(f"the lease of shard {token.shard} at epoch {token.epoch} is lost: route the key again")
        return list(replies)
