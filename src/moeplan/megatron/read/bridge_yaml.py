"""Reader of a Megatron Bridge ``ConfigContainer`` YAML (sections model:, train:, ...), keeping each key's line."""

from __future__ import annotations

import yaml
from yaml.constructor import SafeConstructor

from moeplan.base import safeyaml
from moeplan.megatron.read.bridge import BRIDGE_SECTIONS, classify_bridge
from moeplan.megatron.read.collect import Collector, ParsedRun, fail

def _yaml_root(text: str, origin: str) -> yaml.MappingNode:
    try:
        node = safeyaml.compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise fail(origin, mark.line + 1 if mark else None, f"YAML error: {exc.problem or exc.context}") from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise fail(origin, None, f"YAML error: {exc}") from None
    if not isinstance(node, yaml.MappingNode):
        line = node.start_mark.line + 1 if node is not None else 1
        raise fail(origin, line, "not a Megatron Bridge YAML mapping, a list of overrides or Megatron-LM arguments")
    return node


def _construct(node: yaml.Node, origin: str) -> object:
    try:
        return SafeConstructor().construct_object(node, deep=True)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or node.start_mark
        raise fail(origin, mark.line + 1, f"YAML error: {exc.problem}") from None
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
        raise fail(origin, node.start_mark.line + 1, f"YAML error: {exc}") from None


def _yaml_key(node: yaml.Node, origin: str) -> str:
    if not isinstance(node, yaml.ScalarNode):
        raise fail(origin, node.start_mark.line + 1, "YAML error: mapping keys must be plain names")
    return str(node.value)


def parse_bridge_yaml(text: str, origin: str) -> ParsedRun:
    root = _yaml_root(text, origin)
    col = Collector(origin, "bridge-yaml")
    for path, first, again in safeyaml.duplicate_keys(root):
        col.repeated(path, first, again, "YAML")
    for key_node, value_node in root.value:
        section, line = _yaml_key(key_node, origin), key_node.start_mark.line + 1
        if section == "_target_":
            col.ignored.append((section, line))
        elif isinstance(value_node, yaml.MappingNode) and section in BRIDGE_SECTIONS:
            for sub_key, sub_value in value_node.value:
                path = f"{section}.{_yaml_key(sub_key, origin)}"
                classify_bridge(col, path, _construct(sub_value, origin), sub_key.start_mark.line + 1)
        elif section in BRIDGE_SECTIONS:
            _classify_bridge_scalar(col, section, _construct(value_node, origin), line)
        else:
            col.unknown.append((section, line))
    return col.result()


def _classify_bridge_scalar(col: Collector, section: str, value: object, line: int) -> None:
    """A section given as a scalar: a mixed-precision recipe name, or null (section off)."""
    if section == "mixed_precision" and isinstance(value, str):
        classify_bridge(col, section, value, line)
    elif value is None:
        col.ignored.append((section, line))
    else:
        col.unknown.append((section, line))
