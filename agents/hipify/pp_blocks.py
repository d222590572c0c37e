"""Preprocessor conditional blocks a compiler would skip, for hipify-clang's
``--skip-excluded-preprocessor-conditional-blocks``: code inside them gets only the name renames of
hipify-clang's raw-token pass (no kernel launch, include or call argument rewrite).

Without the include files this can only know the macros the file itself ``#define``s, so a condition
is three-valued: true, false, or unknown (a name the file does not define might come from a header,
or be predefined by the compiler). Only blocks whose condition is known false are excluded;
``#ifdef X`` of a plain name the file never defines is false (as the compiler would see it when no
header defines it either) unless the file includes headers of its own, while names spelled like
predefined macros (``__X``, ``CUDA...``) stay unknown. One pass over the directive lines, so linear in the file size.
"""

from __future__ import annotations

import re

_DIRECTIVE = re.compile(
    r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif|define|undef)\b([^\n]*)", re.MULTILINE
)
_EXPR_TOKEN = re.compile(r"\s*(?:(\d+)[uUlL]*|([A-Za-z_]\w*)|(&&|\|\||==|!=|<=|>=|[!()<>+\-*/%]))")
_COMMENT = re.compile(r"/\*.*?\*/|//.*")


def _predefined_like(name: str) -> bool:
    """Names the compiler or the CUDA headers define (``__CUDACC__``, ``CUDA_VERSION`` ...)."""
    return name.startswith(("__", "CUDA", "CUDART", "CUBLAS", "CUSPARSE", "CUFFT", "CURAND", "CUDNN", "NV"))


class _Expr:
    """A ``#if`` expression over integers with three-valued results (None: unknown)."""

    _BINARY = {
        "||": 1,
        "&&": 2,
        "==": 3,
        "!=": 3,
        "<": 4,
        ">": 4,
        "<=": 4,
        ">=": 4,
        "+": 5,
        "-": 5,
        "*": 6,
        "/": 6,
        "%": 6,
    }

    def __init__(self, text: str, macros: dict[str, str], open_world: bool) -> None:
        self.toks: list[tuple[str, str]] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            m = _EXPR_TOKEN.match(text, pos)
            if m is None:
                raise ValueError(text[pos:])
            if m.group(1) is not None:
                self.toks.append(("num", m.group(1)))
            elif m.group(2) is not None:
                self.toks.append(("id", m.group(2)))
            else:
                self.toks.append(("op", m.group(3)))
            pos = m.end()
        self.i = 0
        self.macros = macros
        self.open_world = open_world

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise ValueError("unexpected end")
        self.i += 1
        return tok

    def value(self) -> int | None:
        v = self.binary(1)
        if self.peek() is not None:
            raise ValueError("trailing tokens")
        return v

    def binary(self, level: int) -> int | None:
        left = self.unary()
        while (tok := self.peek()) is not None and tok[0] == "op" and self._BINARY.get(tok[1], 0) >= level:
            op = self.take()[1]
            right = self.binary(self._BINARY[op] + 1)
            left = _apply(op, left, right)
        return left

    def unary(self) -> int | None:
        kind, text = self.take()
        if kind == "op" and text == "!":
            v = self.unary()
            return None if v is None else int(not v)
        if kind == "op" and text == "-":
            v = self.unary()
            return None if v is None else -v
        if kind == "op" and text == "(":
            v = self.binary(1)
            if self.take() != ("op", ")"):
                raise ValueError("unbalanced")
            return v
        if kind == "num":
            return int(text)
        if kind == "id" and text == "defined":
            paren = self.peek() == ("op", "(")
            if paren:
                self.take()
            kind, name = self.take()
            if paren and self.take() != ("op", ")"):
                raise ValueError("unbalanced")
            return _defined(name, self.macros, self.open_world)
        if kind == "id":
            body = self.macros.get(text)
            if body is not None and body.strip().isdigit():
                return int(body.strip())
            return None  # a name the file does not define to a number: unknown
        raise ValueError(text)


