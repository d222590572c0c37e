"""The CLI's human output in the terminal's language (HIPBOT_LANG, LC_ALL, LANG); its --json output,
rule ids, API names, paths and numbers the same in every language."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest
from fixtures_finetune import job_yaml, write_config_only_model, write_datasets

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


def test_port_causes_and_repair_reasons_in_chinese_values_and_json_unchanged() -> None:
    """A cause is English everywhere a string is used (--json) and localized where shown, its
    values (headers, API names, places) filled in after translation."""
    from hipbot.agents.port.libraries import header_cause, identifier_cause

    windows = header_cause("windows.h")
    library = identifier_cause("hipblasSgemm", include_dirs=())
    assert windows is not None and library is not None
    assert windows.text == (
        "<windows.h> is a Windows header: this unit is written for Windows (MSVC), not for Linux where ROCm runs"
    )
    assert library.text.startswith("needs hipBLAS, which is not installed (apt install ")
    report = PortReport(src="src", out="out", arch="gfx942", rocm="6.3")
    report.units = [UnitReport("w.cu", "w.hip", cause=windows), UnitReport("l.cu", "l.hip", cause=library)]
    with i18n.using("en"):
        en, en_json = report.table(), json.dumps(report.to_dict())
    with i18n.using("zh_CN"):
        zh, zh_json = report.table(), json.dumps(report.to_dict())
    assert en_json == zh_json and windows.text in en_json
    assert f"  w.cu: {windows.text}" in en.splitlines()
    assert (
        "  w.cu: <windows.h> 是 Windows 头文件：本单元是为 Windows（MSVC）写的，而不是为运行 ROCm 的 Linux"
        in zh.splitlines()
    )
    assert (
        "需要 hipBLAS，但它没有安装（apt install " in zh
        and "使用了 'hipblasSgemm' 却没有包含 hipBLAS 头文件" in zh
    )


PORT_PROJECT = {
    "w.cu": "#include <cuda_runtime.h>\n#include <windows.h>\nint main() { return 0; }\n",
    "m.cu": (
        "#include <cuda_runtime.h>\n__global__ void k(int* p) { p[0] = 1; }\n"
        "void main() { int* d; cudaMalloc(&d, 4); k<<<1, 1>>>(d); }\n"
    ),
}


@pytest.mark.hipcc
def test_port_cli_causes_and_diff_reasons_in_chinese(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name, text in PORT_PROJECT.items():
        (src / name).write_text(text)

    def port(lang: str, out: str, *more: str) -> tuple[int, str, str]:
        return _run(monkeypatch, capsys, lang, "port", str(src), "-o", str(tmp_path / out), "-j", "2", *more)

    _code, en_diff, en = port("en", "en", "--diff")
    code, zh_diff, zh = port("zh_CN", "zh", "--diff")
    assert code == 1
    windows = "<windows.h> is a Windows header: this unit is written for Windows (MSVC), not for Linux where ROCm runs"
    assert f"  w.cu: {windows}" in en.splitlines()
    assert (
        "  w.cu: <windows.h> 是 Windows 头文件：本单元是为 Windows（MSVC）写的，而不是为运行 ROCm 的 Linux"
        in (zh.splitlines())
    )
    void_main = "main returns void, which MSVC accepts and C++ does not: it returns int (0 when it ends without a return)"
    assert f"# m.cu: {void_main} [C++ [basic.start.main]" in en_diff
    assert (
        "# m.cu: main 返回 void，MSVC 接受而 C++ 不接受：改为返回 int（没有 return 就结束时返回 0） [C++"
        in zh_diff
    )
    assert void_main not in zh_diff and windows not in zh
    assert en_diff.split("\n", 1)[1] == zh_diff.split("\n", 1)[1]  # the diff itself
    records = []
    for lang in ("en", "zh_CN"):
        record = json.loads(port(lang, f"json_{lang}", "--json")[1])
        del record["summary"]["seconds_port"], record["summary"]["seconds_hipcc"]
        records.append(json.loads(json.dumps(record).replace(f"json_{lang}", "OUT")))
    assert records[0] == records[1]
    units = {u["source"]: u for u in records[1]["units"]}
    assert units["w.cu"]["cause"] == windows and units["m.cu"]["edits"][0]["reason"] == void_main


def test_finetune_list_estimate_and_keys_in_chinese_json_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hipbot.config import load_settings
    from hipbot.jobs.finetune.backends import LocalJobs

    config = tmp_path / "job.yaml"
    config.write_text(
        job_yaml(write_config_only_model(tmp_path / "tiny"), write_datasets(tmp_path / "d"), tmp_path)
    )
    job = LocalJobs(load_settings()).submit(
        config.read_text(), owner="ana", guild=None, dataset=None, dataset_name=None
    )
    number = job.job.id
    en = _run(monkeypatch, capsys, "en", "finetune", "list")[1]
    zh = _run(monkeypatch, capsys, "zh_CN", "finetune", "list")[1]
    assert en.startswith(f"#{number} ") and "[queued]" in en and en.rstrip().endswith(" owner=ana")
    assert "[排队中]" in zh and zh.rstrip().endswith(" 所有者=ana") and "GiB" in zh

    en = _run(monkeypatch, capsys, "en", "finetune", "status", str(number))[1].splitlines()
    zh = _run(monkeypatch, capsys, "zh_CN", "finetune", "status", str(number))[1].splitlines()
    assert en[2].split() == ["state", "queued"] and zh[2].split() == ["状态", "排队中"]
    assert "config:" in en and "配置：" in zh
    assert en[en.index("config:") :][1:] == zh[zh.index("配置：") :][1:]  # the YAML as recorded
    assert [line.split()[-1] for line in en[:3]] != [line.split()[-1] for line in zh[:3]]
    assert [i18n.columns(line.split()[0]) <= 16 for line in zh[:3]] == [True] * 3

    en = _run(monkeypatch, capsys, "en", "finetune", "estimate", str(config))[1]
    zh = _run(monkeypatch, capsys, "zh_CN", "finetune", "estimate", str(config))[1]
    assert (
        re.match(r"~\d+\.\d GiB per GPU \(weights [\d.]+, LoRA\+optimizer", en) and "parameters trained" in en
    )
    assert zh.startswith("每个 GPU 约 ") and "（权重 " in zh and "个参数中的 " in zh
    figures = r"\d+(?:[.,]\d+)*"
    assert sorted(re.findall(figures, en)) == sorted(re.findall(figures, zh))  # the same figures
    json_en = _run(monkeypatch, capsys, "en", "finetune", "estimate", str(config), "--json")[1]
    assert _run(monkeypatch, capsys, "zh_CN", "finetune", "estimate", str(config), "--json")[1] == json_en

    keys = ("finetune", "keys", "sft_packing", "do_train")
    en = _run(monkeypatch, capsys, "en", *keys)[1].splitlines()
    zh = _run(monkeypatch, capsys, "zh_CN", *keys)[1].splitlines()
    assert en[0].split() == ["sft_packing", "honoured", "Older", "name", "of", "packing."]
    assert zh[0].split() == ["sft_packing", "生效", "packing", "的旧名称。"]
    assert en[1].split()[:3] == ["do_train", "ignored", "Whether"]
    assert zh[1].split() == [
        "do_train",
        "忽略",
        "是否运行训练。",
        "(进度、损失曲线和指标由",
        "hipbot",
        "自己报告)",
    ]
    assert i18n.columns(zh[1].split("是否")[0]) == len(en[1].split("Whether")[0])  # the help column lines up
    zh = _run(monkeypatch, capsys, "zh_CN", "finetune", "keys", "use_badam", "lora_rank")[1].splitlines()
    assert zh[0].startswith("use_badam") and "是否使用 BAdam 优化器。" in zh[0]  # LLaMA-Factory's key
    assert "LLaMA-Factory 同样不允许它与 LoRA 一起使用" in zh[0]  # and keys.yaml's reason
    assert "LoRA 矩阵的内在维度（秩）" in zh[1] and "--max-lora-rank" in zh[1]  # a spec field's help


BAD_JOB = "model_name_or_path: org/m\ndataset: d\nlora_rnak: 4\nuse_badam: true\nlearning_rate: fast\n"


def test_finetune_validate_problems_in_chinese_english_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hipbot.jobs.finetune.spec import SpecError, load_job

    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_JOB)
    code, out, en = _run(monkeypatch, capsys, "en", "finetune", "validate", str(bad))
    assert code == 1 and not out
    assert en == (
        f"error: {bad} has 3 problems:\n"
        "  - unknown key 'lora_rnak'; did you mean 'lora_rank'?\n"
        "  - use_badam: true is not supported: BAdam is a full-parameter optimizer; LLaMA-Factory refuses it "
        "with LoRA too\n"
        "  - learning_rate: Input should be a valid number, unable to parse string as a number (got 'fast')\n"
        "  hint: keys follow LLaMA-Factory's train YAML; see `hipbot finetune validate --help`\n"
    )
    code, out, zh = _run(monkeypatch, capsys, "zh_CN", "finetune", "validate", str(bad))
    assert code == 1 and not out
    assert zh == (
        f"错误：{bad} 有 3 个问题：\n"
        "  - 未知配置项 'lora_rnak'；你是不是想写 'lora_rank'？\n"
        "  - use_badam: true 不受支持：BAdam 是全参数优化器；LLaMA-Factory 同样不允许它与 LoRA 一起使用\n"
        "  - learning_rate：输入应为有效的数字，无法将字符串解析为数字（收到的是 'fast'）\n"
        "  提示：配置项遵循 LLaMA-Factory 的训练 YAML；参见 `hipbot finetune validate --help`\n"
    )
    with i18n.using("zh_CN"), pytest.raises(SpecError) as err:  # what is stored, logged and sent: English
        load_job(bad)
    assert str(err.value) == en.removeprefix("error: ").rstrip("\n")
    assert err.value.problems[0] == "unknown key 'lora_rnak'; did you mean 'lora_rank'?"
    assert json.dumps(err.value.problems, ensure_ascii=False).isascii()


def test_serve_actions_and_ingest_summary_in_chinese(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hipbot.agents.docs.ingest import IngestSummary
    from hipbot.config import load_settings
    from hipbot.jobs.serve.registry import Adapter, Registry

    add = ("serve", "servers", "add", "box", "http://127.0.0.1:9", "--base-model", "m", "--served-model", "s")
    assert _run(monkeypatch, capsys, "en", *add)[0] == 0
    registry = Registry.open(load_settings())
    for name in ("a1", "a2"):
        registry.add(Adapter(name, "m", None, 8, 16.0, ("q_proj",), 1, "0" * 64, Path("/x"), None, "", None))
        registry.mark_loaded(name, "box", f"/x/{name}", copied=False)
    en = _run(monkeypatch, capsys, "en", "serve", "unpublish", "a1")[1]
    zh = _run(monkeypatch, capsys, "zh_CN", "serve", "unpublish", "a2")[1]
    assert en.startswith("a1 on box: forgotten - server not reachable (")
    assert zh.startswith("box 上的 a2: 已移除记录 - 服务器无法连接（")

    summary = IngestSummary("docs", "db.sqlite", "bge", 12, 3, 1, 340, 56, 7, 2.25)
    with i18n.using("en"):
        en = str(summary)
    with i18n.using("zh_CN"):
        zh = str(summary)
    assert en == (
        "ingested 12 documents (3 changed, 1 removed), 56 API rows, 340 chunks, 7 embedded with bge in 2.2 s -> db.sqlite"
    )
    assert (
        zh
        == "已导入 12 篇文档（3 篇有改动，1 篇已删除），56 行 API 数据，340 个文本块，用 bge 嵌入了 7 个，用时 2.2 秒 -> db.sqlite"
    )
    with i18n.using("zh_CN"):
        assert summary.to_dict()["model"] == "bge"


def _help_pages(command: click.Command, name: str, parent: click.Context | None = None):
    """(path, context, command) of every help page under ``command``."""
    ctx = command.context_class(command, info_name=name, parent=parent)
    yield ctx.command_path, ctx, command
    if isinstance(command, click.Group):
        for sub in command.list_commands(ctx):
            yield from _help_pages(command.get_command(ctx, sub), sub, ctx)


def _click_page(command: click.Command, ctx: click.Context) -> str:
    """The page click's own classes write for ``command`` (its methods, not hipbot.clihelp's)."""
    formatter = click.HelpFormatter(width=ctx.terminal_width, max_width=ctx.max_content_width)
    click.Command.format_usage(command, ctx, formatter)
    click.Command.format_help_text(command, ctx, formatter)
    click.Command.format_arguments(command, ctx, formatter)
    click.Command.format_options(command, ctx, formatter)
    if isinstance(command, click.Group):
        command.format_commands(ctx, formatter)
    click.Command.format_epilog(command, ctx, formatter)
    return formatter.getvalue().rstrip("\n")


def test_help_pages_in_chinese_and_english_as_click_writes_them() -> None:
    from hipbot.cli import cli

    pages = list(_help_pages(cli, "hipbot"))
    assert len(pages) > 40
    for path, ctx, command in pages:
        with i18n.using("en"):
            assert command.get_help(ctx) == _click_page(command, ctx), path  # English: as click writes it
        with i18n.using("zh_CN"):
            zh = command.get_help(ctx)
        assert zh.startswith(f"用法: {path} ") and "Usage:" not in zh, path
        assert "选项:" in zh and "Options:" not in zh and "显示此帮助信息并退出。" in zh, path
        assert "Show this message and exit." not in zh and "[default:" not in zh, path
        for line in zh.splitlines():  # Chinese lines wrapped by terminal columns (two a character)
            assert i18n.columns(line) <= 80 or i18n.columns(line) == len(line), (path, line)


def test_port_and_finetune_help_in_chinese_english_unchanged(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    en = _run(monkeypatch, capsys, "en", "port", "--help")[1]
    zh = _run(monkeypatch, capsys, "zh_CN", "port", "--help")[1]
    assert en.startswith("Usage: hipbot port [OPTIONS] SRC\n\n  Port the CUDA project in SRC to HIP into OUT")
    assert "New or empty output folder.  [required]" in en and "[default: 4; 0<=x<=20]" in en
    assert zh.startswith("用法: hipbot port [OPTIONS] SRC\n\n  把 SRC 中的 CUDA 项目移植为 HIP，写入 OUT")
    assert "  -o, --out PATH              新的或空的输出文件夹。  [必需]" in zh.splitlines()
    assert "每个单元的修复轮数。  [默认：4; 0<=x<=20]" in zh
    assert "  示例：" in zh and "    hipbot port cuda_project/ -o hip_project/" in zh.splitlines()  # \b kept

    en = _run(monkeypatch, capsys, "en", "finetune", "--help")[1].splitlines()
    zh = _run(monkeypatch, capsys, "zh_CN", "finetune", "--help")[1].splitlines()
    assert "  list      List jobs (active ones unless --all)." in en
    assert "  list      列出任务（除非给出 --all，否则只列进行中的）。" in zh
    assert "命令:" in zh and "Commands:" in en
    zh_keys = _run(monkeypatch, capsys, "zh_CN", "finetune", "keys", "--help")[1]
    assert "每个配置项（NAMES，默认：全部）在这里的作用" in zh_keys and "只显示这一类。" in zh_keys


def test_chinese_help_text_wraps_by_columns_and_keeps_closing_punctuation_off_line_starts() -> None:
    from hipbot.clihelp import wrap_columns

    lines = wrap_columns("只在这个服务器（guild）中注册命令（即时更新）。", 12)
    assert "".join(lines) == "只在这个服务器（guild）中注册命令（即时更新）。"
    assert all(i18n.columns(line) <= 12 for line in lines)
    assert not any(line[0] in "，。；：、）" for line in lines)
    assert wrap_columns("写 dataset=NAME）。", 8) == [
        "写",
        "dataset=NAME）。",
    ]  # a word keeps its punctuation


@click.command()
@click.argument("src", type=click.Path(exists=True))
@click.option("--steps", type=click.IntRange(1, 9), default=1)
@click.option("--rate", type=float, default=1.0)
@click.option("--kind", type=click.Choice(["honoured", "ignored"]), required=True)
@click.option("--name")
def _probe(src: str, steps: int, rate: float, kind: str, name: str) -> None:
    """A command to make click's own errors with."""


