"""`moeplan calibrate`: log readers, steady state, settings -> run, the fit, the profile and --calibration.

Log text is built in the formats Megatron-LM and Megatron Bridge print (tests/log_fixtures.py) from
published numbers: the Qwen3-30B-A3B 16 H100 EP16 HybridEP run (20.147 s/step, 299.352 TFLOP/s/GPU,
62.166 GiB peak allocated) and the G11 variant group of ../shared/reference/measured_variants.csv.
"""

from __future__ import annotations

import json
import math

import pytest
import yaml

from moeplan import cli
from moeplan.calibrate.fit import calibrate, fit, load_profile, profile_yaml, run_from_log
from moeplan.base.errors import MoeplanError
from moeplan.engine.estimate import evaluate
from moeplan.logs import parse_log, read_log, steady_state
from moeplan.logs.lines import parse_iterations, parse_memory
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION

from ..log_fixtures import (
    QWEN3_30B_EP16,
    bridge_memory_line,
    bridge_summary,
    iteration_line,
    mlm_log,
    mlm_memory_line,
    step_times,
)

STEP_S, TFLOPS, PEAK_GIB = 20.14729, 299.352, 62.166


def _qwen_log(tmp_path, name="qwen.log", settings=None, **kw):
    s = dict(QWEN3_30B_EP16, **(settings or {}))
    text = mlm_log(s, step_times(kw.pop("step_s", STEP_S), 20), tflops_steady=kw.pop("tflops", TFLOPS),
                   peak_alloc_gib=PEAK_GIB, peak_reserved_gib=66.0, **kw)
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------------------ readers


def test_megatron_lm_log_parses_to_the_runs_settings(tmp_path):
    log = read_log(_qwen_log(tmp_path))
    assert log.format == "megatron-lm"
    assert [i.iteration for i in log.iterations] == list(range(1, 21))
    assert log.iterations[-1].global_batch_size == 1024
    assert log.peak is not None and log.peak.max_allocated_bytes / 1024**3 == pytest.approx(PEAK_GIB, abs=1e-4)
    run = run_from_log(log, gpu="h100")
    cfg = run.config
    assert cfg.model.name == "qwen3-30b-a3b"  # inferred from the dumped architecture
    assert (cfg.parallel.gpus, cfg.parallel.tp, cfg.parallel.ep, cfg.parallel.dp) == (16, 1, 16, 16)
    assert (cfg.batch.seq_len, cfg.batch.gbs, cfg.batch.mbs) == (4096, 1024, 1)
    assert cfg.dispatcher == "hybridep" and cfg.ep_overlap
    assert cfg.cuda_graph_scopes == frozenset({"moe_router", "moe_preprocess"})
    assert not cfg.grad_fp32  # accumulate_allreduce_grads_in_fp32 False
    assert run.peak_allocated_gib == pytest.approx(PEAK_GIB, abs=1e-3)


def test_iteration_line_fields_and_units():
    line = iteration_line(7, 50, 20.1473, 1024, 299.4)
    [it], incomplete = parse_iterations(line)
    assert (it.iteration, it.train_iters, it.global_batch_size, incomplete) == (7, 50, 1024, 0)
    assert it.elapsed_s == pytest.approx(20.1473, abs=1e-4) and it.tflops_per_gpu == pytest.approx(299.4)


def test_memory_units_mib_and_gb():
    mlm = parse_memory(mlm_memory_line(3, 10, 40.0, 62.166, 64.0, 66.0))[0]
    assert mlm.rank == 3 and mlm.max_allocated_bytes / 1024**3 == pytest.approx(62.166, abs=1e-5)
    br = parse_memory(bridge_memory_line(0, 10, 40.0, 62.166, 64.0, 66.0))[0]  # GB = 1e9 bytes, 5 digits
    assert br.max_allocated_bytes / 1024**3 == pytest.approx(62.166, rel=1e-4)
    assert br.max_reserved_bytes / 1024**3 == pytest.approx(66.0, rel=1e-4)


