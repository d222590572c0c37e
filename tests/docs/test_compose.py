"""Composed answers, option rows, citation checks, labels and the feedback list, on small inputs.

These run without the corpus: passages are built here, scored on their words alone (the mode the
engine falls back to when a database has no embeddings); tests/docs/test_answers.py checks the same
behaviours on the ingested corpus with its sentence embeddings.
"""

from __future__ import annotations

import json
from dataclasses import replace

from hipbot.agents.docs.compose import ANSWER_CHARS, compose
from hipbot.agents.docs.feedback import voted
from hipbot.agents.docs.generate import checked
from hipbot.agents.docs.labels import label, language_of
from hipbot.agents.docs.lookup import asks_more, brief
from hipbot.agents.docs.options import OptionIndex, ProseChunk, extract
from hipbot.agents.docs.retrieval import Passage, asked_part, expand_query, query_terms
from hipbot.agents.docs.scoring import score_units
from hipbot.agents.docs.sentences import units
from hipbot.agents.docs.vocabulary import glossary_terms
from hipbot.agents.hipify.mappings import ApiMapping
from hipbot.bot.state import BotState
from hipbot.cli import main

WRAPPED = """Note that the `__sync` variants are made available in ROCm 6.2, but disabled by
default to help with the transition to 64-bit masks. They can be enabled by
setting the preprocessor macro `HIP_ENABLE_WARP_SYNC_BUILTINS`. These builtins
will be enabled unconditionally in ROCm 6.3.
"""

TABLE = """| Option                              | Description |
| ------                              | ----------- |
| `--fgpu-rdc`                        | Generate relocatable device code, which allows kernels or device functions calling device functions in different translation units. |
| `-save-temps`                       | Save the compiler generated intermediate files. |
"""

HOW_TO = """To build a static library that exports device functions, compile with relocatable device code:

```shell
hipcc hipDevice.cpp -c -fgpu-rdc -o hipDevice.o
ar rcsD libHipDevice.a hipDevice.o
```

The library is then linked with hipcc.
"""


def passage(
    text: str, chunk_id: int = 1, section: str = "Warp cross-lane functions", path: str = "HIP/docs/x.rst"
) -> Passage:
    return Passage(chunk_id, path, "Title", section, f"https://example.org/{path}", text, "prose", (), 1.0)


def weights(*words: str) -> list[tuple[str, float]]:
    return [(w, 1.0) for w in words]


def test_units_rebuild_sentences_across_wrapped_lines_and_keep_rows_and_code_whole() -> None:
    sentences = [u for u in units(WRAPPED) if u.kind == "sentence"]
    assert len(sentences) == 3
    assert sentences[1].text == (
        "They can be enabled by setting the preprocessor macro `HIP_ENABLE_WARP_SYNC_BUILTINS`."
    )
    rows = [u.text for u in units(TABLE) if u.kind == "row"]
    assert rows[0].startswith("`--fgpu-rdc`: Generate relocatable device code") and len(rows) == 2
    code = [u for u in units(HOW_TO) if u.kind == "code"]
    assert len(code) == 1 and code[0].text.startswith("```shell") and code[0].text.endswith("```")


def test_a_direct_sentence_with_its_citation_and_sources_ordered_by_citation() -> None:
    other = passage(
        "Streams run work in order. Events mark points in a stream.", 2, "Streams", "HIP/docs/s.md"
    )
    warp = passage(WRAPPED, 1)
    out = compose(
        "how do I enable the sync shuffles?", [other, warp], weights("enable", "enabled", "macro"), {}
    )
    assert out.text.endswith("[1]") and "HIP_ENABLE_WARP_SYNC_BUILTINS" in out.text
    assert out.sources[0]["path"] == "HIP/docs/x.rst" and out.cited == [1]
    assert len(out.text) <= ANSWER_CHARS
    assert "Streams run work in order" in out.more  # the full passages stay for "More"


def test_a_sentence_may_come_from_a_passage_beyond_those_listed_and_sources_stay_within_listed() -> None:
    first = passage("Streams run work in order.", 1, "Streams", "HIP/docs/s.md")
    second = passage("Events mark points in a stream.", 2, "Events", "HIP/docs/e.md")
    warp = passage(WRAPPED, 3)
    question = "how do I enable the sync shuffles?"
    out = compose(question, [first, second, warp], weights("enable", "macro"), {}, listed=2)
    assert "HIP_ENABLE_WARP_SYNC_BUILTINS" in out.text and out.text.endswith("[1]")
    # the cited passage, then the best uncited one: two sources, as listed
    assert [s["path"] for s in out.sources] == ["HIP/docs/x.rst", "HIP/docs/s.md"]
    assert "Streams run work" in out.more and "HIP_ENABLE_WARP_SYNC_BUILTINS" in out.more
    assert "Events mark points" not in out.more


