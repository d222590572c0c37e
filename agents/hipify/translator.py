"""The translator itself: one linear scan over a CUDA source's tokens that renames identifiers
(``renames``), rewrites includes, string literals and call arguments (``call_rewrites``), and kernel
launches (``kernel_launch``, ``launch_rewrites``), collecting offset edits that are applied at the
end. ``translate.py`` is the public entry."""

from __future__ import annotations

import re
from bisect import bisect_left
from functools import cache, cached_property

from hipbot.agents.hipify import call_rewrites, pp_blocks
from hipbot.agents.hipify.cpp_tokens import (
    CHAR,
    COMMENT,
    DIRECTIVE,
    IDENT,
    INCLUDE,
    PUNCT,
    STRING,
    LineIndex,
    Token,
    Tokens,
    TokenWindow,
    candidate_scanner,
    include_target,
    match_token,
)
from hipbot.agents.hipify.includes import (
    HEADER_API_NAMES,
    HEADER_API_ROC,
    INCLUDES,
    UNSUPPORTED_HEADERS,
    duplicate_header,
    runtime_header_point,
)
from hipbot.agents.hipify.kernel_launch import LogicalLines
from hipbot.agents.hipify.launch_rewrites import rewrite_launches, template_kernel
from hipbot.agents.hipify.names import kernel_names, looks_cuda, own_names
from hipbot.agents.hipify.renames import (
    CUDA_PREFIXES,
    LIBRARIES,
    MIOPEN_LIBRARIES,
    ROC_LIBRARIES,
    THRUST_BACKENDS,
    WARP_SYNC_BUILTINS,
    WARP_SYNC_DETAIL,
    Rename,
    blas_v2_only,
    rename_table,
)
from hipbot.agents.hipify.report import (
    CHECK_EVERY,
    NO_DEADLINE,
    Deadline,
    HipifyOptions,
    HipifyReport,
    Unconverted,
)
from hipbot.agents.hipify.tree import encode_text, encoding_of
from hipbot.i18n import N_

_SCOPE = re.compile(r"[ \t]*::")
_THRUST_QUALIFIER = re.compile(r"\bthrust[ \t]*::[ \t]*(?:system[ \t]*::[ \t]*)?$")
_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]*)"', re.MULTILINE)


@cache
def _scanner(prefixes: tuple[str, ...]) -> re.Pattern[str]:
    return candidate_scanner(prefixes)


def _ident_prefixes(renames: dict[str, Rename]) -> tuple[str, ...]:
    """Identifier beginnings worth looking up: CUDA's prefixes plus the few renamed names without them."""
    base = ("cu", "CU", "_", "nv", "NV", "half2")
    extra = {
        name for name, r in renames.items() if r.target and r.target != name and not name.startswith(base)
    }
    return base + tuple(sorted(extra))


