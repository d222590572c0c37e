"""The bot's SQLite state and the permission rules built on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipbot.bot.permissions import (
    Actor,
    check_cooldown,
    check_finetune_quota,
    require_admin,
    require_cancel,
    require_finetune,
)
from hipbot.bot.state import BotState, GuildConfig
from hipbot.errors import HipbotError


@pytest.fixture
def state(tmp_path: Path) -> BotState:
    return BotState.open(tmp_path / "bot.db")


def test_migrations_run_once_and_state_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "bot.db"
    first = BotState.open(path)
    first.link_job_message("job-1", channel_id=5, message_id=6, user_id=7, guild_id=8)
    again = BotState.open(path)
    [row] = again.open_job_messages()
    assert (row["job_id"], row["channel_id"], row["message_id"]) == ("job-1", 5, 6)
    again.update_job_message("job-1", state="succeeded", render="done", final=True)
    assert BotState.open(path).open_job_messages() == []


def test_guild_config_defaults_and_roundtrip(state: BotState) -> None:
    assert state.guild_config(None) == GuildConfig()
    config = state.guild_config(42)
    assert config.guild_id == 42 and config.finetune_roles == []
    config.finetune_roles = ["trainers", "123"]
    config.max_daily_per_user = 5
    state.save_guild_config(config, user_id=1)
    loaded = state.guild_config(42)
    assert loaded.finetune_roles == ["trainers", "123"] and loaded.max_daily_per_user == 5


def test_votes_are_one_per_user_and_can_change(state: BotState) -> None:
    answer_id = state.record_answer("q?", {"answer": "a", "sources": []}, user_id=1, thread_id=9)
    assert state.vote(answer_id, 1, +1) == {"up": 1, "down": 0}
    assert state.vote(answer_id, 2, -1) == {"up": 1, "down": 1}
    assert state.vote(answer_id, 1, -1) == {"up": 0, "down": 2}
    [row] = state.voted_answers()
    assert row["question"] == "q?" and row["score"] == -2 and row["answer"]["answer"] == "a"
    assert [h["question"] for h in state.thread_history(9)] == ["q?"]


def test_audit_log(state: BotState) -> None:
    state.audit("finetune.start", user_id=3, user_name="ann", guild_id=4, target="job-1", detail={"x": 1})
    [entry] = state.audit_log(guild_id=4)
    assert entry["action"] == "finetune.start" and entry["detail"] == {"x": 1}


def test_cooldown(state: BotState) -> None:
    user = Actor(user_id=1, guild_id=2)
    check_cooldown(state, user, "ask", 10, now=1000.0)
    with pytest.raises(HipbotError, match="try again in 5 s"):
        check_cooldown(state, user, "ask", 10, now=1005.0)
    check_cooldown(state, Actor(user_id=2, guild_id=2), "ask", 10, now=1005.0)  # per user
    check_cooldown(state, user, "hipify", 10, now=1005.0)  # per command
    check_cooldown(state, user, "ask", 10, now=1011.0)


def test_roles_admins_and_cancel() -> None:
    config = GuildConfig(guild_id=2, finetune_roles=["Trainers"], admin_roles=["555"])
    member = Actor(user_id=1, guild_id=2, roles=((9, "members"),))
    trainer = Actor(user_id=3, guild_id=2, roles=((10, "trainers"),))
    admin_by_role = Actor(user_id=4, guild_id=2, roles=((555, "mods"),))
    with pytest.raises(HipbotError, match="Trainers"):
        require_finetune(member, config)
    require_finetune(trainer, config)
    require_finetune(admin_by_role, config)
    with pytest.raises(HipbotError, match="not open"):
        require_finetune(member, GuildConfig(guild_id=2))
    with pytest.raises(HipbotError, match="admins"):
        require_admin(trainer, config, "/workers")
    require_admin(admin_by_role, config, "/workers")
    require_cancel(trainer, config, owner_id=3, job_id="j")
    with pytest.raises(HipbotError, match="only your own"):
        require_cancel(trainer, config, owner_id=1, job_id="j")
    require_cancel(admin_by_role, config, owner_id=1, job_id="j")


def test_finetune_quotas(state: BotState) -> None:
    config = GuildConfig(
        guild_id=2,
        finetune_roles=["t"],
        max_running_per_user=1,
        max_daily_per_user=2,
        max_running_per_guild=2,
    )
    ann = Actor(user_id=1, guild_id=2, roles=((1, "t"),))
    running: set[str] = set()
    check_finetune_quota(state, ann, config, running.__contains__, now=1000)
    state.record_finetune("a1", 1, 2)
    running.add("a1")
    with pytest.raises(HipbotError, match="queued or running"):
        check_finetune_quota(state, ann, config, running.__contains__)
    running.discard("a1")
    state.record_finetune("a2", 1, 2)
    with pytest.raises(HipbotError, match="last 24 hours"):
        check_finetune_quota(state, ann, config, running.__contains__)
    running.update({"a2", "b1"})
    state.record_finetune("b1", 2, 2)
    with pytest.raises(HipbotError, match="this server already has 2"):
        check_finetune_quota(
            state, Actor(user_id=3, guild_id=2, roles=((1, "t"),)), config, running.__contains__
        )
