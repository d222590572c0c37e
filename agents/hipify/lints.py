"""AMD porting lints: what hipify translates fine but still breaks or slows down on AMD GPUs.

Token based (``cpp_tokens``), one linear pass per file, no regular expressions on the source.
Each finding names the HIP documentation page it comes from (paths in the HIP docs corpus), so the
bot can cite it. The same rules run on the CUDA input and on the HIP output. The rules and the
name tables they match are in ``lint_rules``; this is the scan that applies them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from hipbot.agents.hipify.cpp_tokens import (
    DIRECTIVE,
    IDENT,
    NUMBER,
    LineIndex,
    Token,
    Tokens,
    TokenSeq,
    TokenWindow,
    candidate_scanner,
    scan,
)
from hipbot.agents.hipify.lint_rules import (
    CG_MISSING,
    FULL_32,
    LANE_WORDS,
    MASK_32_TYPES,
    MASK_FUNCS,
    MASK_RESULT_FUNCS,
    NVIDIA_ONLY,
    RULES,
    TEXTURE_REFERENCE,
)
from hipbot.agents.hipify.report import CHECK_EVERY, NO_DEADLINE, Deadline
from hipbot.i18n import N_, _


@dataclass(frozen=True)
class Lint:
    id: str
    severity: str
    line: int
    col: int
    message: str
    hint: str
    doc: str
    stage: str = "cuda"  # "cuda": found in the input; "hip": in the translation
    filename: str = "<stdin>"
    template: str = ""  # the message before its code and API names were filled in (to translate it)
    args: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict:
        data = asdict(self)
        del data["template"], data["args"]
        return data

    def localized(self) -> tuple[str, str]:
        """The message and hint in the current language (``hipbot.i18n``); the rule id, the code and
        the API names in them are never translated. ``message``/``hint`` stay English (JSON, logs)."""
        message = _(self.template).format(**dict(self.args)) if self.template else self.message
        return message, _(self.hint)

    def format(self) -> str:
        return f"{self.filename}:{self.line}:{self.col}: {self.severity}: [{self.id}] {self.message} ({self.stage})\n  hint: {self.hint}\n  see: {self.doc}"


def _int_value(text: str) -> int | None:
    t = text.lower().rstrip("ul")
    try:
        return int(t, 0)
    except ValueError:
        return None


class _Linter:
    def __init__(
        self,
        source: str,
        filename: str,
        stage: str,
        scanner: re.Pattern[str] | None = None,
        deadline: Deadline = NO_DEADLINE,
    ) -> None:
        self.scanner = scanner
        self.deadline = deadline
        self.source = source
        self.filename = filename
        self.stage = stage
        self.lines = LineIndex(source)
        self.tokens = Tokens(source, deadline.check)
        self.found: list[Lint] = []
        self.seen: set[tuple[str, int]] = set()
        self.mask_vars: set[str] = set()  # variables set to a full 32-bit lane mask

    def add(self, rule_id: str, tok: Token, template: str, **args: str) -> None:
        """A finding at ``tok``: ``template`` (marked with ``N_``) filled with ``args`` (code and API
        names, never translated)."""
        line, col = self.lines.position(tok.start)
        if (rule_id, line) in self.seen:
            return
        self.seen.add((rule_id, line))
        rule = RULES[rule_id]
        message = template.format(**args)
        self.found.append(
            Lint(
                rule_id,
                rule.severity,
                line,
                col,
                message,
                rule.hint,
                rule.doc,
                self.stage,
                self.filename,
                template=template,
                args=tuple(args.items()),
            )
        )

    def line_start(self, offset: int) -> int:
        return self.lines.starts[self.lines.position(offset)[0] - 1]

    def line_text(self, tok: Token) -> str:
        """The token's line, at most _NEAR characters either side of it (a line can be a whole file)."""
        start = max(self.line_start(tok.start), tok.start - _NEAR)
        end = self.source.find("\n", tok.end, tok.end + _NEAR)
        return self.source[start : end if end != -1 else min(len(self.source), tok.end + _NEAR)].lower()

    def run(self) -> list[Lint]:
        src = self.source
        for n, cand in enumerate(scan(src, self.scanner or _SCANNER)):
            if not n % CHECK_EVERY:
                self.deadline.check()
            kind = cand.kind
            text = cand.text
            if kind == DIRECTIVE:
                if text.split("#")[-1].strip() == "define":
                    win = TokenWindow(src, cand.end)
                    macro, value = win.get(0), win.get(1)
                    if macro and value and "warp" in macro.text.lower() and _int_value(value.text) == 32:
                        self.add(
                            "AMD002", macro, N_("macro {name} defines the warp size as 32"), name=macro.text
                        )
                continue
            if kind == NUMBER:
                if text.lower() in FULL_32:
                    self._mask_variable(cand)
                    continue
                if _int_value(text) not in (32, 31, 16, 5):
                    continue
            elif kind != IDENT or not (text in _LINT_WORDS or text.startswith("__nvvm_")):
                continue
            line_start = self.line_start(cand.start)
            win = self.tokens.view(line_start)
            i = win.index_at(cand.start)
            if i < 0:
                continue
            if kind == NUMBER:
                self._number(win, i, cand)
            else:
                self._ident(win, i, cand, line_start)
        self.found.sort(key=lambda x: (x.line, x.col))
        return self.found

    def _ident(self, win: TokenSeq, i: int, t: Token, line_start: int) -> None:
        text = t.text
        prev, nxt = _text(win, i - 1), _text(win, i + 1)
        if text == "__CUDA_ARCH__":
            directive = _DIRECTIVE_BEFORE.match(self.source, line_start, t.start) is not None
            where = "preprocessor condition" if directive else "code"
            self.add(
                "AMD008",
                t,
                N_("__CUDA_ARCH__ tested in {where}; it is undefined under HIP-Clang"),
                where=where,
            )
        elif text in ("asm", "__asm__", "__asm"):
            self._asm(win, i, t)
        elif text in MASK_FUNCS and nxt == "(":
            self._mask_arg(win, i, t)
            if text in NVIDIA_ONLY:
                self.add("AMD006", t, N_("{api} is NVIDIA-only"), api=text)
        elif text in NVIDIA_ONLY or text.startswith("__nvvm_"):
            self.add("AMD006", t, N_("{api} is NVIDIA-only"), api=text)
        elif text in TEXTURE_REFERENCE and (text not in ("texture", "surface") or nxt == "<"):
            self.add("AMD007", t, N_("{api}: texture/surface reference API"), api=text)
        elif text in CG_MISSING and (prev == "::" or nxt in ("(", "<")):
            self.add("AMD009", t, N_("cooperative groups '{api}' is not available in HIP"), api=text)
        elif text == "wmma" and (prev == "::" or nxt == "::"):
            self.add("AMD011", t, N_("warp matrix functions (wmma) are not available in HIP"))
        elif text == "warpSize":
            self._warp_size(win, i, t, prev, nxt)
        elif text == "__shared__":
            self._shared(win, i)
        elif text == "__launch_bounds__" and nxt == "(":
            depth, k = 0, i + 1
            while (tok := win.get(k)) is not None and k < i + 64:
                depth += tok.text == "("
                depth -= tok.text == ")"
                if depth == 0:
                    break
                if depth == 1 and tok.text == ",":
                    self.add("AMD012", t, N_("__launch_bounds__ with a second argument"))
                    break
                k += 1
        if text in MASK_RESULT_FUNCS and nxt == "(":
            self._mask_result(win, i, t)

    def _mask_variable(self, t: Token) -> None:
        """``int mask = 0xffffffff;``: remember the name, so that ``__any_sync(mask, p)`` is flagged.
        Reads only the text around the number (no tokenizing: masks are common in kernels)."""
        src = self.source
        m = _ASSIGNED.search(src, max(self.line_start(t.start), t.start - _NEAR), t.start)
        if m is not None and src[t.end : t.end + 8].lstrip()[:1] in (";", ","):
            self.mask_vars.add(m.group(1))

    def _number(self, win: TokenSeq, i: int, t: Token) -> None:
        value = _int_value(t.text)
        prev, nxt = _text(win, i - 1), _text(win, i + 1)
        name = win.get(i - 2) if i >= 2 else None
        if value == 32 and prev == "=" and nxt in (";", ",") and name is not None and name.kind == IDENT:
            lower = name.text.lower()
            if "warp" in lower and any(w in lower for w in ("size", "width", "lanes", "sz")):
                self.add("AMD002", name, N_("{name} sets the warp size to 32"), name=name.text)
                return
        lane_op = (
            (
                value == 32
                and (prev in ("%", "/", "%=", "/=") or nxt in ("*",) and prev in ("*", "+", "(", "="))
            )
            or (value == 31 and prev in ("&", "&=", "%"))
            or (value == 5 and prev in (">>", "<<", ">>=", "<<="))
            or (value == 16 and prev == "=" and "for" in self.line_text(t) and "offset" in self.line_text(t))
        )
        if not lane_op:
            return
        line = self.line_text(t)
        if value == 16:
            self.add("AMD001", t, N_("shuffle reduction starting at offset 16 covers only 32 lanes"))
        elif any(w in line for w in LANE_WORDS):
            op = prev if prev in ("%", "/", "&", ">>", "<<", "%=", "/=", "&=", ">>=", "<<=") else "*"
            self.add(
                "AMD001",
                t,
                N_("'{expression}' in lane/warp arithmetic assumes 32 lanes"),
                expression=f"{op} {t.text}",
            )

    def _asm(self, win: TokenSeq, i: int, t: Token) -> None:
        k = i + 1
        while _text(win, k) in ("volatile", "__volatile__", "goto", "inline"):
            k += 1
        if _text(win, k) == "(" and win.get(k + 1) is not None:
            body = _text(win, k + 1)
            ptx_words = ("mov.", "ld.", "st.", "cvt.", "shfl.", "vote.", "bar.", "membar", "%laneid",
                         "%clock", "%smid", "%warpid", "prmt", "lop3", ".reg", "mma.", "cp.async", "red.",
                         "atom.", "bfe.", "bfi.", "brev.", "fma.rn", "add.", "mul.", "trap", "exit;")  # fmt: skip
            if body.startswith('"') and any(w in body for w in ptx_words):
                self.add("AMD005", t, N_("inline PTX: {code}"), code=body[:40])
                return
            self.add("AMD005", t, N_("inline assembly (PTX on CUDA) must be rewritten for AMD"))

    def _mask_arg(self, win: TokenSeq, i: int, t: Token) -> None:
        arg = win.get(i + 2)
        if arg is not None and arg.text.lower() in FULL_32:
            self.add(
                "AMD004",
                arg,
                N_("{api} given the 32-bit mask {mask}; wave64 needs 64 bits"),
                api=t.text,
                mask=arg.text,
            )
        elif arg is not None and arg.text in self.mask_vars and _text(win, i + 3) == ",":
            self.add(
                "AMD004",
                arg,
                N_("{api} given {mask}, set to a 32-bit mask; wave64 needs 64 bits"),
                api=t.text,
                mask=arg.text,
            )

    def _mask_result(self, win: TokenSeq, i: int, t: Token) -> None:
        # `unsigned m = __ballot_sync(...)` / `int m = __activemask()`: the 64-bit mask is truncated
        name = win.get(i - 2)
        if i >= 3 and _text(win, i - 1) == "=" and name is not None and name.kind == IDENT:
            decl_type = _text(win, i - 3)
            if decl_type in MASK_32_TYPES and not (i >= 4 and _text(win, i - 4) == "long"):
                self.add(
                    "AMD004", t, N_("{api} result stored in a 32-bit '{type}'"), api=t.text, type=decl_type
                )

    def _warp_size(self, win: TokenSeq, i: int, t: Token, prev: str, nxt: str) -> None:
        if prev == "[" or (prev in ("<", ",") and nxt in (">", ",")):
            self.add("AMD010", t, N_("warpSize used as an array bound or template argument"))
        elif prev == "=" and i >= 3 and _text(win, i - 3) == "constexpr":
            self.add("AMD010", t, N_("warpSize assigned to a constexpr"))
        elif (
            nxt in ("==", "!=")
            and _int_value(_text(win, i + 2)) == 32
            or prev in ("==", "!=")
            and i >= 2
            and _int_value(_text(win, i - 2)) == 32
        ):
            self.add("AMD002", t, N_("warpSize compared with 32"))

    def _shared(self, win: TokenSeq, i: int) -> None:
        for k in range(i + 1, i + 24):
            text = _text(win, k)
            if text in ("", ";", "{", "=", "("):
                return
            if text == "[" and _int_value(_text(win, k + 1)) in (32, 33):
                tok = win.get(k + 1)
                self.add("AMD003", tok, N_("__shared__ array dimension {size}"), size=tok.text)
                return


