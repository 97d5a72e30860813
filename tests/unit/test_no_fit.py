"""When nothing fits or nothing is valid: the closest miss is a real run's shortfall, a sweep keeps going past
a length with no valid layout, and the exit codes say which of the two (1: no answer, 2: bad input)."""

from __future__ import annotations

import json
import re

import pytest

from moeplan import api
from moeplan.plan.advice import dispatcher_candidates, recompute_ladder
from moeplan.cli import main
from moeplan.base.errors import InvalidLayout
from moeplan.hardware import load_gpu
from moeplan.engine.memory import GIB, peak_memory_bytes
from moeplan.models import load_model
from moeplan.run.parallel import Batch, build_pipeline
from moeplan.plan.planner import _layouts, _sharding_options, _strongest, search
from moeplan.plan.space import SearchSpace
from moeplan.run.config import RunConfig

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
            pipe = build_pipeline(spec, par)
            run = _strongest(cfg.evolve(fsdp=sh), space, ladder, pipe)
            best = min(best, peak_memory_bytes(run, gpu.nvlink_domain, pipe) - budget)
    assert result.closest[1] == pytest.approx(best, rel=1e-9)


SWEEP = ["sweep", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k,128k,1m", "--gbs-tokens", "1m"]
# 48 GPUs: every data-parallel size is a multiple of 3, so 96K (GBS 32) has no valid layout at all
SWEEP_48 = ["sweep", "qwen3-30b-a3b", "--gpus", "48", "--seq-len", "4k,96k,1m", "--gbs-tokens", "3m"]


def _power_of_two_pipelines(monkeypatch) -> None:
    """The search with power-of-two PP only (as before PP 3 / 6 / 12 were searched): on 48 GPUs every data-parallel
    size is then a multiple of 3, which gives a length with no valid layout to sweep past."""
    from moeplan.plan import planner

    sizes = planner.candidate_sizes

    def pow2(*args, **kwargs):
        tps, cps, pps, *rest = sizes(*args, **kwargs)
        return (tps, cps, [p for p in pps if p & (p - 1) == 0], *rest)

    monkeypatch.setattr(planner, "candidate_sizes", pow2)


def test_sweep_goes_on_past_a_length_with_no_valid_layout(capsys, monkeypatch):
    """At 96K tokens GBS is 32 and (power-of-two pipelines) every data-parallel size on 48 GPUs a multiple of 3:
    that length gets its row with the reason (exit 1, as for a length where nothing fits) instead of aborting."""
    _power_of_two_pipelines(monkeypatch)
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


def test_sweep_with_no_valid_length_is_bad_input(capsys, monkeypatch):
    """No length valid: the question is bad input, as `plan` says it (exit 2, one line, nothing printed)."""
    _power_of_two_pipelines(monkeypatch)
    for argv in (["sweep", "qwen3-30b-a3b", "--gpus", "48", "--seq-len", "96k", "--gbs-tokens", "3m"],
                 [*SWEEP, "--tp", "3"]):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.strip().splitlines()) == 1 and "moeplan: error:" in err
    with pytest.raises(InvalidLayout):
        api.sweep("qwen3-30b-a3b", gpus=48, seq_lens=[98304], gbs_tokens=3 * 2**20)


def test_exit_codes_are_documented(capsys, monkeypatch):
    _power_of_two_pipelines(monkeypatch)  # 24 GPUs at 1M with GBS 1 has no valid layout then
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "exit codes: 0 plans found; 1 no layout fits" in text and "2 bad input" in text and "[]" in text
    assert main(["plan", "qwen3-30b-a3b", "--gpus", "24", "--seq-len", "1m", "--gbs", "1"]) == 2  # no valid layout


