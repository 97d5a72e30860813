"""Dense models end to end (Hugging Face ``llama`` configs) and the two dense long-context CP sweeps of the shared
data (N40: Llama3-8B FP8 on B200, NeMo 25.04.rc2; N41: Llama2-7B FP8 on H100, NeMo 24.03.01), each point with the
table's layout (TP / PP / DP / CP) and GBS, compared as tokens/s: the table's TFLOP/s over NeMo's own FLOP count of
the time (full-square attention, tests/measured_variants.nemo_llama_flops_per_token)."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.models import load_model
from moeplan.engine.params import count_params
from tests.measured_variants import n_variants

POINT_TOL = 0.12  # each point within 12%
RANGE_TOL = 0.10  # each sweep's max / min within 10% of the measured one


def test_llama_configs_read_exactly():
    """Checkpoint parameter counts (Llama-2-7B 6,738,415,616; Meta-Llama-3-8B 8,030,261,248: the safetensors
    totals Hugging Face reports) from the llama reader: GQA (8 KV heads) and MHA, SwiGLU, untied embeddings."""
    assert count_params(load_model("llama2-7b")).total == 6_738_415_616
    assert count_params(load_model("llama3-8b")).total == 8_030_261_248
    spec = load_model("llama3-8b")
    assert spec.moe_layers == 0 and spec.num_experts == 0 and spec.first_attention.num_kv_heads == 8


def test_dense_model_every_path():
    """Estimate, memory and plan run on an experts-free stack: EP 1, no router, no expert parallel traffic."""
    e = api.estimate("llama3-8b", gpu="b200", gpus=16, seq_len=65536, gbs=16, tp=1, cp=4, precision="fp8")
    assert e["fits"] and e["tflops_per_gpu"] > 0
    assert e["time_breakdown_s"].get("ep_comm", 0.0) == 0.0
    plans = api.plan("llama2-7b", gpu="h100", gpus=64, seq_len=131072, gbs=32, top=3)["plans"]
    assert plans and all(p["parallel"]["ep"] == 1 for p in plans)


def _sweep(group: str) -> list[tuple[str, float, float]]:
    out = []
    for v in n_variants():
        if v.group == group:
            est = api.estimate(v.model, **v.kwargs)["tokens_per_s_per_gpu"]
            out.append((v.label, float(v.tflops) * 1e12 / float(v.extra["fpt"]), est))
    return out


def _check(group: str, shape_only: bool = False) -> None:
    rows = _sweep(group)
    assert len(rows) >= 8
    misses = [] if shape_only else [f"{lab}: measured {m:,.0f} tokens/s, moeplan {e:,.0f} ({e / m - 1:+.0%})"
                                    for lab, m, e in rows if abs(e / m - 1) > POINT_TOL]
    # the sweep's shape: max/min of TFLOP/s in the source's count = of tokens/s x its FLOPs per token
    fl = [v.extra["fpt"] for v in n_variants() if v.group == group]
    meas = [m * f for (_, m, _), f in zip(rows, fl)]
    est = [e * f for (_, _, e), f in zip(rows, fl)]
    r_m, r_e = max(meas) / min(meas), max(est) / min(est)
    if abs(r_e / r_m - 1) > RANGE_TOL:
        misses.append(f"max/min measured {r_m:.3f}, moeplan {r_e:.3f}")
    print("\n".join(misses))
    assert not misses, "\n".join(misses)


def test_n40_llama3_8b_b200_cp_sweep():
    _check("N40")


def test_n40_sweep_shape():
    """The B200 sweep's max / min (CP and attention cost as the sequence grows, 8K -> 1M) within 10% of measured."""
    _check("N40", shape_only=True)


@pytest.mark.xfail(strict=True, reason="N41 ran NeMo 24.03.01 (TE 1.x, before FlashAttention-3 and TE's cuDNN-first "
                   "choice on Hopper) on H100: its attention-bound long points measure ~268 TFLOP/s of causal attention "
                   "(536 in NeMo's full-square count at 1M), what FlashAttention-2 reaches on H100 (~335 forward, ~300 "
                   "backward: 0.27 of peak over fwd + bwd), where moeplan's Hopper rates are FA3 / cuDNN 9 class (0.37): "
                   "-4% at 4K rising to ~+35% at 1M; no software-era Hopper attention rate is modelled")
def test_n41_llama2_7b_h100_cp_sweep():
    _check("N41")
