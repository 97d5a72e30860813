"""`check --mcore` where megatron-core cannot be imported: a missing optional extra is bad input for the option
that asks for it, as `--plot` without matplotlib (one line with the install hint, exit 2, nothing on stdout), not an
error finding about the config (it exited 1, as if the file were wrong)."""

from __future__ import annotations

import sys

import pytest

from moeplan.lint import checker
from moeplan.cli import main
from moeplan.base.errors import MoeplanError


@pytest.fixture
def no_mcore(monkeypatch):
    monkeypatch.setitem(sys.modules, "megatron.core", None)  # `from megatron.core import ...` raises ImportError


def _export(capsys, tmp_path):
    assert main(["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "64", "--top", "1",
                 "--format", "yaml"]) == 0
    path = tmp_path / "run.yaml"
    path.write_text(capsys.readouterr().out)
    return path


def test_check_mcore_without_megatron_core_is_refused_up_front(capsys, tmp_path, no_mcore):
    path = _export(capsys, tmp_path)
    assert main(["check", str(path), "--mcore"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert "megatron-core" in captured.err and "pip install 'moeplan[mcore]'" in captured.err
    with pytest.raises(MoeplanError, match="megatron-core"):
        checker.check(str(path), run_mcore=True)
    assert main(["check", str(path)]) == 0  # without --mcore nothing needs it
    capsys.readouterr()


def test_check_mcore_without_torch_says_to_install_torch(monkeypatch, capsys, tmp_path):
    path = _export(capsys, tmp_path)
    import builtins

    real = builtins.__import__

    def fake(name, *args, **kwargs):  # megatron.core's first import is torch
        if name == "megatron.core":
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(MoeplanError, match="pip install torch"):
        checker.check(str(path), run_mcore=True)
