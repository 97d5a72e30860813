"""The long-context MoE guidance as models: starting points, candidate sets and the rationale of a
plan, every sentence computed from the memory and time estimates.

Sources: ../shared/reference/guidance.md (NVIDIA Megatron Bridge docs/training/moe-optimization.md,
docs/training/activation-recomputation.md, long-context MoE performance notes; Megatron-MoE-ModelZoo).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from moeplan.base.deepep_configs import tp_ep_group_ranks
from moeplan.base.fields import fields_for, version_key
from moeplan.base.te_release import GROUPED_TENSOR_ENV
from moeplan.base.vocab import DEFAULT_HEADROOM as _DEFAULT_HEADROOM
from moeplan.base.vocab import DROPLESS_MOE_GRAPH_SCOPES, RESOLVED_GAIN
from moeplan.engine.activations import keeps_unfused_scores, layer_tensors, unfused_attention_bytes
from moeplan.engine.estimate import Evaluator
from moeplan.engine.estimate import evaluate as _evaluate
from moeplan.engine.flops import attention_core_fwd_flops, layer_gemms
from moeplan.engine.fsdp import SHARDS
from moeplan.engine.knobs import knob_problem
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.hardware import GPUSpec
from moeplan.models.spec import Attention, DenseMLP, GatedDeltaNet, ModelSpec, MoE
from moeplan.run.attention_backend import unfused_attention
from moeplan.run.config import Recompute, RunConfig
from moeplan.run.parallel import replace_parallel

CP_SHARD_TOKENS = 4096  # guidance: CP starts at seq_len / 4096 (a ~4K-token shard per CP rank)
MIN_CP_SHARD_TOKENS = 1024  # below ~1K tokens per rank the ring exchange is exposed (linter)
LONG_CONTEXT_TOKENS = 16384  # from here on core_attn is not a recompute candidate (unless it keeps s x s scores)
# The most tokens one micro-batch (MBS x seq_len) holds in any published recipe: Megatron Bridge's Qwen3-30B-A3B
# GB300 / B300 MBS 8 at 4K (perf_recipes/qwen/gb300/qwen3_moe.py, v0.6.0) and Nemotron-3-Nano MBS 4 at 8K. Fixed
# per-micro-batch costs (kernel launches, dispatch / combine latency, pipeline hand-offs) shrink per token as the
# micro-batch grows; the search tries MBS above 4 up to these (candidate_mbss; 1 / 2 / 4 below LONG_CONTEXT_TOKENS
# whatever their tokens, as before)
MICRO_BATCH_TOKENS = 32768
MAX_MBS = 8  # and the largest MBS any of them runs (the same Qwen3-30B-A3B recipes)


# Relative cost of recomputing a byte of element-wise output vs a GEMM FLOP, for ordering the
# ladder only (H100: 794 TFLOP/s over 3.35 TB/s ~ 240 FLOP per byte).
FLOPS_PER_BYTE = 240.0


DEFAULT_HEADROOM = _DEFAULT_HEADROOM  # one value (moeplan.base.vocab), kept here for the planner and the linter


def cp_start(seq_len: int) -> int:
    """Guidance: CP = seq_len / 4096 rounded to a power of two (nearest in log scale), at least 1."""
    ratio = seq_len / CP_SHARD_TOKENS
    if ratio <= 1:
        return 1
    return 2 ** round(math.log2(ratio))


def candidate_mbss(seq_len: int) -> list[int]:
    """The MBS sizes the search tries: 1 at long context (activation memory); below it 1/2/4 and each larger power of
    two up to MAX_MBS whose micro-batch holds at most MICRO_BATCH_TOKENS (MBS 8 up to 4K), where the fixed costs
    per micro-batch still weigh: the range the published recipes run. GBS / DP divisibility and the memory budget
    prune the rest."""
    if seq_len >= LONG_CONTEXT_TOKENS:
        return [1]
    out = [1, 2, 4]
    while out[-1] * 2 <= MAX_MBS and out[-1] * 2 * seq_len <= MICRO_BATCH_TOKENS:
        out.append(out[-1] * 2)
    return out


MEASURED_LAYOUTS_FILE = "measured_layouts.yaml"  # package data beside the hardware catalog
LAYOUT_FIELDS = ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs")


@lru_cache(maxsize=1)
def measured_layouts() -> tuple[dict[str, Any], ...]:
    """Layouts of measured Megatron runs (moeplan/hardware/measured_layouts.yaml), read once."""
    text = resources.files("moeplan.hardware").joinpath(MEASURED_LAYOUTS_FILE).read_text(encoding="utf-8")
    # libyaml's parser where PyYAML has it (same resolver and constructors as safe_load; the pure-Python
    # parser costs the plan search a tenth of a second)
    return tuple(yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["layouts"])  # noqa: S506


# A measured recipe speaks for a plan only at a sequence length within this factor of its own (issue #31: a 4K
# recipe decided a 128K plan; activation memory, CP and the recompute a run needs change with length).
RECIPE_SEQ_RATIO = 2.0


def recipe_distance(cfg: RunConfig, gpu: GPUSpec) -> tuple[float, dict[str, Any]] | None:
    """How far a plan's layout is from the nearest layout measured for the same model and system at a sequence
    length within RECIPE_SEQ_RATIO of the plan's: the sum of |log2| ratios of TP, PP, VPP, EP, ETP, MBS and of
    the tokens per CP rank, plus the GPU-count ratio at half weight and 1 for another dispatcher. None when
    nothing was measured for this model on this GPU at such a length."""
    par, seq = cfg.parallel, cfg.batch.seq_len
    mine = {"tp": par.tp, "pp": par.pp, "vpp": par.vpp, "ep": par.ep, "etp": par.etp, "mbs": cfg.batch.mbs}
    best: tuple[float, dict[str, Any]] | None = None
    for r in measured_layouts():
        if r["model"] != cfg.model.name or r["gpu"] != gpu.name:
            continue
        if not seq / RECIPE_SEQ_RATIO <= r["seq_len"] <= seq * RECIPE_SEQ_RATIO:
            continue
        d = sum(abs(math.log2(mine[k] / r[k])) for k in mine)
        d += abs(math.log2((seq / par.cp) / (r["seq_len"] / r["cp"])))
        d += 0.5 * abs(math.log2(par.gpus / r["gpus"]))
        same = not r.get("dispatcher") or r["dispatcher"] == cfg.dispatcher
        d += 0.0 if same or tp_ep_group_ranks(par) == 1 else 1.0  # no tokens move without a tp_ep group
        if best is None or d < best[0]:
            best = (d, r)
    return best


def recipe_closeness(distance: tuple[float, dict[str, Any]] | None) -> float:
    """Rule 1's key from a :func:`recipe_distance`: the distance rounded to 1e-6 (equal layouts tie), inf where no
    recipe is near."""
    return round(distance[0], 6) if distance else math.inf


@lru_cache(maxsize=64)
def _recipe_keys(model: str, gpu: str) -> frozenset[tuple[Any, ...]]:
    return frozenset((r["tp"], r["pp"], r["vpp"], r["ep"], r["etp"], r["mbs"], r["seq_len"] / r["cp"], r["gpus"])
                     for r in measured_layouts() if r["model"] == model and r["gpu"] == gpu)


@lru_cache(maxsize=64)
def recipe_vpps(model: str) -> tuple[int, ...]:
    """The VPP sizes measured recipes of this model ran with (any system): the search tries them beside 1/2/4/8,
    so a published layout such as Qwen3-235B-A22B's PP4 VPP12 at 128K is in the search, not only when pinned."""
    return tuple(sorted({int(r["vpp"]) for r in measured_layouts() if r["model"] == model}))


