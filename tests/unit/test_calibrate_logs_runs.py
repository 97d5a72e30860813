"""What one run of a log is, for the public readers (moeplan.logs) as for `moeplan calibrate`, and how a start-up's
logging interval and first iteration are read.

- ``read_log`` / ``parse_log`` give one run: start-ups whose settings differ are refused in one line (they
  merged an EP16 start-up's settings with the EP8 start-up's step time and memory); ``read_runs`` /
  ``parse_runs`` give each run. The rule is ``group_runs`` with an identity (the settings that make the run):
  every printed setting by default, the settings calibrate reads for calibrate.
- Megatron-LM's training_log prints a line when ``iteration % log_interval == 0``, and setup_model_and_optimizer
  (training.py) starts at iteration 0 unless it loads a checkpoint (--load), whose iteration the numbering
  continues from: a start-up's interval is its printed log_interval (else its own lines' step), and the first
  start-up of a log resumed only when its settings name a checkpoint to load.
"""

from __future__ import annotations

import pytest

from moeplan.calibrate.fit import log_runs
from moeplan.base.errors import MoeplanError
from moeplan.logs import lines as log_lines
from moeplan.logs import parse_log, parse_runs, read_log, read_runs, split_log, steady_state

from ..log_fixtures import QWEN3_30B_EP16, bridge_summary, iteration_line, mlm_log, step_times

STEP_S, TFLOPS, PEAK_GIB = 20.14729, 299.352, 62.166


def _run(settings=None, n=20, step_s=STEP_S, peak=PEAK_GIB, first=1, warm=(3.0, 1.4), every=1, drop=()):
    s = {k: v for k, v in dict(QWEN3_30B_EP16, **(settings or {})).items() if k not in drop}
    return mlm_log(s, step_times(step_s, n, warm=warm), tflops_steady=TFLOPS * STEP_S / step_s, peak_alloc_gib=peak,
                   peak_reserved_gib=peak + 4, first_iteration=first, every=every)


