"""Take the AWS EFA groups (N31-N33) apart per EP call: what the measured step leaves for each dispatch / combine.

For every N31-N33 row without EP A2A overlap (its settings: tests/measured_variants.py) the estimate is split by
probing its constants (each probe doubles one, so the step moves by exactly that item):
- the fixed part of the EP calls: ``a2a_host_call_s`` (NCCL all-to-all) or ``ep_proxy_call_s`` (DeepEP) per rail
  (engine.timing.moe.ep_proxy_call_s); its step share over the per-call constant is the number of exposed calls;
- the transfer across EFA: the step share that halving ``a2a_scaleout_eff`` doubles (NCCL: the remote (token,
  expert) rows, half the destinations at EP16 over 2 nodes, three quarters at EP32 over 4; DeepEP: a token's
  copy per remote node, the larger of it and the NVLink leg);
- DeepEP's per-message proxy part (``ep_proxy_message_s``);
- the rest (compute, NVLink legs, TP, pipeline), taken as estimated, without the host timeline's floor
  (engine.timing.host: max(host, GPU) per layer), which at MBS 1 covers the calls: the split reads each call as the
  additive model would, the pair below is what the floor explains.
The measured step less the estimated rest, over the calls, is what one call took in the run ("meas ms"); the
estimate's own figure is the fixed part + transfer (+ messages) per call ("est ms"). MBS 1 and MBS 4 of one layout
move 4x the bytes per call through the same number of calls per token, so the pair shows how a call grows with its
bytes: at EP16 over 2 nodes the measured call barely grows (its transfer hides), at EP32 over 4 it does.

    python benchmarks/efa_call_split.py [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from moeplan import api  # noqa: E402
from moeplan.base.deepep_configs import tp_ep_group_ranks  # noqa: E402
from moeplan.base.vocab import FLEX_DISPATCHERS  # noqa: E402
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration  # noqa: E402
from moeplan.engine.timing.moe import ep_kernels_of, ep_proxy_call_s  # noqa: E402
from tests.measured_variants import Variant, n_variants, tflops_to_tokens, tokens_per_gpu_per_step  # noqa: E402

EFA_GROUPS = ("N31", "N32", "N33")
# host_layer_pass_s for the split: the host floor off (the calibration takes positive numbers only)
HOST_FLOOR_OFF_S = 1e-15


def efa_rows() -> list[Variant]:
    """N31-N33's rows without EP A2A overlap (the overlap rows also switch VPP and recompute)."""
    return [v for v in n_variants() if v.group in EFA_GROUPS and not v.kwargs.get("ep_overlap")]


def _step_s(v: Variant, cal: Calibration) -> float:
    return float(api.estimate(v.model, cal=cal, **v.kwargs)["step_time_s"])


def split(v: Variant, cal: Calibration = DEFAULT_CALIBRATION) -> dict[str, object]:
    """Row ``v``'s estimate taken apart per EP call, beside what the measurement leaves for the calls (read without the
    host floor: ``host_layer_pass_s`` off)."""
    cal = cal.with_overrides({"host_layer_pass_s": HOST_FLOOR_OFF_S})
    est = api.estimate(v.model, cal=cal, **v.kwargs)
    cfg, gpu = api.build_config(v.model, **v.kwargs)
    step_s = float(est["step_time_s"])
    flex = cfg.dispatcher in FLEX_DISPATCHERS
    call_key = "ep_proxy_call_s" if flex else "a2a_host_call_s"
    par = cfg.parallel
    nodes = math.ceil(tp_ep_group_ranks(par) / gpu.nvlink_domain)
    per_call_s = ep_proxy_call_s(gpu, cal, nodes, cfg.dispatcher)  # the engine's per-call rule
    fixed_s = _step_s(v, cal.with_overrides({call_key: 2 * getattr(cal, call_key)})) - step_s
    kernels = ep_kernels_of(cfg.dispatcher)
    eff = cal.a2a_scaleout_eff[kernels]
    transfer_s = _step_s(v, cal.with_overrides({"a2a_scaleout_eff": {kernels: eff / 2}})) - step_s
    messages_s = (_step_s(v, cal.with_overrides({"ep_proxy_message_s": 2 * cal.ep_proxy_message_s})) - step_s
                  if flex else 0.0)
    calls = fixed_s / per_call_s
    rest_s = step_s - fixed_s - transfer_s - messages_s
    measured_step_s = tokens_per_gpu_per_step(v.kwargs) / tflops_to_tokens(v.measured(), float(est["flops_per_token"]))
    return {"group": v.group, "row": v.label, "ep": par.ep, "nodes": nodes,
            "pp": par.pp, "mbs": v.kwargs["mbs"], "dispatcher": cfg.dispatcher,
            "measured_tflops": v.measured(), "tflops": round(float(est["tflops_per_gpu"]), 1),
            "residual": round(float(est["tflops_per_gpu"]) / v.measured() - 1, 3),
            "step_s": round(step_s, 2), "measured_step_s": round(measured_step_s, 2), "rest_s": round(rest_s, 2),
            "calls": round(calls), "fixed_ms": round(1e3 * per_call_s, 3),
            "transfer_ms": round(1e3 * transfer_s / calls, 3), "messages_ms": round(1e3 * messages_s / calls, 3),
            "est_call_ms": round(1e3 * (fixed_s + transfer_s + messages_s) / calls, 3),
            "meas_call_ms": round(1e3 * (measured_step_s - rest_s) / calls, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    out = [split(v) for v in efa_rows()]
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'grp':3} {'row':24} {'meas':>5} {'est':>5} {'res':>5} {'calls':>5} {'fix':>5} {'xfer':>5} "
          f"{'msg':>4} {'est ms':>6} {'meas ms':>7}")
    for d in out:
        print(f"{d['group']:3} {str(d['row'])[:24]:24} {d['measured_tflops']:5.1f} {d['tflops']:5.1f} "
              f"{d['residual']:+5.0%} {d['calls']:5d} {d['fixed_ms']:5.2f} {d['transfer_ms']:5.2f} "
              f"{d['messages_ms']:4.2f} {d['est_call_ms']:6.2f} {d['meas_call_ms']:7.2f}")
    print("Per exposed EP call (dispatch or combine, fwd / bwd / recompute): fix = the fixed host-proxy part,\n"
          "xfer = the EFA transfer, msg = DeepEP's per-message part, est ms = their sum, meas ms = (measured\n"
          "step - estimated rest) / calls.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
