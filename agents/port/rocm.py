"""The target ROCm version: what the installed hipcc is, when each HIP API appeared (from the
bundled HIPIFY tables), and the ``hip_compat.h`` shim for APIs newer than the target where a
shim is sound.

Shims (each only for targets older than the release that added the real thing):
- ROCm < 6.2: the warp ``*_sync`` functions (``__shfl_sync`` & co., ``__any_sync``, ``__all_sync``,
  ``__ballot_sync``) over HIP's mask-less ones, ``__syncwarp`` and ``__activemask``. The mask is
  ignored, as ROCm 6.2's own versions do for full masks; partial masks are flagged by the lints.
- ROCm < 6.1: cooperative groups ``reduce`` with ``plus``/``less``/``greater``/``bit_and``/
  ``bit_or``/``bit_xor`` over a tile's ``shfl_xor`` (``cooperative_groups/reduce.h``).
- ROCm < 5.4: ``hipDrvGetErrorString``/``hipDrvGetErrorName`` through ``hipGetErrorString``/``Name``.
- Any version: the functions one-instruction inline PTX is rewritten to (``ptx.PTX_OPS``),
  and the ``T**`` templates CUDA's ``cuda_runtime.h`` has and HIP lacks (:data:`VOID_PP_TEMPLATES`:
  ``hipHostAlloc``, ``hipMallocHost``, ``hipMallocPitch``, ``hipHostGetDevicePointer``; the
  two-argument ``hipEventCreate``) for calls a
  cast at the call site cannot reach (the name built by a macro's ``##``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache

from hipbot.agents.hipify import mappings
from hipbot.agents.hipify.compile_check import find_hipcc
from hipbot.errors import HipbotError
from hipbot.i18n import N_

DEFAULT_ROCM = "5.2"
SHIM_NAME = "hip_compat.h"
DOC_WARP = "HIP/docs/how-to/hip_cpp_language_extensions.rst (warp cross-lane functions)"
DOC_CG = "HIP/docs/how-to/hip_runtime_api/cooperative_groups.rst"
DOC_DRV = "HIPIFY/docs/tables/CUDA_Driver_API_functions_supported_by_HIP.md"


def parse_version(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.\d+)?\s*", text)
    if not m:
        raise HipbotError(
            N_("not a ROCm version: {text!r}", text=text),
            hint=N_("give e.g. --rocm 5.2, --rocm 6.3 or --rocm auto"),
        )
    return int(m.group(1)), int(m.group(2))


def version_text(version: tuple[int, int]) -> str:
    """``(5, 2)`` as people write it: ``5.2``."""
    return "{}.{}".format(*version)


@cache
def installed_version() -> tuple[int, int] | None:
    """The HIP version of the installed hipcc (``hipcc --version``: 'HIP version: 5.2.21153-0')."""
    hipcc = find_hipcc()
    if hipcc is None:
        return None
    try:
        out = subprocess.run(
            [hipcc, "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            env={"HIP_PLATFORM": "amd", "PATH": "/usr/bin:/bin"},
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"HIP version:\s*(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def resolve(rocm: str) -> tuple[int, int]:
    """``--rocm``: 'auto' (the installed hipcc, else 5.2) or a version."""
    if rocm == "auto":
        return installed_version() or parse_version(DEFAULT_ROCM)
    return parse_version(rocm)


@dataclass(frozen=True)
class ApiVersion:
    name: str
    added: tuple[int, int]


@cache
def _hip_added() -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for row in mappings.load().rows:
        for name, added in ((row.hip, row.hip_added), (row.roc, row.roc_added)):
            if name and added:
                try:
                    out.setdefault(name, parse_version(".".join(added.split(".")[:2])))
                except HipbotError:
                    continue
    for name in WARP_SYNC:
        out.setdefault(name, (6, 2))
    return out


def added_in(name: str) -> tuple[int, int] | None:
    """The ROCm version that added a HIP/roc API, when the tables know it."""
    return _hip_added().get(name)


WARP_SYNC = (
    "__shfl_sync",
    "__shfl_up_sync",
    "__shfl_down_sync",
    "__shfl_xor_sync",
    "__any_sync",
    "__all_sync",
    "__ballot_sync",
    "__syncwarp",
    "__activemask",
)
CG_REDUCE = ("reduce", "plus", "less", "greater", "bit_and", "bit_or", "bit_xor")
DRV_ERRORS = ("hipDrvGetErrorString", "hipDrvGetErrorName")

_WARP = """\
#if HIP_VERSION < 60200000 && !defined(HIP_ENABLE_WARP_SYNC_BUILTINS)
// ROCm < 6.2 has no *_sync warp functions: the mask-less ones do the same for full masks.
template <typename M, typename T> __device__ inline T __shfl_sync(M, T v, int src, int w = warpSize) { return __shfl(v, src, w); }
template <typename M, typename T> __device__ inline T __shfl_up_sync(M, T v, unsigned int d, int w = warpSize) { return __shfl_up(v, d, w); }
template <typename M, typename T> __device__ inline T __shfl_down_sync(M, T v, unsigned int d, int w = warpSize) { return __shfl_down(v, d, w); }
template <typename M, typename T> __device__ inline T __shfl_xor_sync(M, T v, int m, int w = warpSize) { return __shfl_xor(v, m, w); }
template <typename M> __device__ inline int __any_sync(M, int p) { return __any(p); }
template <typename M> __device__ inline int __all_sync(M, int p) { return __all(p); }
template <typename M> __device__ inline unsigned long long __ballot_sync(M, int p) { return __ballot(p); }
__device__ inline unsigned long long __activemask() { return __ballot(1); }
__device__ inline void __syncwarp(unsigned long long = 0) { __builtin_amdgcn_wave_barrier(); }
#endif
"""
_CG = """\
#if HIP_VERSION < 60100000
#include <hip/hip_cooperative_groups.h>
// ROCm < 6.1 has no cooperative_groups::reduce: a butterfly over the tile's shfl_xor.
namespace cooperative_groups {
template <typename T> struct plus { __device__ T operator()(T a, T b) const { return a + b; } };
template <typename T> struct less { __device__ T operator()(T a, T b) const { return b < a ? b : a; } };
template <typename T> struct greater { __device__ T operator()(T a, T b) const { return a < b ? b : a; } };
template <typename T> struct bit_and { __device__ T operator()(T a, T b) const { return a & b; } };
template <typename T> struct bit_or { __device__ T operator()(T a, T b) const { return a | b; } };
template <typename T> struct bit_xor { __device__ T operator()(T a, T b) const { return a ^ b; } };
template <typename G, typename T, typename Op> __device__ inline T reduce(const G& g, T v, Op op) {
  for (unsigned int o = g.size() / 2; o > 0; o /= 2) v = op(v, g.shfl_xor(v, o));
  return v;
}
}  // namespace cooperative_groups
#endif
"""
_DRV = """\
#if HIP_VERSION < 50400000
// ROCm < 5.4 has no hipDrvGetErrorString/Name: the runtime's strings are the same table.
inline hipError_t hipDrvGetErrorString(hipError_t e, const char** s) { *s = hipGetErrorString(e); return hipSuccess; }
inline hipError_t hipDrvGetErrorName(hipError_t e, const char** s) { *s = hipGetErrorName(e); return hipSuccess; }
#endif
"""
VOID_PP_TEMPLATES = (
    "hipHostAlloc",
    "hipMallocHost",
    "hipMallocPitch",
    "hipHostGetDevicePointer",
    "hipEventCreate",
)
_VOID_PP = """\
#if defined(__cplusplus) && !defined(__HIP_DISABLE_CPP_FUNCTIONS__)
// cuda_runtime.h's C++ templates take any T**; HIP has these with void** only (it has its own
// templates for hipMalloc, hipHostMalloc, hipMallocManaged and hipMallocAsync).
template <class T> inline hipError_t hipHostAlloc(T** p, size_t n, unsigned int f) { return hipHostAlloc((void**)p, n, f); }
template <class T> inline hipError_t hipMallocHost(T** p, size_t n) { return hipMallocHost((void**)p, n); }
template <class T> inline hipError_t hipMallocPitch(T** p, size_t* pitch, size_t w, size_t h) { return hipMallocPitch((void**)p, pitch, w, h); }
template <class T> inline hipError_t hipHostGetDevicePointer(T** d, void* h, unsigned int f) { return hipHostGetDevicePointer((void**)d, h, f); }
// and cudaEventCreate(cudaEvent_t*, unsigned int flags) is cudaEventCreateWithFlags
inline hipError_t hipEventCreate(hipEvent_t* e, unsigned int f) { return hipEventCreateWithFlags(e, f); }
#endif
"""
_PTX = """\
// One-instruction inline PTX rewritten by `hipbot port`, with the PTX ISA's semantics
// (bfe: position and length taken mod 256, bits past bit 31 are 0 for u32 or the sign for s32;
// bfi likewise).
__device__ inline unsigned int __hipbot_ptx_mask(unsigned int n) { return n >= 32 ? ~0u : (1u << n) - 1u; }
__device__ inline unsigned int __hipbot_ptx_bits(unsigned int pos, unsigned int len) {
  pos &= 0xff; len &= 0xff;
  return pos >= 32 ? 0u : (len < 32 - pos ? len : 32 - pos);
}
__device__ inline unsigned int __hipbot_ptx_bfe_u32(unsigned int a, unsigned int pos, unsigned int len) {
  unsigned int n = __hipbot_ptx_bits(pos, len);
  return n == 0 ? 0u : (a >> (pos & 0xff)) & __hipbot_ptx_mask(n);
}
__device__ inline int __hipbot_ptx_bfe_s32(int a, unsigned int pos, unsigned int len) {
  pos &= 0xff; len &= 0xff;
  if (len == 0) return 0;
  unsigned int top = pos + len - 1 > 31 ? 31 : pos + len - 1, n = __hipbot_ptx_bits(pos, len);
  unsigned int sign = ((unsigned int)a >> top) & 1u ? ~__hipbot_ptx_mask(n) : 0u;
  return (int)((n == 0 ? 0u : ((unsigned int)a >> pos) & __hipbot_ptx_mask(n)) | sign);
}
// prmt (default mode): each selector nibble picks a byte of b:a (bits 0-2) and, with bit 3 set,
// replicates that byte's sign instead (__byte_perm reads bits 0-2 only).
__device__ inline unsigned int __hipbot_ptx_prmt_b32(unsigned int a, unsigned int b, unsigned int s) {
  unsigned long long t = ((unsigned long long)b << 32) | a;
  unsigned int r = 0;
  for (int i = 0; i < 4; ++i) {
    unsigned int sel = (s >> (4 * i)) & 0xf, byte = (unsigned int)(t >> (8 * (sel & 7))) & 0xff;
    r |= ((sel & 8) ? ((byte & 0x80) ? 0xffu : 0u) : byte) << (8 * i);
  }
  return r;
}
// bfi: the low bits of a put into b at pos (as many as fit below bit 32); b when none do.
__device__ inline unsigned int __hipbot_ptx_bfi_b32(unsigned int a, unsigned int b, unsigned int pos, unsigned int len) {
  unsigned int n = __hipbot_ptx_bits(pos, len);
  if (n == 0) return b;
  unsigned int mask = __hipbot_ptx_mask(n) << (pos & 0xff);
  return (b & ~mask) | ((a << (pos & 0xff)) & mask);
}
"""


def shim_text() -> str:
    """The whole ``hip_compat.h``: each part is guarded by the HIP version that made it unneeded."""
    return (
        "// hip_compat.h: written by `hipbot port` for APIs newer than the target ROCm.\n"
        "#pragma once\n#include <hip/hip_runtime.h>\n\n"
        + _WARP
        + "\n"
        + _CG
        + "\n"
        + _DRV
        + "\n"
        + _VOID_PP
        + "\n"
        + _PTX
    )


@cache
def local_arch() -> str | None:
    """The first AMD GPU ``rocminfo`` lists (e.g. gfx90a), None without one."""
    exe = shutil.which("rocminfo")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"^\s*Name:\s*(gfx[0-9a-f]+)\s*$", out, re.M)
    return m.group(1) if m else None
