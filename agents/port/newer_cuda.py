"""Rules for CUDA APIs that ROCm spells differently or lacks, where HIP can say the same thing.

- Cooperative groups: CUDA 12's member names (``num_threads()`` for ``size()``, a grid's
  ``block_rank()``, ``num_blocks()``, ``block_index()``, ``dim_blocks()``, a block's
  ``dim_threads()``, the older ``group_dim()``, CUDA 12.2's split barrier ``barrier_arrive()``/
  ``barrier_wait()``) are not in ROCm's ``hip_cooperative_groups.h``; ROCm 5's ``thread_block``
  members are not const.
- Graphs: CUDA 12.3 added an ``edgeData`` argument to the calls that add, remove or list a graph's
  edges (the only form in CUDA 13); HIP has the form without it, which is the same call when the
  argument is null.
- Half precision: ``__hmax2``/``__hmin2`` have no HIP function and ``__hmax``/``__hmin`` (and their
  ``_nan`` forms) came with ROCm 5.5: ``hip_compat_fp16.h`` has them with CUDA's semantics.

Each edit covers every use in the file, so one round repairs them all.
"""

from __future__ import annotations

import re
from pathlib import Path

from hipbot.agents.port import rocm
from hipbot.agents.port.compiler import Diag
from hipbot.agents.port.fixes import (
    NO_MEMBER,
    UNDECLARED,
    Fix,
    UnitState,
    closing_paren,
    insert_after_hip_include,
    project_file,
    shim_include,
    split_top,
)
from hipbot.i18n import N_

DOC_GRAPH = (
    "CUDA Runtime API, Graph Management (cudaGraphAddDependencies & co.: edgeData since CUDA 12.3, "
    "may be NULL); HIP/docs/reference (hipGraphAddDependencies)"
)
DOC_HALF = "CUDA Math API, Half Comparison Functions (__hmax, __hmax2: NaN gives the other input, +0 > -0)"

# a receiver before '.member()' / '->member()': names, calls without arguments, subscripts (a
# bounded chain, so a pasted run of 'a.a.a...' costs a linear scan)
_RECEIVER = r"(?:[A-Za-z_][\w:]{0,200}(?:\(\s*\))?(?:\[[^\]\n]{0,200}\])?\s*(?:\.|->)\s*){1,8}"
_ARGUMENT = r"[^()]*(?:\([^()]*\)[^()]*)*"  # one level of parentheses: std::move(token)
_BLOCK_DIM = "dim3(blockDim.x, blockDim.y, blockDim.z)"
# member -> what says the same in HIP ('{recv}' keeps the receiver)
CG_MEMBERS = {
    "num_threads": "{recv}size()",
    "dim_threads": _BLOCK_DIM,
    "group_dim": _BLOCK_DIM,
    "block_rank": "(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z))",
    "num_blocks": "(gridDim.x * gridDim.y * gridDim.z)",
    "block_index": "dim3(blockIdx.x, blockIdx.y, blockIdx.z)",
    "dim_blocks": "dim3(gridDim.x, gridDim.y, gridDim.z)",
    # CUDA 12.2's split barrier: arriving does nothing, waiting is the block's barrier (which every
    # thread reaches after arriving, so the guarantee is the same)
    "barrier_arrive": "0 /* barrier_arrive: the wait below is the barrier */",
    "barrier_wait": "{recv}sync()",
}
_CONST_BLOCK = re.compile(r"\bconst\s+((?:cg|cooperative_groups)\s*::\s*)?thread_block\s*&")


def rule_cooperative_groups(diag: Diag, state: UnitState) -> Fix | None:
    file = project_file(diag, state)
    if file is None:
        return None
    m = NO_MEMBER.search(diag.message)
    if m and m.group(2).startswith("cooperative_groups::") and m.group(1) in CG_MEMBERS:
        name, template = m.group(1), CG_MEMBERS[m.group(1)]
        pattern = re.compile(rf"({_RECEIVER}){name}\s*\({_ARGUMENT}\)")
        return Fix(
            "cooperative-groups",
            N_(
                "{group}::{name}() is not in ROCm's cooperative groups: {hip} says the same",
                group=m.group(2),
                name=name,
                hip=template.format(recv=""),
            ),
            rocm.DOC_CG,
            file,
            lambda text: pattern.sub(lambda mm: template.format(recv=mm.group(1)), text),
        )
    if (
        "has type 'const" in diag.message
        and "thread_block" in diag.message
        and "not marked const" in diag.message
    ):
        return Fix(
            "cooperative-groups",
            N_(
                "ROCm 5's thread_block member functions are not const: the block is passed by plain reference"
            ),
            rocm.DOC_CG,
            file,
            lambda text: _CONST_BLOCK.sub(lambda mm: (mm.group(1) or "") + "thread_block&", text),
        )
    return None


