"""A linear-time C/C++/CUDA tokenizer for source-to-source rewriting.

It keeps exact offsets so a translator can splice replacements into the original text without
touching formatting. One master regular expression whose alternatives never nest quantifiers, and
whose string/comment alternatives always succeed (an unterminated literal runs to the end of the
line, an unterminated block comment to the end of the file), so every step consumes input and the
whole scan is linear. Raw string literals (``R"d(...)d"``) are closed with ``str.find``.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

# Token kinds
IDENT = "ident"
NUMBER = "number"
STRING = "string"  # "..." with any encoding prefix, and raw strings
CHAR = "char"
COMMENT = "comment"
INCLUDE = "include"  # a whole `#include <x>` / `#include "x"` directive head
DIRECTIVE = "directive"  # `#` + directive name at the start of a line, e.g. `#define`
PUNCT = "punct"

_PREFIX = r"(?:u8|[uUL])?"
_MASTER = re.compile(
    r"""
    (?P<cont>\\\r?\n)
  | (?P<comment>//(?:[^\\\n]|\\[\s\S])*|/\*(?:[^*]|\*(?!/))*(?:\*/|\Z))
  | (?P<include>^[ \t]*\#[ \t]*(?:include_next|include|import)\b[ \t]*(?:<[^>\n]*>|"[^"\n]*"))
  | (?P<directive>^[ \t]*\#[ \t]*[A-Za-z_]*)
  | (?P<raw>"""
    + _PREFIX
    + r"""R"[^()\\ \t\n"]{0,16}\()
  | (?P<string>"""
    + _PREFIX
    + r""""(?:[^"\\\n]|\\[\s\S])*"?)
  | (?P<char>"""
    + _PREFIX
    + r"""'(?:[^'\\\n]|\\[\s\S])*'?)
  | (?P<ident>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<number>\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z]|[0-9A-Za-z_.])*)
  | (?P<punct><<<|>>>|<<=|>>=|->\*|\.\.\.|::|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^!=<>]=|\#\#|[^\sA-Za-z0-9_])
    """,
    re.VERBOSE | re.MULTILINE,
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str
    start: int  # offset in the source
    end: int


class LineIndex:
    """Offset -> (line, column), both 1-based, by binary search over line starts."""

    def __init__(self, source: str) -> None:
        starts = [0]
        find = source.find
        pos = find("\n")
        while pos != -1:
            starts.append(pos + 1)
            pos = find("\n", pos + 1)
        self.starts = starts

    def position(self, offset: int) -> tuple[int, int]:
        line = bisect_right(self.starts, offset)
        return line, offset - self.starts[line - 1] + 1


def tokenize(source: str, *, comments: bool = True) -> Iterator[Token]:
    """Yield the tokens of ``source`` in order (whitespace is skipped, offsets are exact)."""
    pos = 0
    n = len(source)
    search = _MASTER.search
    while pos < n:
        m = search(source, pos)
        if m is None:
            return
        kind = m.lastgroup
        start = m.start()
        end = m.end()
        if kind == "raw":
            delim = source[source.index('"', start) + 1 : end - 1]
            close = source.find(")" + delim + '"', end)
            end = n if close == -1 else close + len(delim) + 2
            kind = STRING
        if kind == "cont" or (kind == COMMENT and not comments):
            pos = end
            continue
        yield Token(kind, source[start:end], start, end)
        pos = end


def include_target(text: str) -> tuple[str, bool, int]:
    """For an INCLUDE token: (header name, angled?, offset of the name's opening delimiter)."""
    for i, ch in enumerate(text):
        if ch in '<"' and i > 0 and text[:i].rstrip().endswith(("include", "include_next", "import")):
            return text[i + 1 : -1], ch == "<", i
    raise ValueError(f"not an include directive: {text!r}")
