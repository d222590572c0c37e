"""Repair rules: hipcc's diagnostics -> known causes -> an edit (with its reason and doc source).

Each rule looks at one error and returns a :class:`Fix` (an edit of a file of the ported tree or
compiler flags for the unit) or None; ``find_fixes`` gathers one fix per cause for a round. What no
rule fixes is named by ``causes.classify``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path

from hipbot.agents.port import rocm, samples
from hipbot.agents.port.compiler import Diag
from hipbot.agents.port.fixes import (
    INCLUDE_LINE,
    NO_MEMBER,
    NOT_FOUND,
    UNDECLARED,
    Fix,
    UnitState,
    insert_after_hip_include,
    project_file,
    shim_include,
)
from hipbot.agents.port.newer_cuda import rule_cooperative_groups, rule_graph_edges, rule_half_minmax
from hipbot.agents.port.source_fixes import rule_dependent_base, rule_identity_define, rule_nvcc_guard
from hipbot.agents.port.tree import read_text
from hipbot.i18n import N_

DOC_HEADERS = "HIPIFY/docs/tables (CUDA headers and their HIP counterparts)"
DOC_OPENMP = "HIP/docs/how-to/hip_porting_guide.rst (OpenMP host code with hipcc: -fopenmp)"
DOC_PROPS = "HIPIFY/docs/tables/CUDA_Runtime_API_functions_supported_by_HIP.md (cudaDeviceProp)"


def _shim_fix(state: UnitState, diag: Diag, name: str, why: str, doc: str) -> Fix | None:
    """The shim goes in the unit itself, before the headers that need it: one round for them all."""
    file = state.source
    line = shim_include(state, file)
    return Fix(
        "rocm-shim",
        N_(
            "{name}: {why} (target ROCm {target}); {shim} supplies it",
            name=name,
            why=why,
            target=rocm.version_text(state.rocm),
            shim=rocm.SHIM_NAME,
        ),
        doc,
        file,
        lambda text: insert_after_hip_include(text, line),
        new_files=((Path(rocm.SHIM_NAME), rocm.shim_text()),),
    )


def rule_rocm_shim(diag: Diag, state: UnitState) -> Fix | None:
    m = UNDECLARED.search(diag.message)
    if not m:
        return None
    name = next(g for g in m.groups() if g)
    if name in rocm.WARP_SYNC and state.rocm < (6, 2):
        return _shim_fix(state, diag, name, N_("the *_sync warp functions came with ROCm 6.2"), rocm.DOC_WARP)
    if name in rocm.DRV_ERRORS and state.rocm < (5, 4):
        return _shim_fix(state, diag, name, N_("came with ROCm {version}", version="5.4"), rocm.DOC_DRV)
    if name in rocm.CG_REDUCE and m.group(3) in ("cooperative_groups", "cg") and state.rocm < (6, 1):
        return _shim_fix(
            state,
            diag,
            f"cooperative_groups::{name}",
            N_("came with ROCm {version}", version="6.1"),
            rocm.DOC_CG,
        )
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
    "sm_30_intrinsics.h": "",
    "sm_35_intrinsics.h": "",
    "sm_32_atomic_functions.h": "",
    "sm_35_atomic_functions.h": "",
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
    # the GL interop API (hipGraphicsGLRegisterBuffer & co.) is in hip_runtime_api.h since HIP 4.5
    "cuda_gl_interop.h": "",
}


NVTX_HEADERS = tuple(
    f"{folder}nvToolsExt{part}.h" for folder in ("", "nvtx3/") for part in ("", "Cuda", "CudaRt")
)


def rule_header(diag: Diag, state: UnitState) -> Fix | None:
    m = NOT_FOUND.search(diag.message)
    if not m:
        return None
    name, file = m.group(1), project_file(diag, state)
    if file is None:
        return None
    pattern = re.compile(INCLUDE_LINE.format(re.escape(name)), re.M)
    if name in CUDA_HEADERS:
        new = CUDA_HEADERS[name]
        if new == rocm.SHIM_NAME:
            line = shim_include(state, file)
            return Fix(
                "rocm-shim",
                N_(
                    "<{header}> is not in ROCm {target}: {shim} has cooperative_groups::reduce",
                    header=name,
                    target=rocm.version_text(state.rocm),
                    shim=rocm.SHIM_NAME,
                ),
                rocm.DOC_CG,
                file,
                lambda text: pattern.sub(line + "\n", text, count=1),
                new_files=((Path(rocm.SHIM_NAME), rocm.shim_text()),),
            )
        repl = f"#include <{new}>\n" if new else ""
        return Fix(
            "cuda-header",
            N_("<{header}> is CUDA-only: <{hip}> is the HIP counterpart", header=name, hip=new)
            if new
            else N_("<{header}> is CUDA-only: hip_runtime.h declares it", header=name),
            DOC_HEADERS,
            file,
            lambda text: pattern.sub(repl, text, count=1),
        )
    if name in NVTX_HEADERS:
        line = f'#include "{os.path.relpath(state.root / samples.NVTX_NAME, (state.root / file).parent)}"'
        return Fix(
            "nvtx",
            N_(
                "<{header}>: NVTX markers become no-ops ({path}); install roctracer for roctx markers",
                header=name,
                path=samples.NVTX_NAME,
            ),
            samples.NVTX_DOC,
            file,
            lambda text: pattern.sub(line + "\n", text, count=1),
            new_files=((Path(samples.NVTX_NAME), samples.NVTX),),
        )
    if name == "omp.h":
        return rule_openmp(diag, state)
    if name == "mpi.h":
        inc = mpi_include_dirs()
        if inc:
            return Fix(
                "mpi",
                N_("MPI host code: the MPI headers' folder (mpicxx --showme:incdirs) for hipcc"),
                "HIP/docs/how-to/hip_porting_guide.rst",
                add_args=tuple(f"-I{d}" for d in inc),
            )
        return None
    moved = library_subfolder(name)
    if moved:
        return Fix(
            "library-header",
            N_(
                "<{header}> is installed as <{path}> (ROCm libraries keep their headers in a folder of "
                "their name; the top-level copies were removed)",
                header=name,
                path=moved,
            ),
            DOC_HEADERS,
            file,
            lambda text: pattern.sub(f"#include <{moved}>\n", text, count=1),
        )
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
            N_(
                "'{header}' is the project's own header ({path}); its folder is added to the include path",
                header=name,
                path=str(best),
            ),
            "the project's tree",
            add_args=(f"-I{rel}",),
        )
    if name in samples.HEADERS:
        rel = os.path.relpath(state.root / samples.FOLDER, (state.root / state.source).parent)
        return Fix(
            "samples-helpers",
            N_(
                "<{header}> is one of the CUDA samples' helpers (from the CUDA toolkit, not this project): "
                "hipbot writes HIP versions into {folder}/",
                header=name,
                folder=samples.FOLDER,
            ),
            samples.DOC,
            add_args=(f"-I{rel}",),
            new_files=tuple((Path(samples.FOLDER) / n, t) for n, t in samples.HEADERS.items()),
        )
    return None


SYSTEM_INCLUDE_DIRS = ("/opt/rocm/include", "/usr/include")


def library_subfolder(name: str, dirs: tuple[str, ...] = SYSTEM_INCLUDE_DIRS) -> str | None:
    """``hipsparse.h`` -> ``hipsparse/hipsparse.h`` when only the latter is installed."""
    if "/" in name or not name.endswith(".h"):
        return None
    moved = f"{name[:-2]}/{name}"
    return moved if any(Path(d, moved).is_file() for d in dirs) else None


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
    """OpenMP host code: ``-fopenmp`` first; when ``omp_*`` is still undeclared, the file guards
    ``<omp.h>`` with ``#ifdef _OPENMP``, which hipcc's device pass does not define: the include is
    made unconditional (its declarations are plain C, harmless on the device side)."""
    missing = "'omp.h' file not found" in diag.message
    if not missing and not ("undeclared identifier" in diag.message and _OMP.search(diag.message)):
        return None
    if "-fopenmp" not in state.args:
        return Fix("openmp", N_("OpenMP host code: hipcc needs -fopenmp"), DOC_OPENMP, add_args=("-fopenmp",))
    file = project_file(diag, state)
    if missing or file is None:
        return None
    return Fix(
        "openmp",
        N_("hipcc's device pass does not define _OPENMP: <omp.h> is included whatever the guard says"),
        DOC_OPENMP,
        file,
        lambda text: insert_after_hip_include(text, "#include <omp.h>  // hipbot port: both compile passes"),
    )


# HIP functions whose CUDA counterparts also have C++ template overloads taking T** (cuda_runtime.h);
# HIP has the void** form only, so a typed pointer's address needs the cast CUDA's template did
VOID_PP_FIRST = (
    "hipHostAlloc",
    "hipMallocHost",
    "hipHostMalloc",
    "hipMallocManaged",
    "hipMalloc",
    "hipMallocPitch",
    "hipMallocAsync",
    "hipMallocFromPoolAsync",
    "hipMalloc3D",
    "hipHostGetDevicePointer",
)
DOC_OVERLOADS = (
    "HIP/docs/reference (hip_runtime_api.h: hipHostAlloc(void**, size_t, unsigned int) & co.); "
    "CUDA Runtime API, C++ API routines (the T** templates)"
)


_CAST = re.compile(r"\(\s*void\s*\*\s*\*\s*\)|reinterpret_cast\s*<\s*void\s*\*\s*\*\s*>")


def cast_first_arguments(text: str, name: str) -> str:
    """Every call of ``name`` in the file gets ``(void**)`` before its first argument (one round
    for them all); a declaration of the name (a type before it) and a call already cast are left."""

    def cast(m: re.Match[str]) -> str:
        before = text[max(0, m.start() - 80) : m.start()].rstrip()
        word = re.search(r"[\w*&]+$", before)
        if word and word.group(0) != "return":
            return m.group(0)
        return m.group(0) + "(void**)"

    return re.sub(rf"(?<![\w.>]){re.escape(name)}\s*\(\s*(?!\s|{_CAST.pattern})", cast, text)


def rule_overload(diag: Diag, state: UnitState) -> Fix | None:
    m = re.match(r"no matching function for call to '(\w+)'", diag.message)
    if not m or m.group(1) not in VOID_PP_FIRST + rocm.VOID_PP_TEMPLATES:
        return None
    name, file = m.group(1), project_file(diag, state)
    if file is None:
        return None
    text = read_text(state.root / file)
    if name not in VOID_PP_FIRST or cast_first_arguments(text, name) == text:
        # the name is not on the line (a macro built it with ##): CUDA's templates, in the shim
        if name not in rocm.VOID_PP_TEMPLATES:
            return None
        line = shim_include(state, file)
        return Fix(
            "overload",
            N_(
                "{name}: HIP lacks the C++ overload cuda_runtime.h has (T** for void**, or the event's flags) "
                "and no edit of the call reaches it: {shim} has the overload",
                name=name,
                shim=rocm.SHIM_NAME,
            ),
            DOC_OVERLOADS,
            file,
            lambda t: insert_after_hip_include(t, line),
            new_files=((Path(rocm.SHIM_NAME), rocm.shim_text()),),
        )
    return Fix(
        "overload",
        N_(
            "{name} takes void** in HIP (CUDA's C++ overload took any T**): the pointer's address is cast",
            name=name,
        ),
        DOC_OVERLOADS,
        file,
        lambda text: cast_first_arguments(text, name),
    )


_NEWER_STD = re.compile(r"(?:is|are) a C\+\+(1[47]|17|20) extension")
DOC_STD = "CUDA 11+ nvcc compiles C++17 by default; hipcc of ROCm 5 defaults to an older dialect"


def rule_std(diag: Diag, state: UnitState) -> Fix | None:
    """nvcc's default dialect is C++17 (CUDA 11+): code relying on it gets -std=c++17."""
    m = _NEWER_STD.search(diag.message)
    if not m or any(a.startswith(("-std=", "--std")) for a in state.args):
        return None
    std = "c++20" if m.group(1) == "20" else "c++17"
    return Fix(
        "std",
        N_("the code uses {dialect} features: -std={std}", dialect=m.group(0).split()[-2], std=std),
        DOC_STD,
        add_args=(f"-std={std}",),
    )


