"""calibrate's table reads as it is labelled (issue 32): the err beside TFLOP/s is of TFLOP/s, and the long list of
constants not moved is folded (all of them, with reasons, in --json)."""

from __future__ import annotations

import json
import re

from moeplan import cli

from .test_calibrate import _qwen_log


def test_err_is_of_the_tflops_the_table_shows(tmp_path, capsys):
    log = _qwen_log(tmp_path)
    assert cli.main(["calibrate", str(log), "--gpu", "h100", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    want = run["measured_tflops_per_gpu"] / run["default_tflops_per_gpu"] - 1
    assert run["default_tflops_error"] == want
    assert (run["default_tflops_error"] > 0) != (run["default_error"] > 0)  # the step-time error's opposite sign
    assert cli.main(["calibrate", str(log), "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert "err = measured / estimate - 1 of the column before it" in " ".join(out.split())
    assert f"{want:+.1%}" in out


def test_not_moved_is_folded_in_text_and_whole_in_json(tmp_path, capsys):
    log = _qwen_log(tmp_path)
    assert cli.main(["calibrate", str(log), "--gpu", "h100", "--json"]) == 0
    names = json.loads(capsys.readouterr().out)["not_moved"]
    assert len(names) > 10
    assert cli.main(["calibrate", str(log), "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    line = " ".join(out[out.index("not moved"):].split())  # the console may wrap it
    assert re.fullmatch(rf"not moved \({len(names)}\): {re.escape(', '.join(names[:5]))}, and {len(names) - 5} more "
                        r"\(--json lists them with reasons\)", line), line
