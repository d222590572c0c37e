"""Build files -> HIP: CMake (the HIP language, ``hip::``/``roc::`` targets, ``HIP_ARCHITECTURES``),
Makefiles and shell scripts calling nvcc (hipcc with translated flags).

Each change is a :class:`BuildEdit` with the line, the text before and after and the reason, so the
port report can show every edit beyond translation. Sources named ``x.cu`` are renamed ``x.hip``
(the layout ``hipify --o-dir`` writes), so CMake gives them the HIP language by their extension.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hipbot.agents.port.flags import rename_cuda_paths, translate_flags


@dataclass(frozen=True)
class BuildEdit:
    line: int
    before: str
    after: str
    reason: str


@dataclass
class BuildFileResult:
    text: str
    kind: str  # "cmake" | "make" | "shell"
    edits: list[BuildEdit]


MAKE_NAMES = ("Makefile", "makefile", "GNUmakefile")


def build_kind(path: Path) -> str | None:
    """'cmake', 'make' or 'shell' for a build file, None for anything else."""
    name = path.name
    if name == "CMakeLists.txt" or name.endswith(".cmake"):
        return "cmake"
    if name in MAKE_NAMES or name.endswith((".mk", ".make")) or name.startswith("Makefile."):
        return "make"
    if name.endswith((".sh", ".bash")):
        return "shell"
    return None


# --------------------------------------------------------------------------------------------------
# CMake

CMAKE_TARGETS = {
    "CUDA::cudart": "hip::host",
    "CUDA::cudart_static": "hip::host",
    "CUDA::cuda_driver": "hip::host",
    "CUDA::cublas": "roc::hipblas",
    "CUDA::cublas_static": "roc::hipblas",
    "CUDA::cublasLt": "roc::hipblaslt",
    "CUDA::curand": "hip::hiprand",
    "CUDA::curand_static": "hip::hiprand",
    "CUDA::cusparse": "roc::hipsparse",
    "CUDA::cufft": "hip::hipfft",
    "CUDA::cusolver": "roc::hipsolver",
    "CUDA::nvToolsExt": "roctracer::roctx",
    "CUDA::nvrtc": "hiprtc::hiprtc",
}
# package providing each target, found after find_package(hip)
_TARGET_PACKAGES = {
    "roc::hipblas": "hipblas",
    "roc::hipblaslt": "hipblaslt",
    "hip::hiprand": "hiprand",
    "roc::hipsparse": "hipsparse",
    "hip::hipfft": "hipfft",
    "roc::hipsolver": "hipsolver",
}
_CMAKE_VARS = {
    "CUDA_LIBRARIES": "hip::host",
    "CUDA_CUBLAS_LIBRARIES": "roc::hipblas",
    "CUDA_curand_LIBRARY": "hip::hiprand",
    "CUDA_cusparse_LIBRARY": "roc::hipsparse",
    "CUDA_CUFFT_LIBRARIES": "hip::hipfft",
    "CUDA_cusolver_LIBRARY": "roc::hipsolver",
    "CUDA_INCLUDE_DIRS": "",
    "CUDAToolkit_INCLUDE_DIRS": "",
}
_LANG_RE = re.compile(r"\bCUDA\b")


def _cmake_line(line: str, arch: str) -> tuple[str, str]:
    """One line of CMake translated, with the reason ("" when unchanged)."""
    code, hash_, comment = line.partition("#")
    reasons: list[str] = []
    new = code
    low = code.lower().lstrip()
    is_lang = low.startswith(("project(", "enable_language(")) or "check_language(" in low
    if is_lang and _LANG_RE.search(new):
        new = _LANG_RE.sub("HIP", new)
        reasons.append("the HIP language (CMake >= 3.21)")
    m = re.match(r"(\s*cmake_minimum_required\s*\(\s*VERSION\s+)(\d+)\.(\d+)", new, re.I)
    if m and (int(m.group(2)), int(m.group(3))) < (3, 21):
        new = new[: m.start(2)] + "3.21" + new[m.end(3) :]
        reasons.append("CMake knows the HIP language from 3.21")
    if re.search(r"find_package\s*\(\s*(CUDA|CUDAToolkit)\b", new, re.I):
        new = re.sub(
            r"find_package\s*\(\s*(CUDA|CUDAToolkit)\b[^)]*\)", "find_package(hip REQUIRED)", new, flags=re.I
        )
        reasons.append("the HIP package provides hip::host / hip::device")
    if re.search(r"\bcuda_add_(executable|library)\b", new):
        new = re.sub(r"\bcuda_add_(executable|library)\b", r"add_\1", new)
        reasons.append("FindCUDA's macros -> plain targets (.hip sources are HIP by extension)")
    if "CUDA_SEPARABLE_COMPILATION" in new:
        new = re.sub(r"\bCUDA_SEPARABLE_COMPILATION\s+(ON|TRUE|1|OFF|FALSE|0)\b", "", new, flags=re.I)
        reasons.append("separable compilation: -fgpu-rdc is added to CMAKE_HIP_FLAGS instead")
    if "CUDA_ARCHITECTURES" in new:
        new = re.sub(
            r"\b(CMAKE_)?CUDA_ARCHITECTURES(\s+)(\S+?)(?=\s|\))", rf"\1HIP_ARCHITECTURES\2{arch}", new
        )
        reasons.append(f"CUDA_ARCHITECTURES -> HIP_ARCHITECTURES {arch}")
    if re.search(r"\bCUDA_NVCC_FLAGS\b", new):
        new = re.sub(r"\bCUDA_NVCC_FLAGS\b", "CMAKE_HIP_FLAGS", new)
        reasons.append("nvcc flags -> CMAKE_HIP_FLAGS")
    if "CMAKE_CUDA_" in new:
        new = new.replace("CMAKE_CUDA_", "CMAKE_HIP_")
        reasons.append("CMAKE_CUDA_* -> CMAKE_HIP_*")
    if re.search(r"\bLANGUAGE\s+CUDA\b", new):
        new = re.sub(r"\bLANGUAGE\s+CUDA\b", "LANGUAGE HIP", new)
        reasons.append("source language HIP")
    if "COMPILE_LANGUAGE:CUDA" in new:
        new = new.replace("COMPILE_LANGUAGE:CUDA", "COMPILE_LANGUAGE:HIP")
        reasons.append("generator expressions on the HIP language")
    for old, tgt in CMAKE_TARGETS.items():
        if re.search(rf"{re.escape(old)}\b", new):
            new = re.sub(rf"{re.escape(old)}\b", tgt, new)
            reasons.append(f"{old} -> {tgt}")
    for var, tgt in _CMAKE_VARS.items():
        if "${" + var + "}" in new:
            new = new.replace("${" + var + "}", tgt)
            reasons.append(f"${{{var}}} -> {tgt or 'nothing (hipcc finds its headers)'}")
    if re.search(r"\b[\w./${}-]+\.cu\b(?!h)", new):
        renamed = rename_cuda_paths(new)
        if renamed != new:
            new = renamed
            reasons.append("sources x.cu are written as x.hip")
    if re.search(r"HIP_FLAGS|compile_options\s*\(", new):
        flagged, why = _cmake_flags(new, arch)
        if flagged != new:
            new = flagged
            reasons.append(why)
    if not reasons:
        return line, ""
    if re.search(r"\b(include_directories|target_link_libraries)\s*\(\s*\)", new):
        return "# " + line + "  # hipbot port: hipcc finds the HIP headers itself", "; ".join(reasons)
    return new + hash_ + comment, "; ".join(dict.fromkeys(reasons))


def _cmake_flags(line: str, arch: str) -> tuple[str, str]:
    """nvcc flags in a CMake command: inside its quoted strings, else among its arguments."""
    whys: list[str] = []

    def segment(text: str) -> str:
        new, why = _flag_words(text, arch)
        if why:
            whys.append(why)
        return new

    if '"' in line:
        new = re.sub(r'"([^"]*)"', lambda m: '"' + segment(m.group(1)) + '"', line)
    else:
        new = re.sub(r"\(([^()]*)\)", lambda m: "(" + segment(m.group(1)) + ")", line, count=1)
    return new, "; ".join(whys)


def _packages_needed(text: str) -> list[str]:
    return [pkg for tgt, pkg in _TARGET_PACKAGES.items() if tgt in text]


def translate_cmake(text: str, arch: str) -> BuildFileResult:
    lines = text.split("\n")
    edits: list[BuildEdit] = []
    out: list[str] = []
    for no, line in enumerate(lines, 1):
        new, reason = _cmake_line(line, arch)
        if reason:
            edits.append(BuildEdit(no, line, new, reason))
        out.append(new)
    result = "\n".join(out)
    extra: list[str] = []
    if re.search(r"CUDA_SEPARABLE_COMPILATION\s+(ON|TRUE|1)\b", text, re.I):
        extra.append('string(APPEND CMAKE_HIP_FLAGS " -fgpu-rdc")')
    for pkg in _packages_needed(result):
        if not re.search(rf"find_package\s*\(\s*{pkg}\b", result, re.I):
            extra.append(f"find_package({pkg} REQUIRED)")
    if extra:
        at = _after_project_line(out)
        for k, line in enumerate(extra):
            edits.append(BuildEdit(at + 1, "", line, "the HIP library packages the targets come from"))
            out.insert(at + k, line)
        result = "\n".join(out)
    return BuildFileResult(result, "cmake", edits)


def _after_project_line(lines: list[str]) -> int:
    for i, line in enumerate(lines):
        if re.match(r"\s*(find_package\s*\(\s*hip\b|project\s*\()", line, re.I):
            depth = 0
            for j in range(i, len(lines)):
                depth += lines[j].count("(") - lines[j].count(")")
                if depth <= 0:
                    return j + 1
    return 0


# --------------------------------------------------------------------------------------------------
# Makefiles and shell scripts

_NVCC_WORD = re.compile(r"(?:\S*/)?\bnvcc\b")


def _flag_words(line: str, arch: str) -> tuple[str, str]:
    """A line's nvcc flags translated in place (quotes kept); the reason text."""
    lead = line[: len(line) - len(line.lstrip())]
    trail = line[len(line.rstrip()) :]
    body = line.strip()
    words = body.split()
    quote = ""
    if words and words[0][:1] in "\"'" and words[-1][-1:] == words[0][:1]:
        quote = words[0][0]
    if quote:
        words[0], words[-1] = words[0][1:], words[-1][:-1]
    flags = translate_flags(words, arch)
    if flags.args == words:
        return line, ""
    text = " ".join(flags.args)
    if quote:
        text = quote + text + quote
    reason = (
        "; ".join(f"{n.flag} -> {n.replacement or 'dropped'} ({n.reason})" for n in flags.notes) or "paths"
    )
    return lead + text + trail, reason


