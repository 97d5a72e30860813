"""Plan and explain answers that say everything a user needs (issue 11): the Megatron-Core release that
unlocks a better plan, a CP rationale that never contradicts its own table, and explain flagging runs
that do not fit."""

from __future__ import annotations

import json

import pytest

from moeplan import api
from moeplan.cli import main

NEXT = dict(gpu="h100", gpus=128, seq_len=131072, gbs=64)


@pytest.fixture(scope="module")
def next_016():
    return api.search_plans("qwen3-next-80b-a3b", top=2, **NEXT)


def test_qwen3_next_rationale_names_the_release_and_its_gain(next_016):
    there = api.search_plans("qwen3-next-80b-a3b", top=1, mcore_version="0.18", **NEXT)
    best, best_018 = next_016.best, there.best
    assert best.config.parallel.cp == 1 and best_018.config.parallel.cp > 1  # the gate is what changes the plan
    reasons = {r.topic: r for r in best.rationale}
    cp = reasons["cp"].text
    assert "Gated DeltaNet" in cp and "0.18" in cp and "not a valid layout" in cp
    newer = reasons["mcore_version"]
    gain = best_018.estimate.time.tokens_per_s_per_gpu / best.estimate.time.tokens_per_s_per_gpu - 1
    assert newer.numbers["mcore_version"] == "0.18" and newer.numbers["gain"] == pytest.approx(gain, abs=1e-3)
    assert gain > 0.1 and f"{gain:+.0%}" in newer.text and "--mcore-version 0.18" in newer.text
    assert best_018.config.parallel.short() in newer.text
    # at 0.18 nothing is gated, and with CP pinned to 1 the newer release changes nothing
    assert "mcore_version" not in {r.topic for r in best_018.rationale}
    pinned = api.search_plans("qwen3-next-80b-a3b", top=1, fixed={"cp": 1}, **NEXT)
    assert pinned.result.newer is None


def test_models_without_gated_deltanet_get_no_release_note():
    found = api.search_plans("qwen3-30b-a3b", gpu="h100", gpus=32, seq_len=32768, gbs=32, top=1)
    assert found.result.newer is None and "mcore_version" not in {r.topic for r in found.best.rationale}


def test_no_fit_names_the_release_that_fits(capsys):
    code = main(["plan", "qwen3-next-80b-a3b", "--gpus", "128", "--seq-len", "256k", "--gbs", "64"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "no layout fits" in err and "0.18 adds it and a plan fits there" in err and "--mcore-version 0.18" in err
    there = api.search_plans("qwen3-next-80b-a3b", gpu="h100", gpus=128, seq_len=262144, gbs=64, top=1,
                             mcore_version="0.18")
    assert there.best is not None and there.best.config.parallel.short() in err


def test_cp_rationale_points_to_the_plan_that_uses_the_start():
    """Plan 2's CP 16 is invalid with its TP 4 x PP 8 on 256 GPUs; plan 1 uses CP 16: the rationale names the
    broken rule and the plan, never a bare "CP 16 is not a valid layout"."""
    found = api.search_plans("qwen3-235b-a22b", gpu="h100", gpus=256, seq_len=65536, gbs=256, top=3)
    by_cp = {}
    for rank, p in enumerate(found.plans, 1):
        by_cp.setdefault(p.config.parallel.cp, rank)
    checked = 0
    for rank, p in enumerate(found.plans, 1):
        cp = next(r for r in p.rationale if r.topic == "cp")
        if cp.numbers.get("cp_start_valid") is False:
            start = cp.numbers["cp_start"]
            assert f"CP {start} is not a valid layout with this plan's TP {p.config.parallel.tp}" in cp.text
            assert "does not divide" in cp.text or "Megatron-Core" in cp.text or "divisible" in cp.text
            if start in by_cp:
                assert cp.numbers["cp_start_plan"] == by_cp[start] and f"Plan {by_cp[start]} uses CP {start}" in cp.text
                checked += 1
    assert checked >= 1


def test_explain_flags_runs_that_do_not_fit_and_keeps_vpp(capsys):
    args = ["explain", "qwen3-next-80b-a3b", "--seq-len", "32k,64k", "--gpus", "128", "--gbs-tokens", "4m",
            "--hold", "--tp", "2", "--cp", "1", "--pp", "2", "--vpp", "2", "--ep", "16", "--json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    reasons = {(r["topic"], r["numbers"].get("run")): r for r in data["reasons"]}
    for run, side in (("A", "a"), ("B", "b")):
        note = reasons[("fits", run)]
        assert data[side]["fits"] is False
        assert note["numbers"]["memory_gib"] == pytest.approx(data[side]["memory_gib"]["total"], abs=0.01)
        assert note["numbers"]["memory_gib"] > note["numbers"]["capacity_gib"]
    assert "VPP2" in reasons[("throughput", None)]["text"]
    fix = reasons[("fix", None)]["text"]
    assert "Run B does not fit" in fix and "0.18" in fix  # and the release that lifts the Gated DeltaNet CP rule


def test_explain_is_silent_about_fit_when_both_fit(capsys):
    assert main(["explain", "qwen3-30b-a3b", "--seq-len", "16k,32k", "--gpus", "32", "--gbs-tokens", "1m",
                 "--json", "--no-fix"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["a"]["fits"] and data["b"]["fits"]
    assert "fits" not in {r["topic"] for r in data["reasons"]}


def test_explain_refuses_gbs_tokens_that_do_not_divide(capsys):
    code = main(["explain", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "24k,32k", "--gbs-tokens", "1m"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "not a whole number of 24,576-token sequences" in err and "GBS 42" in err and "GBS 43" in err


def test_sweep_notes_the_release_where_it_gains(capsys):
    assert main(["sweep", "qwen3-next-80b-a3b", "--gpus", "128", "--seq-len", "128k", "--gbs-tokens", "8m"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    there = api.search_plans("qwen3-next-80b-a3b", gpu="h100", gpus=128, seq_len=131072, gbs=64, top=1,
                             mcore_version="0.18").best
    assert "note: seq 131,072: Megatron-Core 0.16 has no context parallel for Gated DeltaNet; 0.18 adds it" in out
    assert there.config.parallel.short() in out
