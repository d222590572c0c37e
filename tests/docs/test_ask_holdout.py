"""`hipbot ask` on questions phrased the way users ask them (bench/questions_holdout.jsonl style):
names the docs spell differently, notes that answer the rest of a lookup question, names known
nowhere, and extracts that keep the key sentence."""

from __future__ import annotations

import pytest
from fixtures_docs import RUNTIME, paths


def test_cuda_only_environment_variable_finds_its_hip_twin(engine) -> None:
    # The docs never write CUDA_LAUNCH_BLOCKING; they document HIP_LAUNCH_BLOCKING.
    answer = engine.ask("is there an equivalent to CUDA_LAUNCH_BLOCKING for HIP?")
    assert "HIP_LAUNCH_BLOCKING" in answer.answer
    # the docs' debugging page, or the porting note that answers it from there and its threads
    assert paths(answer)[0] in {
        "HIP/docs/how-to/debugging.rst",
        "notes/run-amd-serialize-kernel-launch-blocking.md",
    }


def test_api_spelled_out_in_words_reaches_its_section(engine) -> None:
    answer = engine.ask("how do I launch a kernel from a code object with the module API?")
    assert "hipModuleLaunchKernel" in answer.answer + answer.more
    assert "HIP/docs/how-to/hip_porting_driver_api.md" in paths(answer)


def test_lookup_note_answers_the_rest_of_the_question(engine) -> None:
    answer = engine.ask("is unified memory / hipMallocManaged supported on Windows?")
    assert answer.mode == "lookup" and "`hipMallocManaged`" in answer.answer
    full = answer.answer + answer.more
    assert "Windows" in full and "Linux" in full
    assert "HIP/docs/how-to/programming_manual.md" in paths(answer)


def test_lookup_of_a_supported_api_with_a_behaviour_question_quotes_the_docs(engine) -> None:
    answer = engine.ask("does __ldg do anything on AMD?")
    assert answer.mode == "lookup"
    assert "no-op" in answer.answer + answer.more
    assert "HIP/docs/how-to/hip_porting_guide.md" in paths(answer)


def test_plain_lookup_stays_short(engine) -> None:
    answer = engine.ask("HIP version of cudaMemAdvise")
    assert answer.mode == "lookup" and "`hipMemAdvise`" in answer.answer
    assert "In the docs" not in answer.answer and paths(answer) == [RUNTIME]


def test_name_known_nowhere_says_so_and_answers_from_the_docs(engine) -> None:
    # (__syncwarp was the example until a porting note named it: it is known now)
    answer = engine.ask("is __nanosleep supported?")
    assert answer.mode == "extractive"
    assert "`__nanosleep` is in neither HIPIFY's mapping tables nor the docs" in answer.answer
    assert {"query": "__nanosleep", "found": False, "suggestions": []} in answer.apis
    assert "HIP/docs/reference/kernel_language.rst" in paths(answer)


def test_library_names_are_not_taken_for_misspelt_apis(engine) -> None:
    answer = engine.ask("cub::DeviceReduce::Sum in hipcub")
    assert "hipCsub" not in answer.answer
    assert all(a["query"] != "hipcub" for a in answer.apis)


def test_extract_is_trimmed_on_the_rare_word(engine) -> None:
    # The library table is long; the row asked about must survive the trimming, not its header.
    # (asked as "what's the hip equivalent of thrust", the rocThrust porting note answers first)
    answer = engine.ask("what is the HIP library for thrust?")
    assert "rocThrust" in answer.answer + answer.more
    assert "HIP/docs/how-to/hip_porting_guide.md" in paths(answer)


@pytest.mark.parametrize(
    ("question", "cuda", "hip"),
    [
        ("cudaEventElapsedTime 在 HIP 里叫什么", "cudaEventElapsedTime", "hipEventElapsedTime"),
        ("hip equivalent for cudaMemPrefechAsync?", "cudaMemPrefetchAsync", "hipMemPrefetchAsync"),
        (
            "which cuda function does hipModuleLaunchKernel correspond to?",
            "cuLaunchKernel",
            "hipModuleLaunchKernel",
        ),
        ("what's the rocBLAS equivalent of cublasDgemm", "cublasDgemm", "hipblasDgemm"),
        ("What do I replace cudaMalloc() and cudaFree() with?", "cudaFree", "hipFree"),
    ],
)
def test_lookups_phrased_many_ways(engine, question: str, cuda: str, hip: str) -> None:
    answer = engine.ask(question)
    assert answer.mode == "lookup"
    names = {(a.get("cuda"), a.get("hip")) for a in answer.apis} | {
        (s, None) for a in answer.apis for s in a.get("suggestions", [])
    }
    assert (cuda, hip) in names or (cuda, None) in names
    assert f"`{hip}`" in answer.answer


def test_question_about_the_roc_side_cites_its_page_even_without_an_equivalent(engine) -> None:
    answer = engine.ask("what is cudnnSetTensor4dDescriptor in MIOpen")
    assert "No MIOpen equivalent is listed." in answer.answer
    assert paths(answer)[0] == "HIPIFY/docs/tables/CUDNN_API_supported_by_HIP.md"
    assert "HIPIFY/docs/tables/CUDNN_API_supported_by_MIOPEN.md" in paths(answer)


def test_chinese_how_do_i_change_it_is_a_lookup(engine) -> None:
    answer = engine.ask("cudaMemcpyToSymbol 怎么改成 HIP")
    assert answer.mode == "lookup" and "`hipMemcpyToSymbol`" in answer.answer


def test_note_is_trimmed_on_the_name_asked_not_its_prefix(engine) -> None:
    # Every shuffle signature starts "__shfl"; the quoted window must hold __shfl_xor_sync's.
    answer = engine.ask("Is __shfl_xor_sync supported?")
    assert "no HIP equivalent" in answer.answer
    # the table and the docs disagree: both are said, the docs with the version and the macro
    assert "HIP_ENABLE_WARP_SYNC_BUILTINS" in answer.answer and "ROCm 6.2" in answer.answer
    assert "__shfl_xor_sync" in answer.more


def test_unsupported_row_that_hip_declares_under_the_same_name(engine) -> None:
    # HIPIFY's tables list __shfl_down_sync as unsupported (nothing to rename), yet HIP declares it.
    answer = engine.ask("why does my __shfl_down_sync code give wrong sums on MI250?")
    assert "The docs say more than the table" in answer.answer and "ROCm 6.2" in answer.answer
    assert "HIP/docs/reference/kernel_language.rst" in paths(answer)
    # A name HIP really lacks keeps the plain "no HIP equivalent".
    missing = engine.ask("what replaces cudaDeviceFlushGPUDirectRDMAWrites?")
    assert "no HIP equivalent" in missing.answer and "say more than the table" not in missing.answer
