"""The planner's memory ladder cache (moeplan.engine.memory.LayoutMemory) changes no number: for whole
families of layouts (every CP, DP and EP of some TP x PP x VPP x MBS; FSDP, Muon, FP8, CUDA graphs,
dispatchers), every recompute x offload option asked in a shuffled order of the layout's LayoutMemory,
with one dict shared by all layouts as the search shares it, equals the most loaded rank of the full
item-by-item estimate (estimate_memory, every pipeline rank, items added in their order), exactly. This
also covers the ranks it leaves out (peak_rank_profiles) and what layouts reuse through the shared dict
(activations across EP, parameter state across CP x DP splits)."""

from __future__ import annotations

import random

from moeplan.plan.advice import recompute_ladder
from moeplan.hardware import load_gpu
from moeplan.engine.memory import LayoutMemory, MEMORY_ITEMS, estimate_memory, peak_rank_profiles, rank_profiles
from moeplan.models import load_model
from moeplan.run.parallel import Batch, build_pipeline
from moeplan.plan.planner import _layouts
from moeplan.plan.space import SearchSpace
from moeplan.base.vocab import OFFLOAD_FRACTIONS
from moeplan.run.config import RunConfig


def _reference(cfg: RunConfig, gpu, pipe) -> float:
    """Most loaded rank of the item-by-item estimate, items added left to right."""
    est = estimate_memory(cfg, gpu.hbm_bytes, gpu.nvlink_domain, pipe, validated=True)
    totals = []
    for rank in est.ranks:
        total = 0.0
        for name in MEMORY_ITEMS:
            total += rank.items[name]
        totals.append(total)
    return max(totals)


def _bases(model: str, gpu_name: str, gpus: int, seq: int, gbs: int, version: str = "0.16"):
    spec, gpu = load_model(model), load_gpu(gpu_name)
    out = []
    layouts = _layouts(spec, gpu, gpus, Batch(seq, gbs, 1), SearchSpace(), version)
    families = sorted({(par.tp, par.pp, par.vpp, mbs) for par, mbs in layouts})[::7]
    for i, (par, mbs) in enumerate(layouts):
        if (par.tp, par.pp, par.vpp, mbs) not in families or i % 3:
            continue
        cfg = RunConfig(spec, par, Batch(seq, gbs, mbs), gpu=gpu, mcore_version=version)
        variants = [
            cfg.evolve(ep_overlap=cfg.ep_overlap_allowed),
            cfg.evolve(dispatcher="deepep", fsdp="optim_grads_params"),
            cfg.evolve(dispatcher="hybridep", cuda_graph_scopes=frozenset({"attn", "moe_router"}), precision="mxfp8",
                       grad_fp32=False, bf16_moments=True),
            cfg.evolve(cuda_graph_scopes=frozenset({"full_iteration"}), optimizer="muon"),
        ]
        out += [(v, build_pipeline(spec, par)) for v in variants[: 1 + i % len(variants)]]
    return spec, gpu, out


