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
    assert best.config.parallel.cp == 1  # no Gated DeltaNet CP before 0.18
    reasons = {r.topic: r for r in best.rationale}
    cp = reasons["cp"].text
    assert "Gated DeltaNet" in cp and "0.18" in cp and "not a valid layout" in cp
    newer = reasons["mcore_version"]
    fastest_016 = max(p.estimate.time.tokens_per_s_per_gpu for p in next_016.plans)
    gain = next_016.result.newer.tokens_per_s_per_gpu / fastest_016 - 1
    assert newer.numbers["mcore_version"] == "0.18" and newer.numbers["gain"] == pytest.approx(gain, abs=1e-3)
    # the newer release runs every plan the older one runs: its best is at least as fast (never "slower")
    assert gain >= -1e-9
    # at 128K on 128 H100, CP for Gated DeltaNet is what fits a fast layout: the release gains, and says how
    assert gain > 0.1 and f"{gain:+.0%}" in newer.text and "--mcore-version 0.18" in newer.text
    assert "no gain" not in newer.text
    assert best_018.estimate.time.tokens_per_s_per_gpu >= 0.8 * next_016.result.newer.tokens_per_s_per_gpu
    # at 0.18 nothing is gated, and with CP pinned to 1 the newer release changes nothing
    assert "mcore_version" not in {r.topic for r in best_018.rationale}
    pinned = api.search_plans("qwen3-next-80b-a3b", top=1, fixed={"cp": 1}, **NEXT)
    assert pinned.result.newer is None


def test_a_newer_release_is_never_reported_slower():
    """64K, GBS 64 on 128 H100: 0.18's own search missed the fastest 0.16 plan (FSDP is tried on the best
    distributed-optimizer layouts only); the 0.16 plans re-costed at 0.18 floor its answer."""
    found = api.search_plans("qwen3-next-80b-a3b", top=3, gpu="h100", gpus=128, seq_len=65536, gbs=64)
    fastest = max(p.estimate.time.tokens_per_s_per_gpu for p in found.plans)
    assert found.result.newer.tokens_per_s_per_gpu >= fastest * (1 - 1e-9)
    text = next(r.text for r in found.best.rationale if r.topic == "mcore_version")
    assert "no gain at this length" in text or "+" in text


def test_models_without_gated_deltanet_get_no_release_note():
    found = api.search_plans("qwen3-30b-a3b", gpu="h100", gpus=32, seq_len=32768, gbs=32, top=1)
    assert found.result.newer is None and "mcore_version" not in {r.topic for r in found.best.rationale}


def test_no_fit_names_the_release_that_fits(capsys):
    args = dict(gpu="h100", gpus=128, seq_len=262144, gbs=64, top=1)
    here = api.search_plans("qwen3-next-80b-a3b", **args)
    there = api.search_plans("qwen3-next-80b-a3b", mcore_version="0.18", **args)
    code = main(["plan", "qwen3-next-80b-a3b", "--gpus", "128", "--seq-len", "256k", "--gbs", "64"])
    out, err = capsys.readouterr()
    if here.best is None:  # nothing fits at 0.16: the one-line answer names the release where a plan fits
        assert code == 1 and len(err.strip().splitlines()) == 1 and "no layout fits" in err
        if there.best is not None:
            assert "0.18 adds it and a plan fits there" in err and "--mcore-version 0.18" in err
            assert there.best.config.parallel.short() in err
        else:
            assert "0.18" not in err
    else:
        assert code == 0 and "0.18 adds it" in " ".join(out.split())


def test_cp_rationale_names_the_rule_and_the_plan_that_uses_the_start():
    """TP 4 x PP 8 on 256 GPUs leaves no room for the guidance's CP 16 (4x16x8 = 512); another plan of the
    same answer runs CP 16 with TP 2: the rationale names the broken rule and that plan, never a bare
    "CP 16 is not a valid layout"."""
    from moeplan.plan.advice import DEFAULT_HEADROOM, explain_plan
    from moeplan.engine.estimate import evaluate

    common = dict(gpus=256, seq_len=65536, gbs=256, pp=8, vpp=4, recompute="full:uniform:1")
    mine, gpu = api.build_config("qwen3-235b-a22b", tp=4, cp=4, ep=8, **common)
    other, _ = api.build_config("qwen3-235b-a22b", tp=2, cp=16, ep=32, **common)
    budget = gpu.hbm_bytes * (1 - DEFAULT_HEADROOM)
    peers = ((1, other, 900.0), (2, mine, 850.0))
    cp = next(r for r in explain_plan(mine, gpu, evaluate(mine, gpu), budget, 256, peers=peers) if r.topic == "cp")
    assert cp.numbers["cp_start"] == 16 and cp.numbers["cp_start_valid"] is False and cp.numbers["cp_start_plan"] == 1
    assert "CP 16 is not a valid layout with this plan's TP 4, PP 8 and EP 8 kept: TP x CP x PP = 4x16x8 = 512" in cp.text
    assert f"Plan 1 uses CP 16 with other sizes ({other.parallel.short()}, 900 tokens/s/GPU)" in cp.text
    # a real answer: whenever a plan's rationale calls the start invalid and a plan of the table uses it, it says so
    found = api.search_plans("qwen3-235b-a22b", gpu="h100", gpus=256, seq_len=65536, gbs=256, top=3)
    first_with = {}
    for rank, p in enumerate(found.plans, 1):
        first_with.setdefault(p.config.parallel.cp, rank)
    for p in found.plans:
        r = next(r for r in p.rationale if r.topic == "cp")
        if r.numbers.get("cp_start_valid") is False and r.numbers["cp_start"] in first_with:
            assert r.numbers["cp_start_plan"] == first_with[r.numbers["cp_start"]]