def _write(tmp_path, text, name="job.log"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ------------------------------------------------------------------------------------------ one run or several


def test_read_log_refuses_a_log_of_two_runs_with_different_settings(tmp_path):
    """The review's reproduction: an EP16 run, then an EP8 run (30 s, 70 GiB) appended. read_log returned the
    EP16 settings with 40 iterations, the EP8 peak and a 30 s steady state."""
    text = _run() + _run({"expert_model_parallel_size": 8}, step_s=30.0, peak=70.0)
    path = _write(tmp_path, text)
    second = text.splitlines().index("------------------------ arguments ------------------------", 2) + 1
    for read in (lambda: read_log(path), lambda: parse_log(text, path)):
        with pytest.raises(MoeplanError) as exc:
            read()
        msg = str(exc.value)
        assert "\n" not in msg and msg.startswith(f"{path} holds 2 runs with different settings (run 2 from line ")
        assert "expert_model_parallel_size 16 -> 8" in msg and "moeplan.logs.read_runs" in msg
        assert f"fits each as {path}#k" in msg
        assert f"from line {second}:" in msg  # its argument dump opens the start-up


def test_read_runs_gives_each_run_its_own_settings_steps_and_memory(tmp_path):
    text = _run() + _run({"expert_model_parallel_size": 8}, step_s=30.0, peak=70.0)
    path = _write(tmp_path, text)
    for runs in (read_runs(path), parse_runs(text, path)):
        assert [r.path for r in runs] == [f"{path}#1", f"{path}#2"]
        assert [r.settings["expert_model_parallel_size"] for r in runs] == [16, 8]
        assert [len(r.iterations) for r in runs] == [20, 20]
        assert [round(r.peak.max_allocated_bytes / 1024**3, 3) for r in runs] == [PEAK_GIB, 70.0]
        assert [round(steady_state(r).step_time_s) for r in runs] == [20, 30]


def test_a_job_restarted_with_the_same_command_is_one_run(tmp_path):
    text = _run() + _run(first=21, warm=(5.0, 3.0))
    log = read_log(_write(tmp_path, text))
    assert [i.iteration for i in log.iterations] == list(range(1, 41))
    assert [r.after for r in log.restarts] == [20]


def test_the_default_identity_is_every_printed_setting_and_another_can_be_given(tmp_path):
    """A resume that changes train_iters prints other settings: read_log cannot know it is the same run, so it
    refuses; an identity that leaves train_iters out (as calibrate's, which reads the run's settings) joins it."""
    path = _write(tmp_path, _run() + _run({"train_iters": 40}, first=21))
    with pytest.raises(MoeplanError, match="train_iters 50 -> 40"):
        read_log(path)
    log = read_log(path, identity=lambda p: {k: v for k, v in p.settings.items() if k != "train_iters"})
    assert len(log.iterations) == 40 and len(log.restarts) == 1
    [run] = log_runs(path)  # calibrate's identity: the same run
    assert run.path == path and len(run.iterations) == 40


def test_a_log_without_an_iteration_line_is_one_line(tmp_path):
    text = mlm_log(QWEN3_30B_EP16, [], tflops_steady=None, peak_alloc_gib=1, peak_reserved_gib=1)
    text += " iteration        1/      50 | consumed samples: 1024 |\n"  # cut short
    path = _write(tmp_path, text)
    for read in (lambda: read_runs(path), lambda: read_log(path)):
        with pytest.raises(MoeplanError, match=r"no complete iteration line \(1 cut short\)"):
            read()
    assert parse_log(text).iterations == ()  # the text reader gives the run without iterations, as before


# ------------------------------------------------------------------------------------------ one parse


def test_split_log_reads_the_iteration_lines_once(tmp_path, monkeypatch):
    """A 7 MB log of 20,000 iterations split in 0.89 s against 0.42 s for one parse: the iteration lines were
    scanned for the cuts and again per start-up. Now the text is scanned once."""
    text = _run() + _run({"expert_model_parallel_size": 8}) + _run(first=15)

    class Counting:
        def __init__(self, pattern):
            self.pattern, self.chars = pattern, 0

        def finditer(self, s):
            self.chars += len(s)
            return self.pattern.finditer(s)

    counting = Counting(log_lines._ITERATION)
    monkeypatch.setattr(log_lines, "_ITERATION", counting)
    parts = split_log(text)
    assert counting.chars == len(text)
    assert [len(p.iterations) for p in parts] == [20, 20, 20]
    # offsets into the whole log, as a per-start-up parse shifted them
    assert all(text.startswith(f"iteration {i.iteration:8d}/", i.offset) for p in parts for i in p.iterations)


def test_incomplete_lines_are_counted_in_their_own_start_up():
    cut = " iteration        5/      50 | consumed samples: 1024 |\n"
    text = _run() + cut + _run({"expert_model_parallel_size": 8}) + cut + cut
    assert [p.incomplete_lines for p in split_log(text)] == [1, 2]


# ------------------------------------------------------------------------------------------ interval and start


def test_each_start_up_logs_at_its_own_interval():
    """Run 1 logs every iteration, run 2 (resumed from iteration 100) every 10th: run 2 started after 100, not
    after 109 (the most common step over the whole log was 1)."""
    text = _run() + _run({"expert_model_parallel_size": 8, "log_interval": 10}, first=110, every=10)
    assert [p.start for p in split_log(text)] == [0, 100]
    unprinted = _run(drop=("log_interval",)) + _run({"expert_model_parallel_size": 8}, first=110, every=10,
                                                    drop=("log_interval",))
    assert [p.start for p in split_log(unprinted)] == [0, 100]  # no log_interval printed: its own lines' step


def test_a_start_up_of_one_line_takes_the_interval_of_the_start_ups_with_its_settings():
    """Run 2 logs every 10th iteration, then resumes from an earlier checkpoint (no new dump: iteration numbers
    go back) and logs one line: that start-up logs at run 2's interval, not at run 1's."""
    ep8 = _run({"expert_model_parallel_size": 8}, n=10, first=10, every=10, drop=("log_interval",))
    back = iteration_line(60, 50, STEP_S, 1024, TFLOPS) + "\n"
    parts = split_log(_run(n=30, drop=("log_interval",)) + ep8 + back)
    assert [p.start for p in parts] == [0, 0, 50]


def test_the_first_start_up_starts_from_0_unless_it_loads_a_checkpoint():
    """A log whose first line is iteration 3 (its first lines lost) is not a resumed run without --load: its
    warm-up is long over (it was taken as started after iteration 2, and lines 3-4 dropped as warm-up)."""
    [part] = split_log(_run(first=3, warm=()))
    assert part.start == 0 and [i.iteration for i in steady_state(part).used] == list(range(3, 23))
    resumed = _run({"load": "/ckpt/qwen3"}, first=101)
    assert split_log(resumed)[0].start == 100  # --load and numbering past the first interval: resumed
    fresh = _run({"load": "/ckpt/qwen3"})
    assert split_log(fresh)[0].start == 0  # --load with no checkpoint there: from 0, first line at the interval


def test_a_log_tail_is_not_taken_for_a_resume():
    """The tail of a long run (no argument dump, first line 5000) keeps its first lines."""
    tail = "\n".join(iteration_line(i, 9000, STEP_S, 1024, TFLOPS) for i in range(5000, 5020)) + "\n"
    log = parse_log(tail)
    assert log.start == 0
    assert [i.iteration for i in steady_state(log).used] == list(range(5000, 5020))


def test_bridge_reads_the_interval_and_the_checkpoint_from_its_configuration():
    model = {"num_layers": 48, "hidden_size": 2048, "num_attention_heads": 32, "num_moe_experts": 128,
             "moe_router_topk": 8, "moe_ffn_hidden_size": 768, "expert_model_parallel_size": 16}

    def start_up(other, first, every):
        head = bridge_summary(model, {"global_batch_size": 1024, "micro_batch_size": 1, "train_iters": 900},
                              {"seq_length": 4096}, other=other)
        return head + "\n".join(iteration_line(first + k * every, 900, STEP_S, 1024, None) for k in range(10)) + "\n"

    resumed = start_up({"checkpoint": {"load": "/ckpt"}, "logger": {"log_interval": 5}}, 205, 5)
    assert split_log(resumed)[0].start == 200
    assert split_log(start_up({"logger": {"log_interval": 5}}, 205, 5))[0].start == 0  # no checkpoint loaded


def test_two_fresh_launches_with_the_same_settings_are_two_runs():
    """Iterations starting again at 1 without a checkpoint is a new launch, not a resume: joined, it made one run of
    40 iterations with duplicate numbers (review)."""
    one = dict(tflops_steady=300.0, peak_alloc_gib=60.0, peak_reserved_gib=62.0)
    text = mlm_log(QWEN3_30B_EP16, [20.0] * 20, **one) + mlm_log(QWEN3_30B_EP16, [20.5] * 20, **one)
    runs = parse_runs(text, "two.log")
    assert [r.path for r in runs] == ["two.log#1", "two.log#2"] and all(len(r.iterations) == 20 for r in runs)
    assert "launched again from iteration 1" in runs[1].notes[0]
