"""Inline PTX of one instruction that HIP can say exactly: the ``asm`` statement becomes the HIP
expression or call with the instruction's semantics (``-fsyntax-only`` passes PTX unassembled,
so the build would fail on it later; AMD GPUs run GCN/CDNA assembly, not PTX).

- Arithmetic, conversions and bit operations with a HIP intrinsic of the same rounding
  (``fma.rn.f32`` -> ``fmaf``, ``div.rn.f32`` -> ``/``, ``cvt.rni.s32.f32`` ->
  ``__float2int_rn``, ``bfe``/``bfi``/``prmt`` as shim functions with the ISA's semantics ...).
- Special registers read with ``mov`` (``%tid.x`` -> ``threadIdx.x``, ``%laneid`` -> ``__lane_id()``,
  ``%clock64`` -> ``clock64()``).
- Global loads and stores through a pointer: the cache hints (``.ca``, ``.cs``, ``.lu``, ``.wb``)
  change nothing the program can see; ``.nc`` is ``__ldg``; ``.cg``, ``.cv`` and ``.wt``, which
  skip the SM's cache, are volatile accesses.
- Fences and the block barrier written without operands (``membar.gl``, ``bar.sync 0``).

An instruction with anything else (a predicate, an offset address, vector operands, several
instructions) is left for the person: the unit then reads "inline PTX at file:line".
"""

from __future__ import annotations

import re
from pathlib import Path
from string import Formatter

from hipbot.agents.port import rocm
from hipbot.agents.port.fixes import (
    Fix,
    UnitState,
    closing_paren,
    insert_after_hip_include,
    shim_include,
    split_top,
)
from hipbot.agents.port.source_fixes import included_files
from hipbot.agents.port.tree import read_text
from hipbot.i18n import N_

DOC_PTX = (
    "PTX ISA (arithmetic, cvt, bfe, prmt, ld/st cache operators, special registers); "
    "HIP/docs/how-to/hip_cpp_language_extensions.rst (inline assembly is GCN/CDNA, not PTX)"
)
_C_TYPE = {
    "f32": "float",
    "f64": "double",
    "s32": "int",
    "u32": "unsigned int",
    "b32": "unsigned int",
    "s64": "long long",
    "u64": "unsigned long long",
    "b64": "unsigned long long",
}