@lru_cache(maxsize=64)
def recipe_cps(model: str, gpu: str, seq_len: int) -> tuple[int, ...]:
    """The CP sizes of measured recipes of this model and system at a length within RECIPE_SEQ_RATIO of
    ``seq_len``: the search tries them beside its range around seq / 4096 (Qwen3-235B-A22B's CP 4 at 128K)."""
    return tuple(sorted({int(r["cp"]) for r in measured_layouts() if r["model"] == model and r["gpu"] == gpu
                         and seq_len / RECIPE_SEQ_RATIO <= r["seq_len"] <= seq_len * RECIPE_SEQ_RATIO}))


def is_recipe_layout(cfg: RunConfig, gpu: GPUSpec) -> bool:
    """Whether the layout is exactly one measured for this model and system (a fast set lookup; the
    dispatcher is a knob the planner refines, so it is not part of the layout)."""
    par = cfg.parallel
    return (par.tp, par.pp, par.vpp, par.ep, par.etp, cfg.batch.mbs, cfg.batch.seq_len / par.cp,
            par.gpus) in _recipe_keys(cfg.model.name, gpu.name)


def guidance_key(cfg: RunConfig, gpu: GPUSpec) -> tuple[bool, float, int]:
    """The guidance's order of preference between plans the estimates do not order (guidance.md): DP >= 2 before
    DP 1 ("keep a non-zero DP budget"), then CP nearest seq / 4096 (|log2| of the ratio), then the dispatcher's
    place in its order (HybridEP first on NVL72; DeepEP, HybridEP, alltoall on 8-GPU nodes)."""
    order = dispatcher_candidates(cfg, gpu)
    return (cfg.parallel.dp < 2, abs(math.log2(cfg.parallel.cp / cp_start(cfg.batch.seq_len))),
            order.index(cfg.dispatcher) if cfg.dispatcher in order else len(order))


