"""Why a unit still fails, in words a porter understands: the missing library by name, "no HIP
equivalent", the ROCm version an API needs, inline PTX and its line, dynamic parallelism, an
unfinished source; otherwise hipcc's first error with its place."""

from __future__ import annotations

import os
import re

from hipbot.agents.hipify import mappings
from hipbot.agents.port import rocm
from hipbot.agents.port.compiler import CompileResult, Diag
from hipbot.agents.port.libraries import header_cause, identifier_cause
from hipbot.agents.port.report import Cause
from hipbot.agents.port.rules import NO_MEMBER, NOT_FOUND, UNDECLARED, UnitState
from hipbot.agents.port.source_fixes import included_files
from hipbot.agents.port.tree import read_text
from hipbot.i18n import N_

_ASM = re.compile(r"\basm\b|__asm__")


def _source_line(state: UnitState, diag: Diag) -> str:
    path = state.root / diag.file
    if not path.is_file():
        return ""
    lines = read_text(path).splitlines()
    return lines[diag.line - 1] if 0 < diag.line <= len(lines) else ""


def _place(diag: Diag) -> str:
    """Where a diagnostic points, as compilers write it: ``file:line``."""
    return f"{diag.file}:{diag.line}"


def _unsupported_cuda(name: str) -> str | None:
    table = mappings.load()
    rows = table.by_cuda.get(name)
    if rows and not any(r.hip for r in rows):
        lib = rows[0].library.replace("_API", "").replace("_", " ")
        return N_("{name} ({library}): no HIP equivalent", name=name, library=lib)
    return None


def _hip_name(name: str) -> str | None:
    rows = mappings.load().by_cuda.get(name)
    return next((r.hip for r in rows or () if r.hip), None)


_PTX_ASM = re.compile(r"\b(?:asm|__asm__)\s*(?:volatile\s*|__volatile__\s*)?\(\s*\"([^\"]*)")
_PTX_WORD = re.compile(
    r"%%|\.(?:[subf]\d+|b\d+|pred|global|shared|sync|aligned)\b|\b(?:mov|ld|st|mma|cp|shfl|bar|red|atom)\."
)


def inline_ptx(state: UnitState) -> Cause | None:
    """PTX in ``asm()`` in the unit or the project headers it includes: ``-fsyntax-only`` does not
    assemble it, so it would pass the check and fail the build."""
    for rel in included_files(state):
        text = read_text(state.root / rel)
        for m in _PTX_ASM.finditer(text):
            if _PTX_WORD.search(m.group(1)):
                line = text.count("\n", 0, m.start()) + 1
                where = f"{rel}:{line}"
                return Cause("inline-ptx", N_(_INLINE_PTX, place=where))
    return None


_ELLIPSIS_BLANK = re.compile(r"(?:=|return)\s*(\.\.\.)\s*;|<<<\s*(\.\.\.)\s*>>>|\(\s*(\.\.\.)\s*\)\s*;")
_LINE_MARKER = re.compile(r'^# (\d+) "([^"]+)"')


def live_ptx(preprocessed: str, state: UnitState) -> Cause | None:
    """PTX in ``asm()`` that the compiler sees (the preprocessed unit, project files only): a PTX
    statement in a branch hipcc never takes (``#ifdef __CUDA_ARCH__``) is no cause."""
    unit_dir = (state.root / state.source).parent
    where, line = "", 0
    for text_line in preprocessed.split("\n"):
        marker = _LINE_MARKER.match(text_line)
        if marker:
            where, line = marker.group(2), int(marker.group(1))
            continue
        if where and not where.startswith(("/", "<")):
            m = _PTX_ASM.search(text_line)
            if m and _PTX_WORD.search(m.group(1)):
                rel = os.path.relpath(os.path.normpath(unit_dir / where), state.root)
                return Cause("inline-ptx", N_(_INLINE_PTX, place=f"{rel}:{line}"))
        line += 1
    return None