def test_console_log_and_directive_lines_are_not_the_answer() -> None:
    text = (
        "(gdb) run Starting program: /home/test/app, memory access fault in kernel vadd\n\n"
        ":3:rocdevice.cpp :2589: memory access fault in kernel vadd\n\n"
        ":::{grid-item-card} Debugging a memory access fault in a kernel\n\n"
        "The debug agent names the kernel that caused the memory access fault."
    )
    out = compose(
        "which kernel caused the memory access fault?", [passage(text)], weights("fault", "kernel"), {}
    )
    assert out.text.startswith("The debug agent names the kernel")


def test_several_sentences_that_answer_alike_become_bullets_within_the_budget() -> None:
    long = (
        "The wavefront setting decides how many lanes run together on CDNA GPUs. "
        "RDNA cards take a different wavefront setting, thirty-two lanes by default. "
        "A kernel compiled with one wavefront setting cannot switch at launch time. "
        "Libraries query the wavefront setting through device attributes before tuning. "
        "Unrelated text about streams and events follows here."
    )
    out = compose("wavefront setting", [passage(long)], weights("setting", "wavefront"), {})
    lines = out.text.splitlines()
    assert 2 <= len(lines) <= 4 and all(line.startswith("- ") and line.endswith("[1]") for line in lines)
    assert len(out.text) <= ANSWER_CHARS


def test_a_code_block_that_answers_a_how_to_question_is_kept_whole() -> None:
    out = compose(
        "How do I build a static library with relocatable device code?",
        [passage(HOW_TO)],
        weights("static", "library", "relocatable", "fgpu-rdc"),
        {},
    )
    assert "hipcc hipDevice.cpp -c -fgpu-rdc -o hipDevice.o\nar rcsD libHipDevice.a hipDevice.o" in out.text


def test_a_one_line_command_block_is_an_answer_for_a_what_to_do_question_only() -> None:
    text = (
        "The test suite needs the page-migration setting on MI200 accelerators.\n\n"
        "```shell\n# from the build directory\nHSA_XNACK=1 ctest --label-regex migration --output-on-failure\n```\n\n"
        "Tests that fail without it are listed in the release notes.\n"
    )
    out = compose(
        "Which setting do the tests need for page migration?",
        [passage(text)],
        weights("tests", "migration"),
        {},
    )
    assert (
        "`HSA_XNACK=1 ctest --label-regex migration --output-on-failure` [1]" in out.text
        and "```" not in out.text
    )
    # a question that does not ask what to do keeps code out of the answer's lines
    plain = compose("page migration tests", [passage(text)], weights("tests", "migration"), {})
    assert "HSA_XNACK" not in plain.text
    # a block of several commands is not quoted inline
    several = text.replace("--output-on-failure\n", "--output-on-failure\nctest -j 8\n")
    out = compose(
        "Which setting do the tests need for page migration?",
        [passage(several)],
        weights("tests", "migration"),
        {},
    )
    assert "`HSA_XNACK=1 ctest" not in out.text


def test_fact_lines_come_first_and_nothing_found_says_so_in_the_asker_language() -> None:
    out = compose("x", [passage(WRAPPED)], weights("macro"), {}, fact_lines=["`a` \u2192 `b`."])
    assert out.text.startswith("`a` \u2192 `b`.")
    empty = compose("完全无关的问题", [], [], {}, lang="zh")
    assert empty.text == label("nothing", "zh") and "现有文档" in empty.text


