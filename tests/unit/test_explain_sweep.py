"""Sweeps, explanations, estimate plots and the HTML report from the command line."""

from __future__ import annotations

import json

import pytest

from moeplan import api
from moeplan.base.errors import InvalidLayout
from moeplan.cli import main
from moeplan.plan.explain import compare


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _spy(monkeypatch, name: str) -> dict:
    """The keywords of the last call of ``api.<name>`` (which still runs)."""
    seen: dict = {}
    real = getattr(api, name)

    def spy(model, **kw):
        seen.update(kw)
        return real(model, **kw)

    monkeypatch.setattr(api, name, spy)
    return seen


def test_sweep_plans_each_length_and_plots(tmp_path, capsys):
    plot = tmp_path / "sweep.png"
    code, out, err = _run(capsys, "sweep", "qwen3-235b-a22b", "--gpu", "gb200", "--gpus", "256",
                          "--seq-len", "16k,64k", "--gbs-tokens", "4m", "--plot", str(plot), "--json")
    rows = json.loads(out)
    assert code == 0 and [r["seq_len"] for r in rows] == [16384, 65536]
    assert [r["gbs"] for r in rows] == [256, 64]  # constant tokens per batch
    assert all(r["fits"] for r in rows)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # no progress bar when not on a terminal / with --json; the file written is named on stderr
    assert err.splitlines() == [f"wrote {plot} (throughput and memory at 2 lengths)"]


def test_sweep_holds_a_layout(capsys):
    code, out, _ = _run(capsys, "sweep", "qwen3-235b-a22b", "--gpu", "h100", "--gpus", "256", "--seq-len", "16k,64k",
                        "--gbs-tokens", "4m", "--tp", "4", "--pp", "8", "--vpp", "4", "--cp", "4", "--ep", "8",
                        "--recompute", "selective:layernorm,moe", "--dispatcher", "deepep", "--json")
    rows = json.loads(out)
    assert code == 0 and all(r["parallel"]["cp"] == 4 and r["parallel"]["tp"] == 4 for r in rows)
    assert rows[1]["memory_gib"]["activations"] > rows[0]["memory_gib"]["activations"]


def test_explain_qwen3_next_32k_to_64k_says_why_and_what_fixes_it(capsys):
    """The brief's question: why did throughput drop when Qwen3-Next went from 32K to 64K, and what
    fixes it. The answer attributes the drop to the time model's items and asks the planner."""
    code, out, _ = _run(capsys, "explain", "qwen3-next-80b-a3b", "--gpu", "gb200", "--gpus", "32",
                        "--seq-len", "32k,64k", "--gbs-tokens", "1m", "--mcore-version", "0.18", "--json")
    data = json.loads(out)
    reasons = {r["topic"]: r for r in data["reasons"]}
    assert code == 0
    assert {"throughput", "flops", "time", "memory", "fix"} <= reasons.keys()
    assert data["b"]["tokens_per_s_per_gpu"] < data["a"]["tokens_per_s_per_gpu"]
    assert "fell" in reasons["throughput"]["text"]
    share = reasons["flops"]["numbers"]["attention_time_share"]
    assert share[1] > share[0]  # attention's share of the step grows with S
    deltas = reasons["time"]["numbers"]["us_per_token_delta"]
    # the biggest contributors, in numbers: Gated DeltaNet runs head-parallel under CP, each rank walking
    # the whole sequence's chunks one after another, so its time per token grows with S, and so does
    # attention's (which of the two leads depends on the CP the plans pick)
    assert set(sorted(deltas, key=deltas.get)[-2:]) == {"linear_attention", "attention"}
    assert deltas["linear_attention"] > 0 and deltas["attention"] > 0
    assert "Planner at seq 65,536" in reasons["fix"]["text"]


