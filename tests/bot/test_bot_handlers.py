"""The command handlers, called as the CLI console and Discord call them: no Discord involved.

/ask runs on the real corpus, ingested once per session (the ``ingested_docs`` fixture).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from hipbot.agents.docs.notes import note_files, read_note
from hipbot.bot import handlers
from hipbot.bot.handlers import Context
from hipbot.bot.handlers.common import COLOR_FAIL, COLOR_OK
from hipbot.bot.permissions import Actor
from hipbot.bot.state import BotState
from hipbot.config import Settings, load_settings
from hipbot.errors import HipbotError

KERNEL = """#include <cuda_runtime.h>
__global__ void reduce(const float* in, float* out) {
  float v = in[threadIdx.x];
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffff, v, o);
  if (threadIdx.x % 32 == 0) atomicAdd(out, v);
}
int main() { float* p; cudaMalloc(&p, 4); reduce<<<1, 64>>>(p, p); cudaFree(p); }
"""


@pytest.fixture
def docs_settings(ingested_docs) -> Settings:
    """The real corpus, ingested once per test session (tests/fixtures_docs.py)."""
    return ingested_docs.settings


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    settings = load_settings(env={}, home=tmp_path / "home")
    return Context(settings=settings, state=BotState.open(settings.database))


def member(state: BotState, settings: Settings, user_id: int = 5, **kw) -> Context:
    return Context(settings=settings, state=state, actor=Actor(user_id=user_id, guild_id=77, **kw))


# -- /ask -----------------------------------------------------------------------------------------


def test_ask_lookup_embed_sources_buttons_and_votes(docs_settings: Settings, tmp_path: Path) -> None:
    state = BotState.open(tmp_path / "bot.db")
    ctx = Context(settings=docs_settings, state=state)
    reply = handlers.ask(ctx, "what replaces cudaMemcpyToSymbolAsync?")
    [embed] = reply.embeds
    assert "hipMemcpyToSymbolAsync" in embed.description
    assert embed.links and embed.links[0].url.startswith("https://github.com/ROCm/HIPIFY/")
    assert "CUDA_Runtime_API_functions_supported_by_HIP.md" in embed.links[0].label
    ids = [b.custom_id for b in reply.buttons]
    answer_id = reply.meta["answer_id"]
    assert f"hipbot:vote:up:{answer_id}" in ids and f"hipbot:vote:down:{answer_id}" in ids
    vote = handlers.press(ctx, f"hipbot:vote:up:{answer_id}")
    assert vote.ephemeral and "👍 1" in vote.text
    [row] = state.voted_answers()
    assert row["question"] == "what replaces cudaMemcpyToSymbolAsync?"
    assert "hipMemcpyToSymbolAsync" in row["answer"]["answer"] and row["score"] == 1


def test_ask_more_sources_button(docs_settings: Settings, tmp_path: Path) -> None:
    ctx = Context(settings=docs_settings, state=BotState.open(tmp_path / "bot.db"))
    reply = handlers.ask(ctx, "why are __shfl_*_sync functions not working on the HIP platform?")
    assert reply.embeds[0].links
    more = [b for b in reply.buttons if b.custom_id.startswith("hipbot:sources:")]
    assert more, "a conceptual answer retrieves more than three passages"
    listed = handlers.press(ctx, more[0].custom_id)
    assert listed.ephemeral and len(listed.embeds[0].links) > handlers.SOURCES_SHOWN
    # the docs' pages on GitHub, or the thread a porting note was written from
    threads = {read_note(path, rel).url for rel, path in note_files()}
    assert all(
        link.url.startswith("https://github.com/ROCm/") or link.url in threads
        for link in listed.embeds[0].links
    )


def test_ask_in_a_thread_keeps_context(docs_settings: Settings, tmp_path: Path) -> None:
    state = BotState.open(tmp_path / "bot.db")
    ctx = Context(settings=docs_settings, state=state, thread_id=999)
    handlers.ask(ctx, "what replaces cudaMemcpyToSymbolAsync?")
    follow = handlers.ask(ctx, "and which HIP version added it?")
    assert "hipMemcpyToSymbolAsync" in follow.embeds[0].description
    history = state.thread_history(999)
    assert [h["question"] for h in history][-1] == "and which HIP version added it?"
    assert (
        "follow-up to: what replaces cudaMemcpyToSymbolAsync?"
        in state.answer(follow.meta["answer_id"])["context"]
    )


def test_ask_errors_and_cooldown(docs_settings: Settings, tmp_path: Path) -> None:
    state = BotState.open(tmp_path / "bot.db")
    ctx = member(state, docs_settings)
    with pytest.raises(HipbotError, match="empty"):
        handlers.ask(ctx, "   ")
    with pytest.raises(HipbotError, match="limit is 2000"):
        handlers.ask(ctx, "x" * 2001)
    handlers.ask(ctx, "what replaces cudaFree?")
    reply = handlers.safe(handlers.ask, ctx, "what replaces cudaMalloc?")
    assert reply.ephemeral and "cooling down" in reply.text


def test_ask_before_ingest_says_what_to_run(ctx: Context) -> None:
    reply = handlers.safe(handlers.ask, ctx, "what replaces cudaMalloc?")
    assert reply.ephemeral and "hipbot ingest" in reply.text


# -- /hipify and convert ----------------------------------------------------------------------------


def test_hipify_inline_with_report_and_lints(ctx: Context) -> None:
    reply = handlers.hipify(ctx, KERNEL)
    assert reply.text.startswith("```cpp\n#include <hip/hip_runtime.h>")
    assert "hipMalloc(&p, 4)" in reply.text and not reply.attachments
    [report] = reply.embeds
    fields = {f.name: f.value for f in report.fields}
    assert any(name.startswith("Not converted") and "__shfl_down_sync" in v for name, v in fields.items())
    lint_text = " ".join(fields)
    assert "AMD" in lint_text  # wave64 lints (lane mask, % 32) are listed by id


def test_hipify_attachment_long_output_as_file(ctx: Context) -> None:
    code = "#include <cuda_runtime.h>\n" + "".join(
        f"__global__ void k{i}(float* p) {{ p[threadIdx.x] += {i}; }}\nvoid f{i}(float* p) {{ cudaMalloc(&p, {i}); k{i}<<<1, 64>>>(p); cudaFree(p); }}\n"
        for i in range(150)
    )
    reply = handlers.hipify(ctx, attachment=("big.cu", code.encode()))
    assert reply.text == ""
    [file] = reply.attachments
    assert file.name == "big.hip" and b"hipFree(p)" in file.data and b"cudaFree" not in file.data
    header = handlers.hipify(
        ctx.__class__(settings=ctx.settings, state=ctx.state), attachment=("k.cuh", b"cudaStream_t s;")
    )
    assert "hipStream_t s;" in header.text and header.embeds[0].title == "hipify report: k.cuh"


def test_hipify_bad_inputs(ctx: Context) -> None:
    for attachment, message in (
        (("a.txt", b"x"), "not a source file"),
        (("a.cu", b"\x00\x01binary"), "binary"),
        (("a.cu", b"x" * (handlers.MAX_CODE_BYTES + 1)), "KiB"),
    ):
        with pytest.raises(HipbotError, match=message):
            handlers.hipify(ctx, attachment=attachment)
    with pytest.raises(HipbotError, match="no code"):
        handlers.hipify(ctx, "  ")


def test_hipify_latin1_attachment_comes_back_byte_for_byte(ctx: Context) -> None:
    source = "// (c) Jos\xe9 M\xfcller \xa9 2019\n#include <cuda_runtime.h>\nvoid f(float **p) { cudaMalloc(p, 4); }\n"
    reply = handlers.hipify(ctx, attachment=("k.cu", source.encode("latin-1")))
    (attachment,) = reply.attachments
    assert attachment.name == "k.hip" and reply.text == ""
    assert attachment.data.startswith("// (c) Jos\xe9 M\xfcller \xa9 2019\n".encode("latin-1"))
    assert b"hipMalloc(p, 4)" in attachment.data and b"cudaMalloc" not in attachment.data


@pytest.mark.hipcc
def test_hipify_with_arch_reports_hipccs_verdict(ctx: Context) -> None:
    # __shfl_down_sync is in HIP only from ROCm 6.2: the kernel without it compiles on any
    clean = KERNEL.replace("v += __shfl_down_sync(0xffffffff, v, o)", "v += o")
    compile_embed = handlers.hipify(ctx, clean, arch="gfx90a").embeds[-1]
    assert compile_embed.title == "hipcc --offload-arch=gfx90a"
    assert (compile_embed.description, compile_embed.color) == ("compiles cleanly", COLOR_OK)
    reply = handlers.hipify(ctx, clean.replace("v += o", "v += undefined_step"), arch="gfx90a")
    line = next(n for n, text in enumerate(reply.meta["hip"].splitlines(), 1) if "undefined_step" in text)
    assert reply.embeds[-1].color == COLOR_FAIL
    assert f"\n{line}:" in reply.embeds[-1].description
    assert "error: use of undeclared identifier 'undefined_step'" in reply.embeds[-1].description


@pytest.mark.hipcc
def test_try_to_make_it_compile_button_runs_the_port(ctx: Context) -> None:
    # ROCm 5.2 has no __shfl_down_sync: the translation fails, the button's port repairs it.
    clean = KERNEL.replace("v += __shfl_down_sync(0xffffffff, v, o)", "v += o")
    assert handlers.hipify(ctx, clean, arch="gfx90a").buttons == []  # nothing to repair
    failed = handlers.hipify(ctx, KERNEL, arch="gfx90a")
    assert failed.embeds[-1].color == COLOR_FAIL
    (button,) = failed.buttons
    assert button.label == "Try to make it compile" and button.custom_id.endswith(":gfx90a")
    ported = handlers.press(ctx, button.custom_id)
    assert ported.embeds[0].title.startswith("port: compiles for gfx90a after")
    assert ported.embeds[0].color == COLOR_OK
    diff = next(a for a in ported.attachments if a.name == "repairs.diff").data.decode()
    assert '+#include "hip_compat.h"' in diff  # the shim that gives ROCm 5 the *_sync functions
    shim = next(a for a in ported.attachments if a.name == "hip_compat.h").data.decode()
    assert "__shfl_down_sync" in shim
    with pytest.raises(HipbotError, match="not kept any more"):
        handlers.press(ctx, "hipbot:port:0123456789abcdef:gfx90a")
    with pytest.raises(HipbotError, match="not an AMD GPU target"):
        handlers.press(ctx, button.custom_id.rsplit(":", 1)[0] + ":sm_80")


@pytest.mark.hipcc
def test_hipify_with_arch_reads_no_host_file(ctx: Context, tmp_path: Path) -> None:
    secret = tmp_path / "secret.h"
    secret.write_text("hipbot_secret_word_4711 x;\n")
    reply = handlers.hipify(ctx, f'%:include "{secret}"\nint main() {{ return 0; }}\n', arch="gfx90a")
    description = reply.embeds[-1].description
    assert "file not found" in description and "hipbot_secret_word_4711" not in description


def test_hipify_stops_a_translation_past_its_time_limit(
    ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib.import_module("hipbot.bot.handlers.hipify"), "TRANSLATE_SECONDS", 0.0)
    with pytest.raises(HipbotError, match="longer than its 0 s limit"):
        handlers.hipify(ctx, "k<<<g,b>>>(" * 1000)


def test_extract_code_blocks_any_tag() -> None:
    text = "see\n```cuda\ncudaMalloc(&p, n);\n```\nand\n```c++\ncudaFree(p);\n```\n```\nint x;\n```"
    blocks = handlers.extract_code_blocks(text)
    assert [lang for lang, _ in blocks] == ["cuda", "c++", ""]
    assert blocks[0][1].strip() == "cudaMalloc(&p, n);"
    # An unclosed fence (message cut by Discord's limit) still yields its code.
    assert handlers.extract_code_blocks("```cu\ncudaFree(p);")[0][1].strip() == "cudaFree(p);"


def test_convert_message_blocks_attachments_and_refusal(ctx: Context) -> None:
    reply = handlers.convert_message(
        ctx, "help:\n```cpp\ncudaMalloc(&p, n);\n```\n```cuda\ncudaFree(p);\n```"
    )
    assert "hipMalloc(&p, n);" in reply.text and "hipFree(p);" in reply.text and "help:" not in reply.text
    ctx2 = Context(settings=ctx.settings, state=ctx.state)
    from_file = handlers.convert_message(ctx2, "see attached", [("k.cu", b"cudaDeviceReset();")])
    assert "hipDeviceReset();" in from_file.text
    with pytest.raises(HipbotError, match="no code block"):
        handlers.convert_message(ctx2, "just chatting")


def test_mention_routes_code_to_convert_and_text_to_ask(ctx: Context) -> None:
    reply = handlers.mention(ctx, "<@123> ```cuda\ncudaDeviceSynchronize();\n```")
    assert "hipDeviceSynchronize();" in reply.text
    assert handlers.mention(ctx, "<@123>").embeds[0].title == "hipbot commands"
    with pytest.raises(HipbotError, match="hipbot ingest"):
        handlers.mention(ctx, "<@!123> what replaces cudaMalloc?")


# -- /config and buttons --------------------------------------------------------------------------


def test_config_view_change_and_validation(ctx: Context) -> None:
    admin = Context(
        settings=ctx.settings, state=ctx.state, actor=Actor(user_id=1, guild_id=77, guild_admin=True)
    )
    shown = handlers.config(admin)
    assert shown.ephemeral and shown.embeds[0].title == "Settings of this server"
    changed = handlers.config(
        admin, finetune_roles="trainers, @ml", max_daily_per_user="4", notice_channel_id="<#42>"
    )
    assert changed.embeds[0].title == "Settings updated"
    config = ctx.state.guild_config(77)
    assert config.finetune_roles == ["trainers", "ml"] and config.max_daily_per_user == 4
    assert config.notice_channel_id == 42
    with pytest.raises(HipbotError, match="unknown setting"):
        handlers.config(admin, colour="red")
    with pytest.raises(HipbotError, match="0 or more"):
        handlers.config(admin, max_daily_per_user="-1")
    user = member(ctx.state, ctx.settings)
    with pytest.raises(HipbotError, match="for admins"):
        handlers.config(user, max_daily_per_user="9")
    assert [e["action"] for e in ctx.state.audit_log(guild_id=77)] == ["config"]


def test_unknown_button(ctx: Context) -> None:
    with pytest.raises(HipbotError, match="not one the bot knows"):
        handlers.press(ctx, "hipbot:nope")
    with pytest.raises(HipbotError, match="not in the database"):
        handlers.press(ctx, "hipbot:vote:up:12345")
