"""The measured variant groups (../shared/reference/measured_variants.csv) as moeplan inputs.

Each row becomes api.estimate arguments with the settings its source states; what it does not state is
filled from the recipe family named below (inputs, never results). Shared by the ranking tests and
benchmarks/calibrate.py. Rows moeplan cannot express are left out, with the reason:
- G05 steps that are kernel or CPU work (fusions, PDL, bindpcie) keep the previous step's knobs: only
  the steps that change a planner knob form a ranked pair (adjacent rows), the others are drift;
- G06 (Moonlight-16B-A3B) is not in the model catalogue;
- G08's activation-offload row (PP1, OOM) and G11's natural-routing row (functional run, real data);
- MB05 (GPT-OSS: attention sinks and sliding-window kernels are a named modelling gap).
"""

from __future__ import annotations

import csv
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .reference_runs import shared_dir


@dataclass(frozen=True)
class Variant:
    group: str
    label: str
    model: str
    kwargs: dict[str, Any]
    tflops: float | None  # measured TFLOP/s per GPU (None where only the step time was published)
    step_s: float | None
    memory_gb: float | None = None
    knob_step: bool = True  # G05: this row changes a planner knob relative to the previous row
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def measured(self) -> float:
        """Throughput in a unit shared inside the group: TFLOP/s, else 1 / step seconds."""
        return self.tflops if self.tflops is not None else 1.0 / float(self.step_s)  # type: ignore[arg-type]


