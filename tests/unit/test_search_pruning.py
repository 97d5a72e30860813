"""The plan search's pruning (moeplan.plan.bounds) never changes its answer.

Two checks: the pruned search returns exactly what the exhaustive search returns (top plans, their
estimates, the counts and the closest miss) on a spread of models, GPUs, lengths and pinned knobs;
and the throughput bound is at or above the first-phase estimate of every fitting layout (so it is
sound on all layouts, not only on those that decide the top plans)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from moeplan.plan.advice import dispatcher_candidates, recompute_ladder
from moeplan.plan.bounds import ThroughputBound
from moeplan.hardware import load_gpu
from moeplan.models import load_model
from moeplan.run.parallel import Batch, build_pipeline
from moeplan.plan.planner import BOUND_SLACK, _cheapest_fitting, _fits, _layouts, _memory_options, _strongest, search
from moeplan.plan.space import SearchSpace
from moeplan.run.config import Recompute, RunConfig
from moeplan.engine.timing.attention import best_cp_comm_type
from moeplan.engine.timing.step import estimate_time

# (model, gpu, gpus, seq_len, gbs, keyword arguments of search)
CASES = [
    ("qwen3-30b-a3b", "h100", 64, 32768, 128, {}),
    ("qwen3-30b-a3b", "h100", 16, 4096, 256, {"top": 3}),
    ("deepseek-v3", "h100", 256, 131072, 128, {}),
    ("deepseek-v3", "gb200", 512, 32768, 512, {"precision": "mxfp8", "grad_fp32": False, "bf16_moments": True}),
    ("qwen3-235b-a22b", "gb200", 256, 65536, 256, {"space": SearchSpace(tp=2)}),
    ("qwen3-next-80b-a3b", "h100", 64, 65536, 64, {"mcore_version": "0.18"}),
    ("mixtral-8x7b", "h100", 32, 8192, 256, {"space": SearchSpace(recompute=Recompute("full"))}),
    ("kimi-k2", "h100", 1024, 131072, 256, {"space": SearchSpace(cp=16), "moe_imbalance": 1.2}),
    ("deepseek-v3", "h100", 64, 131072, 64, {}),  # nothing fits: the closest miss must agree
    # the scale of benchmarks/plan_scale.py: many layouts at 4K (memory options with offload), few at 1M
    ("deepseek-v3", "h100", 4096, 4096, 32768, {}),
    ("kimi-k2", "gb200", 16384, 4096, 131072, {}),
    ("kimi-k2", "h100", 16384, 1048576, 512, {}),
    ("qwen3-235b-a22b", "h100", 1024, 1048576, 32, {}),
]


def _summary(result):
    plans = [(p.config, p.estimate.time.tokens_per_s_per_gpu, p.estimate.memory.total_bytes) for p in result.plans]
    return (plans, result.gbs, result.requested_gbs, result.layouts_considered, result.layouts_feasible,
            result.closest, result.notes)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-{c[3]}")
def test_pruned_search_equals_exhaustive(case):
    model, gpu_name, gpus, seq, gbs, kw = case
    spec, gpu = load_model(model), load_gpu(gpu_name)
    pruned = search(spec, gpu, gpus, seq, gbs, **kw)
    full = search(spec, gpu, gpus, seq, gbs, exhaustive=True, **kw)
    assert _summary(pruned) == _summary(full)
    assert full.layouts_evaluated == full.layouts_feasible
    assert pruned.layouts_evaluated <= full.layouts_evaluated


@pytest.mark.parametrize("case", CASES[:6], ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-{c[3]}")
def test_bound_is_above_every_layouts_estimate(case):
    model, gpu_name, gpus, seq, gbs, kw = case
    spec, gpu = load_model(model), load_gpu(gpu_name)
    space = kw.get("space", SearchSpace())
    version = kw.get("mcore_version", "0.16")
    numerics = {k: kw[k] for k in ("grad_fp32", "bf16_moments") if k in kw}
    batch = Batch(seq, gbs, 1)
    budget = gpu.hbm_bytes * (1 - space.headroom)
    ladder = recompute_ladder(spec, seq, version)
    bound = ThroughputBound(gpu)
    checked = 0
    options_checked = 0
    for par, mbs in _layouts(spec, gpu, gpus, batch, space, version):
        cfg = RunConfig(spec, par, replace(batch, mbs=mbs), gpu=gpu, precision=kw.get("precision", "bf16"),
                        moe_imbalance=kw.get("moe_imbalance", 1.0), mcore_version=version, **numerics)
        cfg = cfg.evolve(dispatcher=dispatcher_candidates(cfg, gpu)[0])
        cfg = cfg.evolve(ep_overlap=cfg.ep_overlap_allowed)
        pipe = build_pipeline(spec, par)
        ok, smallest = _fits(_strongest(cfg, space, ladder, pipe), gpu, pipe, budget)
        if not ok:
            continue
        cand = _cheapest_fitting(cfg, gpu, pipe, space, ladder, budget, smallest)
        upper = bound.tokens_per_s_per_gpu(cfg, pipe)
        assert math.isfinite(upper)
        assert cand.tokens_per_s_per_gpu <= upper * (1 + BOUND_SLACK), par.short()
        # the bound of each memory option the first phase costs (as pass 2 tightens it) is above that
        # option's estimate, and the best of them above the layout's first-phase answer
        cp_type = None
        tight = 0.0
        for opt, _ in _memory_options(cfg, pipe, space, ladder, budget, smallest, nvlink_domain=gpu.nvlink_domain):
            cp_type = cp_type or best_cp_comm_type(opt, gpu)
            opt = opt.evolve(cp_comm_type=cp_type)
            opt_upper = bound.option_tokens_per_s_per_gpu(opt, pipe)
            est = estimate_time(opt, gpu, pipeline=pipe, validated=True).tokens_per_s_per_gpu
            assert est <= opt_upper * (1 + BOUND_SLACK), (par.short(), opt.recompute.label(), opt.optimizer_offload)
            tight = max(tight, opt_upper)
            options_checked += 1
        assert cand.tokens_per_s_per_gpu <= tight * (1 + BOUND_SLACK), par.short()
        checked += 1
    assert checked > 0 and options_checked >= checked
