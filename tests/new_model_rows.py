"""tests/data/new_model_rows.csv: the measured rows of the models issue 34 adds, as moeplan estimates (shared by
tests/validation/test_new_model_rows.py and benchmarks/calibrate.py, which lists them in docs/calibration.md)."""

from __future__ import annotations

from typing import Any

from moeplan import api

from .reference_runs import DATA, _read

TOLERANCE = 0.25  # the calibration check: within 25% of the measured tokens/s per GPU, or named


def rows() -> list[dict[str, str]]:
    return _read(DATA / "new_model_rows.csv")


def estimate_kwargs(r: dict[str, str]) -> dict[str, Any]:
    """The row's settings as api.estimate arguments (blanks: moeplan's defaults)."""
    kw: dict[str, Any] = dict(gpu=r["system"], gpus=int(r["gpus"]), seq_len=int(r["seq_len"]), gbs=int(r["gbs"]),
                              mbs=int(r["mbs"]), tp=int(r["tp"]), pp=int(r["pp"]), cp=int(r["cp"]), ep=int(r["ep"]),
                              precision=r["precision"], mtp_layers=int(r["mtp_layers"] or 0))
    rc = r["recompute"]
    kw["recompute"] = rc if rc.startswith("full") or not rc else f"selective:{rc.replace('+', ',')}"
    for key, arg in (("dispatcher", "dispatcher"), ("pipeline_layout", "pipeline_layout"),
                     ("cp_comm_type", "cp_comm_type"), ("mcore", "mcore_version")):
        if r[key]:
            kw[arg] = r[key]
    if r["cuda_graph_scopes"]:
        kw["cuda_graphs"] = r["cuda_graph_scopes"].replace("+", ",")
    if r["vpp"]:
        kw["vpp"] = int(r["vpp"])
    if r["offload_modules"]:
        kw["offload_modules"] = r["offload_modules"].replace("+", ",")
    if r["bf16_moments"]:
        if r["bf16_moments"] not in ("true", "false"):
            raise ValueError(f"tests/data/new_model_rows.csv {r['group']} {r['label']}: bf16_moments "
                             f"'{r['bf16_moments']}' (true, false or blank)")
        kw["bf16_moments"] = r["bf16_moments"] == "true"
    return kw


def ratio(r: dict[str, str], cal: Any = None) -> float | None:
    """moeplan's tokens/s per GPU over the measured, or None where the row has no model or no measured speed. A row
    with TFLOP/s alone (N06: Megatron-LM's recipe index) compares model TFLOP/s per GPU, the same ratio where
    moeplan counts the run's FLOPs as its source does (DeepSeek-V4: Bridge's dsv4_hybrid count, which gives the
    N12 rows' TFLOP/s over tokens/s to 0.1%: tests/validation/test_deepseek_v4.py). ``cal``: a calibration to
    estimate at (benchmarks/calibrate.py reports at the constants it just fitted); None: the shipped one."""
    if not r["model"] or not (r["measured_tokens_per_s_per_gpu"] or r["measured_tflops_per_gpu"]):
        return None
    est = api.estimate(r["model"], **estimate_kwargs(r), **({"cal": cal} if cal is not None else {}))
    if not r["measured_tokens_per_s_per_gpu"]:
        return float(est["tflops_per_gpu"]) / float(r["measured_tflops_per_gpu"])
    return float(est["tokens_per_s_per_gpu"]) / float(r["measured_tokens_per_s_per_gpu"])


def within(x: float | None) -> bool:
    return x is not None and abs(x - 1) <= TOLERANCE
