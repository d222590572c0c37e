"""The Discord layer, driven through discord.py's own gateway entry point.

A real ``HipBot`` (commands.Bot + app_commands tree) receives real INTERACTION_CREATE payloads via
``ConnectionState.parse_interaction_create``; only the network is replaced: the webhook adapter
that carries interaction responses and the HTTP client's ``request``/``get_from_cdn`` record what
would be sent and answer as Discord does.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import discord
import pytest
from discord.webhook.async_ import AsyncWebhookAdapter, async_context
from fixtures_finetune import write_config_only_model

from hipbot.bot.discord_app import HipBot
from hipbot.bot.discord_commands import command_tree_json
from hipbot.bot.state import BotState, GuildConfig
from hipbot.config import load_settings

APP_ID = 111
GUILD_ID = 222
CHANNEL_ID = 333
BOT_ID = 444
ADMIN_ROLE = 501
TRAINER_ROLE = 502
_ids = itertools.count(10_000_000)


def _snowflake() -> str:
    return str(next(_ids))


def _user(uid: int, name: str, bot: bool = False) -> dict[str, Any]:
    return {
        "id": str(uid),
        "username": name,
        "discriminator": "0",
        "global_name": name,
        "avatar": None,
        "bot": bot,
    }


def _message(
    channel_id: int, content: str | None, payload: dict[str, Any], files: list[dict[str, Any]]
) -> dict:
    return {
        "id": _snowflake(),
        "channel_id": str(channel_id),
        "author": _user(BOT_ID, "hipbot", bot=True),
        "content": content or "",
        "timestamp": "2026-01-01T00:00:00+00:00",
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": [],
        "mention_roles": [],
        "attachments": [
            {
                "id": _snowflake(),
                "filename": f["name"],
                "size": len(f["data"]),
                "url": "https://cdn/x",
                "proxy_url": "https://cdn/x",
            }
            for f in files
        ],
        "embeds": payload.get("embeds") or [],
        "pinned": False,
        "type": 0,
        "flags": payload.get("flags", 0),
        "components": payload.get("components") or [],
    }


class Recorder:
    """Everything the bot sent to Discord, in order: (kind, method, path, payload, files)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.cdn: dict[str, bytes] = {}

    @staticmethod
    def _files(files: Any) -> list[dict[str, Any]]:
        out = []
        for f in files or []:
            f.reset()
            out.append({"name": f.filename, "data": f.fp.read()})
        return out

    def record(self, kind: str, route: Any, payload: dict | None, files: Any) -> dict[str, Any]:
        call = {
            "kind": kind,
            "method": route.method,
            "path": route.url,
            "payload": payload or {},
            "files": self._files(files),
        }
        self.calls.append(call)
        return call

    # -- views on the record -------------------------------------------------------------------
    def responses(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if c["kind"] == "webhook"]

    def sent_messages(self) -> list[dict[str, Any]]:
        """Messages that carry content: interaction callbacks with data, follow-ups and edits."""
        out = []
        for c in self.calls:
            p = c["payload"]
            data = p.get("data", p) if c["kind"] == "webhook" and "type" in p else p
            if isinstance(data, dict) and (data.get("content") or data.get("embeds") or c["files"]):
                out.append({**c, "data": data})
        return out


class FakeWebhookAdapter(AsyncWebhookAdapter):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    async def request(self, route, session, *, payload=None, multipart=None, files=None, **kwargs):  # type: ignore[override]
        if multipart:
            payload = json.loads(next(p["value"] for p in multipart if p["name"] == "payload_json"))
        call = self.recorder.record("webhook", route, payload, files)
        if route.method == "DELETE" or "/callback" in route.url:
            if "/callback" in route.url and kwargs.get("params", {}).get("with_response"):
                return {"interaction": {"id": "1", "type": 2}}
            return None
        return _message(CHANNEL_ID, (payload or {}).get("content"), payload or {}, call["files"])


