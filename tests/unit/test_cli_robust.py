"""CLI robustness: --help on every command, safe output files, refused ambiguous input (issue 11)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from moeplan.cli import build_parser, main


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _commands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(sub.choices)


def test_every_command_has_a_help_page(capsys):
    commands = _commands()
    assert {"plan", "check", "estimate", "sweep", "explain", "report", "params", "models", "hardware"} <= set(commands)
    for argv in ([], *([c] for c in commands)):
        for flag in ("--help", "-h"):
            with pytest.raises(SystemExit) as exc:
                main([*argv, flag])
            out, err = capsys.readouterr()
            assert exc.value.code == 0, (argv, err)
            assert "usage: moeplan" in out and "Traceback" not in err


def test_check_help_mentions_headroom_percent(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out, _ = capsys.readouterr()
    assert "10%" in out


EST = ["estimate", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "64", "--ep", "16"]


def _no_temp_files(d: Path) -> None:
    assert not [p for p in d.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory", "device", "missing-dir", "readonly-dir"])
def test_plot_refuses_non_regular_targets(tmp_path, capsys, kind):
    pytest.importorskip("matplotlib")
    target = tmp_path / "out.png"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "symlink":
        (tmp_path / "real.png").write_bytes(b"keep")
        target.symlink_to(tmp_path / "real.png")
    elif kind == "directory":
        target.mkdir()
    elif kind == "device":
        target = Path("/dev/null")
    elif kind == "missing-dir":
        target = tmp_path / "nope" / "out.png"
    elif kind == "readonly-dir":
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
        target = ro / "out.png"
        if os.access(ro, os.W_OK):  # root ignores permissions
            pytest.skip("running as root: directory permissions are not enforced")
    code, out, err = run_cli(capsys, *EST, "--plot", str(target))
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("moeplan: error: cannot write"), err
    assert out == ""  # nothing printed for a run whose file cannot be written
    if kind == "symlink":
        assert target.is_symlink() and (tmp_path / "real.png").read_bytes() == b"keep"
    if kind == "fifo":
        assert stat.S_ISFIFO(os.lstat(target).st_mode)
    _no_temp_files(tmp_path)


def test_plot_writes_regular_file_and_says_so(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    target = tmp_path / "out.png"
    target.write_bytes(b"old")
    code, out, err = run_cli(capsys, *EST, "--plot", str(target))
    assert code == 0, err
    assert f"wrote {target}" in out
    assert target.read_bytes()[:4] == b"\x89PNG"
    _no_temp_files(tmp_path)
    code, out, err = run_cli(capsys, *EST, "--plot", str(tmp_path / "j.svg"), "--json")
    assert code == 0 and json.loads(out)["gpus"] == 16 and f"wrote {tmp_path / 'j.svg'}" in err


def test_report_refuses_a_directory_before_planning(tmp_path, capsys):
    code, out, err = run_cli(capsys, "report", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "64",
                             "--html", str(tmp_path))
    assert code == 2 and "is a directory" in err and err.count("\n") == 1


def test_sweep_plot_says_wrote(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    target = tmp_path / "s.png"
    code, out, err = run_cli(capsys, "sweep", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k,8k", "--gbs-tokens",
                             "256k", "--hold", "--ep", "16", "--plot", str(target))
    assert code == 0, err
    assert f"wrote {target}" in out and target.stat().st_size > 1000
    _no_temp_files(tmp_path)


def test_write_failure_leaves_no_temp_file(tmp_path, monkeypatch):
    from moeplan.base import outfile
    from moeplan.base.errors import MoeplanError

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outfile.os, "replace", boom)
    with pytest.raises(MoeplanError, match="No space left"):
        outfile.write_bytes(tmp_path / "x.html", b"data")
    assert list(tmp_path.iterdir()) == []


def test_sweep_refuses_empty_length_item(capsys):
    code, _, err = run_cli(capsys, "sweep", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "16k,,32k",
                           "--gbs-tokens", "4m")
    assert code == 2 and "empty item" in err and err.count("\n") == 1


def test_sweep_refuses_gbs_tokens_that_do_not_divide(capsys):
    code, _, err = run_cli(capsys, "sweep", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "16k,24k",
                           "--gbs-tokens", "1m", "--hold", "--ep", "16")
    assert code == 2 and err.count("\n") == 1
    # the suggestions hold a whole number of sequences at both lengths (multiples of 49,152)
    assert "not a whole number of 24,576-token sequences" in err and "use 1,032,192 or 1,081,344 at every length" in err


def test_plan_json_with_format_refused(capsys):
    code, out, err = run_cli(capsys, "plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "64",
                             "--json", "--format", "yaml")
    assert code == 2 and out == "" and "exclude each other" in err and err.count("\n") == 1


def test_help_crash_fixed_in_a_subprocess():
    r = subprocess.run([sys.executable, "-m", "moeplan", "check", "-h"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr


@pytest.mark.parametrize("argv, needle", [
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--seq-len", "4096", "--gbs", "64",
      "--plot", "SAME.svg", "--trace", "SAME.svg"], "name the same file"),
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4096", "--gbs", "64",
      "--trace", "SAME.json", "--save-strategy", "SAME.json"], "--trace and --save-strategy name the same file"),
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--seq-len", "4096", "--gbs", "64",
      "--trace", "trace.png"], "name the file *.json"),
])
def test_outputs_that_would_overwrite_or_mislabel_are_refused(tmp_path, capsys, argv, needle):
    argv = [str(tmp_path / a) if a.startswith(("SAME", "trace.")) else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())  # nothing written


def test_an_option_of_one_command_is_not_silently_another_option_elsewhere(capsys):
    """argparse takes unique prefixes: `sweep --gbs 8192` (sequences, as plan and estimate read --gbs) would be
    --gbs-tokens 8192 and plan 8,192 tokens per batch. An option name of one command must not resolve, as a
    prefix, to a different option of another; sweep and explain refuse --gbs with the option they take."""
    import argparse

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    opts = {name: {o for a in sp._actions for o in a.option_strings if o.startswith("--")}
            for name, sp in sub.choices.items()}
    everywhere = set().union(*opts.values())
    # check's --mcore flag is a prefix of --mcore-version elsewhere, which needs a value: a loud error, not a guess
    loud = {"--mcore"}
    silent = sorted((name, o, hits[0]) for name, own in opts.items() for o in everywhere - own - loud
                    if len(hits := [x for x in own if x.startswith(o)]) == 1)
    assert not silent, silent
    for cmd in ("sweep", "explain"):
        code, out, err = run_cli(capsys, cmd, "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k,8k", "--gbs", "8192")
        assert code == 2 and out == "" and "--gbs-tokens" in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1


def test_json_is_standard_json_or_a_one_line_error(capsys):
    """Python's json writes Infinity / NaN, which jq and JSON.parse refuse: an input that drives an estimate
    out of range (a 1e300 capacity factor) is a one-line error naming the key, exit 2, nothing on stdout."""
    argv = ("estimate", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "16", "--ep", "16", "--json")
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    json.loads(out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    code, out, err = run_cli(capsys, *argv, "--capacity-factor", "1e300")
    assert code == 2 and out == "" and "not finite at 'memory_gib." in err and len(err.strip().splitlines()) == 1


def test_trace_is_standard_json_or_no_file(capsys, tmp_path):
    """--trace writes what Perfetto can open: an out-of-range step (Infinity / NaN) is a one-line error and
    no file, not a trace with Infinity in it."""
    trace = tmp_path / "t.json"
    argv = ("estimate", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "16", "--ep", "16",
            "--trace", str(trace))
    code, _, err = run_cli(capsys, *argv, "--capacity-factor", "1e300")
    assert code == 2 and not trace.exists() and "no trace" in err and len(err.strip().splitlines()) == 1
    assert run_cli(capsys, *argv)[0] == 0
    json.loads(trace.read_text(), parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))


def test_every_command_help_has_a_runnable_looking_example(capsys):
    """--help teaches: each command's page ends with at least one `moeplan COMMAND ...` example line."""
    for command in _commands():
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out, _ = capsys.readouterr()
        tail = out.split("example", 1)[-1] if "example" in out else ""
        assert f"moeplan {command}" in tail, f"`moeplan {command} --help` shows no example"


