"""The linter: the long-context guidance as checks on an existing run, each finding with its numbers
and the concrete fix (the Megatron Bridge overrides that change).

Every check compares the run with the alternative the guidance prefers, using the memory and time
estimates (moeplan.engine.memory, moeplan.engine.timing); a fix is only proposed when the estimates say it works.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from moeplan.base.deepep_configs import tp_ep_group_ranks
from moeplan.base.fields import fields_for
from moeplan.base.te_release import GROUPED_TENSOR_ENV, TE_RELEASES, grouped_tensor_problem, raising_reason, te_label
from moeplan.base.vocab import DROPLESS_MOE_GRAPH_SCOPES, OFFLOAD_FRACTIONS
from moeplan.engine.activations import keeps_unfused_scores
from moeplan.engine.budget import MEMORY_MODEL_ERROR, budget_bytes, edge_bytes
from moeplan.engine.estimate import Evaluator
from moeplan.engine.fsdp import FULL_SHARD
from moeplan.engine.knobs import knob_problem
from moeplan.engine.memory import MEMORY_ITEMS
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration
from moeplan.hardware import GPUSpec
from moeplan.megatron.export import format_override_value, to_overrides
from moeplan.plan.advice import (CP_SHARD_TOKENS, DEFAULT_HEADROOM, LONG_CONTEXT_TOKENS, MIN_CP_SHARD_TOKENS, cp_start,
                                 dispatcher_candidates, ep_group_label, recipe_distance, recompute_ladder, round_gib,
                                 with_dispatcher)
from moeplan.plan.pitfalls import pitfalls
from moeplan.run.config import Recompute, RunConfig
from moeplan.run.parallel import balanced_layout, replace_parallel

Severity = Literal["error", "warning", "info"]
CP_SHARD_TOO_LARGE = 4 * CP_SHARD_TOKENS  # a shard 4x the guidance's ~4K tokens is "far above"
ALLTOALL_MAX_DOMAINS = 1  # NCCL all-to-all across NVLink domains: prefer DeepEP / HybridEP
MIN_GAIN = 0.03  # a change must gain at least 3% tokens/s to be worth a warning


@dataclass(frozen=True)
class Finding:
    severity: Severity
    rule: str
    message: str
    fix: tuple[str, ...] = ()
    numbers: dict[str, Any] = field(default_factory=dict)
    line: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "rule": self.rule, "message": self.message, "fix": list(self.fix),
                "numbers": self.numbers, "line": self.line}


def _overrides(cfg: RunConfig) -> list[str]:
    return to_overrides(cfg, cfg.mcore_version)


# The setting that removes each knob problem (moeplan.engine.knobs): the Megatron default.
_KNOB_FIX: dict[str, dict[str, Any]] = {
    "cp_comm_type": {"cp_comm_type": "p2p"},
    "moe_expert_rank_capacity_factor": {"rank_capacity_factor": None},
    "overlap_moe_expert_parallel_comm": {"ep_overlap": False},
    "delay_wgrad_compute": {"delay_wgrad": None},  # Bridge's pairing: with EP overlap where Megatron accepts it
}


def fix_overrides(before: RunConfig, after: RunConfig) -> tuple[str, ...]:
    """The Megatron Bridge overrides that turn ``before`` into ``after``."""
    old = set(_overrides(before))
    return tuple(o for o in _overrides(after) if o not in old)


def knob_fix(cfg: RunConfig, field: str) -> tuple[str, ...]:
    """The overrides that remove the knob problem on ``field`` (moeplan.engine.knobs, :data:`_KNOB_FIX`). Where the
    export cannot spell the problem (delay_wgrad_compute without EP overlap exports as false), the field's own
    override in the fixed run."""
    fixed = cfg.with_(**_KNOB_FIX[field])
    f = fields_for(cfg.mcore_version)
    paths = f.bridge_paths(f.knobs[field]) if field in f.knobs else ()
    return fix_overrides(cfg, fixed) or tuple(o for o in _overrides(fixed) if o.partition("=")[0].lstrip("+") in paths)


def did_you_mean(key: str, known: Sequence[str]) -> str | None:
    """The known key closest to a misspelt one (difflib ratio >= 0.8 on the whole key, else on its
    last component within the same section), or None."""
    if not known:
        return None
    hit = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
    if hit:
        return hit[0]
    head, dot, tail = key.rpartition(".")
    if dot:
        same = {k.rpartition(".")[2]: k for k in known if k.rpartition(".")[0] == head}
        hit = difflib.get_close_matches(tail, list(same), n=1, cutoff=0.75)
        if hit:
            return same[hit[0]]
    return None


def unknown_key_findings(unknown: Sequence[tuple[str, int]], known: Sequence[str] = ()) -> list[Finding]:
    """One warning per key the reader did not know, with the closest known key when one is close."""
    out = []
    for key, line in unknown:
        guess = did_you_mean(key, known)
        hint = f"; did you mean '{guess}'?" if guess else "; check the spelling"
        out.append(Finding("warning", "unknown-key", f"unknown key '{key}': moeplan does not model it and "
                           f"Megatron may reject it{hint}", numbers={"suggestion": guess} if guess else {}, line=line))
    return out


def lint(cfg: RunConfig, gpu: GPUSpec, *, headroom: float = 0.0, variable_seq_lengths: bool = False,
         unknown: tuple[tuple[str, int], ...] = (), lines: dict[str, int] | None = None,
         known: Sequence[str] = (), cal: Calibration = DEFAULT_CALIBRATION,
         reported_knobs: frozenset[str] = frozenset()) -> list[Finding]:
    """All findings for a run, errors first. ``unknown``: (key, line) pairs the reader did not know;
    ``known``: the keys it knows (for "did you mean"); ``reported_knobs``: fields whose knob problem the caller
    reports itself (checker: Megatron's own assertion for the same cause), so no knob-layout finding for them."""
    lines = lines or {}
    findings: list[Finding] = unknown_key_findings(unknown, known)
    layout_errors = cfg.layout_checks()
    field_of = {"seq-cp": "context_parallel_size", "experts-ep": "expert_model_parallel_size",
                "layers-pp": "pipeline_model_parallel_size", "gbs": "global_batch_size",
                "vpp-microbatches": "global_batch_size",
                "heads-tp": "tensor_model_parallel_size", "query-groups-tp": "tensor_model_parallel_size",
                "attention-folding": "tensor_model_parallel_size", "expert-folding": "expert_model_parallel_size",
                "pipeline-layout": "pipeline_model_parallel_layout", "seq-tp": "tensor_model_parallel_size",
                "gdn-cp-version": "context_parallel_size", "gdn-heads-cp": "context_parallel_size",
                "unfused-attention-cp": "context_parallel_size", "sink-attention-cp": "context_parallel_size",
                "gdn-heads-tp": "tensor_model_parallel_size", "experts-etp": "expert_tensor_parallel_size",
                "vpp-needs-pp": "virtual_pipeline_model_parallel_size"}
    for bad in layout_errors:
        findings.append(Finding("error", bad.rule, bad.reason, _layout_fix(cfg, bad.rule),
                                line=lines.get(field_of.get(bad.rule, ""))))
    if layout_errors:
        return sort_findings(findings + _without_estimate(cfg, gpu, variable_seq_lengths, lines, layout_errors))
    problem = knob_problem(cfg, gpu)
    if problem:
        if problem.field not in reported_knobs:
            findings.append(Finding("error", "knob-layout", problem.message, knob_fix(cfg, problem.field),
                                    line=lines.get(problem.field)))
        cfg = cfg.with_(**_KNOB_FIX[problem.field])
    # the budget's one rule (moeplan.engine.budget): the run itself errors only past the budget's edge (the memory
    # model's error); the fixes moeplan recommends fit the budget itself, as the planner's plans do
    ev = Evaluator(gpu, edge_bytes(gpu.hbm_bytes, headroom), budget_bytes(gpu.hbm_bytes, headroom), cal)
    est = ev(cfg)
    assert est is not None
    findings += _memory(cfg, est, ev, lines)
    findings += _host_memory(cfg, est, ev, lines)
    findings += _dp_budget(cfg, est, ev, lines)
    findings += _cp_size(cfg, est, ev, lines)
    findings += _recompute(cfg, est, ev, lines)
    findings += _dispatcher(cfg, est, ev, lines)
    findings += _delay_wgrad(cfg, est, ev, lines)
    findings += _cuda_graphs(cfg, variable_seq_lengths, lines)
    findings += lint_sharding(cfg, est, ev, lines)  # distributed optimizer vs Megatron-FSDP, Muon
    findings += _grouped_tensor(cfg, est, ev, lines)
    findings += _pitfalls(cfg, est, ev, lines)  # dispatch-kernel limits, graphs' memory, above peak
    combined = _combined_fix(cfg, findings, ev, lines)
    return sort_findings(combined + findings)


def _pitfalls(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    """moeplan.plan.pitfalls' answers as findings, each fix the overrides to the run that removes it."""
    return [Finding(p.severity, p.rule, p.message, fix_overrides(cfg, p.fixed) if p.fixed is not None else (),
                    p.numbers, p.line) for p in pitfalls(cfg, est, ev, lines)]


ESTIMATE_RULES = ("memory", "host-memory", "dp-collapsed (alternatives)", "cp-too-small / cp-too-large", "core-attn-recompute (cost)",
                  "full-recompute", "dispatcher", "delay-wgrad", "knob-layout", "dp-sharding", "muon-layer-wise", "te-grouped-tensor",
                  "deepep-ep-ranks", "deepep-ep-size", "hybridep-ib-queue-depth", "cuda-graphs-memory", "above-peak")


def _ladder(cfg: RunConfig) -> list[Recompute]:
    """The run's recompute ladder (advice.recompute_ladder): its model, length, Megatron-Core version, GPU and
    TE version (which decide whether core_attn is a candidate at long context)."""
    return recompute_ladder(cfg.model, cfg.batch.seq_len, cfg.mcore_version, cfg.gpu, cfg.te_version)


def _core_attn_rule_fix(cfg: RunConfig, gpu: GPUSpec) -> RunConfig | None:
    """The run without core_attn recompute (:func:`_without_core_attn`) when the core-attn-recompute rule
    applies (selective core_attn at long context, where fused attention keeps only softmax statistics), else
    None. Not on TE's unfused path, which keeps the s x s scores (activations.keeps_unfused_scores)."""
    rc = cfg.recompute
    if (rc.granularity != "selective" or "core_attn" not in rc.modules or cfg.batch.seq_len < LONG_CONTEXT_TOKENS
            or keeps_unfused_scores(cfg.model, gpu, cfg.te_version)):
        return None
    return _without_core_attn(cfg)


def _without_estimate(cfg: RunConfig, gpu: GPUSpec, variable_seq_lengths: bool, lines: dict[str, int],
                      layout_errors: Sequence[Any]) -> list[Finding]:
    """The rules that need no estimate, for a run whose layout is invalid (so it cannot be estimated),
    and one finding naming the rules skipped and why."""
    out: list[Finding] = []
    par, rc, seq = cfg.parallel, cfg.recompute, cfg.batch.seq_len
    rline = lines.get("recompute_modules") or lines.get("recompute_granularity")
    without = _core_attn_rule_fix(cfg, gpu)
    if without is not None:
        out.append(Finding("warning", "core-attn-recompute",
                           f"core_attn is recomputed at seq {seq:,}: fused attention keeps only softmax statistics, so "
                           "recomputing it saves little memory and re-runs the most expensive op (cost not estimated: "
                           "the layout is invalid)", _fix_beside_layout(cfg, without), {}, rline))
    if par.dp == 1:
        out.append(Finding("warning", "dp-collapsed", f"DP collapsed to 1: TP x CP x PP = {par.tp}x{par.cp}x{par.pp} = "
                           f"{par.tp * par.cp * par.pp} uses all {par.gpus} GPUs; no data-parallel budget (alternatives "
                           "not estimated: the layout is invalid)", (), {"dp": par.dp, "edp": par.edp},
                           lines.get("context_parallel_size")))
    out += _dispatcher_nvl72(cfg, gpu, _fix_beside_layout, {"ep": par.ep},
                             lines.get("moe_token_dispatcher_type") or lines.get("moe_flex_dispatcher_backend"))
    out += _cuda_graphs(_exportable(cfg), variable_seq_lengths, lines)
    rules = ", ".join(bad.rule for bad in layout_errors)
    out.append(Finding("info", "skipped", f"not estimated because the layout is invalid ({rules}): the rules that need "
                       f"memory and time estimates were skipped ({', '.join(ESTIMATE_RULES)}); fix the errors and "
                       "check again", (), {"skipped": list(ESTIMATE_RULES)}))
    return out


def _exportable(cfg: RunConfig) -> RunConfig:
    """``cfg`` with one pipeline stage, so overrides of its other knobs can be written while its own
    pipeline split is invalid (the fixes of estimate-free rules touch no layout field)."""
    return cfg.with_(parallel=replace(cfg.parallel, pp=1, vpp=1, pipeline_layout=None))


def _fix_beside_layout(before: RunConfig, after: RunConfig) -> tuple[str, ...]:
    return fix_overrides(_exportable(before), _exportable(after))


def _layout_fix(cfg: RunConfig, rule: str) -> tuple[str, ...]:
    """For an uneven pipeline split: the balanced layout string that makes it valid. For micro-batches
    the interleaved schedule refuses: the nearest GBS whose micro-batches are a multiple of PP. For CP on TE's
    unfused attention path: CP 1."""
    if rule == "unfused-attention-cp":  # the one layout TE's unfused attention runs
        return ("model.context_parallel_size=1",)
    if rule == "vpp-microbatches":
        par, batch = cfg.parallel, cfg.batch
        per_mb = batch.mbs * par.dp
        m = batch.microbatches(par.dp)
        up = -(-m // par.pp) * par.pp * per_mb
        down = m // par.pp * par.pp * per_mb
        return tuple(f"train.global_batch_size={g}" for g in dict.fromkeys((up, down)) if g > 0)
    if rule != "layers-pp" or cfg.model.num_layers < cfg.parallel.pp * cfg.parallel.vpp:
        return ()
    layout = balanced_layout(cfg.model, cfg.parallel.pp, cfg.parallel.vpp)
    return (f"model.pipeline_model_parallel_layout={format_override_value(layout)}",) if layout else ()


SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then information (stable)."""
    return sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity])


def _memory_fix(cfg: RunConfig, ev: Evaluator) -> tuple[RunConfig, Any] | None:
    """The cheapest memory fix: the fastest fitting config among the recompute ladder steps (with and
    without optimizer offload) and doubled CP; None when none fits."""
    options: list[RunConfig] = []
    for rc in _ladder(cfg):
        options.append(cfg.with_(recompute=rc))
        for f in OFFLOAD_FRACTIONS if cfg.optimizer == "adam" else ():  # Muon has no CPU offload (moeplan.run.config)
            options.append(cfg.with_(recompute=rc, optimizer_offload=max(f, cfg.optimizer_offload)))
    doubled = replace_parallel(cfg.parallel, cp=cfg.parallel.cp * 2)
    if doubled:
        options.append(cfg.with_(parallel=doubled))
    return fastest_fit(ev, options)


def fastest_fit(ev: Evaluator, options: Iterable[RunConfig]) -> tuple[RunConfig, Any] | None:
    """The alternative that fits (``ev.fits``: the GPU and the host) and runs the most tokens/s/GPU, with its
    estimate; on a tie the first given; None when none fits. Every check that proposes "the fastest alternative
    that fits" (memory, DP, full recompute, dispatcher) asks it."""
    best = None
    for opt in options:
        e = ev(opt)
        if ev.fits(e) and (best is None or e.time.tokens_per_s_per_gpu > best[1].time.tokens_per_s_per_gpu):
            best = (opt, e)
    return best


def _fix_keys(f: Finding) -> dict[str, str]:
    return dict(o.lstrip("+").split("=", 1) for o in f.fix if "=" in o)


def _without_core_attn(cfg: RunConfig) -> RunConfig:
    rc = cfg.recompute
    if rc.granularity != "selective" or "core_attn" not in rc.modules:
        return cfg
    return cfg.with_(recompute=Recompute("selective", rc.modules - {"core_attn"}) if len(rc.modules) > 1 else Recompute())


def _combined_fix(cfg: RunConfig, findings: list[Finding], ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    """One verified fix where two fixes rewrite the same key with different values (the memory fix and
    the core_attn fix both set recompute_modules: applying the core_attn fix alone can leave the run
    out of memory). The memory fix is searched again from the run without core_attn recompute, so the
    one change does both and is checked to fit."""
    by_rule = {f.rule: f for f in findings if f.fix}
    mem, attn = by_rule.get("memory"), by_rule.get("core-attn-recompute")
    if mem is None or attn is None:
        return []
    a, b = _fix_keys(mem), _fix_keys(attn)
    clash = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    if not clash:
        return []
    base = _without_core_attn(cfg)
    alone = ev(base)
    best = _memory_fix(base, ev)
    alone_txt = (f"the core_attn fix alone needs {round_gib(alone.memory.total_bytes)} GiB of {round_gib(ev.fit_budget_bytes)}"
                 + ("" if ev.fits(alone) else " and does not fit"))
    if best is None:
        return [Finding("info", "combined-fix", f"the memory and core-attn-recompute fixes both set {', '.join(clash)}; "
                        f"{alone_txt}; no single change does both and fits: run `moeplan plan`", (),
                        {"keys": clash}, lines.get(clash[0].rpartition('.')[2]))]
    opt, e = best
    return [Finding("error", "combined-fix", f"the memory and core-attn-recompute fixes both set {', '.join(clash)}; "
                    f"{alone_txt}. This one change does both and is checked: {opt.recompute.label()}"
                    f"{f', optimizer offload {opt.optimizer_offload:.0%}' if opt.optimizer_offload != cfg.optimizer_offload else ''} fits "
                    f"({round_gib(e.memory.total_bytes)} GiB of {round_gib(ev.fit_budget_bytes)}) at "
                    f"{e.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU; apply it instead of the two",
                    fix_overrides(cfg, opt), {"keys": clash, "fixed_memory_gib": round_gib(e.memory.total_bytes),
                                              "fixed_tokens_per_s": round(e.time.tokens_per_s_per_gpu),
                                              "replaces": ["memory", "core-attn-recompute"]},
                    lines.get("recompute_modules") or lines.get("recompute_granularity"))]


def _memory(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    total = est.memory.total_bytes
    if total <= ev.fit_budget_bytes:
        return []
    if total <= ev.budget_bytes:  # at the budget's edge: inside the memory model's error, so a warning, never an error
        over = total - ev.fit_budget_bytes
        return [Finding("warning", "memory-edge", f"estimated {round_gib(total)} GiB per GPU is {round_gib(over)} GiB "
                        f"({over / ev.fit_budget_bytes:.1%}) over the {round_gib(ev.fit_budget_bytes)} GiB budget (HBM less the "
                        f"headroom), inside the memory model's measured error ({MEMORY_MODEL_ERROR:.1%}): it may run; watch "
                        "the allocator's reserved memory", numbers={"memory_gib": round_gib(total),
                                                                   "budget_gib": round_gib(ev.fit_budget_bytes),
                                                                   "edge_gib": round_gib(ev.budget_bytes),
                                                                   "memory_model_error": MEMORY_MODEL_ERROR},
                        line=lines.get("recompute_modules") or lines.get("recompute_granularity"))]
    items = {k: v for k, v in est.memory.peak.items.items() if k in MEMORY_ITEMS}
    top, top_b = max(items.items(), key=lambda kv: kv[1])
    budget = ev.fit_budget_bytes
    nums = {"memory_gib": round_gib(total), "capacity_gib": round_gib(budget), "over_gib": round_gib(total - budget),
            "edge_gib": round_gib(ev.budget_bytes), "dominant_item": top, "dominant_gib": round_gib(top_b),
            "rank": est.memory.peak.rank}
    best = _memory_fix(cfg, ev)
    msg = (f"estimated {round_gib(total)} GiB per GPU on pipeline rank {est.memory.peak.rank} exceeds the "
           f"{round_gib(budget)} GiB budget by {round_gib(total - budget)} GiB, past its edge ({round_gib(ev.budget_bytes)} "
           f"GiB, the memory model's error); the largest item is {top} ({round_gib(top_b)} GiB)")
    line = lines.get("recompute_modules") or lines.get("recompute_granularity")
    if best is None:
        return [Finding("error", "memory", msg + "; no single recompute/offload/CP change fits: run `moeplan plan`",
                        numbers=nums, line=line)]
    opt, e = best
    nums.update({"fixed_memory_gib": round_gib(e.memory.total_bytes), "fixed_tokens_per_s": round(e.time.tokens_per_s_per_gpu)})
    return [Finding("error", "memory", msg + f"; the cheapest fix that fits (with the planner's headroom, "
                    f"{round_gib(ev.fit_budget_bytes)} GiB) needs {round_gib(e.memory.total_bytes)} GiB "
                    f"at {e.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU", fix_overrides(cfg, opt), nums, line)]


def _host_memory(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    """What the run offloads (optimizer state, activations) against the host memory per GPU (hardware
    ``host_mem_bytes``): Megatron's HybridDeviceOptimizer keeps the offloaded state in the host's RAM, so a run
    past it fails or swaps. The fix: the largest smaller optimizer offload fraction, else the run without its
    offloaded activations (``offload_modules``), whichever first fits both the GPU and the host."""
    mem = est.memory
    if mem.host_fits:
        return []
    host, cap = mem.host_peak_bytes, mem.host_capacity_bytes
    nums = {"host_gib": round_gib(host), "host_capacity_gib": round_gib(cap), "over_gib": round_gib(host - cap)}
    msg = (f"the run offloads {round_gib(host)} GiB per GPU to the host, which has {round_gib(cap)} GiB per GPU "
           f"(hardware host_mem_bytes): {round_gib(host - cap)} GiB over")
    line = lines.get("optimizer_offload_fraction") or lines.get("optimizer_cpu_offload") or lines.get("offload_modules")
    fixes = [(cfg.with_(optimizer_offload=f), f"optimizer offload {f:.0%}")
             for f in sorted((0.0, *OFFLOAD_FRACTIONS), reverse=True) if f < cfg.optimizer_offload]
    if cfg.offload_modules:
        fixes.append((cfg.with_(offload_modules=frozenset()), "no activation offload (offload_modules)"))
    for opt, said in fixes:
        e = ev(opt)
        if ev.fits(e):
            nums.update({"fixed_offload": opt.optimizer_offload, "fixed_memory_gib": round_gib(e.memory.total_bytes),
                         "fixed_host_gib": round_gib(e.memory.host_peak_bytes)})
            return [Finding("error", "host-memory", msg + f"; {said} fits both ({round_gib(e.memory.total_bytes)} GiB "
                            f"on the GPU, {round_gib(e.memory.host_peak_bytes)} GiB on the host)", fix_overrides(cfg, opt),
                            nums, line)]
    tried = " or ".join(said for _, said in fixes) or "no smaller offload"
    return [Finding("error", "host-memory", msg + f"; {tried} does not fit both the GPU and the host: run "
                    "`moeplan plan`", numbers=nums, line=line)]


def _dp_budget(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    par = cfg.parallel
    if par.dp > 1:
        return []
    squeeze = f"TP x CP x PP = {par.tp}x{par.cp}x{par.pp} = {par.tp * par.cp * par.pp} uses all {par.gpus} GPUs"
    if par.edp == 1:
        squeeze += f", and EP x PP = {par.ep}x{par.pp} does too (EP in the same squeeze)"
    nums: dict[str, Any] = {"dp": par.dp, "edp": par.edp}
    halved = (replace_parallel(par, **change) for change in ({"cp": par.cp // 2}, {"pp": par.pp // 2},
                                                             {"tp": par.tp // 2}) if min(change.values()) >= 1)
    alt = fastest_fit(ev, (cfg.with_(parallel=new) for new in halved if new is not None))
    if alt is None:
        return [Finding("info", "dp-collapsed", f"DP collapsed to 1: {squeeze}; no layout with DP 2 fits "
                        "(halving CP, PP or TP runs out of memory), so keep it but expect no gradient overlap headroom",
                        numbers=nums, line=lines.get("context_parallel_size"))]
    c, e = alt
    nums.update({"alt_tokens_per_s": round(e.time.tokens_per_s_per_gpu), "tokens_per_s": round(est.time.tokens_per_s_per_gpu),
                 "alt_memory_gib": round_gib(e.memory.total_bytes)})
    # as the planner ranks (plan.ranking): a DP >= 2 layout the estimates put below the run's band is no reason to
    # move, and among ties a measured recipe of this model and system comes before the guidance's DP >= 2
    band = 2 * ev.cal.error_band_log
    tps, alt_tps = est.time.tokens_per_s_per_gpu, e.time.tokens_per_s_per_gpu
    below = alt_tps < tps * math.exp(-band)
    recipe = recipe_distance(cfg, ev.gpu)
    if below or (alt_tps < tps * math.exp(band) and recipe is not None and recipe[0] <= 1e-9):
        why = ("its estimate is below this run's error band" if below else
               f"the run is a measured recipe ({recipe[1]['source']}), which the planner puts first among ties"
               if recipe is not None else "")
        return [Finding("info", "dp-collapsed", f"DP collapsed to 1: {squeeze}. {c.parallel.short()} keeps DP "
                        f"{c.parallel.dp} and fits ({round_gib(e.memory.total_bytes)} GiB) at {alt_tps:,.0f} vs "
                        f"{tps:,.0f} tokens/s/GPU, but {why}: keep the layout", numbers=nums,
                        line=lines.get("context_parallel_size"))]
    return [Finding("warning", "dp-collapsed", f"DP collapsed to 1: {squeeze}. {c.parallel.short()} keeps DP "
                    f"{c.parallel.dp}, fits ({round_gib(e.memory.total_bytes)} GiB) and runs at "
                    f"{e.time.tokens_per_s_per_gpu:,.0f} vs {est.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU",
                    fix_overrides(cfg, c), nums, lines.get("context_parallel_size"))]


def _cp_size(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    """The guidance's CP start (seq / 4096) against the run's CP, judged by the estimates: a warning
    with a fix only when the guidance's CP fits and is at least MIN_GAIN faster (or the ring exchange is
    exposed by at least MIN_GAIN of the step); otherwise the deviation is reported as information."""
    par, seq = cfg.parallel, cfg.batch.seq_len
    shard = seq // par.cp
    cp0 = cp_start(seq)
    line = lines.get("context_parallel_size")
    nums: dict[str, Any] = {"cp": par.cp, "shard_tokens": shard, "cp_start": cp0}
    if shard > CP_SHARD_TOO_LARGE:
        head = (f"CP {par.cp} leaves a {shard:,}-token shard per CP rank, far above the ~{CP_SHARD_TOKENS:,} the "
                f"guidance starts from (seq {seq:,} / 4096 -> CP {cp0})")
        alt_par = replace_parallel(par, cp=cp0)
        alt = cfg.with_(parallel=alt_par) if alt_par else None
        e = ev(alt) if alt is not None else None
        if e is None:
            why = (cfg.layout_checks(alt_par)[0].reason if alt_par
                   else "the GPU count does not fold with it")
            return [Finding("info", "cp-too-small", f"{head}; CP {cp0} is not possible here: {why}", (), nums, line)]
        nums.update({"alt_memory_gib": round_gib(e.memory.total_bytes), "alt_tokens_per_s": round(e.time.tokens_per_s_per_gpu)})
        gain = e.time.tokens_per_s_per_gpu / est.time.tokens_per_s_per_gpu - 1
        fits_now = est.memory.total_bytes <= ev.budget_bytes
        if ev.fits(e) and (gain >= MIN_GAIN or not fits_now):
            why = "" if fits_now else f" (this run needs {round_gib(est.memory.total_bytes)} GiB and does not fit)"
            return [Finding("warning", "cp-too-small", f"{head}; this run with only CP changed to {cp0} ({alt_par.short()}) "
                            f"fits ({round_gib(e.memory.total_bytes)} GiB) and runs at "
                            f"{e.time.tokens_per_s_per_gpu:,.0f} vs {est.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU{why}",
                            fix_overrides(cfg, alt), nums, line)]
        verdict = (f"over the planner's budget of {round_gib(ev.fit_budget_bytes)} GiB" if not ev.fits(e)
                   else f"{e.time.tokens_per_s_per_gpu:,.0f} vs {est.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU here")
        return [Finding("info", "cp-too-small", f"{head}; kept: with only CP changed to {cp0} ({alt_par.short()}) it needs "
                        f"{round_gib(e.memory.total_bytes)} GiB, {verdict}",
                        (), nums, line)]
    if par.cp > 1 and shard < MIN_CP_SHARD_TOKENS:
        cp_s = est.time.breakdown_s.get("cp_comm", 0.0)
        step = est.time.step_time_s
        nums.update({"cp_comm_s": round(cp_s, 3), "cp_comm_share": round(cp_s / step, 3)})
        text = (f"CP {par.cp} leaves only {shard:,} tokens per CP rank; the ring exchange exposes {cp_s:,.2f} s per "
                f"step ({cp_s / step:.0%} of the step)")
        alt_par = replace_parallel(par, cp=max(1, cp0))
        alt = cfg.with_(parallel=alt_par) if alt_par else None
        e = ev(alt) if alt is not None else None
        if cp_s / step >= MIN_GAIN and ev.fits(e):
            return [Finding("warning", "cp-too-large", text, fix_overrides(cfg, alt), nums, line)]  # type: ignore[arg-type]
        return [Finding("info", "cp-too-large", text + ("" if cp_s / step >= MIN_GAIN else ", a small share"), (), nums, line)]
    return []


def _recompute(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    out = []
    rc = cfg.recompute
    seq = cfg.batch.seq_len
    line = lines.get("recompute_modules") or lines.get("recompute_granularity")
    without = _core_attn_rule_fix(cfg, cfg.gpu)
    if without is not None:
        e = ev(without)
        if e is not None:
            saved_mib = (e.memory.total_bytes - est.memory.total_bytes) / 2**20
            gain = est.time.step_time_s - e.time.step_time_s
            out.append(Finding("warning", "core-attn-recompute",
                               f"core_attn is recomputed at seq {seq:,}: fused attention keeps only softmax statistics, "
                               f"so it saves {saved_mib:,.0f} MiB while re-running the most expensive op costs "
                               f"{gain:,.2f} s per step ({gain / est.time.step_time_s:.0%})",
                               fix_overrides(cfg, without), {"saves_mib": round(saved_mib), "cost_s": round(gain, 3)}, line))
    if rc.granularity == "full":
        best = fastest_fit(ev, (cfg.with_(recompute=step) for step in _ladder(cfg)
                                if step.granularity in ("selective", "none")))
        if best is not None:
            c, e = best
            gain = e.time.tokens_per_s_per_gpu / est.time.tokens_per_s_per_gpu - 1
            out.append(Finding("warning", "full-recompute", f"full recompute where {c.recompute.label()} fits "
                               f"({round_gib(e.memory.total_bytes)} GiB of {round_gib(ev.fit_budget_bytes)}) and is {gain:.0%} faster "
                               f"({e.time.tokens_per_s_per_gpu:,.0f} vs {est.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU); "
                               "full recompute is the last resort", fix_overrides(cfg, c),
                               {"alt_memory_gib": round_gib(e.memory.total_bytes), "gain": round(gain, 3)}, line))
    return out


def _dispatcher_nvl72(cfg: RunConfig, gpu: GPUSpec, fix_of: Callable[[RunConfig, RunConfig], tuple[str, ...]],
                      nums: dict[str, Any], line: int | None) -> list[Finding]:
    """The dispatcher-nvl72 warning, with and without an estimate (``fix_of`` writes the overrides to HybridEP):
    DeepEP on an NVL72 system, where Megatron Bridge enables it only on SM 8x/9x, B200 and B300
    (bridge/training/flex_dispatcher_backend.py). The flex dispatcher runs DeepEP on the expert-TP x EP group, EP 1
    included (token_dispatcher.py asserts TP x EP > 1)."""
    if not (cfg.dispatcher == "deepep" and gpu.is_nvl72 and tp_ep_group_ranks(cfg.parallel) > 1):
        return []
    return [Finding("warning", "dispatcher-nvl72", f"DeepEP on {gpu.name} (NVL72): Megatron Bridge enables DeepEP "
                    "only on SM 8x/9x, B200 and B300; on NVL72 use HybridEP first",
                    fix_of(cfg, cfg.with_(dispatcher="hybridep")), nums, line)]


def _dispatcher(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    par, gpu = cfg.parallel, ev.gpu
    # DeepEP runs on the flex dispatcher's expert-TP x EP group, EP 1 included (token_dispatcher.py asserts TP x EP > 1)
    if tp_ep_group_ranks(par) <= 1 or cfg.model.first_moe is None:
        return []
    line = lines.get("moe_token_dispatcher_type") or lines.get("moe_flex_dispatcher_backend")
    domains = -(-tp_ep_group_ranks(par) // gpu.nvlink_domain)
    nums = {"ep": par.ep, "nvlink_domains": domains, "tokens_per_s": round(est.time.tokens_per_s_per_gpu)}
    out = _dispatcher_nvl72(cfg, gpu, fix_overrides, dict(nums), line)  # its own numbers: nums grows below
    # the comparison reads the same group: at EP 1 x expert TP > 1 alltoall and allgather move tokens too
    # (timing.moe.ep_kernels), and dispatcher_candidates offers the flex backends
    candidates = dispatcher_candidates(cfg, gpu)
    # each as it can run (sync-free: HybridEP only)
    best = fastest_fit(ev, (cfg if d == cfg.dispatcher else with_dispatcher(cfg, d)[0] for d in candidates))
    if best is None or best[0].dispatcher == cfg.dispatcher:
        return out
    c, e = best
    gain = e.time.tokens_per_s_per_gpu / est.time.tokens_per_s_per_gpu - 1
    if gain < MIN_GAIN:
        return out
    nums.update({"best": c.dispatcher, "best_tokens_per_s": round(e.time.tokens_per_s_per_gpu), "gain": round(gain, 3)})
    group = ep_group_label(par)
    across = cfg.dispatcher in ("alltoall", "allgather") and domains > ALLTOALL_MAX_DOMAINS
    reason = (f"{cfg.dispatcher} with {group} across {domains} NVLink domains" if across
              else f"{cfg.dispatcher} with {group} over {domains} NVLink domain(s)")
    out.append(Finding("warning", "dispatcher", f"{reason}: {c.dispatcher} is estimated {gain:.0%} faster "
                       f"({e.time.tokens_per_s_per_gpu:,.0f} vs {est.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU; EP "
                       f"dispatch/combine {est.time.breakdown_s.get('ep_comm', 0.0):,.2f} s per step now)",
                       fix_overrides(cfg, c), nums, line))
    return out


def _delay_wgrad(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    """EP overlap with delay_wgrad_compute off: the weight-gradient GEMMs stay inside mlp_bwd / attn_bwd, so
    dispatch_bwd and the next combine_bwd wait for them (moeplan.engine.timing.merged_layer_s); Bridge's
    moe_a2a_overlap turns it on with the overlap (scripts/performance/utils/overrides.py)."""
    if not (cfg.ep_overlap and cfg.ep_overlap_allowed and cfg.delay_wgrad is False) or cfg.delay_wgrad_blocked:
        return []
    trial = cfg.with_(delay_wgrad=None)
    e = ev(trial)
    gain = e.time.tokens_per_s_per_gpu / est.time.tokens_per_s_per_gpu - 1
    if gain < MIN_GAIN:
        return []
    nums = {"tokens_per_s": round(est.time.tokens_per_s_per_gpu), "delayed_tokens_per_s": round(e.time.tokens_per_s_per_gpu),
            "gain": round(gain, 3), "ep_comm_s": round(est.time.breakdown_s.get("ep_comm", 0.0), 3),
            "delayed_ep_comm_s": round(e.time.breakdown_s.get("ep_comm", 0.0), 3)}
    return [Finding("warning", "delay-wgrad", f"EP overlap without delay_wgrad_compute: dispatch_bwd and the next "
                    f"combine_bwd wait for the weight-gradient GEMMs; delayed, they run beside them, estimated "
                    f"{gain:.0%} faster ({e.time.tokens_per_s_per_gpu:,.0f} vs {est.time.tokens_per_s_per_gpu:,.0f} "
                    f"tokens/s/GPU; exposed EP dispatch/combine {nums['ep_comm_s']:,.2f} -> "
                    f"{nums['delayed_ep_comm_s']:,.2f} s per step)", fix_overrides(cfg, trial), nums,
                    lines.get("delay_wgrad_compute"))]


def _cuda_graphs(cfg: RunConfig, variable_seq_lengths: bool, lines: dict[str, int]) -> list[Finding]:
    scopes = cfg.cuda_graph_scopes
    if not scopes:
        return []
    line = lines.get("cuda_graph_scope") or lines.get("cuda_graph_modules") or lines.get("cuda_graph_impl")
    off = fix_overrides(cfg, cfg.with_(cuda_graph_scopes=frozenset()))
    out = []
    if variable_seq_lengths:
        out.append(Finding("error", "cuda-graphs-variable-shapes", "CUDA graphs with variable sequence lengths: "
                           "graphs replay fixed shapes; fix the sequence length and micro-batch size or turn graphs off",
                           off, {"scopes": sorted(scopes)}, line))
    dropless = cfg.capacity_factor is None and cfg.rank_capacity_factor is None  # rank buffers: sync-free
    if dropless and scopes & {"full_iteration", "moe"}:
        partial = cfg.with_(cuda_graph_scopes=DROPLESS_MOE_GRAPH_SCOPES)
        out.append(Finding("warning", "cuda-graphs-dropless", f"CUDA graph scope(s) {', '.join(sorted(scopes & {'full_iteration', 'moe'}))} "
                           "capture the expert computation, whose token counts change every step in dropless MoE; "
                           "use the partial scopes (attn, moe_router, moe_preprocess), a capacity factor, or (Megatron-Core >= 0.18, "
                           "HybridEP) moe_expert_rank_capacity_factor with moe_paged_stash",
                           fix_overrides(cfg, partial), {"scopes": sorted(scopes)}, line))
    out.append(Finding("info", "cuda-graphs-timing", "CUDA graphs need static shapes: keep sequence length "
                       f"({cfg.batch.seq_len:,}) and micro-batch ({cfg.batch.mbs}) fixed and enable graphs only after "
                       "shapes and routing are stable", (), {}, line))
    return out


# ------------------------------------------------------------------ TE GroupedLinear's grouped-tensor path
# moeplan.base.te_release: from TE 2.17 an opt-in path (GROUPED_TENSOR_ENV=1) runs the routed experts' quantize and GEMMs
# once per linear instead of once per local expert (timing.expert_host_s); it needs a CUDA 13 container.
_GROUPED_NEEDS = "a CUDA 13 container (cuBLASLt 13.3+; on Hopper 13.4+, 13.5+ for FP8 current scaling)"


def _grouped_tensor(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    """The env var set where TE ignores it, falls back or raises (on the line that sets it, where a launch script
    does); or, unset, the path where the estimates say it gains MIN_GAIN (in the run's TE: a warning; in a newer
    release: info)."""
    if cfg.model.first_moe is None:
        return []
    line = lines.get(GROUPED_TENSOR_ENV)
    arch, prec = cfg.gpu.sm_arch, cfg.precision
    if cfg.experts_op_fused:  # the op fuser's GroupedLinear, not the module the variable selects for
        return ([Finding("warning", "te-grouped-tensor", f"{GROUPED_TENSOR_ENV}=1 changes nothing for the routed experts "
                         "here: they run on TE's op fuser (use_transformer_engine_op_fuser), whose GroupedLinear takes "
                         "its grouped-tensor flow by default where the release has one (TE 2.16+)", (),
                         {"te_version": cfg.te_version}, line)] if cfg.te_grouped_tensor else [])
    if cfg.te_grouped_tensor:
        problem = grouped_tensor_problem(cfg.te_version, arch, prec)
        if problem is None:
            return []
        raises = raising_reason(problem)
        if raises:
            return [Finding("error", "te-grouped-tensor", f"{GROUPED_TENSOR_ENV}=1: {raises}; unset "
                            "it (moeplan costs the per-expert path)", (), {"te_version": cfg.te_version}, line)]
        return [Finding("warning", "te-grouped-tensor", f"{GROUPED_TENSOR_ENV}=1 changes nothing here: {problem}",
                        (), {"te_version": cfg.te_version}, line)]
    releases = list(TE_RELEASES)  # oldest first
    newer = [v for v in releases[releases.index(cfg.te_version):] if grouped_tensor_problem(v, arch, prec) is None]
    if not newer:
        return []
    te = newer[0]
    alt = ev(cfg.with_(te_version=te, te_grouped_tensor=True))
    if alt is None:
        return []
    tps, alt_tps = est.time.tokens_per_s_per_gpu, alt.time.tokens_per_s_per_gpu
    if alt_tps <= tps * (1 + MIN_GAIN):
        return []
    launch, alt_launch = est.time.breakdown_s.get("launch_overhead", 0.0), alt.time.breakdown_s.get("launch_overhead", 0.0)
    nums = {"tokens_per_s": round(tps), "alt_tokens_per_s": round(alt_tps), "launch_overhead_s": round(launch, 3),
            "alt_launch_overhead_s": round(alt_launch, 3), "te_version": te, "env": f"{GROUPED_TENSOR_ENV}=1"}
    local = cfg.model.first_moe.num_experts // cfg.parallel.ep
    what = (f"exposed host launch time is {launch:.3f} s per step, most of it the {local} local experts' {prec} "
            f"quantize and GEMM launches (TE GroupedLinear issues them per expert); its grouped-tensor path runs each "
            f"linear as one grouped quantize and one grouped GEMM: {alt_launch:.3f} s, {alt_tps:,.0f} vs {tps:,.0f} "
            "tokens/s/GPU")
    if te == cfg.te_version:
        return [Finding("warning", "te-grouped-tensor", f"{what}; set {GROUPED_TENSOR_ENV}=1 in the job's environment "
                        f"(TE {te}; needs {_GROUPED_NEEDS})", (), nums)]
    return [Finding("info", "te-grouped-tensor", f"{what} from TE {te} (this run: TE {te_label(cfg.te_version)}) with "
                    f"{GROUPED_TENSOR_ENV}=1 and {_GROUPED_NEEDS}", (), nums)]


# ------------------------------------------------------------------ data-parallel sharding and Muon
# Each finding compares the run with the alternative the estimates prefer (moeplan.engine.fsdp, moeplan.engine.muon through
# moeplan.engine.memory / moeplan.engine.timing) and cites the numbers.

# Megatron-LM warns (arguments.py, core_v0.16.1) that TP/CP comm overlap wants CUDA_DEVICE_MAX_CONNECTIONS=1
# while FSDP needs it > 1, on architectures before Blackwell (compute capability < 10).
_HOPPER_AND_OLDER = ("h100", "h200", "h800", "a100", "gh200")


def lint_sharding(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    out: list[Finding] = []
    f = fields_for(cfg.mcore_version)
    tps = est.time.tokens_per_s_per_gpu
    mem = est.memory.total_bytes
    if cfg.fsdp is not None and not f.fsdp_strategies:
        out.append(Finding("error", "fsdp-version", f"Megatron-FSDP (use_megatron_fsdp) needs Megatron-Core >= 0.14; "
                           f"{f.version} has only the deprecated use_custom_fsdp", line=lines.get("use_megatron_fsdp")))
        return out
    if cfg.optimizer == "adam" and f.fsdp_strategies:
        out += _compare_sharding(cfg, est, ev, lines, tps, mem)
    if cfg.fsdp is not None and (cfg.parallel.tp > 1 or cfg.parallel.cp > 1) and cfg.gpu.name.lower() in _HOPPER_AND_OLDER:
        out.append(Finding("info", "fsdp-device-connections",
                           f"Megatron-FSDP with TP {cfg.parallel.tp} / CP {cfg.parallel.cp} on {cfg.gpu.name}: FSDP needs "
                           "CUDA_DEVICE_MAX_CONNECTIONS > 1 while TP/CP communication overlap prefers 1 (Megatron-LM "
                           "warns; from Blackwell the requirement is gone)", line=lines.get("use_megatron_fsdp")))
    if cfg.optimizer == "muon":
        out += _muon(cfg, est, ev, lines)
    return out


def _compare_sharding(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int], tps: float,
                      mem: float) -> list[Finding]:
    """The other sharding choice (distributed optimizer <-> fully sharded Megatron-FSDP), when it fits
    where the run does not, or is at least MIN_GAIN faster."""
    alt_cfg = cfg.with_(fsdp=None, fsdp_double_buffer=False) if cfg.fsdp else cfg.with_(fsdp=FULL_SHARD)
    alt = ev(alt_cfg)
    if alt is None:
        return []
    line = lines.get("use_megatron_fsdp", lines.get("use_distributed_optimizer"))
    name = "Megatron-FSDP optim_grads_params" if alt_cfg.fsdp else "the distributed optimizer"
    mine = f"Megatron-FSDP {cfg.fsdp}" if cfg.fsdp else "the distributed optimizer"
    nums = {"memory_gib": round_gib(mem), "alt_memory_gib": round_gib(alt.memory.total_bytes), "tokens_per_s": round(tps),
            "alt_tokens_per_s": round(alt.time.tokens_per_s_per_gpu),
            "dp_comm_s": round(est.time.breakdown_s.get("dp_comm", 0.0), 3),
            "alt_dp_comm_s": round(alt.time.breakdown_s.get("dp_comm", 0.0), 3)}
    if not ev.fits(est) and not ev.fits(alt) and alt_cfg.fsdp:
        # the sharding alone is not enough: the first recompute step that fits with it
        ladder = _ladder(cfg)
        options = [(rc, cfg.optimizer_offload) for rc in ladder] + [(ladder[-1], f) for f in OFFLOAD_FRACTIONS
                                                                    if f > cfg.optimizer_offload]
        for rc, offload in options:
            trial = alt_cfg.with_(recompute=rc, optimizer_offload=offload)
            if trial.ep_overlap and not trial.ep_overlap_allowed:
                trial = trial.with_(ep_overlap=False)
            e = ev(trial)
            if ev.fits(e):
                alt_cfg, alt = trial, e
                nums.update(alt_memory_gib=round_gib(e.memory.total_bytes), alt_tokens_per_s=round(e.time.tokens_per_s_per_gpu))
                name += f" with recompute {rc.label()}" + (f" and {offload:.0%} optimizer offload"
                                                             if offload != cfg.optimizer_offload else "")
                break
    fix = fix_overrides(cfg, alt_cfg)
    # the run's own GPU memory (a host overflow is host-memory's): an error only past the budget's edge
    # (moeplan.engine.budget); at the edge the other choice is a warning, as the memory-edge finding is
    if est.memory.total_bytes > ev.budget_bytes and ev.fits(alt):
        return [Finding("error", "dp-sharding", f"with {mine} the run needs {round_gib(mem)} GiB; {name} shards weights and "
                        f"gradients differently and needs {round_gib(alt.memory.total_bytes)} GiB, which fits "
                        f"({alt.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU)", fix, nums, line)]
    if not ev.gpu_fits(est) and ev.fits(alt):
        return [Finding("warning", "dp-sharding", f"with {mine} the run needs {round_gib(mem)} GiB, at the edge of the "
                        f"{round_gib(ev.fit_budget_bytes)} GiB budget; {name} needs {round_gib(alt.memory.total_bytes)} GiB, "
                        f"which fits ({alt.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU)", fix, nums, line)]
    if ev.fits(alt) and alt.time.tokens_per_s_per_gpu > tps * (1 + MIN_GAIN):
        why = (f"exposed data-parallel communication {nums['dp_comm_s']} s vs {nums['alt_dp_comm_s']} s per step"
               if cfg.fsdp else f"it frees {round_gib(mem - alt.memory.total_bytes)} GiB for the memory knobs")
        return [Finding("warning", "dp-sharding", f"{name} fits ({round_gib(alt.memory.total_bytes)} GiB) and runs at "
                        f"{alt.time.tokens_per_s_per_gpu:,.0f} vs {tps:,.0f} tokens/s/GPU with {mine}: {why}",
                        fix, nums, line)]
    return []


def _muon(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    out: list[Finding] = []
    if not cfg.muon_layer_wise and cfg.parallel.dp * cfg.parallel.cp > 1:
        alt_cfg = cfg.with_(muon_layer_wise=True)
        alt = ev(alt_cfg)
        if alt is not None:
            saved = est.memory.peak.items["optimizer_states"] - alt.memory.peak.items["optimizer_states"]
            out.append(Finding("warning", "muon-layer-wise",
                               f"plain muon keeps the whole optimizer state on every DP rank; dist_muon (layer-wise "
                               f"distributed optimizer) deals it over DP x CP {cfg.parallel.dp * cfg.parallel.cp} and "
                               f"saves {round_gib(saved)} GiB per GPU", fix_overrides(cfg, alt_cfg),
                               {"saved_gib": round_gib(saved)}, lines.get("optimizer")))
    return out