def guidance_distance(cfg: RunConfig, gpu: GPUSpec) -> float:
    """How far a plan is from the guidance's defaults: |log2(CP / (seq / 4096))| plus the dispatcher's
    place in the guidance's order (HybridEP first on NVL72; DeepEP, HybridEP, alltoall on 8-GPU nodes)."""
    d = abs(math.log2(cfg.parallel.cp / cp_start(cfg.batch.seq_len)))
    order = dispatcher_candidates(cfg, gpu)
    return d + (order.index(cfg.dispatcher) if cfg.dispatcher in order else len(order))


@dataclass(frozen=True)
class Reason:
    """One sentence of rationale (or one linter finding's explanation), with the numbers behind it."""

    topic: str
    text: str
    numbers: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "text": self.text, "numbers": self.numbers}


def applicable_modules(spec: ModelSpec, seq_len: int, version: str, gpu: GPUSpec | None = None,
                       te_version: str | None = None) -> list[str]:
    """Megatron-Core recompute labels that do something for this model (and exist in the version) on ``gpu``."""
    mods = ["layernorm"]
    if any(getattr(layer.mixer, "is_mla", False) for layer in spec.layers):
        mods.append("mla_up_proj")
    if any(isinstance(layer.mlp, MoE) for layer in spec.layers):
        mods += ["moe_act", "moe"]
        if any(isinstance(layer.mlp, MoE) and layer.mlp.has_shared for layer in spec.layers):
            mods.append("shared_experts")
    if any(isinstance(layer.mlp, DenseMLP) for layer in spec.layers):
        mods.append("mlp")
    if any(isinstance(layer.mixer, GatedDeltaNet) for layer in spec.layers):
        mods.append("gdn_norm_out")
    if seq_len < LONG_CONTEXT_TOKENS or keeps_unfused_scores(spec, gpu, te_version):
        mods.append("core_attn")
    allowed = fields_for(version).recompute_modules  # the version table
    return [m for m in mods if m in allowed]


# GEMMs each recompute label re-runs in the forward pass (Megatron-Core recompute_modules docs).
MODULE_GEMMS = {"mla_up_proj": ("q_up", "kv_up"), "mlp": ("mlp_fc1", "mlp_fc2"),
                "shared_experts": ("shared_fc1", "shared_fc2"),
                "moe": ("expert_fc1", "expert_fc2", "shared_fc1", "shared_fc2")}


def _module_value(spec: ModelSpec, module: str, seq_len: int, gpu: GPUSpec | None = None,
                  te_version: str | None = None) -> tuple[float, float]:
    """(bytes saved per token over the model, recompute cost per token in FLOP-equivalents):
    GEMM FLOPs the label re-runs, attention FLOPs for core_attn, and bytes x FLOPS_PER_BYTE for the
    element-wise labels (layernorm, moe_act, gdn_norm_out). core_attn on TE's unfused path also frees the
    scores (moeplan.engine.activations.unfused_attention_bytes, per token at MBS 1 and TP 1)."""
    saved = cost = 0.0
    for layer, n in spec.layer_groups():
        top_k = layer.mlp.top_k if isinstance(layer.mlp, MoE) else 1
        layer_saved = 0.0
        for t in layer_tensors(layer, spec.hidden):
            if module in t.dropped_by:
                layer_saved += t.nbytes(None) * (top_k if t.scope == "row" else 1)
        if module == "core_attn" and isinstance(layer.mixer, Attention) and unfused_attention(layer.mixer, gpu, te_version):
            layer_saved += unfused_attention_bytes(layer.mixer, 1, seq_len, 1).saved_bytes / seq_len
        if not layer_saved:
            continue
        saved += n * layer_saved
        if module in MODULE_GEMMS:
            flops = sum(g.fwd_flops * (top_k if g.per_row else 1) for g in layer_gemms(layer, spec.hidden)
                        if g.name in MODULE_GEMMS[module])
            if module == "moe":  # plus the dispatch/combine it repeats
                flops += 2 * top_k * spec.hidden * 2 * FLOPS_PER_BYTE
            cost += n * flops
        elif module == "core_attn" and isinstance(layer.mixer, Attention):
            cost += n * attention_core_fwd_flops(layer.mixer, seq_len)
        else:
            cost += n * layer_saved * FLOPS_PER_BYTE
    return saved, cost


