"""What every reader returns (:class:`ParsedRun`) and the collector that resolves a file's hits into it: each
Megatron field read from one or several paths, the first export path winning, conflicts reported. A file's
settings (:class:`FileSettings`) and conflicts (:class:`Conflict`) remember where in the file they are, so an
error about a value names ``FILE:LINE`` (:meth:`FileSettings.error`, :func:`fail`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from moeplan.base.errors import MoeplanError, one_line
from moeplan.base.fields import KIND_WORDS, KNOB_BY_FIELD, Knob, coerce

RunKind = Literal["bridge-yaml", "overrides", "megatron-lm"]


def fail(origin: str, line: int | None, reason: str) -> MoeplanError:
    """The one form of an error about a run file: ``FILE:LINE: reason`` (``FILE: reason`` without a line)."""
    where = f"{origin}:{line}" if line is not None else origin
    return MoeplanError(f"{where}: {one_line(reason)}")


class FileSettings(dict[str, object]):
    """A run file's settings (Megatron field -> value) that remember the file and each field's line, so an
    error about their values (:mod:`moeplan.megatron.to_run`) names ``FILE:LINE`` as the reader's own do. A copy
    (``dict(settings)``) is a plain dict: its errors name no file."""

    def __init__(self, values: Mapping[str, object], origin: str, lines: Mapping[str, int]) -> None:
        super().__init__(values)
        self.origin = origin
        self.lines = lines

    def error(self, fields: Iterable[str], reason: str) -> MoeplanError:
        """:func:`fail` at the line of the first of ``fields`` the file sets (the file alone when it sets none)."""
        line = next((self.lines[f] for f in fields if f in self.lines), None)
        return fail(self.origin, line, reason)


@dataclass(frozen=True)
class Conflict:
    """Two paths of one field disagree: where (the losing path's line) and what; ``str()`` is
    ``FILE:LINE: message``, a finding shows the line on its own."""

    origin: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.origin}:{self.line}: {self.message}"


@dataclass
class ParsedRun:
    """Settings read from a run file, keyed by Megatron-Core field name."""

    settings: dict[str, object]  # a FileSettings (Collector.parsed builds every ParsedRun)
    unknown: list[tuple[str, int]]  # keys moeplan does not know, with their line
    kind: RunKind
    lines: dict[str, int]  # line of each settings key
    origin: str
    ignored: list[tuple[str, int]] = field(default_factory=list)  # recognised keys moeplan does not use
    architecture: dict[str, object] = field(default_factory=dict)  # model architecture fields found
    conflicts: list[Conflict] = field(default_factory=list)  # two paths of a field disagree
    provenance: dict[str, str] = field(default_factory=dict)  # '# moeplan: model=... gpus=...' of an export
    paths: dict[str, str] = field(default_factory=dict)  # the path (Bridge key or Megatron-LM flag) each setting came from
    architecture_lines: dict[str, int] = field(default_factory=dict)  # line of each architecture field
    env: dict[str, str] = field(default_factory=dict)  # a launch script's environment moeplan models (NAME -> value)
    env_lines: dict[str, int] = field(default_factory=dict)  # line of each env assignment (the last one)
    repeats: list[Conflict] = field(default_factory=list)  # a key or flag given twice: the later line wins


class Collector:
    """Gathers (path -> value, line) hits and resolves them into a ParsedRun."""

    def __init__(self, origin: str, kind: RunKind) -> None:
        self.origin, self.kind = origin, kind
        self.hits: dict[str, tuple[Knob, int, object, int]] = {}  # path -> (knob, priority, value, line)
        self.why: dict[str, str] = {}  # path -> why it wins over the field's other paths (Megatron's own rule)
        self.unknown: list[tuple[str, int]] = []
        self.ignored: list[tuple[str, int]] = []
        self.architecture: dict[str, object] = {}
        self.architecture_lines: dict[str, int] = {}
        self.env: dict[str, str] = {}
        self.env_lines: dict[str, int] = {}
        self.repeats: dict[tuple[str, int], Conflict] = {}

    def repeated(self, path: str, first: int, again: int, keeper: str) -> None:
        """``path`` is given twice in one mapping or argument list (lines ``first`` and ``again``); ``keeper``
        (YAML, argparse) keeps the later one without a word, so the file says two things and runs one."""
        self.repeats.setdefault((path, again), Conflict(self.origin, again, (
            f"{path} is given twice, at lines {first} and {again}; {keeper} keeps the later one (line {again}) "
            "silently: keep one")))

    def environment(self, name: str, value: str, line: int) -> None:
        """A variable of the job's environment the file sets (``export NAME=V``); a later setting wins."""
        self.env[name] = value
        self.env_lines[name] = line

    def arch(self, name: str, value: object, line: int) -> None:
        """A model architecture field the file states (checked against --model: moeplan.megatron.architecture.architecture_mismatch)."""
        self.architecture[name] = value
        self.architecture_lines[name] = line

    def knob(self, path: str, knob: Knob, priority: int, raw: object, line: int, why: str | None = None) -> None:
        """A hit of ``path`` (lower ``priority`` wins over the field's other paths; ``why``: the rule that makes
        it win, said in the conflict)."""
        if why is not None:
            self.why[path] = why
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
        paths: dict[str, str] = {}
        conflicts: list[Conflict] = []
        for name, hits in by_field.items():
            hits.sort(key=lambda h: h[0])
            _, path, value, line = hits[0]
            if KNOB_BY_FIELD[name].merge_any and any(h[2] is True for h in hits):
                path, value, line = next((h[1], h[2], h[3]) for h in hits if h[2] is True)
            for _, other, other_value, other_line in hits[1:]:
                if other_value != value and not KNOB_BY_FIELD[name].merge_any:
                    why = f" ({self.why[path]})" if path in self.why else ""
                    conflicts.append(Conflict(self.origin, other_line, one_line(
                        f"{other}={other_value!r} disagrees with {path}={value!r} (line {line}); {path} wins{why}")))
            settings[name], lines[name], paths[name] = value, line, path
        return ParsedRun(FileSettings(settings, self.origin, lines), self.unknown, self.kind, lines, self.origin,
                         self.ignored, self.architecture, conflicts, paths=paths,
                         architecture_lines=dict(self.architecture_lines), env=dict(self.env),
                         env_lines=dict(self.env_lines), repeats=sorted(self.repeats.values(), key=lambda c: c.line))
