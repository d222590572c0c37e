"""YAML from strangers, read within bounds: a size cap, a few aliases at most, and a cap on the
size the document has once every alias is expanded (nested anchors grow exponentially: a
600-byte "billion laughs" expands to gigabytes, and every later walk over it pays for that).

The node graph is composed first, by libyaml where PyYAML has it (about 40x faster than the pure
Python parser, so a stream of bombs costs the coordinator little); aliases are shared nodes, so
this is linear in the text. One visit per node then counts the aliases and the expanded size, and
only then are Python objects built.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_SPEC_BYTES = 64 * 1024
MAX_ALIASES = 64
MAX_EXPANDED = 256 * 1024  # characters of scalars plus one per node, every alias expanded
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlBomb(yaml.YAMLError):
    """A document that is over a size bound, or whose aliases would expand past one."""


def expanded_size(root: Node) -> int:
    """Scalar characters plus one per node, as if every alias were written out. ``YamlBomb`` for
    more than ``MAX_ALIASES`` aliases or a node that contains itself. Each distinct node is
    visited once; every reference to a node beyond its first is an alias."""
    sizes: dict[int, int] = {}
    active: set[int] = set()
    seen = {id(root)}
    aliases = 0
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            if isinstance(node, ScalarNode):
                sizes[key] = 1 + len(str(node.value))
            else:
                sizes[key] = 1 + sum(sizes[id(c)] for c in _children(node))
            continue
        if key in sizes:
            continue
        if key in active:
            raise YamlBomb("an alias refers to a node that contains it")
        active.add(key)
        children = _children(node)
        for child in children:
            if id(child) in seen:
                aliases += 1
            seen.add(id(child))
        if aliases > MAX_ALIASES:
            raise YamlBomb(f"more than {MAX_ALIASES} aliases (*name); write the values out")
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` within the bounds above; ``YamlBomb`` (a ``yaml.YAMLError``) beyond them."""
    size = len(text.encode("utf-8", "replace"))
    if size > MAX_SPEC_BYTES:
        raise YamlBomb(f"the config is {size} bytes; the limit is {MAX_SPEC_BYTES // 1024} KiB")
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = expanded_size(node)
        if size > MAX_EXPANDED:
            raise YamlBomb(
                f"its aliases expand it to more than {MAX_EXPANDED // 1024} KiB; write the values out"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()