class Harness:
    def __init__(self, bot: HipBot, recorder: Recorder) -> None:
        self.bot = bot
        self.rec = recorder
        self.guild = bot._connection._add_guild_from_data(
            {
                "id": str(GUILD_ID),
                "name": "porting",
                "owner_id": "1",
                "roles": [
                    {"id": str(GUILD_ID), "name": "@everyone", "permissions": "0", "position": 0},
                    {"id": str(ADMIN_ROLE), "name": "mods", "permissions": "0", "position": 1},
                    {"id": str(TRAINER_ROLE), "name": "trainers", "permissions": "0", "position": 2},
                ],
                "channels": [],
            }
        )

    def payload(
        self,
        itype: int,
        data: dict[str, Any],
        *,
        user_id: int = 7,
        roles: tuple[int, ...] = (),
        permissions: int = 0,
        channel: dict[str, Any] | None = None,
        message: dict[str, Any] | None = None,
        locale: str = "en-US",
    ) -> dict[str, Any]:
        payload = {
            "id": _snowflake(),
            "application_id": str(APP_ID),
            "type": itype,
            "token": "interaction-token",
            "version": 1,
            "guild_id": str(GUILD_ID),
            "channel_id": str(CHANNEL_ID),
            "channel": channel
            or {
                "id": str(CHANNEL_ID),
                "type": 0,
                "guild_id": str(GUILD_ID),
                "name": "general",
                "position": 0,
            },
            "member": {
                "user": _user(user_id, f"user{user_id}"),
                "roles": [str(r) for r in roles],
                "joined_at": "2025-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
                "flags": 0,
                "permissions": str(permissions),
            },
            "data": data,
            "attachment_size_limit": 25 * 1024 * 1024,
            "locale": locale,
            "guild_locale": "en-US",
            "app_permissions": str(discord.Permissions.all().value),
        }
        if message is not None:
            payload["message"] = message
        return payload

    async def dispatch(self, payload: dict[str, Any]) -> None:
        """Feed one interaction through the gateway parser and wait for what it started."""
        before = asyncio.all_tasks()
        self.bot._connection.parse_interaction_create(payload)
        for _ in range(50):
            pending = [
                t for t in asyncio.all_tasks() - before if t is not asyncio.current_task() and not t.done()
            ]
            if not pending:
                break
            await asyncio.gather(*pending, return_exceptions=True)

    async def slash(
        self, name: str, options: list[dict] | None = None, *, resolved: dict | None = None, **kw: Any
    ) -> None:
        data: dict[str, Any] = {"id": _snowflake(), "name": name, "type": 1, "options": options or []}
        if resolved:
            data["resolved"] = resolved
        await self.dispatch(self.payload(2, data, **kw))

    async def click(self, custom_id: str, *, message: dict | None = None, **kw: Any) -> None:
        button = {"type": 2, "style": 2, "label": "button", "custom_id": custom_id}
        msg = message or _message(CHANNEL_ID, "", {"components": [{"type": 1, "components": [button]}]}, [])
        await self.dispatch(self.payload(3, {"custom_id": custom_id, "component_type": 2}, message=msg, **kw))

    def attachment(self, name: str, data: bytes) -> tuple[dict, dict]:
        aid = _snowflake()
        url = f"https://cdn.discordapp.com/attachments/{aid}/{name}"
        self.rec.cdn[url] = data
        resolved = {
            "attachments": {
                aid: {"id": aid, "filename": name, "size": len(data), "url": url, "proxy_url": url}
            }
        }
        return {"value": aid}, resolved


@pytest.fixture
async def harness(tmp_path: Path):
    recorder = Recorder()
    token = async_context.set(FakeWebhookAdapter(recorder))
    settings = load_settings()
    bot = HipBot(settings, state=BotState.open(tmp_path / "bot.db"), watch_interval=3600)

    async def http_request(route, *, files=None, form=None, **kwargs):
        payload = kwargs.get("json")
        if form:
            payload = json.loads(next(p["value"] for p in form if p["name"] == "payload_json"))
        call = recorder.record("http", route, payload, files)
        if route.method == "POST" and "/threads" in route.url:
            return {
                "id": _snowflake(),
                "type": 11,
                "guild_id": str(GUILD_ID),
                "parent_id": str(CHANNEL_ID),
                "name": (payload or {}).get("name", "t"),
                "owner_id": str(BOT_ID),
                "message_count": 0,
                "member_count": 1,
                "thread_metadata": {
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "archive_timestamp": "2026-01-01T00:00:00+00:00",
                    "locked": False,
                },
            }
        if route.method in ("POST", "PATCH") and "/messages" in route.url:
            return _message(CHANNEL_ID, (payload or {}).get("content"), payload or {}, call["files"])
        return {}

    async def get_from_cdn(url: str) -> bytes:
        return recorder.cdn[url]

    bot.http.request = http_request  # type: ignore[method-assign]
    bot.http.get_from_cdn = get_from_cdn  # type: ignore[method-assign]
    await bot._async_setup_hook()
    bot._connection.user = discord.ClientUser(state=bot._connection, data=_user(BOT_ID, "hipbot", bot=True))
    bot._connection.application_id = APP_ID
    await bot.setup_hook()
    yield Harness(bot, recorder)
    if bot._watcher is not None:
        bot._watcher.cancel()
    if bot._warm is not None:
        assert await bot._warm is False  # nothing ingested in this home: /ask will say what to run
    async_context.reset(token)


