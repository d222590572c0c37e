"""``kernel<<<grid, block, shmem, stream>>>(args)`` -> ``hipLaunchKernelGGL(...)``, as hipify-clang
writes it: ``HIP_KERNEL_NAME(...)`` around template kernels, ``dim3(...)`` around the grid and block
unless already written as ``dim3(...)``, ``0`` for an omitted shared-memory size or stream."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from hipbot.agents.hipify.cpp_tokens import COMMENT, IDENT, LineIndex, TokenSeq
from hipbot.i18n import N_

_OPEN = {"(": 1, "[": 1, "{": 1}
_CLOSE = {")": 1, "]": 1, "}": 1}
# How far back a kernel's template arguments are looked for (``k<T, Tile<8>><<<``): launches a
# few tokens apart then cost a bounded look each, never a walk back over the file.
MAX_TEMPLATE_TOKENS = 512


class LaunchError(ValueError):
    """A ``<<<`` whose configuration or argument list does not close."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


@dataclass(frozen=True)
class Launch:
    start: int  # offset of the kernel expression
    end: int  # offset just past the closing ')' of the argument list
    kernel: tuple[int, int]  # source range of the kernel expression
    config: list[tuple[int, int]]  # source ranges of the 1-4 configuration arguments
    args: tuple[int, int] | None  # source range of the call arguments, None when there are none
    templated: bool  # explicit template arguments on the kernel name
    open: tuple[int, int] = (0, 0)  # source range of '<<<' (or of a spaced '<< <')
    close: tuple[int, int] = (0, 0)  # source range of '>>>' (or of a spaced '>> >')

    @property
    def spaced(self) -> bool:
        """Written ``<< <`` / ``>> >`` (nvcc takes it, clang does not)."""
        return self.open[1] - self.open[0] != 3 or self.close[1] - self.close[0] != 3


def _prev(win: TokenSeq, i: int) -> int:
    i -= 1
    while (t := win.get(i)) is not None and t.kind == COMMENT:
        i -= 1
    return i


def _next(win: TokenSeq, i: int) -> int:
    i += 1
    while (t := win.get(i)) is not None and t.kind == COMMENT:
        i += 1
    return i


def _text(win: TokenSeq, i: int) -> str:
    t = win.get(i)
    return "" if t is None else t.text


def _kernel_start(win: TokenSeq, i: int) -> tuple[int, bool]:
    """Index of the first token of the kernel expression that ends just before token ``i``."""
    j = _prev(win, i)
    templated = False
    if _text(win, j) in (">", ">>"):
        depth = 0
        floor = j - MAX_TEMPLATE_TOKENS
        while j >= 0:
            if j < floor:
                return -1, False
            t = _text(win, j)
            if t == ">":
                depth += 1
            elif t == ">>":
                depth += 2
            elif t == "<":
                depth -= 1
                if depth == 0:
                    break
            elif t in (";", "{", "}", "<<<", ">>>"):
                return -1, False
            j -= 1
        j = _prev(win, j)
        templated = True
    elif _text(win, j) == ")":
        return win.partner(j), False
    elif _text(win, j) == "]":  # kernels[i]<<<...>>>
        j = _prev(win, win.partner(j))
    tok = win.get(j) if j >= 0 else None
    if tok is None or tok.kind != IDENT:
        return -1, False
    # qualified names and member access: ns::kernel, obj.kernel, ptr->kernel; and names pasted
    # together in a macro body: hist_##type##_kernel
    while True:
        k = _prev(win, j)
        if k >= 0 and _text(win, k) == "##":
            m = _prev(win, k)
            prev = win.get(m) if m >= 0 else None
            if prev is not None and prev.kind == IDENT:
                j = m
                continue
        if k >= 0 and _text(win, k) in ("::", ".", "->"):
            m = _prev(win, k)
            prev = win.get(m) if m >= 0 else None
            if prev is not None and prev.kind == IDENT:
                j = m
                continue
            if _text(win, k) == "::":
                j = k
        return j, templated


