"""Take the DeepSeek-V3 long-context CP series (G14) apart, point by point and per CP communication type.

G14 (../shared/reference/measured_variants.csv; guidance.md's rounded CP-scaling table: DeepSeek-V3, FP8 blockwise,
256 H100 to 128K and 512 at 256K, TP1 PP8 VPP4 EP32, CP = seq / 4096, ~300-320 TFLOP/s flat) does not say which
cp_comm_type its runs used. For each row (its settings: tests/measured_variants.py) and each type the layout allows
(a2a: Ulysses, whole sequences, one causal kernel call; a2a+p2p: a2a inside the NVLink domain and a ring across
domains, TE context_parallel.py AttnFuncWithCPAndKVP2P on the a2a group's blocks; p2p: a ring over all CP ranks)
this prints the estimate's items (`moeplan estimate --json` time_breakdown_s): attention kernels, exposed CP
communication, the rest of the step, the attention rate on its blocks (moeplan.engine.timing.attention
attention_rate), the block length and the causal calls' share of the attention work; and the attention + CP time
the measurement leaves once the estimated rest is taken off (measured step - estimated rest).

    python benchmarks/g14_cp_series.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from moeplan import api  # noqa: E402
from moeplan.base.errors import MoeplanError  # noqa: E402
from moeplan.engine.timing.attention import attention_block_tokens, attention_rate, causal_part  # noqa: E402
from moeplan.base.vocab import CP_COMM_TYPES  # noqa: E402
from moeplan.models.spec import Attention  # noqa: E402
from tests.measured_variants import Variant, tflops_to_tokens, tokens_per_gpu_per_step, variants  # noqa: E402

CP_TYPES = ("auto", *(t for t in CP_COMM_TYPES if t != "allgather"))  # the types G14 could have run (no all-gather CP)


def g14_rows() -> list[Variant]:
    """G14's rows in order of length."""
    return sorted((v for v in variants() if v.group == "G14"), key=lambda v: v.kwargs["seq_len"])


def decompose(v: Variant, cp_comm_type: str = "auto") -> dict[str, object] | None:
    """The estimate of row ``v`` under ``cp_comm_type`` taken apart (None where the layout does not allow the type)."""
    kw = dict(v.kwargs) | {"cp_comm_type": cp_comm_type}
    try:
        est = api.estimate(v.model, **kw)
        cfg, gpu = api.build_config(v.model, **kw)
    except MoeplanError:
        return None
    mixer = next(m for m in cfg.model.distinct_mixers if isinstance(m, Attention))
    tb = est["time_breakdown_s"]
    step_s = float(est["step_time_s"])
    attn_s, cp_s = float(tb["attention"]), float(tb["cp_comm"])
    rest_s = step_s - attn_s - cp_s
    # the measured step: the same FLOPs per token at the measured TFLOP/s
    measured_step_s = tokens_per_gpu_per_step(kw) / tflops_to_tokens(v.measured(), float(est["flops_per_token"]))
    share, _ = causal_part(cfg, mixer, gpu.nvlink_domain)
    return {"row": v.label, "cp_comm_type": est["cp_comm_type"], "planner_choice": cp_comm_type == "auto",
            "measured_tflops": v.measured(),
            "tflops": round(float(est["tflops_per_gpu"]), 1),
            "residual": round(float(est["tflops_per_gpu"]) / v.measured() - 1, 3),
            "step_s": round(step_s, 1), "attention_s": round(attn_s, 1), "cp_comm_s": round(cp_s, 1),
            "rest_s": round(rest_s, 1), "attention_share": round((attn_s + cp_s) / step_s, 3),
            "attention_tflops": round(attention_rate(cfg, gpu, mixer) / 1e12, 1),
            "block_tokens": attention_block_tokens(cfg, mixer, gpu.nvlink_domain), "causal_share": round(share, 4),
            "measured_step_s": round(measured_step_s, 1),
            "implied_attention_cp_s": round(measured_step_s - rest_s, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    out = []
    for v in g14_rows():
        chosen = decompose(v)
        assert chosen is not None
        out += [chosen] + [d for t in CP_TYPES[1:] if t != chosen["cp_comm_type"] and v.kwargs["cp"] > 1
                           and (d := decompose(v, t)) is not None]
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'row':9} {'type':8} {'meas':>4} {'est':>4} {'res':>4} {'attn s':>6} {'cp s':>6} {'rest':>5} "
          f"{'TF':>3} {'block':>6} {'caus':>4} {'impl':>5}")
    for d in out:
        kind = f"{d['cp_comm_type']}{'*' if d['planner_choice'] else ''}"
        print(f"{d['row']:9} {kind:8} {d['measured_tflops']:4.0f} {d['tflops']:4.0f} {d['residual']:+4.0%} "
              f"{d['attention_s']:6.0f} {d['cp_comm_s']:6.0f} {d['rest_s']:5.0f} {d['attention_tflops']:3.0f} "
              f"{d['block_tokens']:6.0f} {d['causal_share']:4.2f} {d['implied_attention_cp_s']:5.0f}")
    print("*: the planner's choice (auto). TF: attention TFLOP/s on its blocks; caus: the\n"
          "causal calls' share of attention work; impl: measured step - estimated rest (s).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
