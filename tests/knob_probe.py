"""A knob record (RunKnobs or RunConfig) with the knob metadata of some fields changed, for the probes that check a
default or a choice of the knob table reaches every edge (tests/unit/test_mcp_derived.py, test_api_knob_defaults.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from moeplan.run import knobs as knob_module


def probe_record(record: type, name: str, changes: dict[str, dict[str, Any]]) -> type:
    """``record`` subclassed as ``name`` with the knob metadata of each field named in ``changes`` updated
    (``precision={"api_default": "fp8"}``); the changed fields keyword-only, as RunKnobs' fields are."""
    base = {f.name: f for f in dataclasses.fields(record)}
    hints = knob_module._hints()
    specs = []
    for field_name, change in changes.items():
        f = base[field_name]
        default: dict[str, Any] = ({"default_factory": f.default_factory} if f.default is dataclasses.MISSING
                                   else {"default": f.default})
        meta = {"knob": {**f.metadata["knob"], **change}}
        specs.append((field_name, hints[field_name], dataclasses.field(metadata=meta, kw_only=True, **default)))
    return dataclasses.make_dataclass(name, specs, bases=(record,), frozen=True)
