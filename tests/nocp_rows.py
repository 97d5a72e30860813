"""N40 / N41's 'without CP' rows (../shared/reference/measured_variants.csv) as moeplan observations.

The source (NVIDIA/NeMo docs/source/performance/performance_long_sequence.md at 8cfedd7203) gives, per sequence length,
a CP row with its layout and a 'without CP' row whose layout it does not give: "In non-CP training runs, we use the
most performant model- and data-parallel configurations without CP given the memory capacity constraint of each GPU
system"; its Llama3-8B footnote names the levers: TP (at most the query groups) and "full activation recomputation".
So a without-CP row is moeplan's fastest layout at CP 1 that fits memory, on the CP row's GPUs, GBS and numerics (FP8
as the CP rows run it, N41's TE 1.3): the planner's own search (moeplan.plan.planner.search through
api.search_plans) with CP and MBS pinned to 1, once per recompute option the source names (none, full; selective
core_attn, the only selective label of NeMo 24.03's Megatron-Core, frees nothing at these lengths with fused
attention: plan.advice.applicable_modules drops it from 16K on), no Megatron-FSDP and no optimizer offload (neither
in NeMo 24.03's perf configs). TP stays inside the node, DP is what the GPU count leaves (at most GBS).

Only the rows whose CP row has CP > 1 are distinct measurements (at CP 1 both columns are the same run): N40 32K-512K
(its 1M point has no without-CP run: "impossible ... due to the GPU memory constraints"), N41 32K-1M.

In the fit the prediction follows the calibration: the fastest of the candidate layouts at the constants being
fitted. Memory does not depend on them, so the candidates are found once, at the fit's source values (benchmarks/
calibrate.py PRIOR, tests/fit_prior.py, where the fit starts; not the shipped constants, which the fit wrote: its inputs would depend on
its own previous output): the layouts the search returns for each recompute option, pruned to the fastest per TP and
recompute option within CANDIDATE_MARGIN of the fastest (at most MAX_CANDIDATES), which keeps calibrate's thousands of evaluations cheap.
Each candidate is its plan's own build_config keywords (run_kwargs: the plan's strategy, every knob), not keywords
rebuilt by hand on build_config's defaults (tests/unit/test_nocp_prune.py: they build the planner's run). Rows that
miss by an effect moeplan does not express are kept out of the fit with the reason (``extra["why"]``, from
tests/fit_exclusions.py) and reported.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from .fit_exclusions import why_out_of_fit
from .fit_prior import prior_calibration
from .measured_variants import Variant, _f, _rows, n_variants, nemo_llama_flops_per_token, tflops_to_tokens

# the memory levers the source names for its without-CP runs (footnote 1: TP and full activation recomputation)
NOCP_RECOMPUTE = ("none", "full")
# candidates kept per row: within this share of the fastest at the prior constants (the fitted constants move
# layouts of one model and length together; a layout 25% behind is not overtaken), at most MAX_CANDIDATES
CANDIDATE_MARGIN = 0.25
MAX_CANDIDATES = 3
SEARCH_TOP = 6  # plans the search returns per recompute option


@dataclass(frozen=True)
class NoCPRow:
    group: str
    label: str
    model: str
    seq_len: int
    tflops: float  # measured, in the source's FLOP count (fpt)
    fpt: float  # NeMo's FLOPs per token at this length (measured_variants.nemo_llama_flops_per_token)
    cp_row: Variant  # the same length's CP row (its GPUs, GBS and numerics)
    candidates: tuple[dict[str, Any], ...]  # api.build_config kwargs (run_kwargs), fastest first at the prior constants
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def measured_tokens(self) -> float:
        """Measured tokens/s per GPU: the source's TFLOP/s over its own FLOP count."""
        return tflops_to_tokens(self.tflops, self.fpt)


