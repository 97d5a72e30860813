"""Read a run file back into Megatron settings: a Megatron Bridge YAML (:mod:`.bridge_yaml`), a file of Bridge
overrides (:mod:`.overrides`) or a Megatron-LM argument list (:mod:`.megatron_lm`), detected from the text.

Settings keys are Megatron-Core field names (``global_batch_size``, ``micro_batch_size`` and ``seq_length``
are Megatron-LM argument names). The Bridge dataset sequence length is ``dataset.sequence_length`` up to Bridge
v0.5 (Megatron-Core <= 0.18) and ``dataset.seq_length`` from Bridge v0.6 (Megatron-Core 0.19); both are read.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from moeplan.base.te_release import CPU_OFFLOAD_V1_ENV, FUSED_GROUPED_MLP_ENV, GROUPED_TENSOR_ENV
from moeplan.megatron.read.bridge import known_bridge_paths
from moeplan.megatron.read.bridge_yaml import parse_bridge_yaml
from moeplan.megatron.read.collect import ParsedRun, RunKind, fail
from moeplan.megatron.read.megatron_lm import known_flags, parse_megatron_lm
from moeplan.megatron.read.overrides import parse_override_value, parse_overrides

_MLM_FLAG = re.compile(r"(^|[\s\"'(])--[A-Za-z]")  # also opening an array or string: ARGS=(--a, ARGS="--a
_OVERRIDE_START = re.compile(r"['\"]?((\+\+|\+)?[A-Za-z_][\w\-.]*=|~[A-Za-z_])")


def _detect(text: str) -> RunKind:
    """YAML when the first meaningful line is a YAML key or document marker; Megatron-LM when the text has
    --flags (a launch script's too); overrides when the first line starts with key=value (or ~key); otherwise YAML."""
    lines = [raw.strip() for raw in text.splitlines()]
    first = next((line for line in lines if line and not line.startswith("#")), "")
    if first.startswith(("---", "%")) or re.match(r"[\w.\-]+\s*:(\s|$)", first):
        return "bridge-yaml"
    if any(_MLM_FLAG.search(line) for line in lines if not line.startswith("#")):
        return "megatron-lm"
    if not first or _OVERRIDE_START.match(first):
        return "overrides"
    return "bridge-yaml"


_PROVENANCE = re.compile(r"^[ \t]*#[ \t]*moeplan:(.*)$", re.MULTILINE)
PROVENANCE_KEYS = ("model", "gpu", "hardware", "gpus", "mcore-version", "te-version", "moe-imbalance", "reserve-gib",
                   GROUPED_TENSOR_ENV, CPU_OFFLOAD_V1_ENV, FUSED_GROUPED_MLP_ENV)  # + export.env_settings


def read_provenance(text: str) -> dict[str, str]:
    """The ``# moeplan: model=... gpu=... [hardware=...] gpus=... mcore-version=... [te-version=...]`` comment of
    a moeplan export (values shell-quoted where they need it: paths with spaces)."""
    m = _PROVENANCE.search(text)
    if m is None:
        return {}
    try:
        items = shlex.split(m.group(1))
    except ValueError:  # an unbalanced quote: read it word by word
        items = m.group(1).split()
    pairs = (item.split("=", 1) for item in items if "=" in item)
    return {k: v for k, v in pairs if k in PROVENANCE_KEYS and v}


def parse_run_text(text: str, origin: str = "<text>") -> ParsedRun:
    """Read a Bridge YAML, a list of Bridge overrides or Megatron-LM arguments (detected from the text)."""
    kind = _detect(text)
    if kind == "megatron-lm":
        run = parse_megatron_lm(text, origin)
    elif kind == "overrides":
        run = parse_overrides(text, origin)
    else:
        run = parse_bridge_yaml(text, origin)
    if not (run.settings or run.unknown or run.ignored or run.architecture):
        raise fail(origin, None, "no settings found (expected a Megatron Bridge YAML, overrides or Megatron-LM arguments)")
    run.provenance = read_provenance(text)
    return run


def known_keys(kind: RunKind) -> tuple[str, ...]:
    """Every key the reader knows for a file kind: the candidates of a "did you mean" on an unknown key."""
    return known_flags() if kind == "megatron-lm" else known_bridge_paths()


def read_run_file(path: str | Path) -> ParsedRun:
    """:func:`parse_run_text` on a file (``-``: standard input, e.g. `moeplan plan ... --format yaml |
    moeplan check -`); unreadable files raise MoeplanError naming the file."""
    if str(path) == "-":
        try:
            text = sys.stdin.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise fail("<stdin>", None, f"cannot read the run file from standard input: {exc}") from None
        return parse_run_text(text, "<stdin>")
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise fail(str(p), None, f"cannot read run file: {reason}") from None
    return parse_run_text(text, str(p))


__all__ = ["ParsedRun", "RunKind", "known_keys", "parse_override_value", "parse_run_text", "read_run_file"]