def parse_launch(win: TokenSeq, i: int) -> Launch:
    """Parse the launch whose ``<<<`` is token ``i`` of the window."""
    open_tok = win.get(i)
    if open_tok is None:
        raise LaunchError(N_("no '<<<' at this position"), 0)
    k0, templated = _kernel_start(win, i)
    if k0 < 0:
        raise LaunchError(N_("'<<<' without a kernel name before it"), open_tok.start)
    kernel = (win.get(k0).start, win.get(_prev(win, i)).end)
    open_end = open_tok.end
    j = i + 1
    if open_tok.text == "<<":  # '<< <'
        open_end = win.get(j).end
        j += 1
    config: list[tuple[int, int]] = []
    arg_first = arg_last = None
    close = (0, 0)
    while True:
        t = win.get(j)
        if t is None:
            raise LaunchError(N_("unbalanced '<<<': no matching '>>>'"), open_tok.start)
        text = t.text
        if t.kind == COMMENT:
            j += 1
            continue
        if text == ">>" and _text(win, j + 1) == ">":  # '>> >'
            j += 1
            close = (t.start, win.get(j).end)
            text = ">>>"
        elif text == ">>>":
            close = (t.start, t.end)
        if text in (">>>", ","):
            if arg_first is None:
                raise LaunchError(N_("empty kernel launch configuration argument"), t.start)
            config.append((arg_first.start, arg_last.end))
            arg_first = arg_last = None
            if text == ">>>":
                break
            j += 1
            continue
        if text in _OPEN:  # a bracketed group: one step to its partner
            close_at = win.partner(j)
            if close_at < 0:
                raise LaunchError(N_("unbalanced '<<<': no matching '>>>'"), open_tok.start)
            arg_first = arg_first or t
            arg_last = win.get(close_at)
            j = close_at + 1
            continue
        if text in _CLOSE or text in (";", "<<<"):
            raise LaunchError(N_("unbalanced '<<<': no matching '>>>'"), open_tok.start)
        if arg_first is None:
            arg_first = t
        arg_last = t
        j += 1
    if not 2 <= len(config) <= 4:
        raise LaunchError(
            N_("a kernel launch takes 2 to 4 configuration arguments, not {count}", count=len(config)),
            open_tok.start,
        )
    p = _next(win, j)
    paren = win.get(p)
    if paren is None or paren.text != "(":
        raise LaunchError(N_("kernel launch '>>>' is not followed by an argument list"), win.get(j).start)
    q = win.partner(p)
    t = win.get(q) if q >= 0 else None
    if t is None:
        raise LaunchError(N_("kernel launch argument list is not closed"), paren.start)
    first, last = _next(win, p), _prev(win, q)
    args = (win.get(first).start, win.get(last).end) if first < q else None
    return Launch(
        win.get(k0).start, t.end, kernel, config, args, templated, (open_tok.start, open_end), close
    )


def hip_launch_text(launch: Launch, render: Callable[[int, int], str], kernel_is_template: bool) -> str:
    """The ``hipLaunchKernelGGL(...)`` call for a parsed launch; ``render`` gives translated text."""
    config = [render(*rng) for rng in launch.config]
    args = render(*launch.args) if launch.args is not None else None
    return hip_launch_call(render(*launch.kernel), config, args, launch.templated or kernel_is_template)


def hip_launch_call(kernel: str, config: list[str], args: str | None, templated: bool) -> str:
    """``hipLaunchKernelGGL(kernel, dim3(grid), dim3(block), shmem, stream, args...)`` from parts:
    ``HIP_KERNEL_NAME(...)`` around a template kernel, ``dim3(...)`` unless already written so,
    ``0`` for an omitted shared-memory size or stream (``cub::`` is already ``hipcub::`` in ``kernel``)."""
    kern = kernel.strip()
    if templated:
        kern = "HIP_KERNEL_NAME(" + kern + ")"
    parts = [kern]
    for n, text in enumerate(config):
        text = text.strip()
        if n < 2 and not text.startswith("dim3("):
            text = f"dim3({text})"
        parts.append(text)
    while len(parts) < 5:
        parts.append("0")
    if args is not None and args.strip():
        parts.append(args.strip())
    return "hipLaunchKernelGGL(" + ", ".join(parts) + ")"


_FUNCTION_MACRO = re.compile(r"[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)\(([^)]*)\)")


_LOGICAL_LINE_END = re.compile(r"(?<!\\)(?<!\\\r)\n")


class LogicalLines:
    """The source's logical lines (physical lines joined by backslash-newline), found in one pass,
    and the function-like ``#define`` each one is, remembered: asking for the macro around each
    of many launches in one long macro costs a lookup each."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.starts = [0] + [m.end() for m in _LOGICAL_LINE_END.finditer(src)]
        self._macros: dict[int, tuple[str, list[str], int] | None] = {}

    def macro_around(self, pos: int) -> tuple[str, list[str], int] | None:
        """(name, parameters, end offset) of the function-like ``#define`` whose body holds ``pos``."""
        k = bisect_right(self.starts, pos) - 1
        start = self.starts[k]
        if start not in self._macros:
            m = _FUNCTION_MACRO.match(self.src, start)
            end = self.starts[k + 1] - 1 if k + 1 < len(self.starts) else len(self.src)
            params = [p.strip() for p in m.group(2).split(",") if p.strip()] if m else []
            self._macros[start] = (m.group(1), params, end) if m else None
        return self._macros[start]


def statement_line_start(src: str, pos: int, lines: LineIndex) -> int:
    """Where the statement holding the ``<<<`` at ``pos`` begins (just after the last ``;``, ``{``
    or ``}``): a kernel name with template arguments may sit lines above its ``<<<``. The look-back
    is bounded (then the start of the line 4 KiB back), so the scan stays linear."""
    floor = max(0, pos - 4096)
    cut = max(src.rfind(";", floor, pos), src.rfind("{", floor, pos), src.rfind("}", floor, pos))
    if cut >= 0:
        return cut + 1
    return lines.starts[lines.position(floor)[0] - 1]


def prev_text(win: TokenSeq, i: int) -> str:
    """The text of the last non-comment token before ``win.get(i)`` ("" at the start)."""
    while i > 0:
        i -= 1
        t = win.get(i)
        if t is not None and t.kind != COMMENT:
            return t.text
    return ""
