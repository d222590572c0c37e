"""Rules that look at the unit's own sources rather than at one diagnostic's line: the project
files a unit includes, preprocessor guards on ``__NVCC__``, a project's identity aliases and
enumerators of a dependent base (inline PTX is :mod:`ptx`'s).

- ``#ifdef __NVCC__``: nvcc defines ``__NVCC__`` in every pass, hipcc defines ``__HIPCC__`` (HIPIFY
  renames ``__CUDACC__`` only), so declarations behind the guard vanish and their uses are
  undeclared. The guard is renamed in the file's preprocessor lines.
- ``#define cudaDeviceMapHost hipDeviceMapHost``: a project's own CUDA-to-HIP aliases become
  ``#define hipDeviceMapHost hipDeviceMapHost`` once translated, which redefines HIP's macro as
  itself, so the name no longer expands to its value. The identity lines are commented out.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from hipbot.agents.port.compiler import Diag
from hipbot.agents.port.fixes import UNDECLARED, Fix, UnitState, project_file
from hipbot.agents.port.tree import read_text
from hipbot.i18n import N_

DOC_NVCC = "CUDA Programming Guide (nvcc defines __NVCC__); HIP/docs/how-to/hip_porting_guide.rst (__HIPCC__)"

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
_NVCC_GUARD = re.compile(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif)\b[^\n]*\b__NVCC__\b[^\n]*$", re.M)


def included_files(state: UnitState, limit: int = 40) -> list[Path]:
    """The unit and the project files it includes (transitively), relative to root: quoted includes
    beside the including file, then both kinds in the unit's ``-I`` folders (hipcc's order)."""
    unit_dir = (state.root / state.source).parent
    dirs = [Path(os.path.normpath(unit_dir / a[2:])) for a in state.args if a.startswith("-I") and len(a) > 2]
    todo, seen = [state.source], []
    while todo and len(seen) < limit:
        rel = todo.pop()
        path = state.root / rel
        if rel in seen or not path.is_file():
            continue
        seen.append(rel)
        for quote, name in _INCLUDE.findall(read_text(path)):
            places = ([path.parent] if quote == '"' else []) + dirs
            for place in places:
                target = Path(os.path.normpath(place / name))
                if target.is_relative_to(state.root) and target.is_file():
                    todo.append(target.relative_to(state.root))
                    break
    return seen


def rule_nvcc_guard(diag: Diag, state: UnitState) -> Fix | None:
    """An undeclared name while a file of the unit guards code with ``__NVCC__``: the guard becomes
    ``__HIPCC__`` (the first such file each round; the next round finds the next)."""
    if not UNDECLARED.search(diag.message):
        return None
    for rel in included_files(state):
        if _NVCC_GUARD.search(read_text(state.root / rel)):
            return Fix(
                "nvcc-guard",
                N_(
                    "{path} guards code with __NVCC__, which nvcc defines and hipcc does not: __HIPCC__ is hipcc's",
                    path=str(rel),
                ),
                DOC_NVCC,
                rel,
                lambda text: _NVCC_GUARD.sub(
                    lambda m: re.sub(r"\b__NVCC__\b", "__HIPCC__", m.group(0)), text
                ),
            )
    return None


DOC_ALIAS = (
    "C++ [cpp.rescan]: a macro's own name in its replacement is not expanded again, so "
    "#define X X hides X's earlier definition; HIPIFY translates both sides of a project's CUDA->HIP aliases"
)
_IDENTITY = r"^[ \t]*#[ \t]*define[ \t]+({})[ \t]+\1[ \t]*(?://[^\n]*)?$"


def rule_identity_define(diag: Diag, state: UnitState) -> Fix | None:
    """An undeclared HIP name that a file of the unit defines as itself (``#define hipX hipX``, what a
    ``#define cudaX hipX`` alias becomes once translated): the file's identity defines go."""
    m = UNDECLARED.search(diag.message)
    name = next((g for g in m.groups() if g), "") if m else ""
    if not name.startswith("hip"):
        return None
    one = re.compile(_IDENTITY.format(re.escape(name)), re.M)
    every = re.compile(_IDENTITY.format(r"hip\w*"), re.M)
    for rel in included_files(state):
        text = read_text(state.root / rel)
        if name not in text or not one.search(text):
            continue
        return Fix(
            "identity-define",
            N_(
                "{path} defines {name} as itself (a CUDA->HIP alias after translation), which hides HIP's "
                "own definition: the identity #defines are removed",
                path=str(rel),
                name=name,
            ),
            DOC_ALIAS,
            rel,
            lambda t: every.sub(
                lambda mm: f"// hipbot port: '#define {mm.group(1)} {mm.group(1)}' removed", t
            ),
        )
    return None


DOC_DEPENDENT_BASE = (
    "C++ [temp.dep]/3: unqualified names are not looked up in a dependent base class; "
    "clang enforces it, nvcc's front end (like MSVC) accepts them"
)
_DERIVED = re.compile(
    r"\btemplate\s*<[^;{]*?>\s*(?:struct|class)\s+\w+\s*:\s*(?:(?:public|protected|private|virtual)\s+)*"
    r"(\w+)\s*<([^;{]*?)>\s*\{"
)


def _body_end(text: str, open_brace: int) -> int:
    """The index of the brace closing the one at ``open_brace`` (braces in comments count too)."""
    depth = 0
    for i in range(open_brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def _base_enumerators(text: str, base: str) -> set[str]:
    m = re.search(rf"\b(?:struct|class)\s+{re.escape(base)}\b[^;{{]*\{{", text)
    if m is None:
        return set()
    body = text[m.end() - 1 : _body_end(text, m.end() - 1)]
    names: set[str] = set()
    for enum in re.finditer(r"\benum\b[^{;]*\{([^}]*)\}", body):
        names.update(re.findall(r"(?:^|,)\s*([A-Za-z_]\w*)", enum.group(1)))
    return names


def rule_dependent_base(diag: Diag, state: UnitState) -> Fix | None:
    """An enumerator of a dependent base class used unqualified in a class template (nvcc accepts
    it, clang does not): every such use in the derived class is qualified with the base."""
    m = re.match(r"use of undeclared identifier '([A-Za-z_]\w*)'", diag.message)
    file = project_file(diag, state)
    if m is None or file is None:
        return None
    name, text = m.group(1), read_text(state.root / file)
    at = sum(len(line) + 1 for line in text.split("\n")[: diag.line - 1])
    for d in _DERIVED.finditer(text):
        end = _body_end(text, d.end() - 1)
        if not d.end() <= at <= end or name not in _base_enumerators(text, d.group(1)):
            continue
        qualified = f"{d.group(1)}<{d.group(2).strip()}>::{name}"
        start = d.end()

        def edit(t: str, start: int = start, qualified: str = qualified) -> str:
            stop = _body_end(t, start - 1)
            body = re.sub(rf"(?<![\w.>:]){re.escape(name)}\b", qualified, t[start:stop])
            return t[:start] + body + t[stop:]

        return Fix(
            "dependent-base",
            N_(
                "'{name}' is an enumerator of the dependent base {base}<...>: clang does not look "
                "into dependent bases, so it is written {qualified}",
                name=name,
                base=d.group(1),
                qualified=qualified,
            ),
            DOC_DEPENDENT_BASE,
            file,
            edit,
        )
    return None
