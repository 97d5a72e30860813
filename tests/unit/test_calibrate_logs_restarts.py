"""`moeplan calibrate` on a log holding several start-ups (a job restarted or resumed, appended to the same file).

Megatron-LM's rank 0 prints its argument dump at every start-up (arguments.py ``_print_args``), Megatron Bridge
its configuration (config.py ``log_non_default_values``); a job resumed from an earlier checkpoint logs
iteration numbers that go back. Start-ups with the same settings are one run resumed (the first iterations after
each restart are warm-up again); different settings are different runs, fitted each on its own as ``LOG#k``.
Each run's memory is its own start-ups' memory lines.
"""

from __future__ import annotations

import pytest

from moeplan import cli
from moeplan.calibrate.fit import calibrate, log_runs, run_from_log
from moeplan.base.errors import MoeplanError
from moeplan.logs import split_log

from ..log_fixtures import QWEN3_30B_EP16, bridge_memory_line, bridge_summary, iteration_line, mlm_log, step_times

STEP_S, TFLOPS, PEAK_GIB = 20.14729, 299.352, 62.166
EP8 = {"expert_model_parallel_size": 8, "moe_flex_dispatcher_backend": "deepep"}


def _run(settings=None, n=20, step_s=STEP_S, peak=PEAK_GIB, first=1, warm=(3.0, 1.4)):
    s = dict(QWEN3_30B_EP16, **(settings or {}))
    return mlm_log(s, step_times(step_s, n, warm=warm), tflops_steady=TFLOPS * STEP_S / step_s, peak_alloc_gib=peak,
                   peak_reserved_gib=peak + 4, first_iteration=first)


