"""Options, flags, macros and environment variables as first-class lookup rows, like API names.

The rows come from the docs themselves, read when the engine loads: the option tables
(``| `--fgpu-rdc` | Generate relocatable device code ... |``), reST list tables of variables
(``* - AMD_LOG_LEVEL``), headings named after a variable (``### `ROCR_VISIBLE_DEVICES```),
definition lists (``* `-fgpu-rdc` : ...``) and, for names the docs only mention in prose, the
sentence that says what they do. A question naming one gets the row; "what replaces nvcc's
``-rdc=true``" is answered through ``NVCC_FLAGS``, nvcc's flags mapped to the names of those rows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from hipbot.agents.docs.labels import label
from hipbot.agents.docs.notes import PACKAGED as NOTES
from hipbot.agents.docs.sentences import clean, units

ENV = re.compile(
    r"\b(?:HIP|HSA|AMD|ROCR|GPU|HIPCC|MIOPEN|PYTORCH|VLLM|NCCL|RCCL|TORCH|TORCHINDUCTOR|HIPBLASLT|"
    r"ROCBLAS|TENSILE|OMP|CUDA|HCC|AMDGPU|DEBUG|ROCPROF|HSAKMT|FLASH|CK|NUMA|ROC|HF|TRITON)_[A-Z0-9_]{2,}\b"
)
MACRO = re.compile(r"\b__[A-Z][A-Z0-9_]+__\b|\b__launch_bounds__\b")
OPTION = re.compile(r"(?<![\w/-])--?[a-z][a-z0-9]*(?:-[a-z0-9]+)+(?![\w-])")
_DEFINES = re.compile(
    r"\b(?:set|sets|setting|enable|enables|disable|controls?|specif\w*|define\w*|use)\b", re.I
)
_MACRO_CONTEXT = re.compile(r"\bmacro|#\s*define|preprocessor|\b-D\w", re.I)
MAX_TEXT = 300

# nvcc's flags -> the hipcc/clang option or HIP feature the docs' rows name.
NVCC_FLAGS = {
    "-rdc": "--fgpu-rdc",
    "--relocatable-device-code": "--fgpu-rdc",
    "-dc": "--fgpu-rdc",
    "--device-c": "--fgpu-rdc",
    "-arch": "--offload-arch",
    "--gpu-architecture": "--offload-arch",
    "-gencode": "--offload-arch",
    "--generate-code": "--offload-arch",
    "-keep": "-save-temps",
    "--keep": "-save-temps",
    "-G": "-ggdb",
    "--device-debug": "-ggdb",
    "-cubin": "--genco",
    "--cubin": "--genco",
    "-fatbin": "--genco",
    "-maxrregcount": "__launch_bounds__",
    "--maxrregcount": "__launch_bounds__",
}
_NVCC_FLAG = re.compile(r"(?<![\w-])(-{1,2}[A-Za-z][\w-]*)")


@dataclass(frozen=True)
class OptionRow:
    """What the docs say a name is: ``kind`` is env | option | macro; ``strength`` ranks the
    definition (3 table row or heading, 2 list definition, 1 a prose sentence saying how it is set
    or used, 0 another sentence about it)."""

    name: str
    kind: str
    text: str
    path: str
    title: str
    section: str
    url: str
    strength: int

    def source(self) -> dict[str, str]:
        return {"path": self.path, "section": self.section, "url": self.url}

    def render(self, lang: str = "en") -> str:
        kind = label(f"kind_{self.kind}", lang)
        where = self.title if self.section == self.title else f"{self.title} \u203a {self.section}"
        return label("option_row", lang, name=self.name, kind=kind, text=self.text) + f" ({where})"


@dataclass(frozen=True)
class ProseChunk:
    id: int
    path: str
    title: str
    section: str
    url: str
    text: str


def kind_of(name: str, context: str) -> str:
    if name.startswith("-"):
        return "option"
    if MACRO.fullmatch(name) or _MACRO_CONTEXT.search(context):
        return "macro"
    return "env"


def _names(text: str) -> list[str]:
    found = [m.group(0) for pattern in (ENV, MACRO, OPTION) for m in pattern.finditer(text)]
    return list(dict.fromkeys(found))


def _short(text: str, prose: bool) -> str:
    text = clean(text).strip(" :;")
    if prose and len(text) > MAX_TEXT // 2 and 0 < text.find("; ") < MAX_TEXT // 2:
        return text[: text.find("; ")] + "."  # a sentence's first clause says what it is; examples follow
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1].rsplit(" ", 1)[0] + "\u2026"


def _head_name(cell: str) -> str:
    """The name a table cell or list item defines: ``--offload-arch=<target>`` -> ``--offload-arch``."""
    cell = cell.strip().strip("`*").strip()
    return re.split(r"[=\s<\[(`]", cell, maxsplit=1)[0]


def _only_name(part: str) -> bool:
    """Whether a definition list's head is the name alone, perhaps with its value or argument
    (``--offload-arch=<target>``, ``HIP_VISIBLE_DEVICES=0,1``), not a clause about it."""
    head = re.sub(r"<[^>]*>|\[[^\]]*\]", "", part.strip().strip("`*").strip())
    return not re.search(r"\s", head.replace("`", ""))


def _is_name(name: str) -> bool:
    """Whether a definition's head (``_head_name``) is an environment variable, macro or option."""
    return bool(
        ENV.fullmatch(name) or MACRO.fullmatch(name) or OPTION.fullmatch(name) or name.startswith("-")
    )


