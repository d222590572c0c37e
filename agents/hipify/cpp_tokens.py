"""A linear-time C/C++/CUDA tokenizer for source-to-source rewriting.

It keeps exact offsets so a translator can splice replacements into the original text without
touching formatting. One master regular expression whose alternatives never nest quantifiers, and
whose string/comment alternatives always succeed (an unterminated literal runs to the end of the
line, an unterminated block comment to the end of the file), so every step consumes input and the
whole scan is linear. Raw string literals (``R"d(...)d"``) are closed with ``str.find``.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
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


def tokenize(source: str, pos: int = 0, *, comments: bool = True) -> Iterator[Token]:
    """Yield the tokens of ``source`` from offset ``pos`` on (whitespace skipped, offsets exact)."""
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


_OPENERS = frozenset("([{")
_CLOSERS = frozenset(")]}")


class TokenWindow:
    """Tokens from an offset on, produced only as far as they are looked at: local parsing (a call's
    arguments, a kernel launch) costs the size of what it reads, not of the file. ``meter`` (one
    shared counter) adds up that reading, for :class:`Tokens`."""

    def __init__(self, source: str, pos: int = 0, meter: list[int] | None = None) -> None:
        self._it = tokenize(source, pos)
        self._toks: list[Token] = []
        self._done = False
        self._meter = meter if meter is not None else [0]

    def get(self, i: int) -> Token | None:
        toks = self._toks
        while len(toks) <= i and not self._done:
            tok = next(self._it, None)
            self._meter[0] += 1
            if tok is None:
                self._done = True
            else:
                toks.append(tok)
        return toks[i] if 0 <= i < len(toks) else None

    def index_at(self, offset: int) -> int:
        """Index of the token that starts at ``offset`` (-1 if none does)."""
        i = 0
        while (tok := self.get(i)) is not None and tok.start <= offset:
            if tok.start == offset:
                return i
            i += 1
        return -1

    def partner(self, i: int) -> int:
        """Index of the bracket that closes (or opens) the one at ``i``, any kind counting as a
        level; -1 when there is none in the window."""
        tok = self.get(i)
        if tok is None or (tok.text not in _OPENERS and tok.text not in _CLOSERS):
            return -1
        step = 1 if tok.text in _OPENERS else -1
        depth = 0
        j = i
        while (t := self.get(j)) is not None:
            self._meter[0] += 1
            depth += (t.text in _OPENERS) - (t.text in _CLOSERS)
            if depth == 0:
                return j
            j += step
        return -1


def _partners(toks: list[Token]) -> list[int]:
    """For each bracket token the index of its partner, -1 for none (and for other tokens). Any
    kind counts as a level, as :meth:`TokenWindow.partner` counts them."""
    partner = [-1] * len(toks)
    stack: list[int] = []
    for i, tok in enumerate(toks):
        if tok.kind != PUNCT:
            continue
        if tok.text in _OPENERS:
            stack.append(i)
        elif tok.text in _CLOSERS and stack:
            j = stack.pop()
            partner[i], partner[j] = j, i
    return partner


class TokenList:
    """Every token of a source (tokenized once), with each bracket's partner: a parser reading from
    any token costs what it reads, and skips a bracketed group in one step."""

    def __init__(self, source: str, tick: Callable[[], None] | None = None) -> None:
        self.toks = []
        for n, tok in enumerate(tokenize(source)):
            if tick is not None and not n % 4096:
                tick()  # e.g. a deadline's check
            self.toks.append(tok)
        self.starts = [t.start for t in self.toks]
        self.partners = _partners(self.toks)

    def view(self, offset: int) -> TokenView:
        """The tokens from the first one that starts at or after ``offset``."""
        return TokenView(self, bisect_left(self.starts, offset))


class TokenView:
    """A :class:`TokenList` seen from one token on, indexed from 0 there, as :class:`TokenWindow`
    is (index -1 and below are None)."""

    def __init__(self, tokens: TokenList, base: int) -> None:
        self._tokens = tokens
        self._base = base

    def get(self, i: int) -> Token | None:
        k = self._base + i
        toks = self._tokens.toks
        return toks[k] if i >= 0 and k < len(toks) else None

    def index_at(self, offset: int) -> int:
        """Index of the token that starts at ``offset`` (-1 if none does)."""
        starts = self._tokens.starts
        k = bisect_left(starts, offset)
        return k - self._base if k >= self._base and k < len(starts) and starts[k] == offset else -1

    def partner(self, i: int) -> int:
        """Index of the bracket paired with the one at ``i`` (-1 if none, or it lies before the view)."""
        if i < 0 or self._base + i >= len(self._tokens.toks):
            return -1
        k = self._tokens.partners[self._base + i]
        return k - self._base if k >= self._base else -1


TokenSeq = TokenWindow | TokenView  # what a parser reads: get(i), index_at(offset), partner(i)


class Tokens:
    """Windows on one source for parsing at many places in it (each call, launch or lint): lazy
    :class:`TokenWindow` s, cheap for ordinary files, while the reading they do stays within a
    budget proportional to the source; past it (the same long stretch re-read from many places,
    as in ``k<<<g,b>>>(`` repeated on one line), one :class:`TokenList` of the whole file answers
    every later view. So the total work is linear in the source, whatever it holds."""

    def __init__(self, source: str, tick: Callable[[], None] | None = None) -> None:
        self.source = source
        self.tick = tick  # called every few thousand tokens while the whole file is listed
        self.meter = [0]
        self.budget = len(source) // 2 + 20_000
        self._list: TokenList | None = None

    def view(self, offset: int) -> TokenWindow | TokenView:
        """The tokens from ``offset`` on (from the first token at or after it, once listed)."""
        if self._list is None and self.meter[0] > self.budget:
            self._list = TokenList(self.source, self.tick)
        if self._list is not None:
            return self._list.view(offset)
        return TokenWindow(self.source, offset, self.meter)


_STRING_PREFIX_AHEAD = r"""u8R"|u8"|LR"|uR"|UR"|[uULR]["']"""


def candidate_scanner(
    ident_prefixes: tuple[str, ...], numbers: tuple[str, ...] | None = None
) -> re.Pattern[str]:
    """A regex for ``scan``: it finds only what a caller must look at, in one C-speed pass.

    Each match first consumes, possessively (no backtracking, so linear), a run of text of no
    interest: whitespace, punctuation, numbers and whole identifiers that do not begin with one of
    ``ident_prefixes``. It then matches one token of interest: a comment or string/char literal
    (so that callers can skip them), a preprocessor directive head, ``<<<``, a candidate identifier,
    or (when ``numbers`` lists some) one of those number spellings. ``<< <`` (a launch as some
    editors format it, which nvcc accepts) is found like ``<<<``. So the Python loop runs once per
    interesting token, not once per token. The ``end`` alternative lets a trailing run of such
    text match once, instead of failing and being re-scanned from every later offset (quadratic).
    """
    alts = "|".join(re.escape(p) for p in sorted(ident_prefixes, key=len, reverse=True))
    if numbers:
        nums = "|".join(re.escape(n) for n in sorted(numbers, key=len, reverse=True))
        skip_number = rf"(?!(?:{nums})(?![\w.']))[0-9](?:[eEpP][+-]|[\w.'])*+"
        number_alt = rf"| (?P<number>(?:{nums})(?![\w.']))"
    else:
        skip_number = r"[0-9](?:[eEpP][+-]|[\w.'])*+"
        number_alt = ""
    boring = (
        r"""(?:[^\w$"'/\#<]++"""
        rf"""|(?!{_STRING_PREFIX_AHEAD}|{alts})[A-Za-z$][\w$]*+"""
        rf"""|{skip_number}|/(?![/*])|<(?!<<|<[ \t]+<))*+"""
    )
    return re.compile(
        boring
        + r"""(?:
        (?P<comment>//(?:[^\\\n]|\\[\s\S])*|/\*(?:[^*]|\*(?!/))*(?:\*/|\Z))
      | (?P<raw>(?:u8|[uUL])?R"(?P<delim>[^()\\ \t\n"]{0,16})\([\s\S]*?(?:\)(?P=delim)"|\Z))
      | (?P<string>(?:u8|[uUL])?"(?:[^"\\\n]|\\[\s\S])*"?)
      | (?P<char>(?:u8|[uUL])?'(?:[^'\\\n]|\\[\s\S])*'?)
      | (?P<include>\#[ \t]*(?:include_next|include|import)\b[ \t]*(?:<[^>\n]*>|"[^"\n]*"))
      | (?P<directive>\#[ \t]*[A-Za-z_]*)
      | (?P<launch><<<|<<[ \t]+<(?!<))
      | (?P<ident>(?:"""
        + alts
        + r""")[\w$]*)
        """
        + number_alt
        + r"""
      | (?P<other>[\w$]+)
      | (?P<end>\Z)
        )""",
        re.VERBOSE,
    )


def scan(source: str, scanner: re.Pattern[str]) -> Iterator[Token]:
    """Tokens found by a ``candidate_scanner``: COMMENT, STRING, CHAR, INCLUDE, DIRECTIVE (only at
    the start of a line), IDENT, NUMBER and PUNCT ``<<<``."""
    for m in scanner.finditer(source):
        tok = match_token(source, m)
        if tok is not None:
            yield tok


def match_token(source: str, m: re.Match[str]) -> Token | None:
    """The token a ``candidate_scanner`` match stands for (None for text of no interest)."""
    kind = m.lastgroup
    if kind in ("other", "end"):
        return None
    start, end = m.span(kind)
    if kind in (INCLUDE, DIRECTIVE):
        line_start = source.rfind("\n", 0, start) + 1
        if source[line_start:start].strip(" \t"):
            return None  # '#' inside a line: stringizing, not a directive
    elif kind == "raw":
        kind = STRING
    elif kind == "launch":
        kind = PUNCT
    return Token(kind, source[start:end], start, end)


def include_target(text: str) -> tuple[str, bool, int]:
    """For an INCLUDE token: (header name, angled?, offset of the name's opening delimiter)."""
    for i, ch in enumerate(text):
        if ch in '<"' and i > 0 and text[:i].rstrip().endswith(("include", "include_next", "import")):
            return text[i + 1 : -1], ch == "<", i
    raise ValueError(f"not an include directive: {text!r}")
