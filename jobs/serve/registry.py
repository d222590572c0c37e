"""The adapter registry: which LoRA adapters exist, where their files live, and which vLLM servers
should have them loaded. It is the wanted state that ``hipbot serve sync`` restores after a vLLM
restart, kept in the app's SQLite database beside the jobs that produced the adapters.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlite_utils

from hipbot.config import Settings
from hipbot.db import migrate, open_db, utcnow
from hipbot.errors import HipbotError
from hipbot.i18n import N_
from hipbot.jobs.finetune import template_record
from hipbot.jobs.finetune.template_record import TemplateRecord

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
NAME_MAX = 64
DEFAULT_MAX_LORA_RANK = 16  # vLLM's own default for --max-lora-rank


def validate_name(name: str, what: str = N_("adapter")) -> str:
    """Names become directory names on the vLLM host and model ids in the API, so keep them plain."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or len(name) > NAME_MAX:
        raise HipbotError(
            N_("invalid {what} name {name!r}", what=what, name=name),
            hint=N_(
                "use lowercase letters, digits, '-' and '.', starting with a letter or digit, at "
                "most {NAME_MAX} characters",
                NAME_MAX=NAME_MAX,
            ),
        )
    return name


def _adapters_v1(db: sqlite_utils.Database) -> None:
    db.execute(
        """CREATE TABLE adapters (
            name TEXT PRIMARY KEY,
            base_model TEXT NOT NULL,
            job_id TEXT,
            rank INTEGER NOT NULL,
            alpha REAL,
            target_modules TEXT NOT NULL,
            size_bytes INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            path TEXT NOT NULL,
            owner TEXT,
            created_at TEXT NOT NULL,
            published_at TEXT
        )"""
    )
    db.execute(
        """CREATE TABLE vllm_servers (
            name TEXT PRIMARY KEY,
            url TEXT NOT NULL,
            adapter_dir TEXT NOT NULL,
            vllm_adapter_dir TEXT NOT NULL,
            max_lora_rank INTEGER NOT NULL,
            base_model TEXT NOT NULL,
            served_model TEXT NOT NULL,
            api_key TEXT,
            added_at TEXT NOT NULL
        )"""
    )
    db.execute(
        """CREATE TABLE adapter_deployments (
            adapter TEXT NOT NULL REFERENCES adapters(name) ON DELETE CASCADE,
            server TEXT NOT NULL REFERENCES vllm_servers(name) ON DELETE CASCADE,
            lora_path TEXT NOT NULL,
            copied INTEGER NOT NULL,
            loaded_at TEXT NOT NULL,
            PRIMARY KEY (adapter, server)
        )"""
    )
    db.execute("CREATE INDEX adapters_job ON adapters(job_id)")


def _adapters_v2(db: sqlite_utils.Database) -> None:
    """The chat template each adapter was trained with (``TemplateRecord`` JSON; NULL when its
    folder had none: the server's own template is used for it)."""
    db.execute("ALTER TABLE adapters ADD COLUMN template TEXT")


STEPS = [_adapters_v1, _adapters_v2]


@dataclass(frozen=True)
class Server:
    """A vLLM server. ``adapter_dir`` is where hipbot writes adapter files for it (a local path or a
    mount of the server's volume); ``vllm_adapter_dir`` is the same directory as vLLM sees it."""

    name: str
    url: str
    adapter_dir: Path
    vllm_adapter_dir: str
    max_lora_rank: int
    base_model: str
    served_model: str
    api_key: str | None = None
    added_at: str = ""

    def public(self) -> dict[str, Any]:
        data = {k: str(v) if isinstance(v, Path) else v for k, v in self.__dict__.items()}
        data["api_key"] = "***" if self.api_key else None
        return data


@dataclass(frozen=True)
class Deployment:
    adapter: str
    server: str
    lora_path: str
    copied: bool
    loaded_at: str


@dataclass(frozen=True)
class Adapter:
    name: str
    base_model: str
    job_id: str | None
    rank: int
    alpha: float | None
    target_modules: tuple[str, ...]
    size_bytes: int
    sha256: str
    path: Path
    owner: str | None
    created_at: str
    published_at: str | None
    servers: tuple[str, ...] = ()
    template: TemplateRecord | None = None

    @property
    def template_label(self) -> str:
        return self.template.label if self.template is not None else "-"

    def public(self) -> dict[str, Any]:
        data = {k: str(v) if isinstance(v, Path) else v for k, v in self.__dict__.items()}
        data["target_modules"] = list(self.target_modules)
        data["servers"] = list(self.servers)
        data["template"] = self.template.model_dump() if self.template is not None else None
        return data