def test_option_rows_come_from_tables_headings_and_prose_and_nvcc_flags_map_to_them() -> None:
    chunks = [
        ProseChunk(1, "HIP/docs/porting.md", "Porting", "Compiler options", "u1", TABLE),
        ProseChunk(2, "ROCm/docs/iso.md", "GPU isolation", "Environment variables > ROCR_VISIBLE_DEVICES",
                   "u2", "A list of device indices or UUIDs that will be exposed to applications."),
        ProseChunk(3, "HIP/docs/k.rst", "Kernel language", "Warp cross-lane functions", "u3", WRAPPED),
    ]  # fmt: skip
    index = OptionIndex(extract(chunks))
    ((flag, rows),) = index.find("what replaces nvcc's -rdc=true under hipcc?")
    assert flag == "-rdc" and rows[0].name == "--fgpu-rdc" and rows[0].kind == "option"
    ((_, env),) = index.find("should I set ROCR_VISIBLE_DEVICES?")
    assert env[0].kind == "env" and env[0].text.startswith("A list of device indices")
    ((_, macro),) = index.find("what is HIP_ENABLE_WARP_SYNC_BUILTINS")
    assert macro[0].kind == "macro" and "preprocessor macro" in macro[0].text
    assert index.find("nothing to see here") == []


def test_an_option_spelled_with_one_or_two_dashes_is_one_option_with_its_best_row_first() -> None:
    rtc = "`-fgpu-rdc`: This flag when provided during `hiprtcCompileProgram` generates the bitcode.\n"
    chunks = [
        ProseChunk(1, "HIP/docs/rtc.md", "HIPRTC", "HIPRTC specific options", "u1", rtc),
        ProseChunk(2, "HIP/docs/porting.md", "Porting", "Compiler options", "u2", TABLE),
    ]
    index = OptionIndex(extract(chunks))
    for spelling in ("-fgpu-rdc", "--fgpu-rdc"):
        rows = index.get(spelling)
        assert [r.path for r in rows] == ["HIP/docs/porting.md", "HIP/docs/rtc.md"], spelling
    ((_, rows),) = index.find("how do I use -fgpu-rdc with hipcc?")
    assert rows[0].text.startswith("Generate relocatable device code")


def test_a_porting_note_defines_a_variable_with_its_first_sentence_only() -> None:
    build = (
        "Build with `-DGGML_HIP=ON` and set the target with `-DAMDGPU_TARGETS=gfx1100`.\n"
        "- At run time, `HIP_VISIBLE_DEVICES` selects GPUs; on an unsupported card set "
        "`HSA_OVERRIDE_GFX_VERSION=10.3.0`.\n"
    )
    override = (
        "Set `HSA_OVERRIDE_GFX_VERSION` so the runtime treats your GPU as a close, supported ISA.\n"
        "- It works on Linux only.\n"
    )
    serialize = "On AMD GPUs set `AMD_SERIALIZE_KERNEL=3` to find a fault, like `CUDA_LAUNCH_BLOCKING=1`.\n"
    title = "Running ROCm on a GPU it does not list"
    chunks = [
        ProseChunk(1, "notes/llama-cpp.md", "Building llama.cpp", "Building llama.cpp", "u1", build),
        ProseChunk(2, "notes/override.md", title, title, "u2", override),
        ProseChunk(3, "notes/serialize.md", "Serializing", "Serializing", "u3", serialize),
    ]
    index = OptionIndex(extract(chunks))
    rows = index.get("HSA_OVERRIDE_GFX_VERSION")
    assert [r.path for r in rows] == ["notes/override.md"]
    assert rows[0].render().endswith(f"({title})")  # a note's title is its section: named once
    assert index.get("HIP_VISIBLE_DEVICES") == []
    # ... and the AMD names only: the CUDA variable it replaces is not defined by the note
    assert index.get("AMD_SERIALIZE_KERNEL") and index.get("CUDA_LAUNCH_BLOCKING") == []


def test_a_sentence_about_a_variable_is_no_definition_list_item_and_ranks_below_how_to_set_it() -> None:
    windows = (
        "`HSA_OVERRIDE_GFX_VERSION` (e.g. `10.3.0` to run a gfx1031 card as gfx1030) only works on "
        "Linux: AMD says the Windows driver stack does not go through HSA, so the variable is ignored.\n"
    )
    override = (
        "Set `HSA_OVERRIDE_GFX_VERSION` so the runtime treats your GPU as a close, supported ISA; for "
        "RDNA2 cards such as gfx1031 (RX 6700 XT) or gfx1032 (RX 6600, RX 6700S) use "
        "`HSA_OVERRIDE_GFX_VERSION=10.3.0` (i.e. gfx1030).\n"
    )
    listed = "`--offload-arch=<target>`: Specify the AMD GPU target ID.\n"
    chunks = [
        ProseChunk(1, "notes/windows.md", "Windows", "Windows", "u1", windows),
        ProseChunk(2, "notes/override.md", "Override", "Override", "u2", override),
        ProseChunk(3, "HIP/docs/opts.md", "Options", "Options", "u3", listed),
    ]
    index = OptionIndex(extract(chunks))
    rows = index.get("HSA_OVERRIDE_GFX_VERSION")
    assert [r.path for r in rows] == ["notes/override.md", "notes/windows.md"]
    # the sentence's first clause says what the variable does; the examples stay in the passage
    assert (
        rows[0].text
        == "Set `HSA_OVERRIDE_GFX_VERSION` so the runtime treats your GPU as a close, supported ISA."
    )
    # the caveat is kept whole, not cut at its colon as if it were "`name`: definition"
    assert rows[1].text.startswith("`HSA_OVERRIDE_GFX_VERSION` (e.g.") and rows[1].strength == 0
    # a definition list item keeps its head's value or argument out of the name
    assert index.get("--offload-arch")[0].text == "Specify the AMD GPU target ID."


