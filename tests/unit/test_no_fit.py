"""When nothing fits or nothing is valid: the closest miss is a real run's shortfall, a sweep keeps going past
a length with no valid layout, and the exit codes say which of the two (1: no answer, 2: bad input)."""

from __future__ import annotations

import json
import re

import pytest

from moeplan import api
from moeplan.advice import dispatcher_candidates, recompute_ladder
from moeplan.cli import main
from moeplan.errors import InvalidLayout
from moeplan.hardware import load_gpu
from moeplan.memory import GIB, peak_memory_bytes
from moeplan.models import load_model
from moeplan.parallel import Batch, build_pipeline
from moeplan.planner import SearchSpace, _layouts, _sharding_options, _strongest, search
from moeplan.run import RunConfig

MISS = re.compile(r"closest: (?P<short>[^(]+) \((?P<knobs>[^)]*)\) needs (?P<need>[\d.]+) GiB per GPU, "
                  r"(?P<miss>[\d.]+) GiB over the (?P<budget>[\d.]+) GiB budget")


def _estimate_args(c: dict, model: str, gpus: int, seq: int) -> list[str]:
    """The `moeplan estimate` command line of the closest run."""
    par = c["parallel"]
    argv = ["estimate", model, "--gpus", str(gpus), "--seq-len", str(seq), "--gbs", str(c["gbs"]),
            "--mbs", str(c["mbs"]), "--recompute", c["recompute"], "--dispatcher", c["dispatcher"],
            "--optimizer-offload", str(c["optimizer_offload"]), "--json"]
    for k in ("tp", "pp", "vpp", "cp", "ep", "etp"):
        argv += [f"--{k}", str(par[k])]
    if c["fsdp"]:
        argv += ["--fsdp", c["fsdp"]]
    if c["ep_overlap"]:
        argv += ["--ep-overlap"]
    return argv


