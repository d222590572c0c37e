"""pybabel's extractor for the CLI modules (``hipbot/locale/babel.cfg``): what its Python extractor
finds (``_()``, ``N_()``, ``ngettext()``) and each click command's docstring as ``--help`` shows it,
the text :mod:`hipbot.clihelp` looks up."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Collection, Iterator, Mapping
from typing import IO, Any

from babel.messages.extract import extract_python


def _is_command(decorator: ast.expr) -> bool:
    """``@click.command(...)``, ``@group.command(...)``, ``@click.group(...)`` and the like."""
    func = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(func, ast.Attribute) and func.attr in ("command", "group")


def extract_cli(
    fileobj: IO[bytes], keywords: Mapping[str, Any], comment_tags: Collection[str], options: Mapping[str, Any]
) -> Iterator[tuple[int, str, str, list[str]]]:
    source = fileobj.read()
    fileobj.seek(0)
    yield from extract_python(fileobj, keywords, comment_tags, options)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and any(_is_command(d) for d in node.decorator_list):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.lineno, "", inspect.cleandoc(doc).partition("\f")[0], []