def _ops() -> dict[str, str]:
    """opcode -> the expression of its sources ({1}, {2} ... are the instruction's operands after
    the destination {0}); an expression without {0} = is assigned to the destination."""
    ops: dict[str, str] = {
        "bfe.u32": "__hipbot_ptx_bfe_u32({1}, {2}, {3})",
        "bfe.s32": "__hipbot_ptx_bfe_s32({1}, {2}, {3})",
        "bfi.b32": "__hipbot_ptx_bfi_b32({1}, {2}, {3}, {4})",
        "brev.b32": "__brev({1})",
        "popc.b32": "__popc({1})",
        "prmt.b32": "__hipbot_ptx_prmt_b32({1}, {2}, {3})",
        "fma.rn.f32": "fmaf({1}, {2}, {3})",
        "fma.rn.f64": "fma({1}, {2}, {3})",
        "min.f32": "fminf({1}, {2})",
        "max.f32": "fmaxf({1}, {2})",
        "min.f64": "fmin({1}, {2})",
        "max.f64": "fmax({1}, {2})",
        "abs.f32": "fabsf({1})",
        "abs.f64": "fabs({1})",
        "abs.s32": "abs({1})",
        # hipcc divides and takes square roots correctly rounded (clang's default for HIP); the
        # other rounding modes have no HIP function outside OCML_BASIC_ROUNDED_OPERATIONS builds
        "div.rn.f32": "({1} / {2})",
        "div.rn.f64": "({1} / {2})",
        "rcp.rn.f32": "(1.0f / {1})",
        "sqrt.rn.f32": "sqrtf({1})",
        "sqrt.rn.f64": "sqrt({1})",
        "cvt.rn.f32.s32": "__int2float_rn({1})",
        "cvt.rn.f32.u32": "__uint2float_rn({1})",
        "cvt.rni.s32.f32": "__float2int_rn({1})",
        "cvt.rzi.s32.f32": "__float2int_rz({1})",
        "cvt.rni.u32.f32": "__float2uint_rn({1})",
        "cvt.rzi.u32.f32": "__float2uint_rz({1})",
        "and.b32": "({1} & {2})",
        "or.b32": "({1} | {2})",
        "xor.b32": "({1} ^ {2})",
        "not.b32": "(~{1})",
    }
    for t, prefix in (("f32", "__f"), ("f64", "__d")):
        for op, sign in (("add", "+"), ("sub", "-"), ("mul", "*")):
            ops[f"{op}.{t}"] = f"({{1}} {sign} {{2}})"
            ops[f"{op}.rn.{t}"] = f"{prefix}{op}_rn({{1}}, {{2}})"  # .rn: never fused into an fma
        ops[f"neg.{t}"] = "(-{1})"
    for t in ("s32", "u32", "s64", "u64"):
        ops[f"add.{t}"] = "({1} + {2})"
        ops[f"sub.{t}"] = "({1} - {2})"
        ops[f"mul.lo.{t}"] = "({1} * {2})"
        ops[f"mad.lo.{t}"] = "({1} * {2} + {3})"
    for t in ("s32", "u32"):
        ops[f"min.{t}"] = "min({1}, {2})"
        ops[f"max.{t}"] = "max({1}, {2})"
        ops[f"div.{t}"] = "({1} / {2})"
    for t, c in _C_TYPE.items():
        for cache in ("", ".ca", ".cs", ".lu"):
            ops[f"ld.global{cache}.{t}"] = f"*(const {c}*)({{1}})"
        ops[f"ld.global.nc.{t}"] = f"__ldg((const {c}*)({{1}}))"
        for cache in (".cg", ".cv"):
            ops[f"ld.global{cache}.{t}"] = f"*(const volatile {c}*)({{1}})"
    return ops


def _stores() -> dict[str, str]:
    """opcode -> the statement of a store ({0} the address, {1} the value)."""
    stores = {}
    for t, c in _C_TYPE.items():
        for cache in ("", ".wb", ".cs"):
            stores[f"st.global{cache}.{t}"] = f"*({c}*)({{0}}) = {{1}}"
        for cache in (".cg", ".wt"):
            stores[f"st.global{cache}.{t}"] = f"*(volatile {c}*)({{0}}) = {{1}}"
    return stores


PTX_OPS = _ops()
PTX_STORES = _stores()
MOV = ("mov.u32", "mov.s32", "mov.u64", "mov.b32")
SPECIAL = {
    **{
        f"{reg}.{d}": f"{hip}.{d}" for d in "xyz" for reg, hip in (("tid", "threadIdx"), ("ntid", "blockDim"))
    },
    **{
        f"{reg}.{d}": f"{hip}.{d}"
        for d in "xyz"
        for reg, hip in (("ctaid", "blockIdx"), ("nctaid", "gridDim"))
    },
    "laneid": "__lane_id()",
    "clock": "(unsigned int)clock64()",
    "clock64": "clock64()",
}
NO_OPERANDS = {
    "membar.gl": "__threadfence()",
    "membar.cta": "__threadfence_block()",
    "membar.sys": "__threadfence_system()",
    "bar.sync 0": "__syncthreads()",
    "barrier.sync 0": "__syncthreads()",
}

_ASM = re.compile(r"\b(?:asm|__asm__|__asm)\s*(?:volatile\b\s*|__volatile__\s*)?\(")
_SEMICOLON = re.compile(r"\s*;")
_STRINGS = re.compile(r'^\s*((?:"(?:[^"\\\n]|\\.)*"\s*)+)')
_OPERAND = re.compile(r'^\s*"([=+&]*)([a-z])"\s*\((.+)\)\s*$', re.S)


def _instruction(strings: str) -> str:
    body = "".join(re.findall(r'"((?:[^"\\\n]|\\.)*)"', strings))
    body = re.sub(r"\\[nt]", " ", body).strip()
    body = body[:-1].strip() if body.endswith(";") else body
    return re.sub(r"\s+", " ", body)


