"""The bot's own tables in the app's SQLite database.

Guild settings, stored answers and their votes (future fine-tune data), which Discord message shows
which job (so progress edits survive a restart), thread context, an audit log and cooldowns.
Every method is synchronous and short: the Discord layer calls them through ``asyncio.to_thread``.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import sqlite_utils

from hipbot.db import migrate, open_db, utcnow


def _step_initial(db: sqlite_utils.Database) -> None:
    db["bot_guild_config"].create(
        {
            "guild_id": int,
            "finetune_roles": str,  # JSON list of role ids or names
            "admin_roles": str,
            "max_running_per_user": int,
            "max_daily_per_user": int,
            "max_running_per_guild": int,
            "max_daily_per_guild": int,
            "notice_channel_id": int,
            "ask_cooldown_s": float,
            "hipify_cooldown_s": float,
            "updated_at": str,
            "updated_by": int,
        },
        pk="guild_id",
    )
    db["bot_answers"].create(
        {
            "id": int,
            "question": str,
            "answer": str,  # the Answer as JSON (answer, sources, mode, apis)
            "context": str,  # the question as sent to retrieval, with the thread's context
            "user_id": int,
            "guild_id": int,
            "channel_id": int,
            "thread_id": int,
            "message_id": int,
            "created_at": str,
        },
        pk="id",
    )
    db["bot_answers"].create_index(["thread_id"])
    db["bot_votes"].create(
        {"answer_id": int, "user_id": int, "value": int, "created_at": str},
        pk=("answer_id", "user_id"),
        foreign_keys=[("answer_id", "bot_answers", "id")],
    )
    db["bot_job_messages"].create(
        {
            "job_id": str,
            "user_id": int,
            "guild_id": int,
            "channel_id": int,
            "message_id": int,
            "last_state": str,
            "last_render": str,  # what the message shows now, to skip edits that change nothing
            "final": int,
            "created_at": str,
            "updated_at": str,
        },
        pk="job_id",
    )
    db["bot_job_messages"].create_index(["final"])
    db["bot_finetunes"].create(
        {"job_id": str, "user_id": int, "guild_id": int, "created_at": str, "created_ts": float},
        pk="job_id",
    )
    db["bot_finetunes"].create_index(["user_id", "created_ts"])
    db["bot_finetunes"].create_index(["guild_id", "created_ts"])
    db["bot_audit"].create(
        {
            "id": int,
            "at": str,
            "guild_id": int,
            "user_id": int,
            "user_name": str,
            "action": str,
            "target": str,
            "detail": str,
        },
        pk="id",
    )
    db["bot_cooldowns"].create({"user_id": int, "command": str, "last_ts": float}, pk=("user_id", "command"))


def _step_language(db: sqlite_utils.Database) -> None:
    """The server's language (``/config language``) and the one each job message is written in."""
    db["bot_guild_config"].add_column("language", str)
    db["bot_job_messages"].add_column("locale", str)


STEPS = [_step_initial, _step_language]


