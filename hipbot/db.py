"""The app's memory: one SQLite file, opened through sqlite-utils, with per-feature migrations.

Each feature (docs, jobs, adapters, bot) owns an ordered list of migration steps and calls
``migrate(db, "feature", STEPS)`` when it opens the database; step ``i`` runs once, ever.
Steps are append-only: never edit a released step, add a new one.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlite_utils

from hipbot.errors import DatabaseDamaged, HipbotError
from hipbot.i18n import N_

Migration = Callable[[sqlite_utils.Database], None]


def utcnow() -> str:
    """Timestamps are stored as ISO-8601 UTC text: sortable, readable in any SQLite client."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@contextlib.contextmanager
def _damage_is_clear(path: str) -> Iterator[None]:
    """A damaged file surfaces as ``DatabaseDamaged`` (with what to do), wherever a query meets it.
    Only plain ``sqlite3.DatabaseError`` means damage; its subclasses (locked, constraint...) pass."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if type(exc) is not sqlite3.DatabaseError:
            raise
        raise DatabaseDamaged(
            N_("the database {path} is damaged ({exc})", path=path, exc=exc),
            hint=N_(
                "move it aside (keep a copy: jobs and bot settings live there too) and rebuild "
                "the docs with `hipbot ingest`"
            ),
        ) from exc


class _Cursor(sqlite3.Cursor):
    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        with _damage_is_clear(self.connection.path):  # type: ignore[attr-defined]
            return super().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> _Cursor:
        with _damage_is_clear(self.connection.path):  # type: ignore[attr-defined]
            return super().executemany(sql, parameters)

    def fetchone(self) -> Any:
        with _damage_is_clear(self.connection.path):  # type: ignore[attr-defined]
            return super().fetchone()

    def fetchmany(self, size: int = 1) -> list[Any]:
        with _damage_is_clear(self.connection.path):  # type: ignore[attr-defined]
            return super().fetchmany(size)

    def fetchall(self) -> list[Any]:
        with _damage_is_clear(self.connection.path):  # type: ignore[attr-defined]
            return super().fetchall()

    def __next__(self) -> Any:
        with _damage_is_clear(self.connection.path):  # type: ignore[attr-defined]
            return super().__next__()


class _Connection(sqlite3.Connection):
    """Every query through ``_Cursor``, so damage reads as ``DatabaseDamaged``."""

    path = ""

    def cursor(self, factory: Any = _Cursor) -> Any:
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> Any:
        return self.cursor().executemany(sql, parameters)


def open_db(path: Path | str) -> sqlite_utils.Database:
    """Open (creating if needed) the database with WAL and a busy timeout, safe for several processes."""
    if str(path) != ":memory:":
        path = Path(path)
        if path.is_dir():
            raise HipbotError(
                N_("the database path {path} is a folder, not a SQLite file", path=path),
                hint=N_("set HIPBOT_DB to a file, such as {example}", example=path / "hipbot.db"),
            )
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(
            str(path), timeout=30, check_same_thread=False, isolation_level=None, factory=_Connection
        )
        conn.path = str(path)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
    except DatabaseDamaged:
        raise
    except sqlite3.Error as exc:
        raise HipbotError(N_("cannot open database {path}: {exc}", path=path, exc=exc)) from exc
    return sqlite_utils.Database(conn)


def migrate(db: sqlite_utils.Database, feature: str, steps: Sequence[Migration]) -> int:
    """Apply the steps of ``feature`` not yet recorded; return how many ran."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS _migrations (feature TEXT NOT NULL, step INTEGER NOT NULL,"
        " applied_at TEXT NOT NULL, PRIMARY KEY (feature, step))"
    )
    done = {
        row[0] for row in db.execute("SELECT step FROM _migrations WHERE feature = ?", [feature]).fetchall()
    }
    ran = 0
    for index, step in enumerate(steps):
        if index in done:
            continue
        with db.conn:
            db.execute("BEGIN IMMEDIATE")
            # Another process may have applied it while we waited for the lock.
            if db.execute(
                "SELECT 1 FROM _migrations WHERE feature = ? AND step = ?", [feature, index]
            ).fetchone():
                continue
            step(db)
            db.execute("INSERT INTO _migrations VALUES (?, ?, ?)", [feature, index, utcnow()])
        ran += 1
    return ran