def recompute_ladder(spec: ModelSpec, seq_len: int, version: str, gpu: GPUSpec | None = None,
                     te_version: str | None = None) -> list[Recompute]:
    """Recompute options from none to full, selective sets growing by the module with the best
    memory saved per unit of recompute cost (the guidance's preference order falls out of this:
    mla_up_proj, layernorm, moe_act before moe; core_attn excluded at long context unless it keeps s x s
    scores on ``gpu``)."""
    mods = applicable_modules(spec, seq_len, version, gpu, te_version)
    scored = []
    for m in mods:
        saved, cost = _module_value(spec, m, seq_len, gpu, te_version)
        if saved > 0:
            scored.append((cost / saved, m))
    scored.sort()
    ladder = [Recompute()]
    chosen: set[str] = set()
    for _, m in scored:
        chosen.add(m)
        if "moe" in chosen:  # recomputing the whole MoE layer subsumes its parts
            chosen -= {"moe_act", "shared_experts"}
        rc = Recompute("selective", frozenset(chosen))
        if rc not in ladder:
            ladder.append(rc)
    ladder.append(Recompute("full", frozenset(), "uniform", 1))
    return ladder


def dispatcher_candidates(cfg: RunConfig, gpu: GPUSpec) -> list[str]:
    """Dispatchers worth costing: none where the expert-TP x EP group has one rank (every dispatcher moves tokens
    over that tp_ep group, EP 1 x expert TP > 1 included: moeplan.engine.timing.moe.ep_kernels); on NVL72 HybridEP
    (Megatron Bridge enables DeepEP only on SM 8x/9x, B200 and B300: bridge/training/flex_dispatcher_backend.py) and
    alltoall; on 8-GPU NVLink nodes DeepEP, HybridEP and alltoall. HybridEP needs Megatron-Core 0.16+."""
    if tp_ep_group_ranks(cfg.parallel) <= 1 or cfg.model.first_moe is None:
        return ["alltoall"]
    out = ["hybridep", "alltoall"] if gpu.is_nvl72 else ["deepep", "hybridep", "alltoall"]
    if version_key(cfg.mcore_version) < (0, 16):
        out = [d for d in out if d != "hybridep"]
    return out


# ------------------------------------------------------------------------------ plan rationale


def ep_group_label(par: Any) -> str:
    """The expert-TP x EP group as the dispatcher texts name it: "EP 16", or "EP 1 x expert TP 2" with expert TP."""
    return f"EP {par.ep}" if par.etp == 1 else f"EP {par.ep} x expert TP {par.etp}"


def round_gib(b: float) -> float:
    """Bytes as GiB to one decimal, as the rationale and the findings print them."""
    return round(b / 2**30, 1)


def _cp_start_blocked(cfg: RunConfig, cp0: int) -> str:
    """Why the guidance's CP start is not a valid layout with this plan's other sizes kept: the first
    rule it breaks (RunConfig.layout_checks), e.g. the folding or a Megatron-Core release rule; a rule on CP itself
    (a release that has no CP for the model's mixers) before the folding, which only this plan's other sizes break."""
    par = cfg.parallel
    bad = sorted(cfg.layout_checks(replace(par, cp=cp0)), key=lambda c: c.rule == "attention-folding")
    why = bad[0].reason if bad else "it breaks a layout rule"
    return f"CP {cp0} is not a valid layout with this plan's TP {par.tp}, PP {par.pp} and EP {par.ep} kept: {why}."