# cudaDeviceProp fields ROCm 5 lacks, with what says the same thing there
PROP_FIELDS = {
    "sharedMemPerMultiprocessor": (
        "{obj}maxSharedMemoryPerMultiProcessor",
        N_("HIP's name for the same figure"),
    ),
    "deviceOverlap": ("1", N_("every GPU ROCm supports copies memory while running kernels")),
    "unifiedAddressing": ("1", N_("ROCm always has unified virtual addressing on 64-bit Linux")),
    "streamPrioritiesSupported": ("1", N_("HIP streams have priorities (hipStreamCreateWithPriority)")),
    "sharedMemPerBlockOptin": (
        "{obj}sharedMemPerBlock",
        N_("AMD GPUs have no opt-in shared memory: the block limit is all of it"),
    ),
}


def rule_device_prop(diag: Diag, state: UnitState) -> Fix | None:
    m = NO_MEMBER.search(diag.message)
    if not m or m.group(2) not in ("hipDeviceProp_t",) or m.group(1) not in PROP_FIELDS:
        return None
    name, file = m.group(1), project_file(diag, state)
    if file is None:
        return None
    template, why = PROP_FIELDS[name]
    pat = re.compile(rf"((?:[A-Za-z_]\w*(?:\[[^\]]*\])?(?:\.|->))+){name}\b")

    def edit(text: str) -> str:
        """Every use in the file: one round, however many lines read the field."""
        if template.startswith("{obj}"):
            return pat.sub(lambda mm: template.format(obj=mm.group(1)), text)
        return pat.sub(f"{template} /* {name}: {why} */", text)

    return Fix(
        "device-prop",
        N_(
            "hipDeviceProp_t has no {name} in ROCm {target}: {why}",
            name=name,
            target=rocm.version_text(state.rocm),
            why=why,
        ),
        DOC_PROPS,
        file,
        edit,
    )


