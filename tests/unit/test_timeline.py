"""Timeline of one iteration: span = estimated step time, memory peak = memory estimate, dependencies,
Chrome trace format, scale, CLI and figures (the order against Megatron-Core: tests/contract/test_schedule_order.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from moeplan import api
from moeplan.base.errors import MoeplanError
from moeplan.engine.estimate import evaluate
from moeplan.engine.timeline import (
    TRACE_DETAIL_MICROBATCHES,
    TRACKS,
    build_timeline,
    chrome_trace,
    chrome_trace_bytes,
    rank_schedule,
    schedule_problem,
    trace_detail,
    trace_detail_note,
)

def test_phases_and_every_op_once():
    sched = rank_schedule(4, 2, 8, 1)
    phases = [st.phase for st in sched]
    assert phases[:8] == ["warmup"] * 8 and phases[8] == "steady"  # (4 - 1 - 1) x 2 + (2 - 1) x 4 forwards
    assert phases[-8:] == ["cooldown"] * 8 and phases[-9] == "steady"
    assert sorted((st.kind, st.microbatch, st.chunk) for st in sched) == sorted(
        (k, mb, c) for k in "FB" for mb in range(8) for c in range(2))


def test_megatron_refused_schedules_are_refused():
    assert schedule_problem(4, 2, 8) is None
    assert schedule_problem(4, 1, 3) is None  # plain 1F1B runs any count
    assert "multiple of PP" in schedule_problem(4, 2, 10)
    assert "at least PP" in schedule_problem(4, 2, 2)
    # a layout rule too: estimate, plan and check refuse what Megatron-Core would raise on at the first step
    with pytest.raises(MoeplanError, match="multiple of PP"):
        api.build_config("qwen3-30b-a3b", gpu="h100", gpus=32, seq_len=4096, gbs=40, pp=4, vpp=2, ep=8)
    from moeplan.run.parallel import Batch, check_layout

    cfg, _ = api.build_config("qwen3-30b-a3b", gpu="h100", gpus=32, seq_len=4096, gbs=32, pp=4, vpp=2, ep=8)
    rules = [c.rule for c in check_layout(cfg.model, cfg.parallel, Batch(4096, 40))]
    assert rules == ["vpp-microbatches"]
    assert not check_layout(cfg.model, cfg.parallel, Batch(4096, 40 - 8))
    assert not check_layout(cfg.model, replace(cfg.parallel, vpp=1), Batch(4096, 40))  # plain 1F1B runs any count


RUNS = [
    dict(gpus=8, seq_len=4096, gbs=64, ep=8),  # PP 1
    dict(gpus=16, seq_len=4096, gbs=64, ep=8, pp=2),
    dict(gpus=32, seq_len=8192, gbs=128, ep=8, pp=4, vpp=2, recompute="full"),
    dict(gpus=32, seq_len=32768, gbs=64, ep=8, pp=2, vpp=3, cp=2, tp=2, recompute="selective:moe_act,layernorm"),
    dict(gpus=16, seq_len=4096, gbs=32, ep=8, pp=2, optimizer_offload=0.5),
    dict(gpus=64, seq_len=4096, gbs=256, ep=8, pp=4, vpp=2, ep_overlap=True, dispatcher="alltoall"),
]


def _run(model: str = "qwen3-30b-a3b", **kw):
    cfg, gpu = api.build_config(model, gpu="h100", **kw)
    return cfg, gpu, evaluate(cfg, gpu), build_timeline(cfg, gpu)


@pytest.mark.parametrize("kw", RUNS)
def test_span_equals_estimated_step_time(kw):
    _, _, est, tl = _run(**kw)
    assert tl.span_s == pytest.approx(est.time.step_time_s, rel=1e-9)
    assert tl.step_time_s == pytest.approx(est.time.step_time_s, rel=1e-9)


@pytest.mark.parametrize("kw", RUNS)
def test_memory_peak_equals_estimate_and_follows_the_schedule(kw):
    cfg, _, est, tl = _run(**kw)
    assert tl.memory_rank == est.memory.peak.rank
    assert tl.memory_peak_bytes == pytest.approx(est.memory.total_bytes, rel=1e-9)
    ops = tl.rank_ops(tl.memory_rank)
    acts = [act for _, _, act, _ in tl.memory_s]
    warm = sum(1 for o in ops if o.step.phase == "warmup")
    # in-flight activations rise through the warm-up and fall through the cool-down to zero
    rising = acts[1:2 + 2 * warm]
    assert rising == sorted(rising)
    cool = sum(1 for o in ops if o.step.phase == "cooldown")
    if cool:
        falling = acts[-2 * cool - 1:]
        assert falling == sorted(falling, reverse=True)
    assert acts[-1] == pytest.approx(0.0, abs=1e-6 * max(acts))


def test_ops_wait_for_their_inputs_and_do_not_overlap_on_a_rank():
    _, _, _, tl = _run(gpus=32, seq_len=4096, gbs=64, ep=8, pp=4, vpp=2)
    end = {}
    for o in tl.ops:
        stage = o.step.chunk * tl.pp + o.rank
        end[(o.step.kind, o.step.microbatch, stage)] = (o.start_s, o.start_s + o.slot_s)
    last = tl.pp * tl.vpp - 1
    for (kind, mb, stage), (start, _) in end.items():
        dep = ("F", mb, stage - 1) if kind == "F" else ("B", mb, stage + 1)
        if (kind == "F" and stage > 0) or (kind == "B" and stage < last):
            assert start >= end[dep][1] - 1e-12
    for r in range(tl.pp):
        ops = tl.rank_ops(r)
        assert all(a.start_s + a.slot_s <= b.start_s + 1e-12 for a, b in zip(ops, ops[1:]))
        assert all(o.busy_s <= o.slot_s * (1 + 1e-9) for o in ops)


def test_recompute_sits_at_the_start_of_each_backward():
    _, _, _, tl = _run(gpus=32, seq_len=8192, gbs=64, ep=8, pp=4, recompute="full")
    parents = {(s.rank, s.microbatch, s.chunk): s for s in tl.spans if s.category == "backward"}
    rec = [s for s in tl.spans if s.category == "recompute"]
    assert len(rec) == len(parents)
    for s in rec:
        assert s.start_s == parents[(s.rank, s.microbatch, s.chunk)].start_s


def test_chrome_trace_format():
    _, _, est, tl = _run(gpus=64, seq_len=4096, gbs=256, ep=8, pp=4, vpp=2, ep_overlap=True, dispatcher="alltoall")
    doc = json.loads(chrome_trace_bytes(tl))
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(names) == [0, 1, 2, 3] and all(n.startswith("PP rank") for n in names.values())
    threads = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == set(TRACKS)
    spans = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    cats = {e["cat"] for e in spans}
    assert {"forward", "backward", "gemm", "ep_comm", "dp_comm", "optimizer"} <= cats
    # with VPP > 1 the PP send / recv runs behind the next chunk (overlap_p2p_comm): drawn as overlapped
    assert "pp_comm_overlapped" in cats
    end_us = max(e["ts"] + e["dur"] for e in spans)
    assert end_us == pytest.approx(est.time.step_time_s * 1e6, rel=1e-6)
    # items nest inside their operation on the compute track
    tids = {t: i for i, t in enumerate(TRACKS)}
    ops = [e for e in spans if e["cat"] in ("forward", "backward")]
    items = [e for e in spans if e["tid"] == tids["compute"] and e["cat"] not in ("forward", "backward", "optimizer")]
    by_key = {(e["pid"], e["name"]): e for e in ops}
    assert len(items) > len(ops)
    assert doc["otherData"]["memory_peak_gib"] == pytest.approx(doc["otherData"]["memory_estimate_gib"])
    counters = [e for e in events if e["ph"] == "C"]
    assert counters and {e["pid"] for e in counters} == {tl.memory_rank}
    assert by_key  # one event per operation, keyed by rank and name
    # overlapped DP collectives overlap the pipeline: the all-gather starts with the step, before
    # the first forward ends
    ag = [e for e in spans if e["name"] == "param all-gather"]
    first_fwd = min(e["ts"] for e in ops)
    assert ag and all(e["ts"] == 0 for e in ag) and first_fwd < ag[0]["dur"] + 1e-3


def test_large_pipeline_is_small_and_linear():
    """PP 16, 64 micro-batches (and VPP 2 on the same pipeline): one forward and one backward operation per
    rank, model chunk and micro-batch (the work grows linearly, nothing per pair of them), a trace under
    20 MB. Its time is measured by benchmarks/timeline_scale.py on one core, not here: a timed unit test
    fails under load (a 1.0 s CPU-time bound read 1.01 s with four jobs on two cores)."""
    for kw in (dict(pp=16), dict(pp=16, vpp=2)):
        cfg, gpu = api.build_config("qwen3-235b-a22b", gpu="h100", gpus=1024, seq_len=4096, gbs=4096, ep=8,
                                    tp=1, cp=1, **kw)
        assert cfg.batch.microbatches(cfg.parallel.dp) == 64
        tl = build_timeline(cfg, gpu)
        data = chrome_trace_bytes(tl)
        assert len(tl.ops) == 2 * tl.pp * tl.vpp * tl.microbatches
        assert len(data) < 20e6, len(data)
        assert tl.span_s == pytest.approx(evaluate(cfg, gpu).time.step_time_s, rel=1e-9)
        assert trace_detail_note(tl) is None and b"items_left_out" not in data  # 64 micro-batches: every span


def test_headline_trace_keeps_every_operation_and_says_which_items_it_leaves_out():
    """DeepSeek-V3 at 128K on 1,024 H100s, TP2 PP8 VPP4 CP32 EP64 DP2 (the headline plan 1): 512 micro-batches,
    32,768 operations, ~400k spans, a 55 MB trace in full. Every forward of a rank has the same items with the
    same durations (and every backward), so past TRACE_DETAIL_MICROBATCHES only the first and the last half
    of that many carry them; every operation, flow and memory change stays, and the file says so."""
    cfg, gpu = api.build_config("deepseek-v3", gpu="h100", gpus=1024, seq_len=131072, gbs=1024, tp=2, pp=8, vpp=4,
                                cp=32, ep=64)
    tl = build_timeline(cfg, gpu)
    assert tl.microbatches == 512
    data = chrome_trace_bytes(tl)
    assert len(data) < 25e6, len(data)  # was 55 MB
    doc = json.loads(data)
    events = doc["traceEvents"]
    assert len(events) < 200_000, len(events)  # was 514k
    spans = [e for e in events if e["ph"] == "X"]
    ops = [e for e in spans if e["cat"] in ("forward", "backward")]
    assert len(ops) == len(tl.ops) == 2 * tl.pp * tl.vpp * tl.microbatches  # every operation
    first, last = trace_detail(tl)
    kept = set(first) | set(last)
    assert len(kept) == TRACE_DETAIL_MICROBATCHES and 0 in kept and tl.microbatches - 1 in kept
    # the items of exactly the kept micro-batches' operations (each has one attention item)
    assert sum(e["name"] == "attention" for e in spans) == sum(o.step.microbatch in kept for o in tl.ops)
    assert len(spans) == sum(s.category in ("forward", "backward") or s.microbatch in kept or s.microbatch < 0
                             for s in tl.spans)
    assert {e["cat"] for e in spans} >= {"dp_comm", "optimizer", "cp_comm", "cp_comm_overlapped", "gemm"}
    flows = [e for e in events if e["ph"] == "s"]
    assert len(flows) == 2 * tl.microbatches * (tl.pp * tl.vpp - 1)
    assert len([e for e in events if e["ph"] == "C"]) == len(tl.memory_s)
    note = doc["otherData"]["items_left_out"]
    assert note == trace_detail_note(tl) and f"{first.start}-{first.stop - 1} and {last.start}-{last.stop - 1}" in note
    # each operation without its items says so where a viewer looks (its arguments), and only those
    assert all(("items" in e["args"]) == (e["args"]["microbatch"] not in kept) for e in ops)
    labels = [e for e in events if e["ph"] == "M" and e["name"] == "process_labels"]
    assert sorted(e["pid"] for e in labels) == list(range(tl.pp))
    # the CLI's help says it too
    from moeplan.cli.args import TRACE_HELP

    assert (f"Beyond {TRACE_DETAIL_MICROBATCHES} micro-batches only the first and the last "
            f"{TRACE_DETAIL_MICROBATCHES // 2}") in TRACE_HELP


def test_chrome_trace_is_json_ready():
    _, _, _, tl = _run(gpus=16, seq_len=4096, gbs=64, ep=8, pp=2)
    json.dumps(chrome_trace(tl))


# ------------------------------------------------------------------------------ CLI and figures

from moeplan.cli import main  # noqa: E402

EST = ["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "32", "--seq-len", "8k", "--gbs", "128", "--ep", "8",
       "--pp", "4", "--vpp", "2"]


def _cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_estimate_trace_writes_chrome_json_and_says_so(tmp_path, capsys):
    path = tmp_path / "step.json"
    code, out, err = _cli(capsys, *EST, "--trace", str(path))
    assert code == 0 and f"wrote {path}" in out
    doc = json.loads(path.read_text())
    est = api.estimate("qwen3-30b-a3b", gpu="h100", gpus=32, seq_len=8192, gbs=128, ep=8, pp=4, vpp=2)
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(est["step_time_s"] * 1e6, rel=1e-6)
    # with --json stdout stays one JSON object; the 'wrote' line goes to stderr
    code, out, err = _cli(capsys, *EST, "--trace", str(path), "--json")
    assert code == 0 and json.loads(out)["step_time_s"] == pytest.approx(est["step_time_s"])
    assert f"wrote {path}" in err


@pytest.mark.parametrize("name", ["step.json.gz", "step.gz"])
def test_estimate_trace_gzip_is_the_json_compressed_deterministically(tmp_path, capsys, monkeypatch, name):
    """A .json.gz (or .gz) name writes the same JSON gzip-compressed (Perfetto and chrome://tracing open it), byte for
    byte the same on every run (no time stamp, no file name); a failed write leaves nothing behind."""
    import gzip

    plain, path = tmp_path / "step.json", tmp_path / name
    assert _cli(capsys, *EST, "--trace", str(plain))[0] == 0
    code, out, _ = _cli(capsys, *EST, "--trace", str(path))
    assert code == 0 and f"wrote {path}" in out
    data = path.read_bytes()
    assert data[:2] == b"\x1f\x8b" and gzip.decompress(data) == plain.read_bytes()
    assert len(data) < len(plain.read_bytes()) / 4
    again = tmp_path / "again" / name
    again.parent.mkdir()
    assert _cli(capsys, *EST, "--trace", str(again))[0] == 0 and again.read_bytes() == data
    import moeplan.base.outfile

    def fail(*_a):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(moeplan.base.outfile.os, "replace", fail)
    broken = tmp_path / "broken"
    broken.mkdir()
    code, out, err = _cli(capsys, *EST, "--trace", str(broken / name))
    assert code == 2 and out == "" and err.count("\n") == 1 and "No space left" in err
    assert not list(broken.iterdir())


def test_trace_target_that_is_not_a_regular_file_is_refused(tmp_path, capsys):
    code, out, err = _cli(capsys, *EST, "--trace", str(tmp_path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "directory" in err
    code, _, err = _cli(capsys, *EST, "--trace", str(tmp_path / "missing" / "t.json"))
    assert code == 2 and "does not exist" in err


def test_trace_of_a_schedule_megatron_refuses_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "t.json"
    code, out, err = _cli(capsys, "estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "32", "--seq-len", "4k",
                          "--gbs", "40", "--ep", "8", "--pp", "4", "--vpp", "2", "--trace", str(path))
    assert code == 2 and "multiple of PP" in err and not path.exists() and out == ""
    path = tmp_path / "t.json.gz"
    code, out, err = _cli(capsys, "estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "32", "--seq-len", "4k",
                          "--gbs", "40", "--ep", "8", "--pp", "4", "--vpp", "2", "--trace", str(path))
    assert code == 2 and "multiple of PP" in err and not list(tmp_path.iterdir()) and out == ""


def test_plan_trace_is_plan_one(tmp_path, capsys):
    path = tmp_path / "plan.json"
    code, out, err = _cli(capsys, "plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "32", "--seq-len", "8k",
                          "--gbs", "128", "--pp", "2", "--json", "--trace", str(path))
    assert code == 0
    best = json.loads(out)[0]
    doc = json.loads(path.read_text())
    assert doc["otherData"]["pp"] == best["parallel"]["pp"] == 2
    assert doc["otherData"]["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-9)
    assert "wrote" in err and "plan 1" in err


def test_check_trace(tmp_path, capsys):
    path = tmp_path / "check.json"
    cfg = tmp_path / "run.yaml"
    cfg.write_text("model:\n  tensor_model_parallel_size: 1\n  pipeline_model_parallel_size: 2\n  seq_length: 4096\n"
                   "  expert_model_parallel_size: 8\ntrain:\n  global_batch_size: 64\n  micro_batch_size: 1\n")
    code, out, err = _cli(capsys, "check", str(cfg), "--model", "qwen3-30b-a3b", "--gpus", "16", "--trace", str(path))
    assert code in (0, 1) and f"wrote {path}" in out
    doc = json.loads(path.read_text())
    assert doc["otherData"]["pp"] == 2
    # an invalid layout (128 experts over EP 7) writes nothing and says why
    bad = tmp_path / "bad.yaml"
    bad.write_text(cfg.read_text().replace("expert_model_parallel_size: 8", "expert_model_parallel_size: 7"))
    path2 = tmp_path / "none.json"
    code, out, err = _cli(capsys, "check", str(bad), "--model", "qwen3-30b-a3b", "--gpus", "14", "--trace", str(path2))
    assert code == 1 and "no trace written" in err and not path2.exists()  # as without --trace: the file's errors
    assert "error" in out  # the findings are still shown
    assert _cli(capsys, "check", str(bad), "--model", "qwen3-30b-a3b", "--gpus", "14")[0] == 1


def test_plot_and_report_show_the_timeline(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from moeplan.report import render_html_report

    svg = tmp_path / "e.svg"
    code, out, _ = _cli(capsys, *EST, "--plot", str(svg))
    text = svg.read_text()
    assert code == 0 and "One iteration" in text and "Memory of pipeline rank" in text and "timeline" in out
    cfg, gpu, est, tl = _run(gpus=32, seq_len=8192, gbs=128, ep=8, pp=4, vpp=2)
    html = render_html_report(title="t", plans=[], estimate=est.as_dict(), timeline=tl)
    assert 'id="timeline"' in html and 'id="timeline-plot"' in html and "<svg" in html


def test_overlap_hides_ep_all_to_all_without_shrinking_it():
    """moe_a2a_overlap hides part of the dispatch/combine behind compute: the trace shows the same
    collective (exposed + overlapped = the all-to-all without overlap) and only the exposed part delays."""
    kw = dict(gpus=64, seq_len=4096, gbs=256, ep=16, pp=4, vpp=2, dispatcher="alltoall")
    _, _, est_on, on = _run(**kw, ep_overlap=True)
    _, _, est_off, off = _run(**kw)

    def ep(tl, cat):
        return sum(s.dur_s for s in tl.spans if s.category == cat and s.rank == tl.slowest_rank)

    assert ep(off, "ep_comm_overlapped") == 0.0
    assert ep(on, "ep_comm_overlapped") > 0.0
    assert ep(on, "ep_comm") + ep(on, "ep_comm_overlapped") == pytest.approx(ep(off, "ep_comm"), rel=1e-9)
    assert ep(on, "ep_comm") == pytest.approx(est_on.time.breakdown_s["ep_comm"], rel=1e-9)


def test_cp_ring_overlaps_attention_inside_its_operation():
    _, _, _, tl = _run(gpus=32, seq_len=65536, gbs=32, ep=8, cp=8, tp=1, pp=2, recompute="full")
    hidden = [s for s in tl.spans if s.category == "cp_comm_overlapped"]
    assert hidden
    attn = [s for s in tl.spans if s.category == "attention"]
    for h in hidden:  # the ring runs during the attention kernels of the same operation and ends with them
        a = [s for s in attn if (s.rank, s.microbatch, s.chunk) == (h.rank, h.microbatch, h.chunk)
             and s.start_s <= h.start_s + 1e-12 and h.start_s + h.dur_s == pytest.approx(s.start_s + s.dur_s)]
        assert len(a) == 1


def test_check_flags_micro_batches_the_interleaved_schedule_refuses(tmp_path, capsys):
    path = tmp_path / "v.yaml"
    path.write_text("model:\n  pipeline_model_parallel_size: 4\n  virtual_pipeline_model_parallel_size: 2\n"
                    "  seq_length: 4096\n  expert_model_parallel_size: 8\ntrain:\n  global_batch_size: 40\n"
                    "  micro_batch_size: 1\n")
    code, out, _ = _cli(capsys, "check", str(path), "--model", "qwen3-30b-a3b", "--gpus", "32", "--json")
    f = next(f for f in json.loads(out)["findings"] if f["rule"] == "vpp-microbatches")
    assert code == 1 and f["severity"] == "error" and f["line"] == 7
    assert f["fix"] == ["train.global_batch_size=64", "train.global_batch_size=32"]  # 8 or 4 micro-batches


def test_trace_follows_the_calibration_it_is_given():
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION

    cal = DEFAULT_CALIBRATION.with_overrides({"grouped_gemm_eff": 0.5, "hbm_eff": 0.5})
    cfg, gpu = api.build_config("qwen3-30b-a3b", gpu="h100", gpus=32, seq_len=16384, gbs=64, ep=8, pp=4, vpp=2)
    step = evaluate(cfg, gpu, cal).time.step_time_s
    assert step != pytest.approx(evaluate(cfg, gpu).time.step_time_s, rel=1e-3)
    assert build_timeline(cfg, gpu, cal).span_s == pytest.approx(step, rel=1e-9)


def test_operations_nest_their_items_exactly_in_the_trace():
    _, _, _, tl = _run(gpus=32, seq_len=32768, gbs=64, ep=8, pp=2, vpp=3, cp=2, tp=2,
                       recompute="selective:moe_act,layernorm")
    events = [e for e in chrome_trace(tl)["traceEvents"] if e["ph"] == "X" and e["tid"] == 0]
    ops = {}
    for e in events:
        if e["cat"] in ("forward", "backward"):
            ops[(e["pid"], e["name"])] = e
    for e in events:
        if e["cat"] in ("forward", "backward", "optimizer"):
            continue
        inside = [o for o in ops.values() if o["pid"] == e["pid"] and o["ts"] <= e["ts"]
                  and e["ts"] + e["dur"] <= o["ts"] + o["dur"] + 1e-9]
        assert len(inside) == 1, e


def test_pp_send_recv_flows_link_neighbouring_stages():
    _, _, _, tl = _run(gpus=32, seq_len=4096, gbs=64, ep=8, pp=4, vpp=2)
    events = chrome_trace(tl)["traceEvents"]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    # every micro-batch crosses PP x VPP - 1 stage boundaries forward and as many backward
    assert len(starts) == len(ends) == 2 * tl.microbatches * (tl.pp * tl.vpp - 1)
    for i, s in starts.items():
        f = ends[i]
        assert f["ts"] > s["ts"] and f["pid"] != s["pid"]  # neighbouring stages sit on different ranks


@pytest.mark.parametrize("pp,vpp,name", [(1, 1, "no pipelining"), (4, 1, "1F1B"), (4, 2, "interleaved 1F1B")])
def test_the_chart_names_the_schedule_megatron_runs(pp, vpp, name):
    """The Gantt title said 'interleaved 1F1B' for every split, PP 1 included (schedules.py
    get_forward_backward_func picks forward_backward_no_pipelining there)."""
    from moeplan import plots

    cfg, gpu = api.build_config("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=256, ep=4 if pp > 1 else 16,
                                pp=pp, vpp=vpp)
    tl = build_timeline(cfg, gpu)
    assert tl.schedule == name
    fig = plots.timeline_figure(tl)
    assert f": {name} as Megatron-Core orders it" in fig.axes[0].get_title()