def _fsdp_reason(cfg: RunConfig, est: Any, plain: Any, budget: float) -> Reason:
    """Megatron-FSDP against the same plan with the distributed optimizer only: the memory it frees
    and the exposed parameter all-gather / gradient reduce-scatter it costs (timing ``dp_comm``)."""
    par = cfg.parallel
    sh = SHARDS[cfg.fsdp]
    what = ", ".join(n for n, on in (("optimizer state", sh.optimizer), ("gradients", sh.gradients),
                                      ("bf16 weights", sh.params)) if on) or "nothing"
    step = est.time.step_time_s
    dp_s = est.time.breakdown_s.get("dp_comm", 0.0)
    plain_gib = round_gib(plain.memory.total_bytes)
    text = (f"Megatron-FSDP {cfg.fsdp}: shards {what} over DP x CP {par.dp * par.cp} (experts over expert DP "
            f"{par.edp}), {round_gib(est.memory.total_bytes)} GiB per GPU; ")
    if plain.memory.total_bytes > budget:
        text += f"with the distributed optimizer alone this plan needs {plain_gib} GiB, over the {round_gib(budget)} GiB budget"
    else:
        plain_tps, tps = plain.time.tokens_per_s_per_gpu, est.time.tokens_per_s_per_gpu
        if plain_tps > tps * (1 + RESOLVED_GAIN):  # FSDP is not what makes this plan fit
            text += (f"the distributed optimizer alone fits too ({plain_gib} GiB) and runs faster, at "
                     f"{plain_tps:,.0f} tokens/s/GPU vs {tps:,.0f} here: FSDP is not needed for memory on this plan")
        elif plain_tps * (1 + RESOLVED_GAIN) < tps:
            text += (f"with the distributed optimizer alone it fits in {plain_gib} GiB but runs at "
                     f"{plain_tps:,.0f} tokens/s/GPU vs {tps:,.0f} here")
        else:
            text += (f"the distributed optimizer alone fits too ({plain_gib} GiB) at the same speed "
                     f"({plain_tps:,.0f} vs {tps:,.0f} tokens/s/GPU)")
    text += (f". Its parameter all-gathers and gradient reduce-scatters, overlapped per layer, expose "
             f"{dp_s:,.2f} s per step ({dp_s / step:.1%}).")
    return Reason("fsdp", text, {"strategy": cfg.fsdp, "memory_without_gib": plain_gib, "dp_comm_s": round(dp_s, 3),
                                 "tokens_per_s_per_gpu_without": round(plain.time.tokens_per_s_per_gpu, 1)})


def with_dispatcher(cfg: RunConfig, dispatcher: str) -> tuple[RunConfig, str]:
    """``cfg`` with another dispatcher and the knobs that need the old one dropped, as the planner would run
    it: sync-free dropless MoE (moe_expert_rank_capacity_factor) and so the full-iteration CUDA graph need
    HybridEP (moeplan.engine.knobs.knob_problem); without them the dropless partial scopes are captured. Also a
    few words on what changed beside the dispatcher ('' if nothing)."""
    alt, notes = cfg.with_(dispatcher=dispatcher), []
    if alt.rank_capacity_factor is not None and knob_problem(alt) is not None:
        scopes = frozenset(alt.cuda_graph_scopes - {"full_iteration"}) or DROPLESS_MOE_GRAPH_SCOPES
        alt = alt.with_(rank_capacity_factor=None, cuda_graph_scopes=scopes)
        notes.append(f"graphs {', '.join(sorted(scopes))}: the full-iteration graph needs HybridEP's sync-free mode")
    if alt.ep_overlap and not alt.ep_overlap_allowed:
        alt = alt.with_(ep_overlap=False)
        notes.append("no EP overlap")
    return alt, "; ".join(notes)


