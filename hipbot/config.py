"""Settings: embedded defaults, overridden by a TOML config file, overridden by environment variables.

Every front end (CLI, console, Discord, coordinator, worker) builds one ``Settings`` with
``load_settings()`` so that the same variable means the same thing everywhere.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from hipbot.errors import HipbotError
from hipbot.i18n import N_

REPO_ROOT = Path(__file__).resolve().parent.parent


def _default_home() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "hipbot"


def find_docs_corpus() -> Path | None:
    """Locate the HIP docs corpus: a ``shared/hip-docs`` beside the checkout or the working directory."""
    for start in (REPO_ROOT, Path.cwd()):
        for candidate in (start / "shared" / "hip-docs", start.parent / "shared" / "hip-docs"):
            if (candidate / "HIPIFY").is_dir():
                return candidate
    return None


@dataclass(frozen=True)
class Settings:
    """What a hipbot process needs to know; see ``ENV`` for the variable behind each field."""

    home: Path = field(default_factory=_default_home)
    db_path: Path | None = None
    docs_path: Path | None = None
    embedding_model: str = "all-MiniLM-L6-v2"
    llm_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str = "EMPTY"
    llm_timeout: float = 60.0
    llm_max_tokens: int = 512
    discord_token: str | None = None
    coordinator_url: str | None = None
    coordinator_token: str | None = None
    registration_token: str | None = None
    adapters_dir: Path | None = None
    models_dir: Path | None = None
    notes_dir: Path | None = None  # the maintainers' own porting notes, ingested beside the docs

    @property
    def database(self) -> Path:
        return self.db_path or self.home / "hipbot.db"

    @property
    def adapters(self) -> Path:
        return self.adapters_dir or self.home / "adapters"

    @property
    def models(self) -> Path:
        return self.models_dir or self.home / "models"

    @property
    def docs(self) -> Path | None:
        return self.docs_path or find_docs_corpus()


ENV: dict[str, tuple[str, ...]] = {
    "home": ("HIPBOT_HOME",),
    "db_path": ("HIPBOT_DB",),
    "docs_path": ("HIPBOT_DOCS",),
    "embedding_model": ("HIPBOT_EMBEDDING_MODEL",),
    "llm_url": ("HIPBOT_LLM_URL",),
    "llm_model": ("HIPBOT_LLM_MODEL",),
    "llm_api_key": ("HIPBOT_LLM_API_KEY",),
    "llm_timeout": ("HIPBOT_LLM_TIMEOUT",),
    "llm_max_tokens": ("HIPBOT_LLM_MAX_TOKENS",),
    "discord_token": ("HIPBOT_DISCORD_TOKEN", "DISCORD_TOKEN"),
    "coordinator_url": ("HIPBOT_COORDINATOR_URL",),
    "coordinator_token": ("HIPBOT_COORDINATOR_TOKEN",),
    "registration_token": ("HIPBOT_REGISTRATION_TOKEN",),
    "adapters_dir": ("HIPBOT_ADAPTERS_DIR",),
    "models_dir": ("HIPBOT_MODELS_DIR",),
    "notes_dir": ("HIPBOT_NOTES",),
}

_PATH_FIELDS = {"home", "db_path", "docs_path", "adapters_dir", "models_dir", "notes_dir"}
_FLOAT_FIELDS = {"llm_timeout"}
_INT_FIELDS = {"llm_max_tokens"}


def _coerce(name: str, value: object) -> object:
    if name in _PATH_FIELDS:
        return Path(str(value)).expanduser()
    if name in _FLOAT_FIELDS:
        try:
            return float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise HipbotError(
                N_("setting {name!r} must be a number, got {value!r}", name=name, value=value)
            ) from exc
    if name in _INT_FIELDS:
        try:
            return int(value)  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise HipbotError(
                N_("setting {name!r} must be a whole number, got {value!r}", name=name, value=value)
            ) from exc
    return str(value)


def config_file_path(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("HIPBOT_CONFIG"):
        return Path(env["HIPBOT_CONFIG"]).expanduser()
    home = Path(env["HIPBOT_HOME"]).expanduser() if env.get("HIPBOT_HOME") else _default_home()
    return home / "config.toml"


def load_settings(env: dict[str, str] | None = None, **overrides: object) -> Settings:
    """Defaults < config file (``HIPBOT_CONFIG`` or ``$HIPBOT_HOME/config.toml``) < env < overrides."""
    env = dict(os.environ) if env is None else env
    values: dict[str, object] = {}
    path = config_file_path(env)
    if path.is_file():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise HipbotError(N_("cannot read config file {path}: {exc}", path=path, exc=exc)) from exc
        known = {f.name for f in fields(Settings)}
        for key, value in data.get("hipbot", data).items():
            if key not in known:
                raise HipbotError(
                    N_("unknown setting {key!r} in {path}", key=key, path=path),
                    hint=N_("known: {known}", known=", ".join(sorted(known))),
                )
            values[key] = _coerce(key, value)
    for name, names in ENV.items():
        for var in names:
            if env.get(var):
                values[name] = _coerce(name, env[var])
                break
    values.update({k: _coerce(k, v) for k, v in overrides.items() if v is not None})
    return replace(Settings(), **values)