def test_closest_miss_is_what_estimate_reports(capsys):
    """qwen3-235b-a22b on 16 H100 fits at no length: the one line names the closest run with its knobs, and
    its miss is what `moeplan estimate` of that run reports less the budget; it was the static floor
    (weights + gradients + reserve, 12.4 GiB over at every length), not a run's shortfall."""
    misses = []
    for seq in (4096, 32768, 131072):
        code = main(["plan", "qwen3-235b-a22b", "--gpus", "16", "--seq-len", str(seq), "--gbs", str(2**20 // seq),
                     "--json"])
        out, err = capsys.readouterr()
        assert code == 1 and json.loads(out) == [] and len(err.strip().splitlines()) == 1, err
        m = MISS.search(err)
        assert m, err
        c = api.plan("qwen3-235b-a22b", gpus=16, seq_len=seq, gbs=2**20 // seq, top=1)["closest"]
        assert m["short"] == c["short"] and f"GBS {c['gbs']}" in m["knobs"] and c["recompute"] in m["knobs"]
        assert main(_estimate_args(c, "qwen3-235b-a22b", 16, seq)) == 0
        total = json.loads(capsys.readouterr().out)["memory_gib"]["total"]
        assert float(m["need"]) == pytest.approx(total, abs=0.1)
        assert float(m["miss"]) == pytest.approx(total - float(m["budget"]), abs=0.1)
        assert float(m["budget"]) == pytest.approx(load_gpu("h100").hbm_bytes * 0.9 / GIB, abs=0.1)  # --headroom 0.1
        misses.append(float(m["miss"]))
    assert len(set(misses)) == 3, misses  # the activations grow with the length


def test_closest_miss_is_the_least_over_every_layout():
    """The closest run misses by least among every valid layout at its strongest memory option, under every
    sharding choice (the search reads only the layouts whose static floor is below the best miss found)."""
    spec, gpu = load_model("qwen3-235b-a22b"), load_gpu("h100")
    seq, gbs, space = 32768, 1, SearchSpace()
    result = search(spec, gpu, 16, seq, gbs, allow_gbs_reduction=False)
    assert not result.plans and result.closest is not None
    budget = gpu.hbm_bytes * (1 - space.headroom)
    ladder = recompute_ladder(spec, seq, "0.16")
    best = float("inf")
    for par, mbs in _layouts(spec, gpu, 16, Batch(seq, gbs, 1), space, "0.16"):
        cfg = RunConfig(spec, par, Batch(seq, gbs, mbs), gpu=gpu)
        cfg = cfg.evolve(dispatcher=dispatcher_candidates(cfg, gpu)[0])
        for sh in _sharding_options(space, "0.16", "adam"):
            run = _strongest(cfg.evolve(fsdp=sh), space, ladder)
            best = min(best, peak_memory_bytes(run, gpu.nvlink_domain, build_pipeline(spec, par)) - budget)
    assert result.closest[1] == pytest.approx(best, rel=1e-9)


SWEEP = ["sweep", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k,128k,1m", "--gbs-tokens", "1m"]
# 48 GPUs: every data-parallel size is a multiple of 3, so 96K (GBS 32) has no valid layout at all
SWEEP_48 = ["sweep", "qwen3-30b-a3b", "--gpus", "48", "--seq-len", "4k,96k,1m", "--gbs-tokens", "3m"]


def test_sweep_goes_on_past_a_length_with_no_valid_layout(capsys, monkeypatch):
    """At 96K tokens GBS is 32 and every data-parallel size on 48 GPUs a multiple of 3: that length gets its row
    with the reason (exit 1, as for a length where nothing fits) instead of aborting the sweep."""
    assert main([*SWEEP_48, "--json"]) == 1
    out, err = capsys.readouterr()
    rows = json.loads(out)
    assert [r["seq_len"] for r in rows] == [4096, 98304, 1048576]
    assert rows[0]["fits"] and "parallel" in rows[0] and rows[2]["invalid"] is None
    assert rows[1]["fits"] is False and rows[1]["closest"] is None and "no valid layout" in rows[1]["invalid"]
    # the example is a layout with a CP the search tries (not CP 1, at 96K), broken by the GBS
    assert "CP16 EP1 DP3: GBS 32 is not divisible by MBS x DP = 1x3 = 3" in rows[1]["invalid"]
    monkeypatch.setenv("COLUMNS", "250")
    assert main(SWEEP_48) == 1
    out = capsys.readouterr().out
    assert "98,304" in out and "no valid layout" in out and "1,048,576" in out
    # a held layout invalid at one length: its row says why
    assert main([*SWEEP, "--tp", "1", "--cp", "1", "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert "parallel" in rows[0] and rows[2]["invalid"].startswith("invalid layout TP1 PP1 CP1 EP1 DP16: GBS 1")


def test_sweep_with_no_valid_length_is_bad_input(capsys):
    """No length valid: the question is bad input, as `plan` says it (exit 2, one line, nothing printed)."""
    for argv in (["sweep", "qwen3-30b-a3b", "--gpus", "48", "--seq-len", "96k", "--gbs-tokens", "3m"],
                 [*SWEEP, "--tp", "3"]):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.strip().splitlines()) == 1 and "moeplan: error:" in err
    with pytest.raises(InvalidLayout):
        api.sweep("qwen3-30b-a3b", gpus=48, seq_lens=[98304], gbs_tokens=3 * 2**20)


def test_exit_codes_are_documented(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "exit codes: 0 plans found; 1 no layout fits" in text and "2 bad input" in text and "[]" in text
    assert main(["plan", "qwen3-30b-a3b", "--gpus", "24", "--seq-len", "1m", "--gbs", "1"]) == 2  # no valid layout


def test_cp_range_reaches_the_gpu_count_when_the_start_is_beyond_it(capsys):
    """16 GPUs at 1M tokens: the guidance starts at CP 256, beyond the GPU count; the search still tries CP up
    to 16 (DP 1 makes GBS 1 valid), so the answer is a plan or "no layout fits" with the closest run, never a
    GBS-divisibility reason drawn from a CP the search does not try."""
    from moeplan.planner import candidate_sizes

    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    assert 16 in candidate_sizes(spec, gpu, 16, Batch(1048576, 1, 1), SearchSpace())[1]
    for gbs in (1, 16):  # GBS 16 halves down to 1 when nothing fits
        code = main(["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "1m", "--gbs", str(gbs)])
        out, err = capsys.readouterr()
        assert code in (0, 1) and "no valid layout" not in err and "divisible" not in err
        if code == 1:
            assert "no layout fits" in err and "closest:" in err
    assert main([*SWEEP, "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["fits"] and rows[1]["fits"]
    assert rows[2]["invalid"] is None and (rows[2]["fits"] or rows[2]["closest"] is not None)
    # where no layout is valid the example is one with a CP the search tries, broken by the rule that breaks it
    with pytest.raises(InvalidLayout, match=r"CP16 EP1 DP1: seq_len 1048577 is not divisible by 2 x CP x TP"):
        search(spec, gpu, 16, 1048577, 1)
