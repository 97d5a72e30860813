"""The one YAML loader for files a user gives (strategy, hardware, calibration profile, run files, log task YAML).

PyYAML's SafeLoader builds no objects of arbitrary types, but it still expands aliases and recurses once per
nesting level: a 600-byte file of nine anchors, each a list of nine aliases to the last (``recompute_modules: *i``),
stands for 9^8 strings, and what walks the value afterwards ran for minutes or out of memory; a file nested a
hundred thousand levels deep raised RecursionError. :class:`BoundedLoader` counts the nodes a document stands for
with every alias expanded and refuses a document past :data:`MAX_EXPANDED_NODES`, a recursive alias, or one nested
past Python's recursion limit, each as a ``yaml.YAMLError`` the readers already turn into one line. A key given
twice in one mapping (PyYAML keeps the last silently) is refused with both lines by :func:`load` and reported by
:func:`duplicate_keys` for readers that make it a finding.
"""

from __future__ import annotations

from typing import Any

import yaml

# A Megatron Bridge run YAML, the largest file read, is a few hundred nodes; a strategy file, a few dozen. This
# leaves three orders of magnitude of headroom and still answers in milliseconds.
MAX_EXPANDED_NODES = 100_000


class YAMLRefused(yaml.YAMLError):
    """A document refused for its expanded size, a recursive alias, its depth or a key given twice (one line)."""


def expanded_nodes(root: yaml.Node | None, limit: int = MAX_EXPANDED_NODES) -> int:
    """The nodes ``root`` stands for with every alias expanded (shared nodes counted each time they are used),
    without expanding them: each distinct node's count is computed once. YAMLRefused past ``limit`` or on a node
    that contains itself (a recursive alias)."""
    if root is None:
        return 0
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:  # iterative post-order: no recursion however deep the document
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            children = _children(node)
            total = 1 + sum(sizes[id(c)] for c in children)
            if total > limit:
                raise YAMLRefused(f"the document expands to over {limit:,} values through its aliases (an alias "
                                   "bomb?); moeplan reads files of at most that size")
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise YAMLRefused(f"a recursive alias at line {node.start_mark.line + 1} (a value that contains itself)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose documents are refused past MAX_EXPANDED_NODES (aliases expanded), with a recursive alias, or
    nested past the recursion limit, before anything is constructed."""

    def compose_document(self) -> yaml.Node | None:
        try:
            node = super().compose_document()
        except RecursionError:
            raise YAMLRefused("the document is nested too deeply to read (a config is a few levels deep)") from None
        expanded_nodes(node)
        return node

    def construct_document(self, node: yaml.Node) -> Any:
        try:
            return super().construct_document(node)
        except RecursionError:
            raise YAMLRefused("the document is nested too deeply to read (a config is a few levels deep)") from None


def duplicate_keys(node: yaml.Node | None) -> list[tuple[str, int, int]]:
    """Every key given twice in one mapping of the document: (key path, first line, later line), lines from 1, in
    file order. Walks distinct nodes once (aliases are not re-entered)."""
    out: list[tuple[str, int, int]] = []
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(node, "")] if node is not None else []
    while stack:
        n, path = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, yaml.MappingNode):
            first: dict[str, int] = {}
            for k, v in n.value:
                name = str(k.value) if isinstance(k, yaml.ScalarNode) else "?"
                where = f"{path}.{name}" if path else name
                line = k.start_mark.line + 1
                if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                    if name in first:
                        out.append((where, first[name], line))
                    else:
                        first[name] = line
                stack.append((v, where))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(n.value))
    return sorted(out, key=lambda d: (d[2], d[0]))


def compose(text: str) -> yaml.Node | None:
    """The document's node tree through :class:`BoundedLoader` (yaml.YAMLError on a bad or hostile file)."""
    return yaml.compose(text, Loader=BoundedLoader)


def load(text: str, *, refuse_duplicates: bool = True) -> Any:
    """``yaml.safe_load`` bounded as :class:`BoundedLoader` is; a key given twice in one mapping raises
    yaml.YAMLError naming both lines unless ``refuse_duplicates`` is off."""
    node = compose(text)
    if refuse_duplicates:
        dups = duplicate_keys(node)
        if dups:
            key, first, again = dups[0]
            raise YAMLRefused(f"key '{key}' is given twice, at lines {first} and {again} (keep one)")
    loader = BoundedLoader("")
    try:
        return loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


__all__ = ["BoundedLoader", "MAX_EXPANDED_NODES", "YAMLRefused", "compose", "duplicate_keys", "expanded_nodes", "load"]