def _split_make_comment(line: str) -> tuple[str, str]:
    m = re.search(r"(?<!\\)#", line)
    return (line, "") if m is None else (line[: m.start()], line[m.start() :])


def translate_make(text: str, arch: str, kind: str = "make") -> BuildFileResult:
    """Makefile or shell script: ``nvcc`` -> ``hipcc``, its flags translated, ``x.cu`` -> ``x.hip``."""
    edits: list[BuildEdit] = []
    out: list[str] = []
    for no, line in enumerate(text.split("\n"), 1):
        code, comment = _split_make_comment(line)
        if not code.strip() or (kind == "shell" and code.lstrip().startswith("echo")):
            out.append(line)
            continue
        reasons = []
        new = code
        if _NVCC_WORD.search(new):
            new = _NVCC_WORD.sub("hipcc", new)
            reasons.append("nvcc -> hipcc")
        flagged, why = _flag_words(new, arch)
        if flagged != new:
            new = flagged
            reasons.append(why)
        if reasons:
            new += comment
            edits.append(BuildEdit(no, line, new, "; ".join(reasons)))
            out.append(new)
        else:
            out.append(line)
    return BuildFileResult("\n".join(out), kind, edits)


def translate_build_file(path: Path, text: str, arch: str) -> BuildFileResult | None:
    kind = build_kind(path)
    if kind == "cmake":
        return translate_cmake(text, arch)
    if kind == "make":
        return translate_make(text, arch, "make")
    if kind == "shell" and "nvcc" in text:
        return translate_make(text, arch, "shell")
    return None
