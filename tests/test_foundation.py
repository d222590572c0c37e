"""Settings, database migrations and the CLI entry that every feature shares."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from hipbot.cli import COMMANDS, main
from hipbot.config import load_settings
from hipbot.db import migrate, open_db
from hipbot.errors import HipbotError


def test_settings_layering(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('llm_model = "from-file"\nllm_url = "http://file"\nllm_timeout = 5\n')
    env = {"HIPBOT_CONFIG": str(cfg), "HIPBOT_LLM_URL": "http://env", "HIPBOT_HOME": str(tmp_path)}
    s = load_settings(env)
    assert s.llm_model == "from-file"
    assert s.llm_url == "http://env"
    assert s.llm_timeout == 5.0
    assert s.database == tmp_path / "hipbot.db"
    assert load_settings(env, llm_model="cli").llm_model == "cli"


def test_settings_unknown_key_is_a_readable_error(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('llm_modle = "x"\n')
    with pytest.raises(HipbotError, match="unknown setting 'llm_modle'"):
        load_settings({"HIPBOT_CONFIG": str(cfg)})


def test_migrations_run_once_and_in_order(tmp_path: Path) -> None:
    db = open_db(tmp_path / "x.db")
    calls: list[int] = []
    steps = [
        lambda d: (calls.append(0), d["t"].create({"id": int}, pk="id")),
        lambda d: (calls.append(1), d["t"].add_column("name", str)),
    ]
    assert migrate(db, "demo", steps) == 2
    assert migrate(open_db(tmp_path / "x.db"), "demo", steps) == 0
    assert calls == [0, 1]
    assert set(db["t"].columns_dict) == {"id", "name"}


def test_cli_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_cli_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such-command"]) == 2
    assert "No such command" in capsys.readouterr().err


def test_settings_overrides_are_coerced(tmp_path: Path) -> None:
    s = load_settings({}, home=str(tmp_path), llm_timeout="7")
    assert s.database == tmp_path / "hipbot.db"
    assert s.llm_timeout == 7.0


@click.command()
@click.pass_context
def _exits_with_3(ctx: click.Context) -> None:
    ctx.exit(3)


def test_cli_keeps_a_commands_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(COMMANDS, "exit-3", ("test_foundation:_exits_with_3", "test command"))
    assert main(["exit-3"]) == 3
