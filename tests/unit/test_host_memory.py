"""Optimizer CPU offload keeps the moved state in the host's RAM (Megatron-Core's HybridDeviceOptimizer): what a run
offloads must fit the hardware's host memory per GPU (``host_mem_bytes``). The field was read and listed, never
compared: a plan offloaded 129 GiB per GPU to a host with 1.9 GiB per GPU and said it fits."""

from __future__ import annotations

import json

import pytest

from moeplan import api
from moeplan.lint import checker
from moeplan.cli import main
from moeplan.megatron import export

TINY = "gpus:\n  tinyhost:\n    base: h100\n    host_mem_bytes: 2.0e+9\n"
SMALL = "gpus:\n  smallhost:\n    base: h100\n    host_mem_bytes: 1.0e+11\n"  # 93.1 GiB per GPU
PLAN = dict(gpus=32, seq_len=4096, gbs=256)
TOP = 6  # the plans both tests read: on the catalog H100 they include one that offloads more than the small host holds


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "hw.yaml"
    path.write_text(TINY)
    return str(path)


def test_the_catalog_h100_plans_offload_more_than_the_small_host_holds():
    """The case the fix is for: on the catalog H100 (256 GiB host per GPU) one of the first plans offloads 110 GiB
    (TP8 EP32 with all of its optimizer state; the others offload 83 GiB)."""
    plans = api.plan("qwen3-235b-a22b", gpu="h100", top=TOP, **PLAN)["plans"]
    assert any(p["host_peak_gib"] > 1.0e11 / 2**30 for p in plans)


def test_plans_keep_what_they_offload_within_the_host(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    plans = api.plan("qwen3-235b-a22b", gpu="smallhost", hardware_file=str(path), top=TOP, **PLAN)["plans"]
    assert plans
    for p in plans:
        assert p["fits"] and p["host_peak_gib"] <= p["host_capacity_gib"] == pytest.approx(1.0e11 / 2**30)


def test_a_host_too_small_for_any_offload_that_is_needed_fits_nothing(tiny):
    """DeepSeek-V3 on 64 H100 needs ~100+ GiB of offloaded state per GPU: with 1.9 GiB of host nothing fits (the plan
    offloaded 129 GiB there and said it fits)."""
    result = api.plan("deepseek-v3", gpu="tinyhost", hardware_file=tiny, top=3, gpus=64, seq_len=4096, gbs=512)
    assert result["plans"] == []


def test_an_estimate_past_the_host_does_not_fit_and_says_by_how_much(tiny, capsys):
    args = ["estimate", "qwen3-30b-a3b", "--gpu", "tinyhost", "--hardware", tiny, "--gpus", "16", "--seq-len", "4k",
            "--gbs", "1024", "--ep", "16", "--optimizer-offload", "1.0"]
    assert main([*args, "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert est["host_peak_gib"] > est["host_capacity_gib"] and est["fits"] is False
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "host capacity (does not fit:" in out


def test_check_reports_the_host_and_its_fix_clears_it(tiny, tmp_path):
    cfg, _ = api.build_config("qwen3-30b-a3b", gpu="tinyhost", hardware_file=tiny, gpus=16, seq_len=4096, gbs=1024,
                              ep=16, optimizer_offload=1.0)
    run = tmp_path / "r.yaml"
    run.write_text(export.to_yaml(cfg))
    found = [f for f in checker.check(str(run), hardware_file=tiny, gpu="tinyhost").findings if f.rule == "host-memory"]
    assert len(found) == 1 and found[0].severity == "error" and found[0].numbers["over_gib"] > 0
    assert found[0].fix
    fixed = cfg.with_(optimizer_offload=float(found[0].numbers["fixed_offload"]))
    run.write_text(export.to_yaml(fixed))
    assert not [f for f in checker.check(str(run), hardware_file=tiny, gpu="tinyhost").findings
                if f.rule == "host-memory"]


def test_the_host_holds_16_bytes_per_offloaded_parameter():
    """HybridDeviceOptimizer keeps a pinned fp32 copy of each offloaded parameter, its fp32 gradient buffer and the
    CPU Adam's two fp32 moments (hybrid_optimizer.py): 16 bytes per parameter, whatever the GPU saves (8 without the
    precision-aware optimizer, 12 with it)."""
    from moeplan.engine.memory import HOST_BYTES_PER_OFFLOADED_PARAM, offloaded_state_bytes_per_param

    for precision_aware in (False, True):
        est = api.estimate_run("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=1024, ep=16,
                               optimizer_offload=1.0, precision_aware_optimizer=precision_aware)
        off = api.estimate_run("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=1024, ep=16,
                               precision_aware_optimizer=precision_aware)
        saved = off.memory.peak.items["optimizer_states"] - est.memory.peak.items["optimizer_states"]
        params = saved / offloaded_state_bytes_per_param(est.config)
        assert est.memory.peak.host_bytes == pytest.approx(params * HOST_BYTES_PER_OFFLOADED_PARAM, rel=1e-9)
    assert HOST_BYTES_PER_OFFLOADED_PARAM == 4 + 4 + 8


def test_the_no_fit_line_says_when_the_host_held_the_offload_down(tiny, capsys):
    from moeplan.cli import main

    args = ["plan", "deepseek-v3", "--gpu", "tinyhost", "--hardware", tiny, "--gpus", "64", "--seq-len", "4k",
            "--gbs", "512"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "optimizer offload held to 0% by the host's 1.9 GiB per GPU" in err and err.count("\n") == 1


def test_no_offload_is_not_blamed_on_the_host(tiny, capsys):
    """With --no-offload the no-fit line said the host held the offload to 0% (review)."""
    from moeplan.cli import main

    args = ["plan", "deepseek-v3", "--gpu", "tinyhost", "--hardware", tiny, "--gpus", "64", "--seq-len", "4k",
            "--gbs", "512", "--no-offload"]
    assert main(args) == 1
    assert "held to" not in capsys.readouterr().err
