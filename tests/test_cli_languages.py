"""The CLI's human output in the terminal's language (HIPBOT_LANG, LC_ALL, LANG); its --json output,
rule ids, API names, paths and numbers the same in every language."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hipbot import i18n
from hipbot.agents.hipify.compile_check import CheckResult, Diagnostic
from hipbot.agents.port.report import Cause, PortReport, UnitReport
from hipbot.cli import main

KERNEL = """#include <cuda_runtime.h>
__global__ void k(int* p) {
  if (threadIdx.x % 32 == 0) p[0] = __shfl_down_sync(0xffffffff, 1, 16);
}
void f(int* d) { cudaMalloc(&d, 64); k<<<1, 64>>>(d); }
"""


def _run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], lang: str, *args: str):
    monkeypatch.setenv("HIPBOT_LANG", lang)
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_hipify_speaks_chinese_and_its_json_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    runs = {lang: _run(monkeypatch, capsys, lang, "hipify", str(src)) for lang in ("en", "zh_CN")}
    (en_code, en_out, en), (zh_code, zh_out, zh) = runs["en"], runs["zh_CN"]
    assert en_code == zh_code == 0 and en_out == zh_out  # the HIP code itself
    assert "left unconverted" in en and "assumes 32 lanes" in en
    assert "'__shfl_down_sync' 未转换：保持原样：HIP 从 ROCm 6.2 起提供它" in zh
    assert "假定一个 warp 有 32 个 lane" in zh
    assert "left unconverted" not in zh and "assumes 32 lanes" not in zh
    rules = re.findall(r"\[AMD\d{3}\]", en)
    assert rules and re.findall(r"\[AMD\d{3}\]", zh) == rules  # rule ids never translated
    # positions, severities as compilers write them, and doc paths the same
    for pattern in (r"k\.cu:\d+:\d+: warning:", r"\[HIP/docs/[^\]]+\]"):
        assert re.findall(pattern, zh) == re.findall(pattern, en) != []

    json_runs = {
        lang: _run(monkeypatch, capsys, lang, "hipify", str(src), "--json") for lang in ("en", "zh_CN")
    }
    assert json_runs["en"][1] == json_runs["zh_CN"][1]  # byte for byte
    record = json.loads(json_runs["zh_CN"][1])
    assert record["lints"] and "assumes 32 lanes" in json.dumps(record["lints"])
    assert record["report"]["unconverted"][0]["detail"].startswith(
        "kept as written: HIP has it from ROCm 6.2"
    )


def test_errors_and_hints_in_the_terminals_language(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("HIPBOT_LANG")
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_MESSAGES", raising=False)
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert main(["port", str(tmp_path), "-o", str(tmp_path / "out"), "--arch", "sm_80"]) == 1
    err = capsys.readouterr().err
    assert err == "错误：不是 AMD GPU 目标：'sm_80'\n  提示：例如 --arch gfx90a、gfx942、gfx1100\n"
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    assert main(["port", str(tmp_path), "-o", str(tmp_path / "out"), "--arch", "sm_80"]) == 1
    assert "error: not an AMD GPU target: 'sm_80'" in capsys.readouterr().err


def test_help_lists_the_commands_in_chinese(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _code, en, _err = _run(monkeypatch, capsys, "en", "--help")
    _code, zh, _err = _run(monkeypatch, capsys, "zh_CN", "--help")
    assert "Port a whole CUDA project to HIP" in en and "命令:" in zh
    assert "  port         把整个 CUDA 项目移植到 HIP，并修复直到能为 AMD 编译。" in zh.splitlines()


def test_serve_table_titles_in_chinese_json_unchanged(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    add = ("serve", "servers", "add", "box", "http://127.0.0.1:9", "--base-model", "m", "--served-model", "s")
    code, out, _err = _run(monkeypatch, capsys, "zh_CN", *add)
    assert code == 0 and out.startswith("已添加服务器 box：http://127.0.0.1:9，提供 s（m）")
    _code, en, _err = _run(monkeypatch, capsys, "en", "serve", "servers", "list")
    _code, zh, _err = _run(monkeypatch, capsys, "zh_CN", "serve", "servers", "list")
    assert en.split()[:2] == ["NAME", "URL"] and zh.split()[:2] == ["名称", "URL"]
    # the titles take two columns a character: the URL column starts at the same place
    assert i18n.columns(zh.splitlines()[0].split("URL")[0]) == len(en.splitlines()[0].split("URL")[0])
    assert en.splitlines()[1].split() == zh.splitlines()[1].split()  # the row itself
    titles, row = zh.splitlines()[:2]
    assert i18n.columns(titles.split("最大LoRA秩")[0]) == row.index("16")  # under its title
    json_en = _run(monkeypatch, capsys, "en", "serve", "servers", "list", "--json")[1]
    assert _run(monkeypatch, capsys, "zh_CN", "serve", "servers", "list", "--json")[1] == json_en


def test_port_report_in_chinese_with_its_numbers_and_causes() -> None:
    report = PortReport(src="src", out="out", arch="gfx90a", rocm="6.3")
    report.units = [
        UnitReport("a.cu", "a.hip", status="compiled"),
        UnitReport("b.cu", "b.hip", status="compiled", stage="rules"),
        UnitReport("c.cu", "c.hip", cause=Cause("inline-ptx", "inline PTX assembly has no HIP form")),
    ]
    with i18n.using("en"):
        en, en_json = report.table(), json.dumps(report.to_dict())
    with i18n.using("zh_CN"):
        zh, zh_json = report.table(), json.dumps(report.to_dict())
    assert en_json == zh_json
    assert en.splitlines()[0] == "hipbot port: 3 translation units, gfx90a, ROCm 6.3"
    assert zh.splitlines()[0] == "hipbot port：3 个翻译单元，gfx90a，ROCm 6.3"
    assert "  compiled after translation   1 (33 %)" in en.splitlines()
    assert "  翻译后即编译通过             1 (33 %)" in zh.splitlines()
    assert "失败：" in zh and "  c.cu: inline PTX assembly has no HIP form" in zh.splitlines()
    assert [re.findall(r"\d+", line) for line in en.splitlines()] == [
        re.findall(r"\d+", line) for line in zh.splitlines()
    ]


def test_discord_commands_listing_shows_the_names_members_see(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    en = _run(monkeypatch, capsys, "en", "discord", "commands")[1].splitlines()
    zh = _run(monkeypatch, capsys, "zh_CN", "discord", "commands")[1].splitlines()
    assert "/ask question thread?" in en and "/ask (提问) question (问题) thread? (子区)" in zh
    assert "/hipify code? (代码) file? (文件) arch? (架构)" in zh  # the tool's name stays as it is
    assert len(en) == len(zh)


def test_compile_check_line_in_chinese() -> None:
    error = Diagnostic(3, 7, "error", "use of undeclared identifier 'x'", "x = 1;")
    warning = Diagnostic(5, 1, "warning", "unused variable 'y'", "int y;")
    result = CheckResult(ok=False, arch="gfx942", diagnostics=[error, warning, warning], seconds=1.25)
    with i18n.using("en"):
        assert result.summary() == "hipcc check (gfx942): FAILED, 1 error, 2 warnings in 1.2s"
    with i18n.using("zh_CN"):
        assert result.summary() == "hipcc check (gfx942): 失败，1 个错误，2 个警告，用时 1.2 秒"
        assert result.to_dict()["diagnostics"][0]["message"] == "use of undeclared identifier 'x'"
