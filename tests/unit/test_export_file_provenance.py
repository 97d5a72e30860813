"""Exports of a model read from a config.json, or of a GPU from a user hardware file, record the file's absolute
path in their '# moeplan:' comment, so `moeplan check` scores the same model on the same GPU with no flags
(before: the comment named the file's stem, and check silently scored the catalog model of that name)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from moeplan.lint import checker
from moeplan.cli import main
from moeplan.megatron.read import read_provenance

from ..conftest import MODELS_DIR

PLAN = ["--gpus", "16", "--seq-len", "4k", "--gbs", "64", "--top", "1"]
HARDWARE = """\
gpus:
  my-h100:
    base: h100
    scaleout_bw_bytes_per_s: 25e9
"""


def _qwen30_24_layers(path: Path) -> Path:
    """Qwen3-30B-A3B's config with 24 layers (48 in the catalog's): a model the catalog does not have."""
    data = json.loads((MODELS_DIR / "qwen3-30b-a3b.json").read_text())
    data["num_hidden_layers"] = 24
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def _plan(capsys, *args: str) -> float:
    assert main(["plan", *args, *PLAN, "--json"]) == 0
    tokens = json.loads(capsys.readouterr().out)[0]["tokens_per_s_per_gpu"]
    return tokens


@pytest.mark.parametrize("rel", ["mod/qwen3-30b-a3b.json", "my models/q30/config.json"])
@pytest.mark.parametrize("fmt", ["yaml", "overrides", "megatron-lm"])
def test_model_file_is_recorded_and_read_back(tmp_path, monkeypatch, capsys, rel, fmt):
    monkeypatch.chdir(tmp_path)
    model = _qwen30_24_layers(tmp_path / rel)
    want = _plan(capsys, rel)
    assert main(["plan", rel, *PLAN, "--format", fmt]) == 0
    text = capsys.readouterr().out
    head = text.splitlines()[0]
    assert f"model={shlex.quote(str(model.resolve()))} " in head, head
    assert read_provenance(text)["model"] == str(model.resolve())
    export = tmp_path / "out" / f"run.{fmt}"
    export.parent.mkdir()
    export.write_text(text)
    monkeypatch.chdir(export.parent)  # the recorded path is absolute: check works from anywhere
    result = checker.check(str(export))
    assert result.config.model.num_layers == 24 and result.errors == 0
    assert result.estimate is not None and result.estimate.time.tokens_per_s_per_gpu == pytest.approx(want)
    assert main(["check", str(export)]) == 0
    capsys.readouterr()


def test_missing_model_file_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    model = _qwen30_24_layers(tmp_path / "my models" / "q30" / "config.json")
    assert main(["plan", str(model), *PLAN, "--format", "yaml"]) == 0
    (tmp_path / "run.yaml").write_text(capsys.readouterr().out)
    model.rename(tmp_path / "q30.json")
    assert main(["check", "run.yaml"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert str(model) in captured.err and "--model" in captured.err
    assert main(["check", "run.yaml", "--model", "q30.json"]) == 0  # the flag still wins
    capsys.readouterr()


def test_catalog_exports_keep_the_name(capsys):
    assert main(["plan", "qwen3-30b-a3b", *PLAN, "--format", "yaml"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "# moeplan: model=qwen3-30b-a3b gpu=h100 gpus=16 mcore-version=0.16"


def test_user_hardware_file_is_recorded_and_read_back(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my hw").mkdir()
    hw = tmp_path / "my hw" / "cluster.yaml"
    hw.write_text(HARDWARE)
    want = _plan(capsys, "qwen3-30b-a3b", "--gpu", "my-h100", "--hardware", "my hw/cluster.yaml")
    assert main(["plan", "qwen3-30b-a3b", "--gpu", "my-h100", "--hardware", "my hw/cluster.yaml", *PLAN,
                 "--format", "yaml"]) == 0
    text = capsys.readouterr().out
    assert f"gpu=my-h100 hardware={shlex.quote(str(hw.resolve()))} " in text.splitlines()[0]
    (tmp_path / "out").mkdir()
    export = tmp_path / "out" / "run.yaml"
    export.write_text(text)
    monkeypatch.chdir(export.parent)
    result = checker.check(str(export))
    assert result.gpu.name == "my-h100" and result.gpu.scaleout_bw_bytes_per_s == 25e9 and result.errors == 0
    assert result.estimate is not None and result.estimate.time.tokens_per_s_per_gpu == pytest.approx(want)
    assert main(["check", str(export)]) == 0
    capsys.readouterr()
    # the file gone: one line naming it; --hardware or --gpu decide instead
    hw.rename(tmp_path / "cluster.yaml")
    assert main(["check", str(export)]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and str(hw) in captured.err and "--hardware" in captured.err
    assert main(["check", str(export), "--hardware", str(tmp_path / "cluster.yaml")]) == 0
    assert main(["check", str(export), "--gpu", "h100"]) == 0
    capsys.readouterr()


def test_gpu_flag_looks_in_the_recorded_hardware_file_first(tmp_path, monkeypatch, capsys):
    """`check FILE --gpu NAME` threw the comment's hardware file away: naming the file's own user GPU failed with
    "unknown GPU". Now --gpu is looked up in the recorded file, then the catalog; only --hardware replaces the file.
    With the file gone, a catalog GPU still checks, a GPU of the file's own gets one line naming the file."""
    monkeypatch.chdir(tmp_path)
    hw = tmp_path / "cluster.yaml"
    hw.write_text(HARDWARE + "  h100-200g:\n    base: h100\n    scaleout_bw_bytes_per_s: 12.5e9\n")
    assert main(["plan", "qwen3-30b-a3b", "--gpu", "my-h100", "--hardware", str(hw), *PLAN, "--format", "yaml"]) == 0
    export = tmp_path / "o.txt"
    export.write_text(capsys.readouterr().out)
    result = checker.check(str(export), gpu="h100-200g")
    assert result.gpu.name == "h100-200g" and result.gpu.scaleout_bw_bytes_per_s == 12.5e9
    assert checker.check(str(export), gpu="h100").gpu.scaleout_bw_bytes_per_s != 12.5e9  # the catalog's
    assert main(["check", str(export), "--gpu", "h100-200g"]) == 0
    capsys.readouterr()
    other = tmp_path / "other.yaml"
    other.write_text("gpus:\n  h100-200g:\n    base: h100\n    scaleout_bw_bytes_per_s: 50e9\n")
    assert checker.check(str(export), gpu="h100-200g", hardware_file=str(other)).gpu.scaleout_bw_bytes_per_s == 50e9
    hw.unlink()
    assert main(["check", str(export), "--gpu", "h100"]) == 0
    capsys.readouterr()
    assert main(["check", str(export), "--gpu", "h100-200g"]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and str(hw) in captured.err and "--hardware" in captured.err
    assert "h100-200g" in captured.err