def search_cp1(v: Variant, recompute: str, gpus: int | None = None,
               cal: Any = None) -> list[tuple[dict[str, Any], float, float]]:
    """The planner's plans at CP 1 for the CP row ``v``'s run (its GPUs unless ``gpus``), one recompute option:
    (build_config kwargs, tokens/s per GPU at ``cal``, peak bytes), fastest first. ``cal``: None, the shipped
    constants."""
    from moeplan import api
    from moeplan.base.errors import MoeplanError
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
    from moeplan.run.knobs import Recompute

    kw = v.kwargs
    knobs = {"te_version": kw["te_version"]} if "te_version" in kw else {}
    try:
        rep = api.search_plans(v.model, gpu=kw["gpu"], gpus=gpus or kw["gpus"], seq_len=kw["seq_len"], gbs=kw["gbs"],
                               precision=kw["precision"], top=SEARCH_TOP,
                               fixed={"cp": 1, "mbs": 1, "recompute": recompute}, fsdp="off", optimizer_offload=False,
                               cuda_graphs=False, allow_gbs_reduction=False, cal=cal or DEFAULT_CALIBRATION, **knobs)
    except MoeplanError:
        return []
    out = []
    for p in rep.plans:
        cand = {"gpu": kw["gpu"], "gpus": p.config.parallel.gpus, **run_kwargs(p.config)}
        if Recompute.parse(cand["recompute"]) == Recompute.parse(recompute):
            cand["recompute"] = recompute  # the word the search was pinned to ('full' for 'full:uniform:1')
        out.append((cand, p.estimate.time.tokens_per_s_per_gpu, p.estimate.memory.total_bytes))
    return sorted(out, key=lambda c: -c[1])


def run_kwargs(cfg: Any) -> dict[str, Any]:
    """api.build_config keywords of a run the planner found (all but the GPU and its count): its strategy
    (moeplan.run.strategy.strategy_of, what ``plan --save-strategy`` writes and ``estimate --strategy`` reads), every
    knob the plan holds, so that no keyword falls back to api.build_config's defaults where the search's differ
    (Megatron-FSDP, optimizer offload, CUDA graphs, the TE release ...)."""
    from moeplan.run.strategy import strategy_of

    return {key: value for section in strategy_of(cfg).values() for key, value in section.items()}


def candidates(v: Variant) -> list[tuple[dict[str, Any], float, float]]:
    """Every recompute option's plans (search_cp1) at the prior constants, pruned to CANDIDATE_MARGIN / MAX_CANDIDATES,
    fastest first."""
    prior = prior_calibration()
    found = sorted((c for rc in NOCP_RECOMPUTE for c in search_cp1(v, rc, cal=prior)), key=lambda c: -c[1])
    if not found:
        return []
    best = found[0][1]
    kept: dict[tuple[int, str], tuple[dict[str, Any], float, float]] = {}
    for c in found:  # the fastest per TP and recompute option: the trade-offs the constants can move
        if c[1] >= best * (1 - CANDIDATE_MARGIN):
            kept.setdefault((c[0]["tp"], c[0]["recompute"]), c)
    return list(kept.values())[:MAX_CANDIDATES]


@functools.lru_cache(maxsize=1)
def nocp_rows() -> tuple[NoCPRow, ...]:
    """The without-CP rows whose CP row has CP > 1, each with its candidate layouts (fastest first)."""
    cp_rows = {(v.group, v.kwargs["seq_len"]): v for v in n_variants() if v.group in ("N40", "N41")}
    out = []
    for r in _rows():
        if r["group_id"] not in ("N40", "N41") or r["tp"].strip() or _f(r["tflops_per_gpu"]) is None:
            continue
        g, seq = r["group_id"], int(r["seq_len"])
        v = cp_rows[(g, seq)]
        if v.kwargs["cp"] == 1:
            continue  # the same run as the CP row
        cands = candidates(v)
        label = f"{seq // 1024}K without CP"
        out.append(NoCPRow(g, label, v.model, seq, float(_f(r["tflops_per_gpu"])),  # type: ignore[arg-type]
                           nemo_llama_flops_per_token(v.model, seq), v, tuple(c[0] for c in cands),
                           extra={"tokens_prior": tuple(c[1] for c in cands), "bytes": tuple(c[2] for c in cands),
                                  "why": why_out_of_fit(g, label)}))
    return tuple(out)


def layout_text(kw: dict[str, Any]) -> str:
    """'TP8 PP2 DP16, full recompute' for a candidate's kwargs."""
    dp = kw["gpus"] // (kw["tp"] * kw["pp"])
    vpp = f" VPP{kw['vpp']}" if kw.get("vpp", 1) > 1 else ""
    rc = "no recompute" if kw["recompute"] == "none" else f"{kw['recompute']} recompute"
    return f"TP{kw['tp']} PP{kw['pp']}{vpp} DP{dp}, {rc}"


__all__ = ["NoCPRow", "candidates", "layout_text", "nocp_rows", "run_kwargs", "search_cp1"]
