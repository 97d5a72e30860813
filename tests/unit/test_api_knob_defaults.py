"""The Python API's knob keywords take their defaults from the knob table (moeplan.run.knobs: ``Knob.api_default``),
as the CLI's flags and the MCP tools do (tests/unit/test_mcp_derived.py): :func:`moeplan.api.search_plans` (whose
signature completes a sweep's question: api._SEARCH_SIGNATURE) and :func:`moeplan.api.build_config` (the keywords
:func:`moeplan.api.estimate` and estimate_run pass on). Before, search_plans typed 'bf16', 'adam', False, ... as
literals beside the table. :func:`api_against` is the probe, as test_mcp_derived's is for the MCP tools (but without
the MCP SDK): a fresh copy of moeplan.api executed against a knob table whose metadata is changed."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import pytest

from moeplan import api
from moeplan.run import config as config_module
from moeplan.run import knobs as knob_module
from moeplan.run.config import RunConfig
from moeplan.run.knobs import FSDP_SEARCH, RunKnobs, knob_table
from tests.knob_probe import probe_record

# search_plans' parameters named as a knob's API keyword whose default is not the knob's, and why (each checked to be
# this default): routing's imbalance (None: resolved from ``routing``, default forced); the search's fsdp word (auto:
# Megatron-FSDP searched beside the distributed optimizer); cuda_graphs and optimizer_offload, which in a search are
# switches (may the search try them: bools), not the knobs (graph scopes; an offloaded fraction).
SEARCH_NOT_THE_API_DEFAULT: dict[str, Any] = {"moe_imbalance": None, "fsdp": FSDP_SEARCH, "cuda_graphs": True,
                                              "optimizer_offload": True}


def _knob_parameters(function: Any, table: tuple[Any, ...]) -> dict[str, tuple[Any, Any]]:
    """Parameter name -> (its default in ``function``'s signature, the knob's API default) for every parameter that
    is a knob's API keyword."""
    by_api = {k.api: k for k in table}
    return {p.name: (p.default, by_api[p.name].api_default)
            for p in inspect.signature(function).parameters.values() if p.name in by_api}


def _search_mismatches(module: ModuleType, table: tuple[Any, ...]) -> dict[str, Any]:
    pairs = _knob_parameters(module.search_plans, table)
    return {name: got for name, (got, want) in pairs.items() if got != SEARCH_NOT_THE_API_DEFAULT.get(name, want)}


def test_search_plans_knob_defaults_are_the_knob_tables():
    pairs = _knob_parameters(api.search_plans, knob_table())
    for name in ("precision", "te_grouped_tensor", "grad_fp32", "bf16_moments", "optimizer", "fsdp_double_buffer",
                 "mcore_version", "te_version", "reserve_gib"):
        assert name in pairs, name
    assert set(SEARCH_NOT_THE_API_DEFAULT) <= set(pairs)  # every exception is a knob parameter of search_plans
    assert _search_mismatches(api, knob_table()) == {}
    assert api._SEARCH_SIGNATURE == inspect.signature(api.search_plans)  # what a sweep's question is completed from


def test_estimates_knob_keywords_default_to_the_knob_tables():
    """build_config's signature (its ``**knobs`` spelled out) has every knob, each with the table's API default."""
    pairs = _knob_parameters(api.build_config, knob_table(RunConfig))
    assert set(pairs) == {k.api for k in knob_table(RunConfig)}
    assert {name: got for name, (got, want) in pairs.items() if got != want} == {}


@contextmanager
def api_against(monkeypatch: pytest.MonkeyPatch, **changes: dict[str, Any]) -> Iterator[ModuleType]:
    """A fresh copy of moeplan.api (its own module object; the real one untouched) executed against a knob table with
    the knob metadata of the fields named changed (``precision={"api_default": "fp8"}``): RunKnobs' and RunConfig's."""
    monkeypatch.setattr(knob_module, "RunKnobs", probe_record(RunKnobs, "_ProbeKnobs", changes))
    monkeypatch.setattr(config_module, "RunConfig", probe_record(RunConfig, "_ProbeConfig", changes))
    knob_module._hints.cache_clear()
    name = "moeplan._probe_api"
    spec = importlib.util.spec_from_file_location(name, api.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        monkeypatch.undo()
        knob_module._hints.cache_clear()


PROBE = {"precision": "fp8-cs", "optimizer": "muon", "te_grouped_tensor": True, "grad_fp32": False,
         "bf16_moments": True, "fsdp_double_buffer": True, "mcore_version": "0.19", "te_version": "2.18",
         "reserve_gib": 3.5, "cp_comm_type": "a2a"}


def test_the_api_defaults_follow_the_knob_table(monkeypatch):
    """Knob API defaults changed in the table reach search_plans' signature (and so the sweep's question,
    _SEARCH_SIGNATURE) and build_config's (estimate's keywords); the real moeplan.api is left as it was."""
    with api_against(monkeypatch, **{name: {"api_default": value} for name, value in PROBE.items()}) as probe:
        table = knob_module.knob_table()
        assert _search_mismatches(probe, table) == {}
        search = {p.name: p.default for p in probe._SEARCH_SIGNATURE.parameters.values()}
        assert {name: search[name] for name in PROBE if name in search} == {
            name: value for name, value in PROBE.items() if name != "cp_comm_type"}
        built = {name: got for name, (got, _) in _knob_parameters(probe.build_config, table).items()}
        assert {name: built[name] for name in PROBE} == PROBE
    search = {p.name: p.default for p in api._SEARCH_SIGNATURE.parameters.values()}
    assert (search["precision"], search["optimizer"], search["grad_fp32"]) == ("bf16", "adam", True)  # untouched
    assert _search_mismatches(api, knob_table()) == {}