def test_cp_rationale_never_passes_a_cp_only_variant_off_as_the_start():
    """Qwen3-235B-A22B at 32K on 256 H100: plan 1 runs CP 2 (the measured recipe's layout, a tie) and a later plan a
    CP 8 layout (the guidance's start), while plan 1 with only CP changed to 8 runs slower. The rationale says the
    slow run is plan 1's layout with only CP changed (and names it), and names the table's CP 8 plan beside it; it
    never reads "CP 8 fits ... but runs at N" as if that were what CP 8 gives. (DeepSeek-V3 at 32K on 128 H100 was
    the case until ties after plan 1 followed by speed: its plan 1 now runs CP 8.)"""
    from dataclasses import replace

    from moeplan.plan.advice import cp_start

    # ten plans: since ties put the fastest after plan 1 first (issue #31), the CP 8 layouts come from plan 7 on
    found = api.search_plans("qwen3-235b-a22b", gpu="h100", gpus=256, seq_len=32768, gbs=256, top=10)
    cp0 = cp_start(32768)
    first_with = {}
    for rank, p in enumerate(found.plans, 1):
        first_with.setdefault(p.config.parallel.cp, rank)
    assert cp0 in first_with and found.plans[0].config.parallel.cp != cp0  # the case of the defect
    for p in found.plans:
        if p.config.parallel.cp == cp0:
            continue
        r = next(r for r in p.rationale if r.topic == "cp")
        assert f" CP {cp0} fits (" not in r.text and f" CP {cp0} would need" not in r.text
        if "cp_start_tokens_per_s" in r.numbers or "cp_start_memory_gib" in r.numbers:
            variant = replace(p.config.parallel, cp=cp0)
            assert f"This plan with only CP changed to {cp0} ({variant.short()})" in r.text
        peer = found.plans[first_with[cp0] - 1]
        assert r.numbers["cp_start_plan"] == first_with[cp0]
        assert (f"Plan {first_with[cp0]} uses CP {cp0} with other sizes ({peer.config.parallel.short()}, "
                f"{peer.estimate.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU)") in r.text


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
    # GBS 42 / 43 at 24K (the suggestion before) is no whole number of 32K sequences: multiples of 98,304 are
    assert "not a whole number of 24,576-token sequences" in err and "use 983,040 or 1,081,344 at every length" in err


def test_sweep_notes_the_release_where_it_gains(capsys):
    assert main(["sweep", "qwen3-next-80b-a3b", "--gpus", "128", "--seq-len", "128k", "--gbs-tokens", "8m"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    newer = api.search_plans("qwen3-next-80b-a3b", gpu="h100", gpus=128, seq_len=131072, gbs=64, top=1).result.newer
    assert newer is not None and newer.config is not None
    note = "note: seq 131,072: Megatron-Core 0.16 has no context parallel for Gated DeltaNet; 0.18 adds it"
    assert (note in out) == (newer.gain is not None and newer.gain > 0.01)
    if note in out:
        assert newer.config.parallel.short() in out


def test_check_points_the_gated_deltanet_cp_error_at_its_line(tmp_path, capsys):
    from moeplan.lint import checker

    assert main(["plan", "qwen3-next-80b-a3b", "--gpus", "128", "--seq-len", "128k", "--gbs", "64", "--top", "1",
                 "--mcore-version", "0.18", "--cp", "8", "--format", "overrides"]) == 0
    text = capsys.readouterr().out
    path = tmp_path / "next.overrides"
    path.write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith("model.context_parallel_size="))
    result = checker.check(str(path), mcore_version="0.16")
    hit = next(f for f in result.findings if f.rule == "gdn-cp-version")
    assert hit.severity == "error" and hit.line == line and "needs 0.18 or newer" in hit.message
    assert checker.check(str(path)).errors == 0  # at the release the file names, it is valid


@pytest.mark.parametrize("argv,needle", [
    (["explain", "qwen3-30b-a3b", "deepseek-v3", "--gpus", "16", "--seq-len", "4k,8k", "--gbs-tokens", "1m"],
     "the second input 'deepseek-v3' would be ignored"),
    (["explain", "a.yaml", "b.yaml", "c.yaml"], "explain compares two runs; got 3 inputs"),
    (["explain", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k,8k", "--gbs-tokens", "1m", "--hold", "--cp", "64"],
     "invalid layout: TP x CP x PP = 1x64x1 = 64 does not divide 16 GPUs"),
])
def test_explain_refuses_inputs_it_would_ignore(capsys, argv, needle):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err