CUDA = """#include <cuda_runtime.h>
__global__ void scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
void run(float* x, int n) { scale<<<(n + 255) / 256, 256>>>(x, 2.0f, n); cudaDeviceSynchronize(); }
"""


# -- the tree -------------------------------------------------------------------------------------


async def test_command_tree_json(tmp_path: Path) -> None:
    bot = HipBot(load_settings(), state=BotState.open(tmp_path / "b.db"))
    tree = {c["name"]: c for c in await command_tree_json(bot)}
    for name in (
        "ask",
        "hipify",
        "finetune",
        "jobs",
        "job",
        "cancel",
        "models",
        "chat",
        "publish",
        "workers",
        "ingest",
        "config",
        "Convert to HIP",
    ):
        assert name in tree, name
        assert tree[name]["hipbot_permission"]
    assert tree["Convert to HIP"]["type"] == 3
    hipify = {o["name"]: o for o in tree["hipify"]["options"]}
    assert hipify["file"]["type"] == 11  # attachment
    assert "gfx90a" in [c["value"] for c in hipify["arch"]["choices"]]
    assert tree["ask"]["options"][0]["name"] == "question" and tree["ask"]["options"][0]["required"]
    assert {o["name"] for o in tree["finetune"]["options"]} >= {"config", "dataset", "model", "lora_rank"}
    assert tree["finetune"]["contexts"] == [0]  # guild only
    manage_guild = 1 << 5
    assert tree["workers"]["default_member_permissions"] == manage_guild
    assert tree["ingest"]["default_member_permissions"] == manage_guild
    assert tree["ask"]["default_member_permissions"] is None


def test_cli_commands_json_without_token() -> None:
    from click.testing import CliRunner

    from hipbot.cli import cli

    result = CliRunner().invoke(cli, ["discord", "commands", "--json"])
    assert result.exit_code == 0, result.output
    tree = {c["name"]: c for c in json.loads(result.output)}
    assert "ask" in tree and "Convert to HIP" in tree
    assert tree["ask"]["description_localizations"]["zh-CN"]  # the CLI prints the localizations too
    assert tree["ask"]["name_localizations"] == {"zh-CN": "提问"}
    job_id = tree["job"]["options"][0]
    assert (job_id["name"], job_id["name_localizations"]) == ("job_id", {"zh-CN": "任务编号"})
    assert tree["ask"]["hipbot_permission"].startswith("everyone")  # never translated


def test_discord_run_refuses_without_token() -> None:
    import contextlib
    import io

    from hipbot.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["discord", "run"]) == 1
    assert "no Discord bot token" in err.getvalue() and "DISCORD_TOKEN" in err.getvalue()
    assert "config.toml" in err.getvalue()


# -- /hipify ---------------------------------------------------------------------------------------


async def test_hipify_defers_then_follows_up_with_code_and_report(harness: Harness) -> None:
    await harness.slash("hipify", [{"name": "code", "type": 3, "value": CUDA}])
    calls = harness.rec.responses()
    assert calls[0]["payload"]["type"] == 5  # deferred channel message: acknowledged at once
    followup = calls[1]
    assert followup["method"] == "POST" and f"/webhooks/{APP_ID}/interaction-token" in followup["path"]
    content = followup["payload"]["content"]
    assert (
        content.startswith("```cpp") and "hipDeviceSynchronize()" in content and "cudaDevice" not in content
    )
    [embed] = followup["payload"]["embeds"]
    assert embed["title"].startswith("hipify report")


async def test_hipify_attachment_in_long_result_out_as_file(harness: Harness) -> None:
    body = "".join(
        f"__global__ void k{i}(float* p) {{ p[threadIdx.x] += {i}; }}\nvoid f{i}(float* p) {{ cudaMalloc(&p, {i}); k{i}<<<1, 64>>>(p); cudaFree(p); }}\n"
        for i in range(200)
    )
    value, resolved = harness.attachment("big.cu", ("#include <cuda_runtime.h>\n" + body).encode())
    await harness.slash("hipify", [{"name": "file", "type": 11, **value}], resolved=resolved)
    followup = harness.rec.responses()[1]
    [out] = followup["files"]
    assert out["name"] == "big.hip"
    assert b"hipMalloc(&p, 199)" in out["data"] and b"cudaMalloc" not in out["data"]
    assert followup["payload"]["embeds"][0]["title"] == "hipify report: big.hip"


