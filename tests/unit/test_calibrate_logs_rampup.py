"""`moeplan calibrate` on a run with a batch-size ramp-up (Megatron-LM ``--rampup-batch-size``).

The iteration line prints the batch of its step (training.py ``training_log``: ``global batch size: B``,
``get_current_global_batch_size()``); the argument dump's ``global_batch_size`` is the final one. A step at a
ramp-up batch does less work in less time, so only lines at the run's batch size are steady.
"""

from __future__ import annotations

import pytest

from moeplan import cli
from moeplan.calibrate.fit import calibrate
from moeplan.base.errors import MoeplanError

from ..log_fixtures import QWEN3_30B_EP16, arguments_dump, iteration_line

STEP_S, TFLOPS = 20.14729, 299.352


def _rampup_log(tmp_path, n=20, sizes=((1, 256), (8, 512), (14, 1024))):
    """Iterations 1..n at the batch of the last (from, gbs) step reached; step time in proportion to the batch."""
    out = ["using world size: 16", arguments_dump(dict(QWEN3_30B_EP16, train_iters=n))]
    for i in range(1, n + 1):
        gbs = [g for start, g in sizes if i >= start][-1]
        out.append(iteration_line(i, n, STEP_S * gbs / 1024, gbs, TFLOPS))
    path = tmp_path / "rampup.log"
    path.write_text("\n".join(out) + "\n")
    return str(path)


def test_only_lines_at_the_runs_batch_size_are_steady(tmp_path):
    run = calibrate([_rampup_log(tmp_path)], gpu="h100")["runs"][0]
    st = run["steady_state"]
    assert st["iterations_used"] == list(range(14, 21))
    dropped = {d["iteration"]: d["reason"] for d in st["dropped"]}
    assert dropped[6] == "batch-size ramp-up (GBS 256)" and dropped[13] == "batch-size ramp-up (GBS 512)"
    assert run["gbs"] == 1024 and run["measured_step_time_s"] == pytest.approx(STEP_S, rel=1e-3)
    assert run["flops_ratio_log_vs_moeplan"] == pytest.approx(1.0, abs=0.02)  # was 0.50: ramp-up steps mixed in
    assert not any("FLOPs" in n for n in run["notes"])


def test_a_log_that_stops_inside_the_ramp_up_is_one_line(tmp_path, capsys):
    path = _rampup_log(tmp_path, n=12)  # GBS 256 then 512: the run never reached its 1024
    with pytest.raises(MoeplanError) as exc:
        calibrate([path], gpu="h100")
    msg = str(exc.value)
    assert "\n" not in msg and "7 at a ramp-up batch size (GBS 256, 512; the run's is 1024)" in msg
    assert "run past the batch-size ramp-up (the log stops at GBS 512 of 1024)" in msg and "--warmup 0" not in msg
    out = tmp_path / "profile.yaml"
    assert cli.main(["calibrate", path, "--gpu", "h100", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "ramp-up" in err and not out.exists()


def test_set_global_batch_size_keeps_the_logged_lines(tmp_path):
    """--set global_batch_size changes the estimate (with a note), not which logged lines are steady."""
    run = calibrate([_rampup_log(tmp_path)], gpu="h100", sets=["global_batch_size=512"])["runs"][0]
    assert run["steady_state"]["iterations_used"] == list(range(14, 21)) and run["gbs"] == 512
    assert any("global_batch_size 1024" in n for n in run["notes"])