def test_a_question_asks_more_than_the_mapping_when_it_asks_how_or_why_beyond_the_names() -> None:
    cuda_env = ["CUDA_VISIBLE_DEVICES"]
    assert asks_more(
        "With 2 GPUs, how can I make process 1 use device 0? Is there a CUDA_VISIBLE_DEVICES?", cuda_env
    )
    assert asks_more(
        "Do I need hipFuncSetAttribute before launching with 64 KB of LDS?", ["hipFuncSetAttribute"]
    )
    assert not asks_more("How do I replace cudaMemcpyAsync?", ["cudaMemcpyAsync"])
    assert not asks_more("is CUDA_VISIBLE_DEVICES supported on AMD GPUs?", cuda_env)


def test_a_row_in_one_line_for_answers_that_go_on_to_the_docs() -> None:
    table = "HIPIFY/docs/tables/CUDA_Runtime_API_functions_supported_by_HIP.md"
    row = ApiMapping(
        "cudaMemcpy", "hipMemcpy", "CUDA_Runtime_API_functions", "11. Memory", table, hip_added="1.5.0"
    )
    assert brief(row) == "`cudaMemcpy` \u2192 `hipMemcpy` (Supported, added in HIP 1.5.0)."
    assert brief(row, "zh") == "`cudaMemcpy` \u2192 `hipMemcpy`（已支持，HIP 1.5.0 加入）。"
    gone = ApiMapping("cudaBindTexture", None, "CUDA_Runtime_API_functions", "37. Texture", table)
    assert brief(gone) == (
        "`cudaBindTexture` has no HIP equivalent (HIPIFY's CUDA Runtime API table lists it as not supported)."
    )


def test_the_asking_sentence_of_a_question_that_tells_its_setting_first() -> None:
    told = "hipify-clang runs without errors. The .hip file has no changes. What am I missing?"
    assert asked_part(told) == "What am I missing?"
    assert asked_part("How do I enable the sync shuffles?") == "How do I enable the sync shuffles?"
    assert asked_part("My build fails on MI250. Please help, it says gfx90a is unknown") == (
        "Please help, it says gfx90a is unknown"
    )
    # a Chinese question tells its setting in clauses and asks in the last one with a question word
    zh = '每个文件都用 -fgpu-rdc 编译成 .o，链接时报 "undefined reference"，需要额外链接哪个库？'
    assert asked_part(zh) == "需要额外链接哪个库？"
    assert asked_part("共享内存在 AMD GPU 上有多大？") == "共享内存在 AMD GPU 上有多大？"


def test_chinese_questions_get_the_docs_english_words_for_building_debugging_and_llm_work() -> None:
    words = query_terms(expand_query("MI300X 上跑大模型推理，量化之后显存不足怎么定位？"))
    assert {"llm", "inference", "quantization", "memory", "debug"} <= set(words)
    assert "install" in query_terms(expand_query("ROCm 版 PyTorch 怎么安装？"))


def test_generated_citations_are_renumbered_and_an_answer_citing_nothing_retrieved_is_refused() -> None:
    given = [passage("a", 1, "A", "p/a.md"), passage("b", 2, "B", "p/b.md"), passage("c", 3, "C", "p/c.md")]
    ok = checked("Use the macro [3]. It came in 6.2 [3][1]. See [9].", given)
    assert ok is not None and ok.text == "Use the macro [1]. It came in 6.2 [1][2]. See ."
    assert [s["path"] for s in ok.sources] == ["p/c.md", "p/a.md"]
    assert checked("No citations at all.", given) is None
    assert checked("Only made-up ones [7] [12].", given) is None