async def test_hipify_refuses_binary_attachment_privately(harness: Harness) -> None:
    value, resolved = harness.attachment("notes.txt", b"hello")
    await harness.slash("hipify", [{"name": "file", "type": 11, **value}], resolved=resolved)
    calls = harness.rec.responses()
    assert calls[0]["payload"]["type"] == 5
    assert calls[1]["method"] == "DELETE"  # the public "thinking" message goes away
    error = calls[2]["payload"]
    assert error["flags"] & 64 and "not a source file" in error["content"]


async def test_hipify_cooldown(harness: Harness) -> None:
    await harness.slash("hipify", [{"name": "code", "type": 3, "value": CUDA}])
    await harness.slash("hipify", [{"name": "code", "type": 3, "value": CUDA}])
    last = harness.rec.responses()[-1]["payload"]
    assert last["flags"] & 64 and "cooling down" in last["content"]


async def test_context_menu_converts_code_blocks_of_any_tag(harness: Harness) -> None:
    target = _message(CHANNEL_ID, "my kernel:\n```c++\n" + CUDA + "```\nwhy slow?", {}, [])
    target["author"] = _user(9, "someone")
    data = {
        "id": _snowflake(),
        "name": "Convert to HIP",
        "type": 3,
        "target_id": target["id"],
        "resolved": {"messages": {target["id"]: target}},
    }
    await harness.dispatch(harness.payload(2, data))
    followup = harness.rec.responses()[1]["payload"]
    assert "hipDeviceSynchronize" in followup["content"] and "why slow" not in followup["content"]


# -- /config and permissions -------------------------------------------------------------------------


async def test_config_refuses_members_and_accepts_admins(harness: Harness) -> None:
    await harness.slash("config", [{"name": "finetune_roles", "type": 3, "value": "trainers"}])
    refusal = harness.rec.responses()[-1]["payload"]
    assert refusal["flags"] & 64 and "for admins" in refusal["content"]
    manage_guild = discord.Permissions(manage_guild=True).value
    await harness.slash(
        "config", [{"name": "finetune_roles", "type": 3, "value": "trainers"}], permissions=manage_guild
    )
    done = harness.rec.responses()[-1]["payload"]
    assert done["flags"] & 64 and done["embeds"][0]["title"] == "Settings updated"
    config = harness.bot.state.guild_config(GUILD_ID)
    assert config.finetune_roles == ["trainers"]
    assert harness.bot.state.audit_log(guild_id=GUILD_ID)[0]["action"] == "config"


async def test_admin_role_from_config_counts(harness: Harness) -> None:
    harness.bot.state.save_guild_config(GuildConfig(guild_id=GUILD_ID, admin_roles=[str(ADMIN_ROLE)]))
    await harness.slash(
        "config", [{"name": "max_daily_per_user", "type": 4, "value": 9}], roles=(ADMIN_ROLE,)
    )
    assert harness.rec.responses()[-1]["payload"]["embeds"][0]["title"] == "Settings updated"
    assert harness.bot.state.guild_config(GUILD_ID).max_daily_per_user == 9


# -- long outputs ------------------------------------------------------------------------------------


async def test_long_reply_is_split_into_follow_ups(harness: Harness) -> None:
    from hipbot.bot.replies import Reply
    from hipbot.bot.views import send_reply

    interaction = discord.Interaction(
        data=harness.payload(2, {"id": "1", "name": "ask", "type": 1}), state=harness.bot._connection
    )
    await interaction.response.defer(thinking=True)
    text = "\n".join(f"line {i}: " + "x" * 60 for i in range(100))
    await send_reply(interaction, Reply(text=text))
    followups = [c for c in harness.rec.responses() if c["method"] == "POST" and "/callback" not in c["path"]]
    assert len(followups) >= 4
    assert all(len(c["payload"]["content"]) <= 2000 for c in followups)
    assert "".join(c["payload"]["content"] for c in followups).count("line ") == 100


# -- /finetune, the status watcher and buttons -------------------------------------------------------


DATASET = json.dumps([{"instruction": "port cudaFree", "output": "hipFree"}] * 4).encode()