_INLINE_PTX = N_("inline PTX at {place}: rewrite it with HIP/clang builtins")
_CODE_SUFFIXES = (".hip", ".h", ".cuh", ".hpp", ".hh", ".cpp", ".cc", ".cxx", ".c", ".inl")
_UNDECLARED_NAME = re.compile(r"use of undeclared identifier '([A-Za-z_]\w*)'")


def _defined_elsewhere(errors: list[Diag], state: UnitState, names: int = 3) -> Cause | None:
    """A function the unit calls is declared in nothing it includes but defined in another file of
    the project (an exercise copied half-way): the source is incomplete for any compiler."""
    unit_files = included_files(state)
    checked: set[str] = set()
    for diag in errors:
        m = _UNDECLARED_NAME.search(diag.message)
        if not m or m.group(1) in checked or len(checked) >= names:
            continue
        name = m.group(1)
        checked.add(name)
        if name.startswith(("hip", "cuda", "cu", "__")) or rocm.added_in(name) or _unsupported_cuda(name):
            continue
        decl = re.compile(rf"^[A-Za-z_][\w:<>,*& \t]*\b{re.escape(name)}\s*\([^;{{]*\)\s*[{{;]", re.M)
        if any(decl.search(read_text(state.root / rel)) for rel in unit_files):
            continue  # declared where the unit can see it (behind a macro, say): not this case
        for paths in state.files_by_name.values():
            for rel in paths:
                if (
                    rel.suffix in _CODE_SUFFIXES
                    and rel not in unit_files
                    and decl.search(read_text(state.root / rel))
                ):
                    return Cause(
                        "not-valid-cuda",
                        N_(
                            "'{name}' ({place}) is declared in nothing this unit includes; "
                            "{path} defines it: the source is incomplete, nvcc refuses it too",
                            name=name,
                            place=_place(diag),
                            path=str(rel),
                        ),
                    )
    return None