def extract(chunks: Iterable[ProseChunk]) -> list[OptionRow]:
    """Every option/variable/macro row the docs define or describe."""
    rows: list[OptionRow] = []
    for chunk in chunks:
        heading = chunk.section.rsplit(" > ", 1)[-1].strip("` ")
        if not _names(f"{heading} {chunk.text}"):
            continue
        parts = units(chunk.text)

        def row(name: str, text: str, strength: int, c: ProseChunk = chunk) -> OptionRow:
            return OptionRow(
                name,
                kind_of(name, text),
                _short(text, strength < 2),
                c.path,
                c.title,
                c.section,
                c.url,
                strength,
            )

        if (ENV.fullmatch(heading) or MACRO.fullmatch(heading)) and parts:
            rows.append(row(heading, " ".join(u.text for u in parts[:2] if u.kind == "sentence"), 3))
        # A porting note defines what its first sentence answers with; its other sentences name
        # variables in passing (the llama.cpp build note sets the override it is not about).
        note = chunk.path.startswith(f"{NOTES}/")
        for n, unit in enumerate(parts):
            if unit.kind == "code" or (note and n > 0):
                continue
            name_part, sep, rest = unit.text.partition(": ") if unit.kind == "row" else ("", "", "")
            if unit.kind == "sentence" and unit.text.startswith("`"):
                name_part, sep, rest = (
                    unit.text.partition(" : ") if " : " in unit.text else unit.text.partition(": ")
                )
                if not _only_name(name_part):
                    # "`X` (e.g. ...) only works on Linux: ..." is a sentence about X, not a
                    # definition list item: what follows its colon is no definition of X; the
                    # whole sentence is a row, below any that says how X is set or used
                    sep, named = "", _head_name(name_part.split("`", 2)[1])
                    if _is_name(named) and not _DEFINES.search(unit.text) and len(unit.text) < 400:
                        rows.append(row(named, unit.text, 0))
            name = _head_name(name_part) if sep else ""
            if name and _is_name(name):
                rows.append(row(name, rest, 3 if unit.kind == "row" else 2))
                continue
            if unit.kind == "sentence" and _DEFINES.search(unit.text) and len(unit.text) < 400:
                for mentioned in _names(unit.text):
                    if note and mentioned.lower().startswith("cuda"):
                        continue  # a note's "like CUDA_LAUNCH_BLOCKING on NVIDIA" does not define it
                    rows.append(row(mentioned, unit.text, 1))
    return rows


def _key(name: str) -> str:
    """ "-fgpu-rdc" and "--fgpu-rdc" are the same option to a reader: one entry, its best row first
    (the option table's definition, not the HIPRTC page's single-dash mention)."""
    return "-" + name.lstrip("-") if name.startswith("-") else name


class OptionIndex:
    """The rows by name, best definition first; finds the names a question mentions."""

    def __init__(self, rows: list[OptionRow]) -> None:
        self.rows: dict[str, list[OptionRow]] = {}
        for r in sorted(rows, key=lambda r: (-r.strength, len(r.text))):
            bucket = self.rows.setdefault(_key(r.name), [])
            if all(b.path != r.path or b.strength > r.strength for b in bucket) and len(bucket) < 3:
                bucket.append(r)

    def __len__(self) -> int:
        return len(self.rows)

    def get(self, name: str) -> list[OptionRow]:
        return self.rows.get(_key(name), [])

    def find(self, question: str) -> list[tuple[str | None, list[OptionRow]]]:
        """(nvcc flag or None, rows) for each option, variable or macro the question names."""
        out: list[tuple[str | None, list[OptionRow]]] = []
        seen: set[str] = set()
        for name in _names(question):
            rows = self.get(name)
            if rows and rows[0].name not in seen:
                seen.add(rows[0].name)
                out.append((None, rows))
        if "nvcc" in question.lower():
            for match in _NVCC_FLAG.finditer(question):
                flag = match.group(1).split("=")[0]
                target = NVCC_FLAGS.get(flag)
                rows = self.get(target) if target else []
                if target and rows and rows[0].name not in seen:
                    seen.add(rows[0].name)
                    out.append((flag, rows))
        return out[:3]


def option_lines(found: list[tuple[str | None, list[OptionRow]]], lang: str) -> tuple[list[str], list[dict]]:
    """Answer lines and sources for the options a question names."""
    lines: list[str] = []
    sources: list[dict[str, str]] = []
    for flag, rows in found:
        best = rows[0]
        prefix = label("nvcc_flag", lang, flag=flag, name=best.name) + ". " if flag else ""
        lines.append(prefix + best.render(lang))
        sources.extend(r.source() for r in rows[:2])
    return lines, sources
