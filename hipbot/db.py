"""The app's memory: one SQLite file, opened through sqlite-utils, with per-feature migrations.

Each feature (docs, jobs, adapters, bot) owns an ordered list of migration steps and calls
``migrate(db, "feature", STEPS)`` when it opens the database; step ``i`` runs once, ever.
Steps are append-only: never edit a released step, add a new one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import sqlite_utils

from hipbot.errors import HipbotError

Migration = Callable[[sqlite_utils.Database], None]


def utcnow() -> str:
    """Timestamps are stored as ISO-8601 UTC text: sortable, readable in any SQLite client."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def open_db(path: Path | str) -> sqlite_utils.Database:
    """Open (creating if needed) the database with WAL and a busy timeout, safe for several processes."""
    if str(path) != ":memory:":
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(str(path), timeout=30, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
    except sqlite3.Error as exc:
        raise HipbotError(f"cannot open database {path}: {exc}") from exc
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
