"""CUDA -> HIP source translation, token by token, the way hipify-clang rewrites a file.

The public entry: the CLI, the Discord bot and the agent call ``translate()`` (a text) or
``translate_path()`` (a file). What the translation does:

* identifiers are replaced as whole tokens from the HIPIFY mapping tables (``mappings.load()``);
  ``--roc`` picks the rocBLAS/rocSPARSE/rocRAND/rocSOLVER names, ``--miopen`` the MIOpen ones;
  names HIP lacks, experimental names (without ``--experimental``) are left as they are and
  reported with their line and column;
* comments are never touched; inside plain string literals only space-separated words that are
  exactly a CUDA API name are rewritten (hipify-clang's rule; ``translate_strings=False`` keeps them);
* includes are rewritten (``cuda_runtime.h`` -> ``hip/hip_runtime.h``, library headers to hip* or
  roc*), repeated main headers are dropped, and ``hip/hip_runtime.h`` is inserted when the file does
  not include a CUDA main header;
* ``<<<...>>>`` launches stay unless ``hip_kernel_execution_syntax`` (see ``kernel_launch``);
* the argument rewrites hipify-clang makes for a few calls (``HIP_SYMBOL(...)`` around symbols,
  ``cudaEventCreate`` with flags, ``cudaGraphInstantiate`` with flags, ``cudaMallocHost``'s flag).

Everything is one linear scan over the tokens plus dictionary lookups. The parts: ``renames``
and ``includes`` (the lookup tables, from ``mappings``), ``translator`` (the scan), ``call_rewrites``,
``kernel_launch``, ``pp_blocks``, ``names`` (the project's own names), ``report`` (options and
results), ``tree`` (all file and byte I/O: decoding, walking trees, output naming, backups).
"""

from __future__ import annotations

from pathlib import Path

from hipbot.agents.hipify.report import (
    Deadline,
    HipifyOptions,
    HipifyReport,
    HipifyResult,
    TranslationTimeout,
)
from hipbot.agents.hipify.translator import Translator
from hipbot.agents.hipify.tree import (
    MAX_INPUT_BYTES,
    FileOutcome,
    check_text,
    output_path,
    read_source,
    write_output,
)
from hipbot.errors import HipbotError
from hipbot.i18n import N_, Joined

__all__ = [
    "FileOutcome",
    "HipifyOptions",
    "HipifyReport",
    "HipifyResult",
    "TranslationTimeout",
    "check_text",
    "translate",
    "translate_path",
]


def translate(
    source: str,
    options: HipifyOptions | None = None,
    filename: str = "<stdin>",
    *,
    time_limit: float | None = None,
) -> HipifyResult:
    """Translate CUDA source text to HIP, in time linear in its size. Never raises for odd input:
    problems go in ``report.errors``. ``time_limit`` (seconds, for text from strangers: the bot,
    a server) raises :class:`TranslationTimeout` when the translation and its lints take longer."""
    options = options or HipifyOptions()
    deadline = Deadline.after(time_limit)
    problem = None
    if not source.strip():
        problem = N_("input is empty")
    elif len(source) > MAX_INPUT_BYTES:
        problem = N_("input is larger than {limit} MiB", limit=MAX_INPUT_BYTES // (1024 * 1024))
    elif "\0" in source[:65536]:
        problem = N_("input looks binary (NUL characters), not CUDA source")
    if problem:
        report = HipifyReport(filename)
        report.errors.append(Joined(": ", [filename, problem]))
        return HipifyResult(source, report, [])
    translator = Translator(source, options, filename, deadline)
    text = translator.run()
    result = HipifyResult(text, translator.report)
    if options.lint:
        from hipbot.agents.hipify import lints

        result.lints = lints.lint_translation(source, text, filename, deadline)
    return result


def translate_path(
    source: Path,
    options: HipifyOptions | None = None,
    *,
    root: Path | None = None,
    out_dir: Path | None = None,
    inplace: bool = False,
    write: bool = True,
) -> FileOutcome:
    """Translate one file and write the result (``.prehip`` backup when in place). A file that did not
    translate cleanly (bad bytes, unbalanced ``<<<``) is never written in place."""
    source = Path(source)
    try:
        text = read_source(source)
    except HipbotError as exc:
        return FileOutcome(source, None, None, exc.message if exc.hint is None else str(exc))
    result = translate(text, options, str(source))
    target = output_path(source, root, out_dir, inplace)
    if not result.ok:
        return FileOutcome(source, None, result, Joined("; ", result.report.errors))
    if write:
        write_output(source, target, result.text, inplace)
    return FileOutcome(source, target, result)