@dataclass
class GuildConfig:
    """Per-guild settings; the defaults apply to guilds (and the console) that never ran /config."""

    guild_id: int = 0
    finetune_roles: list[str] = field(default_factory=list)
    admin_roles: list[str] = field(default_factory=list)
    max_running_per_user: int = 1
    max_daily_per_user: int = 3
    max_running_per_guild: int = 4
    max_daily_per_guild: int = 20
    notice_channel_id: int | None = None
    ask_cooldown_s: float = 10.0
    hipify_cooldown_s: float = 10.0
    language: str = ""  # replies to members whose Discord language the bot does not speak; "": English

    EDITABLE = (
        "finetune_roles",
        "admin_roles",
        "max_running_per_user",
        "max_daily_per_user",
        "max_running_per_guild",
        "max_daily_per_guild",
        "notice_channel_id",
        "ask_cooldown_s",
        "hipify_cooldown_s",
        "language",
    )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """One connection is shared by the event loop's worker threads: one statement group at a time."""

    @functools.wraps(method)
    def wrapper(self: BotState, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper


class BotState:
    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db
        self._lock = threading.RLock()
        migrate(db, "bot", STEPS)

    @classmethod
    def open(cls, path: Path | str) -> BotState:
        return cls(open_db(path))

    # -- guild config -------------------------------------------------------------------------
    @_locked
    def guild_config(self, guild_id: int | None) -> GuildConfig:
        if not guild_id:
            return GuildConfig()
        rows = list(self.db["bot_guild_config"].rows_where("guild_id = ?", [guild_id]))
        if not rows:
            return GuildConfig(guild_id=guild_id)
        data = rows[0]
        config = GuildConfig(guild_id=guild_id)
        for key in GuildConfig.EDITABLE:
            value = data.get(key)
            if value is None:
                continue
            if key in ("finetune_roles", "admin_roles"):
                value = json.loads(value)
            setattr(config, key, value)
        return config

    @_locked
    def save_guild_config(self, config: GuildConfig, user_id: int | None = None) -> None:
        row = config.to_dict()
        row["finetune_roles"] = json.dumps(config.finetune_roles)
        row["admin_roles"] = json.dumps(config.admin_roles)
        row["updated_at"] = utcnow()
        row["updated_by"] = user_id
        self.db["bot_guild_config"].upsert(row, pk="guild_id")

    # -- answers and votes --------------------------------------------------------------------
    def record_answer(
        self,
        question: str,
        answer: dict[str, Any],
        *,
        context: str = "",
        user_id: int | None = None,
        guild_id: int | None = None,
        channel_id: int | None = None,
        thread_id: int | None = None,
    ) -> int:
        table = self.db["bot_answers"]
        table.insert(
            {
                "question": question,
                "answer": json.dumps(answer, ensure_ascii=False),
                "context": context or question,
                "user_id": user_id,
                "guild_id": guild_id,
                "channel_id": channel_id,
                "thread_id": thread_id,
                "message_id": None,
                "created_at": utcnow(),
            }
        )
        return int(table.last_pk)

    @_locked
    def answer(self, answer_id: int) -> dict[str, Any] | None:
        rows = list(self.db["bot_answers"].rows_where("id = ?", [answer_id]))
        if not rows:
            return None
        row = rows[0]
        row["answer"] = json.loads(row["answer"])
        return row

    def set_answer_location(
        self, answer_id: int, *, message_id: int | None, thread_id: int | None = None
    ) -> None:
        updates: dict[str, Any] = {"message_id": message_id}
        if thread_id is not None:
            updates["thread_id"] = thread_id
        self.db["bot_answers"].update(answer_id, updates)

    @_locked
    def thread_history(self, thread_id: int, limit: int = 4) -> list[dict[str, Any]]:
        """The latest questions and answers asked in a thread, oldest first."""
        rows = list(
            self.db["bot_answers"].rows_where("thread_id = ?", [thread_id], order_by="id desc", limit=limit)
        )
        for row in rows:
            row["answer"] = json.loads(row["answer"])
        return rows[::-1]

    @_locked
    def vote(self, answer_id: int, user_id: int, value: int) -> dict[str, int]:
        """Store (or change) one user's vote; returns the tally."""
        self.db["bot_votes"].upsert(
            {
                "answer_id": answer_id,
                "user_id": user_id,
                "value": 1 if value > 0 else -1,
                "created_at": utcnow(),
            },
            pk=("answer_id", "user_id"),
        )
        return self.tally(answer_id)

    @_locked
    def tally(self, answer_id: int) -> dict[str, int]:
        up, down = self.db.execute(
            "SELECT COALESCE(SUM(value = 1), 0), COALESCE(SUM(value = -1), 0) FROM bot_votes WHERE answer_id = ?",
            [answer_id],
        ).fetchone()
        return {"up": int(up), "down": int(down)}

    @_locked
    def voted_answers(self) -> list[dict[str, Any]]:
        """Questions, answers and their net votes: the raw material of a preference dataset."""
        sql = (
            "SELECT a.id, a.question, a.answer, SUM(v.value) AS score, COUNT(v.value) AS votes "
            "FROM bot_answers a JOIN bot_votes v ON v.answer_id = a.id GROUP BY a.id ORDER BY a.id"
        )
        out = []
        for answer_id, question, answer, score, votes in self.db.execute(sql).fetchall():
            out.append(
                {
                    "id": answer_id,
                    "question": question,
                    "answer": json.loads(answer),
                    "score": score,
                    "votes": votes,
                }
            )
        return out

    # -- jobs shown in Discord ----------------------------------------------------------------
    @_locked
    def record_finetune(self, job_id: str, user_id: int | None, guild_id: int | None) -> None:
        self.db["bot_finetunes"].insert(
            {
                "job_id": job_id,
                "user_id": user_id,
                "guild_id": guild_id,
                "created_at": utcnow(),
                "created_ts": time.time(),
            },
            replace=True,
        )

    def finetunes_since(
        self, *, since_ts: float, user_id: int | None = None, guild_id: int | None = None
    ) -> list[str]:
        where, params = ["created_ts >= ?"], [since_ts]
        if user_id is not None:
            where.append("user_id = ?")
            params.append(user_id)
        if guild_id is not None:
            where.append("guild_id = ?")
            params.append(guild_id)
        sql = f"SELECT job_id FROM bot_finetunes WHERE {' AND '.join(where)}"
        return [row[0] for row in self.db.execute(sql, params).fetchall()]

    def link_job_message(
        self,
        job_id: str,
        *,
        channel_id: int,
        message_id: int,
        user_id: int | None,
        guild_id: int | None,
        locale: str = "en",
    ) -> None:
        now = utcnow()
        self.db["bot_job_messages"].upsert(
            {
                "job_id": job_id,
                "user_id": user_id,
                "guild_id": guild_id,
                "channel_id": channel_id,
                "message_id": message_id,
                "last_state": None,
                "last_render": None,
                "final": 0,
                "locale": locale,
                "created_at": now,
                "updated_at": now,
            },
            pk="job_id",
        )

    @_locked
    def open_job_messages(self) -> list[dict[str, Any]]:
        return list(self.db["bot_job_messages"].rows_where("final = 0", order_by="created_at"))

    @_locked
    def job_message(self, job_id: str) -> dict[str, Any] | None:
        rows = list(self.db["bot_job_messages"].rows_where("job_id = ?", [job_id]))
        return rows[0] if rows else None

    @_locked
    def update_job_message(self, job_id: str, *, state: str, render: str, final: bool) -> None:
        self.db["bot_job_messages"].update(
            job_id, {"last_state": state, "last_render": render, "final": int(final), "updated_at": utcnow()}
        )

    # -- audit ---------------------------------------------------------------------------------
    def audit(
        self,
        action: str,
        *,
        user_id: int | None,
        user_name: str = "",
        guild_id: int | None = None,
        target: str = "",
        detail: dict[str, Any] | None = None,
    ) -> None:
        self.db["bot_audit"].insert(
            {
                "at": utcnow(),
                "guild_id": guild_id,
                "user_id": user_id,
                "user_name": user_name,
                "action": action,
                "target": target,
                "detail": json.dumps(detail or {}, ensure_ascii=False),
            }
        )

    @_locked
    def audit_log(self, *, guild_id: int | None = None, limit: int = 50) -> list[dict[str, Any]]:
        where, params = ("guild_id = ?", [guild_id]) if guild_id else (None, [])
        rows = list(self.db["bot_audit"].rows_where(where, params, order_by="id desc", limit=limit))
        for row in rows:
            row["detail"] = json.loads(row["detail"] or "{}")
        return rows

    # -- cooldowns -----------------------------------------------------------------------------
    @_locked
    def take_cooldown(self, user_id: int, command: str, seconds: float, now: float | None = None) -> float:
        """Start the user's cooldown on ``command`` and return 0, or return the seconds still to wait.

        Check and update happen in one transaction so that two quick clicks cannot both pass.
        """
        now = time.time() if now is None else now
        with self.db.conn:
            self.db.execute("BEGIN IMMEDIATE")
            row = self.db.execute(
                "SELECT last_ts FROM bot_cooldowns WHERE user_id = ? AND command = ?", [user_id, command]
            ).fetchone()
            if row is not None and now - row[0] < seconds:
                return seconds - (now - row[0])
            self.db.execute(
                "INSERT INTO bot_cooldowns (user_id, command, last_ts) VALUES (?, ?, ?) "
                "ON CONFLICT (user_id, command) DO UPDATE SET last_ts = excluded.last_ts",
                [user_id, command, now],
            )
        return 0.0
