"""What every reader returns (:class:`ParsedRun`) and the collector that resolves a file's hits into it: each
Megatron field read from one or several paths, the first export path winning, conflicts reported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from moeplan.errors import MoeplanError, one_line
from moeplan.megatron.fields import KIND_WORDS, KNOB_BY_FIELD, Knob, coerce

RunKind = Literal["bridge-yaml", "overrides", "megatron-lm"]


@dataclass
class ParsedRun:
    """Settings read from a run file, keyed by Megatron-Core field name."""

    settings: dict[str, object]
    unknown: list[tuple[str, int]]  # keys moeplan does not know, with their line
    kind: RunKind
    lines: dict[str, int]  # line of each settings key
    origin: str
    ignored: list[tuple[str, int]] = field(default_factory=list)  # recognised keys moeplan does not use
    architecture: dict[str, object] = field(default_factory=dict)  # model architecture fields found
    conflicts: list[str] = field(default_factory=list)  # one line each: two paths of a field disagree
    provenance: dict[str, str] = field(default_factory=dict)  # '# moeplan: model=... gpus=...' of an export


def fail(origin: str, line: int | None, reason: str) -> MoeplanError:
    where = f"{origin}:{line}" if line is not None else origin
    return MoeplanError(f"{where}: {one_line(reason)}")


class Collector:
    """Gathers (path -> value, line) hits and resolves them into a ParsedRun."""

    def __init__(self, origin: str, kind: RunKind) -> None:
        self.origin, self.kind = origin, kind
        self.hits: dict[str, tuple[Knob, int, object, int]] = {}  # path -> (knob, priority, value, line)
        self.unknown: list[tuple[str, int]] = []
        self.ignored: list[tuple[str, int]] = []
        self.architecture: dict[str, object] = {}

    def knob(self, path: str, knob: Knob, priority: int, raw: object, line: int) -> None:
        try:
            value = coerce(knob.kind, raw)
        except ValueError:
            shown = one_line(raw)[:60]
            raise fail(self.origin, line, f"{path}: expected {KIND_WORDS[knob.kind]}, got '{shown}'") from None
        self.hits[path] = (knob, priority, value, line)

    def drop(self, path: str) -> None:
        self.hits.pop(path, None)

    def result(self) -> ParsedRun:
        by_field: dict[str, list[tuple[int, str, object, int]]] = {}
        for path, (knob, prio, value, line) in self.hits.items():
            by_field.setdefault(knob.field, []).append((prio, path, value, line))
        settings: dict[str, object] = {}
        lines: dict[str, int] = {}
        conflicts: list[str] = []
        for name, hits in by_field.items():
            hits.sort(key=lambda h: h[0])
            _, path, value, line = hits[0]
            if KNOB_BY_FIELD[name].merge_any and any(h[2] is True for h in hits):
                path, value, line = next((h[1], h[2], h[3]) for h in hits if h[2] is True)
            for _, other, other_value, other_line in hits[1:]:
                if other_value != value and not KNOB_BY_FIELD[name].merge_any:
                    conflicts.append(f"{self.origin}:{other_line}: {other}={other_value!r} disagrees with "
                                     f"{path}={value!r} (line {line}); {path} wins")
            settings[name], lines[name] = value, line
        return ParsedRun(settings, self.unknown, self.kind, lines, self.origin, self.ignored, self.architecture,
                         conflicts)
