"""The database: SQLite (WAL) by default, PostgreSQL through asyncpg.

Reads run in parallel on a pool of connections (`sessions()`); every write goes through the
one `Writer` (`write` / `defer`). On SQLite the read connections are query-only, so a write
that bypasses the writer fails at once instead of racing it for the lock, and the writer's
one connection is a plain (synchronous) sqlite3 one on a thread of its own, so that a whole
transaction is one hop there and back (`ThreadTransactions`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, insert, make_url, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlmodel import Session, SQLModel
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.config import sqlalchemy_async_url
from bot.errors import StoreError
from bot.store import tables  # noqa: F401  (registers the tables on SQLModel.metadata)
from bot.store.schema import bring_up_to_date, current_revision, head_revision, refuse_newer
from bot.store.writer import Op, Writer

T = TypeVar("T")


class Database:
    def __init__(self, url: str, *, linger_s: float = 0.5) -> None:
        async_url = sqlalchemy_async_url(url)
        self.is_sqlite = async_url.startswith("sqlite")
        self.where = _where(async_url)
        self._url = async_url
        self.engine: AsyncEngine = _engine(async_url, pool_pre_ping=True)
        self._transactions = _writer_transactions(async_url)
        if self.is_sqlite:
            event.listen(self.engine.sync_engine, "connect", _sqlite_reader)
        self.sessions = async_sessionmaker(self.engine, class_=AsyncSession, expire_on_commit=False)
        self.writer = Writer(self._transactions, linger_s=linger_s)

    async def write(self, op: Op[T]) -> T:
        """Apply `op` through the one writer; returns once it is committed."""
        return await self.writer.write(op)

    async def write_ahead(self, op: Op[T]) -> T:
        """Apply `op` ahead of everything queued, in a transaction of its own (`Writer`)."""
        return await self.writer.write_ahead(op)

    def defer(self, op: Op[Any]) -> None:
        """Queue `op`; it is committed with the next durable write."""
        self.writer.defer(op)

    async def upgrade(self) -> None:
        """Bring the schema up to date (Alembic); a store that cannot be used raises
        `StoreError` with one sentence."""
        await self._on_writer(bring_up_to_date)

    async def check(self) -> None:
        """The database answers and holds no schema newer than this code; changes nothing."""
        await self._on_writer(refuse_newer)

    async def _on_writer(self, work: Callable[[Connection], object]) -> None:
        try:
            if self.is_sqlite:
                _ensure_parent_dir(self._url)
            await self._transactions.run(work)
        except StoreError:
            raise
        except Exception as error:
            raise StoreError(
                f"database.url: cannot open {self.where} ({error_reason(error)}); "
                "check the path or server and that kelpie may write there"
            ) from error

    async def at_head(self) -> bool:
        """The schema is this kelpie's (nothing to upgrade); changes nothing."""
        head = head_revision()
        async with self.engine.connect() as connection:
            return await connection.run_sync(current_revision) == head

    async def ping(self) -> None:
        async with self.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))

    async def close(self) -> None:
        await self.writer.close()
        await self.engine.dispose()
        await self._transactions.close()


class ThreadTransactions:
    """SQLite's writer: a synchronous engine used from one thread of its own only, so a
    whole transaction (every statement and the commit) is one hop from the event loop."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="kelpie-store-writer")
        self._closed = False

    async def run(self, work: Callable[[Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._transaction, work)

    def _transaction(self, work: Callable[[Connection], T]) -> T:
        with self._engine.begin() as connection:
            return work(connection)

    async def close(self) -> None:
        if self._closed:  # closing twice is allowed, as for the engines
            return
        self._closed = True
        # On its own thread: sqlite3 closes a connection only where it was made.
        await asyncio.get_running_loop().run_in_executor(self._thread, self._engine.dispose)
        self._thread.shutdown(wait=False)


class LoopTransactions:
    """PostgreSQL's writer: asyncpg has no thread to hop to; the same synchronous work runs
    on the event loop through `run_sync`, on one connection never shared with readers."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def run(self, work: Callable[[Connection], T]) -> T:
        async with self._engine.begin() as connection:
            return await connection.run_sync(work)

    async def close(self) -> None:
        await self._engine.dispose()


def _writer_transactions(async_url: str) -> ThreadTransactions | LoopTransactions:
    # Its sessions always end in a commit or a rollback of their own, so the pool's reset
    # on return would only add a rollback to every transaction.
    if not async_url.startswith("sqlite"):
        return LoopTransactions(
            _engine(
                async_url,
                pool_size=1,
                max_overflow=0,
                pool_pre_ping=True,
                pool_reset_on_return=None,
            )
        )
    url = make_url(async_url).set(drivername="sqlite")
    engine = create_engine(url, pool_size=1, max_overflow=0, pool_reset_on_return=None)
    event.listen(engine, "connect", _sqlite_writer)
    event.listen(engine, "begin", _sqlite_begin_immediate)
    return ThreadTransactions(engine)