def rule_hip_first(diag: Diag, state: UnitState) -> Fix | None:
    """An error inside HIP's own headers, with the unit defining macros before including them
    (``#define T 256`` breaks a template parameter named T): nvcc includes cuda_runtime.h before
    the first line, so the HIP header goes first too."""
    if not (diag.file.startswith("/") and "/hip/" in diag.file):
        return None
    path = state.root / state.source
    text = read_text(path)
    m = re.search(r"^[ \t]*#[ \t]*include[ \t]*<hip/hip_runtime\.h>[^\n]*\n", text, re.M)
    if m is None or not re.search(r"^[ \t]*#[ \t]*define\b", text[: m.start()], re.M):
        return None
    return Fix(
        "hip-first",
        N_(
            "macros defined before <hip/hip_runtime.h> break HIP's headers; "
            "nvcc includes cuda_runtime.h before the source, so it goes first"
        ),
        "CUDA Programming Guide (nvcc's implicit cuda_runtime.h); HIP/docs/how-to/hip_porting_guide.rst",
        state.source,
        lambda t: "#include <hip/hip_runtime.h>\n" + t.replace(m.group(0), "", 1),
    )


def rule_literal_suffix(diag: Diag, state: UnitState) -> Fix | None:
    """``extern "C"__global__``: nvcc reads two tokens, clang a user-defined literal suffix."""
    file = Path(diag.file)
    if "string literal with user-defined suffix" not in diag.message or not (state.root / file).is_file():
        return None

    def edit(text: str, line_no: int = diag.line) -> str:
        lines = text.split("\n")
        if 0 < line_no <= len(lines):
            lines[line_no - 1] = re.sub(r'("[^"\n]*")([A-Za-z_])', r"\1 \2", lines[line_no - 1])
        return "\n".join(lines)

    return Fix(
        "literal-suffix",
        N_(
            'a string literal glued to the next word ("C"__global__) is a C++11 literal suffix for clang: '
            "a space separates them"
        ),
        "C++11 [lex.ext] user-defined literals; clang follows it, nvcc's front end does not",
        file,
        edit,
    )


