"""The translator's kernel-launch pass (``translator``): once the scan has collected each ``<<<``
and the file's template kernels, every launch is parsed (``kernel_launch``) and, with
``hip_kernel_execution_syntax``, rewritten to ``hipLaunchKernelGGL(...)`` (otherwise only a spaced
``< < <`` is closed up). A launch inside a macro whose kernel is a macro parameter is rewritten at
each use of the macro instead."""

from __future__ import annotations

import re
from bisect import bisect_left
from typing import TYPE_CHECKING

from hipbot.agents.hipify.call_rewrites import call_args
from hipbot.agents.hipify.cpp_tokens import IDENT, Token, TokenWindow
from hipbot.agents.hipify.kernel_launch import (
    Launch,
    LaunchError,
    hip_launch_call,
    hip_launch_text,
    parse_launch,
    prev_text,
    statement_line_start,
)
from hipbot.agents.hipify.report import CHECK_EVERY
from hipbot.i18n import Joined

if TYPE_CHECKING:
    from hipbot.agents.hipify.translator import Translator

_TEMPLATE_WORD = re.compile(r"\btemplate\b")
_TEMPLATE_LOOKBACK = 4096  # how far before ``__global__`` its ``template <...>`` head is looked for
_IDENT = re.compile(r"[A-Za-z_]\w*")
_DEFINED_HERE = re.compile(r"#[ \t]*define[ \t]+$")
_CALL_HEAD = re.compile(r"(?<![\w$])([A-Za-z_$][\w$]*+)[ \t]*\(")


def template_kernel(src: str, tok: Token) -> str | None:
    """Name of the kernel declared by ``__global__`` at ``tok`` if it is a template."""
    floor = max(0, tok.start - _TEMPLATE_LOOKBACK)
    begin = max(
        src.rfind(";", floor, tok.start),
        src.rfind("{", floor, tok.start),
        src.rfind("}", floor, tok.start),
    )
    if not _TEMPLATE_WORD.search(src, max(begin + 1, floor), tok.start):
        return None
    win = TokenWindow(src, tok.end)
    for k in range(64):
        t = win.get(k)
        if t is None or t.text in (";", "{", "}"):
            return None
        if t.text == "(":
            prev = win.get(k - 1)
            return prev.text if prev is not None and prev.kind == IDENT else None
    return None


def _macro_launches(
    tr: Translator,
    macros: dict[str, tuple[Launch, tuple[str, list[str], int]]],
    skipped: list[tuple[int, int]],
    template_kernels: set[str],
) -> list[tuple[int, int, str]]:
    """``#define L(k, g, b, ...) k<<<g, b>>>(__VA_ARGS__)`` used as ``L(kern, g, b, x)``: each use
    becomes ``hipLaunchKernelGGL(kern, dim3(g), dim3(b), 0, 0, x)``; the definition stays.
    ``macros``: each macro's first launch of a parameter; one pass finds the uses of them all."""
    src = tr.src
    starts = [a for a, _ in skipped]
    out = []
    for n, m in enumerate(_CALL_HEAD.finditer(src)):
        if not n % CHECK_EVERY:
            tr.deadline.check()
        entry = macros.get(m.group(1))
        at = m.start()
        if entry is None or at < entry[1][2]:
            continue
        if _DEFINED_HERE.search(src, max(0, at - 64), at):
            continue  # the macro defined again, not used
        launch, (_name, params, _end) = entry
        k = bisect_left(starts, at + 1) - 1
        if k >= 0 and skipped[k][0] <= at < skipped[k][1]:
            continue
        win = tr.tokens.view(at)
        call = call_args(win, 0) if win.index_at(at) == 0 else None
        if call is None:
            continue
        close, arg_ranges = call
        values = [tr.render(win.get(a).start, win.get(b).end).strip() for a, b in arg_ranges]
        mapping = dict(zip([p for p in params if p != "..."], values, strict=False))
        if params and params[-1] == "...":
            mapping["__VA_ARGS__"] = ", ".join(values[len(params) - 1 :])

        def subst(text: str, mapping: dict[str, str] = mapping) -> str:
            return _IDENT.sub(lambda mm: mapping.get(mm.group(0), mm.group(0)), text)

        kernel = subst(src[launch.kernel[0] : launch.kernel[1]])
        config = [subst(src[a:b]) for a, b in launch.config]
        args = subst(src[launch.args[0] : launch.args[1]]) if launch.args else None
        base = kernel.split("<")[0].split("::")[-1].strip()
        templated = "<" in kernel or base in template_kernels
        out.append((at, win.get(close).end, hip_launch_call(kernel, config, args, templated)))
    return out


def rewrite_launches(
    tr: Translator, launches: list[int], template_kernels: set[str], skipped: list[tuple[int, int]]
) -> None:
    """Parse the launches at ``launches`` (offsets of their ``<<<``) and add their rewrites to
    ``tr.edits``, dropping the edits inside a rewritten launch (its new text carries them); a launch
    that does not close is reported in ``tr.report.errors``."""
    hip_syntax = tr.opt.hip_kernel_execution_syntax
    new_edits = []
    last_end = -1
    src = tr.src
    # per macro name, its first launch of a parameter: later ones (and redefinitions) would
    # only yield edits the first one's already cover
    macros: dict[str, tuple[Launch, tuple[str, list[str], int]]] = {}
    for n, pos in enumerate(launches):
        if not n % CHECK_EVERY:
            tr.deadline.check()
        win = tr.tokens.view(statement_line_start(src, pos, tr.lines))
        at = win.index_at(pos)
        if src[pos : pos + 3] != "<<<" and prev_text(win, at) == "operator":
            continue  # 'operator<< <T>(...)': a template operator, not a launch
        try:
            launch = parse_launch(win, at)
        except LaunchError as exc:
            line, col = tr.lines.position(exc.offset)
            where = f"{tr.report.filename}:{line}:{col}"
            tr.report.errors.append(Joined(": ", [where, exc.args[0]]))
            continue
        tr.report.kernel_launches += 1
        tr.report.by_type["kernel_launch"] += 1
        if launch.spaced and not hip_syntax:
            new_edits.append((launch.open[0], launch.open[1], "<<<"))
            new_edits.append((launch.close[0], launch.close[1], ">>>"))
        if not hip_syntax or launch.start < last_end:
            continue
        kernel_text = src[launch.kernel[0] : launch.kernel[1]].strip()
        macro = tr.logical_lines.macro_around(pos)
        if macro is not None and kernel_text in macro[1]:
            # the kernel is a macro parameter: like hipify-clang, rewrite each use of the macro
            macros.setdefault(macro[0], (launch, macro))
            continue
        base = kernel_text.split("<")[0].split("::")[-1].strip()
        text = hip_launch_text(launch, tr.render, base in template_kernels)
        new_edits.append((launch.start, launch.end, text))
        last_end = launch.end
    if macros:
        new_edits.extend(_macro_launches(tr, macros, skipped, template_kernels))
    if new_edits:
        new_edits.sort(key=lambda e: (e[0], e[1]))
        kept = []
        j = 0
        for e in tr.edits:  # drop the edits a rewritten launch already carries
            while j < len(new_edits) and new_edits[j][1] <= e[0]:
                j += 1
            if j < len(new_edits) and new_edits[j][0] <= e[0] < new_edits[j][1] and e[1] <= new_edits[j][1]:
                continue
            kept.append(e)
        tr.edits = sorted(kept + new_edits, key=lambda e: (e[0], e[1]))