def test_cp_range_reaches_the_gpu_count_when_the_start_is_beyond_it(capsys):
    """16 GPUs at 1M tokens: the guidance starts at CP 256, beyond the GPU count; the search still tries CP up
    to 16 (DP 1 makes GBS 1 valid), so the answer is a plan or "no layout fits" with the closest run, never a
    GBS-divisibility reason drawn from a CP the search does not try."""
    from moeplan.plan.planner import candidate_sizes

    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    assert 16 in candidate_sizes(spec, gpu, 16, Batch(1048576, 1, 1), SearchSpace())[1]
    for gbs in (1, 16):  # GBS 16 halves down to 1 when nothing fits
        code = main(["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "1m", "--gbs", str(gbs)])
        out, err = capsys.readouterr()
        assert code == 1 and "no valid layout" not in err and "divisible" not in err  # a valid question: nothing fits
        assert "no layout fits" in err and "closest: TP4 PP1 CP4 EP16 DP1" in err
    assert main([*SWEEP, "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["fits"] and rows[1]["fits"]
    assert rows[2]["invalid"] is None and (rows[2]["fits"] or rows[2]["closest"] is not None)
    # a length 2 x CP x TP does not divide gets CP 1 and 2 in a second try (a valid question: nothing fits there);
    # where no layout is valid the example is one with a CP the search tries, broken by the rule that breaks it
    assert search(spec, gpu, 16, 1048577, 1, allow_gbs_reduction=False).closest is not None
    with pytest.raises(InvalidLayout, match=r"CP16 EP1 DP1: seq_len 1048577 is not divisible by 2 x CP x TP"):
        search(spec, gpu, 16, 1048577, 1, space=SearchSpace(cp=16))


def test_closest_miss_is_found_once_and_reuses_pass_one(monkeypatch):
    """The closest run is found once per search, for the answer kept (not at every GBS the search halves through:
    GBS 65,536 -> 1 found it 17 times), and prices again only runs whose static floor already missed the budget:
    pass 1 computed the exact peak of every other one (it recomputed 44 of them at 1M tokens on 16 GPUs)."""
    from moeplan.plan import planner

    calls: list[int] = []
    made: list[RunConfig] = []
    closest_miss = planner._closest_miss

    class Counting(planner.LayoutMemory):
        __slots__ = ()

        def __init__(self, base, *args, **kwargs):
            if calls and calls[-1]:
                made.append(base)
            super().__init__(base, *args, **kwargs)

    def counted(*args, **kwargs):
        calls.append(1)
        try:
            return closest_miss(*args, **kwargs)
        finally:
            calls.append(0)

    monkeypatch.setattr(planner, "LayoutMemory", Counting)
    monkeypatch.setattr(planner, "_closest_miss", counted)
    gpu = load_gpu("h100")
    result = search(load_model("deepseek-v3"), gpu, 32, 4096, 65536)
    assert result.gbs == 1 and result.closest is not None and calls.count(1) == 1
    calls.clear()
    made.clear()
    spec = load_model("qwen3-30b-a3b")
    result = search(spec, gpu, 16, 1048576, 1)
    assert result.closest is not None and calls.count(1) == 1 and made
    budget = gpu.hbm_bytes * (1 - SearchSpace().headroom)
    floors = [planner._static_lower_bound(spec, m.parallel, 4, m.fsdp) + m.reserve_gib * GIB for m in made]
    assert min(floors) > budget


def test_no_fit_line_names_ep_overlap_and_the_halved_gbs(capsys):
    """The one line names every knob estimate takes to reproduce the closest run, EP overlap included when the run
    has it, and says when the search halved GBS (a GBS 256 question read as "GBS 1" in the knobs alone)."""
    argv = ["plan", "qwen3-235b-a22b", "--gpus", "16", "--seq-len", "4k", "--gbs", "256", "--recompute", "none"]
    assert main([*argv, "--keep-gbs"]) == 1
    err = capsys.readouterr().err
    c = api.plan("qwen3-235b-a22b", gpus=16, seq_len=4096, gbs=256, top=1, fixed={"recompute": "none"},
                 allow_gbs_reduction=False)["closest"]
    assert c["ep_overlap"] and c["gbs"] == 256
    m = MISS.search(err)
    assert m and m["knobs"].endswith(", EP overlap") and "even at GBS" not in err, err
    assert main(_estimate_args(c, "qwen3-235b-a22b", 16, 4096)) == 0
    assert float(m["need"]) == pytest.approx(json.loads(capsys.readouterr().out)["memory_gib"]["total"], abs=0.1)
    assert main(argv) == 1
    err = capsys.readouterr().err
    m = MISS.search(err)
    assert m and "GBS 1," in m["knobs"] and "EP overlap" not in m["knobs"]
    assert "(with 10% headroom), even at GBS 1 (halving the GBS from 256 down to it); closest:" in err, err


def test_exit_one_prints_what_the_docs_say(capsys, tmp_path, monkeypatch):
    """Exit 1 per command, as README and the main --help say it: sweep ends with one stderr line counting the lengths
    without a plan (it printed nothing there); check prints its findings and nothing on stderr; explain MODEL exits 1
    with one line where a length has no plan, explain of a run file that does not fit compares it and exits 0."""
    from moeplan.cli import EPILOG

    _power_of_two_pipelines(monkeypatch)
    for argv in (SWEEP_48, [*SWEEP_48, "--json"]):
        assert main(argv) == 1
        assert capsys.readouterr().err == "moeplan: 2 of 3 lengths have no plan\n"  # 96K invalid, 1M no fit
    assert main(["check", "examples/deepseek_v3_128k_h100.yaml", "--model", "deepseek-v3", "--gpus", "1024"]) == 1
    out, err = capsys.readouterr()
    assert "memory" in out and err == ""
    assert main(["explain", "qwen3-235b-a22b", "--gpus", "16", "--seq-len", "4k,32k", "--gbs-tokens", "1m"]) == 1
    assert capsys.readouterr().err == "moeplan: no layout fits at seq 4,096; nothing to compare\n"
    run = tmp_path / "a.yaml"
    assert main(["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "256", "--format", "yaml"]) == 0
    run.write_text(capsys.readouterr().out)
    assert main(["explain", str(run), "--seq-len", "256k", "--no-fix"]) == 0
    assert "Run B does not fit" in capsys.readouterr().out
    epilog = " ".join(EPILOG.split())
    assert "with a one-line message on stderr; 2" not in epilog  # check's exit 1 has none
    for said in ("sweep: a length has no plan (its row says why; one line on stderr counts them)",
                 "check: the file has errors (the findings say which, on stdout; nothing on stderr)",
                 "explain of run files compares a run that does not fit and notes it, exit 0"):
        assert said in epilog
    page = " ".join(open("docs/commands/explain.md", encoding="utf-8").read().split())  # from the README (issue 32)
    assert "`explain` when a run does not fit" not in page and "compares a run that does not fit too" in page


def test_report_sweep_keeps_lengths_without_a_plan(capsys, tmp_path, monkeypatch):
    """report --sweep: a length with no valid layout, or where nothing fits, is a row of the sweep table saying why,
    as `moeplan sweep` says it (the report dropped it and said "sweep of 1 lengths"); a sweep whose every length is
    invalid no longer aborts a report whose plans exist (it exited 2)."""
    _power_of_two_pipelines(monkeypatch)
    report = ["report", "qwen3-30b-a3b", "--gpus", "48", "--seq-len", "4k", "--gbs", "768"]
    html = tmp_path / "r.html"
    assert main([*report, "--sweep", "4k,96k", "--html", str(html)]) == 0
    assert "sweep of 2 lengths, 1 without a plan" in capsys.readouterr().out
    table = html.read_text().split('id="sweep-table"')[1].split("</table>")[0]
    assert table.count("<tr>") == 3 and "96K" in table and "no valid layout of qwen3-30b-a3b on 48 GPUs" in table
    assert 'id="sweep-plot"' in html.read_text()
    assert main([*report, "--sweep", "96k", "--html", str(html)]) == 0
    assert "sweep of 1 length, 1 without a plan" in capsys.readouterr().out
    text = html.read_text()
    assert "no valid layout" in text.split('id="sweep-table"')[1] and 'id="sweep-plot"' not in text  # nothing to draw
    assert main(["report", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "256", "--sweep", "4k,1m",
                 "--html", str(html)]) == 0
    capsys.readouterr()
    table = html.read_text().split('id="sweep-table"')[1].split("</table>")[0]
    row = api.sweep("qwen3-30b-a3b", gpus=16, seq_lens=[1048576], gbs_tokens=4096 * 256)[0]
    assert row["closest"] and f"no layout fits (closest {row['closest']['short']}" in table


def test_sweep_rows_always_carry_closest_and_invalid(capsys, monkeypatch):
    """Every --json row carries `closest` and `invalid` (README), null where unused: rows that fit lacked both."""
    _power_of_two_pipelines(monkeypatch)
    for argv in (SWEEP_48, [*SWEEP, "--tp", "1", "--cp", "1"]):  # planned rows; held-layout rows
        assert main([*argv, "--json"]) == 1
        rows = json.loads(capsys.readouterr().out)
        assert all({"closest", "invalid"} <= r.keys() for r in rows)
        fitting = [r for r in rows if "parallel" in r]
        assert fitting and all(r["closest"] is None and r["invalid"] is None for r in fitting)
