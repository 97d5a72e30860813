"""Linter checks on data-parallel sharding (distributed optimizer vs Megatron-FSDP) and on Muon.

Each finding compares the run with the alternative the estimates prefer (moeplan.fsdp, moeplan.muon
through moeplan.memory / moeplan.timing) and cites the numbers; called from moeplan.rules.lint.
"""

from __future__ import annotations

from typing import Any

from moeplan.advice import _gib
from moeplan.estimate import Evaluator
from moeplan.fsdp import FULL_SHARD
from moeplan.rules import MIN_GAIN, Finding, fix_overrides
from moeplan.run import RunConfig

# Megatron-LM warns (arguments.py, core_v0.16.1) that TP/CP comm overlap wants CUDA_DEVICE_MAX_CONNECTIONS=1
# while FSDP needs it > 1, on architectures before Blackwell (compute capability < 10).
_HOPPER_AND_OLDER = ("h100", "h200", "h800", "a100", "gh200")


def lint_sharding(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    from moeplan.megatron import fields_for

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
    if cfg.fsdp is not None and (cfg.parallel.tp > 1 or cfg.parallel.cp > 1) and cfg.gpu.lower() in _HOPPER_AND_OLDER:
        out.append(Finding("info", "fsdp-device-connections",
                           f"Megatron-FSDP with TP {cfg.parallel.tp} / CP {cfg.parallel.cp} on {cfg.gpu}: FSDP needs "
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
    nums = {"memory_gib": _gib(mem), "alt_memory_gib": _gib(alt.memory.total_bytes), "tokens_per_s": round(tps),
            "alt_tokens_per_s": round(alt.time.tokens_per_s_per_gpu),
            "dp_comm_s": round(est.time.breakdown_s.get("dp_comm", 0.0), 3),
            "alt_dp_comm_s": round(alt.time.breakdown_s.get("dp_comm", 0.0), 3)}
    if not ev.fits(est) and not ev.fits(alt) and alt_cfg.fsdp:
        # the sharding alone is not enough: the first recompute step that fits with it
        from moeplan.advice import recompute_ladder

        ladder = recompute_ladder(cfg.model, cfg.batch.seq_len, cfg.mcore_version)
        options = [(rc, cfg.optimizer_offload) for rc in ladder] + [(ladder[-1], f) for f in (0.25, 0.5, 0.75, 1.0)
                                                                    if f > cfg.optimizer_offload]
        for rc, offload in options:
            trial = alt_cfg.with_(recompute=rc, optimizer_offload=offload)
            if trial.ep_overlap and not trial.ep_overlap_allowed:
                trial = trial.with_(ep_overlap=False)
            e = ev(trial)
            if ev.fits(e):
                alt_cfg, alt = trial, e
                nums.update(alt_memory_gib=_gib(e.memory.total_bytes), alt_tokens_per_s=round(e.time.tokens_per_s_per_gpu))
                name += f" with recompute {rc.label()}" + (f" and {offload:.0%} optimizer offload"
                                                             if offload != cfg.optimizer_offload else "")
                break
    fix = fix_overrides(cfg, alt_cfg)
    if not ev.fits(est) and ev.fits(alt):
        return [Finding("error", "dp-sharding", f"with {mine} the run needs {_gib(mem)} GiB; {name} shards weights and "
                        f"gradients differently and needs {_gib(alt.memory.total_bytes)} GiB, which fits "
                        f"({alt.time.tokens_per_s_per_gpu:,.0f} tokens/s/GPU)", fix, nums, line)]
    if ev.fits(alt) and alt.time.tokens_per_s_per_gpu > tps * (1 + MIN_GAIN):
        why = (f"exposed data-parallel communication {nums['dp_comm_s']} s vs {nums['alt_dp_comm_s']} s per step"
               if cfg.fsdp else f"it frees {_gib(mem - alt.memory.total_bytes)} GiB for the memory knobs")
        return [Finding("warning", "dp-sharding", f"{name} fits ({_gib(alt.memory.total_bytes)} GiB) and runs at "
                        f"{alt.time.tokens_per_s_per_gpu:,.0f} vs {tps:,.0f} tokens/s/GPU with {mine}: {why}",
                        fix, nums, line)]
    return []


def _muon(cfg: RunConfig, est: Any, ev: Evaluator, lines: dict[str, int]) -> list[Finding]:
    out: list[Finding] = []
    if cfg.optimizer_offload > 0:
        host = est.memory.peak
        out.append(Finding("warning", "muon-offload",
                           f"optimizer CPU offload with Muon moves only Adam's share (embeddings, output layer, "
                           f"norms): {_gib(host.host_bytes)} GiB on the host; Megatron-Core's Muon keeps each "
                           "matrix's fp32 master and momentum on the GPU",
                           numbers={"host_gib": _gib(host.host_bytes)}, line=lines.get("optimizer_cpu_offload")))
    if not cfg.muon_layer_wise and cfg.parallel.dp * cfg.parallel.cp > 1:
        alt_cfg = cfg.with_(muon_layer_wise=True)
        alt = ev(alt_cfg)
        if alt is not None:
            saved = est.memory.peak.items["optimizer_states"] - alt.memory.peak.items["optimizer_states"]
            out.append(Finding("warning", "muon-layer-wise",
                               f"plain muon keeps the whole optimizer state on every DP rank; dist_muon (layer-wise "
                               f"distributed optimizer) deals it over DP x CP {cfg.parallel.dp * cfg.parallel.cp} and "
                               f"saves {_gib(saved)} GiB per GPU", fix_overrides(cfg, alt_cfg),
                               {"saved_gib": _gib(saved)}, lines.get("optimizer")))
    return out


__all__ = ["lint_sharding"]
