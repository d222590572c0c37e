"""Fine-tune commands over the real SQLite job queue: validate, roles, quotas, list, cancel, status
rendering, and the serving commands' refusals when nothing is served yet."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from fixtures_finetune import write_config_only_model

from hipbot.bot import handlers
from hipbot.bot.handlers import Context
from hipbot.bot.permissions import Actor
from hipbot.bot.state import BotState, GuildConfig
from hipbot.config import Settings, load_settings
from hipbot.errors import HipbotError
from hipbot.i18n import using
from hipbot.jobs.finetune.queue import JobQueue

GUILD = 77
DATA = json.dumps(
    [
        {"instruction": f"Port cudaMalloc call {i}", "input": "", "output": f"hipMalloc call {i}"}
        for i in range(8)
    ]
).encode()


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    return write_config_only_model(tmp_path / "tiny-llama")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(env={}, home=tmp_path / "home")


@pytest.fixture
def state(settings: Settings) -> BotState:
    state = BotState.open(settings.database)
    state.save_guild_config(
        GuildConfig(guild_id=GUILD, finetune_roles=["trainers"], max_running_per_user=1, max_daily_per_user=2)
    )
    return state


def as_user(
    settings: Settings, state: BotState, user_id: int, *, trainer: bool = True, admin: bool = False
) -> Context:
    roles = ((1, "trainers"),) if trainer else ()
    return Context(
        settings=settings,
        state=state,
        actor=Actor(user_id=user_id, guild_id=GUILD, roles=roles, guild_admin=admin),
    )


def yaml_for(model: Path, **extra: object) -> str:
    lines = [
        f"model_name_or_path: {model}",
        "stage: sft",
        "finetuning_type: lora",
        "lora_rank: 8",
        "lora_target: q_proj,v_proj",
    ]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def test_finetune_yaml_and_dataset_attachment_is_queued(
    settings: Settings, state: BotState, tiny_model: Path
) -> None:
    ctx = as_user(settings, state, 5)
    reply = handlers.finetune(
        ctx, yaml_text=yaml_for(tiny_model, max_steps=3), dataset=("porting.json", DATA)
    )
    job_id = int(reply.meta["job_id"])
    assert f"#{job_id}" in reply.text and reply.embeds[0].title.startswith(f"Fine-tune #{job_id}")
    job = JobQueue.open(settings.database).get(job_id)
    assert job.state == "queued" and job.owner == "discord:5" and job.guild == str(GUILD)
    assert job.spec["dataset"] == ["porting"] and job.spec["max_steps"] == 3
    assert job.attachment_name == "porting.json" and Path(job.attachment_path).read_bytes() == DATA
    assert job.memory_gib and job.memory_gib > 0  # the estimate is recorded
    assert "Memory estimate" in {f.name for f in reply.embeds[0].fields}
    assert "no worker is registered yet" in reply.text  # said at once, as the coordinator says it
    assert state.audit_log(guild_id=GUILD)[0]["action"] == "finetune.start"
    with using("zh_CN"):  # a member whose Discord speaks Chinese: the same warning, in Chinese
        zh = handlers.finetune(
            as_user(settings, state, 8), yaml_text=yaml_for(tiny_model, max_steps=3), dataset=("p.json", DATA)
        )
    assert "还没有注册的工作节点" in zh.text and "no worker" not in zh.text
    assert "deepspeed: z3_offload" in zh.text or "gradient_checkpointing: true" in zh.text  # keys as written
    log = JobQueue.open(settings.database).logs(int(zh.meta["job_id"]))
    assert any("no worker is registered yet" in row.line for row in log)  # the stored log stays English


def test_finetune_from_options_only(settings: Settings, state: BotState, tiny_model: Path) -> None:
    ctx = as_user(settings, state, 6)
    reply = handlers.finetune(
        ctx,
        model=str(tiny_model),
        dataset=("mine.jsonl", b'{"instruction": "a", "output": "b"}\n'),
        lora_rank=16,
        epochs=2,
    )
    job = JobQueue.open(settings.database).get(int(reply.meta["job_id"]))
    assert (
        job.spec["lora_rank"] == 16 and job.spec["num_train_epochs"] == 2 and job.spec["dataset"] == ["mine"]
    )
    with pytest.raises(HipbotError, match="a model and a dataset"):
        handlers.finetune(ctx)


def test_finetune_validation_errors_are_listed(settings: Settings, state: BotState, tiny_model: Path) -> None:
    ctx = as_user(settings, state, 5)
    with pytest.raises(HipbotError) as err:
        handlers.finetune(
            ctx,
            yaml_text=yaml_for(tiny_model, lora_rnak=8, bf16="true", fp16="true"),
            dataset=("d.json", DATA),
        )
    message = str(err.value)
    assert "lora_rnak" in message and "lora_rank" in message  # did you mean
    assert "bf16" in message and "fp16" in message
    with using("zh_CN"):  # a member whose Discord speaks Chinese: the same problems, in Chinese
        zh = handlers.safe(
            handlers.finetune,
            replace(ctx, locale="zh_CN"),
            yaml_text=yaml_for(tiny_model, lora_rnak=8, use_badam="true", learning_rate="fast"),
            dataset=("d.json", DATA),
        )
    assert zh.ephemeral and "有 3 个问题：" in zh.text and "problem" not in zh.text
    assert "未知配置项 'lora_rnak'；你是不是想写 'lora_rank'？" in zh.text
    assert "use_badam: true 不受支持：BAdam 是全参数优化器" in zh.text  # key names and values as written
    assert "learning_rate：输入应为有效的数字，无法将字符串解析为数字（收到的是 'fast'）" in zh.text
    assert "提示：配置项遵循 LLaMA-Factory 的训练 YAML" in zh.text and "hint" not in zh.text
    with pytest.raises(HipbotError, match="no record has a prompt"):
        handlers.finetune(ctx, yaml_text=yaml_for(tiny_model), dataset=("d.json", b'[{"foo": 1}]'))
    with pytest.raises(HipbotError, match="not valid YAML"):
        handlers.finetune(ctx, yaml_text="model_name_or_path: [unclosed", dataset=("d.json", DATA))
    assert JobQueue.open(settings.database).list() == []


def test_finetune_roles_and_quotas(settings: Settings, state: BotState, tiny_model: Path) -> None:
    with pytest.raises(HipbotError, match="trainers"):
        handlers.finetune(
            as_user(settings, state, 8, trainer=False),
            yaml_text=yaml_for(tiny_model),
            dataset=("d.json", DATA),
        )
    ctx = as_user(settings, state, 9)
    first = handlers.finetune(ctx, yaml_text=yaml_for(tiny_model), dataset=("d.json", DATA))
    with pytest.raises(HipbotError, match="queued or running"):
        handlers.finetune(ctx, yaml_text=yaml_for(tiny_model), dataset=("d.json", DATA))
    JobQueue.open(settings.database).finish(int(first.meta["job_id"]), "failed", error="boom")
    handlers.finetune(ctx, yaml_text=yaml_for(tiny_model), dataset=("d.json", DATA))
    JobQueue.open(settings.database).cancel(int(state.finetunes_since(since_ts=0, user_id=9)[-1]))
    with pytest.raises(HipbotError, match="last 24 hours"):
        handlers.finetune(ctx, yaml_text=yaml_for(tiny_model), dataset=("d.json", DATA))


def test_jobs_job_and_cancel_rules(settings: Settings, state: BotState, tiny_model: Path) -> None:
    ann, bob = as_user(settings, state, 5), as_user(settings, state, 6)
    admin = as_user(settings, state, 1, trainer=False, admin=True)
    job_a = int(
        handlers.finetune(ann, yaml_text=yaml_for(tiny_model), dataset=("d.json", DATA)).meta["job_id"]
    )
    job_b = int(
        handlers.finetune(bob, yaml_text=yaml_for(tiny_model), dataset=("d.json", DATA)).meta["job_id"]
    )
    mine = handlers.jobs(ann, "mine")
    assert f"#{job_a}" in mine.embeds[0].description and f"#{job_b}" not in mine.embeds[0].description
    everyone = handlers.jobs(ann, "all")
    assert f"#{job_a}" in everyone.embeds[0].description and f"#{job_b}" in everyone.embeds[0].description
    assert handlers.job(ann, f"#{job_b}").embeds[0].title.startswith(f"Fine-tune #{job_b}")
    with pytest.raises(HipbotError, match="only your own"):
        handlers.cancel(ann, job_b)
    assert "cancelled" in handlers.cancel(ann, job_a).text
    with pytest.raises(HipbotError, match="already cancelled"):
        handlers.cancel(ann, job_a)
    handlers.cancel(admin, str(job_b))
    assert [e["action"] for e in state.audit_log(guild_id=GUILD)][:2] == [
        "finetune.cancel",
        "finetune.cancel",
    ]
    with pytest.raises(HipbotError, match="not a job id"):
        handlers.job(ann, "abc")
    with pytest.raises(HipbotError, match="no job #999"):
        handlers.job(ann, "999")


def test_job_status_progress_success_and_failure(
    settings: Settings, state: BotState, tiny_model: Path, tmp_path: Path
) -> None:
    from hipbot.bot.replies import fit

    ctx = as_user(settings, state, 5)
    job_id = int(
        handlers.finetune(ctx, yaml_text=yaml_for(tiny_model), dataset=("d.json", DATA)).meta["job_id"]
    )
    queue = JobQueue.open(settings.database)
    queue.update(
        job_id,
        state="running",
        worker_id="w-mi300",
        progress_step=5,
        progress_total=10,
        progress_loss=1.2345,
        progress={"step": 5, "max_steps": 10, "loss": 1.2345, "eta_seconds": 125, "tokens_per_second": 900},
    )
    update = handlers.job_status(settings, job_id)
    assert update is not None and update.state == "running" and not update.final
    embed = update.reply.embeds[0]
    assert "██████████░░░░░░░░░░" in embed.description and "step 5/10" in embed.description
    fields = {f.name: f.value for f in embed.fields}
    assert fields["Loss"] == "1.2345" and fields["ETA"] == "2 min 05 s" and "w-mi300" in fields["Worker"]

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "loss.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    queue.finish(
        job_id,
        "succeeded",
        metrics={"first_loss": 2.0, "final_loss": 0.5, "global_step": 10},
        adapter_dir=str(adapter),
    )
    done = handlers.job_status(settings, job_id)
    assert done is not None and done.final and done.state == "succeeded"
    [png] = done.reply.attachments
    assert png.data.startswith(b"\x89PNG") and done.reply.embeds[0].image == png.name
    assert [b.custom_id for b in done.reply.buttons] == [f"hipbot:publish:{job_id}"]
    assert "loss 2.0000 → 0.5000" in {f.name: f.value for f in done.reply.embeds[0].fields}["Result"]
    assert fit(done.reply)[-1].attachments  # the picture rides with the embed

    other = int(
        handlers.finetune(
            as_user(settings, state, 6), yaml_text=yaml_for(tiny_model), dataset=("d.json", DATA)
        ).meta["job_id"]
    )
    queue.finish(other, "failed", error="CUDA out of memory. Tried to allocate 2.00 GiB")
    failed = handlers.job_status(settings, other)
    assert failed is not None and failed.final and not failed.reply.buttons
    assert "out of memory" in {f.name: f.value for f in failed.reply.embeds[0].fields}["Error"]
    assert handlers.job_status(settings, 424242) is None


def test_workers_listing_is_admin_only(settings: Settings, state: BotState) -> None:
    queue = JobQueue.open(settings.database)
    token = queue.create_registration_token()
    queue.register_worker(
        token,
        "lab-box",
        {"backend": "rocm", "gpus": [{"name": "AMD Instinct MI250X", "arch": "gfx90a", "memory_gib": 64.0}]},
    )
    with pytest.raises(HipbotError, match="for admins"):
        handlers.workers(as_user(settings, state, 5))
    reply = handlers.workers(as_user(settings, state, 1, trainer=False, admin=True))
    [field] = reply.embeds[0].fields
    assert "lab-box" in field.name and "MI250X" in field.value and "gfx90a" in field.value


def test_serving_commands_say_what_to_do_without_servers(settings: Settings, state: BotState) -> None:
    ctx = as_user(settings, state, 5)
    assert "No adapters or vLLM servers" in handlers.models(ctx).text
    with pytest.raises(HipbotError, match="/models"):
        handlers.chat(ctx, "my-adapter", "hello")
    with pytest.raises(HipbotError, match="no vLLM server is configured"):
        handlers.chat(ctx, "base", "hello")
    with pytest.raises(HipbotError, match="empty"):
        handlers.chat(ctx, "base", "  ")
    with pytest.raises(HipbotError):
        handlers.publish(ctx, "no-such-adapter")
    with pytest.raises(HipbotError, match="no job #31"):
        handlers.publish(ctx, "#31")


def test_through_a_real_coordinator(tmp_path: Path, tiny_model: Path) -> None:
    """With HIPBOT_COORDINATOR_URL set the same handlers talk to the coordinator's HTTP API."""
    import socket
    import threading
    import time

    import uvicorn

    from hipbot.jobs.finetune.coordinator import CoordinatorConfig, create_app

    coord = tmp_path / "coordinator"
    app = create_app(
        CoordinatorConfig(
            database=coord / "jobs.db",
            data_dir=coord / "data",
            adapters_dir=coord / "adapters",
            client_token="s3cret",
        )
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(100):
            if server.started:
                break
            time.sleep(0.05)
        settings = load_settings(
            env={},
            home=tmp_path / "bot-home",
            coordinator_url=f"http://127.0.0.1:{port}",
            coordinator_token="s3cret",
        )
        state = BotState.open(settings.database)
        state.save_guild_config(GuildConfig(guild_id=GUILD, finetune_roles=["trainers"]))
        ctx = as_user(settings, state, 5)
        reply = handlers.finetune(ctx, yaml_text=yaml_for(tiny_model), dataset=("d.json", DATA))
        job_id = int(reply.meta["job_id"])
        remote = JobQueue.open(coord / "jobs.db").get(job_id)
        assert remote.owner == "discord:5" and remote.attachment_name == "d.json"
        assert f"#{job_id}" in handlers.jobs(ctx, "mine").embeds[0].description
        assert handlers.job_status(settings, job_id).state == "queued"
        assert "cancelled" in handlers.cancel(ctx, job_id).text
        assert JobQueue.open(coord / "jobs.db").get(job_id).state == "cancelled"
        bad = load_settings(
            env={},
            home=tmp_path / "bot-home",
            coordinator_url=f"http://127.0.0.1:{port}",
            coordinator_token="wrong",
        )
        with pytest.raises(HipbotError, match="token"):
            handlers.jobs(Context(settings=bad, state=state, actor=ctx.actor), "mine")
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.mark.slow
@pytest.mark.vllm
def test_publish_job_adapter_then_chat_on_real_vllm(
    request: pytest.FixtureRequest, lora_rank8: Path, tmp_path: Path
) -> None:
    """The Publish button's path: a succeeded job's adapter is registered, loaded into a real vLLM
    CPU server, listed by /models and answers /chat, streamed."""
    from hipbot.cli import main
    from hipbot.jobs.finetune.spec import parse_spec

    server = request.getfixturevalue("vllm_server")
    assert (
        main(["serve", "servers", "add", "cpu", server.url, "--adapter-dir", str(tmp_path / "volume")]) == 0
    )
    settings = load_settings()
    state = BotState.open(settings.database)
    text = f"model_name_or_path: {server.model}\ndataset: d\n"
    queue = JobQueue.open(settings.database)
    job = queue.submit(parse_spec(text), text, owner="discord:5", name="SmolLM2 Porting")
    queue.finish(job.id, "succeeded", adapter_dir=str(lora_rank8))
    owner = Context(settings=settings, state=state, actor=Actor(user_id=5, guild_id=GUILD))
    stranger = Context(settings=settings, state=state, actor=Actor(user_id=6, guild_id=GUILD))

    with pytest.raises(HipbotError, match="belongs to someone else"):
        handlers.press(stranger, f"hipbot:publish:{job.id}")
    published = handlers.press(owner, f"hipbot:publish:{job.id}")
    name = f"smollm2-porting-job{job.id}"
    assert f"`{name}` is live" in published.text and "cpu`: loaded" in published.embeds[0].description
    assert name in handlers.model_names(settings)
    assert any(f.name == name and "cpu" in f.value for f in handlers.models(owner).embeds[0].fields)
    pieces = list(handlers.chat(owner, name, "What is the HIP name of cudaMalloc?", max_tokens=16))
    assert len(pieces) > 1 and "".join(pieces).strip()
    base = list(handlers.chat(owner, "smollm2", "Say hello.", max_tokens=8))
    assert "".join(base).strip()
