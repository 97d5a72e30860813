"""Output a person reads (issue 32): stdout that cannot be written is one line and exit code 2; piped tables follow
the terminal (COLUMNS, else stderr's or the controlling terminal's width, else 80); --help wraps at the terminal
width; --version."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from moeplan.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PLAN = ["plan", "deepseek-v3", "--gpus", "1024", "--seq-len", "128k", "--gbs", "1024", "--top", "3"]
# one command per table-printing subcommand, each at a size that prints its widest table
TABLES = {
    "plan": PLAN,
    "sweep": ["sweep", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k,16k,64k", "--gbs-tokens", "1m"],
    "estimate": ["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4k", "--gbs", "1024",
                 "--ep", "16"],
    "check": ["check", str(EXAMPLES / "deepseek_v3_128k_h100.yaml"), "--model", "deepseek-v3", "--gpus", "1024"],
    "explain": ["explain", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k,16k", "--gbs-tokens", "1m"],
    "params": ["params", "deepseek-v3", "--seq-len", "128k"],
    "models": ["models"],
    "hardware": ["hardware"],
}


def _run(argv: list[str], *, columns: int | None = None, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
         timeout: float = 120) -> subprocess.CompletedProcess:
    """moeplan in a new session (no controlling terminal), COLUMNS as given."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "moeplan", *argv], stdout=stdout, stderr=stderr, env=env,
                          stdin=subprocess.DEVNULL, start_new_session=True, timeout=timeout)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["models"], ["models", "--json"], ["--help"],
                                  ["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "256"],
                                  ["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "256", "--json"],
                                  ["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "256",
                                   "--format", "yaml"]])
def test_stdout_that_cannot_be_written_is_one_line_exit_2(argv):
    """`> /dev/full` was a 22-line OSError traceback and exit 1 (--help: exit 0, nothing written); now the line a
    file-output flag prints for an unwritable file ('cannot write FILE: REASON'), exit code 2."""
    with open("/dev/full", "w") as full:
        proc = _run(argv, stdout=full)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert err == "moeplan: error: cannot write standard output: No space left on device\n"


@pytest.mark.parametrize("name", sorted(TABLES))
def test_piped_with_no_columns_and_no_terminal_is_80_columns(name):
    """`moeplan plan ... | head` with no terminal to measure was 160 columns wide (every table): now 80."""
    proc = _run(TABLES[name])
    out = proc.stdout.decode()
    assert proc.returncode in (0, 1), proc.stderr.decode()
    lines = out.splitlines()
    assert lines and "…" not in out
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)


def test_calibrate_at_80_columns_breaks_no_word():
    """calibrate's run table at 80 columns folded every cell ('stea/dy', 'exam/ples/qwe...'): now the log, run and
    steady state are a numbered line above a table of numbers, no word broken; wide terminals keep one table."""
    log = EXAMPLES / "qwen3_30b_a3b_16xh100_megatron_lm.log"
    proc = _run(["calibrate", str(log), "--gpu", "h100"])
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()
    assert max(len(line) for line in out.splitlines()) <= 80
    words = out.split()
    assert str(log) + ":" in words and "hybridep" in words and "s/step" in words
    assert {"TFLOP/s/GPU", "calibrated", "estimate"} <= set(words)
    wide = _run(["calibrate", str(log), "--gpu", "h100"], columns=220).stdout.decode()
    assert "steady s/step (spread)" in wide


def test_piped_output_takes_the_width_of_the_terminal_on_stderr():
    """stdout piped, stderr a 100-column terminal (`moeplan plan ... | head` in a terminal): the tables take
    100 columns, not 160."""
    leader, follower = pty.openpty()
    try:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
        proc = _run(PLAN, stderr=follower)
    finally:
        os.close(follower)
        os.close(leader)
    lines = proc.stdout.decode().splitlines()
    assert proc.returncode == 0
    assert 80 < max(len(line) for line in lines) <= 100


def test_columns_wins_over_the_terminal_and_json_is_untouched():
    assert max(len(line) for line in _run(PLAN, columns=200).stdout.decode().splitlines()) > 120
    assert _run([*PLAN, "--json"], columns=60).stdout == _run([*PLAN, "--json"], columns=300).stdout


def _subparsers(parser):
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        for name, sub in action.choices.items():
            yield name, sub
            for inner, subsub in _subparsers(sub):
                yield f"{name} {inner}", subsub


def test_every_help_fits_80_columns(monkeypatch):
    """explain's and calibrate's 600-800-character descriptions were one line each (RawDescriptionHelpFormatter);
    every command's --help now wraps at the terminal width, examples kept as commands (continued with a
    backslash)."""
    monkeypatch.setenv("COLUMNS", "80")
    parser = build_parser()
    helps = {"moeplan": parser.format_help(), **{name: sub.format_help() for name, sub in _subparsers(parser)}}
    assert {"explain", "calibrate", "plan", "skill install"} <= set(helps)
    for name, text in helps.items():
        long = [line for line in text.splitlines() if len(line) > 80]
        assert not long, (name, long)
    # an example broken over lines still pastes as one command, each flag with its value
    plan = helps["plan"]
    assert "  moeplan plan qwen3-235b-a22b --gpu gb200 --gpus 256 --seq-len 128k \\\n    --gbs 256 --format overrides" in plan
    # prose is refilled, not cut: the whole description is there
    assert "The remedy is searched as run B runs" in " ".join(helps["explain"].split())


def test_version_is_the_installed_distributions():
    from importlib.metadata import version

    proc = _run(["--version"])
    assert proc.returncode == 0 and proc.stderr == b""
    assert proc.stdout.decode() == f"moeplan {version('moeplan')}\n"
