"""The routing a question assumes is asked the same way everywhere: every MCP tool and CLI command that takes
``moe_imbalance`` takes ``routing`` (forced | natural, moeplan.base.routing) beside it, with one schema. Before,
estimate / plan / sweep / export took routing but explain and check_config did not, and ``moeplan explain`` of run
files dropped ``--routing`` silently (``moeplan check`` had no such flag)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from moeplan.base.routing import ROUTINGS
from moeplan.cli import main
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION

from ..mcp_support import require_mcp

RUN = Path(__file__).resolve().parents[2] / "src/moeplan/assistant/skills/moeplan/evals/files/qwen3_30b_a3b_h100_ep16.yaml"
FILE_ARGS = ["--model", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16"]
NATURAL = DEFAULT_CALIBRATION.natural_routing_imbalance


def _cli_json(argv: list[str], capsys: Any) -> tuple[int, Any]:
    code = main(argv)
    out = capsys.readouterr()
    return code, (json.loads(out.out) if out.out.strip() else out.err)


def test_check_takes_routing(capsys):
    code, out = _cli_json(["check", str(RUN), *FILE_ARGS, "--routing", "natural", "--json"], capsys)
    assert out["estimate"]["routing"] == "natural" and out["estimate"]["moe_imbalance"] == NATURAL
    _, plain = _cli_json(["check", str(RUN), *FILE_ARGS, "--json"], capsys)
    assert plain["estimate"]["routing"] == "forced"
    code, err = _cli_json(["check", str(RUN), *FILE_ARGS, "--routing", "natural", "--moe-imbalance", "1.2"], capsys)
    assert code == 2 and "--routing or --moe-imbalance" in err


def test_explain_of_files_takes_routing(capsys):
    """--routing natural is --moe-imbalance at the calibration's natural imbalance (it was ignored: forced)."""
    base = ["explain", str(RUN), "--seq-len", "8k", *FILE_ARGS, "--no-fix", "--json"]
    _, natural = _cli_json([*base, "--routing", "natural"], capsys)
    _, number = _cli_json([*base, "--moe-imbalance", str(NATURAL)], capsys)
    _, forced = _cli_json(base, capsys)
    assert natural == number
    assert natural["a"]["tflops_per_gpu"] < forced["a"]["tflops_per_gpu"]


def _mcp_tools() -> dict[str, Any]:
    require_mcp()
    import anyio
    from mcp import Client

    from moeplan.assistant.mcp_server import build_server

    async def run() -> Any:
        async with Client(build_server()) as client:
            return (await client.list_tools()).tools

    return {t.name: t for t in anyio.run(run)}


def test_every_tool_with_moe_imbalance_takes_routing_the_same_way():
    tools = _mcp_tools()
    taking = {name: t.input_schema["properties"] for name, t in tools.items()
              if "moe_imbalance" in t.input_schema["properties"]}
    assert {"estimate", "plan", "sweep", "export", "explain", "check_config"} <= set(taking)
    routing = {name: props.get("routing") for name, props in taking.items()}
    assert all(routing.values()), routing
    first = next(iter(routing.values()))
    assert all(r == first for r in routing.values()), routing
    assert set(ROUTINGS) <= set(json.dumps(first).replace('"', " ").split())
    imbalance = {name: props["moe_imbalance"] for name, props in taking.items()}
    assert all(i == next(iter(imbalance.values())) for i in imbalance.values()), imbalance


def _call(tool: str, **arguments: Any) -> Any:
    require_mcp()
    import anyio
    from mcp import Client

    from moeplan.assistant.mcp_server import build_server

    async def run() -> Any:
        async with Client(build_server()) as client:
            return await client.call_tool(tool, arguments)

    return anyio.run(run)


def test_check_config_tool_takes_routing():
    res = _call("check_config", config=RUN.read_text(), model="qwen3-30b-a3b", gpu="h100", gpus=16, routing="natural")
    assert not res.is_error, res.content[0].text
    assert res.structured_content["estimate"]["routing"] == "natural"
    both = _call("check_config", config=RUN.read_text(), model="qwen3-30b-a3b", gpu="h100", gpus=16,
                 routing="natural", moe_imbalance=1.2)
    assert both.is_error and "not both" in both.content[0].text


@pytest.mark.parametrize("routing", ROUTINGS)
def test_explain_tool_takes_routing(routing):
    res = _call("explain", config_a=RUN.read_text(), model="qwen3-30b-a3b", gpu="h100", gpus=16, seq_lens=[8192],
                routing=routing, no_fix=True)
    assert not res.is_error, res.content[0].text
    same = _call("explain", config_a=RUN.read_text(), model="qwen3-30b-a3b", gpu="h100", gpus=16, seq_lens=[8192],
                 moe_imbalance=1.0 if routing == "forced" else NATURAL, no_fix=True)
    assert res.structured_content == same.structured_content
