"""What the operator page keeps in the coordinator's database, beside the queue's tables.

- ``page_tokens``: sign-in tokens for the page (``viewer``: read-only, ``admin``: may act), stored
  as SHA-256 hashes like every other token; the coordinator token (HIPBOT_COORDINATOR_TOKEN)
  signs in as admin too.
- ``page_sessions``: one row per signed-in browser (the cookie is a random id, stored hashed),
  with its CSRF token; a session ends when its token is revoked or it expires.
- ``coordinator_audit``: every action taken from the page (who, what, on what); cancels also go
  into the job's own log, as the API's do.
- ``job_progress``: every progress line a worker reports in a heartbeat (step, loss, time),
  recorded by a trigger on the queue's ``jobs`` table, so the loss curve has its history
  whoever reported it.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from hipbot.db import migrate, utcnow
from hipbot.errors import InvalidInput
from hipbot.jobs.finetune.queue import OPERATOR, hash_secret

ROLES = ("viewer", "admin")
SESSION_S = 12 * 3600.0


def _v1(db: sqlite_utils.Database) -> None:
    db.execute(
        """CREATE TABLE page_tokens (
            token_hash TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            role TEXT NOT NULL,
            created_at TEXT NOT NULL,
            revoked INTEGER NOT NULL DEFAULT 0
        )"""
    )
    db.execute(
        """CREATE TABLE page_sessions (
            sid_hash TEXT PRIMARY KEY,
            token_hash TEXT NOT NULL,
            name TEXT NOT NULL,
            role TEXT NOT NULL,
            csrf TEXT NOT NULL,
            expires REAL NOT NULL
        )"""
    )
    db.execute(
        """CREATE TABLE coordinator_audit (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            at TEXT NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            target TEXT NOT NULL,
            detail TEXT NOT NULL
        )"""
    )
    db.execute(
        """CREATE TABLE job_progress (
            job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            loss REAL,
            ts REAL NOT NULL,
            PRIMARY KEY (job_id, step)
        )"""
    )
    # A resumed job reports its steps again from its checkpoint: the newest report of a step wins.
    db.execute(
        """CREATE TRIGGER job_progress_record AFTER UPDATE OF progress_step ON jobs
           WHEN NEW.progress_step IS NOT NULL AND NEW.progress_step IS NOT OLD.progress_step
           BEGIN
             INSERT OR REPLACE INTO job_progress (job_id, step, loss, ts) VALUES (
               NEW.id, NEW.progress_step, NEW.progress_loss,
               COALESCE(json_extract(NEW.progress_json, '$.time'), (julianday('now') - 2440587.5) * 86400.0));
           END"""
    )
    db.execute("CREATE INDEX page_jobs_worker ON jobs (worker_id, state)")


STEPS = [_v1]


def prepare(db: sqlite_utils.Database) -> None:
    migrate(db, "page", STEPS)


@dataclass(frozen=True)
class Session:
    """A signed-in browser: whose token, which role, the CSRF token its forms carry."""

    name: str
    role: str
    csrf: str

    @property
    def admin(self) -> bool:
        return self.role == "admin"

    @property
    def actor(self) -> str:
        return OPERATOR if self.name == OPERATOR else f"page:{self.name}"


def create_page_token(db: sqlite_utils.Database, name: str, *, role: str = "viewer") -> str:
    """A sign-in token for the operator page, shown once, stored hashed."""
    prepare(db)
    name = name.strip()
    if role not in ROLES:
        raise InvalidInput(f"role must be one of {', '.join(ROLES)}")
    if not re.fullmatch(r"[A-Za-z0-9._:@-]{1,100}", name) or name == OPERATOR:
        raise InvalidInput(
            f"page token name {name!r} is not usable",
            hint=f"1-100 letters, digits or ._:@- (and not {OPERATOR!r}), such as the person's login",
        )
    token = ("adm-" if role == "admin" else "view-") + secrets.token_urlsafe(24)
    db.execute(
        "INSERT INTO page_tokens (token_hash, name, role, created_at) VALUES (?, ?, ?, ?)",
        [hash_secret(token), name, role, utcnow()],
    )
    return token


def token_holder(db: sqlite_utils.Database, token: str, admin_token: str | None) -> tuple[str, str] | None:
    """(name, role) of a page token or of the coordinator token; None when unknown or revoked."""
    if not token:
        return None
    if admin_token and hmac.compare_digest(token.encode("utf-8"), admin_token.encode("utf-8")):
        return OPERATOR, "admin"
    row = db.execute(
        "SELECT name, role FROM page_tokens WHERE token_hash = ? AND revoked = 0", [hash_secret(token)]
    ).fetchone()
    return (row[0], row[1]) if row else None


def open_session(db: sqlite_utils.Database, token: str, admin_token: str | None) -> str | None:
    """A new session id for a browser that signed in with ``token``; None when the token is wrong."""
    holder = token_holder(db, token, admin_token)
    if holder is None:
        return None
    sid = secrets.token_urlsafe(32)
    now = time.time()
    db.execute("DELETE FROM page_sessions WHERE expires < ?", [now])
    db.execute(
        "INSERT INTO page_sessions (sid_hash, token_hash, name, role, csrf, expires) VALUES (?, ?, ?, ?, ?, ?)",
        [
            hash_secret(sid),
            hash_secret(token),
            holder[0],
            holder[1],
            secrets.token_urlsafe(24),
            now + SESSION_S,
        ],
    )
    return sid


def session(db: sqlite_utils.Database, sid: str, admin_token: str | None) -> Session | None:
    """The session of cookie ``sid``, while it has not expired and its token is still valid."""
    if not sid:
        return None
    row = db.execute(
        """SELECT s.name, s.role, s.csrf, s.token_hash, t.revoked FROM page_sessions s
           LEFT JOIN page_tokens t ON t.token_hash = s.token_hash
           WHERE s.sid_hash = ? AND s.expires > ?""",
        [hash_secret(sid), time.time()],
    ).fetchone()
    if row is None:
        return None
    name, role, csrf, token_hash, revoked = row
    if name == OPERATOR:  # signed in with the coordinator token: valid while it is the same
        if not admin_token or not hmac.compare_digest(token_hash, hash_secret(admin_token)):
            return None
    elif revoked is None or revoked:
        return None
    return Session(name, role, csrf)


def close_session(db: sqlite_utils.Database, sid: str) -> None:
    db.execute("DELETE FROM page_sessions WHERE sid_hash = ?", [hash_secret(sid)])


def audit(db: sqlite_utils.Database, actor: str, action: str, target: str, **detail: Any) -> None:
    db.execute(
        "INSERT INTO coordinator_audit (at, actor, action, target, detail) VALUES (?, ?, ?, ?, ?)",
        [utcnow(), actor, action, target, json.dumps(detail, ensure_ascii=False)],
    )


def audit_log(db: sqlite_utils.Database, limit: int = 20) -> list[dict[str, Any]]:
    cur = db.execute(
        "SELECT at, actor, action, target, detail FROM coordinator_audit ORDER BY id DESC LIMIT ?", [limit]
    )
    return [
        {"at": at, "actor": actor, "action": action, "target": target, "detail": json.loads(detail)}
        for at, actor, action, target, detail in cur.fetchall()
    ]


def revoke_worker(db: sqlite_utils.Database, worker_id: str) -> bool:
    """Refuse the worker's secret from now on; its held job is requeued when its lease runs out."""
    cur = db.execute("UPDATE workers SET revoked = 1 WHERE id = ? AND revoked = 0", [worker_id])
    return cur.rowcount > 0


def progress_points(db: sqlite_utils.Database, job_id: int, after_step: int = -1) -> list[list[float | None]]:
    """The job's reported (step, loss, time) after ``after_step``, by step."""
    cur = db.execute(
        "SELECT step, loss, ts FROM job_progress WHERE job_id = ? AND step > ? ORDER BY step LIMIT 20000",
        [job_id, after_step],
    )
    return [[step, loss, ts] for step, loss, ts in cur.fetchall()]
