"""Repair rules: hipcc's diagnostics -> known causes -> an edit (with its reason and doc source),
and, for what no rule fixes, the cause in words a porter understands.

Each rule looks at one error and returns a :class:`Fix` (an edit of a file of the ported tree or
compiler flags for the unit) or None. ``classify`` names why a unit still fails: the missing
library by name, "no HIP equivalent", the ROCm version an API needs, inline PTX and its line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from hipbot.agents.hipify import mappings
from hipbot.agents.port import rocm
from hipbot.agents.port.compiler import CompileResult, Diag
from hipbot.agents.port.libraries import HEADER_CAUSES, header_cause
from hipbot.agents.port.report import Cause
from hipbot.agents.port.tree import read_text

DOC_HEADERS = "HIPIFY/docs/tables (CUDA headers and their HIP counterparts)"
DOC_OPENMP = "HIP/docs/how-to/hip_porting_guide.rst (OpenMP host code with hipcc: -fopenmp)"
DOC_PROPS = "HIPIFY/docs/tables/CUDA_Runtime_API_functions_supported_by_HIP.md (cudaDeviceProp)"


@dataclass
class UnitState:
    root: Path  # the ported tree
    source: Path  # the unit, relative to root
    args: list[str]
    rocm: tuple[int, int]
    files_by_name: dict[str, list[Path]] = field(default_factory=dict)


@dataclass(frozen=True)
class Fix:
    rule: str
    reason: str
    doc: str
    file: Path | None = None  # relative to root
    edit: Callable[[str], str] | None = None
    add_args: tuple[str, ...] = ()
    new_files: tuple[tuple[Path, str], ...] = ()


_NOT_FOUND = re.compile(r"'([^']+)' file not found")
_UNDECLARED = re.compile(
    r"use of undeclared identifier '([^']+)'|no (?:template|type|member) named '([^']+)' in namespace '([^']+)'"
    r"|unknown type name '([^']+)'|no matching function for call to '([^']+)'"
)
_NO_MEMBER = re.compile(r"no member named '([^']+)' in '(?:struct )?([^']+)'")
_INCLUDE_LINE = r'^[ \t]*#[ \t]*include[ \t]*[<"]{}[>"][^\n]*\n?'


def _shim_include(state: UnitState, file: Path) -> str:
    rel = os.path.relpath(state.root / rocm.SHIM_NAME, (state.root / file).parent)
    return f'#include "{rel}"'


def _insert_after_hip_include(text: str, line: str) -> str:
    if line in text:
        return text
    found = list(re.finditer(r'^[ \t]*#[ \t]*include[ \t]*[<"]hip/[^\n]*\n', text, re.M))
    at = found[-1].end() if found else 0
    if not found:
        m = re.search(r"^[ \t]*#[ \t]*include[^\n]*\n", text, re.M)
        at = m.start() if m else 0
    return text[:at] + line + "\n" + text[at:]


def _shim_fix(state: UnitState, diag: Diag, name: str, why: str, doc: str) -> Fix | None:
    file = Path(diag.file)
    if file.is_absolute() or not (state.root / file).is_file():
        file = state.source
    line = _shim_include(state, file)
    return Fix(
        "rocm-shim",
        f"{name}: {why} (target ROCm {state.rocm[0]}.{state.rocm[1]}); {rocm.SHIM_NAME} supplies it",
        doc,
        file,
        lambda text: _insert_after_hip_include(text, line),
        new_files=((Path(rocm.SHIM_NAME), rocm.shim_text()),),
    )


def rule_rocm_shim(diag: Diag, state: UnitState) -> Fix | None:
    m = _UNDECLARED.search(diag.message)
    if not m:
        return None
    name = next(g for g in m.groups() if g)
    if name in rocm.WARP_SYNC and state.rocm < (6, 2):
        return _shim_fix(state, diag, name, "the *_sync warp functions came with ROCm 6.2", rocm.DOC_WARP)
    if name in rocm.DRV_ERRORS and state.rocm < (6, 0):
        return _shim_fix(state, diag, name, "came with ROCm 6.0", rocm.DOC_DRV)
    if name in rocm.CG_REDUCE and m.group(3) in ("cooperative_groups", "cg") and state.rocm < (6, 1):
        return _shim_fix(state, diag, f"cooperative_groups::{name}", "came with ROCm 6.1", rocm.DOC_CG)
    return None


# CUDA headers HIP has no file for: dropped (what they declare comes with hip_runtime.h) or replaced
CUDA_HEADERS = {
    "device_launch_parameters.h": "",
    "device_functions.h": "",
    "cuda_device_runtime_api.h": "",
    "sm_20_atomic_functions.h": "",
    "sm_60_atomic_functions.h": "",
    "sm_61_intrinsics.h": "",
    "sm_32_intrinsics.h": "",
    "crt/host_defines.h": "",
    "host_defines.h": "",
    "vector_types.h": "hip/hip_vector_types.h",
    "vector_functions.h": "hip/hip_vector_types.h",
    "cuda_fp16.hpp": "hip/hip_fp16.h",
    "math_constants.h": "hip/hip_math_constants.h",
    "helper_math.h": "hip/hip_vector_types.h",
    "cooperative_groups/reduce.h": rocm.SHIM_NAME,
    "hip/cooperative_groups/hip_reduce.h": rocm.SHIM_NAME,
    "cooperative_groups/memcpy_async.h": "hip/hip_cooperative_groups.h",
    "cuda/std/cstdint": "cstdint",
}


def rule_header(diag: Diag, state: UnitState) -> Fix | None:
    m = _NOT_FOUND.search(diag.message)
    if not m:
        return None
    name = m.group(1)
    file = Path(diag.file)
    if file.is_absolute() or not (state.root / file).is_file():
        return None
    pattern = re.compile(_INCLUDE_LINE.format(re.escape(name)), re.M)
    if name in CUDA_HEADERS:
        new = CUDA_HEADERS[name]
        if new == rocm.SHIM_NAME:
            line = _shim_include(state, file)
            return Fix(
                "rocm-shim",
                f"<{name}> is not in ROCm {state.rocm[0]}.{state.rocm[1]}: {rocm.SHIM_NAME} has cooperative_groups::reduce",
                rocm.DOC_CG,
                file,
                lambda text: pattern.sub(line + "\n", text, count=1),
                new_files=((Path(rocm.SHIM_NAME), rocm.shim_text()),),
            )
        repl = f"#include <{new}>\n" if new else ""
        return Fix(
            "cuda-header",
            f"<{name}> is CUDA-only: "
            + (f"<{new}> is the HIP counterpart" if new else "hip_runtime.h declares it"),
            DOC_HEADERS,
            file,
            lambda text: pattern.sub(repl, text, count=1),
        )
    if name == "omp.h":
        return rule_openmp(diag, state)
    if name == "mpi.h":
        inc = mpi_include_dirs()
        if inc:
            return Fix(
                "mpi",
                "MPI host code: the MPI headers' folder (mpicxx --showme:incdirs) for hipcc",
                "HIP/docs/how-to/hip_porting_guide.rst",
                add_args=tuple(f"-I{d}" for d in inc),
            )
        return None
    # the project's own header, in a folder the build files did not say
    base = os.path.basename(name)
    candidates = [p for p in state.files_by_name.get(base, []) if str(p).endswith(name)]
    if candidates:
        best = min(candidates, key=lambda p: len(p.parts))
        folder = (state.root / best).parent
        for _ in Path(name).parts[:-1]:
            folder = folder.parent
        rel = os.path.relpath(folder, (state.root / state.source).parent)
        return Fix(
            "own-header",
            f"'{name}' is the project's own header ({best}); its folder is added to the include path",
            "the project's tree",
            add_args=(f"-I{rel}",),
        )
    return None


@cache
def mpi_include_dirs() -> tuple[str, ...]:
    mpicxx = shutil.which("mpicxx")
    if mpicxx is None:
        return ()
    try:
        out = subprocess.run([mpicxx, "--showme:incdirs"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(d for d in out.split() if os.path.isdir(d))


_OMP = re.compile(r"'(omp_[a-z_]+)'")


def rule_openmp(diag: Diag, state: UnitState) -> Fix | None:
    if "'omp.h' file not found" in diag.message or (
        "undeclared identifier" in diag.message and _OMP.search(diag.message)
    ):
        return Fix("openmp", "OpenMP host code: hipcc needs -fopenmp", DOC_OPENMP, add_args=("-fopenmp",))
    return None


RULES: tuple[Callable[[Diag, UnitState], Fix | None], ...] = (rule_rocm_shim, rule_header, rule_openmp)


def find_fixes(errors: list[Diag], state: UnitState) -> list[Fix]:
    """One fix per distinct cause among the errors (a round applies them all)."""
    fixes: list[Fix] = []
    seen: set[tuple] = set()
    for diag in errors:
        for rule in RULES:
            fix = rule(diag, state)
            if fix is None:
                continue
            key = (fix.rule, fix.file, fix.add_args, fix.reason)
            if key not in seen:
                seen.add(key)
                fixes.append(fix)
            break
    return fixes


# ---------------------------------------------------------------------------- causes

_ASM = re.compile(r"\basm\b|__asm__")


def _source_line(state: UnitState, diag: Diag) -> str:
    path = state.root / diag.file
    if not path.is_file():
        return ""
    lines = read_text(path).splitlines()
    return lines[diag.line - 1] if 0 < diag.line <= len(lines) else ""


def _unsupported_cuda(name: str) -> str | None:
    table = mappings.load()
    rows = table.by_cuda.get(name)
    if rows and not any(r.hip for r in rows):
        lib = rows[0].library.replace("_API", "").replace("_", " ")
        return f"{name} ({lib}): no HIP equivalent"
    return None


def classify(result: CompileResult, state: UnitState) -> Cause:
    """Why a unit still fails, for a person."""
    if result.error:
        kind = "timeout" if "longer than" in result.error else "error"
        return Cause(kind, result.error)
    errors = result.errors
    for diag in errors:
        m = _NOT_FOUND.search(diag.message)
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
            return Cause(
                "inline-ptx", f"inline PTX at {diag.file}:{diag.line}: rewrite it with HIP/clang builtins"
            )
    for diag in errors:
        m = _UNDECLARED.search(diag.message)
        if not m:
            continue
        name = next(g for g in m.groups() if g)
        added = rocm.added_in(name)
        if added and added > state.rocm:
            return Cause(
                "rocm-version",
                f"{name} needs ROCm {added[0]}.{added[1]} (target {state.rocm[0]}.{state.rocm[1]}; --rocm to change)",
            )
        text = _unsupported_cuda(name)
        if text:
            return Cause("no-hip-equivalent", text)
    for diag in errors:
        m = _NO_MEMBER.search(diag.message)
        if m and m.group(2) in ("hipDeviceProp_t", "hipDeviceProp_tR0600"):
            return Cause(
                "rocm-version",
                f"hipDeviceProp_t has no field '{m.group(1)}' in ROCm {state.rocm[0]}.{state.rocm[1]} ({diag.file}:{diag.line})",
            )
    for diag in errors:
        m = _NOT_FOUND.search(diag.message)
        if m:
            return Cause(
                "missing-header",
                f"'{m.group(1)}' not found ({diag.file}:{diag.line}): not in the project nor installed",
            )
    if errors:
        d = errors[0]
        return Cause("error", f"hipcc: {d.message} at {d.file}:{d.line}")
    return Cause("error", "hipcc failed without a diagnostic")


__all__ = ["HEADER_CAUSES", "Fix", "UnitState", "classify", "find_fixes"]