def test_language_and_labels() -> None:
    assert language_of("HIP 里有没有 __shfl_down_sync？") == "zh" and language_of("what is hipcc") == "en"
    assert label("see_also", "zh") == "另见" and label("see_also", "fr") == "See also"


def test_feedback_lists_voted_answers_worst_first(tmp_path, monkeypatch) -> None:
    database = tmp_path / "hipbot.db"
    state = BotState.open(database)
    good = state.record_answer("good q", {"answer": "good a", "mode": "lookup", "sources": []})
    bad = state.record_answer(
        "bad q", {"answer": "bad a", "mode": "extractive", "sources": [{"path": "p.md"}]}
    )
    meh = state.record_answer("meh q", {"answer": "meh a", "mode": "extractive", "sources": []})
    state.vote(good, 1, 1)
    state.vote(good, 2, 1)
    state.vote(bad, 1, -1)
    state.vote(bad, 2, -1)
    state.vote(meh, 1, -1)
    state.vote(meh, 2, 1)
    rows = voted(database)
    assert [r.answer_id for r in rows] == [bad, meh, good]
    assert (rows[0].score, rows[0].down, rows[0].sources) == (-2, 2, ["p.md"])
    assert [r.answer_id for r in voted(database, only_negative=True)] == [bad]
    monkeypatch.setenv("HIPBOT_HOME", str(tmp_path))
    monkeypatch.setenv("HIPBOT_DB", str(database))
    assert main(["answers", "feedback", "--json", "--limit", "2"]) == 0