def classify(result: CompileResult, state: UnitState) -> Cause:
    """Why a unit still fails, for a person."""
    if result.error:
        kind = "timeout" if "longer than" in result.error else "error"
        return Cause(kind, result.error)
    errors = result.errors
    for diag in errors:
        m = NOT_FOUND.search(diag.message)
        if m:
            cause = header_cause(m.group(1))
            if cause:
                return cause
    for diag in errors:
        if (
            _ASM.search(_source_line(state, diag))
            or "asm" in diag.message
            or "inline assembly" in diag.message
        ):
            return Cause("inline-ptx", N_(_INLINE_PTX, place=_place(diag)))
        if re.search(r"no template named '(surface|texture)'", diag.message):
            return Cause(
                "no-hip-equivalent",
                N_(
                    "legacy texture/surface references at {place}: rewrite with texture/surface objects",
                    place=_place(diag),
                ),
            )
        if (
            "reference to __global__ function" in diag.message
            or "__HIP_Coordinates" in diag.message
            or "no matching function for call to 'hipDeviceSynchronize'" in diag.message
        ):
            return Cause(
                "no-hip-equivalent",
                N_(
                    "dynamic parallelism (a kernel launching a kernel at {place}): no HIP equivalent",
                    place=_place(diag),
                ),
            )
    for diag in errors:
        if re.match(r"[ \t]*include[ \t]*[<\"]", _source_line(state, diag)):
            return Cause(
                "not-valid-cuda",
                N_(
                    "'#include' written without its '#' at {place}; nvcc refuses it too",
                    place=_place(diag),
                ),
            )
        m = re.match(r"unexpected character <(U\+[0-9A-F]+)>", diag.message)
        if m:
            return Cause(
                "not-valid-cuda",
                N_(
                    "a stray character ({char}) in the source at {place}; nvcc refuses it too",
                    char=m.group(1),
                    place=_place(diag),
                ),
            )
        m = re.search(
            r"undeclared identifier '(FIXME|TODO|XXX|YOUR_CODE_HERE)'|unknown type name '(FIXME|TODO)'",
            diag.message,
        )
        if m is None and diag.message == "expected expression":
            # an exercise's blanks: 'int index = ...;', 'kern<<<...>>>(...);'
            m = _ELLIPSIS_BLANK.search(_source_line(state, diag))
        if m:
            return Cause(
                "not-valid-cuda",
                N_(
                    "the source is unfinished ('{placeholder}' placeholder at {place}); nvcc refuses it too",
                    placeholder=next(g for g in m.groups() if g),
                    place=_place(diag),
                ),
            )
    for diag in errors:
        m = UNDECLARED.search(diag.message)
        if not m:
            continue
        name = next(g for g in m.groups() if g)
        added = rocm.added_in(name)
        if added and added > state.rocm:
            return Cause(
                "rocm-version",
                N_(
                    "{name} needs ROCm {version} (target {target}; --rocm to change)",
                    name=name,
                    version=rocm.version_text(added),
                    target=rocm.version_text(state.rocm),
                ),
            )
        cause = identifier_cause(name)
        if cause is not None:
            return cause
        text = _unsupported_cuda(name)
        if text:
            return Cause("no-hip-equivalent", text)
        hip = _hip_name(name)
        if hip:
            return Cause(
                "untranslated",
                N_(
                    "'{name}' ({place}) is a CUDA name translation did not reach (a macro builds it "
                    "with ## or hides it): its HIP name is {hip}",
                    name=name,
                    place=_place(diag),
                    hip=hip,
                ),
            )
    for diag in errors:
        m = NO_MEMBER.search(diag.message)
        if m and m.group(1).startswith("meta_group_") and "thread_block_tile" in m.group(2):
            return Cause(
                "rocm-version",
                N_(
                    "cooperative groups tiles have no {name}() in ROCm {target} ({place}): "
                    "a newer ROCm has it (--rocm to target one)",
                    name=m.group(1),
                    target=rocm.version_text(state.rocm),
                    place=_place(diag),
                ),
            )
        if m and m.group(2) in ("hipDeviceProp_t", "hipDeviceProp_tR0600"):
            return Cause(
                "rocm-version",
                N_(
                    "hipDeviceProp_t has no field '{name}' in ROCm {target} ({place})",
                    name=m.group(1),
                    target=rocm.version_text(state.rocm),
                    place=_place(diag),
                ),
            )
    for diag in errors:
        m = NOT_FOUND.search(diag.message)
        if m and m.group(1).startswith("hip/"):
            return Cause(
                "rocm-version",
                N_(
                    "<{header}> is not in ROCm {target} ({place}): a newer ROCm has it (--rocm to target one)",
                    header=m.group(1),
                    target=rocm.version_text(state.rocm),
                    place=_place(diag),
                ),
            )
        if m:
            return Cause(
                "missing-header",
                N_(
                    "'{header}' not found ({place}): not in the project nor installed",
                    header=m.group(1),
                    place=_place(diag),
                ),
            )
    for diag in errors:
        m = re.match(
            r"out-of-line definition of '(\w+)' does not match any declaration in '(\w+)'", diag.message
        )
        path = state.root / diag.file
        if m and path.is_file():
            lines = read_text(path).splitlines()[max(diag.line - 3, 0) : diag.line]
            if re.search(r"\b__(?:device|host)__\b", "\n".join(lines)):
                return Cause(
                    "nvcc-only",
                    N_(
                        "{name} is defined __device__/__host__ at {place} but declared in its class without "
                        "it: nvcc merges the two, clang does not; give the declaration the same specifier",
                        name=m.group(2) + "::" + m.group(1),
                        place=_place(diag),
                    ),
                )
    cause = _defined_elsewhere(errors, state)
    if cause is not None:
        return cause
    if errors:
        d = errors[0]
        return Cause("error", N_("hipcc: {message} at {place}", message=d.message, place=_place(d)))
    return Cause("error", N_("hipcc failed without a diagnostic"))
