"""nvcc command-line flags -> hipcc flags, shared by Makefiles, shell scripts and CMake flag variables.

Every flag that changes meaning or is dropped yields a note, so that nothing a porter relies on
disappears silently (``--maxrregcount`` has no hipcc counterpart: ``__launch_bounds__`` is HIP's way).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# library flags: CUDA library -> (HIP/ROC library, the package that provides it)
LIBRARIES: dict[str, str] = {
    "cudart": "amdhip64",
    "cudart_static": "amdhip64",
    "cuda": "amdhip64",
    "cublas": "hipblas",
    "cublasLt": "hipblaslt",
    "curand": "hiprand",
    "cusparse": "hipsparse",
    "cufft": "hipfft",
    "cusolver": "hipsolver",
    "nvToolsExt": "roctx64",
    "nvrtc": "hiprtc",
    "nccl": "rccl",
    "cudnn": "MIOpen",
}

_SM = re.compile(r"(?:sm|compute)_(?:\d+|\$)")
_DROPPED_WITH_VALUE = {
    "-ccbin",
    "--compiler-bindir",
    "-Xptxas",
    "--ptxas-options",
    "-Xnvlink",
    "-code",
    "--gpu-code",
}
_DROPPED = {
    "--expt-relaxed-constexpr": "clang allows constexpr calls across host/device by default",
    "--expt-extended-lambda": "clang accepts __device__ lambdas without a flag",
    "--extended-lambda": "clang accepts __device__ lambdas without a flag",
    "-Wno-deprecated-gpu-targets": "nvcc-only warning switch",
    "-src-in-ptx": "no PTX on AMD",
    "--resource-usage": "nvcc-only report; hipcc -Rpass-analysis=kernel-resource-usage is close",
    "-cudart=static": "the HIP runtime is one shared library",
    "--cudart=static": "the HIP runtime is one shared library",
    "-cudart=shared": "the HIP runtime is one shared library",
}
_RENAMED = {
    "--use_fast_math": "-ffast-math",
    "-use_fast_math": "-ffast-math",
    "-rdc=true": "-fgpu-rdc",
    "--relocatable-device-code=true": "-fgpu-rdc",
    "-rdc=false": "-fno-gpu-rdc",
    "--relocatable-device-code=false": "-fno-gpu-rdc",
    "-lineinfo": "-gline-tables-only",
    "--generate-line-info": "-gline-tables-only",
    "-G": "-g",
    "--device-debug": "-g",
    "-x=cu": "-x hip",
}


@dataclass(frozen=True)
class FlagNote:
    flag: str
    replacement: str
    reason: str


@dataclass
class Flags:
    args: list[str]
    notes: list[FlagNote]


def _offload(arch: str) -> str:
    return f"--offload-arch={arch}"


def translate_flags(tokens: list[str], arch: str) -> Flags:
    """Translate nvcc flags (already split into words) to hipcc's. Words that are not flags
    (files, make variables) pass through; ``.cu`` files become ``.hip`` (the layout ``--o-dir`` uses)."""
    out: list[str] = []
    notes: list[FlagNote] = []
    arch_done = False
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        step = 1
        if tok in ("-arch", "--gpu-architecture", "-gencode", "--generate-code") and nxt is not None:
            tok, step = f"{tok}={nxt}", 2
        head, _, value = tok.partition("=")
        is_arch = head in ("-arch", "--gpu-architecture", "-gencode", "--generate-code") and value
        if is_arch and (_SM.search(value) or value in ("native", "all", "all-major")):
            if not arch_done:
                out.append(_offload(arch))
                notes.append(FlagNote(tok, _offload(arch), "CUDA compute capability -> the AMD GPU target"))
                arch_done = True
            else:
                notes.append(FlagNote(tok, "", "one --offload-arch covers every CUDA architecture"))
            i += step
            continue
        if head in _DROPPED_WITH_VALUE:
            if not value and nxt is not None:
                step = 2
                tok = f"{tok} {nxt}"
            notes.append(FlagNote(tok, "", "nvcc/ptxas-only option, no hipcc counterpart"))
        elif head in ("-maxrregcount", "--maxrregcount"):
            if not value and nxt is not None:
                step, tok = 2, f"{tok} {nxt}"
            notes.append(
                FlagNote(
                    tok,
                    "",
                    "hipcc has no register cap flag; use __launch_bounds__(threads, min-blocks) on the kernel",
                )
            )
        elif head in ("-Xcompiler", "--compiler-options") or tok.startswith("-Xcompiler="):
            payload = value
            if not payload and nxt is not None:
                payload, step = nxt, 2
            host = [p for p in payload.strip("\"'").split(",") if p]
            out.extend(host)
            notes.append(
                FlagNote(f"{head} {payload}", " ".join(host), "hipcc takes host compiler flags directly")
            )
        elif tok in _RENAMED:
            out.extend(_RENAMED[tok].split())
            notes.append(FlagNote(tok, _RENAMED[tok], "hipcc spelling"))
        elif tok == "-dc" or tok == "--device-c":
            out += ["-fgpu-rdc", "-c"]
            notes.append(FlagNote(tok, "-fgpu-rdc -c", "relocatable device code"))
        elif tok == "-x" and nxt == "cu":
            out += ["-x", "hip"]
            step = 2
        elif tok in _DROPPED:
            notes.append(FlagNote(tok, "", _DROPPED[tok]))
        elif tok.startswith("-l") and tok[2:] in LIBRARIES:
            new = "-l" + LIBRARIES[tok[2:]]
            out.append(new)
            notes.append(FlagNote(tok, new, f"{tok[2:]} -> {LIBRARIES[tok[2:]]}"))
        elif tok == "--std" and nxt is not None:
            out.append(f"-std={nxt}")
            step = 2
        else:
            out.append(rename_cuda_paths(tok))
        i += step
    return Flags(out, notes)


_CUDA_FILE = re.compile(r"(?<![\w.])([\w./${}()-]*?)\.cu\b(?!h)")


def rename_cuda_paths(word: str) -> str:
    """``/usr/local/cuda`` -> ``/opt/rocm``; ``x.cu`` -> ``x.hip``."""
    word = re.sub(r"/usr/local/cuda(?:-[\d.]+)?", "/opt/rocm", word)
    return _CUDA_FILE.sub(lambda m: f"{m.group(1)}.hip", word)