def test_compare_attribution_adds_up():
    common = dict(gpu="h100", gpus=256, gbs=64, tp=4, pp=8, vpp=4, ep=8, dispatcher="deepep",
                  recompute="selective:layernorm,moe")
    a_est = api.estimate_run("qwen3-235b-a22b", seq_len=16384, cp=1, **common)
    b_est = api.estimate_run("qwen3-235b-a22b", seq_len=65536, cp=4, **{**common, "gbs": 16})
    comp = compare(a_est, b_est)
    a, b = a_est.as_dict(), b_est.as_dict()
    deltas = next(r for r in comp.reasons if r.topic == "time").numbers["us_per_token_delta"]
    per_token_a = a["step_time_s"] / (a["gbs"] * a["seq_len"] / a["gpus"])
    per_token_b = b["step_time_s"] / (b["gbs"] * b["seq_len"] / b["gpus"])
    assert abs(sum(deltas.values()) - (per_token_b - per_token_a) * 1e6) < 1e-3 * abs(per_token_a * 1e6)


def test_estimate_plot_and_report(tmp_path, capsys):
    png = tmp_path / "est.svg"
    code, _, _ = _run(capsys, "estimate", "deepseek-v3", "--gpus", "1024", "--seq-len", "4k", "--gbs", "8192",
                      "--tp", "2", "--pp", "8", "--vpp", "4", "--ep", "64", "--plot", str(png))
    assert code == 0 and "<svg" in png.read_text()[:400]
    html = tmp_path / "plan.html"
    code, out, _ = _run(capsys, "report", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "32k",
                        "--gbs", "64", "--sweep", "8k,32k", "--html", str(html), "--json")
    page = html.read_text()
    assert code == 0 and len(json.loads(out)["plans"]) >= 1
    for marker in ('id="plan-table"', 'id="memory-plot"', 'id="time-plot"', 'id="overrides"', 'id="rationale"',
                   'id="sweep-plot"', "model.context_parallel_size="):
        assert marker in page


def test_bad_plot_suffix_is_one_line_exit_2(tmp_path, capsys):
    code, out, err = _run(capsys, "estimate", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "64",
                          "--ep", "16", "--plot", str(tmp_path / "x.jpg"))
    assert code == 2 and err.count("\n") == 1 and not (tmp_path / "x.jpg").exists()


def test_progress_bar_only_on_a_terminal(tmp_path):
    """On a terminal the search shows a rich progress bar on stderr; piped (above: err == "") none."""
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "120"}
    proc = subprocess.run([sys.executable, "-m", "moeplan", "plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "32k",
                           "--gbs", "64", "--format", "overrides"], stdout=subprocess.PIPE, stderr=slave, env=env, timeout=120)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    err = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0 and b"model.context_parallel_size=" in proc.stdout
    assert "searching layouts" in err  # the bar's label, drawn on the terminal


def test_explain_names_megatron_fsdp_where_a_run_uses_it():
    """A run under Megatron-FSDP reads as such in explain (the run labels and its JSON summary), as in the
    plan table: 'FSDP' for the full shard, the strategy otherwise; a plain run carries no mark."""
    kw = dict(gpu="h100", gpus=16, seq_len=4096, gbs=256, ep=16)
    plain = api.estimate_run("qwen3-30b-a3b", **kw)
    full = api.estimate_run("qwen3-30b-a3b", fsdp="optim_grads_params", **kw)
    part = api.estimate_run("qwen3-30b-a3b", fsdp="optim_grads", **kw)
    text = {r.topic: r.text for r in compare(plain, full).reasons}["throughput"]
    assert text.endswith("to seq 4,096 TP1 PP1 CP1 EP16 DP16 FSDP.") and "DP16 to" in text
    text = {r.topic: r.text for r in compare(part, plain).reasons}["throughput"]
    assert "DP16 FSDP optim_grads to" in text
    data = compare(plain, full).as_dict()
    assert data["a"]["fsdp"] is None and data["b"]["fsdp"] == "optim_grads_params"