def test_bridge_summary_log_reads_like_the_megatron_lm_one(tmp_path):
    model = {"num_layers": 48, "hidden_size": 2048, "num_attention_heads": 32, "num_moe_experts": 128,
             "moe_router_topk": 8, "moe_ffn_hidden_size": 768, "expert_model_parallel_size": 16,
             "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
             "overlap_moe_expert_parallel_comm": True, "cuda_graph_impl": "transformer_engine",
             "cuda_graph_scope": ["moe_router", "moe_preprocess"], "moe_router_force_load_balancing": True}
    text = bridge_summary(model, {"global_batch_size": 1024, "micro_batch_size": 1, "train_iters": 20},
                          {"seq_length": 4096}, ddp={"use_distributed_optimizer": True, "overlap_grad_reduce": True,
                                                     "overlap_param_gather": True})
    times = step_times(STEP_S, 20)
    lines = [iteration_line(i, 20, t, 1024, TFLOPS * STEP_S / t) for i, t in enumerate(times, start=1)]
    lines.insert(1, bridge_memory_line(0, 1, 40.0, PEAK_GIB, 64.0, 66.0))
    path = tmp_path / "bridge.log"
    path.write_text(text + "\n".join(lines) + "\n")
    log = read_log(path)
    assert log.format == "bridge-summary"
    with pytest.raises(MoeplanError, match=r"GPU count \(gpus;.*--set gpus=16"):
        run_from_log(log, gpu="h100")  # Bridge does not print the world size
    cfg = run_from_log(log, gpu="h100", sets={"gpus": 16}).config
    mlm = run_from_log(read_log(_qwen_log(tmp_path)), gpu="h100").config
    assert cfg.parallel == mlm.parallel and cfg.batch == mlm.batch
    assert (cfg.dispatcher, cfg.ep_overlap, cfg.cuda_graph_scopes) == (mlm.dispatcher, mlm.ep_overlap, mlm.cuda_graph_scopes)
    assert not cfg.grad_fp32  # absent from [ddp]: Megatron-Core's default grad_reduce_in_fp32=False


def test_interleaved_and_truncated_multi_rank_log(tmp_path):
    """Ranks' output glued together, srun-style prefixes, a line cut short at the end."""
    times = step_times(STEP_S, 12)
    dump = mlm_log(dict(QWEN3_30B_EP16, train_iters=12), [], tflops_steady=None, peak_alloc_gib=1, peak_reserved_gib=1)
    body = []
    for i, t in enumerate(times, start=1):
        body.append("0: " + iteration_line(i, 12, t, 1024, TFLOPS * STEP_S / t))
        if i == 2:  # two ranks' memory lines on one line, as unsynchronised prints interleave
            body.append(mlm_memory_line(8, 2, 30.0, 60.0, 63.0, 64.0) + mlm_memory_line(0, 2, 30.0, PEAK_GIB, 64.0, 66.5))
    cut = iteration_line(13, 13, STEP_S, 1024, TFLOPS)
    body.append(cut[: cut.index("elapsed time per iteration (ms):") + 40])  # ends mid-field: "... 20147"
    path = tmp_path / "mixed.log"
    path.write_text(dump + "\n".join(body))
    log = read_log(path)
    assert [i.iteration for i in log.iterations] == list(range(1, 13)) and log.incomplete_lines == 1
    assert sorted(r.rank for r in log.memory) == [0, 8]
    assert log.peak.rank == 0 and log.peak.max_allocated_bytes / 1024**3 == pytest.approx(PEAK_GIB, abs=1e-4)
    run = run_from_log(log, gpu="h100")
    assert run.peak_reserved_gib == pytest.approx(66.5, abs=1e-3)
    assert run.step_time_s == pytest.approx(STEP_S, rel=0.005)


# ------------------------------------------------------------------------------------------ steady state