def _rows() -> list[dict[str, str]]:
    with open(shared_dir() / "reference" / "measured_variants.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _f(x: str) -> float | None:
    x = x.strip().lstrip("~")
    return float(x) if x else None


_GRAPHS = {"none": None, "": None}


def _graphs(text: str) -> str | None:
    t = text.replace("TE:", "").replace("+ shared expert", "").strip()
    return _GRAPHS.get(t, ",".join(s.strip() for s in t.split(",") if s.strip())) if t else None


def _dispatcher(text: str) -> str:
    t = text.lower()
    return "hybridep" if "hybridep" in t else "deepep" if "deepep" in t else "alltoall"


# DeepSeek-V3 on H100 at long context (G14): TP1 PP8 VPP4 EP32, DeepEP, FP8 blockwise, bf16 grads and
# moments, optimizer offload and the selective set of the seed's tuned layouts. GBS: 8192 at 4K and
# 480 at 128K are published; between them moeplan holds the tokens per step of the 4K run (assumed).
G14_GBS = {4096: 8192, 16384: 2048, 32768: 1024, 65536: 512, 131072: 480, 262144: 240}
G14_RECOMPUTE = "selective:mla_up_proj,layernorm,moe,mlp"


@dataclass(frozen=True)
class G15Point:
    """One point of the Qwen3-Next-80B-A3B CP series on 32 GB200 (G15: approximate values, other sizes not given)."""

    seq_len: int
    cp: int
    tflops: float
    memory_gb: float | None


# What moeplan assumes of G15's runs, which the card does not give: Bridge's Qwen3-Next recipe trains MTP 1
# (recipes/qwen/qwen3_next.py mtp_num_layers default 1 since 2025-10; Bridge counts it in TFLOP/s,
# training/utils/flop_utils.py), GBS holds 2M tokens, and Gated DeltaNet context parallel (CP 4 / 16) needs
# Megatron-Core 0.18+ (the planner's 0.19).
G15_PLAN_KWARGS: dict[str, Any] = dict(gpu="gb200", gpus=32, mcore_version="0.19", mtp_layers=1)
G15_GBS_TOKENS = 2 * 2**20


def g15_points() -> list[G15Point]:
    """G15's rows of ../shared/reference/measured_variants.csv, in order of length."""
    out = []
    for r in _rows():
        if r["group_id"] == "G15":
            mem = r["other_knobs"].replace("mem", "").replace("GB", "").strip()
            out.append(G15Point(int(r["seq_len"]), int(r["cp"]), float(_f(r["tflops_per_gpu"]) or 0.0), _f(mem)))
    return sorted(out, key=lambda p: p.seq_len)


def variants() -> list[Variant]:
    out: list[Variant] = []
    g05_prev: dict[str, Any] | None = None
    for r in _rows():
        g, notes = r["group_id"], r["other_knobs"]
        if g == "G05":
            rc = r["recompute"].replace("selective:", "").replace("up_proj", "mla_up_proj").replace(" ", "")
            kw = dict(gpu="gb200", gpus=256, seq_len=4096, gbs=2048, mbs=1, tp=1, pp=8, vpp=4, ep=32,
                      precision="mxfp8", dispatcher=_dispatcher(r["dispatcher"]), recompute=f"selective:{rc}",
                      cuda_graphs=_graphs(r["cuda_graphs"]), grad_fp32=False, bf16_moments=True)
            knob = g05_prev is not None and kw != g05_prev
            g05_prev = kw
            out.append(Variant(g, notes.split(";")[0], "deepseek-v3", kw, _f(r["tflops_per_gpu"]), None, knob_step=knob))
        elif g == "G08":
            if "activation" in r["offload"]:
                continue
            frac = 0.0 if r["offload"] == "baseline" else int(r["offload"].split("_")[2].rstrip("pct")) / 100
            overlap = r["offload"].endswith("overlap")
            # 8 bytes per parameter saved at 100%: the precision-aware optimizer is off (fp32 master stays)
            kw = dict(gpu="h100", gpus=16, seq_len=4096, gbs=8, mbs=1, tp=2, pp=2, ep=4, optimizer_offload=frac,
                      dispatcher="alltoall", offload_overlap=overlap, precision_aware_optimizer=False)
            mem = float(r["other_knobs"].split("=")[1])
            out.append(Variant(g, r["offload"], "qwen3-30b-a3b", kw, None, float(r["step_time_s"]), mem))
        elif g == "G09":
            kw = dict(gpu="h100", gpus=16, seq_len=4096, gbs=64, mbs=1, tp=2, pp=2, ep=4, dispatcher="alltoall",
                      cuda_graphs=_graphs(r["cuda_graphs"]))
            out.append(Variant(g, f"graphs {r['cuda_graphs']}", "qwen3-30b-a3b", kw, _f(r["tflops_per_gpu"]),
                               float(r["step_time_s"])))
        elif g == "G11":
            if "NATURAL" in notes:
                continue
            d = _dispatcher(r["dispatcher"])
            # every G11 row ran with delay_wgrad_compute off (its knobs column; Bridge v0.6.0 perf_recipes/qwen/
            # h100/qwen3_moe.py qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config sets it False beside the overlap)
            kw = dict(gpu="h100", gpus=16, seq_len=4096, gbs=1024, mbs=1, ep=16, dispatcher=d,
                      ep_overlap=r["ep_overlap"] == "yes", cuda_graphs=_graphs(r["cuda_graphs"]),
                      delay_wgrad=False if "delay_wgrad off" in notes else None)
            lab = f"{d} overlap={r['ep_overlap'] or 'no'}" + (" tuned" if "32 SMs" in r["dispatcher"] else "")
            out.append(Variant(g, lab, "qwen3-30b-a3b", kw, _f(r["tflops_per_gpu"]), _f(r["step_time_s"])))
        elif g == "G14":
            seq, cp = int(r["seq_len"]), int(r["cp"])
            gpus = int(r["gpus"])
            kw = dict(gpu="h100", gpus=gpus, seq_len=seq, gbs=G14_GBS[seq], mbs=1, tp=1, pp=8, vpp=4, cp=cp, ep=32,
                      precision="fp8", dispatcher="deepep", recompute=G14_RECOMPUTE, optimizer_offload=1.0,
                      cp_comm_type="auto",
                      grad_fp32=False, bf16_moments=True)
            out.append(Variant(g, f"{seq // 1024}K CP{cp}", "deepseek-v3", kw, _f(r["tflops_per_gpu"]), None))
        elif g in ("MB01", "MB13"):
            vpp = int(r["vpp"]) if r["vpp"] not in ("", "n/a") else 1
            kw = dict(gpu="b200", gpus=int(r["gpus"]), seq_len=4096, gbs=int(r["gbs"]), mbs=int(r["mbs"]),
                      tp=int(r["tp"]), pp=int(r["pp"]), vpp=vpp, ep=int(r["ep"]), precision="mxfp8", grad_fp32=False)
            if g == "MB01":
                # knobs of the 26.04.01 recipe (tests/data/bridge_perf_runs.csv): DeepEP, selective
                # mla_up_proj + mlp, TE-scoped graphs, bf16 moments, EP overlap where the layout allows it
                kw |= dict(dispatcher="deepep", recompute="selective:mla_up_proj,mlp", bf16_moments=True,
                           cuda_graphs="attn,moe_router,moe_preprocess", ep_overlap=vpp > 1)
                model = "deepseek-v3"
            else:
                kw |= dict(dispatcher="alltoall")
                model = "qwen3-30b-a3b"
            out.append(Variant(g, f"{r['software_version']} PP{r['pp']} VPP{vpp} EP{r['ep']} MBS{r['mbs']}", model, kw,
                               _f(r["tflops_per_gpu"]), None))
    return out


def ranked_pairs(vs: list[Variant], min_gap: float = 0.10) -> list[tuple[Variant, Variant]]:
    """Pairs (slower, faster) in one group that differ in a knob or layout moeplan models and whose
    measured throughput differs by at least ``min_gap``. G05 pairs adjacent rows only where the step
    changes a knob (the other steps are kernel work); MB groups pair adjacent releases only (drift)."""
    out: list[tuple[Variant, Variant]] = []
    groups: dict[str, list[Variant]] = {}
    for v in vs:
        groups.setdefault(v.group, []).append(v)
    for g, rows in groups.items():
        if g == "G05" or g.startswith("MB"):
            cands = [(a, b) for a, b in zip(rows, rows[1:]) if (g != "G05" or b.knob_step)]
        else:
            cands = list(itertools.combinations(rows, 2))
        for a, b in cands:
            if a.kwargs == b.kwargs and a.extra == b.extra:
                continue  # same knobs (a repeat, or kernel work)
            lo, hi = sorted((a, b), key=lambda v: v.measured())
            if hi.measured() / lo.measured() - 1 >= min_gap:
                out.append((lo, hi))
    return out