def test_feedback_cli_prints_worst_first(tmp_path, monkeypatch, capsys) -> None:
    database = tmp_path / "hipbot.db"
    state = BotState.open(database)
    state.vote(state.record_answer("why is it slow", {"answer": "no idea", "mode": "extractive"}), 7, -1)
    monkeypatch.setenv("HIPBOT_HOME", str(tmp_path))
    monkeypatch.setenv("HIPBOT_DB", str(database))
    assert main(["answers", "feedback"]) == 0
    out = capsys.readouterr().out
    assert "score -1 (1 votes, 1 down)" in out and "Q: why is it slow" in out and "A: no idea" in out
    monkeypatch.setenv("HIPBOT_LANG", "zh_CN")
    assert main(["answers", "feedback"]) == 0
    out = capsys.readouterr().out
    assert "问：why is it slow" in out and "答：no idea" in out  # the words around, not the answer
    monkeypatch.delenv("HIPBOT_LANG")
    assert main(["answers", "feedback", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["down"] == 1


def test_a_unit_that_only_repeats_a_chosen_units_names_gives_way_to_one_naming_something_new() -> None:
    text = (
        "Use `-mfast-atomics` to make atomics fast on the device.\n\n"
        "You must pass `-mfast-atomics` and atomics become fast everywhere.\n\n"
        "The `-mquick-adds` option makes atomics fast as well.\n"
    )
    out = compose("How do I make atomics fast?", [passage(text)], weights("atomics", "fast"), {}, budget=150)
    assert "-mfast-atomics" in out.text and "-mquick-adds" in out.text, out.text
    assert "You must pass" not in out.text


def test_a_long_sentence_gives_way_to_a_short_one_that_holds_the_same_words() -> None:
    long = (
        "The register limit of a kernel, which the compiler derives from many inputs including the "
        "launch bounds, the occupancy target, the wavefront size and the code object version of "
        "the target, is reported in the build log."
    )
    text = f"{long}\n\nThe register limit is set with `__launch_bounds__`.\n"
    assert 150 < len(long) < 350
    out = compose("register limit", [passage(text)], weights("register", "limit"), {}, budget=200)
    assert out.text.startswith("The register limit is set with"), out.text


def test_a_sentence_of_a_chunk_beside_a_retrieved_one_scores_less_than_the_same_retrieved_sentence() -> None:
    text = "The coherent flag makes host memory visible to the device at once."
    near = replace(passage(text, 2, "Coherency", "HIP/docs/b.md"), beside=True)
    out = compose("coherent flag", [near, passage(text, 1)], weights("coherent", "flag"), {})
    assert out.cited == [1] and out.sources[0]["path"] == "HIP/docs/x.rst"


def test_a_sentence_naming_something_specific_ranks_over_a_generic_one_for_any_question() -> None:
    text = "Wave sizes differ between the GPU families.\n\nThe `warpSize` value differs between the GPU families.\n"
    out = compose(
        "why do my sums differ between families?", [passage(text)], weights("differ", "families"), {}
    )
    assert out.text.splitlines()[0].startswith("- The `warpSize` value"), out.text


def test_a_long_table_row_is_quoted_cut_instead_of_scored_as_run_on_text() -> None:
    detail = " ".join(
        f"Setting {n} leaves more room for other processes on the same device." for n in range(6)
    )
    table = (
        "| Variable | Description | Default |\n| --- | --- | --- |\n"
        f"| `GPU_MAX_FOO_QUEUES` | The maximum number of hardware queues per device. {detail} | 4 |\n"
    )
    text = f"The driver may limit the number of queues.\n\n{table}"
    out = compose(
        "how do I limit the hardware queues?", [passage(text)], weights("queues", "limit", "hardware"), {}
    )
    first = out.text.splitlines()[0]
    assert first.removeprefix("- ").startswith("`GPU_MAX_FOO_QUEUES`: The maximum number of hardware"), (
        out.text
    )
    assert "\u2026" in first and len(first) <= 260


def test_a_list_table_a_chunk_starts_in_the_middle_of_is_read_as_rows() -> None:
    text = (
        "        data loading workloads.\n"
        "    * - rocThrust\n"
        "      - Provides parallel algorithms like sorting,\n"
        "        reduction, and scanning.\n"
        "    * - rocWMMA\n"
        "      - Accelerates warp-level matrix-multiply and matrix-accumulate.\n"
    )
    found = units(text)
    assert [u.kind for u in found] == ["row", "row"]
    assert found[1].text == "rocWMMA: Accelerates warp-level matrix-multiply and matrix-accumulate."
    assert found[0].text == "rocThrust: Provides parallel algorithms like sorting, reduction, and scanning."


def test_a_chinese_word_counts_once_however_many_english_words_translate_it() -> None:
    # 编译 -> compile | compiler | hipcc: a sentence holding all three is no closer to the question
    # than one holding one of them, so the sentence about the static library asked for comes first
    text = (
        "The hipcc compiler driver compiles every source file in the project.\n\n"
        "A static library is built with the archiver from the objects.\n"
    )
    terms = weights("compile", "compiler", "hipcc", "static", "library")
    out = compose("怎么编译静态库？", [passage(text)], terms, {})
    assert out.text.removeprefix("- ").startswith("A static library"), out.text
    english = compose("how to compile a static library with the hipcc compiler", [passage(text)], terms, {})
    assert english.text.removeprefix("- ").startswith("The hipcc compiler"), english.text


def test_a_chinese_word_inside_a_longer_glossary_word_is_part_of_it() -> None:
    assert glossary_terms("共享内存有多大？") == [("shared memory",), ("size",)]
    assert "hipcc" not in query_terms(expand_query("编译器报错"))
    assert "hipcc" in query_terms(expand_query("编译器报错，怎么编译？"))


def test_chinese_words_of_running_rocm_and_llm_work_reach_the_english_words() -> None:
    # hangs, per-GPU settings, clocks and integrated GPUs are asked about in Chinese too
    assert glossary_terms("程序在 MI250 上卡住了") == [("hang", "hangs")]
    assert {"per", "device", "individually"} <= set(query_terms(expand_query("多卡机器上能不能单独设置？")))
    assert {"clock", "rate", "timestamp"} <= set(query_terms(expand_query("时间戳怎么换算，时钟频率是多少")))
    assert "igpu" in query_terms(expand_query("核显能跑 PyTorch 吗"))


def test_a_sentence_a_fact_line_already_says_is_not_quoted_again() -> None:
    row = (
        "`HIP_ENABLE_WARP_SYNC_BUILTINS` (macro): They can be enabled by setting the preprocessor macro "
        "`HIP_ENABLE_WARP_SYNC_BUILTINS`. (C++ Language Extensions \u203a Warp cross-lane functions)"
    )
    out = compose(
        "how do I enable the sync variants?",
        [passage(WRAPPED)],
        weights("enable", "sync", "variants"),
        {},
        fact_lines=[row],
    )
    assert out.text.startswith(row) and out.text.count("They can be enabled") == 1, out.text
    assert "ROCm 6.2" in out.text, out.text


def test_a_note_offered_from_beyond_the_passages_leads_the_answer_or_stays_out() -> None:
    docs = passage(
        "Streams run the work queued on them in the order it was queued, copies and kernels alike."
    )
    note = passage(
        "Pinned buffers let the copies on one stream overlap the kernels on another.",
        chunk_id=2,
        path="notes/local/pinned.md",
    )
    terms = weights("stream", "queued", "order", "copies", "kernels", "pinned", "overlap")
    question = "in what order do streams run queued copies and kernels?"
    # listed among the passages, the note's sentence is a bullet under the docs' answer ...
    listed = compose(question, [docs, note], terms, {})
    assert "Pinned buffers" in listed.text and listed.text.index("Streams run") < listed.text.index("Pinned")
    # ... offered from beyond them, it is not: a note from there leads the answer or stays out
    other = passage("Events mark points in a stream.", chunk_id=3)
    offered = compose(question, [docs, other, replace(note, reach=True)], terms, {}, listed=2)
    assert "Pinned" not in offered.text and "notes/local/pinned.md" not in [
        s["path"] for s in offered.sources
    ]
    led = compose(
        "do pinned buffers overlap copies and kernels?",
        [docs, other, replace(note, reach=True)],
        weights("pinned", "buffers", "overlap", "copies", "kernels"),
        {},
        listed=2,
    )
    assert led.text.removeprefix("- ").startswith("Pinned buffers"), led.text


def test_a_gpu_product_name_is_searched_as_its_own_gfx_target() -> None:
    def target(question: str) -> list[str]:
        return [w for w in query_terms(expand_query(question)) if w.startswith("gfx")]

    # the target the error messages and the override answers name, not the family's first chip
    assert target("My RX 6600 is not supported, can I still use it?") == ["gfx1032"]
    assert target("rx6700xt: invalid device function") == ["gfx1031"]
    assert target("PyTorch on an RX 7800 XT") == ["gfx1101"]
    assert target("RX 7900 XTX build fails") == ["gfx1100"]
    assert target("vLLM on MI300X") == ["gfx942"] and target("vLLM on MI355X") == ["gfx950"]
    assert target("Radeon VII support") == ["gfx906"] and target("RX 580 support") == ["gfx803"]


def test_a_sentence_giving_a_number_answers_a_question_that_asks_how_many_or_how_large() -> None:
    text = (
        "The warp size of these GPUs decides how reductions are written in ROCm 6.2.\n\n"
        "The warp size is 64 threads.\n"
    )
    terms = [("warp", 1.0), ("size", 1.0), ("gpus", 0.2)]
    for question in ("What is the warp size on these GPUs?", "这些 GPU 的 warp 有多大？"):
        out = compose(question, [passage(text)], terms, {})
        assert out.text.splitlines()[0].lstrip("- ").startswith("The warp size is 64"), (question, out.text)
    other = compose("Why does the warp size matter on these GPUs?", [passage(text)], terms, {})
    assert other.text.splitlines()[0].lstrip("- ").startswith("The warp size of these GPUs"), other.text


def test_a_sentence_saying_what_a_term_is_answers_a_question_that_asks_what_it_is() -> None:
    text = (
        "Kernels use the LDS of the GPU for tiles, and the LDS of the GPU is read by every thread.\n\n"
        "The local data share (LDS) is a scratch pad memory.\n"
    )
    terms = [("lds", 1.5), ("gpu", 0.2)]
    for question in ("What is the LDS on the GPU?", "什么是 LDS？"):
        out = compose(question, [passage(text)], terms, {})
        assert out.text.splitlines()[0].lstrip("- ").startswith("The local data share (LDS)"), (
            question,
            out.text,
        )
    other = compose("How do kernels use the LDS on the GPU?", [passage(text)], terms, {})
    assert other.text.splitlines()[0].lstrip("- ").startswith("Kernels use the LDS"), other.text


def test_a_bullet_from_another_passage_must_score_closer_to_the_best_than_one_of_the_same() -> None:
    terms = weights("alpha", "beta", "gamma")
    best = "Alpha beta gamma are set in the build file."
    near = "Alpha and beta come from a different guide page."
    other = compose("alpha beta gamma?", [passage(best), passage(near, 2, path="HIP/docs/y.rst")], terms, {})
    assert other.text.startswith(best) and near not in other.text, other.text
    same = compose("alpha beta gamma?", [passage(f"{best}\n\n{near}\n")], terms, {})
    assert same.text.startswith(best) and near in same.text, same.text


def test_a_sentence_that_leans_on_the_one_before_it_is_preceded_by_it() -> None:
    terms = weights("discrete", "performance", "slow")
    lead = "Set `GGML_UMA=1` to share host memory with an APU."
    leaning = "It hurts performance on discrete cards and is slow there, so use it only on an APU."
    out = compose("why is it slow on my discrete card?", [passage(f"{lead} {leaning}\n")], terms, {})
    lines = out.text.splitlines()
    assert lines[0].lstrip("- ").startswith(lead) and leaning in lines[1], out.text
    plain = "Unified memory hurts performance on discrete cards and is slow there, so use it only on an APU."
    alone = compose("why is it slow on my discrete card?", [passage(f"{lead} {plain}\n")], terms, {})
    assert alone.text.startswith(plain) and lead not in alone.text, alone.text


def test_sentences_that_lean_on_each_other_in_a_chain_are_quoted_in_their_order() -> None:
    first = "Set `GGML_UMA=1` to share host memory with an APU of the board."
    second = "It makes discrete cards slow, as memory is read over the bus."
    third = "They stay slow on discrete cards however the slow memory is tuned."
    terms = weights("discrete", "slow", "memory", "cards")
    out = compose("why are discrete cards slow?", [passage(f"{first} {second} {third}\n")], terms, {})
    lines = [line.lstrip("- ") for line in out.text.splitlines()]
    assert [line[:20] for line in lines] == [first[:20], second[:20], third[:20]], out.text


def test_a_sentence_that_only_points_elsewhere_gives_way_to_one_that_answers() -> None:
    text = (
        "For more information on the stack size flag of the compiler, see the compiler reference.\n\n"
        "The stack size flag sets the compiler's limit.\n"
    )
    terms = weights("stack", "size", "flag", "compiler")
    out = compose("which compiler flag sets the stack size?", [passage(text)], terms, {})
    assert out.text.lstrip("- ").startswith("The stack size flag sets"), out.text


def test_the_wave_size_joins_only_questions_about_warps() -> None:
    """A Radeon question about memory fragmentation is not about wave32 ("reduces" is no
    reduction); a warp reduction on an MI250 is about wave64."""
    memory = expand_query("PyTorch on my Radeon runs out of memory. What setting reduces the fragmentation?")
    assert "warpsize" not in query_terms(memory)
    assert "wavefront warpSize 64" in expand_query("My warp reduction gives wrong results on MI250")
    assert "wavefront warpSize 32" in expand_query("Is a block-level reduction slower on a Radeon RX 7900?")


def test_a_deprecated_option_the_question_does_not_name_is_no_answer() -> None:
    """The option list's "`--amdgpu-target=<gpu_arch>`: [DEPRECATED] ... gfx908 ..." matches any
    question on an MI100 (gfx908) that says "deprecated"; it is not the answer to one that does not
    ask about that option, and still is to one that does."""
    text = (
        "- `--amdgpu-target=<gpu_arch>`: [DEPRECATED] This option is being replaced by "
        "`--offload-arch=<target>`. Generate code for the given GPU target: gfx900, gfx906, gfx908.\n"
        "- Use `unsafeAtomicAdd` where the return value is not needed; it compiles to the hardware atomic.\n"
    )
    passage = Passage(
        1, "docs/options.md", "Options", "Atomics", "https://example.org", text, "prose", (), 1.0
    )
    terms = [("deprecated", 1.0), ("gfx908", 1.5), ("atomicaddnoret", 1.5), ("instead", 0.6)]
    # the embeddings put the option's entry nearer the question, as they did in the real docs
    dense = {1: [(u.start, u.end, 0.7 if "amdgpu-target" in u.text else 0.5) for u in units(text)]}
    question = "atomicAddNoRet is deprecated on my MI100 (gfx908). What should I use instead?"
    best = score_units([passage], terms, dense, question)[0]
    assert best.unit.text.startswith("Use `unsafeAtomicAdd`"), best.unit.text
    asked = "Is --amdgpu-target deprecated for gfx908 builds, and what should I use instead?"
    best = score_units([passage], [*terms, ("amdgpu", 1.0), ("target", 0.6)], dense, asked)[0]
    assert best.unit.text.startswith("`--amdgpu-target"), best.unit.text