def test_report_sweep_uses_the_reports_run_settings(tmp_path, capsys, monkeypatch):
    """The report's --sweep rows are planned with the same numerics, imbalance, reserve and versions as its
    plans (they were planned with the defaults: fp32 grads whatever --bf16-grads said)."""
    seen = _spy(monkeypatch, "sweep")
    html = tmp_path / "r.html"
    code, _, _ = _run(capsys, "report", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "8k",
                      "--gbs", "64", "--sweep", "4k,8k", "--bf16-grads", "--bf16-moments", "--moe-imbalance", "1.2",
                      "--reserve-gib", "3", "--mcore-version", "0.18", "--fsdp", "off", "--html", str(html), "--json")
    assert code == 0
    assert seen["grad_fp32"] is False and seen["bf16_moments"] is True and seen["moe_imbalance"] == 1.2
    assert seen["reserve_gib"] == 3 and seen["mcore_version"] == "0.18" and seen["fsdp"] == "off"


def test_explain_of_run_files_reads_their_gpu_and_version(tmp_path, capsys):
    """An export for GB200 at Megatron-Core 0.18 is explained on GB200 at 0.18 (explain's --gpu default used
    to override the file's '# moeplan:' comment with h100, so a fitting GB200 run 'did not fit'); the
    flags still win when given."""
    code, out, _ = _run(capsys, "plan", "qwen3-30b-a3b", "--gpu", "gb200", "--gpus", "16", "--seq-len", "8k",
                        "--gbs", "64", "--mcore-version", "0.18", "--format", "yaml")
    assert code == 0 and "gpu=gb200" in out.splitlines()[0] and "mcore-version=0.18" in out.splitlines()[0]
    run = tmp_path / "gb200.yaml"
    run.write_text(out)
    code, out, _ = _run(capsys, "explain", str(run), "--seq-len", "16k", "--json")
    d = json.loads(out)
    assert code == 0 and d["a"]["gpu"] == d["b"]["gpu"] == "gb200" and d["a"]["fits"]
    from moeplan.lint import checker

    assert checker.estimate_file(str(run)).config.mcore_version == "0.18"  # what explain now passes: None
    code, out, _ = _run(capsys, "explain", str(run), "--seq-len", "16k", "--gpu", "h100", "--json")
    assert code == 0 and json.loads(out)["a"]["gpu"] == "h100"


def _export(capsys, tmp_path, *argv):
    code, out, _ = _run(capsys, "plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "8k",
                        "--gbs", "128", "--format", "yaml", *argv)
    assert code == 0
    run = tmp_path / "r8.yaml"
    run.write_text(out)
    return run


def test_explain_remedy_searches_as_run_b_runs(tmp_path, capsys, monkeypatch):
    """The remedy is searched with run B's routing imbalance, reserve, numerics and versions (it was searched
    at the defaults, so with --moe-imbalance the 'fix' was a plan for balanced routing), and run files are
    estimated with --moe-imbalance / --reserve-gib, which no run file says (they were ignored)."""
    run = _export(capsys, tmp_path, "--bf16-grads", "--mcore-version", "0.18")
    seen = _spy(monkeypatch, "search_plans")
    code, out, _ = _run(capsys, "explain", str(run), "--seq-len", "16k", "--moe-imbalance", "1.3",
                        "--reserve-gib", "4", "--json")
    assert code == 0
    assert seen["moe_imbalance"] == 1.3 and seen["reserve_gib"] == 4 and seen["grad_fp32"] is False
    assert seen["mcore_version"] == "0.18" and seen["gpus"] == 16 and seen["seq_len"] == 16384
    from moeplan.lint import checker

    plain = checker.estimate_file(str(run), seq_len=16384)
    skewed = checker.estimate_file(str(run), seq_len=16384, moe_imbalance=1.3, reserve_gib=4)
    assert skewed.config.moe_imbalance == 1.3 and skewed.config.reserve_gib == 4
    assert skewed.time.step_time_s > plain.time.step_time_s  # the busiest expert rank gets 30% more tokens
    assert json.loads(out)["b"]["tokens_per_s_per_gpu"] == skewed.time.tokens_per_s_per_gpu