def test_every_option_says_what_it_does():
    """No option's --help line is bare (a flag name and its choices only); suppressed ones are exempt."""
    import argparse

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bare = [(name, a.option_strings[-1]) for name, sp in sub.choices.items() for a in sp._actions
            if a.option_strings and not a.help]
    assert not bare, bare


def test_an_output_never_overwrites_an_input(tmp_path, capsys):
    """--save-strategy over the --hardware or --calibration file replaced it (exit 0); every output is checked
    against the files the command reads, as two outputs are against each other. Nothing is written."""
    hw = tmp_path / "hw.yaml"
    text = "gpus:\n  hbw:\n    base: h100\n"
    hw.write_text(text)
    args = ["plan", "qwen3-30b-a3b", "--gpu", "hbw", "--hardware", str(hw), "--gpus", "16", "--seq-len", "4k",
            "--gbs", "1024"]
    assert main([*args, "--save-strategy", str(hw)]) == 2
    assert "--hardware (an input) and --save-strategy name the same file" in capsys.readouterr().err
    assert hw.read_text() == text
    run = tmp_path / "run.json"
    run.write_text("{}")
    assert main(["check", str(run), "--trace", str(run)]) == 2
    assert "CONFIG (an input) and --trace" in capsys.readouterr().err and run.read_text() == "{}"
