"""``hipbot console`` and ``hipbot start``: the same handlers, as text in a terminal."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from hipbot.agents.docs.notes import note_files
from hipbot.bot.console import Console
from hipbot.bot.state import BotState
from hipbot.cli import cli
from hipbot.config import load_settings

CUDA = "#include <cuda_runtime.h>\nint main() { float* p; cudaMalloc(&p, 4); cudaFree(p); }\n"


def make_console(tmp_path: Path, lines: list[str], settings=None) -> tuple[Console, list[str]]:
    settings = settings or load_settings(env={}, home=tmp_path / "home")
    feed = iter(lines)
    out: list[str] = []

    def read(prompt: str) -> str:
        try:
            return next(feed)
        except StopIteration:
            raise EOFError from None

    return Console(
        settings=settings, state=BotState.open(settings.database), read=read, write=out.append
    ), out


def test_hipify_pasted_code_ends_with_a_dot(tmp_path: Path) -> None:
    console, out = make_console(tmp_path, ["/hipify", *CUDA.splitlines(), ".", "/quit"])
    console.loop()
    text = "\n".join(out)
    assert "```cpp\n#include <hip/hip_runtime.h>" in text and "hipMalloc(&p, 4)" in text
    assert "## hipify report: snippet.hip" in text


def test_hipify_file_path_long_output_saved(tmp_path: Path) -> None:
    source = tmp_path / "big.cu"
    source.write_text(
        CUDA
        + "".join(
            f"__global__ void k{i}(float* p) {{ p[threadIdx.x] += {i}; }}\nvoid f{i}(float* p) {{ cudaMalloc(&p, {i}); k{i}<<<1, 64>>>(p); cudaFree(p); }}\n"
            for i in range(100)
        )
    )
    console, out = make_console(tmp_path, [f"/hipify {source}", f"/hipify {source} --arch"])
    console.loop()
    saved = next(line for line in out if line.startswith("[attachment big.hip saved to "))
    path = Path(saved.split(" saved to ")[1].rstrip("]"))
    assert "hipFree(p)" in path.read_text()
    assert "error: --arch needs a value, e.g. --arch gfx90a" in out


def test_pasted_cuda_fence_is_converted_like_a_mention(tmp_path: Path) -> None:
    console, out = make_console(tmp_path, ["```cuda", "cudaDeviceSynchronize();", "```"])
    console.loop()
    assert any("hipDeviceSynchronize();" in line for line in out)


def test_errors_are_one_line_with_a_hint_and_the_session_goes_on(tmp_path: Path) -> None:
    console, out = make_console(
        tmp_path, ["/ask what replaces cudaMalloc?", "/nope", "/job abc", "/press 3", "/help"]
    )
    console.loop()
    text = "\n".join(out)
    assert "error: the HIP docs are not ingested yet" in text and "hint: run: hipbot ingest" in text
    assert "error: unknown command /nope" in text
    assert "error: 'abc' is not a job id" in text
    assert "error: no such button" in text
    assert "/ask QUESTION" in text  # help printed at the end: nothing stopped the loop


def test_ask_buttons_are_numbered_and_pressable(tmp_path: Path, ingested_docs) -> None:
    settings = ingested_docs.settings
    console, out = make_console(tmp_path, ["/ask what replaces cudaMemcpyToSymbolAsync?"], settings=settings)
    console.state = BotState.open(tmp_path / "bot.db")
    console.ctx.state = console.state
    console.loop()
    text = "\n".join(out)
    assert "hipMemcpyToSymbolAsync" in text and "https://github.com/ROCm/HIPIFY/blob/" in text
    assert "[1] 👍 Helpful" in text and "(/press N)" in text
    console.handle("/press 1")
    assert "your 👍 is recorded" in out[-1]
    assert console.state.voted_answers()[0]["score"] == 1


def test_config_and_jobs_from_the_console(tmp_path: Path) -> None:
    console, out = make_console(tmp_path, ["/config max_daily_per_user=5", "/jobs", "/models"])
    console.loop()
    text = "\n".join(out)
    assert "## Settings updated" in text and "No fine-tune jobs of yours yet" in text
    assert "No adapters or vLLM servers" in text


def test_cli_console_runs_commands_and_exits() -> None:
    result = CliRunner().invoke(cli, ["console", "-c", "/config", "-c", "/hipify cudaFree(p);"])
    assert result.exit_code == 0, result.output
    assert "Settings of this server" in result.output and "hipFree(p);" in result.output


def test_start_without_token_opens_the_console_and_ingests_on_first_start(
    tmp_path: Path, docs_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = tmp_path / "corpus"
    for rel in ("HIP/docs/how-to/faq.md", "HIPIFY/docs/tables/CUDA_RTC_API_supported_by_HIP.md"):
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus / rel).write_bytes((docs_root / rel).read_bytes())
    monkeypatch.setenv("HIPBOT_DOCS", str(corpus))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    first = CliRunner().invoke(cli, ["start", "--coordinator-port", str(port)], input="/quit\n")
    assert first.exit_code == 0, first.output
    ingested = f"ingested {2 + len(note_files())} documents"  # the two docs and the porting notes
    assert "first start: reading the HIP docs" in first.output and ingested in first.output
    assert f"operator page: http://127.0.0.1:{port}/ui" in first.output  # the coordinator runs beside
    assert "no DISCORD_TOKEN set: starting the terminal console" in first.output
    again = CliRunner().invoke(cli, ["start", "--coordinator-port", "0"], input="/quit\n")
    assert again.exit_code == 0, again.output
    assert "first start" not in again.output  # the database is filled: no second ingest
    assert "operator page" not in again.output


def test_discord_commands_plain_listing() -> None:
    result = CliRunner().invoke(cli, ["discord", "commands"])
    assert result.exit_code == 0
    assert "/finetune config? dataset? model?" in result.output
    assert "(message menu) Convert to HIP" in result.output
    tree = json.loads(CliRunner().invoke(cli, ["discord", "commands", "--json"]).output)
    assert {"name", "description", "options", "hipbot_permission"} <= set(tree[0])


def test_interactive_console_quits_cleanly_while_the_engine_loads(ingested_docs) -> None:
    """/quit right away: the warm-up thread is still loading torch models; exiting under it once
    aborted the process ("terminate called without an active exception", status 134)."""
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "HIPBOT_HOME": str(ingested_docs.settings.home),
        "HIPBOT_DB": str(ingested_docs.settings.database),
    }
    done = subprocess.run(
        [sys.executable, "-m", "hipbot.cli", "console"],
        input="/quit\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hipbot console" in done.stdout
