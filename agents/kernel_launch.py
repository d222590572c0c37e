"""``kernel<<<grid, block, shmem, stream>>>(args)`` -> ``hipLaunchKernelGGL(...)``, as hipify-clang
writes it: ``HIP_KERNEL_NAME(...)`` around template kernels, ``dim3(...)`` around the grid and block
unless already written as ``dim3(...)``, ``0`` for an omitted shared-memory size or stream."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hipbot.agents.cpp_tokens import COMMENT, IDENT, Token

_OPEN = {"(": 1, "[": 1, "{": 1}
_CLOSE = {")": 1, "]": 1, "}": 1}


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


def _prev(tokens: list[Token], i: int) -> int:
    i -= 1
    while i >= 0 and tokens[i].kind == COMMENT:
        i -= 1
    return i


def _next(tokens: list[Token], i: int) -> int:
    i += 1
    while i < len(tokens) and tokens[i].kind == COMMENT:
        i += 1
    return i


def _kernel_start(tokens: list[Token], i: int) -> tuple[int, bool]:
    """Index of the first token of the kernel expression that ends just before ``tokens[i]``."""
    j = _prev(tokens, i)
    templated = False
    if j >= 0 and tokens[j].text in (">", ">>"):
        depth = 0
        while j >= 0:
            t = tokens[j].text
            if t == ">":
                depth += 1
            elif t == ">>":
                depth += 2
            elif t == "<":
                depth -= 1
                if depth == 0:
                    break
            elif t in (";", "{", "}"):
                return -1, False
            j -= 1
        j = _prev(tokens, j)
        templated = True
    elif j >= 0 and tokens[j].text == ")":
        depth = 0
        while j >= 0:
            t = tokens[j].text
            depth += t == ")"
            depth -= t == "("
            if depth == 0:
                break
            j -= 1
        return j, False
    if j < 0 or tokens[j].kind != IDENT:
        return -1, False
    # qualified names and member access: ns::kernel, obj.kernel, ptr->kernel
    while True:
        k = _prev(tokens, j)
        if k >= 0 and tokens[k].text in ("::", ".", "->"):
            m = _prev(tokens, k)
            if m >= 0 and tokens[m].kind == IDENT:
                j = m
                continue
            if tokens[k].text == "::":
                j = k
        return j, templated


def parse_launch(tokens: list[Token], i: int) -> Launch:
    """Parse the launch whose ``<<<`` is ``tokens[i]``."""
    open_tok = tokens[i]
    k0, templated = _kernel_start(tokens, i)
    if k0 < 0:
        raise LaunchError("'<<<' without a kernel name before it", open_tok.start)
    kernel = (tokens[k0].start, tokens[_prev(tokens, i)].end)
    config: list[tuple[int, int]] = []
    depth = 0
    j = i + 1
    arg_first = None
    arg_last = None
    n = len(tokens)
    while True:
        if j >= n:
            raise LaunchError("unbalanced '<<<': no matching '>>>'", open_tok.start)
        t = tokens[j]
        text = t.text
        if t.kind == COMMENT:
            j += 1
            continue
        if depth == 0 and text in (">>>", ","):
            if arg_first is None:
                raise LaunchError("empty kernel launch configuration argument", t.start)
            config.append((tokens[arg_first].start, tokens[arg_last].end))
            arg_first = arg_last = None
            if text == ">>>":
                break
            j += 1
            continue
        if text in _OPEN:
            depth += 1
        elif text in _CLOSE:
            depth -= 1
            if depth < 0:
                raise LaunchError("unbalanced '<<<': no matching '>>>'", open_tok.start)
        elif text in (";", "<<<") and depth == 0:
            raise LaunchError("unbalanced '<<<': no matching '>>>'", open_tok.start)
        if arg_first is None:
            arg_first = j
        arg_last = j
        j += 1
    if not 2 <= len(config) <= 4:
        raise LaunchError(
            f"a kernel launch takes 2 to 4 configuration arguments, not {len(config)}", open_tok.start
        )
    p = _next(tokens, j)
    if p >= n or tokens[p].text != "(":
        raise LaunchError("kernel launch '>>>' is not followed by an argument list", tokens[j].start)
    depth = 0
    q = p
    while q < n:
        text = tokens[q].text
        if text in _OPEN:
            depth += 1
        elif text in _CLOSE:
            depth -= 1
            if depth == 0:
                break
        q += 1
    if q >= n:
        raise LaunchError("kernel launch argument list is not closed", tokens[p].start)
    first, last = _next(tokens, p), _prev(tokens, q)
    args = (tokens[p].end, tokens[q].start) if first < q else None
    if args is not None:
        args = (tokens[first].start, tokens[last].end)
    return Launch(tokens[k0].start, tokens[q].end, kernel, config, args, templated)


def hip_launch_text(launch: Launch, render: Callable[[int, int], str], kernel_is_template: bool) -> str:
    """The ``hipLaunchKernelGGL(...)`` call for a parsed launch; ``render`` gives translated text."""
    kern = render(*launch.kernel).strip()
    if launch.templated or kernel_is_template:
        kern = "HIP_KERNEL_NAME(" + kern.replace("cub::", "hipcub::") + ")"
    parts = [kern]
    for n, rng in enumerate(launch.config):
        text = render(*rng).strip()
        if n < 2 and not text.startswith("dim3("):
            text = f"dim3({text})"
        parts.append(text)
    while len(parts) < 5:
        parts.append("0")
    if launch.args is not None:
        parts.append(render(*launch.args).strip())
    return "hipLaunchKernelGGL(" + ", ".join(parts) + ")"