async def test_finetune_links_status_message_and_watcher_edits_it(harness: Harness, tmp_path: Path) -> None:
    from hipbot.jobs.finetune.queue import JobQueue

    model = write_config_only_model(tmp_path / "tiny")
    harness.bot.state.save_guild_config(GuildConfig(guild_id=GUILD_ID, finetune_roles=["trainers"]))
    config_value, config_resolved = harness.attachment(
        "job.yaml", f"model_name_or_path: {model}\nlora_rank: 8\n".encode()
    )
    data_value, data_resolved = harness.attachment("porting.json", DATASET)
    resolved = {"attachments": config_resolved["attachments"] | data_resolved["attachments"]}
    options = [{"name": "config", "type": 11, **config_value}, {"name": "dataset", "type": 11, **data_value}]

    await harness.slash("finetune", options, resolved=resolved)  # no role: refused, privately
    refused = harness.rec.responses()[-1]["payload"]
    assert "you need one of these roles to start a fine-tune: trainers" in refused["content"]
    assert refused["flags"] & 64  # ephemeral

    await harness.slash("finetune", options, resolved=resolved, roles=(TRAINER_ROLE,), user_id=42)
    followup = harness.rec.responses()[-1]["payload"]
    assert "Queued fine-tune" in followup["content"]
    [row] = harness.bot.state.open_job_messages()
    job_id = int(row["job_id"])
    assert row["user_id"] == 42 and row["channel_id"] == CHANNEL_ID

    queue = JobQueue.open(harness.bot.settings.database)
    assert queue.get(job_id).owner == "discord:42"
    queue.update(
        job_id, state="running", worker_id="w1", progress_step=2, progress_total=4, progress_loss=0.9
    )
    harness.rec.calls.clear()
    assert await harness.bot.refresh_job_messages() == 1
    [edit] = harness.rec.calls
    assert (
        edit["method"] == "PATCH" and f"/channels/{CHANNEL_ID}/messages/{row['message_id']}" in edit["path"]
    )
    assert "step 2/4" in edit["payload"]["embeds"][0]["description"]
    assert await harness.bot.refresh_job_messages() == 0  # nothing changed: no edit

    adapter = tmp_path / "out"
    adapter.mkdir()
    (adapter / "loss.png").write_bytes(b"\x89PNG\r\n\x1a\nx")
    queue.finish(
        job_id, "succeeded", metrics={"first_loss": 2.0, "final_loss": 1.0}, adapter_dir=str(adapter)
    )
    harness.rec.calls.clear()
    assert await harness.bot.refresh_job_messages() == 1
    edit, notice = harness.rec.calls
    assert edit["files"][0]["name"] == f"loss-job{job_id}.png"
    buttons = edit["payload"]["components"][0]["components"]
    assert buttons[0]["custom_id"] == f"hipbot:publish:{job_id}" and buttons[0]["label"] == "Publish"
    assert (
        notice["method"] == "POST"
        and "<@42>" in notice["payload"]["content"]
        and "succeeded" in notice["payload"]["content"]
    )
    assert harness.bot.state.open_job_messages() == []  # final: the watcher stops editing it


async def test_status_links_survive_a_restart(harness: Harness, tmp_path: Path) -> None:
    state = harness.bot.state
    state.link_job_message("7", channel_id=CHANNEL_ID, message_id=555, user_id=1, guild_id=GUILD_ID)
    again = HipBot(harness.bot.settings, state=BotState(state.db))
    assert [r["job_id"] for r in again.state.open_job_messages()] == ["7"]
    # The job does not exist in this queue: the link is closed rather than retried forever.
    assert await harness.bot.refresh_job_messages() == 0
    assert state.open_job_messages() == []


async def test_publish_button_refuses_other_users_job(harness: Harness, tmp_path: Path) -> None:
    from hipbot.jobs.finetune.queue import JobQueue
    from hipbot.jobs.finetune.spec import parse_spec

    text = "model_name_or_path: m\ndataset: d\n"
    job = JobQueue.open(harness.bot.settings.database).submit(parse_spec(text), text, owner="discord:5")
    await harness.click(f"hipbot:publish:{job.id}", user_id=6)
    calls = harness.rec.responses()
    assert (
        calls[0]["payload"]["type"] == 5 and calls[0]["payload"]["data"]["flags"] == 64
    )  # deferred privately
    assert "belongs to someone else" in calls[-1]["payload"]["content"]