def insert_ignoring_duplicates(session: Session, model: type[SQLModel]) -> Any:
    """`INSERT … ON CONFLICT DO NOTHING` for the session's database: a duplicate key is an
    answer (rowcount 0), not an error that would abort the writer's transaction."""
    dialect = session.bind.dialect.name if session.bind is not None else "sqlite"
    module = postgresql if dialect == "postgresql" else sqlite
    return module.insert(model).on_conflict_do_nothing()


def _engine(url: str, **options: Any) -> AsyncEngine:
    if url.startswith("sqlite"):
        # SQLite's own pool: the size options are for server databases. No ping either: a
        # file never drops the connection, and a ping costs each checkout four hops to the
        # driver's thread, each waiting its turn on a busy event loop.
        options = {k: v for k, v in options.items() if k == "pool_reset_on_return"}
    try:
        return create_async_engine(url, **options)
    except ImportError as error:
        raise StoreError(
            f"database.url needs a driver that is not installed ({error.name}); "
            "for PostgreSQL install kelpie[postgres]"
        ) from error
    except ArgumentError as error:
        raise StoreError(
            "database.url is not a database URL kelpie can use; "
            "use sqlite:///path/kelpie.db or postgresql+asyncpg://user:password@host/db"
        ) from error


def _where(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "database.url"


def error_reason(error: BaseException) -> str:
    """A short reason without a traceback (and without the URL's password)."""
    root: BaseException = error
    while root.__cause__ is not None or root.__context__ is not None:
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    text = str(root).strip().splitlines()[0] if str(root).strip() else type(root).__name__
    return text[:200]


def inserting(*rows: SQLModel) -> Op[None]:
    """An op inserting `rows` (all of one table) as plain values, so an op retried after a
    failed batch starts clean (no ORM state carried over)."""
    values = [
        {key: value for key, value in row.model_dump().items() if key != "id" or value}
        for row in rows
    ]
    return inserting_values(type(rows[0]), values)


def inserting_values(model: type[SQLModel], values: list[dict[str, Any]]) -> Op[None]:
    """An op inserting rows given as plain values (each with the same columns; defaults of
    the model's fields are not applied): one executemany into the table on the session's
    connection. For the hot path: a model instance costs about 90 µs to build and dump,
    the ORM's paths add CPU too, and plain values need neither."""
    statement = insert(model.__table__)  # type: ignore[attr-defined]

    def op(session: Session) -> None:
        session.connection().execute(statement, values)

    return op


def executing(statement: Any) -> Op[None]:
    """An op running one statement whose result nobody needs."""

    def op(session: Session) -> None:
        session.connection().execute(statement)

    return op


def _sqlite_begin_immediate(connection: Connection) -> None:
    """Every write transaction takes SQLite's write lock at its start: what it reads stays
    true until it commits, across processes on the same file (a check-then-mark is one step)."""
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def counting(statement: Any) -> Op[bool]:
    """An op running one conditional statement: True when it changed a row (a
    compare-and-set that won)."""

    def op(session: Session) -> bool:
        return bool(session.connection().execute(statement).rowcount)

    return op


def _sqlite_common(dbapi_connection: Any) -> Any:
    cursor = dbapi_connection.cursor()
    # WAL: readers never block the writer, nor the writer them.
    cursor.execute("PRAGMA journal_mode=WAL")
    # Only another process (`kelpie chat` on the same file) can hold the write lock.
    # Short enough that a delivery the store cannot take is refused inside Slack's 3 s.
    cursor.execute("PRAGMA busy_timeout=2000")
    cursor.execute("PRAGMA foreign_keys=ON")
    return cursor


def _sqlite_reader(dbapi_connection: Any, _record: Any) -> None:
    cursor = _sqlite_common(dbapi_connection)
    cursor.execute("PRAGMA query_only=ON")
    cursor.close()


def _sqlite_writer(dbapi_connection: Any, _record: Any) -> None:
    # The driver would begin a transaction only at the first INSERT/UPDATE, so a count read
    # before it was outside the transaction: two processes on one file could both count 0
    # and both mark. Transactions are begun by `_sqlite_begin_immediate` instead.
    dbapi_connection.isolation_level = None
    cursor = _sqlite_common(dbapi_connection)
    # A commit in WAL mode is durable against a process crash with NORMAL.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _ensure_parent_dir(async_url: str) -> None:
    path = async_url.split(":///", 1)[-1]
    if path and path != ":memory:":
        Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
