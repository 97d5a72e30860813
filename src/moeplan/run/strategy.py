"""The strategy as a file: every knob of a run, grouped by concern, that a user can save, edit and feed back
(``moeplan plan --save-strategy FILE.yaml``, ``moeplan estimate MODEL --gpus N --strategy FILE.yaml``).

The model and the cluster (GPU, GPU count, hardware file) stay on the command line, as calculon and SimuMax
keep model, system and strategy apart. Keys are the API's (and the CLI flags' with ``_`` for ``-``), each knob's
section its ``group`` in :mod:`moeplan.run.knobs`; a key left out takes its default. Bad files raise
:class:`~moeplan.base.errors.MoeplanError` naming the file and key.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from moeplan.base import safeyaml
from moeplan.base.errors import MoeplanError, one_line, yaml_problem
from moeplan.run.config import RunConfig
from moeplan.run.knobs import FSDP_OFF, Knob, knob_table

FORMAT = "moeplan-strategy/1"

# Sections in the order written. The layout, the batch and the model's training depth are the file's own keys; every
# other key is a knob of moeplan.run.knobs (its ``group``), in field order.
SECTIONS = ("layout", "batch", "training", "numerics", "moe", "communication", "memory", "optimizer", "megatron")
_OWN: dict[str, tuple[str, ...]] = {
    "layout": ("tp", "pp", "vpp", "cp", "ep", "etp", "pipeline_layout"),
    "batch": ("seq_len", "gbs", "mbs"),
    "training": ("mtp_layers",),  # multi-token prediction depth trained (Megatron-Core mtp_num_layers)
}
_OWN_KINDS = {**dict.fromkeys(("tp", "pp", "vpp", "cp", "ep", "etp", "seq_len", "gbs", "mbs", "mtp_layers"), "int"),
              "pipeline_layout": "str?"}


def _knobs(record: type | None = None) -> tuple[Knob, ...]:
    """The knobs the file holds: those of ``record`` (default RunConfig) with a group."""
    return tuple(k for k in knob_table(record or RunConfig) if k.group is not None)


def groups(record: type | None = None) -> dict[str, tuple[str, ...]]:
    """Section -> keys (build_config keyword arguments), in the order written, of ``record`` (default RunConfig)."""
    knobs = _knobs(record)
    unknown = sorted({k.group for k in knobs} - set(SECTIONS))
    if unknown:
        raise ValueError(f"knob group(s) {', '.join(map(str, unknown))} are not strategy sections")
    return {section: _OWN.get(section, ()) + tuple(k.api for k in knobs if k.group == section) for section in SECTIONS}


GROUPS: dict[str, tuple[str, ...]] = groups()


def _kinds() -> dict[str, str]:
    """Key -> value kind (moeplan.run.knobs.Knob.kind)."""
    return {**_OWN_KINDS, **{k.api: k.kind for k in _knobs()}}


def strategy_of(cfg: RunConfig) -> dict[str, dict[str, Any]]:
    """The strategy of a run, grouped, as plain values."""
    par, batch = cfg.parallel, cfg.batch
    flat: dict[str, Any] = {
        "tp": par.tp, "pp": par.pp, "vpp": par.vpp, "cp": par.cp, "ep": par.ep, "etp": par.etp,
        "pipeline_layout": par.pipeline_layout,
        "seq_len": batch.seq_len, "gbs": batch.gbs, "mbs": batch.mbs, "mtp_layers": cfg.model.mtp_layers,
    }
    flat.update({k.api: k.plain(getattr(cfg, k.name)) for k in _knobs(type(cfg))})
    return {group: {k: flat[k] for k in keys} for group, keys in groups(type(cfg)).items()}


def strategy_text(cfg: RunConfig) -> str:
    """The strategy as YAML, with a header naming the run it came from."""
    head = (f"# {FORMAT}: {cfg.model.name} on {cfg.parallel.gpus} x {cfg.gpu.name}\n"
            f"# moeplan estimate MODEL --gpu {cfg.gpu.name} --gpus {cfg.parallel.gpus} --strategy THIS_FILE\n")
    return head + str(yaml.safe_dump(strategy_of(cfg), sort_keys=False, default_flow_style=False))


def _value(origin: str, group: str, key: str, value: Any) -> Any:
    def bad(what: str) -> MoeplanError:
        return MoeplanError(f"{origin}: {group}.{key}: expected {what}, got {one_line(repr(value))[:60]}")

    kind = _kinds().get(key, "str")
    optional, kind = kind.endswith("?"), kind.rstrip("?")
    if kind == "int":
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        return value
    if kind == "float":
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise bad("a number")
        return float(value)
    if kind == "bool":
        if value is None and optional:
            return None
        if not isinstance(value, bool):
            raise bad("true, false or null" if optional else "true or false")
        return value
    if kind == "list":
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad("a list of names")
        return value
    if value is None and optional:
        return None
    words = next((k.choices for k in _knobs() if k.api == key), ())
    if value is False and FSDP_OFF in words:  # YAML 1.1 reads an unquoted `off` as false: the knob's word
        return FSDP_OFF
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise bad("a string")
    return str(value)


def parse_strategy(text: str, origin: str = "<strategy>") -> dict[str, Any]:
    """Keyword arguments for :func:`moeplan.api.build_config` from a strategy file's text."""
    try:
        tree = safeyaml.load(text)
    except yaml.YAMLError as exc:
        raise MoeplanError(f"{origin}: malformed YAML{yaml_problem(exc)}") from None
    sections = groups()
    if not isinstance(tree, dict):
        raise MoeplanError(f"{origin}: not a strategy (expected sections {', '.join(sections)})")
    out: dict[str, Any] = {}
    for group, body in tree.items():
        if group not in sections:
            raise MoeplanError(f"{origin}: unknown section '{group}'; sections: {', '.join(sections)}")
        if body is None:
            continue
        if not isinstance(body, dict):
            raise MoeplanError(f"{origin}: section '{group}' must be a mapping of keys to values")
        for key, value in body.items():
            if key not in sections[group]:
                raise MoeplanError(f"{origin}: unknown key '{group}.{key}'; {group} keys: {', '.join(sections[group])}")
            out[key] = _value(origin, group, key, value)
    for key in ("seq_len", "gbs"):
        if key not in out:
            raise MoeplanError(f"{origin}: batch.{key} is missing")
    return out


def read_strategy(path: str | Path) -> dict[str, Any]:
    """:func:`parse_strategy` on a file (unreadable files raise MoeplanError naming it)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise MoeplanError(f"{p}: cannot read strategy file: {one_line(reason)}") from None
    return parse_strategy(text, str(p))


__all__ = ["FORMAT", "GROUPS", "SECTIONS", "groups", "parse_strategy", "read_strategy", "strategy_of", "strategy_text"]