@pytest.mark.parametrize(
    ("args", "english", "chinese"),
    [
        (["--kind", "ignored"], "Missing argument 'SRC'.", "缺少参数 'SRC'。"),
        (["."], "Missing option '--kind'. Choose from:", "缺少选项 '--kind'。可选值："),
        (
            ["/nonexistent", "--kind", "ignored"],
            "Path '/nonexistent' does not exist.",
            "路径 '/nonexistent' 不存在。",
        ),
        (
            [".", "--kind", "x"],
            "'x' is not one of 'honoured', 'ignored'.",
            "'x' 不是 'honoured', 'ignored' 之一。",
        ),
        (
            [".", "--kind", "ignored", "--steps", "12"],
            "12 is not in the range 1<=x<=9.",
            "12 不在范围 1<=x<=9 内。",
        ),
        (
            [".", "--kind", "ignored", "--rate", "fast"],
            "'fast' is not a valid float.",
            "'fast' 不是有效的浮点数。",
        ),
        (
            [".", "--kind", "ignored", "--nmae", "a"],
            "No such option '--nmae'. (Did you mean one of: '--name', '--rate'?)",
            "没有选项 '--nmae'。（你是想输入以下之一吗：'--name', '--rate'？）",
        ),
        ([".", "--kind", "ignored", "--steeps", "2"], "Did you mean '--steps'?", "你是想输入 '--steps' 吗？"),
        ([".", "--kind", "ignored", "extra"], "Got unexpected extra argument (extra)", "多余的参数（extra）"),
        (
            [".", "--kind", "ignored", "--name"],
            "Option '--name' requires an argument.",
            "选项 '--name' 需要一个值。",
        ),
    ],
)
def test_clicks_own_errors_in_chinese_with_their_values(args: list[str], english: str, chinese: str) -> None:
    """click's real exceptions (so a click upgrade that rewords one fails here): English as click
    writes it, Chinese with the same option names and values."""
    from hipbot.clierrors import localize

    with pytest.raises(click.UsageError) as caught:
        _probe.main(args, standalone_mode=False)
    message = caught.value.format_message()
    assert english in message
    with i18n.using("en"):
        assert localize(message) == message
    with i18n.using("zh_CN"):
        assert chinese in localize(message)


