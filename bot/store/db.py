"""The database engine: SQLite (WAL) by default, any SQLAlchemy async URL otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlmodel import SQLModel
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.config import sqlalchemy_async_url
from bot.store import tables  # noqa: F401  (registers the tables on SQLModel.metadata)


class Database:
    def __init__(self, url: str) -> None:
        async_url = sqlalchemy_async_url(url)
        self._is_sqlite = async_url.startswith("sqlite")
        if self._is_sqlite:
            _ensure_parent_dir(async_url)
        self.engine: AsyncEngine = create_async_engine(async_url)
        if self._is_sqlite:
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)
        self.sessions = async_sessionmaker(self.engine, class_=AsyncSession, expire_on_commit=False)

    async def create_schema(self) -> None:
        async with self.engine.begin() as connection:
            await connection.run_sync(SQLModel.metadata.create_all)

    async def ping(self) -> None:
        async with self.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))

    async def close(self) -> None:
        await self.engine.dispose()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets readers proceed while a turn writes; busy_timeout rides out short write locks.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _ensure_parent_dir(async_url: str) -> None:
    path = async_url.split(":///", 1)[-1]
    if path and path != ":memory:":
        Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