async def test_vote_buttons_record_votes(harness: Harness) -> None:
    answer_id = harness.bot.state.record_answer("q?", {"answer": "a", "sources": []}, user_id=1)
    await harness.click(f"hipbot:vote:up:{answer_id}", user_id=8)
    await harness.click(f"hipbot:vote:down:{answer_id}", user_id=9)
    response = harness.rec.responses()[-1]["payload"]
    assert response["type"] == 4 and response["data"]["flags"] == 64
    assert "👍 1 · 👎 1" in response["data"]["content"]
    assert harness.bot.state.tally(answer_id) == {"up": 1, "down": 1}


async def test_chat_stream_edits_and_continues_past_2000_chars(harness: Harness) -> None:
    from hipbot.bot import discord_app

    interaction = discord.Interaction(
        data=harness.payload(2, {"id": "1", "name": "chat", "type": 1}), state=harness.bot._connection
    )
    await interaction.response.defer(thinking=True)
    old, discord_app.CHAT_EDIT_INTERVAL_S = discord_app.CHAT_EDIT_INTERVAL_S, 0.0
    try:
        words = (f"word{i} " for i in range(600))
        text = await discord_app.stream_reply(interaction, words, header="**m**: ")
    finally:
        discord_app.CHAT_EDIT_INTERVAL_S = old
    assert text.startswith("word0 ") and text.rstrip().endswith("word599")
    edits = [c for c in harness.rec.responses() if c["method"] == "PATCH"]
    assert len(edits) > 2 and all(len(c["payload"]["content"]) <= 2000 for c in edits)
    assert any(c["payload"]["content"].endswith("▌") for c in edits)  # in-progress marker
    assert "/messages/@original" in edits[0]["path"]
    assert any("/messages/@original" not in c["path"] for c in edits)  # the continuation message
    assert edits[-1]["payload"]["content"].rstrip().endswith("word599")


async def test_chat_without_servers_is_a_private_error(harness: Harness) -> None:
    await harness.slash(
        "chat", [{"name": "adapter", "type": 3, "value": "x"}, {"name": "prompt", "type": 3, "value": "hi"}]
    )
    last = harness.rec.responses()[-1]["payload"]
    assert last["flags"] & 64 and "/models" in last["content"]


async def test_mention_with_cuda_block_replies_with_hip(harness: Harness) -> None:
    author = _user(50, "porter")
    pasted = "```cuda\ncudaStreamCreate(&s); // @everyone\n```"
    data = _message(CHANNEL_ID, f"<@{BOT_ID}> {pasted}", {}, [])
    data["author"] = author
    data["mentions"] = [_user(BOT_ID, "hipbot", bot=True)]
    data["guild_id"] = str(GUILD_ID)
    data["member"] = {
        "roles": [],
        "joined_at": "2025-01-01T00:00:00+00:00",
        "deaf": False,
        "mute": False,
        "flags": 0,
    }
    channel = discord.TextChannel(
        state=harness.bot._connection,
        guild=harness.guild,
        data={"id": str(CHANNEL_ID), "type": 0, "name": "general", "position": 0, "guild_id": str(GUILD_ID)},
    )
    harness.guild._add_channel(channel)
    message = discord.Message(state=harness.bot._connection, channel=channel, data=data)
    await harness.bot.on_message(message)
    posted = [c for c in harness.rec.calls if c["method"] == "POST" and "/messages" in c["path"]]
    assert "hipStreamCreate(&s); // @everyone" in posted[-1]["payload"]["content"]
    assert str(posted[-1]["payload"]["message_reference"]["message_id"]) == data["id"]
    # what the reply quotes pings no one
    assert posted[-1]["payload"]["allowed_mentions"] == {"parse": []}


# -- /ask -------------------------------------------------------------------------------------------


async def test_ask_embed_sources_buttons_and_thread(harness: Harness, ingested_docs) -> None:
    harness.bot.settings = ingested_docs.settings
    await harness.slash(
        "ask",
        [
            {"name": "question", "type": 3, "value": "what replaces cudaMemcpyToSymbolAsync?"},
            {"name": "thread", "type": 5, "value": True},
        ],
    )
    defer, followup = harness.rec.responses()[:2]
    assert defer["payload"]["type"] == 5
    [embed] = followup["payload"]["embeds"]
    assert "hipMemcpyToSymbolAsync" in embed["description"]
    assert "](https://github.com/ROCm/HIPIFY/blob/" in embed["description"]  # sources as links
    buttons = followup["payload"]["components"][0]["components"]
    assert {b["custom_id"].rsplit(":", 1)[0] for b in buttons} >= {"hipbot:vote:up", "hipbot:vote:down"}
    thread_call = next(c for c in harness.rec.calls if c["kind"] == "http" and c["path"].endswith("/threads"))
    assert thread_call["payload"]["name"] == "what replaces cudaMemcpyToSymbolAsync?"
    [row] = harness.bot.state.db["bot_answers"].rows
    assert row["message_id"] and row["thread_id"]  # follow-ups in that thread carry this question