def test_warm_up_graph_capture_and_profiler_iterations_are_dropped(tmp_path):
    path = _qwen_log(tmp_path, settings={"profile": True, "profile_step_start": 10, "profile_step_end": 11})
    log = read_log(path)
    run = run_from_log(log, gpu="h100")
    dropped = dict(run.steady.dropped)
    # 2 warm-up iterations + cuda_graph_warmup_steps 3 (graphs on), then the profiled window
    assert {1, 2, 3, 4, 5} <= set(dropped) and "warm-up" in dropped[1]
    assert "profiler" in dropped[10] and "profiler" in dropped[11]
    used = [i.iteration for i in run.steady.used]
    assert used[0] == 6 and 10 not in used and 11 not in used
    assert run.step_time_s == pytest.approx(STEP_S, rel=0.005)  # the slow first iterations are out
    assert run.steady.spread < 0.01
    without_graphs = steady_state(log, warmup_iters=0)
    assert without_graphs.used[0].iteration == 3  # iterations 1-2 (x3.0, x1.4) still settling


def test_settling_intervals_dropped():
    lines = [iteration_line(i, 8, t, 64, None) for i, t in enumerate([9.0, 5.0, 2.6, 2.0, 2.01, 1.99, 2.0, 2.0], 1)]
    s = steady_state(parse_log("\n".join(lines)), warmup_iters=0)
    assert [i.iteration for i in s.used] == [4, 5, 6, 7, 8] and s.step_time_s == pytest.approx(2.0)


# ------------------------------------------------------------------------------------------ errors