class Registry:
    """Adapters, servers and deployments in one SQLite database (see ``hipbot.db``)."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db
        migrate(db, "adapters", STEPS)

    @classmethod
    def open(cls, settings: Settings) -> Registry:
        return cls(open_db(settings.database))

    # -- servers -------------------------------------------------------------------------------
    def add_server(self, server: Server, *, replace: bool = False) -> Server:
        validate_name(server.name, N_("server"))
        if not replace and self._server_row(server.name) is not None:
            raise HipbotError(
                N_("server {server_name!r} already exists", server_name=server.name),
                hint=N_("pass --replace to change it, or pick another name"),
            )
        row = server.__dict__ | {
            "adapter_dir": str(server.adapter_dir),
            "added_at": server.added_at or utcnow(),
        }
        self.db["vllm_servers"].insert(row, replace=True)
        return self.server(server.name)

    def _server_row(self, name: str) -> dict[str, Any] | None:
        rows = list(self.db["vllm_servers"].rows_where("name = ?", [name]))
        return rows[0] if rows else None

    def server(self, name: str) -> Server:
        row = self._server_row(name)
        if row is None:
            known = ", ".join(s.name for s in self.servers()) or "none yet"
            raise HipbotError(
                N_("no vLLM server named {name!r} (known: {known})", name=name, known=known),
                hint=N_("add one: hipbot serve servers add NAME URL"),
            )
        return Server(**(row | {"adapter_dir": Path(row["adapter_dir"])}))

    def servers(self) -> list[Server]:
        return [
            Server(**(row | {"adapter_dir": Path(row["adapter_dir"])}))
            for row in self.db["vllm_servers"].rows_where(order_by="name")
        ]

    def remove_server(self, name: str) -> None:
        self.server(name)
        self.db.execute("DELETE FROM vllm_servers WHERE name = ?", [name])

    # -- adapters ------------------------------------------------------------------------------
    def add(self, adapter: Adapter) -> Adapter:
        validate_name(adapter.name)
        row = adapter.public()
        del row["servers"]
        row["target_modules"] = json.dumps(sorted(adapter.target_modules))
        row["job_id"] = None if adapter.job_id is None else str(adapter.job_id)
        row["created_at"] = adapter.created_at or utcnow()
        row["template"] = adapter.template.to_json() if adapter.template is not None else None
        try:
            self.db["adapters"].insert(row)
        except sqlite3.IntegrityError as exc:
            raise HipbotError(
                N_("adapter name {adapter_name!r} is already taken", adapter_name=adapter.name)
            ) from exc
        return self.get(adapter.name)

    def find(self, name: str) -> Adapter | None:
        rows = list(self.db["adapters"].rows_where("name = ?", [name]))
        return self._adapter(rows[0]) if rows else None

    def get(self, name: str) -> Adapter:
        adapter = self.find(name)
        if adapter is None:
            raise HipbotError(
                N_("no adapter named {name!r} in the registry", name=name),
                hint=N_("see: hipbot serve list; register one: hipbot serve register NAME --job ID"),
            )
        return adapter

    def by_job(self, job_id: str) -> Adapter | None:
        rows = list(self.db["adapters"].rows_where("job_id = ?", [str(job_id)]))
        return self._adapter(rows[0]) if rows else None

    def list(self) -> list[Adapter]:
        return [self._adapter(row) for row in self.db["adapters"].rows_where(order_by="name")]

    def remove(self, name: str) -> None:
        self.get(name)
        self.db.execute("DELETE FROM adapters WHERE name = ?", [name])

    def _adapter(self, row: dict[str, Any]) -> Adapter:
        servers = tuple(
            r[0]
            for r in self.db.execute(
                "SELECT server FROM adapter_deployments WHERE adapter = ? ORDER BY server", [row["name"]]
            ).fetchall()
        )
        return Adapter(
            **(
                row
                | {
                    "target_modules": tuple(json.loads(row["target_modules"])),
                    "path": Path(row["path"]),
                    "servers": servers,
                    "template": template_record.loads(row["template"]),
                }
            )
        )

    # -- deployments: which server should have which adapter loaded ---------------------------
    def mark_loaded(self, adapter: str, server: str, lora_path: str, copied: bool) -> None:
        now = utcnow()
        with self.db.conn:
            self.db["adapter_deployments"].insert(
                {
                    "adapter": adapter,
                    "server": server,
                    "lora_path": lora_path,
                    "copied": int(copied),
                    "loaded_at": now,
                },
                replace=True,
            )
            self.db.execute(
                "UPDATE adapters SET published_at = COALESCE(published_at, ?) WHERE name = ?", [now, adapter]
            )

    def mark_unloaded(self, adapter: str, server: str) -> None:
        self.db.execute("DELETE FROM adapter_deployments WHERE adapter = ? AND server = ?", [adapter, server])
        if not self.deployments(adapter=adapter):
            self.db.execute("UPDATE adapters SET published_at = NULL WHERE name = ?", [adapter])

    def deployments(self, *, server: str | None = None, adapter: str | None = None) -> list[Deployment]:
        where, args = [], []
        if server is not None:
            where.append("server = ?")
            args.append(server)
        if adapter is not None:
            where.append("adapter = ?")
            args.append(adapter)
        rows = self.db["adapter_deployments"].rows_where(
            " AND ".join(where) or None, args, order_by="server, adapter"
        )
        return [Deployment(**(row | {"copied": bool(row["copied"])})) for row in rows]
