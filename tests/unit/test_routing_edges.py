"""Routing at every edge: one function (moeplan.base.routing.resolve_imbalance) turns (routing, moe_imbalance) into
the imbalance for the CLI, the API, the MCP tools and the page, with one refusal of both; every answer (JSON rows,
tables) says the routing it assumed (``routing``: forced | natural | custom, ``moe_imbalance``; both null for a
model without experts)."""

from __future__ import annotations

import json

import pytest

from moeplan import api
from moeplan.base.errors import MoeplanError
from moeplan.base.routing import resolve_imbalance, routing_fields, routing_words
from moeplan.cli import main
from moeplan.engine.estimate import estimate_dict, routing_answer
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as CAL

M = "qwen3-30b-a3b"
EST = dict(gpu="h100", gpus=16, seq_len=4096, gbs=64, ep=8)
PLAN = dict(gpu="h100", gpus=16, seq_len=4096, gbs=64, top=2)
ARGV = [M, "--gpu", "h100", "--gpus", "16", "--seq-len", "4k"]
NATURAL = CAL.natural_routing_imbalance


def test_resolve_imbalance_is_the_one_rule():
    assert resolve_imbalance(None, None, NATURAL) == 1.0
    assert resolve_imbalance("forced", None, NATURAL) == 1.0
    assert resolve_imbalance("natural", None, NATURAL) == NATURAL
    assert resolve_imbalance(None, 1.3, NATURAL) == 1.3
    with pytest.raises(MoeplanError, match=r"^give routing or moe_imbalance, not both"):
        resolve_imbalance("natural", 1.3, NATURAL)
    with pytest.raises(MoeplanError, match="routing must be one of forced, natural"):
        resolve_imbalance("balanced", None, NATURAL)
    assert routing_fields(1.0, NATURAL) == {"routing": "forced", "moe_imbalance": 1.0}
    assert routing_fields(NATURAL, NATURAL)["routing"] == "natural"
    assert routing_fields(1.3, NATURAL)["routing"] == "custom"
    assert routing_fields(None, NATURAL) == {"routing": None, "moe_imbalance": None}
    assert routing_words(routing_fields(None, NATURAL)) == ""


@pytest.mark.parametrize("given, routing, imbalance", [
    ({}, "forced", 1.0), ({"routing": "forced"}, "forced", 1.0), ({"routing": "natural"}, "natural", NATURAL),
    ({"moe_imbalance": 1.3}, "custom", 1.3), ({"moe_imbalance": 1.0}, "forced", 1.0),
])
def test_api_answers_say_the_routing(given, routing, imbalance):
    est = api.estimate(M, **EST, **given)
    assert (est["routing"], est["moe_imbalance"]) == (routing, imbalance)
    assert api.build_config(M, **EST, **given)[0].moe_imbalance == imbalance
    found = api.plan(M, **PLAN, **given)
    assert (found["routing"], found["moe_imbalance"]) == (routing, imbalance)
    assert found["plans"] and all((p["routing"], p["moe_imbalance"]) == (routing, imbalance) for p in found["plans"])
    rows = api.sweep(M, gpu="h100", gpus=16, seq_lens=[4096, 8192], gbs_tokens=2**18, **given)
    assert all((r["routing"], r["moe_imbalance"]) == (routing, imbalance) for r in rows)


def test_natural_routing_costs_what_its_imbalance_costs():
    """routing='natural' is the calibration's imbalance, not a label: the same estimate as the number."""
    by_word = api.estimate(M, **EST, routing="natural")
    by_number = api.estimate(M, **EST, moe_imbalance=NATURAL)
    assert by_word["step_time_s"] == by_number["step_time_s"] > api.estimate(M, **EST)["step_time_s"]


def test_a_model_without_experts_says_no_routing():
    est = api.estimate("llama3-8b", gpu="h100", gpus=8, seq_len=4096, gbs=64)
    assert est["routing"] is None and est["moe_imbalance"] is None
    found = api.plan("llama3-8b", gpu="h100", gpus=8, seq_len=4096, gbs=64, top=1, routing="natural")
    assert found["routing"] is None and found["plans"][0]["routing"] is None
    rows = api.sweep("llama3-8b", gpu="h100", gpus=8, seq_lens=[4096], gbs_tokens=64 * 4096, routing="natural")
    assert (rows[0]["routing"], rows[0]["moe_imbalance"]) == (None, None)


def test_routing_answer_is_the_one_place_that_asks_whether_a_model_routes(tmp_path, capsys):
    """Every answer's routing comes from moeplan.engine.estimate.routing_answer: a model without experts has none
    whatever imbalance its run carries (the estimate, the plan, the sweep row and check's estimate alike)."""
    dense, moe = api.resolve_model("llama3-8b"), api.resolve_model(M)
    assert routing_answer(dense, NATURAL, CAL) == {"routing": None, "moe_imbalance": None}
    assert routing_answer(moe, NATURAL, CAL) == {"routing": "natural", "moe_imbalance": NATURAL}
    assert routing_answer(moe, 1.3, CAL)["routing"] == "custom"
    run = tmp_path / "dense.yaml"
    assert main(["plan", "llama3-8b", "--gpu", "h100", "--gpus", "8", "--seq-len", "4k", "--gbs", "64",
                 "--format", "yaml"]) == 0
    run.write_text(capsys.readouterr().out)
    got = _json(capsys, "check", str(run), "--moe-imbalance", "1.3")["estimate"]
    assert (got["routing"], got["moe_imbalance"]) == (None, None)