def test_usage_errors_of_the_cli_in_the_terminals_language(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, en = _run(monkeypatch, capsys, "en", "hipfy")
    assert code == 2
    assert (
        en
        == "Usage: hipbot [OPTIONS] COMMAND [ARGS]...\nTry 'hipbot --help' for help.\n\nError: No such command 'hipfy'.\n"
    )
    code, _out, zh = _run(monkeypatch, capsys, "zh_CN", "hipfy")
    assert code == 2
    assert (
        zh
        == "用法: hipbot [OPTIONS] COMMAND [ARGS]...\n运行 'hipbot --help' 查看帮助。\n\n错误：没有命令 'hipfy'。\n"
    )
    code, _out, zh = _run(monkeypatch, capsys, "zh_CN", "port")
    assert (code, zh.splitlines()[-1]) == (2, "错误：缺少参数 'SRC'。")


def test_errors_raised_in_library_code_in_the_terminals_language(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dataset problem (jobs) and a bad kernel launch (agents): Chinese with the same names and
    positions, English as before."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "dataset_info.json").write_text('{"mine": {"file_name": "m.json"}}')
    (data / "m.json").write_text('[{"instruction": "a", "output": "b"}]')
    job = tmp_path / "j.yaml"
    job.write_text(f"model_name_or_path: org/m\ndataset: mien\ndataset_dir: {data}\n")
    src = tmp_path / "bad.cu"
    src.write_text("__global__ void k(int*);\nvoid f(int* p){ k<<<1>>>(p); }\n")
    en = _run(monkeypatch, capsys, "en", "finetune", "validate", str(job))[2]
    zh = _run(monkeypatch, capsys, "zh_CN", "finetune", "validate", str(job))[2]
    assert "  - dataset 'mien' is not declared in dataset_info.json; did you mean 'mine'?" in en
    assert "  - 数据集 'mien' 没有在 dataset_info.json 中声明；你是不是想写 'mine'？" in zh
    en = _run(monkeypatch, capsys, "en", "hipify", str(src))[2]
    zh = _run(monkeypatch, capsys, "zh_CN", "hipify", str(src))[2]
    assert "bad.cu:2:18: a kernel launch takes 2 to 4 configuration arguments, not 1 (left as written)" in en
    assert "bad.cu:2:18: 内核启动需要 2 到 4 个配置参数，而不是 1 个（保持原样）" in zh