class Translator:
    """One file's translation: a single scan collects edits (offset ranges and their replacement
    text), then kernel launches, argument moves and the runtime header are added and the edits
    applied in order."""

    def __init__(
        self, source: str, options: HipifyOptions, filename: str, deadline: Deadline = NO_DEADLINE
    ) -> None:
        self.src = source
        self.deadline = deadline
        self.opt = options
        self.renames = rename_table(
            options.roc, options.miopen, options.experimental, options.use_hip_data_types
        )
        self.report = HipifyReport(
            filename,
            total_lines=source.count("\n"),
            total_bytes=len(encode_text(source)),
            encoding=encoding_of(source),
        )
        self.edits: list[tuple[int, int, str]] = []
        self.lines = LineIndex(source)
        self.inserted: set[str] = set()
        self.scanner = _scanner(_ident_prefixes(self.renames))
        self._own: frozenset[str] | None = None
        self._kernels: frozenset[str] | None = None
        self.calls = call_rewrites.rules(options.roc, options.miopen)
        self.overloads = call_rewrites.OVERLOADS if not (options.roc or options.miopen) else {}
        self.special = frozenset(self.calls) | frozenset(self.overloads) | blas_v2_only()
        # argument moves, applied after the scan: (span to replace, span whose translated text goes
        # there, or None to delete); a zero-width span appends ", text"
        self.moves: list[tuple[tuple[int, int], tuple[int, int] | None]] = []

    @cached_property
    def tokens(self) -> Tokens:
        """Views on the file's tokens for call rewrites and kernel launches (linear in all)."""
        return Tokens(self.src, self.deadline.check)

    @cached_property
    def logical_lines(self) -> LogicalLines:
        """The file's backslash-joined lines, for launches inside macros."""
        return LogicalLines(self.src)

    def _renamed(self, name: str) -> str | None:
        """The output name of the tree file an include names (None when it is not renamed)."""
        target = "/" + name.lstrip("./")
        for src, out_name in self.opt.renamed_sources:
            if src.endswith(target):
                return out_name
        return None

    def _kernel_names(self) -> frozenset[str]:
        """``__global__`` functions of this file and (``project_kernels``) of its project."""
        if self._kernels is None:
            self._kernels = kernel_names(self.src) | self.opt.project_kernels
        return self._kernels

    def _is_own(self, name: str) -> bool:
        """Whether the file (or, via ``project_names``, its project) defines ``name`` itself
        (``#define cudaCheck(err)``, ``void cuda_check(...)``): CUDA-looking, but the project's, so
        never reported as an unknown API. The file's own names are found once, in one pass."""
        if self._own is None:
            self._own = own_names(self.src)
        return name in self._own or name in self.opt.project_names

    # -- edits -----------------------------------------------------------------------------
    def edit(self, start: int, end: int, text: str) -> None:
        self.edits.append((start, end, text))

    def render(self, start: int, end: int) -> str:
        """Source text of [start, end) with the edits that lie inside it applied."""
        edits = self.edits
        i = bisect_left(edits, (start, start, ""))
        out = []
        pos = start
        while i < len(edits) and edits[i][0] < end:
            s, e, text = edits[i]
            if s >= pos and e <= end:
                out.append(self.src[pos:s])
                out.append(text)
                pos = e
            i += 1
        out.append(self.src[pos:end])
        return "".join(out)

    # -- passes ----------------------------------------------------------------------------
    def run(self) -> str:
        renames = self.renames
        launches: list[int] = []
        template_kernels: set[str] = set()
        first_include = -1
        pragma_once = -1
        last_directive: Token | None = None
        src = self.src
        edits = self.edits
        report = self.report
        special = self.special
        half2_vars: set[str] = set()
        skipped: list[tuple[int, int]] = []  # comments and literals, for the half2 pass
        excluded = []
        if self.opt.skip_excluded_blocks:
            own_headers = any(name not in INCLUDES for name in _QUOTED_INCLUDE.findall(src))
            excluded = pp_blocks.excluded_blocks(src, open_world=own_headers)
        ex_i = 0
        ex_start, ex_end = excluded[0] if excluded else (-1, -1)
        check = self.deadline.check
        for n, m in enumerate(self.scanner.finditer(src)):
            if not n % CHECK_EVERY:
                check()
            kind = m.lastgroup
            if excluded:
                at = m.end()
                while at > ex_end and ex_i < len(excluded):
                    skipped.append(excluded[ex_i])
                    ex_i += 1
                    ex_start, ex_end = excluded[ex_i] if ex_i < len(excluded) else (-1, -1)
                if ex_start < at <= ex_end:
                    self._excluded_token(m)
                    continue
            if kind == "ident":
                text = m.group("ident")
                r = renames.get(text)
                if r is not None and r.target is not None and text not in special:
                    # the common case, kept lean: a supported name, no argument rewrite
                    if r.target != text:
                        edits.append((m.start("ident"), m.end("ident"), r.target))
                    report.converted[text] += 1
                    report.by_api[r.api] += 1
                    report.by_type[r.kind] += 1
                    continue
                tok = Token(IDENT, text, m.start("ident"), m.end("ident"))
                if r is not None:
                    self._rename(tok, r)
                elif text == "__global__":
                    name = template_kernel(src, tok)
                    if name:
                        template_kernels.add(name)
                elif text == "cub":
                    self._cub_namespace(tok)
                elif text in THRUST_BACKENDS:
                    self._thrust_backend(tok)
                elif text == "half2" and self.opt.undocumented_features:
                    self._half2_declaration(tok, half2_vars)
                elif looks_cuda(text) and not self._is_own(text):
                    self._unconverted(tok, text, "unknown", "", "not in the HIPIFY mapping tables")
                continue
            tok = match_token(src, m)
            if tok is None:
                continue
            kind = tok.kind
            if kind in (COMMENT, STRING, CHAR):
                skipped.append((tok.start, tok.end))
            if kind == PUNCT:
                launches.append(tok.start)
            elif kind == STRING:
                if self.opt.translate_strings and tok.text.startswith('"'):
                    self._rewrite_string(tok)
            elif kind == INCLUDE:
                last_directive = tok
                if first_include < 0:
                    first_include = tok.start + tok.text.index("#")
                self._include(tok)
            elif kind == DIRECTIVE:
                last_directive = tok
                if pragma_once < 0 and tok.text.endswith("pragma"):
                    nxt = TokenWindow(self.src, tok.end).get(0)
                    if nxt is not None and nxt.text == "once":
                        pragma_once = nxt.end
        skipped.extend(excluded[ex_i:])
        skipped.sort()
        if half2_vars:
            self._half2_members(half2_vars, skipped)
        self.edits.sort(key=lambda e: (e[0], e[1]))
        if self.moves:
            self._move_arguments()
        rewrite_launches(self, launches, template_kernels, skipped)
        if self.opt.insert_runtime_header and "runtime" not in self.inserted:
            where = runtime_header_point(self.src, last_directive, pragma_once, first_include)
            self.edits.append((where, where, "\n#include <hip/hip_runtime.h>\n"))
            self.edits.sort(key=lambda e: (e[0], e[1]))
        return self._apply()

    def _excluded_token(self, m: re.Match[str]) -> None:
        """A token in a conditional block the compiler skips: like hipify-clang, which rewrites such
        blocks only with its raw-token pass, names are renamed (strings too) but no launch, include or
        call argument is rewritten."""
        kind = m.lastgroup
        if kind == "ident":
            text = m.group("ident")
            r = self.renames.get(text)
            if r is not None and r.target is not None:
                tok = Token(IDENT, text, m.start("ident"), m.end("ident"))
                if r.target != text:
                    self.edit(tok.start, tok.end, r.target)
                self._count(text, r.api, r.kind)
            return
        tok = match_token(self.src, m)
        if tok is not None and tok.kind == STRING and self.opt.translate_strings and tok.text.startswith('"'):
            self._rewrite_string(tok)

    def _apply(self) -> str:
        out = []
        pos = 0
        src = self.src
        report = self.report
        for s, e, text in self.edits:
            if s < pos:  # covered by an earlier, wider edit (a rewritten kernel launch)
                continue
            out.append(src[pos:s])
            out.append(text)
            pos = e
            report.replaced_bytes += e - s
            report.changed_lines.add(self.lines.position(s)[0])
        out.append(src[pos:])
        return "".join(out)

    def _unconverted(self, tok: Token, name: str, reason: str, library: str, detail: str) -> None:
        line, col = self.lines.position(tok.start)
        api = LIBRARIES.get(library, (0, library))[1]
        self.report.unconverted.append(Unconverted(name, line, col, reason, api, detail))

    def _count(self, name: str, api: str, kind: str) -> None:
        self.report.converted[name] += 1
        self.report.by_api[api] += 1
        self.report.by_type[kind] += 1

    def _rename(self, tok: Token, r: Rename) -> None:
        legacy_blas = "blas" in self.inserted and "blas_v2" not in self.inserted
        if r.target is not None and legacy_blas and tok.text in blas_v2_only():
            # legacy cublas.h: the handle-less v1 function, which HIP does not have
            detail = N_("only the v2 API is supported; include cublas_v2.h")
            self._unconverted(tok, tok.text, "unsupported", r.library, detail)
            return
        if r.target is None:
            if not r.cuda.startswith((*CUDA_PREFIXES, "__")):
                return  # a math function name (norm, max ...): likely the user's own, not CUDA's
            if r.reason == "experimental":
                detail = N_("experimental in HIP; translate it with --experimental")
            elif tok.text in WARP_SYNC_BUILTINS:
                detail = WARP_SYNC_DETAIL
            else:
                detail = N_("no HIP equivalent")
                if self.opt.roc and r.library in ROC_LIBRARIES:
                    detail = N_("no ROC equivalent")
                if self.opt.miopen and r.library in MIOPEN_LIBRARIES:
                    detail = N_("no MIOpen equivalent")
            self._unconverted(tok, tok.text, r.reason or "unsupported", r.library, detail)
            return
        target = r.target
        if tok.text in self.calls or tok.text in self.overloads:
            target = self._call_rewrite(tok) or target
        if target != tok.text:
            self.edit(tok.start, tok.end, target)
        self._count(tok.text, r.api, r.kind)

    def _call_rewrite(self, tok: Token) -> str | None:
        """hipify-clang's per-call argument rewrites (``call_rewrites``); returns the overload's
        name when the number of arguments selects one."""
        rewrite = call_rewrites.rewrite_call(
            self.src,
            self.tokens.view(tok.start),
            self.calls.get(tok.text, []),
            self.overloads.get(tok.text),
            lambda name: name in self._kernel_names(),
        )
        self.edits.extend(rewrite.edits)
        self.moves.extend(rewrite.moves)
        return rewrite.overload

    def _move_arguments(self) -> None:
        """Apply the argument moves once every rename inside the arguments is known; the renames
        inside a replaced span are dropped (its new text already carries them)."""
        new_edits = []
        for (a, b), source in self.moves:
            if source is None:
                new_edits.append((a, b, ""))
                continue
            text = self.render(*source)
            new_edits.append((a, b, ", " + text if a == b else text))
        spans = sorted((a, b) for a, b, _ in new_edits if a < b)
        starts = [a for a, _ in spans]
        kept = []
        for e in self.edits:
            i = bisect_left(starts, e[0] + 1) - 1
            if i >= 0 and e[0] < spans[i][1] and e[1] <= spans[i][1]:
                continue  # inside a replaced span (an insertion right after it stays)
            kept.append(e)
        self.edits = sorted(kept + new_edits, key=lambda e: (e[0], e[1]))

    def _half2_declaration(self, tok: Token, names: set[str]) -> None:
        """Remember variables declared ``half2 name`` (not pointers) for ``_half2_members``."""
        win = TokenWindow(self.src, tok.end)
        k = 0
        while (name := win.get(k)) is not None and name.kind == IDENT:
            after = win.get(k + 1)
            if after is None or after.text not in (";", "=", ",", ")", "[", "{", "("):
                return
            names.add(name.text)
            if after.text != ",":
                return
            k += 2
            # `half2 a, b;` declares both; skip an initializer-free list only

    def _half2_members(self, names: set[str], skipped: list[tuple[int, int]]) -> None:
        """hipify-clang's undocumented-feature fix: ``h.x`` on a ``half2`` is ``unsigned short`` in
        HIP, so it becomes ``reinterpret_cast<half&>(h.x)``."""
        pattern = re.compile(
            r"(?<![\w$.>])(?:" + "|".join(map(re.escape, sorted(names))) + r")[ \t]*\.[ \t]*[xy](?![\w$])"
        )
        starts = [s for s, _ in skipped]
        src = self.src
        for m in pattern.finditer(src):
            i = bisect_left(starts, m.start() + 1) - 1
            if i >= 0 and skipped[i][0] <= m.start() < skipped[i][1]:
                continue  # inside a comment or literal
            if src[max(0, m.start() - 23) : m.start()].endswith("reinterpret_cast<half&>("):
                continue
            self.edit(m.start(), m.start(), "reinterpret_cast<half&>(")
            self.edit(m.end(), m.end(), ")")
            self._count("half2", "CUDA Device API", "half2 member")

    def _cub_namespace(self, tok: Token) -> None:
        """``cub::`` and ``using namespace cub`` -> hipcub (hipCUB mirrors CUB's names)."""
        src = self.src
        qualifier = _SCOPE.match(src, tok.end) is not None
        if qualifier or src[max(0, tok.start - 64) : tok.start].rstrip().endswith("namespace"):
            self.edit(tok.start, tok.end, "hipcub")
            self._count("cub", "CUB API", "namespace")

    def _thrust_backend(self, tok: Token) -> None:
        """``thrust::cuda::par.on(stream)`` -> ``thrust::hip::par.on(stream)`` (rocThrust's backend
        namespace; also ``thrust::system::cuda`` and ``thrust::cuda_cub``)."""
        if _THRUST_QUALIFIER.search(self.src, max(0, tok.start - 48), tok.start):
            self.edit(tok.start, tok.end, THRUST_BACKENDS[tok.text])
            self._count(tok.text, "CUDA RT API", "namespace")

    def _rewrite_string(self, tok: Token) -> None:
        """hipify-clang's rule: each word starting with "cu" up to the next space is looked up whole."""
        s = tok.text[1:-1] if tok.text.endswith('"') and len(tok.text) > 1 else tok.text[1:]
        renames = self.renames
        begin = s.find("cu")
        while begin != -1:
            end = s.find(" ", begin + 4)
            name = s[begin:] if end == -1 else s[begin:end]
            r = renames.get(name)
            if r is not None and r.target is not None:
                pos = tok.start + 1 + begin
                if r.target != name:
                    self.edit(pos, pos + len(name), r.target)
                self._count(name, r.api, "literal")
            if end == -1:
                break
            begin = s.find("cu", end + 1)

    def _include(self, tok: Token) -> None:
        name, angled, at = include_target(tok.text)
        if name in UNSUPPORTED_HEADERS:
            self._unconverted(tok, name, "unsupported", "", "header has no HIP equivalent")
            return
        entry = INCLUDES.get(name)
        if entry is None:
            if name == "hip/hip_runtime.h":
                self.inserted.add("runtime")  # already HIP: do not add a second one
            elif name.startswith("thrust/system/cuda/"):
                start = tok.start + at + 1 + len("thrust/system/")
                self.edit(start, start + len("cuda"), "hip")
                self._count(name, HEADER_API_NAMES["runtime"], "include")
            elif self.opt.renamed_sources and (out_name := self._renamed(name)) is not None:
                # `#include "kernels.cu"` of a file translated with the tree to kernels.hip
                base = tok.start + at + 1 + name.rfind("/") + 1
                self.edit(base, tok.start + at + 1 + len(name), out_name)
            return
        hip, roc, kind, api = entry
        to_roc = (self.opt.roc and api in HEADER_API_ROC) or (self.opt.miopen and api == "dnn")
        new = (roc or hip) if to_roc else hip
        self._count(name, HEADER_API_NAMES[api], "include")
        if duplicate_header(self.inserted, new if to_roc else hip, kind, api):
            hash_at = tok.start + tok.text.index("#")
            self.edit(hash_at, tok.end, "")
            return
        delim = ("<", ">") if angled else ('"', '"')
        text = delim[0] + new + delim[1]
        if name.startswith("cooperative_groups") and "runtime" not in self.inserted:
            # HIP's cooperative-groups headers need hip_runtime.h first (ROCm 5 fails on
            # hipBlockDim_x otherwise); CUDA's nvcc pre-includes the runtime, so code omits it
            self.inserted.add("runtime")
            text = "<hip/hip_runtime.h>\n#include " + text
        self.edit(tok.start + at, tok.end, text)