async def test_follow_up_in_the_bots_thread_needs_no_mention(harness: Harness) -> None:
    thread_id = int(_snowflake())
    thread = discord.Thread(
        guild=harness.guild,
        state=harness.bot._connection,
        data={
            "id": str(thread_id),
            "type": 11,
            "guild_id": str(GUILD_ID),
            "parent_id": str(CHANNEL_ID),
            "name": "what replaces cudaMalloc?",
            "owner_id": str(BOT_ID),
            "message_count": 1,
            "member_count": 2,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": "2026-01-01T00:00:00+00:00",
            },
        },
    )
    data = _message(thread_id, "```cu\ncudaEventCreate(&e);\n```", {}, [])
    data["author"] = _user(51, "asker")
    await harness.bot.on_message(discord.Message(state=harness.bot._connection, channel=thread, data=data))
    posted = [
        c
        for c in harness.rec.calls
        if c["method"] == "POST" and f"/channels/{thread_id}/messages" in c["path"]
    ]
    assert "hipEventCreate(&e);" in posted[-1]["payload"]["content"]
    # In someone else's thread, or a channel, an unmentioned message is not the bot's business.
    other = _message(CHANNEL_ID, "```cu\ncudaFree(p);\n```", {}, [])
    other["author"] = _user(51, "asker")
    harness.rec.calls.clear()
    channel = discord.PartialMessageable(state=harness.bot._connection, id=CHANNEL_ID, guild_id=GUILD_ID)
    await harness.bot.on_message(discord.Message(state=harness.bot._connection, channel=channel, data=other))
    assert harness.rec.calls == []


async def test_job_id_autocomplete_offers_own_jobs(harness: Harness) -> None:
    from hipbot.jobs.finetune.queue import JobQueue
    from hipbot.jobs.finetune.spec import parse_spec

    text = "model_name_or_path: m\ndataset: d\n"
    queue = JobQueue.open(harness.bot.settings.database)
    mine = queue.submit(parse_spec(text), text, owner="discord:7", name="mine")
    queue.submit(parse_spec(text), text, owner="discord:8", name="theirs")
    data = {
        "id": _snowflake(),
        "name": "cancel",
        "type": 1,
        "options": [{"name": "job_id", "type": 3, "value": "", "focused": True}],
    }
    await harness.dispatch(harness.payload(4, data, user_id=7))
    [response] = harness.rec.responses()
    assert response["payload"]["type"] == 8  # autocomplete result
    assert response["payload"]["data"]["choices"] == [
        {"name": f"#{mine.id} mine (queued)", "value": str(mine.id)}
    ]


async def test_help_is_private(harness: Harness) -> None:
    await harness.slash("help")
    [response] = harness.rec.responses()
    assert response["payload"]["type"] == 4 and response["payload"]["data"]["flags"] == 64
    assert "/finetune" in response["payload"]["data"]["embeds"][0]["description"]


async def test_watcher_keeps_links_while_the_coordinator_is_down(harness: Harness) -> None:
    import dataclasses
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once closed
    harness.bot.settings = dataclasses.replace(
        harness.bot.settings, coordinator_url=f"http://127.0.0.1:{port}"
    )
    harness.bot.state.link_job_message(
        "3", channel_id=CHANNEL_ID, message_id=77, user_id=1, guild_id=GUILD_ID
    )
    assert await harness.bot.refresh_job_messages() == 0
    assert [r["job_id"] for r in harness.bot.state.open_job_messages()] == ["3"]
    assert not [c for c in harness.rec.calls if c["method"] == "PATCH"]


async def test_oversized_attachment_is_refused_before_download(harness: Harness) -> None:
    value, resolved = harness.attachment("huge.cu", b"cudaFree(p);")
    resolved["attachments"][value["value"]]["size"] = 50 * 1024 * 1024
    await harness.slash("hipify", [{"name": "file", "type": 11, **value}], resolved=resolved)
    error = harness.rec.responses()[-1]["payload"]
    assert error["flags"] & 64 and "huge.cu is 50 MiB" in error["content"]
    assert not [c for c in harness.rec.calls if c["kind"] == "http"]  # nothing was fetched


