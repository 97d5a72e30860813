"""`check --mcore` on moeplan's own clean exports: where Megatron-Core's TransformerConfig checks cannot run
faithfully here (Transformer Engine missing where a check probes its version; another Megatron-Core release
installed than the file targets) the check says so as a warning, not as an error about the config."""

from __future__ import annotations

import json
import warnings

import pytest

from moeplan.cli import main

pytest.importorskip("torch", reason="Megatron-Core validation needs torch (pip install torch)")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed" on CPU
    pytest.importorskip("megatron.core", reason="Megatron-Core validation needs megatron-core (pip install 'moeplan[mcore]')")

from moeplan.megatron.mcore import installed_mcore_version  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")


def _te_installed() -> bool:
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        return False
    return True


def _export_and_check(capsys, tmp_path, *plan_args: str) -> tuple[int, dict]:
    assert main(["plan", *plan_args, "--top", "1", "--format", "yaml"]) == 0
    path = tmp_path / "run.yaml"
    path.write_text(capsys.readouterr().out)
    code = main(["check", str(path), "--mcore", "--json"])
    out, err = capsys.readouterr()
    assert err == "", err
    return code, json.loads(out)


@pytest.mark.skipif(_te_installed(), reason="Transformer Engine is installed: its version probes answer")
@pytest.mark.parametrize("plan_args", [
    ("qwen3-235b-a22b", "--gpu", "gb200", "--gpus", "256", "--seq-len", "4k", "--gbs", "2048"),  # delay_wgrad + graphs
    ("deepseek-v3", "--gpu", "h100", "--gpus", "256", "--seq-len", "4k", "--gbs", "512", "--precision", "fp8-cs"),
])
def test_te_probe_without_te_is_a_warning(capsys, tmp_path, plan_args):
    if installed_mcore_version() != "0.16":
        pytest.skip("the exports target Megatron-Core 0.16 (the default)")
    code, data = _export_and_check(capsys, tmp_path, *plan_args)
    assert code == 0 and data["errors"] == 0, data["findings"]
    (f,) = [f for f in data["findings"] if f["rule"].startswith("mcore-not")]
    assert f["severity"] == "warning" and f["rule"] == "mcore-not-run"
    assert "Transformer Engine" in f["message"] and "not installed" in f["message"] and "transformer_config.py:" in f["message"]
    assert "rejects" not in f["message"] and "\n" not in f["message"]


def test_other_target_release_is_a_warning(capsys, tmp_path):
    installed = installed_mcore_version()
    if installed == "0.18":
        pytest.skip("Megatron-Core 0.18 is installed: the file's target")
    code, data = _export_and_check(capsys, tmp_path, "qwen3-next-80b-a3b", "--gpus", "64", "--seq-len", "64k",
                                   "--gbs", "64", "--mcore-version", "0.18", "--cp", "2")
    assert code == 0 and data["errors"] == 0, data["findings"]
    (f,) = [f for f in data["findings"] if f["rule"] == "mcore-not-run"]
    assert f["severity"] == "warning" and "0.18" in f["message"] and installed in f["message"]
    assert "context parallel" not in f["message"]
