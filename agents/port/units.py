"""Translation units of a CUDA project and the flags its build files give each one.

CMake: ``add_executable``/``add_library``/``cuda_add_*``/``target_sources`` sources (``set()``
variables, ``file(GLOB)`` and ``aux_source_directory`` expanded), ``include_directories`` and
``target_include_directories``, ``add_definitions``/``add_compile_definitions``/
``target_compile_definitions``, inherited by sub-directories. Makefiles and shell scripts: each line
that names a ``.cu`` file (``$(wildcard *.cu)`` means every ``.cu`` beside it, and so does a ``%.cu``
rule in a file that names none),
with the ``-I``/``-D``/``-std``/``-fopenmp`` words of that line and of the file's variables.
``.cu`` files no build file governs are units on their own. Files ``#include``d by others never are.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from hipbot.agents.port.buildfiles import build_kind

UNIT_SUFFIXES = (".cu",)
HOST_SUFFIXES = (".cpp", ".cc", ".cxx", ".c")


@dataclass
class Unit:
    source: Path  # relative to the project root
    include_dirs: list[Path] = field(default_factory=list)  # relative to the project root
    defines: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)  # -std=..., -fopenmp
    origin: str = ""  # the build file that named it ("" when none did)

    def add_dir(self, d: Path) -> None:
        if d not in self.include_dirs:
            self.include_dirs.append(d)


@dataclass
class _Scope:
    include_dirs: list[Path] = field(default_factory=list)
    defines: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)


def _rel(root: Path, path: Path) -> Path | None:
    try:
        return Path(os.path.normpath(path)).relative_to(root)
    except ValueError:
        return None


# ---------------------------------------------------------------------------- CMake

_CMD = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*\((?P<args>(?:[^()]|\([^()]*\))*)\)", re.S)
_KEYWORDS = {
    "PUBLIC", "PRIVATE", "INTERFACE", "SYSTEM", "BEFORE", "AFTER", "STATIC", "SHARED", "MODULE",
    "OBJECT", "WIN32", "MACOSX_BUNDLE", "EXCLUDE_FROM_ALL", "IMPORTED", "GLOBAL", "ALIAS",
}  # fmt: skip


def _cmake_args(args: str, variables: dict[str, list[str]]) -> list[str]:
    args = re.sub(r"#[^\n]*", "", args)
    words = re.findall(r'"[^"]*"|\S+', args)
    out: list[str] = []
    for w in words:
        w = w.strip('"')
        m = re.fullmatch(r"\$\{(\w+)\}", w)
        if m:
            out.extend(variables.get(m.group(1), [w]))
            continue
        w = re.sub(r"\$\{(\w+)\}", lambda mm: " ".join(variables.get(mm.group(1), [mm.group(0)])), w)
        if w:
            out.append(w)
    return out


def _cmake_file(
    path: Path,
    root: Path,
    parent: _Scope,
    units: dict[Path, Unit],
    seen: set[Path],
    target_dirs: dict[str, list[Path]],
) -> None:
    here = path.parent
    seen.add(here)
    scope = _Scope(list(parent.include_dirs), list(parent.defines), list(parent.options))
    variables: dict[str, list[str]] = {
        "CMAKE_CURRENT_SOURCE_DIR": [str(here)],
        "CMAKE_CURRENT_LIST_DIR": [str(here)],
        "PROJECT_SOURCE_DIR": [str(root)],
        "CMAKE_SOURCE_DIR": [str(root)],
    }
    targets: dict[str, list[Unit]] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    text = re.sub(r"(?m)^\s*#.*$", "", text)
    for m in _CMD.finditer(text):
        name = m["name"].lower()
        args = _cmake_args(m["args"], variables)
        if not args:
            continue
        if name == "set" and len(args) >= 1:
            variables[args[0]] = [a for a in args[1:] if a not in ("CACHE", "STRING", "PATH", "FORCE")]
            if (
                args[0] in ("CMAKE_CUDA_STANDARD", "CMAKE_CXX_STANDARD")
                and len(args) > 1
                and args[1].isdigit()
            ):
                scope.options = [o for o in scope.options if not o.startswith("-std=")]
                if args[0] == "CMAKE_CUDA_STANDARD" or not any(o.startswith("-std=") for o in parent.options):
                    scope.options.append(f"-std=c++{args[1]}")
        elif name == "list" and len(args) >= 3 and args[0] == "APPEND":
            variables.setdefault(args[1], []).extend(args[2:])
        elif name == "file" and len(args) >= 3 and args[0] in ("GLOB", "GLOB_RECURSE"):
            found: list[str] = []
            for pat in args[2:]:
                if pat in ("RELATIVE", "CONFIGURE_DEPENDS", "LIST_DIRECTORIES"):
                    continue
                full = pat if os.path.isabs(pat) else str(here / pat)
                found += sorted(glob.glob(full, recursive=args[0] == "GLOB_RECURSE"))
            variables[args[1]] = found
        elif name == "aux_source_directory" and len(args) == 2:
            d = Path(args[0]) if os.path.isabs(args[0]) else here / args[0]
            variables[args[1]] = [
                str(p) for p in sorted(d.glob("*")) if p.suffix in UNIT_SUFFIXES + HOST_SUFFIXES
            ]
        elif name == "include_directories":
            for a in args:
                if a not in _KEYWORDS:
                    d = _rel(root, Path(a) if os.path.isabs(a) else here / a)
                    if d is not None and (root / d).is_dir() and d not in scope.include_dirs:
                        scope.include_dirs.append(d)
        elif name in ("add_definitions", "add_compile_definitions"):
            for a in args:
                if a.startswith(("-D", "/D")):
                    scope.defines.append(a[2:])
                elif name == "add_compile_definitions":
                    scope.defines.append(a)
        elif name in (
            "add_executable",
            "add_library",
            "cuda_add_executable",
            "cuda_add_library",
            "target_sources",
        ):
            srcs = [a for a in args[1:] if a not in _KEYWORDS]
            for s in srcs:
                p = Path(s) if os.path.isabs(s) else here / s
                rel = _rel(root, p)
                if rel is None or rel.suffix not in UNIT_SUFFIXES or not (root / rel).is_file():
                    continue
                unit = units.setdefault(rel, Unit(rel, origin=str(_rel(root, path))))
                for d in scope.include_dirs:
                    unit.add_dir(d)
                unit.defines += [d for d in scope.defines if d not in unit.defines]
                unit.options += [o for o in scope.options if o not in unit.options]
                targets.setdefault(args[0], []).append(unit)
        elif name == "foreach" and len(args) >= 2:
            variables[args[0]] = [a for a in args[1:] if a not in ("IN", "LISTS", "ITEMS")]
        elif name == "target_include_directories":
            for a in args[1:]:
                d = _rel(root, Path(a) if os.path.isabs(a) else here / a)
                if a in _KEYWORDS or d is None or not (root / d).is_dir():
                    continue
                target_dirs.setdefault(args[0], []).append(d)
                for unit in targets.get(args[0], []):
                    unit.add_dir(d)
        elif name == "target_link_libraries":
            for lib in args[1:]:
                for d in target_dirs.get(lib, []):
                    target_dirs.setdefault(args[0], []).append(d)
                    for unit in targets.get(args[0], []):
                        unit.add_dir(d)
        elif name == "target_compile_definitions":
            for unit in targets.get(args[0], []):
                unit.defines += [a.removeprefix("-D") for a in args[1:] if a not in _KEYWORDS]
        elif name == "add_subdirectory":
            sub = here / args[0] / "CMakeLists.txt"
            if sub.is_file():
                _cmake_file(sub, root, scope, units, seen, target_dirs)


# ---------------------------------------------------------------------------- Make / shell

_MAKE_VAR = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*(?::=|\?=|\+=|=)\s*(.*)$")


def _expand(text: str, variables: dict[str, str], depth: int = 0) -> str:
    if depth > 5:
        return text
    new = re.sub(
        r"\$[({](\w+)[)}]|\$(\w+)", lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), text
    )
    return new if new == text else _expand(new, variables, depth + 1)


def _flag_words(words: list[str], here: Path, root: Path, scope: _Scope) -> None:
    it = iter(words)
    for w in it:
        if w in ("-I", "-D", "-isystem"):
            w = w + next(it, "")
        if w.startswith("-I") or w.startswith("-isystem"):
            raw = w[2:] if w.startswith("-I") else w[len("-isystem") :]
            d = _rel(root, Path(raw) if os.path.isabs(raw) else here / raw)
            if d is not None and d not in scope.include_dirs:
                scope.include_dirs.append(d)
        elif w.startswith("-D") and len(w) > 2 and w[2:] not in scope.defines:
            scope.defines.append(w[2:].strip("\"'"))
        elif (
            w.startswith("-std=") and "++" in w or w in ("-fopenmp", "-Xcompiler=-fopenmp")
        ) and w not in scope.options:
            scope.options.append(w.replace("-Xcompiler=", ""))
        elif "-fopenmp" in w and "-fopenmp" not in scope.options:
            scope.options.append("-fopenmp")


def _make_file(path: Path, root: Path, units: dict[Path, Unit], seen: set[Path]) -> None:
    here = path.parent
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    text = text.replace("\\\n", " ")
    variables: dict[str, str] = {}
    lines = [re.sub(r"(?<!\\)#.*", "", ln) for ln in text.split("\n")]
    for line in lines:
        m = _MAKE_VAR.match(line)
        if m:
            variables[m.group(1)] = (variables.get(m.group(1), "") + " " + m.group(2)).strip()
    base = _Scope()
    for value in variables.values():
        _flag_words(_expand(value, variables).split(), here, root, base)
    local_cu = sorted(p for p in here.iterdir() if p.suffix in UNIT_SUFFIXES)
    # a %.cu pattern rule builds what the file asks for: the .cu files it names, when it names any
    named = any(
        w.strip("\"';:").endswith(UNIT_SUFFIXES) for ln in lines for w in _expand(ln, variables).split()
    )
    for line in lines:
        line_words = _expand(line, variables).split()
        names: list[Path] = []
        for w in line_words:
            w = w.strip("\"';:")
            pattern = "%.cu" in w or "$*.cu" in w  # a pattern rule's stem, not a wildcard
            if ("*.cu" in w and not pattern) or (pattern and not named):
                names += local_cu
            elif w.endswith(UNIT_SUFFIXES):
                p = Path(w) if os.path.isabs(w) else here / w
                if p.is_file():
                    names.append(p)
        if not names:
            continue
        seen.add(here)
        scope = _Scope(list(base.include_dirs), list(base.defines), list(base.options))
        _flag_words(line_words, here, root, scope)
        for p in names:
            rel = _rel(root, p)
            if rel is None:
                continue
            unit = units.setdefault(rel, Unit(rel, origin=str(_rel(root, path))))
            for d in scope.include_dirs:
                unit.add_dir(d)
            unit.defines += [d for d in scope.defines if d not in unit.defines]
            unit.options += [o for o in scope.options if o not in unit.options]


# ---------------------------------------------------------------------------- discovery

_INCLUDE_CU = re.compile(r'^\s*#\s*include\s*[<"]([^">]+\.cuh?)[">]', re.M)


def included_sources(root: Path, files: list[Path]) -> set[Path]:
    """``.cu`` files another file includes (``#include "kernels.cu"``): not units of their own."""
    out: set[Path] = set()
    for f in files:
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for name in _INCLUDE_CU.findall(text):
            p = _rel(root, f.parent / name)
            if p is not None:
                out.add(p)
    return out


def discover(root: Path) -> list[Unit]:
    """The project's translation units, sorted by path."""
    root = Path(os.path.normpath(root.resolve()))
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        files += [Path(dirpath) / f for f in sorted(filenames)]
    units: dict[Path, Unit] = {}
    governed: set[Path] = set()
    top_cmake = [f for f in files if f.name == "CMakeLists.txt"]
    for f in top_cmake:  # roots of CMake trees: those no parent CMakeLists adds
        if f.parent in governed:
            continue
        parent_lists = [
            p for p in f.parents if (p / "CMakeLists.txt").is_file() and p != f.parent and p != root.parent
        ]
        if any(p in governed for p in parent_lists):
            continue
        _cmake_file(f, root, _Scope(), units, governed, {})
    for f in files:
        kind = build_kind(f)
        if kind == "make" or (kind == "shell" and "nvcc" in f.read_text(encoding="utf-8", errors="replace")):
            _make_file(f, root, units, governed)
    cu_files = [f for f in files if f.suffix in UNIT_SUFFIXES]
    included = included_sources(root, files)
    for f in cu_files:
        rel = _rel(root, f)
        if rel is None or rel in units or rel in included:
            continue
        if not any(p in governed for p in f.parents):
            units[rel] = Unit(rel)
    for rel in list(units):
        if rel in included:
            del units[rel]
    return [units[k] for k in sorted(units)]
