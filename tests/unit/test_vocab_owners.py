"""Each vocabulary of moeplan.base.vocab is written once: a typing ``Literal`` (the type RunConfig's fields carry)
and its tuple (what the CLI's choices, the API's checks and the MCP schemas read) are one list, the tuple read from
the Literal (typing.get_args), never a second copy that could drift from it."""

from __future__ import annotations

import ast
import inspect

from moeplan.base import vocab
from moeplan.run import knobs


def _string_lists(module: object) -> list[tuple[int, frozenset[str]]]:
    """Every list of string literals written in ``module``'s source: a ``Literal[...]`` subscript or a tuple / list
    display of two or more strings, with its line."""
    out, inside = [], set()  # inside: a Literal's own tuple of words
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "Literal":
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            inside.add(id(node.slice))
        elif isinstance(node, (ast.Tuple, ast.List)) and id(node) not in inside:
            items = node.elts
        else:
            continue
        words = [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
        if len(words) >= 2 and len(words) == len(items):
            out.append((node.lineno, frozenset(words)))
    return out


def test_no_vocabulary_is_written_twice():
    """No two string lists in vocab.py hold the same words (before: each Literal beside a tuple of its values), and
    the knob table (moeplan.run.knobs) re-types none of vocab.py's lists."""
    lists = _string_lists(vocab)
    seen: dict[frozenset[str], int] = {}
    for line, words in lists:
        assert words not in seen, f"vocab.py lines {seen[words]} and {line} write {sorted(words)} twice"
        seen[words] = line
    for line, words in _string_lists(knobs):
        assert words not in seen, f"run/knobs.py line {line} re-types vocab.py line {seen[words]}: {sorted(words)}"
