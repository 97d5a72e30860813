"""The linter: the long-context guidance as checks on an existing run, each finding with its numbers
and the concrete fix (the Megatron Bridge overrides that change).

Every check compares the run with the alternative the guidance prefers, using the memory and time
estimates (moeplan.memory, moeplan.timing); a fix is only proposed when the estimates say it works.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from moeplan.advice import (
    CP_SHARD_TOKENS,
    DEFAULT_HEADROOM,
    _gib,
    LONG_CONTEXT_TOKENS,
    MIN_CP_SHARD_TOKENS,
    cp_start,
    dispatcher_candidates,
    recompute_ladder,
)
from moeplan.estimate import Evaluator
from moeplan.hardware import GPUSpec
from moeplan.memory import MEMORY_ITEMS
from moeplan.parallel import check_layout, replace_parallel
from moeplan.run import Recompute, RunConfig

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
    from moeplan import megatron

    return megatron.to_overrides(cfg, cfg.mcore_version)


def fix_overrides(before: RunConfig, after: RunConfig) -> tuple[str, ...]:
    """The Megatron Bridge overrides that turn ``before`` into ``after``."""
    old = set(_overrides(before))
    return tuple(o for o in _overrides(after) if o not in old)


def lint(cfg: RunConfig, gpu: GPUSpec, *, headroom: float = 0.0, variable_seq_lengths: bool = False,
         unknown: tuple[tuple[str, int], ...] = (), lines: dict[str, int] | None = None) -> list[Finding]:
    """All findings for a run, errors first. ``unknown``: (key, line) pairs the reader did not know."""
    lines = lines or {}
    findings: list[Finding] = []
    for key, line in unknown:
        findings.append(Finding("warning", "unknown-key", f"unknown key '{key}': moeplan does not model it and "
                                "Megatron may reject it; check the spelling", line=line))
    layout_errors = check_layout(cfg.model, cfg.parallel, cfg.batch, cfg.mcore_version)
    field_of = {"seq-cp": "context_parallel_size", "experts-ep": "expert_model_parallel_size",
                "layers-pp": "pipeline_model_parallel_size", "gbs": "global_batch_size",
                "heads-tp": "tensor_model_parallel_size", "query-groups-tp": "tensor_model_parallel_size",
                "attention-folding": "tensor_model_parallel_size", "expert-folding": "expert_model_parallel_size",
                "pipeline-layout": "pipeline_model_parallel_layout", "seq-tp": "tensor_model_parallel_size"}
    for bad in layout_errors:
        findings.append(Finding("error", bad.rule, bad.reason, _layout_fix(cfg, bad.rule),
                                line=lines.get(field_of.get(bad.rule, ""))))
    if layout_errors:
        return sort_findings(findings)
    from moeplan.api import knob_problem

    problem = knob_problem(cfg, gpu)
    if problem:
        field = "cp_comm_type" if problem.startswith("cp_comm") else "overlap_moe_expert_parallel_comm"
        fixed = cfg.with_(cp_comm_type="p2p") if field == "cp_comm_type" else cfg.with_(ep_overlap=False)
        findings.append(Finding("error", "knob-layout", problem, fix_overrides(cfg, fixed), line=lines.get(field)))
        cfg = fixed
    ev = Evaluator(gpu, gpu.hbm_bytes * (1 - headroom), gpu.hbm_bytes * (1 - max(headroom, DEFAULT_HEADROOM)))
    est = ev(cfg)
    assert est is not None
    findings += _memory(cfg, est, ev, lines)
    findings += _dp_budget(cfg, est, ev, lines)
    findings += _cp_size(cfg, est, ev, lines)
    findings += _recompute(cfg, est, ev, lines)
    findings += _dispatcher(cfg, est, ev, lines)
    findings += _cuda_graphs(cfg, variable_seq_lengths, lines)
    from moeplan.sharding_rules import lint_sharding  # distributed optimizer vs Megatron-FSDP, Muon

    findings += lint_sharding(cfg, est, ev, lines)
    return sort_findings(findings)


def _layout_fix(cfg: RunConfig, rule: str) -> tuple[str, ...]:
    """For an uneven pipeline split: the balanced layout string that makes it valid."""
    if rule != "layers-pp" or cfg.model.num_layers < cfg.parallel.pp * cfg.parallel.vpp:
        return ()
    from moeplan.megatron import format_override_value
    from moeplan.parallel import balanced_layout

    layout = balanced_layout(cfg.model, cfg.parallel.pp, cfg.parallel.vpp)
    return (f"model.pipeline_model_parallel_layout={format_override_value(layout)}",) if layout else ()


SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then information (stable)."""
    return sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity])


