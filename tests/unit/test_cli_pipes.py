"""moeplan in pipelines (issue 11, "readable where people read it"): a run file from standard input
(`check -`), and a reader that closes the pipe early gets no traceback."""

from __future__ import annotations

import subprocess
import sys

from moeplan.cli import main

PLAN = ["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "64", "--top", "1"]


def test_check_reads_standard_input(monkeypatch, capsys, tmp_path):
    import io

    assert main([*PLAN, "--format", "yaml"]) == 0
    text = capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    code = main(["check", "-", "--json"])
    out = capsys.readouterr().out
    assert code == 0 and '"errors": 0' in out
    # the same answer as from a file
    path = tmp_path / "run.yaml"
    path.write_text(text)
    assert main(["check", str(path), "--json"]) == 0
    assert capsys.readouterr().out.replace(str(path), "<stdin>") == out


def test_bad_standard_input_is_one_line(monkeypatch, capsys):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("model: [\n"))
    code = main(["check", "-", "--model", "qwen3-30b-a3b", "--gpus", "8"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.startswith("moeplan: error: <stdin>:") and err.count("\n") == 1


def test_closed_pipe_is_quiet():
    for fmt in ("yaml", "table"):
        proc = subprocess.Popen([sys.executable, "-m", "moeplan", *PLAN, "--format", fmt],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.close()  # the reader is gone before moeplan writes
        err = proc.stderr.read().decode()
        proc.wait(timeout=120)
        assert "Traceback" not in err and "BrokenPipe" not in err, err
        assert proc.returncode in (0, 1)