def translate_asm(inside: str) -> tuple[str, str] | None:
    """The HIP statement (without ';') for the text inside ``asm( ... )``, and the opcode; None
    when it is not one instruction HIP can say exactly."""
    m = _STRINGS.match(inside)
    if m is None:
        return None
    insn = _instruction(m.group(1))
    if ";" in insn or not insn:
        return None
    rest = inside[m.end() :].strip()
    if rest and not rest.startswith(":"):
        return None
    lists = split_top(rest, 1, len(rest), ":") if rest else []
    if len(lists) > 3 or (len(lists) == 3 and lists[2].strip() not in ("", '"memory"')):
        return None
    operands: list[tuple[bool, str]] = []  # (is an output, the C++ expression)
    for part in lists[:2]:
        for item in split_top(part, 0, len(part), ",") if part.strip() else []:
            om = _OPERAND.match(item)
            if om is None:
                return None
            operands.append((part is lists[0], om.group(3).strip()))
    if not operands:
        return (NO_OPERANDS[insn], insn) if insn in NO_OPERANDS else None
    head, _, args_text = insn.partition(" ")
    refs: list[str] = []
    dest_is_output = False
    for i, arg in enumerate(a.strip() for a in args_text.split(",")) if args_text else ():
        am = re.fullmatch(r"(\[)?%(\d)(\])?", arg)
        if am and bool(am.group(1)) == bool(am.group(3)) and int(am.group(2)) < len(operands):
            is_output, expr = operands[int(am.group(2))]
            dest_is_output = dest_is_output or (i == 0 and is_output)
            refs.append(expr)
            continue
        sm = re.fullmatch(r"%%?([a-z]+(?:\.[xyz])?|clock64)", arg)
        if i > 0 and sm and sm.group(1) in SPECIAL and head in MOV:
            refs.append(SPECIAL[sm.group(1)])
            continue
        return None
    if head in PTX_STORES:
        ok = len(refs) == 2 and not any(out for out, _ in operands)
        return (PTX_STORES[head].format(*refs), head) if ok else None
    if not dest_is_output:
        return None
    if head in MOV:
        return (f"{refs[0]} = {refs[1]}", head) if len(refs) == 2 else None
    spec = PTX_OPS.get(head)
    if spec is None or len(refs) != 1 + len({f for _, f, _, _ in Formatter().parse(spec) if f}):
        return None
    return f"{refs[0]} = {spec.format(*refs)}", head


def rewrite_ptx(text: str) -> tuple[str, list[str]]:
    """Every ``asm`` statement of the text that :func:`translate_asm` can say, rewritten; and
    the opcodes rewritten."""
    out, pos, done = [], 0, []
    for m in _ASM.finditer(text):
        if m.start() < pos:
            continue
        close = closing_paren(text, m.end() - 1)
        if close is None:
            break
        semi = _SEMICOLON.match(text, close + 1)
        found = translate_asm(text[m.end() : close]) if semi else None
        if found is None:
            continue
        statement, op = found
        out.append(text[pos : m.start()] + f"{statement}; /* hipbot port: was PTX {op} */")
        pos = semi.end()
        done.append(op)
    return "".join(out) + text[pos:], done


def ptx_fixes(state: UnitState) -> list[Fix]:
    """One fix per file of the unit with inline PTX that :func:`translate_asm` rewrites."""
    fixes = []
    for rel in included_files(state):
        _, ops = rewrite_ptx(read_text(state.root / rel))
        if not ops:
            continue
        line = shim_include(state, rel)
        fixes.append(
            Fix(
                "inline-ptx",
                N_(
                    "inline PTX in {path} ({ops}) becomes the HIP code with the same semantics",
                    path=str(rel),
                    ops=", ".join(sorted(set(ops))),
                ),
                DOC_PTX,
                rel,
                lambda t, line=line: insert_after_hip_include(rewrite_ptx(t)[0], line),
                new_files=((Path(rocm.SHIM_NAME), rocm.shim_text()),),
            )
        )
    return fixes
