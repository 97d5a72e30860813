"""The MCP tools' knob arguments are derived from the knob table (moeplan.run.knobs), as the CLI's flags are: each
knob argument's default is the knob's API default (``Knob.api_default``), as the SDK's own client lists the tools'
input schemas, and it follows the table when the table changes (before, the signatures typed 'bf16', 'adam', 'p2p',
0.0, ... as literals beside the table). The tables here are probes: the knob table with some knobs' metadata changed
(``probe_table``), the server re-imported against it, then restored."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from ..mcp_support import require_mcp

require_mcp()

import anyio  # noqa: E402

from mcp import Client  # noqa: E402

from moeplan.assistant import mcp_server, tools  # noqa: E402
from moeplan.assistant.mcp_server import knob_argument  # noqa: E402
from moeplan.run import knobs as knob_module  # noqa: E402
from moeplan.run.knobs import FSDP_SEARCH, RunKnobs, knob_table  # noqa: E402

from ..knob_probe import probe_record  # noqa: E402

# Tool arguments of a knob whose default is not the knob's API default, and why (each checked to be this default):
# None = unset, resolved by the tool as the CLI resolves its unset flag (the Transformer Engine release: the default
# or a run file's comment; the routing imbalance: --routing's or a file's; the reserve: a calibration profile's, a
# file's or the default); a search's pins (None: searched) and its fsdp word (auto: searched beside the
# distributed optimizer); a run file's Megatron-Core release (check, explain of configs: the file's comment).
NOT_THE_API_DEFAULT: dict[tuple[str, str], Any] = {
    **{(tool, arg): None for tool in ("estimate", "plan", "export", "sweep", "explain", "check_config")
       for arg in ("te_version", "moe_imbalance", "reserve_gib")},
    **{(tool, arg): None for tool in ("plan", "export", "sweep") for arg in ("dispatcher", "recompute")},
    **{(tool, "fsdp"): FSDP_SEARCH for tool in ("plan", "export", "sweep")},
    ("explain", "mcore_version"): None, ("check_config", "mcore_version"): None,
}


def _listed() -> dict[str, Any]:
    async def run() -> Any:
        async with Client(mcp_server.build_server()) as client:
            return (await client.list_tools()).tools

    return {t.name: t for t in anyio.run(run)}


def _want(tool: str, k: Any) -> Any:
    """The default the argument of knob ``k`` of ``tool`` should have: the knob's API default (an inverted flag's
    argument the negation) or the exception above."""
    default = (not k.api_default) if k.flag is not None and k.flag.get("invert") else k.api_default
    return NOT_THE_API_DEFAULT.get((tool, knob_argument(k)), default)


def _knob_defaults(listed: dict[str, Any]) -> dict[tuple[str, str], tuple[Any, Any]]:
    """(tool, argument) -> (the schema's default, the one it should have) for every knob argument of every tool."""
    table = {knob_argument(k): k for k in knob_table()}
    return {(tool.name, name): (schema.get("default"), _want(tool.name, table[name]))
            for tool in listed.values() for name, schema in tool.input_schema["properties"].items() if name in table}


def _function_defaults() -> dict[tuple[str, str], tuple[Any, Any]]:
    """The same for the tools' functions without the SDK (moeplan.assistant.tools), which the server calls."""
    table = {knob_argument(k): k for k in knob_table()}
    return {(name, p.name): (p.default, _want(name, table[p.name]))
            for name in ("estimate", "sweep", "explain", "check_config")
            for p in inspect.signature(getattr(tools, name)).parameters.values() if p.name in table} | {
        ("plan", name): (value, _want("plan", table[name])) for name, value in tools._plan_defaults().items()
        if name in table}


@contextmanager
def probe_table(monkeypatch: pytest.MonkeyPatch, **changes: dict[str, Any]) -> Iterator[None]:
    """The knob table with the knob metadata of the fields named changed (``precision={"api_default": "fp8"}``),
    and the MCP server (and its tools' module) re-imported against it; both restored afterwards."""
    probe = probe_record(RunKnobs, "_ProbeKnobs", changes)
    monkeypatch.setattr(knob_module, "RunKnobs", probe)
    knob_module._hints.cache_clear()
    try:
        importlib.reload(tools)
        importlib.reload(mcp_server)
        yield
    finally:
        monkeypatch.undo()
        knob_module._hints.cache_clear()
        importlib.reload(tools)
        importlib.reload(mcp_server)


def test_every_knob_arguments_default_is_the_knob_tables():
    pairs = _knob_defaults(_listed())
    assert ("estimate", "precision") in pairs and ("sweep", "cp_comm_type") in pairs
    assert {key: got for key, (got, want) in pairs.items() if got != want} == {}
    assert set(NOT_THE_API_DEFAULT) <= set(pairs)  # every exception is some tool's knob argument
    functions = _function_defaults()
    assert ("plan", "optimizer") in functions and ("sweep", "optimizer_offload") in functions
    assert {key: got for key, (got, want) in functions.items() if got != want} == {}


def test_the_defaults_follow_the_knob_table(monkeypatch):
    """Knob API defaults changed in the table reach every tool that takes the knob (estimate, plan, export, sweep,
    explain, check_config), and the tools' own functions (moeplan.assistant.tools) take the same defaults."""
    changes = {"precision": "fp8-cs", "optimizer": "muon", "cp_comm_type": "a2a", "optimizer_offload": 0.5,
               "dispatcher": "deepep", "recompute": "full", "mcore_version": "0.16"}
    with probe_table(monkeypatch, **{name: {"api_default": value} for name, value in changes.items()}):
        for pairs in (_knob_defaults(_listed()), _function_defaults()):
            assert {key: got for key, (got, want) in pairs.items() if got != want} == {}
        pairs = _knob_defaults(_listed())
        assert pairs[("sweep", "cp_comm_type")][0] == "a2a" and pairs[("plan", "precision")][0] == "fp8-cs"
        assert pairs[("estimate", "dispatcher")][0] == "deepep" and pairs[("sweep", "optimizer_offload")][0] == 0.5
    assert _knob_defaults(_listed())[("estimate", "precision")] == ("bf16", "bf16")  # restored


def test_every_knob_arguments_values_are_the_knob_tables_choices(monkeypatch):
    """One rule for every knob argument's allowed values: the knob's choices (``Knob.choices``: its vocabulary and the
    API's words), as the CLI's flags take them; a search's fsdp adds its word (fsdp_choices(search=True)). A word
    added to a knob in the table reaches each tool's schema (before, precision and optimizer read the vocabulary's
    tuples, so the tools refused a word the CLI and the API took)."""
    from moeplan.run.knobs import fsdp_choices, knob_named

    from .test_mcp_vocabulary import allowed

    words = {"precision": ("probe",), "optimizer": ("probe",), "dispatcher": ("auto", "probe"),
             "cp_comm_type": ("auto", "probe"), "fsdp": ("off", "probe")}
    with probe_table(monkeypatch, **{name: {"words": w} for name, w in words.items()}):
        seen = set()
        for tool in _listed().values():
            for name, schema in tool.input_schema["properties"].items():
                if name not in words:
                    continue
                search_fsdp = name == "fsdp" and tool.name in ("plan", "export", "sweep")
                want = fsdp_choices(search=True) if search_fsdp else knob_named(name).choices
                assert "probe" in want
                assert allowed(schema) - {None} == set(want), (tool.name, name)
                seen.add((tool.name, name))
        assert {("estimate", n) for n in words} <= seen and ("sweep", "cp_comm_type") in seen
        assert ("plan", "precision") in seen and ("explain", "optimizer") in seen


def test_every_tools_headroom_default_is_the_clis():
    """Every MCP tool that takes ``headroom`` and its assistant.tools function default to the CLI's --headroom
    (check_config defaulted to 0.0 where ``moeplan check`` uses 0.10: the same config at 92% of HBM was an error
    from the CLI and clean from MCP)."""
    from moeplan.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    cli = {a.default for name in ("check", "plan") for a in commands[name]._actions if a.dest == "headroom"}
    assert len(cli) == 1
    got = {t.name: t.input_schema["properties"]["headroom"].get("default") for t in _listed().values()
           if "headroom" in t.input_schema["properties"]}
    assert {"check_config", "plan"} <= set(got)
    assert set(got.values()) == cli, got
    funcs = {name: p.default for name in ("estimate", "sweep", "explain", "check_config")
             for p in inspect.signature(getattr(tools, name)).parameters.values() if p.name == "headroom"}
    funcs["plan"] = tools._plan_defaults()["headroom"]
    assert "check_config" in funcs and set(funcs.values()) == cli, funcs
