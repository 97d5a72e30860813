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


ESTIMATE = ["estimate", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "64", "--ep", "16"]


def test_closed_pipe_is_quiet():
    for args in ([*PLAN, "--format", "yaml"], [*PLAN, "--format", "table"], ESTIMATE, [*ESTIMATE, "--json"]):
        proc = subprocess.Popen([sys.executable, "-m", "moeplan", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.close()  # the reader is gone before moeplan writes
        err = proc.stderr.read().decode()
        proc.wait(timeout=120)
        assert "Traceback" not in err and "BrokenPipe" not in err, err
        assert proc.returncode == 141, (proc.returncode, err)  # 128 + SIGPIPE, as a shell reports it


def test_reader_leaving_after_one_line_is_exit_141_not_1(monkeypatch):
    """`moeplan plan ... | head -1`: the reader takes one line and goes, and moeplan's next write raises
    BrokenPipeError. moeplan then stops with 141 (128 + SIGPIPE, what a shell reports for a filter the pipe
    ended), never 1 ("a valid question without an answer"), and points stdout at /dev/null so that the
    interpreter's flush at exit does not raise again. (In-process: whether a real reader leaves before
    moeplan's last write is a race; test_closed_pipe_is_quiet covers the real pipe.)"""
    import io
    import os

    read_end, write_end = os.pipe()

    class HeadOne(io.StringIO):
        def write(self, text):  # the reader keeps its first line, then the pipe is gone
            room = 0 if "\n" in self.getvalue() else text.find("\n") + 1 or len(text)
            super().write(text[:room])
            if room < len(text):
                raise BrokenPipeError(32, "Broken pipe")
            return len(text)

        def fileno(self):
            return write_end

    out = HeadOne()
    monkeypatch.setattr(sys, "stdout", out)
    try:
        code = main([*PLAN[:-1], "50", "--json"])
        assert code == 141
        assert out.getvalue() == "[\n"
        assert os.path.samestat(os.fstat(write_end), os.stat(os.devnull))  # the exit flush has somewhere to go
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_large_json_answer_into_a_closed_pipe_is_141_not_0():
    """`plan ... --json | head -1` with ~0.5 MB of JSON exited 0: the one large write returned after its first
    part with no error from the text layer (cli._write_stdout writes the bytes until none are left)."""
    proc = subprocess.Popen([sys.executable, "-m", "moeplan", "plan", "deepseek-v3", "--gpus", "1024", "--seq-len",
                             "128k", "--gbs", "1024", "--top", "50", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.read(2) == b"[\n"
    proc.stdout.close()  # the reader leaves after its first line
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert proc.returncode == 141 and "Traceback" not in err, (proc.returncode, err)