def _text(win: TokenSeq, i: int) -> str:
    tok = win.get(i) if i >= 0 else None
    return "" if tok is None else tok.text


_LINT_WORDS = frozenset(
    {"__CUDA_ARCH__", "asm", "__asm__", "__asm", "warpSize", "__shared__", "__launch_bounds__", "wmma"}
    | MASK_FUNCS
    | MASK_RESULT_FUNCS
    | NVIDIA_ONLY
    | TEXTURE_REFERENCE
    | CG_MISSING
)
_NEAR = 512  # how much of a line around a token the text rules read
_DIRECTIVE_BEFORE = re.compile(r"[ \t]*#")  # the line up to a token is a directive's
_ASSIGNED = re.compile(r"\b([A-Za-z_]\w*)[ \t]*=[ \t]*$")
_SCANNER = candidate_scanner(
    tuple(sorted(_LINT_WORDS | {"__nvvm_"})),
    numbers=(
        "32",
        "31",
        "16",
        "5",
        "0x20",
        "0x1f",
        "0x1F",
        "32u",
        "31u",
        "0xffffffff",
        "0xFFFFFFFF",
        "0xffffffffu",
        "0xFFFFFFFFu",
        "0xFFFFFFFFU",
        "0xffffffffU",
        "4294967295",
        "4294967295u",
    ),  # fmt: skip
)


# On the HIP output only the renamed APIs can add findings (the rules above match CUDA and HIP
# spellings alike, and translation leaves lane arithmetic, masks, asm ... as they were).
_HIP_WORDS = frozenset(w for w in TEXTURE_REFERENCE if w.startswith("hip"))
_HIP_SCANNER = candidate_scanner(tuple(sorted(_HIP_WORDS)))


def lint(
    source: str, filename: str = "<stdin>", stage: str = "cuda", deadline: Deadline = NO_DEADLINE
) -> list[Lint]:
    """AMD porting findings for one source text (CUDA or HIP), in source order."""
    return _Linter(source, filename, stage, deadline=deadline).run()


def lint_translation(
    cuda: str, hip: str, filename: str = "<stdin>", deadline: Deadline = NO_DEADLINE
) -> list[Lint]:
    """Lints of the CUDA input, plus what the HIP output adds (e.g. hipBindTexture)."""
    before = lint(cuda, filename, "cuda", deadline)
    keys = {(x.id, x.message) for x in before}
    hip_lints = _Linter(hip, filename, "hip", _HIP_SCANNER, deadline).run()
    after = [x for x in hip_lints if (x.id, x.message) not in keys]
    return before + after
