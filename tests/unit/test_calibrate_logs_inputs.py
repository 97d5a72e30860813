"""`moeplan calibrate`'s inputs: ``--set``/``sets`` values, gzip-compressed logs, standard input, a log given
twice, and ``--out`` naming an input. Bad input is one line, exit code 2, and nothing written."""

from __future__ import annotations

import gzip
import io
import json
import os
import sys

import pytest

from moeplan import api, cli
from moeplan.calibrate.fit import calibrate
from moeplan.base.errors import MoeplanError

from ..log_fixtures import QWEN3_30B_EP16, mlm_log, step_times

STEP_S, TFLOPS, PEAK_GIB = 20.14729, 299.352, 62.166


def _text():
    return mlm_log(QWEN3_30B_EP16, step_times(STEP_S, 20), tflops_steady=TFLOPS, peak_alloc_gib=PEAK_GIB,
                   peak_reserved_gib=66.0)


def _log(tmp_path, name="run.log"):
    path = tmp_path / name
    path.write_text(_text())
    return path


def _one_line_exit_2(capsys, argv):
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("moeplan: error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


# ------------------------------------------------------------------------------------------ --set / sets


@pytest.mark.parametrize("value", ["abc", "true", "[1.2]"])
def test_set_moe_imbalance_not_a_number_is_one_line(tmp_path, capsys, value):
    argv = ["calibrate", str(_log(tmp_path)), "--gpu", "h100", "--set", f"moe_imbalance={value}"]
    err = _one_line_exit_2(capsys, argv)
    assert "--set moe_imbalance: expected a number >= 1.0" in err


def test_set_moe_imbalance_number_applies(tmp_path):
    path = str(_log(tmp_path))
    base = calibrate([path], gpu="h100")["runs"][0]["default_step_time_s"]
    assert calibrate([path], gpu="h100", sets=["moe_imbalance=1.5"])["runs"][0]["default_step_time_s"] > base


def test_api_sets_takes_a_mapping_or_key_value_strings(tmp_path):
    path = _log(tmp_path)
    as_list = api.calibrate(path, gpu="h100", sets=["gpus=16", "seq_length=4096"])
    as_dict = api.calibrate(path, gpu="h100", sets={"gpus": 16, "seq_len": "4096"})  # a str value reads as --set's
    assert as_dict["runs"][0]["gpus"] == as_list["runs"][0]["gpus"] == 16
    assert as_dict["runs"][0]["measured_step_time_s"] == as_list["runs"][0]["measured_step_time_s"]
    assert api.calibrate(path, gpu="h100", sets=("gpus=16",))["runs"][0]["gpus"] == 16


@pytest.mark.parametrize("sets, words", [
    ("gpus=16", "sets must be a mapping {key: value} or a list of 'key=value' strings, got 'gpus=16' (str)"),
    (16, "sets must be a mapping {key: value} or a list of 'key=value' strings, got 16 (int)"),
    ([("gpus", 16)], "each of sets must be a 'key=value' string, got ('gpus', 16) (tuple)"),
    ({16: "gpus"}, "sets: each key must be a setting name (a str), got 16 (int)"),
    ({"moe_imbalance": "abc"}, "sets['moe_imbalance']: expected a number >= 1.0"),
    ({"no_such_field": 1}, "sets['no_such_field']: not a Megatron-Core field"),
])
def test_api_sets_of_another_shape_is_one_line_naming_sets(tmp_path, sets, words):
    with pytest.raises(MoeplanError) as exc:
        api.calibrate(_log(tmp_path), gpu="h100", sets=sets)
    assert words in str(exc.value) and "\n" not in str(exc.value) and "--set 'g'" not in str(exc.value)


# ------------------------------------------------------------------------------------------ reading logs


def test_gzip_log_reads_as_the_plain_one(tmp_path):
    plain = calibrate([str(_log(tmp_path))], gpu="h100")["runs"][0]
    packed = tmp_path / "run.log.gz"
    packed.write_bytes(gzip.compress(_text().encode()))
    unnamed = tmp_path / "archived"  # told by its first bytes, not its name
    unnamed.write_bytes(packed.read_bytes())
    for path in (packed, unnamed):
        run = calibrate([str(path)], gpu="h100")["runs"][0]
        assert run["measured_step_time_s"] == plain["measured_step_time_s"]
        assert run["measured_peak_allocated_gib"] == plain["measured_peak_allocated_gib"]


def test_gzip_archive_cut_short_keeps_what_it_holds(tmp_path):
    data = gzip.compress(_text().encode())
    path = tmp_path / "cut.log.gz"
    path.write_bytes(data[:-12])  # the copy stopped before its last block and trailer (CRC, size)
    run = calibrate([str(path)], gpu="h100")["runs"][0]
    assert run["measured_step_time_s"] == pytest.approx(STEP_S, rel=0.01)
    assert 10 <= len(run["steady_state"]["iterations_used"]) <= 15


def test_corrupt_gzip_is_one_line(tmp_path, capsys):
    path = tmp_path / "bad.log.gz"
    path.write_bytes(b"\x1f\x8b" + b"\x00" * 64)
    err = _one_line_exit_2(capsys, ["calibrate", str(path), "--gpu", "h100"])
    assert "gzip-compressed log is corrupt" in err


@pytest.mark.parametrize("compressed", [False, True])
def test_dash_reads_the_log_from_standard_input(tmp_path, monkeypatch, capsys, compressed):
    data = _text().encode()
    stdin = io.TextIOWrapper(io.BytesIO(gzip.compress(data) if compressed else data), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    assert cli.main(["calibrate", "-", "--gpu", "h100", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    assert run["log"] == "<stdin>"
    plain = calibrate([str(_log(tmp_path))], gpu="h100")["runs"][0]
    assert run["measured_step_time_s"] == plain["measured_step_time_s"]


def test_dash_reads_a_text_stream(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(_text()))  # no .buffer (as test harnesses replace it)
    assert calibrate(["-"], gpu="h100")["runs"][0]["log"] == "<stdin>"


@pytest.mark.parametrize("second", ["same", "spelled", "hard link", "dash"])
def test_the_same_log_twice_is_one_line(tmp_path, capsys, second):
    path = _log(tmp_path)
    other = {"same": str(path), "spelled": str(tmp_path / "." / "run.log"), "hard link": str(tmp_path / "link.log"),
             "dash": "-"}[second]
    if second == "hard link":
        os.link(path, other)
    first = "-" if second == "dash" else str(path)
    err = _one_line_exit_2(capsys, ["calibrate", first, other, "--gpu", "h100"])
    assert f"{other} is the same log as {first}: give each log once" in err


# ------------------------------------------------------------------------------------------ --out


def test_out_naming_the_log_is_refused_and_the_log_kept(tmp_path, capsys):
    """--out goes through the check every command's outputs go through (cli._distinct_outputs): a log, another
    spelling of it, a hard link or a symbolic link to it is refused before anything is read or written."""
    path = _log(tmp_path)
    before = path.read_bytes()
    (tmp_path / "hard.log").hardlink_to(path)
    (tmp_path / "soft.log").symlink_to(path)
    for out in (str(path), str(tmp_path / "." / "run.log"), str(tmp_path / "hard.log"), str(tmp_path / "soft.log")):
        err = _one_line_exit_2(capsys, ["calibrate", str(path), "--gpu", "h100", "--out", out])
        assert f"LOG {path} (an input) and --out name the same file {out}" in err
        assert path.read_bytes() == before


def test_out_naming_the_second_log_names_it(tmp_path, capsys):
    first, second = _log(tmp_path), _log(tmp_path, "second.log")
    err = _one_line_exit_2(capsys, ["calibrate", str(first), str(second), "--gpu", "h100", "--out", str(second)])
    assert f"LOG {second} (an input) and --out name the same file" in err


def test_out_naming_the_hardware_file_is_refused(tmp_path, capsys):
    hw = tmp_path / "hw.yaml"
    hw.write_text("gpus:\n  myh100:\n    base: h100\n")
    before = hw.read_bytes()
    (tmp_path / "hw2.yaml").hardlink_to(hw)
    for out in (hw, tmp_path / "hw2.yaml"):
        err = _one_line_exit_2(capsys, ["calibrate", str(_log(tmp_path)), "--gpu", "myh100", "--hardware", str(hw),
                                        "--out", str(out)])
        assert f"--hardware (an input) and --out name the same file {out}" in err and hw.read_bytes() == before


def test_out_naming_the_model_config_is_refused(tmp_path, capsys):
    """calibrate --model config.json is an input too, as MODEL is for the other commands."""
    config = tmp_path / "config.json"
    config.write_text("{}")
    err = _one_line_exit_2(capsys, ["calibrate", str(_log(tmp_path)), "--gpu", "h100", "--model", str(config),
                                    "--out", str(config)])
    assert "MODEL (an input) and --out name the same file" in err and config.read_text() == "{}"


def test_out_not_writable_is_refused_before_the_logs_are_read(tmp_path, capsys):
    err = _one_line_exit_2(capsys, ["calibrate", str(tmp_path / "missing.log"), "--gpu", "h100", "--out",
                                    str(tmp_path / "no-such-dir" / "p.yaml")])
    assert "directory" in err and "does not exist" in err


def test_out_elsewhere_is_written(tmp_path, capsys):
    out = tmp_path / "profile.yaml"
    assert cli.main(["calibrate", str(_log(tmp_path)), "--gpu", "h100", "--out", str(out)]) == 0
    assert out.read_text().startswith("# moeplan calibration profile")