# HIP graph call -> (its argument count, the index of CUDA 12.3's edgeData argument)
GRAPH_EDGES = {
    "hipGraphAddDependencies": (4, 3),
    "hipGraphRemoveDependencies": (4, 3),
    "hipGraphGetEdges": (4, 3),
    "hipGraphNodeGetDependencies": (3, 2),
    "hipGraphNodeGetDependentNodes": (3, 2),
}
_NULL = re.compile(r"\s*(?:nullptr|NULL|0|\(\s*\w+\s*\*\s*\)\s*(?:nullptr|NULL|0))\s*")


def drop_null_edge_data(text: str, name: str) -> str:
    arity, index = GRAPH_EDGES[name]
    out, pos = [], 0
    for m in re.finditer(rf"\b{name}\s*\(", text):
        if m.start() < pos:
            continue
        close = closing_paren(text, m.end() - 1)
        if close is None:
            break
        args = split_top(text, m.end(), close, ",")
        if len(args) == arity + 1 and _NULL.fullmatch(args[index]):
            out.append(text[pos : m.end()] + ",".join(args[:index] + args[index + 1 :]).lstrip() + ")")
            pos = close + 1
    return "".join(out) + text[pos:]


def rule_graph_edges(diag: Diag, state: UnitState) -> Fix | None:
    m = re.match(r"no matching function for call to '(\w+)'", diag.message)
    file = project_file(diag, state)
    if not m or m.group(1) not in GRAPH_EDGES or file is None:
        return None
    name = m.group(1)
    return Fix(
        "graph-edges",
        N_(
            "{name}: CUDA 12.3's edgeData argument, given as null, is the call HIP has without it",
            name=name,
        ),
        DOC_GRAPH,
        file,
        lambda text: drop_null_edge_data(text, name),
    )


FP16_SHIM_NAME = "hip_compat_fp16.h"
FP16_SHIM = """\
// hip_compat_fp16.h: written by `hipbot port`: half-precision max/min with CUDA's semantics
// (a NaN input gives the other input, +0 is greater than -0).
#pragma once
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>

__host__ __device__ inline __half hipbot_hmax(__half a, __half b) {
  float x = __half2float(a), y = __half2float(b);
  return (x > y || (x == y && !__builtin_signbit(x)) || y != y) ? a : b;
}
__host__ __device__ inline __half hipbot_hmin(__half a, __half b) {
  float x = __half2float(a), y = __half2float(b);
  return (x < y || (x == y && __builtin_signbit(x)) || y != y) ? a : b;
}
__host__ __device__ inline __half2 hipbot_hmax2(__half2 a, __half2 b) {
  return __halves2half2(hipbot_hmax(__low2half(a), __low2half(b)), hipbot_hmax(__high2half(a), __high2half(b)));
}
__host__ __device__ inline __half2 hipbot_hmin2(__half2 a, __half2 b) {
  return __halves2half2(hipbot_hmin(__low2half(a), __low2half(b)), hipbot_hmin(__high2half(a), __high2half(b)));
}
#if HIP_VERSION < 50500000
// ROCm < 5.5 has no __hmax/__hmin; the _nan forms give NaN when either input is one.
__host__ __device__ inline bool hipbot_hisnan(__half a) { return __half2float(a) != __half2float(a); }
__host__ __device__ inline __half __hmax(__half a, __half b) { return hipbot_hmax(a, b); }
__host__ __device__ inline __half __hmin(__half a, __half b) { return hipbot_hmin(a, b); }
__host__ __device__ inline __half __hmax_nan(__half a, __half b) { return hipbot_hisnan(a) ? a : hipbot_hisnan(b) ? b : hipbot_hmax(a, b); }
__host__ __device__ inline __half __hmin_nan(__half a, __half b) { return hipbot_hisnan(a) ? a : hipbot_hisnan(b) ? b : hipbot_hmin(a, b); }
#endif
"""
HALF_RENAMED = ("__hmax2", "__hmin2")  # no HIP release has them: the calls are renamed
HALF_ADDED_55 = ("__hmax", "__hmin", "__hmax_nan", "__hmin_nan")


def rule_half_minmax(diag: Diag, state: UnitState) -> Fix | None:
    m = UNDECLARED.search(diag.message)
    file = project_file(diag, state)
    if not m or file is None:
        return None
    name = next(g for g in m.groups() if g)
    if name not in HALF_RENAMED and not (name in HALF_ADDED_55 and state.rocm < (5, 5)):
        return None
    line = shim_include(state, file, FP16_SHIM_NAME)

    def edit(text: str) -> str:
        text = insert_after_hip_include(text, line)
        for old in HALF_RENAMED:
            text = re.sub(rf"\b{old}\s*\(", f"hipbot_{old[2:]}(", text)
        return text

    return Fix(
        "half-minmax",
        N_(
            "{name}: not in HIP for ROCm {target}; {shim} has it with CUDA's semantics",
            name=name,
            target=rocm.version_text(state.rocm),
            shim=FP16_SHIM_NAME,
        ),
        DOC_HALF,
        file,
        edit,
        new_files=((Path(FP16_SHIM_NAME), FP16_SHIM),),
    )