def _apply(op: str, a: int | None, b: int | None) -> int | None:
    if op == "&&":
        if a == 0 or b == 0:
            return 0
        return None if a is None or b is None else 1
    if op == "||":
        if (a is not None and a != 0) or (b is not None and b != 0):
            return 1
        return None if a is None or b is None else 0
    if a is None or b is None:
        return None
    if op in ("/", "%") and b == 0:
        return None
    return {
        "==": lambda: int(a == b),
        "!=": lambda: int(a != b),
        "<": lambda: int(a < b),
        ">": lambda: int(a > b),
        "<=": lambda: int(a <= b),
        ">=": lambda: int(a >= b),
        "+": lambda: a + b,
        "-": lambda: a - b,
        "*": lambda: a * b,
        "/": lambda: int(a / b),
        "%": lambda: a % b,
    }[op]()


def _defined(name: str, macros: dict[str, str], open_world: bool) -> int | None:
    if name in macros:
        return 1
    return None if open_world or _predefined_like(name) else 0


def _condition(kind: str, text: str, macros: dict[str, str], open_world: bool) -> bool | None:
    text = _COMMENT.sub(" ", text).strip()
    if kind in ("ifdef", "ifndef"):
        name = text.split()[0] if text.split() else ""
        v = _defined(name, macros, open_world)
        if v is None:
            return None
        return bool(v) if kind == "ifdef" else not v
    try:
        v = _Expr(text, macros, open_world).value()
    except (ValueError, RecursionError):
        return None
    return None if v is None else bool(v)


def excluded_blocks(source: str, open_world: bool = False) -> list[tuple[int, int]]:
    """Sorted, disjoint (start, end) offsets of the text inside conditional branches known not taken:
    from the line after the branch's directive to the start of the next directive of that group.
    ``open_world``: the file includes headers of its own, which may define any name, so a name the
    file does not define is unknown rather than undefined."""
    macros: dict[str, str] = {}
    # per open #if: (enclosing active?, state) with state "done" (a branch taken), "pending" (none
    # yet, all known false) or "unknown" (an earlier branch may have been taken)
    stack: list[tuple[bool, str]] = []
    active = True
    out: list[tuple[int, int]] = []
    excluded_from = -1
    for m in _DIRECTIVE.finditer(source):
        kind, rest = m.group(1), m.group(2)
        line_end = m.end()
        while source[line_end - 1 : line_end] == "\\" and line_end < len(source):
            nl = source.find("\n", line_end + 1)
            rest += " " + source[line_end + 1 : nl if nl != -1 else len(source)]
            line_end = nl if nl != -1 else len(source)
        rest = rest.replace("\\", " ")
        if kind in ("define", "undef"):
            if active:
                parts = rest.split(None, 1)
                name = re.match(r"[A-Za-z_]\w*", parts[0]) if parts else None
                if name and kind == "define":
                    macros[name.group(0)] = rest[rest.index(name.group(0)) + len(name.group(0)) :]
                elif name:
                    macros.pop(name.group(0), None)
            continue
        was_active = active
        if kind in ("if", "ifdef", "ifndef"):
            stack.append((active, "pending"))
            parent = active
            state = "pending"
        elif not stack:
            continue  # an #else/#elif/#endif without its #if: leave everything as it is
        else:
            parent, state = stack[-1]
        if kind == "endif":
            stack.pop()
            active = parent
        elif kind == "else":
            active = parent and state != "done"
            stack[-1] = (parent, "done" if state == "pending" else state)
        else:  # if / ifdef / ifndef / elif
            if state == "done":
                active = False
            else:
                cond = (
                    _condition("if" if kind == "elif" else kind, rest, macros, open_world)
                    if parent
                    else False
                )
                active = parent and cond is not False
                if cond is True:
                    state = "done"
                elif cond is None:
                    state = "unknown"
                stack[-1] = (parent, state)
        if was_active and not active:
            excluded_from = line_end + 1
        elif not was_active and active and excluded_from >= 0:
            out.append((excluded_from, m.start()))
            excluded_from = -1
    if excluded_from >= 0:
        out.append((excluded_from, len(source)))
    return [(a, b) for a, b in out if a < b]
