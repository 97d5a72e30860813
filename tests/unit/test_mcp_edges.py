"""`moeplan mcp` at the edges it shares with the CLI, through the SDK's in-process client: the routing the
estimating tools take (``routing`` or ``moe_imbalance``, resolved by moeplan.base.routing as the CLI resolves its
flags, with the same refusal) and say in every result, and the export's no-fit error in the CLI's words."""

from __future__ import annotations

import pytest

from ..mcp_support import require_mcp

require_mcp()

from moeplan.cli import main  # noqa: E402
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as CAL  # noqa: E402

from .test_mcp_server import Q, Q_ARGS, cli_json, error, ok, tools  # noqa: E402,F401  (tools: a fixture)

NATURAL = CAL.natural_routing_imbalance
SWEEP = dict(model="qwen3-30b-a3b", gpu="h100", gpus=16, seq_lens=[16384, 32768], gbs_tokens=2**21)
SWEEP_ARGS = ["qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "16k,32k", "--gbs-tokens", "2m"]


def test_the_estimating_tools_describe_routing(tools):
    for name in ("estimate", "plan", "sweep", "export"):
        props = tools[name].input_schema["properties"]
        text = str(props["routing"])
        assert "forced" in text and "natural" in text and "natural_routing_imbalance" in text, name
        assert "not both" in props["moe_imbalance"]["description"], name
    for name in ("estimate", "plan", "sweep"):
        assert "routing" in str(tools[name].output_schema), name


def test_routing_natural_equals_the_cli(capsys):
    got = ok("estimate", dict(Q, ep=16, routing="natural"))
    assert (got["routing"], got["moe_imbalance"]) == ("natural", NATURAL)
    assert got == cli_json(capsys, "estimate", *Q_ARGS, "--ep", "16", "--routing", "natural")
    got = ok("plan", dict(Q, top=2, routing="natural"))
    assert (got["routing"], got["moe_imbalance"]) == ("natural", NATURAL)
    assert got["plans"] == cli_json(capsys, "plan", *Q_ARGS, "--top", "2", "--routing", "natural")
    assert all(p["routing"] == "natural" for p in got["plans"])
    got = ok("sweep", dict(SWEEP, moe_imbalance=1.2))
    assert got["rows"] == cli_json(capsys, "sweep", *SWEEP_ARGS, "--moe-imbalance", "1.2")
    assert all((r["routing"], r["moe_imbalance"]) == ("custom", 1.2) for r in got["rows"])
    got = ok("export", dict(Q, routing="natural"))
    assert (got["plan"]["routing"], got["plan"]["moe_imbalance"]) == ("natural", NATURAL)
    assert "moe-imbalance=" in got["provenance"]  # the export says what its plan assumed, for check to read back


def test_the_default_is_forced_and_said():
    got = ok("plan", dict(Q, top=1))
    assert (got["routing"], got["moe_imbalance"]) == ("forced", 1.0)


@pytest.mark.parametrize("name, args", [
    ("estimate", dict(Q, ep=16)), ("plan", dict(Q, top=1)), ("sweep", SWEEP), ("export", Q),
])
def test_routing_with_an_imbalance_is_the_clis_refusal(name, args):
    text = error(name, dict(args, routing="natural", moe_imbalance=1.2))
    assert text == "give routing or moe_imbalance, not both (routing natural stands for an imbalance)"


def test_an_unknown_routing_is_a_schema_error():
    text = error("plan", dict(Q, routing="balanced"))
    assert text.startswith("plan: routing: ") and "balanced" in text


def test_export_with_nothing_fitting_says_the_clis_line(capsys):
    args = dict(model="deepseek-v3", gpu="h100", gpus=8, seq_len=131072, gbs=8)
    text = error("export", args)
    assert main(["plan", "deepseek-v3", "--gpu", "h100", "--gpus", "8", "--seq-len", "128k", "--gbs", "8"]) == 1
    assert text == capsys.readouterr().err.strip().removeprefix("moeplan: ") + "; nothing to export"


def test_check_config_says_the_routing_of_its_file(capsys):
    text = ok("export", dict(Q, routing="natural", format="yaml"))["text"]
    got = ok("check_config", {"config": text})
    assert (got["estimate"]["routing"], got["estimate"]["moe_imbalance"]) == ("natural", NATURAL)