async def test_finetune_status_goes_to_the_notice_channel(harness: Harness, tmp_path: Path) -> None:
    model = write_config_only_model(tmp_path / "tiny")
    notice = 9999
    harness.bot.state.save_guild_config(
        GuildConfig(guild_id=GUILD_ID, finetune_roles=["everyone"], notice_channel_id=notice)
    )
    data_value, resolved = harness.attachment("porting.json", DATASET)
    await harness.slash(
        "finetune",
        [{"name": "model", "type": 3, "value": str(model)}, {"name": "dataset", "type": 11, **data_value}],
        resolved=resolved,
    )
    posted = [
        c for c in harness.rec.calls if c["kind"] == "http" and f"/channels/{notice}/messages" in c["path"]
    ]
    assert posted and posted[0]["payload"]["embeds"][0]["title"].startswith("Fine-tune #")
    [row] = harness.bot.state.open_job_messages()
    assert row["channel_id"] == notice


# -- languages -------------------------------------------------------------------------------------


def _shape(payload: Any) -> Any:
    """A reply's structure without its words: keys, list lengths, ids, flags and numbers."""
    if isinstance(payload, dict):
        return {k: v if k == "custom_id" else _shape(v) for k, v in payload.items()}
    if isinstance(payload, list):
        return [_shape(v) for v in payload]
    return "text" if isinstance(payload, str) else payload


async def _in_both_languages(harness: Harness, run: Any) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for locale in ("en-US", "zh-CN"):
        harness.rec.calls.clear()
        await run(locale, next(_ids))  # a new member each time: no cooldown in the way
        out[locale] = [c["data"] for c in harness.rec.sent_messages()]
    return out


async def test_same_content_in_english_and_chinese(harness: Harness) -> None:
    async def help_(locale: str, user: int) -> None:
        await harness.slash("help", locale=locale, user_id=user)

    async def hipify(locale: str, user: int) -> None:
        await harness.slash(
            "hipify", [{"name": "code", "type": 3, "value": CUDA}], locale=locale, user_id=user
        )

    async def refused(locale: str, user: int) -> None:
        await harness.slash("job", [{"name": "job_id", "type": 3, "value": "x"}], locale=locale, user_id=user)

    for run, zh_words in ((help_, "hipbot 命令"), (hipify, "hipify 报告"), (refused, "不是任务编号")):
        sent = await _in_both_languages(harness, run)
        assert sent["en-US"] and _shape(sent["en-US"]) == _shape(sent["zh-CN"])
        assert sent["en-US"] != sent["zh-CN"]
        assert zh_words in json.dumps(sent["zh-CN"], ensure_ascii=False)
        assert zh_words not in json.dumps(sent["en-US"], ensure_ascii=False)
        if run is hipify:  # the HIP code itself is the same
            assert sent["en-US"][0]["content"] == sent["zh-CN"][0]["content"]


async def test_server_language_for_members_the_bot_cannot_speak_to(harness: Harness) -> None:
    manage_guild = discord.Permissions(manage_guild=True).value
    await harness.slash(
        "config", [{"name": "language", "type": 3, "value": "zh_CN"}], permissions=manage_guild
    )
    assert harness.bot.state.guild_config(GUILD_ID).language == "zh_CN"
    harness.rec.calls.clear()
    await harness.slash("help", locale="fr")
    assert harness.rec.sent_messages()[0]["data"]["embeds"][0]["title"] == "hipbot 命令"
    harness.rec.calls.clear()
    await harness.slash("help", locale="en-GB")  # the member's own language comes first
    assert harness.rec.sent_messages()[0]["data"]["embeds"][0]["title"] == "hipbot commands"


async def test_options_reach_the_handler_by_their_english_names_in_chinese(harness: Harness) -> None:
    # Discord shows a zh-CN member the localized names (配置, 提问冷却秒数, 语言) and sends the
    # interaction with the command's own names, which the handler receives as its keywords.
    manage_guild = discord.Permissions(manage_guild=True).value
    options = [
        {"name": "ask_cooldown_s", "type": 10, "value": 12.5},
        {"name": "language", "type": 3, "value": "zh_CN"},
    ]
    await harness.slash("config", options, permissions=manage_guild, locale="zh-CN")
    config = harness.bot.state.guild_config(GUILD_ID)
    assert (config.ask_cooldown_s, config.language) == (12.5, "zh_CN")
    assert "简体中文" in json.dumps(harness.rec.sent_messages()[-1]["data"], ensure_ascii=False)