def test_crashed_run_is_a_one_line_error_exit_2(tmp_path, capsys):
    path = tmp_path / "crash.log"
    path.write_text(mlm_log(QWEN3_30B_EP16, [], tflops_steady=None, peak_alloc_gib=1, peak_reserved_gib=1)
                    + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    out = tmp_path / "profile.yaml"
    assert cli.main(["calibrate", str(path), "--gpu", "h100", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no complete iteration line" in err and "Traceback" not in err
    assert not out.exists()  # nothing half-written


def test_missing_setting_is_named_and_set_supplies_it(tmp_path):
    s = dict(QWEN3_30B_EP16)
    del s["seq_length"]
    path = _qwen_log(tmp_path, settings=None)
    path.write_text(mlm_log(s, step_times(STEP_S, 20), tflops_steady=TFLOPS, peak_alloc_gib=PEAK_GIB,
                            peak_reserved_gib=66.0))
    with pytest.raises(MoeplanError, match=r"sequence length \(seq_length.*--set seq_length="):
        calibrate([str(path)], gpu="h100")
    with pytest.raises(MoeplanError, match="GPU type"):
        calibrate([str(path)], sets=["seq_length=4096"])
    result = calibrate([str(path)], gpu="h100", sets=["seq_length=4096"])
    assert result["runs"][0]["seq_len"] == 4096


# ------------------------------------------------------------------------------------------ the fit


def test_one_log_moves_one_overall_scale(tmp_path):
    result = calibrate([str(_qwen_log(tmp_path))], gpu="h100")
    run = result["runs"][0]
    for key in ("log", "measured_step_time_s", "measured_tflops_per_gpu", "measured_peak_allocated_gib",
                "default_tflops_per_gpu", "calibrated_tflops_per_gpu"):
        assert key in run
    assert run["measured_peak_allocated_gib"] == pytest.approx(PEAK_GIB, abs=1e-3)
    assert result["fit"]["degrees_of_freedom"] == 1 and "ONE overall scale" in result["fit"]["message"]
    # the default is ~5% optimistic on this run (12% before the refit on groups N01-N41, ~8% before the bulk
    # split-quantize refit); one scale closes the gap on the run it came from
    assert abs(run["default_error"]) > 0.03 and abs(run["calibrated_error"]) < 0.005
    # every moved constant moved the same way along one direction (slower): shares down, costs up
    assert result["constants"] and set(result["constants"]) | set(result["not_moved"]) >= {"nvlink_eff", "tp_hidden"}
    assert "tp_hidden" in result["not_moved"] and "nvlink_eff" in result["not_moved"]  # TP1, EP16 over NICs
    assert result["memory"]["reserve_gib"] == pytest.approx(66.0 - run["estimated_peak_allocated_gib"], abs=1e-6)


# G11 of ../shared/reference/measured_variants.csv: Qwen3-30B-A3B, 16 H100, EP16, GBS 1024, seq 4096
# (label, settings changed from the tuned run, step s, TFLOP/s/GPU); the natural-routing row is left out.
G11 = (("hybridep-no-overlap", {"overlap_moe_expert_parallel_comm": False}, 24.7138, 244.039),
       ("hybridep-overlap", {}, 21.0725, 286.208),
       ("hybridep-overlap-repeat", {}, 20.992, 287.305),
       ("hybridep-tuned", {}, 20.14729, 299.352),
       ("alltoall", {"moe_token_dispatcher_type": "alltoall", "overlap_moe_expert_parallel_comm": False}, 45.65, 132.9))


def _g11_runs():
    runs = []
    for label, change, step_s, tflops in G11:
        text = mlm_log(dict(QWEN3_30B_EP16, **change), step_times(step_s, 20), tflops_steady=tflops,
                       peak_alloc_gib=PEAK_GIB, peak_reserved_gib=66.0)
        runs.append(run_from_log(parse_log(text, label), gpu="h100"))
    return runs


def test_leave_one_out_predicts_the_held_out_run_better_than_the_default():
    runs = _g11_runs()
    for i, held in enumerate(runs):
        result = fit([r for j, r in enumerate(runs) if j != i])
        default = evaluate(held.config, held.gpu, DEFAULT_CALIBRATION).time.step_time_s
        fitted = evaluate(held.config, held.gpu, result.calibration).time.step_time_s
        err_default = abs(math.log(held.step_time_s / default))
        err_fitted = abs(math.log(held.step_time_s / fitted))
        # the shipped defaults are themselves fitted to these G11 rows (benchmarks/calibrate.py), so a
        # held-out run the default already predicts within 10% need not improve, only stay within 10%
        assert err_fitted < max(err_default, 0.10), (held.log.path, held.step_time_s, default, fitted)
    full = fit(runs)
    assert full.distinct_runs == 3  # the repeat and the tuned run are one configuration to moeplan
    assert full.degrees_of_freedom == 3 and full.rms_log_error_after < full.rms_log_error_before / 2


# ------------------------------------------------------------------------------------------ profile + CLI


def test_profile_round_trip_and_calibration_flag(tmp_path, capsys):
    path = _qwen_log(tmp_path)
    out = tmp_path / "profile.yaml"
    assert cli.main(["calibrate", str(path), "--gpu", "h100", "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) >= {"runs", "constants", "not_moved"}
    profile = load_profile(out)
    text = out.read_text()
    assert "moeplan_version" in text and str(path) in text
    for name, value in result["constants"].items():
        head, _, key = name.partition(".")
        got = getattr(profile.calibration, head)
        assert (got[key] if key else got) == pytest.approx(value, rel=1e-5)
    args = ["qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4k", "--gbs", "1024", "--ep", "16",
            "--dispatcher", "hybridep", "--ep-overlap", "--cuda-graphs", "moe_router,moe_preprocess", "--bf16-grads"]
    assert cli.main(["estimate", *args, "--json"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert cli.main(["estimate", *args, "--json", "--calibration", str(out)]) == 0
    calibrated = json.loads(capsys.readouterr().out)
    assert calibrated["calibration"] == str(out) and "calibration" not in default
    assert calibrated["step_time_s"] == pytest.approx(result["runs"][0]["measured_step_time_s"], rel=0.01)
    assert default["step_time_s"] < calibrated["step_time_s"]
    assert calibrated["memory_gib"]["reserve"] == pytest.approx(profile.reserve_gib, abs=1e-3)
    assert cli.main(["estimate", *args, "--calibration", str(out)]) == 0
    assert f"using calibration {out}" in capsys.readouterr().out


def test_calibration_on_plan_sweep_check(tmp_path, capsys):
    out = tmp_path / "profile.yaml"
    assert cli.main(["calibrate", str(_qwen_log(tmp_path)), "--gpu", "h100", "--out", str(out)]) == 0
    capsys.readouterr()
    plan = ["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "1024", "--top", "1", "--json"]
    assert cli.main(plan) == 0
    base = json.loads(capsys.readouterr().out)[0]
    assert cli.main([*plan, "--calibration", str(out)]) == 0
    cal = json.loads(capsys.readouterr().out)[0]
    assert cal["calibration"] == str(out) and cal["tflops_per_gpu"] < base["tflops_per_gpu"]
    assert cli.main(["sweep", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k,8k", "--gbs-tokens", "4m", "--ep", "16",
                     "--json", "--calibration", str(out)]) == 0
    assert all(r["calibration"] == str(out) for r in json.loads(capsys.readouterr().out))
    run = tmp_path / "run.txt"
    run.write_text("--tensor-model-parallel-size 1 --expert-model-parallel-size 16 --seq-length 4096 "
                   "--global-batch-size 1024 --micro-batch-size 1 --use-distributed-optimizer "
                   "--moe-token-dispatcher-type alltoall\n")
    cli.main(["check", str(run), "--model", "qwen3-30b-a3b", "--gpus", "16", "--json", "--calibration", str(out)])
    assert json.loads(capsys.readouterr().out)["calibration"] == str(out)


def test_bad_profile_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("constants:\n  attn_eff_typo: 0.5\n")
    assert cli.main(["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "1024",
                     "--calibration", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "attn_eff_typo" in err
    # malformed YAML: where, and what, as the hardware file reader says it (not PyYAML's multi-part dump)
    bad.write_text("constants: [1, 2\n")
    assert cli.main(["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "1024",
                     "--calibration", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("calibration profile is malformed YAML at line 2 column 1: expected ',' or ']', but got "
                        "'<stream end>'"), err
    # a constant at the top level (not under 'constants') would change nothing without a word
    bad.write_text("grouped_gemm_eff: 0.5\n")
    assert cli.main(["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "1024",
                     "--calibration", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'grouped_gemm_eff'" in err and "under 'constants'" in err


def test_bridge_task_configuration_yaml_log(tmp_path):
    """Bridge before 2026-02 printed the whole ConfigContainer YAML between these banners (setup.py)."""
    yaml_text = """------- Task Configuration -------
model:
  _target_: megatron.bridge.models.qwen.qwen_provider.Qwen3MoEModelProvider
  num_layers: 48
  hidden_size: 2048
  num_attention_heads: 32
  num_moe_experts: 128
  moe_router_topk: 8
  moe_ffn_hidden_size: 768
  tensor_model_parallel_size: 1
  expert_model_parallel_size: 16
  moe_token_dispatcher_type: alltoall
  moe_router_force_load_balancing: true
  seq_length: 4096
train:
  global_batch_size: 1024
  micro_batch_size: 1
  train_iters: 20
ddp:
  use_distributed_optimizer: true
  grad_reduce_in_fp32: false
profiling:
  use_nsys_profiler: true
  profile_step_start: 8
  profile_step_end: 9
----------------------------------
"""
    times = step_times(45.65, 20)
    lines = [iteration_line(i, 20, t, 1024, None) for i, t in enumerate(times, start=1)]
    path = tmp_path / "bridge_old.log"
    path.write_text(yaml_text + "\n".join(lines) + "\n")
    log = read_log(path)
    assert log.format == "bridge-yaml"
    run = run_from_log(log, gpu="h100", sets={"gpus": 16})
    cfg = run.config
    assert (cfg.parallel.ep, cfg.batch.seq_len, cfg.dispatcher, cfg.grad_fp32) == (16, 4096, "alltoall", False)
    dropped = dict(run.steady.dropped)
    assert "profiler" in dropped[8] and "profiler" in dropped[9]
    # no throughput logged: TFLOP/s from moeplan's FLOPs at the measured step time, and said so
    assert run.tflops_source == "derived" and any("derived" in n for n in run.notes)
    assert run.measured_tflops_per_gpu == pytest.approx(132.9, rel=0.02)  # G11's alltoall point: 132.9
    with pytest.raises(MoeplanError, match="positive integer"):
        run_from_log(log, gpu="h100", sets={"gpus": "sixteen"})


def test_every_efficiency_is_capped_at_one():
    """Every Calibration share (``*_eff``, ``*_share``) stays <= 1 in a user fit, new ones included."""
    from dataclasses import fields

    from moeplan.calibrate import fit as calibrate
    from moeplan.engine.timing.calibration import Calibration

    shares = [f.name for f in fields(Calibration) if f.name.endswith(("_eff", "_share"))]
    assert {"attn_fwd_eff", "attn_bwd_eff", "a2a_scaleout_eff", "cpu_adam_mem_eff", "ep_link_share"} <= set(shares)
    for name in shares:
        assert calibrate._bounds(name, 0.5)[1] <= 0.0  # log(1.0): capped
        assert calibrate._bounds(f"{name}.h100", 0.5)[1] <= 0.0
    assert calibrate._bounds("launch_overhead_per_layer_s", 0.5)[1] > 0.0  # a time is not a share


# ------------------------------------------------------------------------------------------ exploratory-test defects


def test_allocated_error_is_measured_over_estimate_minus_one(tmp_path, capsys):
    """The JSON's allocated_error is the table's memory "err": measured / estimate - 1 (+ = estimate low)."""
    result = calibrate([str(_qwen_log(tmp_path))], gpu="h100")
    run = result["runs"][0]
    measured, estimate = run["measured_peak_allocated_gib"], run["estimated_peak_allocated_gib"]
    assert measured > estimate  # 62.17 measured vs ~59.7 estimated: the estimate is low
    assert run["allocated_error"] == pytest.approx(measured / estimate - 1) and run["allocated_error"] > 0


def _short_log(tmp_path, n, settings=None, nan=0, skipped=0, name="short.log"):
    text = mlm_log(dict(QWEN3_30B_EP16, train_iters=n, **(settings or {})), step_times(STEP_S, n), tflops_steady=TFLOPS,
                   peak_alloc_gib=PEAK_GIB, peak_reserved_gib=66.0)
    text = text.replace("number of skipped iterations:   0", f"number of skipped iterations:   {skipped}")
    text = text.replace("number of nan iterations:   0", f"number of nan iterations:   {nan}")
    path = tmp_path / name
    path.write_text(text)
    return path


NO_GRAPHS = {"cuda_graph_impl": "none", "cuda_graph_scope": None}


def test_no_steady_iteration_names_graph_warm_up_and_does_not_suggest_warmup_0(tmp_path, capsys):
    path = _short_log(tmp_path, 2)  # CUDA graphs on: cuda_graph_warmup_steps 3 > the 2 logged iterations
    with pytest.raises(MoeplanError) as exc:
        calibrate([str(path)], gpu="h100", warmup_iters=0)
    msg = str(exc.value)
    assert "2 in CUDA-graph warm-up (iterations 1-3: cuda_graph_warmup_steps 3)" in msg
    assert "--warmup 0" not in msg and "run past iteration 3" in msg and "\n" not in msg
    with pytest.raises(MoeplanError) as exc:  # default warm-up 2: --warmup 0 would still leave graph warm-up
        calibrate([str(path)], gpu="h100")
    assert "2 in warm-up (iterations 1-2)" in str(exc.value) and "--warmup 0" not in str(exc.value)
    assert "run past iteration 5" in str(exc.value)
    assert cli.main(["calibrate", str(path), "--gpu", "h100", "--warmup", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "CUDA-graph warm-up" in err and "--warmup 0" not in err


def test_no_steady_iteration_suggests_warmup_0_only_when_it_helps(tmp_path):
    path = _short_log(tmp_path, 2, NO_GRAPHS)
    with pytest.raises(MoeplanError) as exc:
        calibrate([str(path)], gpu="h100")
    assert "2 in warm-up (iterations 1-2)" in str(exc.value) and "pass --warmup 0" in str(exc.value)
    assert calibrate([str(path)], gpu="h100", warmup_iters=0)["runs"][0]["steady_state"]["iterations_used"]


@pytest.mark.parametrize("nan, skipped, words", [(1, 0, "15 with NaN iterations"), (0, 1, "15 with skipped iterations")])
def test_no_steady_iteration_names_nan_and_skipped(tmp_path, nan, skipped, words):
    path = _short_log(tmp_path, 20, nan=nan, skipped=skipped)  # every line: 5 warm-up, 15 NaN / skipped
    with pytest.raises(MoeplanError) as exc:
        calibrate([str(path)], gpu="h100")
    msg = str(exc.value)
    assert words in msg and "2 in warm-up" in msg and "3 in CUDA-graph warm-up" in msg
    assert "--warmup 0" not in msg and "run past" not in msg and "\n" not in msg
    dropped = dict(run_from_log(read_log(_short_log(tmp_path, 20, name="ok.log")), gpu="h100").steady.dropped)
    assert "warm-up (first 2 iterations)" in dropped[2] and "CUDA-graph warm-up" in dropped[3]


def test_set_overriding_what_the_log_states_is_noted(tmp_path, capsys):
    path = _qwen_log(tmp_path)
    run = calibrate([str(path)], gpu="h100", sets=["gpus=32"])["runs"][0]
    assert run["flops_ratio_log_vs_moeplan"] == pytest.approx(2.0, rel=0.01)
    assert any("--set gpus=32" in n and "world_size 16" in n for n in run["notes"]), run["notes"]
    assert any("2.00x moeplan's count" in n and "0.9-1.1" in n for n in run["notes"]), run["notes"]
    run = calibrate([str(path)], gpu="h100", sets=["seq_length=8192", "gpus=16", "model.num_layers=48"])["runs"][0]
    assert [n for n in run["notes"] if n.startswith("--set")] == [
        "--set seq_length=8192 overrides the log's seq_length 4096: the estimate is not of the run the log measured"]
    run = calibrate([str(path)], gpu="h100", model="qwen3-235b-a22b")["runs"][0]
    assert any(n.startswith("--model qwen3-235b-a22b differs from the log's architecture (num_layers 94 vs 48 logged")
               for n in run["notes"]), run["notes"]
    clean = calibrate([str(path)], gpu="h100")
    assert clean["runs"][0]["notes"] == [] and clean["warnings"] == []
    assert clean["runs"][0]["flops_ratio_log_vs_moeplan"] == pytest.approx(1.0, abs=0.01)
    assert cli.main(["calibrate", str(path), "--gpu", "h100", "--set", "gpus=32"]) == 0  # the table prints run notes
    out = " ".join(capsys.readouterr().out.split())
    assert "--set gpus=32 overrides the log's world_size 16" in out and "2.00x moeplan's count" in out


def test_suspect_fit_warns_and_the_profile_records_it(tmp_path):
    path = _qwen_log(tmp_path, step_s=STEP_S * 20, tflops=TFLOPS / 20)  # 20x slower than any constant allows
    result = calibrate([str(path)], gpu="h100")
    warnings = result["warnings"]
    assert len(warnings) == 2 and all("\n" not in w for w in warnings)
    assert "stopped at the fit's bounds" in warnings[0] and "grouped_gemm_eff" in warnings[0]
    assert warnings[1].startswith("RMS log step-time error after the fit") and "> 0.15" in warnings[1]
    assert result["fit"]["rms_log_error_after"] > 0.15
    out = tmp_path / "profile.yaml"
    out.write_text(profile_yaml(result))
    assert yaml.safe_load(out.read_text())["fit"]["warnings"] == warnings
    load_profile(out)  # still a valid profile: the warning is provenance, not a refusal
