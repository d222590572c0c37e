"""pybabel's extractors (``hipbot/locale/babel.cfg``). For the CLI modules: what its Python
extractor finds (``_()``, ``N_()``, ``ngettext()``) and each click command's docstring as ``--help``
shows it, the text :mod:`hipbot.clihelp` looks up. For the fine-tune spec: its fields' docstrings
and ``keys.yaml``'s texts, the help and reasons ``hipbot finetune keys`` shows."""

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


def extract_spec_fields(
    fileobj: IO[bytes], keywords: Mapping[str, Any], comment_tags: Collection[str], options: Mapping[str, Any]
) -> Iterator[tuple[int, str, str, list[str]]]:
    """A pydantic models module: what the Python extractor finds, and each field's docstring (the
    string under its annotation) as pydantic's ``use_attribute_docstrings`` makes it the field's
    description: the honoured keys' help of ``hipbot finetune keys``."""
    source = fileobj.read()
    fileobj.seek(0)
    yield from extract_python(fileobj, keywords, comment_tags, options)
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for field, doc in zip(node.body, node.body[1:], strict=False):
            if (
                isinstance(field, ast.AnnAssign)
                and isinstance(doc, ast.Expr)
                and isinstance(doc.value, ast.Constant)
                and isinstance(doc.value.value, str)
            ):
                yield doc.lineno, "", inspect.cleandoc(doc.value.value), []


def extract_keys_yaml(
    fileobj: IO[bytes], keywords: Mapping[str, Any], comment_tags: Collection[str], options: Mapping[str, Any]
) -> Iterator[tuple[int, str, str, list[str]]]:
    """The fine-tune spec's ``keys.yaml``: each key's help text, each group's and refused key's
    reason, why a method cannot run and what a shorthand sets (key names and aliases are not text)."""
    import yaml

    loader = yaml.compose(fileobj.read().decode("utf-8"), Loader=yaml.SafeLoader)
    for top, section in loader.value if loader else ():
        if top.value == "aliases":
            continue
        yield from _yaml_texts(section)


def _yaml_texts(node: Any) -> Iterator[tuple[int, str, str, list[str]]]:
    """Every string value of a YAML node, with its line (mapping keys and ``group`` names left out)."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value != "group":
                yield from _yaml_texts(value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _yaml_texts(item)
    elif isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:str" and node.value:
        yield node.start_mark.line + 1, "", node.value, []