def test_a_plan_with_nothing_fitting_still_says_its_routing():
    """PlanReport.as_dict took moe_imbalance from plan 1, so a search with no plan said null for a MoE model."""
    found = api.plan("deepseek-v3", gpu="h100", gpus=16, seq_len=131072, gbs=16, top=1, routing="natural",
                     allow_gbs_reduction=False)
    assert not found["plans"] and (found["routing"], found["moe_imbalance"]) == ("natural", NATURAL)


@pytest.mark.parametrize("call", [
    lambda: api.estimate(M, **EST, routing="natural", moe_imbalance=1.2),
    lambda: api.plan(M, **PLAN, routing="natural", moe_imbalance=1.2),
    lambda: api.sweep(M, gpu="h100", gpus=16, seq_lens=[4096], gbs_tokens=2**18, routing="forced", moe_imbalance=1.2),
    lambda: api.sweep(M, gpu="h100", gpus=16, seq_lens=[4096], gbs_tokens=2**18, routing="natural", moe_imbalance=1.2,
                      hold={"ep": 8}),
])
def test_api_refuses_routing_with_an_imbalance(call):
    with pytest.raises(MoeplanError) as exc:
        call()
    assert str(exc.value) == "give routing or moe_imbalance, not both (routing natural stands for an imbalance)"


@pytest.mark.parametrize("bad", ["balanced", 1, True])
def test_api_refuses_an_unknown_routing(bad):
    with pytest.raises(MoeplanError, match="routing must be one of forced, natural"):
        api.estimate(M, **EST, routing=bad)
    with pytest.raises(MoeplanError, match="routing must be one of forced, natural"):
        api.plan(M, **PLAN, routing=bad)


def _json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_json_rows_say_the_routing(capsys):
    est = _json(capsys, "estimate", *ARGV, "--gbs", "64", "--ep", "8", "--routing", "natural")
    assert (est["routing"], est["moe_imbalance"]) == ("natural", NATURAL)
    assert est == api.estimate(M, **EST, routing="natural") | {"hints": est["hints"]}
    plans = _json(capsys, "plan", *ARGV, "--gbs", "64", "--top", "2", "--moe-imbalance", "1.3")
    assert plans and all((p["routing"], p["moe_imbalance"]) == ("custom", 1.3) for p in plans)
    rows = _json(capsys, "sweep", M, "--gpu", "h100", "--gpus", "16", "--seq-len", "4k,8k", "--gbs-tokens", "256k")
    assert all((r["routing"], r["moe_imbalance"]) == ("forced", 1.0) for r in rows)


def test_cli_tables_say_the_routing(capsys):
    assert main(["estimate", *ARGV, "--gbs", "64", "--ep", "8", "--routing", "natural"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the header wraps at 80 columns
    assert f"natural routing, routing imbalance {NATURAL:.4g} (busiest expert rank / mean)" in out
    assert main(["sweep", M, "--gpu", "h100", "--gpus", "16", "--seq-len", "4k,8k", "--gbs-tokens", "256k"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("Assumes force-balanced routing")
    assert main(["plan", *ARGV, "--gbs", "64", "--top", "1", "--moe-imbalance", "1.3"]) == 0
    head = " ".join(" ".join(capsys.readouterr().out.splitlines()[:3]).split())  # the header, wrapped
    assert "fit (headroom 10% of HBM); routing imbalance 1.3 (busiest expert rank / mean)" in head


@pytest.mark.parametrize("command", [
    ["estimate", *ARGV, "--gbs", "64", "--ep", "8"], ["plan", *ARGV, "--gbs", "64"],
    ["sweep", M, "--gpu", "h100", "--gpus", "16", "--seq-len", "4k", "--gbs-tokens", "256k"],
    ["report", *ARGV, "--gbs", "64", "--html", "never-written.html"],
])
def test_cli_refuses_routing_with_an_imbalance(command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([*command, "--routing", "natural", "--moe-imbalance", "1.2"]) == 2
    err = capsys.readouterr().err
    assert err == ("moeplan: error: give --routing or --moe-imbalance, not both (--routing natural stands for an "
                   "imbalance)\n")
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_check_says_the_routing_its_file_assumed(capsys, tmp_path):
    """A plan exported under natural routing carries its imbalance in the '# moeplan:' comment; check reads it
    back and says it (JSON estimate, the table's first line); --moe-imbalance overrides it."""
    run = tmp_path / "run.yaml"
    assert main(["plan", *ARGV, "--gbs", "64", "--routing", "natural", "--format", "yaml"]) == 0
    run.write_text(capsys.readouterr().out)
    got = _json(capsys, "check", str(run))
    assert (got["estimate"]["routing"], got["estimate"]["moe_imbalance"]) == ("natural", NATURAL)
    assert _json(capsys, "check", str(run), "--moe-imbalance", "1.3")["estimate"]["routing"] == "custom"
    main(["check", str(run)])
    head = " ".join(" ".join(capsys.readouterr().out.splitlines()[:4]).split())
    assert f"natural routing, routing imbalance {NATURAL:.4g}" in head and "--routing" not in head


def test_check_gives_its_estimate_as_estimate_does(capsys, tmp_path):
    """One rendering of an estimate (moeplan.engine.estimate.estimate_dict): check's JSON estimate of a plan's
    exported file has the keys and routing of ``moeplan estimate --json`` (less its hints), and the API's copy is that function."""
    run = tmp_path / "run.yaml"
    assert main(["plan", *ARGV, "--gbs", "64", "--routing", "natural", "--top", "1", "--format", "yaml"]) == 0
    run.write_text(capsys.readouterr().out)
    checked = _json(capsys, "check", str(run))["estimate"]
    est = _json(capsys, "estimate", *ARGV, "--gbs", "64", "--ep", "8", "--routing", "natural")
    assert set(checked) == set(est) - {"hints"} and checked["routing"] == est["routing"] == "natural"
    assert api.estimate_dict is estimate_dict