def test_explain_refuses_flags_a_run_file_decides(tmp_path, capsys):
    """With run files, --precision, --bf16-grads, a held layout and the like would be ignored (the file says
    them): one line, exit 2, naming every such flag."""
    run = _export(capsys, tmp_path)
    for flags, named in ((["--precision", "fp8"], "--precision"), (["--bf16-grads", "--tp", "2"], "--bf16-grads, --tp"),
                         (["--optimizer", "muon"], "--optimizer"), (["--recompute", "full"], "--recompute"),
                         (["--fsdp", "off"], "--fsdp")):
        code, out, err = _run(capsys, "explain", str(run), "--seq-len", "16k", *flags)
        assert code == 2 and not out and err.count("\n") == 1 and named in err and "reads th" in err


def test_explain_model_path_takes_the_usual_defaults(capsys):
    """explain MODEL without --gpu / --precision runs at the catalog default GPU and bf16 (explain's parser
    leaves them unset so that run files can be told apart)."""
    from moeplan.base.vocab import DEFAULT_GPU

    code, out, _ = _run(capsys, "explain", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k,8k",
                        "--gbs-tokens", "512k", "--no-fix", "--json")
    d = json.loads(out)
    assert code == 0 and d["a"]["gpu"] == d["b"]["gpu"] == DEFAULT_GPU