def _memory(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    total = est.memory.total_bytes
    if total <= ev.budget_bytes:
        return []
    items = {k: v for k, v in est.memory.peak.items.items() if k in MEMORY_ITEMS}
    top, top_b = max(items.items(), key=lambda kv: kv[1])
    nums = {"memory_gib": _gib(total), "capacity_gib": _gib(ev.budget_bytes), "over_gib": _gib(total - ev.budget_bytes),
            "dominant_item": top, "dominant_gib": _gib(top_b), "rank": est.memory.peak.rank}
    # cheapest fix: the fastest fitting config among recompute ladder steps, offload, doubled CP
    options: list[RunConfig] = []
    for rc in recompute_ladder(cfg.model, cfg.batch.seq_len, cfg.mcore_version):
        options.append(cfg.with_(recompute=rc))
        for f in (0.5, 1.0):
            options.append(cfg.with_(recompute=rc, optimizer_offload=max(f, cfg.optimizer_offload)))
    doubled = replace_parallel(cfg.parallel, cp=cfg.parallel.cp * 2)
    if doubled:
        options.append(cfg.with_(parallel=doubled))
    best = None
    for opt in options:
        e = ev(opt)
        if ev.fits(e) and (best is None or e.time.tokens_per_s_per_gpu > best[1].time.tokens_per_s_per_gpu):
            best = (opt, e)
    msg = (f"estimated {_gib(total)} GiB per GPU on pipeline rank {est.memory.peak.rank} exceeds the "
           f"{_gib(ev.budget_bytes)} GiB available by {_gib(total - ev.budget_bytes)} GiB; the largest item is {top} "
           f"({_gib(top_b)} GiB)")
    line = lines.get("recompute_modules") or lines.get("recompute_granularity")
    if best is None:
        return [Finding("error", "memory", msg + "; no single recompute/offload/CP change fits: run `moeplan plan`",
                        numbers=nums, line=line)]
    opt, e = best
    nums.update({"fixed_memory_gib": _gib(e.memory.total_bytes), "fixed_tokens_per_s": round(e.time.tokens_per_s_per_gpu)})
    return [Finding("error", "memory", msg + f"; the cheapest fix that fits (with the planner's headroom, "
                    f"{_gib(ev.fit_budget_bytes)} GiB) needs {_gib(e.memory.total_bytes)} GiB "
                    f"at {e.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU", fix_overrides(cfg, opt), nums, line)]


def _dp_budget(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    par = cfg.parallel
    if par.dp > 1:
        return []
    squeeze = f"TP x CP x PP = {par.tp}x{par.cp}x{par.pp} = {par.tp * par.cp * par.pp} uses all {par.gpus} GPUs"
    if par.edp == 1:
        squeeze += f", and EP x PP = {par.ep}x{par.pp} does too (EP in the same squeeze)"
    nums: dict[str, Any] = {"dp": par.dp, "edp": par.edp}
    alt = None
    for change in ({"cp": par.cp // 2}, {"pp": par.pp // 2}, {"tp": par.tp // 2}):
        if min(change.values()) < 1:
            continue
        new = replace_parallel(par, **change)
        if new is None:
            continue
        c = cfg.with_(parallel=new)
        e = ev(c)
        if ev.fits(e) and (alt is None or e.time.tokens_per_s_per_gpu > alt[1].time.tokens_per_s_per_gpu):
            alt = (c, e)
    if alt is None:
        return [Finding("info", "dp-collapsed", f"DP collapsed to 1: {squeeze}; no layout with DP 2 fits "
                        "(halving CP, PP or TP runs out of memory), so keep it but expect no gradient overlap headroom",
                        numbers=nums, line=lines.get("context_parallel_size"))]
    c, e = alt
    nums.update({"alt_tokens_per_s": round(e.time.tokens_per_s_per_gpu), "tokens_per_s": round(est.time.tokens_per_s_per_gpu),
                 "alt_memory_gib": _gib(e.memory.total_bytes)})
    return [Finding("warning", "dp-collapsed", f"DP collapsed to 1: {squeeze}. {c.parallel.short()} keeps DP "
                    f"{c.parallel.dp}, fits ({_gib(e.memory.total_bytes)} GiB) and runs at "
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
            why = (check_layout(cfg.model, alt_par, cfg.batch, cfg.mcore_version)[0].reason if alt_par
                   else "the GPU count does not fold with it")
            return [Finding("info", "cp-too-small", f"{head}; CP {cp0} is not possible here: {why}", (), nums, line)]
        nums.update({"alt_memory_gib": _gib(e.memory.total_bytes), "alt_tokens_per_s": round(e.time.tokens_per_s_per_gpu)})
        gain = e.time.tokens_per_s_per_gpu / est.time.tokens_per_s_per_gpu - 1
        fits_now = est.memory.total_bytes <= ev.budget_bytes
        if ev.fits(e) and (gain >= MIN_GAIN or not fits_now):
            why = "" if fits_now else f" (this run needs {_gib(est.memory.total_bytes)} GiB and does not fit)"
            return [Finding("warning", "cp-too-small", f"{head}; CP {cp0} fits ({_gib(e.memory.total_bytes)} GiB) and runs at "
                            f"{e.time.tokens_per_s_per_gpu:,.0f} vs {est.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU{why}",
                            fix_overrides(cfg, alt), nums, line)]
        verdict = (f"over the planner's budget of {_gib(ev.fit_budget_bytes)} GiB" if not ev.fits(e)
                   else f"{e.time.tokens_per_s_per_gpu:,.0f} vs {est.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU here")
        return [Finding("info", "cp-too-small", f"{head}; kept: CP {cp0} needs {_gib(e.memory.total_bytes)} GiB, {verdict}",
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
    if rc.granularity == "selective" and "core_attn" in rc.modules and seq >= LONG_CONTEXT_TOKENS:
        without = cfg.with_(recompute=Recompute("selective", rc.modules - {"core_attn"}) if len(rc.modules) > 1 else Recompute())
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
        best = None
        for step in recompute_ladder(cfg.model, seq, cfg.mcore_version):
            if step.granularity != "selective" and step.granularity != "none":
                continue
            c = cfg.with_(recompute=step)
            e = ev(c)
            if ev.fits(e) and (best is None or e.time.tokens_per_s_per_gpu > best[1].time.tokens_per_s_per_gpu):
                best = (c, e)
        if best is not None:
            c, e = best
            gain = e.time.tokens_per_s_per_gpu / est.time.tokens_per_s_per_gpu - 1
            out.append(Finding("warning", "full-recompute", f"full recompute where {c.recompute.label()} fits "
                               f"({_gib(e.memory.total_bytes)} GiB of {_gib(ev.fit_budget_bytes)}) and is {gain:.0%} faster "
                               f"({e.time.tokens_per_s_per_gpu:,.0f} vs {est.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU); "
                               "full recompute is the last resort", fix_overrides(cfg, c),
                               {"alt_memory_gib": _gib(e.memory.total_bytes), "gain": round(gain, 3)}, line))
    return out


def _dispatcher(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    par, gpu = cfg.parallel, ev.gpu
    if par.ep <= 1 or cfg.model.first_moe is None:
        return []
    line = lines.get("moe_token_dispatcher_type") or lines.get("moe_flex_dispatcher_backend")
    candidates = dispatcher_candidates(cfg, gpu)
    domains = -(-par.ep * par.etp // gpu.nvlink_domain)
    best = None
    for d in candidates:
        c = cfg.with_(dispatcher=d)
        e = ev(c)
        if ev.fits(e) and (best is None or e.time.tokens_per_s_per_gpu > best[1].time.tokens_per_s_per_gpu):
            best = (c, e)
    nums = {"ep": par.ep, "nvlink_domains": domains, "tokens_per_s": round(est.time.tokens_per_s_per_gpu)}
    out = []
    if cfg.dispatcher == "deepep" and gpu.is_nvl72:
        out.append(Finding("warning", "dispatcher-nvl72", f"DeepEP on {gpu.name} (NVL72): Megatron Bridge enables DeepEP "
                           "only on SM 8x/9x, B200 and B300; on NVL72 use HybridEP first",
                           fix_overrides(cfg, cfg.with_(dispatcher="hybridep")), nums, line))
    if best is None or best[0].dispatcher == cfg.dispatcher:
        return out
    c, e = best
    gain = e.time.tokens_per_s_per_gpu / est.time.tokens_per_s_per_gpu - 1
    if gain < MIN_GAIN:
        return out
    nums.update({"best": c.dispatcher, "best_tokens_per_s": round(e.time.tokens_per_s_per_gpu), "gain": round(gain, 3)})
    reason = (f"alltoall with EP {par.ep} across {domains} NVLink domains" if cfg.dispatcher in ("alltoall", "allgather")
              and domains > ALLTOALL_MAX_DOMAINS else f"{cfg.dispatcher} with EP {par.ep} over {domains} NVLink domain(s)")
    out.append(Finding("warning", "dispatcher", f"{reason}: {c.dispatcher} is estimated {gain:.0%} faster "
                       f"({e.time.tokens_per_s_per_gpu:,.0f} vs {est.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU; EP "
                       f"dispatch/combine {est.time.breakdown_s.get('ep_comm', 0.0):,.2f} s per step now)",
                       fix_overrides(cfg, c), nums, line))
    return out


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
        partial = cfg.with_(cuda_graph_scopes=frozenset({"attn", "moe_router", "moe_preprocess"}))
        out.append(Finding("warning", "cuda-graphs-dropless", f"CUDA graph scope(s) {', '.join(sorted(scopes & {'full_iteration', 'moe'}))} "
                           "capture the expert computation, whose token counts change every step in dropless MoE; "
                           "use the partial scopes (attn, moe_router, moe_preprocess), a capacity factor, or (Megatron-Core >= 0.18, "
                           "HybridEP) moe_expert_rank_capacity_factor with moe_paged_stash",
                           fix_overrides(cfg, partial), {"scopes": sorted(scopes)}, line))
    out.append(Finding("info", "cuda-graphs-timing", "CUDA graphs need static shapes: keep sequence length "
                       f"({cfg.batch.seq_len:,}) and micro-batch ({cfg.batch.mbs}) fixed and enable graphs only after "
                       "shapes and routing are stable", (), {}, line))
    return out