def _write(tmp_path, text, name="job.log"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _line_of(text, needle, nth=1):
    """1-based line of the nth line containing ``needle``."""
    hits = [k for k, line in enumerate(text.splitlines(), start=1) if needle in line]
    return hits[nth - 1]


# ------------------------------------------------------------------------------------------ other settings


def test_a_second_run_with_other_settings_is_fitted_as_its_own_run(tmp_path):
    """The explorer's multirun.log: run 2 (EP8, 70 GiB) appended after run 1 (EP16, 62.166 GiB)."""
    text = _run() + _run({"expert_model_parallel_size": 8}, step_s=24.0, peak=70.0)
    path = _write(tmp_path, text)
    runs = calibrate([path], gpu="h100")["runs"]
    assert [r["log"] for r in runs] == [f"{path}#1", f"{path}#2"]
    assert [r["layout"].split()[3] for r in runs] == ["EP16", "EP8"]
    assert runs[0]["measured_step_time_s"] == pytest.approx(STEP_S, rel=0.01)
    assert runs[1]["measured_step_time_s"] == pytest.approx(24.0, rel=0.01)
    # each run's memory is its own: run 1 does not get run 2's 70 GiB
    assert runs[0]["measured_peak_allocated_gib"] == pytest.approx(PEAK_GIB, abs=1e-3)
    assert runs[1]["measured_peak_allocated_gib"] == pytest.approx(70.0, abs=1e-3)
    second = _line_of(text, "---- arguments ----", 2)
    assert runs[0]["notes"][0] == (f"run 1 of 2 in {path} (lines 1-{second - 1}): the log holds several runs, each "
                                   "fitted as a run of its own")
    assert runs[1]["notes"][0].startswith(f"run 2 of 2 in {path} (lines {second}-{text.count(chr(10))}): ")
    assert "expert_model_parallel_size 16 -> 8" in runs[1]["notes"][0]


def test_resumed_with_changed_knobs_is_two_runs_and_the_second_warms_up_from_its_start(tmp_path):
    """The explorer's resume_changed.log: iterations 1-20 EP16 HybridEP, then 21-60 EP8 DeepEP at ~30 s."""
    text = _run() + _run(dict(EP8, train_iters=60), n=40, step_s=30.0, first=21)
    runs = calibrate([_write(tmp_path, text)], gpu="h100")["runs"]
    assert [(r["layout"].split()[3], r["dispatcher"]) for r in runs] == [("EP16", "hybridep"), ("EP8", "deepep")]
    assert runs[0]["steady_state"]["iterations_used"] == list(range(6, 21))
    assert runs[0]["measured_step_time_s"] == pytest.approx(STEP_S, rel=0.01)
    # run 2 starts after iteration 20: its warm-up (2) and CUDA-graph warm-up (3) are iterations 21-25
    assert runs[1]["steady_state"]["iterations_used"] == list(range(26, 61))
    dropped = {d["iteration"]: d["reason"] for d in runs[1]["steady_state"]["dropped"]}
    assert set(dropped) == {21, 22, 23, 24, 25} and "warm-up" in dropped[21] and "CUDA-graph" in dropped[25]
    assert runs[1]["measured_step_time_s"] == pytest.approx(30.0, rel=0.01)
    assert runs[1]["measured_peak_allocated_gib"] == pytest.approx(PEAK_GIB, abs=1e-3)  # its own memory line
    assert "moe_flex_dispatcher_backend hybridep -> deepep" in runs[1]["notes"][0]


def test_bridge_log_with_two_configurations_is_two_runs(tmp_path):
    model = {"num_layers": 48, "hidden_size": 2048, "num_attention_heads": 32, "num_moe_experts": 128,
             "moe_router_topk": 8, "moe_ffn_hidden_size": 768, "expert_model_parallel_size": 16,
             "moe_token_dispatcher_type": "alltoall", "moe_router_force_load_balancing": True}

    def start_up(ep, step_s, peak):
        head = bridge_summary(dict(model, expert_model_parallel_size=ep),
                              {"global_batch_size": 1024, "micro_batch_size": 1, "train_iters": 20},
                              {"seq_length": 4096}, ddp={"use_distributed_optimizer": True})
        lines = [iteration_line(i, 20, t, 1024, None) for i, t in enumerate(step_times(step_s, 20), start=1)]
        lines.insert(3, bridge_memory_line(0, 3, 40.0, peak, peak + 2, peak + 4))
        return head + "\n".join(lines) + "\n"

    path = _write(tmp_path, start_up(16, 40.0, 60.0) + start_up(8, 45.0, 66.0))
    runs = calibrate([path], gpu="h100", sets={"gpus": 16})["runs"]
    assert [(r["log"], r["layout"].split()[3]) for r in runs] == [(f"{path}#1", "EP16"), (f"{path}#2", "EP8")]
    assert [round(r["measured_peak_allocated_gib"]) for r in runs] == [60, 66]
    assert [round(r["measured_step_time_s"]) for r in runs] == [40, 45]


def test_an_error_in_the_second_run_names_it(tmp_path):
    text = _run() + _run({"expert_model_parallel_size": 8}, n=3)  # run 2 stopped inside its warm-up
    path = _write(tmp_path, text)
    with pytest.raises(MoeplanError) as exc:
        calibrate([path], gpu="h100")
    assert str(exc.value).startswith(f"{path}#2: no steady iteration left") and "\n" not in str(exc.value)


def test_a_start_up_that_logged_no_step_is_left_out_with_a_note(tmp_path):
    crashed = mlm_log(dict(QWEN3_30B_EP16, expert_model_parallel_size=4), [], tflops_steady=None, peak_alloc_gib=1,
                      peak_reserved_gib=1) + "torch.OutOfMemoryError: CUDA out of memory.\n"
    path = _write(tmp_path, crashed + _run())
    [run] = calibrate([path], gpu="h100")["runs"]
    assert run["log"] == path and run["layout"].split()[3] == "EP16"
    end = crashed.count("\n") + 1  # up to the next argument dump (its "using world size" line comes before it)
    assert run["notes"] == [f"{path} lines 1-{end}: a start-up with no complete iteration line "
                            "(it crashed or was stopped before its first logged step) is not used"]


# ------------------------------------------------------------------------------------------ same settings


def test_resume_with_the_same_settings_is_one_run_and_drops_the_warm_up_after_the_restart(tmp_path):
    """The explorer's resume.log: iterations 21-24 after the restart are 5x, 3x, 2x, 1.5x slower."""
    text = _run() + _run({"train_iters": 40}, first=21, warm=(5.0, 3.0, 2.0, 1.5))  # train_iters: not a run setting
    path = _write(tmp_path, text)
    [run] = calibrate([path], gpu="h100")["runs"]
    assert run["log"] == path and not any(n.startswith("run ") for n in run["notes"])
    st = run["steady_state"]
    assert st["iterations_used"] == [*range(6, 21), *range(26, 41)]
    restart = _line_of(text, "---- arguments ----", 2)  # the start-up begins with its argument dump
    dropped = {d["iteration"]: d["reason"] for d in st["dropped"]}
    assert dropped[21] == f"warm-up after the restart at line {restart} (first 2 iterations)"
    assert dropped[25] == f"CUDA-graph warm-up after the restart at line {restart} (cuda_graph_warmup_steps 3)"
    assert run["measured_step_time_s"] == pytest.approx(STEP_S, rel=0.01) and st["spread"] < 0.02


def test_resume_from_an_earlier_checkpoint_drops_the_lines_logged_again(tmp_path):
    """No new dump (a log filtered to its iteration lines, or the dump lost): iteration numbers going back are
    a restart; the first job's lines past the checkpoint were redone, and the resumed job warms up again."""
    first = _run()
    lines = [iteration_line(i, 40, t, 1024, TFLOPS * STEP_S / t)
             for i, t in enumerate(step_times(STEP_S, 26, warm=(4.0, 2.0, 1.6)), start=15)]
    text = first + "\n".join(lines) + "\n"
    [log] = log_runs(_write(tmp_path, text))
    assert [r.after for r in log.restarts] == [14] and log.restarts[0].line == first.count("\n") + 1
    st = run_from_log(log, gpu="h100").steady
    dropped: dict[int, list[str]] = {}
    for it, why in st.dropped:
        dropped.setdefault(it, []).append(why)
    assert all(any(w.startswith("logged again after the restart") for w in dropped[i]) for i in range(15, 21))
    assert [i.iteration for i in st.used] == [*range(6, 15), *range(20, 41)]  # 15-19: warm-up after the restart
    assert st.step_time_s == pytest.approx(STEP_S, rel=0.01)


def test_restarts_split_only_where_a_start_up_begins(tmp_path):
    """A log of one start-up is one part, an iteration line printed twice does not go back; a second argument
    dump before any step (a start-up that crashed) starts another part."""
    one = _run()
    assert len(split_log(one)) == 1
    repeated = one + iteration_line(20, 20, STEP_S, 1024, TFLOPS) + "\n"  # iteration 20 printed twice: not back
    assert len(split_log(repeated)) == 1
    crashed = mlm_log(QWEN3_30B_EP16, [], tflops_steady=None, peak_alloc_gib=1, peak_reserved_gib=1)
    parts = split_log(crashed + one)
    assert [len(p.iterations) for p in parts] == [0, 20]


def test_the_table_prints_each_run_of_a_log(tmp_path, capsys):
    path = _write(tmp_path, _run() + _run({"expert_model_parallel_size": 8}, step_s=24.0, peak=70.0))
    assert cli.main(["calibrate", path, "--gpu", "h100"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "#1" in out and "#2" in out and "run 2 of 2" in out