def test_layout_memory_equals_the_item_by_item_estimate():
    cases = (("deepseek-v3", "h100", 256, 32768, 256), ("qwen3-30b-a3b", "h100", 64, 16384, 128),
             ("qwen3-next-80b-a3b", "gb200", 64, 65536, 64, "0.18"))
    rng = random.Random(0)
    checked = skipped_ranks = reused = states = 0
    for case in cases:
        spec, gpu, bases = _bases(*case)
        ladder = recompute_ladder(spec, case[3], case[5] if len(case) > 5 else "0.16")
        shared: dict = {}
        rng.shuffle(bases)
        for base, pipe in bases:
            mem = LayoutMemory(base, gpu.nvlink_domain, pipe, shared)
            options = [(rc, f) for rc in ladder for f in (0.0, *OFFLOAD_FRACTIONS)
                       if base.optimizer != "muon" or f == 0.0]
            rng.shuffle(options)
            for rc, f in options + options[:3]:  # asked again: the cached answer
                cfg = mem.config(rc, f)
                assert cfg == base.with_(recompute=rc, optimizer_offload=f)
                assert mem.peak_bytes(rc, f) == _reference(cfg, gpu, pipe), (base.parallel.short(), rc.label(), f)
                checked += 1
            m = base.batch.microbatches(base.parallel.dp)
            skipped_ranks += (len(rank_profiles(spec, base.parallel, m, pipe))
                              - len(peak_rank_profiles(spec, base.parallel, m, pipe)))
        asked = len(bases) * len(ladder)  # (layout, recompute) pairs whose activations were asked for
        reused += asked - sum(len(v) for k, v in shared.items() if k[0] == "activations")
        states += sum(1 for k in shared if k[0] == "state")
    assert checked > 500
    assert skipped_ranks > 0  # ranks were left out, and the answers still agree
    assert reused > 0 and states > 0  # layouts shared activations and parameter state, and the answers agree


def test_layout_memory_with_moe_imbalance_across_ep():
    """Activations are shared across EP, but the routed rows per token read EP where the imbalance is
    capped (moeplan.run.config.RunConfig.rows_factor: at EP 1 a token's top-k rows are all local, whatever the
    imbalance): with --moe-imbalance 1.5, layouts of every EP share one dict and each equals the item-by-item
    estimate (EP 1 and EP > 1 with the same dispatcher once got EP 1's rows)."""
    spec, gpu = load_model("qwen3-235b-a22b"), load_gpu("h100")
    shared: dict = {}
    ladder = recompute_ladder(spec, 32768, "0.16")
    layouts = [(par, mbs) for par, mbs in _layouts(spec, gpu, 64, Batch(32768, 64, 1), SearchSpace(), "0.16")
               if (par.tp, par.pp, par.vpp, par.cp) == (2, 4, 1, 2)]
    assert {par.ep for par, _ in layouts} >= {1, 2, 4}
    factors = set()
    for par, mbs in layouts:
        cfg = RunConfig(spec, par, Batch(32768, 64, mbs), gpu=gpu, dispatcher="alltoall", moe_imbalance=1.5)
        factors.add(cfg.rows_factor)
        pipe = build_pipeline(spec, par)
        mem = LayoutMemory(cfg, gpu.nvlink_domain, pipe, shared)
        for rc in ladder:
            assert mem.peak_bytes(rc, 0.0) == _reference(cfg.evolve(recompute=rc), gpu, pipe), (par.short(), rc.label())
    assert len(factors) > 1  # the spread has layouts whose rows differ


def test_layout_memory_allgather_across_ep():
    """The allgather dispatcher's transient holds every token of the EP x ETP group (memory._moe_dispatch_transient):
    layouts of every EP share one dict and each equals the item-by-item estimate (the per-layer key once left EP
    out, so a search handed one EP the gathered copy of another)."""
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    shared: dict = {}
    ladder = recompute_ladder(spec, 16384, "0.16")
    layouts = [(par, mbs) for par, mbs in _layouts(spec, gpu, 64, Batch(16384, 64, 1), SearchSpace(), "0.16")
               if (par.tp, par.pp, par.vpp, par.cp, par.etp) == (2, 2, 1, 2, 1)]
    assert len({par.ep for par, _ in layouts}) >= 3
    for par, mbs in sorted(layouts, key=lambda x: -x[0].ep):
        cfg = RunConfig(spec, par, Batch(16384, 64, mbs), gpu=gpu, dispatcher="allgather")
        pipe = build_pipeline(spec, par)
        mem = LayoutMemory(cfg, gpu.nvlink_domain, pipe, shared)
        for rc in ladder:
            assert mem.peak_bytes(rc, 0.0) == _reference(cfg.evolve(recompute=rc), gpu, pipe), (par.short(), rc.label())