def rule_void_main(diag: Diag, state: UnitState) -> Fix | None:
    """``void main()``: MSVC (the host compiler of Windows CUDA projects) accepts it, C++ and clang
    do not; ``int main`` without a return statement returns 0, so the program behaves the same."""
    file = project_file(diag, state)
    if diag.message != "'main' must return 'int'" or file is None:
        return None

    def edit(text: str, line_no: int = diag.line) -> str:
        lines = text.split("\n")
        if 0 < line_no <= len(lines):
            lines[line_no - 1] = re.sub(r"\bvoid(\s+main\s*\()", r"int\1", lines[line_no - 1], count=1)
        return "\n".join(lines)

    return Fix(
        "void-main",
        N_(
            "main returns void, which MSVC accepts and C++ does not: it returns int (0 when it ends without a return)"
        ),
        "C++ [basic.start.main]: main shall have a return type of type int; reaching its end returns 0",
        file,
        edit,
    )


# CUDA functions with no HIP name that say the same as a HIP call
SAME_AS = {
    "cudaGLSetGLDevice": (
        "hipSetDevice",
        N_(
            "deprecated since CUDA 5.0 (a device no longer has to be tied to the GL context): it is cudaSetDevice"
        ),
        "CUDA Runtime API, OpenGL Interoperability [DEPRECATED]: cudaGLSetGLDevice",
    ),
}


