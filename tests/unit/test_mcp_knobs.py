"""The MCP tools take their knobs from the knob table (moeplan.run.knobs), not from a hand-written list: estimate
takes every knob (before: fp8_attention, moe_router_dtype and activation_offload_fraction, which the CLI has, and the
API / strategy-file-only bf16_start_layers, bf16_end_layers, te_quant_map, tp_comm_overlap, dp_overlap,
offload_overlap, precision_aware_optimizer and muon_* were missing), plan / export / sweep / explain every knob an
estimating command takes (command_knobs), each with its allowed values; a knob argument reaches the API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..mcp_support import require_mcp

require_mcp()

import anyio  # noqa: E402

from mcp import Client  # noqa: E402

from moeplan import api  # noqa: E402
from moeplan.assistant import mcp_server  # noqa: E402
from moeplan.assistant.mcp_server import build_server, knob_argument  # noqa: E402
from moeplan.run.knobs import command_knobs, knob_table  # noqa: E402

from .test_mcp_vocabulary import allowed  # noqa: E402

M = "qwen3-30b-a3b"
RUN = dict(model=M, gpu="h100", gpus=8, seq_len=4096, gbs=64, ep=8)


@pytest.fixture(scope="module")
def listed() -> dict[str, Any]:
    async def run() -> Any:
        async with Client(build_server()) as client:
            return (await client.list_tools()).tools

    return {t.name: t for t in anyio.run(run)}


def _call(tool: str, args: dict[str, Any]) -> Any:
    async def run() -> Any:
        async with Client(build_server()) as client:
            return await client.call_tool(tool, args)

    return anyio.run(run)


@pytest.mark.parametrize("k", knob_table(), ids=lambda k: k.api)
def test_estimate_takes_every_knob_with_its_values(listed, k):
    props = listed["estimate"].input_schema["properties"]
    name = knob_argument(k)
    assert name in props, name
    if k.choices:
        assert allowed(props[name]) - {None} == set(k.choices), name


@pytest.mark.parametrize("tool", ["plan", "export", "sweep", "explain"])
def test_searches_take_every_command_knob_with_its_values(listed, tool):
    props = listed[tool].input_schema["properties"]
    for k in command_knobs():
        name = knob_argument(k)
        assert name in props, (tool, name)
        if k.choices:
            assert allowed(props[name]) - {None} == set(k.choices), (tool, name)


def test_no_tool_publishes_the_knobs_plumbing(listed):
    assert all("knobs" not in t.input_schema["properties"] for t in listed.values())


def test_a_knob_argument_reaches_the_estimate():
    """moe_router_dtype fp64 (a derived argument) gives the API's answer for it, not the default's."""
    res = _call("estimate", {**RUN, "moe_router_dtype": "fp64"})
    assert not res.is_error, res.content[0].text
    want = api.estimate(M, **{k: v for k, v in RUN.items() if k != "model"}, moe_router_dtype="fp64")
    default = api.estimate(M, **{k: v for k, v in RUN.items() if k != "model"})
    assert want["memory_gib"] != default["memory_gib"] or want["step_time_s"] != default["step_time_s"]
    assert res.structured_content["memory_gib"] == want["memory_gib"]
    assert res.structured_content["step_time_s"] == want["step_time_s"]


def test_a_bad_knob_value_is_a_one_line_schema_error():
    res = _call("estimate", {**RUN, "muon_tp_mode": "distributed"})
    assert res.is_error and "muon_tp_mode" in res.content[0].text and "\n" not in res.content[0].text


def test_a_new_knob_reaches_the_tools_without_an_edit(monkeypatch):
    """A knob added to the table becomes a tool argument (the table is read where a tool is defined, with_knobs)."""
    from dataclasses import dataclass

    from moeplan.run import knobs as knob_module
    from moeplan.run.knobs import RunKnobs, knob

    @dataclass(frozen=True, kw_only=True)
    class _Dummy(RunKnobs):
        dummy_depth: int = knob(3, group="memory")

    monkeypatch.setattr(knob_module, "RunKnobs", _Dummy)
    knob_module._hints.cache_clear()
    try:
        async def probe(model: str, knobs: dict[str, Any] | None = None) -> Any:
            return knobs

        tool = mcp_server.with_knobs(every=True)(probe)
        import inspect

        assert "dummy_depth" in inspect.signature(tool).parameters
        assert "knobs" not in inspect.signature(tool).parameters
        assert anyio.run(lambda: tool(model=M, dummy_depth=5)) == {"dummy_depth": 5}
        assert anyio.run(lambda: tool(model=M)) == {}  # defaults stay out: a run config's own settings hold
    finally:
        knob_module._hints.cache_clear()


def test_explain_of_run_configs_refuses_knob_arguments():
    """Run configs say their own settings: a knob argument beside them is refused, not silently ignored."""
    from moeplan.assistant import tools
    from moeplan.base.errors import MoeplanError

    with pytest.raises(MoeplanError, match="optimizer: run configs say their own settings"):
        tools.explain(config_a="tp: 1\n", seq_lens=[8192], optimizer="muon")


def test_explain_of_run_configs_takes_te_grouped_tensor():
    """The knob the CLI's explain of files applies (the files' comment or the flag), the MCP tool passes through."""
    from moeplan.assistant import tools

    text = (Path(__file__).resolve().parents[1] / "data" / "deepseek_v3_128k_256_h100.yaml").read_text()
    out = tools.explain("deepseek-v3", config_a=text, seq_lens=[65536], te_grouped_tensor=True, no_fix=True,
                        gpu="h100", gpus=256)
    assert out["a"]["tflops_per_gpu"] > 0 and out["b"]["seq_len"] == 65536