def explain_plan(cfg: RunConfig, gpu: GPUSpec, est: Any, budget: float, requested_gbs: int,
                 cal: Any = None, peers: Sequence[tuple[int, RunConfig, float]] = ()) -> list[Reason]:
    """Why this plan: CP, DP, recompute, offload, dispatcher, CUDA graphs, GBS, pipeline layout.
    Each sentence compares the plan with the alternative it rules out, using fresh estimates.
    ``peers``: the other plans of the same answer as (rank, config, tokens/s/GPU), so that a CP the
    guidance starts at, invalid with this plan's sizes, is pointed to where another plan uses it."""
    cal = cal or DEFAULT_CALIBRATION
    try_eval = Evaluator(gpu, budget, cal=cal)

    def evaluate(c: RunConfig, g: GPUSpec) -> Any:
        return _evaluate(c, g, cal)

    par, batch = cfg.parallel, cfg.batch
    out: list[Reason] = []
    total = est.memory.total_bytes
    tps = est.time.tokens_per_s_per_gpu
    step = est.time.step_time_s
    # --- CP
    cp0 = cp_start(batch.seq_len)
    shard = batch.seq_len // par.cp
    text = (f"CP {par.cp}: {shard:,}-token shard per CP rank; the guidance starts at seq/4096 -> CP {cp0} "
            f"({batch.seq_len // cp0:,} tokens).")
    nums: dict[str, Any] = {"cp": par.cp, "cp_start": cp0, "shard_tokens": shard}
    if par.cp != cp0:
        alt_par = replace_parallel(par, cp=cp0)
        alt = try_eval(cfg.with_(parallel=alt_par)) if alt_par else None
        # the variant above changes CP alone, which can be a poor CP-cp0 layout: it is named as such, and
        # the first plan of the answer that runs CP cp0 (with its own sizes) is named beside it
        variant = f"This plan with only CP changed to {cp0} ({alt_par.short()})" if alt_par else ""
        if alt is None:
            text += " " + _cp_start_blocked(cfg, cp0)
            nums["cp_start_valid"] = False
        elif not alt.memory.total_bytes <= budget:
            text += (f" {variant} would need {round_gib(alt.memory.total_bytes)} GiB per GPU, over the "
                     f"{round_gib(budget)} GiB budget.")
            nums["cp_start_memory_gib"] = round_gib(alt.memory.total_bytes)
        else:
            text += (f" {variant} fits ({round_gib(alt.memory.total_bytes)} GiB) but runs at "
                     f"{alt.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU vs {tps:,.0f} here.")
            nums["cp_start_tokens_per_s"] = round(alt.time.tokens_per_s_per_gpu)
        peer = next(((r, c, t) for r, c, t in peers if c.parallel.cp == cp0 and c is not cfg), None)
        if peer is not None:
            how = "these sizes and its own knobs" if peer[1].parallel == alt_par else "other sizes"
            text += (f" Plan {peer[0]} uses CP {cp0} with {how} ({peer[1].parallel.short()}, "
                     f"{peer[2]:,.0f} tokens/s/GPU).")
            nums["cp_start_plan"] = peer[0]
    if par.cp > 1:
        cp_s = est.time.breakdown_s.get("cp_comm", 0.0)
        text += f" CP communication ({cfg.cp_comm_type}) exposes {cp_s:,.3g} s per step ({cp_s / step:.1%})."
        nums["cp_comm_s"] = round(cp_s, 3)
    out.append(Reason("cp", text, nums))
    # --- DP budget
    per_replica = par.tp * par.cp * par.pp
    if par.dp >= 2:
        out.append(Reason("dp", f"DP {par.dp} (expert DP {par.edp}): TP x CP x PP = {per_replica} GPUs per replica, "
                          "so data parallelism keeps a non-zero budget for gradient overlap and throughput.",
                          {"dp": par.dp, "edp": par.edp}))
    else:
        tps = est.time.tokens_per_s_per_gpu
        faster = max(((r, c, t) for r, c, t in peers if c.parallel.dp >= 2 and t > tps), key=lambda p: p[2],
                     default=None)
        if faster is None:
            said = ("DP is not forced, and no plan listed with it keeps DP >= 2 and runs faster (--top lists more; a "
                    "tie's rank reason names the fastest estimate).")
        else:  # a tie ordered first (planner.rank_candidates): the sentence must not deny the faster plan
            said = (f"plan {faster[0]} keeps DP {faster[1].parallel.dp} ({faster[1].parallel.short()}) and is estimated "
                    f"{faster[2] / tps - 1:.0%} faster, within the model's error of this plan (the rank reason says "
                    "why this one comes first).")
        out.append(Reason("dp", f"DP 1: TP x CP x PP = {per_replica} uses every GPU; {said}",
                          {"dp": 1, "edp": par.edp} | ({"faster_dp_plan": faster[0]} if faster else {})))
    # --- recompute
    rc = cfg.recompute
    none_cfg = cfg.with_(recompute=Recompute())
    none_est = evaluate(none_cfg, gpu) if rc.granularity != "none" else est
    if rc.granularity == "none":
        out.append(Reason("recompute", f"No recompute: {round_gib(total)} GiB fits the {round_gib(budget)} GiB budget "
                          "(HBM minus headroom), so nothing is recomputed.", {"memory_gib": round_gib(total)}))
    else:
        rec_s = est.time.breakdown_s.get("recompute", 0.0)
        label = "full recompute" if rc.granularity == "full" else "selective " + ", ".join(sorted(rc.modules))
        text = (f"{label}: without recompute the plan needs {round_gib(none_est.memory.total_bytes)} GiB "
                f"(budget {round_gib(budget)}); with it {round_gib(total)} GiB, for {rec_s:,.2f} s of recompute per step "
                f"({rec_s / step:.1%}).")
        nums = {"memory_without_gib": round_gib(none_est.memory.total_bytes), "memory_gib": round_gib(total),
                "recompute_s": round(rec_s, 3)}
        if rc.granularity == "selective":
            for m in sorted(rc.modules):
                less = evaluate(cfg.with_(recompute=Recompute("selective", rc.modules - {m})) if len(rc.modules) > 1
                                else none_cfg, gpu)
                saved = less.memory.total_bytes - total
                nums[f"saves_{m}_gib"] = round_gib(saved)
                text += f" {m} saves {round_gib(saved)} GiB."
        else:
            text += " No selective set fit: full recompute is the last resort."
        out.append(Reason("recompute", text, nums))
    if (batch.seq_len >= LONG_CONTEXT_TOKENS and cfg.model.first_attention is not None and rc.granularity != "full"
            and "core_attn" not in rc.modules and not keeps_unfused_scores(cfg.model, gpu, cfg.te_version)):
        ca = cfg.with_(recompute=Recompute("selective", (rc.modules if rc.granularity == "selective" else frozenset()) | {"core_attn"}))
        ca_est = evaluate(ca, gpu)
        saved = total - ca_est.memory.total_bytes
        cost = ca_est.time.step_time_s - step
        out.append(Reason("core_attn", f"core_attn is not recomputed: at seq {batch.seq_len:,} fused attention keeps "
                          f"only softmax statistics, so it would save {saved / 2**20:,.0f} MiB and cost "
                          f"{cost:,.2f} s per step ({cost / step:.1%}).",
                          {"saves_mib": round(saved / 2**20), "cost_s": round(cost, 3)}))
    # --- optimizer offload
    if cfg.optimizer_offload > 0:
        no_off = evaluate(cfg.with_(optimizer_offload=0.0), gpu)
        cost = est.time.breakdown_s.get("offload", 0.0)
        out.append(Reason("offload", f"Optimizer CPU offload {cfg.optimizer_offload:.0%}: without it "
                          f"{round_gib(no_off.memory.total_bytes)} GiB > {round_gib(budget)} GiB budget; moves "
                          f"{round_gib(est.memory.peak.host_bytes)} GiB to host and costs {cost:,.2f} s per step "
                          f"({cost / step:.1%}) over {gpu.host_link}.",
                          {"memory_without_gib": round_gib(no_off.memory.total_bytes), "offload_s": round(cost, 3)}))
    # --- Megatron-FSDP (moeplan.engine.fsdp: what each strategy shards, what it communicates)
    if cfg.fsdp is not None:
        out.append(_fsdp_reason(cfg, est, evaluate(cfg.with_(fsdp=None, fsdp_double_buffer=False), gpu), budget))
    # --- dispatcher
    if tp_ep_group_ranks(par) > 1 and cfg.model.first_moe is not None:  # the dispatchers' tp_ep group
        others = {}
        why_not: list[str] = []  # an alternative the estimates put ahead: why it is not the plan's
        notes: dict[str, str] = {}  # what an alternative runs differently beside its dispatcher
        over: list[str] = []  # alternatives that do not fit the budget
        for d in dispatcher_candidates(cfg, gpu):
            if d != cfg.dispatcher:
                alt_cfg, changed = with_dispatcher(cfg, d)
                alt = evaluate(alt_cfg, gpu)
                others[d] = round(alt.time.tokens_per_s_per_gpu)
                if changed:
                    notes[d] = changed
                if alt.memory.total_bytes > budget:
                    over.append(d)
                ahead = alt.time.tokens_per_s_per_gpu / tps - 1
                if ahead <= 0:
                    continue
                if alt_cfg.grouped_tensor_raises is not None:  # the user's variable, on the module path it leaves
                    why_not.append(f"{d} puts the routed experts on TE GroupedLinear's module path, where TE raises "
                                   f"with {GROUPED_TENSOR_ENV}=1")
                elif alt.memory.total_bytes > budget:
                    why_not.append(f"{d} needs {round_gib(alt.memory.total_bytes)} GiB, over the {round_gib(budget)} GiB budget")
                elif ahead <= RESOLVED_GAIN:
                    why_not.append(f"{d} is {ahead:.1%} ahead, within the {RESOLVED_GAIN:.0%} the estimates resolve (a tie: "
                                   f"the guidance's order, DeepEP, HybridEP, alltoall, decides)")
                else:
                    why_not.append(f"{d} is {ahead:.1%} faster")
        span = math.ceil(tp_ep_group_ranks(par) / gpu.nvlink_domain)
        ep_s = est.time.breakdown_s.get("ep_comm", 0.0)
        alt_text = ", ".join(f"{d} {v:,} tokens/s" + (f" ({notes[d]})" if d in notes else "") for d, v in others.items())
        out.append(Reason("dispatcher", f"{cfg.dispatcher}: {ep_group_label(par)} spans {span} NVLink domain(s) "
                          f"of {gpu.nvlink_domain}; "
                          f"{tps:,.0f} tokens/s/GPU with {ep_s:,.2f} s of exposed dispatch/combine per step"
                          f"{' (EP A2A overlap on)' if cfg.ep_overlap else ''}; alternatives: {alt_text or 'none'}"
                          + "".join(f"; {w}" for w in why_not) + ".",
                          {"tokens_per_s": round(tps), "alternatives": others, "over_budget": over,
                           "ep_comm_s": round(ep_s, 3)}))
    # --- CUDA graphs
    if cfg.cuda_graph_scopes:
        no_g = evaluate(cfg.with_(cuda_graph_scopes=frozenset()), gpu)
        gain = no_g.time.step_time_s - step
        extra = total - no_g.memory.total_bytes
        if cfg.rank_capacity_factor is not None:
            how = (f"the full iteration is captured because dropless MoE runs sync-free: fixed HybridEP rank buffers "
                   f"(moe_expert_rank_capacity_factor {cfg.rank_capacity_factor}) with moe_paged_stash, "
                   f"Megatron-Core {cfg.mcore_version}")
        else:
            how = "partial scopes work with dropless MoE"
        out.append(Reason("cuda_graphs", f"CUDA graphs ({', '.join(sorted(cfg.cuda_graph_scopes))}): this plan has a fixed "
                          f"sequence length ({batch.seq_len:,}) and micro-batch ({batch.mbs}); graphs save {gain:,.2f} s "
                          f"per step of launch overhead for {round_gib(extra)} GiB. Enable them only after shapes and routing "
                          f"are stable ({how}).",
                          {"gain_s": round(gain, 3), "memory_gib": round_gib(extra)}))
    else:
        launch = est.time.breakdown_s.get("launch_overhead", 0.0)
        scopes = DROPLESS_MOE_GRAPH_SCOPES if cfg.model.first_moe else frozenset({"attn", "mlp"})
        if not scopes <= set(fields_for(cfg.mcore_version).cuda_graph_scopes):
            why = f"Megatron-Core {cfg.mcore_version} has no per-module graph scopes"
            nums = {}
        else:
            g = evaluate(cfg.with_(cuda_graph_scopes=scopes), gpu)
            gain = step - g.time.step_time_s
            if g.memory.total_bytes > budget:
                why = (f"partial graphs ({', '.join(sorted(scopes))}) would need {round_gib(g.memory.total_bytes)} GiB, "
                       f"over the {round_gib(budget)} GiB budget")
            else:
                why = (f"partial graphs ({', '.join(sorted(scopes))}) would save only {gain:,.2f} s per step "
                       f"({gain / step:.1%}) and fix sequence length and micro-batch")
            nums = {"gain_s": round(gain, 3), "memory_gib": round_gib(g.memory.total_bytes)}
        out.append(Reason("cuda_graphs", f"CUDA graphs not advised: {why} (launch overhead {launch:,.2f} s per step).",
                          nums))
    # --- the user's GROUPED_TENSOR_ENV on experts that do not read it (as the linter's te-grouped-tensor warning)
    if cfg.te_grouped_tensor and cfg.experts_op_fused and cfg.model.first_moe is not None:
        flow = ("takes its own grouped-tensor flow by default" if cfg.experts_grouped_tensor else
                f"has no grouped-tensor flow for {cfg.precision} in TE {cfg.te_version} on {gpu.name}")
        out.append(Reason("te_grouped_tensor", f"{GROUPED_TENSOR_ENV}=1 does not apply to this plan: its routed experts "
                          "run on TE's op fuser (use_transformer_engine_op_fuser, with the sync-free full-iteration "
                          f"bundle), whose GroupedLinear never reads the variable and {flow}; exported as asked, it "
                          "changes nothing.", {"env": f"{GROUPED_TENSOR_ENV}=1", "experts_op_fused": True,
                                               "experts_grouped_tensor": cfg.experts_grouped_tensor}))
    # --- GBS and pipeline
    if batch.gbs != requested_gbs:
        out.append(Reason("gbs", f"GBS lowered from {requested_gbs} to {batch.gbs}: no layout fit at {requested_gbs}.",
                          {"requested_gbs": requested_gbs, "gbs": batch.gbs}))
    if par.pp > 1:
        bubble = est.time.breakdown_s.get("pp_bubble", 0.0)
        layout = est.memory.assumptions.get("pipeline_layout")
        out.append(Reason("pipeline", f"PP {par.pp} x VPP {par.vpp}, layout {layout}: bubble {bubble:,.2f} s per step "
                          f"({bubble / step:.1%}) with {est.time.microbatches} micro-batches.",
                          {"layout": layout, "bubble_s": round(bubble, 3)}))
    return out
