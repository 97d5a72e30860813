"""Attention kernel tables measured on one H200 (tests/data/*_h200.csv), read as moeplan's attention model reads a
kernel: the tensor-core efficiency of each point (timing.fused_attention_efficiency inverted: time per score element
= matmul FLOPs / eff + attn_softmax_flops, in units of the GPU's BF16 peak), with the block-length factor
L / (L + attn_half_tokens) taken out (attn_causal_half_tokens for causal rows), so a point stands for the long-block rate the constants describe."""

from __future__ import annotations

import csv
from pathlib import Path

from moeplan.hardware import load_gpu
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as CAL

DATA = Path(__file__).resolve().parent / "data"
LONG = (8192, 16384)  # the long-block points the constants are read from
# the kernels' names in the tables (PyTorch SDPA backends) -> moeplan's kernel families
FAMILY = {"cudnn": "flash", "flash2": "flash2"}


def rows(name: str) -> list[dict[str, str]]:
    with (DATA / name).open(encoding="utf-8") as fh:
        return list(csv.DictReader(line for line in fh if not line.startswith("#")))


def tensor_core_eff(name: str) -> dict[tuple[str, str, int, int, str, int], float]:
    """(family, pass, d_qk, d_v, causal, seq_len) -> efficiency, for a table whose TFLOP/s count 2 x (d_qk + d_v)
    forward and 2 x (3 d_qk + 2 d_v) backward per score element (flash-attn's count for equal heads)."""
    peak = load_gpu("h200").peak("bf16")
    out = {}
    for r in rows(name):
        d_qk = int(r.get("d_qk") or r["head_dim"])
        d_v = int(r.get("d_v") or r["head_dim"])
        length = int(r["seq_len"])
        mm = 2 * (d_qk + d_v) if r["pass"] == "fwd" else 2 * (3 * d_qk + 2 * d_v)
        half = CAL.attn_causal_half_tokens if r.get("causal") == "1" else CAL.attn_half_tokens
        rate = float(r["tflops"]) * 1e12 / peak * (length + half) / length
        out[(FAMILY[r["backend"]], r["pass"], d_qk, d_v, r["causal"], length)] = mm / (mm / rate - CAL.attn_softmax_flops)
    return out