def test_sweep_holds_a_megatron_fsdp_layout(capsys):
    """sweep --hold --fsdp STRATEGY estimates the held layout under Megatron-FSDP (the held layout had no FSDP
    flag), marks it in the table, and --fsdp off keeps the planned lengths on the distributed optimizer."""
    args = ("sweep", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k,8k", "--gbs-tokens", "512k")
    code, out, _ = _run(capsys, *args, "--hold", "--ep", "8", "--fsdp", "optim_grads_params", "--json")
    rows = json.loads(out)
    assert code in (0, 1) and [r["fsdp"] for r in rows] == ["optim_grads_params"] * 2
    code, out, _ = _run(capsys, *args, "--hold", "--ep", "8", "--json")
    assert [r["fsdp"] for r in json.loads(out)] == [None, None]
    code, out, _ = _run(capsys, *args, "--fsdp", "off", "--json")
    assert code == 0 and all(r["fsdp"] is None for r in json.loads(out))
    code, out, _ = _run(capsys, *args, "--hold", "--ep", "8", "--fsdp", "optim_grads_params")
    assert "FSDP" in out


def _why(a, b, fix=True) -> dict:
    """compare(a, b) and, with ``fix``, the remedy for b as `moeplan explain` gives it: {topic: text}."""
    from moeplan.plan.explain import remedy

    reasons = list(compare(a, b).reasons)
    if fix:
        found = api.search_like(b.config, top=1)
        reasons.append(remedy(b, found.best, found.result.newer, a))
    return {r.topic: r.text for r in reasons}


def test_explain_names_the_gpu_model_and_precision_it_compares_across():
    """Two runs on different GPUs, of different models or at different precisions: the summary names every
    difference, and no conclusion puts the change on a sequence length that did not change (it said "from
    seq 4,096 ... to seq 4,096" and "the drop is inherent to the longer sequence")."""
    kw = dict(gpus=16, seq_len=4096, gbs=64, ep=8, dispatcher="deepep")
    h100 = api.estimate_run("qwen3-30b-a3b", gpu="h100", **kw)
    gb200 = api.estimate_run("qwen3-30b-a3b", gpu="gb200", **kw)
    for a, b in ((h100, gb200), (gb200, h100)):
        why = _why(a, b)
        assert f"GPU {a.gpu.name} -> {b.gpu.name}" in why["differences"]
        assert f"16 x {a.gpu.name}, seq 4,096" in why["throughput"] and f"to 16 x {b.gpu.name}, seq" in why["throughput"]
        assert "longer sequence" not in why["fix"] and "S^2" not in why["fix"]
    best = {g: api.search_plans("qwen3-30b-a3b", gpu=g, gpus=16, seq_len=4096, gbs=64, top=1).best.estimate
            for g in ("h100", "gb200")}
    why = _why(best["gb200"], best["h100"])  # a drop, and run B is the planner's best: the GPU, not the length
    assert "fell" in why["throughput"] and "already at the planner's best" in why["fix"]
    assert "what else changed (GPU)" in why["fix"] and "longer sequence" not in why["fix"]
    lite = api.estimate_run("deepseek-v2-lite", gpu="h100", **kw)
    why = _why(h100, lite, fix=False)
    assert "model qwen3-30b-a3b -> deepseek-v2-lite" in why["differences"] and "deepseek-v2-lite, seq" in why["throughput"]
    fp8 = api.estimate_run("qwen3-30b-a3b", gpu="h100", precision="fp8", **kw)
    why = _why(h100, fp8, fix=False)
    assert "1 setting(s): precision bf16 -> fp8." in why["differences"] and "from bf16, seq" in why["throughput"]
    # layout and knobs are named too
    other = api.estimate_run("qwen3-30b-a3b", gpu="h100", **{**kw, "ep": 16, "dispatcher": "alltoall"})
    why = _why(h100, other, fix=False)
    assert "layout TP1 PP1 CP1 EP8 DP16 -> TP1 PP1 CP1 EP16 DP16" in why["differences"]
    assert "dispatcher deepep -> alltoall" in why["differences"]


def test_explain_of_one_run_against_itself_says_no_difference():
    run = api.estimate_run("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=64, ep=8)
    why = _why(run, run)
    assert why["differences"].startswith("Runs A and B are the same run")
    assert why["throughput"].startswith("Throughput unchanged")
    assert "no difference" in why["time"] and ": ." not in why["time"]
    assert "longer sequence" not in why["fix"]


def test_explain_puts_a_drop_on_the_length_only_when_only_the_length_changed(capsys):
    code, out, _ = _run(capsys, "explain", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "16k,32k",
                        "--gbs-tokens", "1m", "--json")
    reasons = {r["topic"]: r for r in json.loads(out)["reasons"]}
    assert code == 0 and "fell" in reasons["throughput"]["text"]
    assert "sequence length 16,384 -> 32,768" in reasons["differences"]["text"]
    if "already at the planner's best" in reasons["fix"]["text"]:
        assert "inherent to the longer sequence" in reasons["fix"]["text"]


def test_explain_seq_len_help_says_what_it_takes(capsys):
    """explain's --seq-len help offered three lengths (16k,32k,64k), which explain refuses: the help says two
    lengths with a model (one with a single run file), and three are refused saying so."""
    import pytest

    with pytest.raises(SystemExit):
        main(["explain", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "16k,32k,64k" not in help_text and "two lengths to compare, A,B" in help_text
    code, out, err = _run(capsys, "explain", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "16k,32k,64k",
                          "--gbs-tokens", "1m")
    assert code == 2 and not out and "two lengths; got 3" in err


def test_explain_names_each_real_difference_once():
    """FSDP was named twice (in the layout, 'TP1 ... DP8 FSDP', and as 'fsdp none -> ...'), the pipeline layout apart
    from the layout, the effective delay_wgrad beside the EP overlap it follows, the precision-aware optimizer beside
    the offload that turns it on, and the layout beside a GPU count whose DP it follows: one name per real change."""
    from dataclasses import replace

    from moeplan.engine.estimate import evaluate
    from moeplan.plan.explain import differences

    a = api.estimate_run("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=64, ep=8, pp=2, vpp=2,
                         dispatcher="alltoall").config
    b = a.with_(fsdp="optim_grads_params", parallel=replace(a.parallel, pipeline_layout="Et*12|t*12|t*12|t*12L"))
    diff = differences(a, b)
    assert list(diff) == ["layout", "fsdp"], diff
    assert diff["layout"] == ("TP1 PP2 VPP2 CP1 EP8 DP8",
                              "TP1 PP2 VPP2 CP1 EP8 DP8 (pipeline layout Et*12|t*12|t*12|t*12L)")
    assert "FSDP" not in diff["layout"][1]
    overlap = a.with_(ep_overlap=True)
    assert overlap.delay_wgrad_on and list(differences(a, overlap)) == ["ep_overlap"]
    assert list(differences(overlap, overlap.with_(delay_wgrad=False))) == ["delay_wgrad"]
    assert list(differences(a, a.with_(optimizer_offload=0.25))) == ["optimizer_offload"]
    assert list(differences(a, a.with_(precision_aware_optimizer=True))) == ["precision_aware_optimizer"]
    assert list(differences(a, a.with_(parallel=replace(a.parallel, gpus=32)))) == ["GPUs"]
    text = compare(evaluate(a, a.gpu), evaluate(b, b.gpu)).reasons[0].text
    assert "in 2 setting(s)" in text


def test_token_budget_shorter_than_a_length_is_an_argument_error_as_documented(capsys):
    """A length --gbs-tokens cannot split into whole sequences fails the whole sweep (exit 2, one line, no
    rows), unlike a length with no valid layout (its own row): docs/commands/sweep.md and --help say so."""
    from pathlib import Path

    from moeplan.cli import build_parser, main

    code = main(["sweep", "deepseek-v3", "--gpus", "64", "--seq-len", "4k,128k,1m", "--gbs-tokens", "512k"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "less than one sequence" in err
    page = " ".join((Path(__file__).parents[2] / "docs" / "commands" / "sweep.md").read_text().split())
    assert "does not split into whole sequences at some length" in page  # moved from the README (issue 32)
    sweep_help = " ".join(build_parser()._subparsers._group_actions[0].choices["sweep"].format_help().split())
    assert "not a whole number of sequences at some length" in sweep_help


def _record_estimated_lengths(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sequence lengths api.estimate_run is called at, from now on (the call still runs)."""
    lengths: list[int] = []
    real = api.estimate_run

    def estimate_run(model, **kw):
        lengths.append(kw["seq_len"])
        return real(model, **kw)

    monkeypatch.setattr(api, "estimate_run", estimate_run)
    return lengths


def test_explain_stops_at_the_first_invalid_length(monkeypatch):
    """explain's lengths (sweep_points with first_invalid_raises): the first length without a valid layout raises
    its InvalidLayout, by type, and the next length is not planned; a sweep still plans every length."""
    planned: list[int] = []
    real = api.search_plans

    def search_plans(model, **kw):
        planned.append(kw["seq_len"])
        if kw["seq_len"] == 65536:
            raise InvalidLayout(f"no valid layout at seq {kw['seq_len']}")
        return real(model, **kw)

    monkeypatch.setattr(api, "search_plans", search_plans)
    kw = dict(seq_lens=[65536, 32768], gbs_tokens=1 << 20, gpu="h100", gpus=32)
    with pytest.raises(InvalidLayout, match="no valid layout at seq 65536"):
        api.sweep_points("qwen3-30b-a3b", first_invalid_raises=True, **kw)
    assert planned == [65536]
    # a held layout (DP 32 > GBS 16 at 64K, valid at 32K): its estimate at the second length is not made either
    held = _record_estimated_lengths(monkeypatch)
    with pytest.raises(InvalidLayout, match="GBS 16 is not divisible"):
        api.sweep_points("qwen3-30b-a3b", hold={"ep": 8}, first_invalid_raises=True, **kw)
    assert held == [65536]
    # a sweep goes on past an invalid length (its row says why)
    planned.clear()
    points = api.sweep_points("qwen3-30b-a3b", **kw)
    assert planned == [65536, 32768] and points[0].invalid and points[1].invalid is None


def test_explain_model_with_an_invalid_first_length_is_one_line_exit_2(capsys, monkeypatch):
    held = _record_estimated_lengths(monkeypatch)
    code, out, err = _run(capsys, "explain", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "32", "--seq-len", "64k,32k",
                          "--gbs-tokens", "1m", "--ep", "8")
    assert code == 2 and not out and held == [65536]
    assert err.strip().splitlines() == [
        "moeplan: error: invalid layout TP1 PP1 CP1 EP8 DP32: GBS 16 is not divisible by MBS x DP = 1x32 = 32"]


@pytest.mark.parametrize("command", ["sweep", "explain"])
def test_a_token_budget_that_fails_one_length_suggests_one_that_fits_every_length(command, capsys):
    """3,000 and 4,096 tokens: the budget suggested for one length failed at the other; now the suggestions are
    multiples of both (their least common multiple, 1,536,000), and one of them runs."""
    argv = [command, "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "3000,4k", "--gbs-tokens"]
    assert main([*argv, "4m"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "use 3,072,000 or 4,608,000 at every length" in err
    assert main([*argv, "3072000", "--json"]) == 0  # the suggestion runs: an answer at both lengths
    capsys.readouterr()


def test_explain_json_answers_on_exit_1_and_estimates_share_the_plans_run_keys(capsys):
    """explain --json printed nothing on exit 1 (plan prints [], sweep its rows); the run keys of a plan and an
    estimate differed (offload_modules, recompute_modules, rank_capacity_factor)."""
    assert main(["explain", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k,2m", "--gbs-tokens", "2m", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out == {"a": None, "b": None, "reasons": [], "no_answer": "no layout fits at seq 2,097,152; nothing to compare"}
    plan = api.plan("qwen3-30b-a3b", gpus=16, seq_len=4096, gbs=1024, top=1)["plans"][0]
    est = api.estimate("qwen3-30b-a3b", gpus=16, seq_len=4096, gbs=1024, ep=16)
    run_keys = {"recompute", "recompute_modules", "dispatcher", "ep_overlap", "delay_wgrad", "cp_comm_type", "cuda_graphs",
                "rank_capacity_factor", "optimizer_offload", "offload_modules", "grad_fp32", "bf16_moments", "optimizer",
                "fsdp", "fsdp_double_buffer"}
    assert run_keys <= set(plan) and run_keys <= set(est)


def test_token_budget_errors_suggest_a_budget_and_name_the_flag_the_user_has(capsys, tmp_path):
    """A budget below the longest sequence now suggests one (the README's own example gave none), and report, which
    has no --gbs-tokens, names its own budget (--gbs x --seq-len) and writes nothing."""
    assert main(["sweep", "deepseek-v3", "--gpus", "64", "--seq-len", "32k,1m", "--gbs-tokens", "512k"]) == 2
    assert "use 1,048,576 or a multiple" in capsys.readouterr().err
    html = tmp_path / "r.html"
    assert main(["report", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "64", "--sweep", "4k,100001",
                 "--html", str(html)]) == 2
    err = capsys.readouterr().err
    assert "the token budget (--gbs x --seq-len) 262,144" in err and "--gbs-tokens" not in err and not html.exists()


def test_explain_json_differences_are_json_values():
    """The differences block held display strings ("4,096", "1024"); numbers are numbers, sets lists."""
    from moeplan.plan.explain import differences

    a = api.estimate_run("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=1024, ep=16).config
    b = api.estimate_run("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=32768, gbs=128, ep=16,
                         recompute="selective:layernorm,moe").config
    diff = differences(a, b)
    assert diff["sequence length"] == (4096, 32768) and diff["GBS"] == (1024, 128)
    assert diff["recompute"] == ("none", "selective:layernorm,moe") or isinstance(diff["recompute"][1], str)


def test_explain_of_exports_takes_their_assumed_imbalance(tmp_path, capsys):
    """explain of run files took --moe-imbalance 1.0 by default where the export's '# moeplan:' comment said the
    plan assumed 1.5 (check takes the comment); now both read it."""
    args = ["qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "32k", "--gbs", "64", "--moe-imbalance", "1.5"]
    code, out, _ = _run(capsys, "plan", *args, "--top", "1", "--json")
    planned = json.loads(out)[0]["tokens_per_s_per_gpu"]
    code, out, _ = _run(capsys, "plan", *args, "--format", "yaml")
    run = tmp_path / "a.yaml"
    run.write_text(out)
    code, out, _ = _run(capsys, "explain", str(run), str(run), "--json")
    assert code == 0 and json.loads(out)["a"]["tokens_per_s_per_gpu"] == pytest.approx(planned, rel=1e-9)