# CUDA enumerators with no HIP name, passed to HIP functions that take the same flag values
SAME_VALUE = {
    "cudaGraphicsMapFlagsNone": "0",
    "cudaGraphicsMapFlagsReadOnly": "1",
    "cudaGraphicsMapFlagsWriteDiscard": "2",
}
DOC_MAP_FLAGS = "CUDA Runtime API, enum cudaGraphicsMapFlags (None = 0, ReadOnly = 1, WriteDiscard = 2)"


def rule_same_as(diag: Diag, state: UnitState) -> Fix | None:
    m = re.match(r"use of undeclared identifier '(\w+)'", diag.message)
    file = project_file(diag, state)
    if not m or file is None:
        return None
    name = m.group(1)
    if name in SAME_VALUE:
        value = SAME_VALUE[name]
        return Fix(
            "same-as",
            N_(
                "{name} has no HIP name: CUDA defines it as {value}, the value it is written as "
                "(hipGraphicsRegisterFlags has the same values)",
                name=name,
                value=value,
            ),
            DOC_MAP_FLAGS,
            file,
            lambda text: re.sub(rf"\b{name}\b", f"{value} /* {name} */", text),
        )
    if name not in SAME_AS:
        return None
    hip, why, doc = SAME_AS[name]
    return Fix(
        "same-as",
        N_("{name} has no HIP name: {why}, so it becomes {hip}", name=name, why=why, hip=hip),
        doc,
        file,
        lambda text: re.sub(rf"\b{name}\s*\(", f"{hip}(", text),
    )


RULES: tuple[Callable[[Diag, UnitState], Fix | None], ...] = (
    rule_rocm_shim,
    rule_identity_define,
    rule_header,
    rule_openmp,
    rule_overload,
    rule_std,
    rule_device_prop,
    rule_hip_first,
    rule_literal_suffix,
    rule_void_main,
    rule_same_as,
    rule_cooperative_groups,
    rule_graph_edges,
    rule_half_minmax,
    rule_nvcc_guard,
    rule_dependent_base,
)


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
