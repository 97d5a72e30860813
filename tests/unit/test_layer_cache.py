"""Layer times shared across estimates (moeplan.engine.timing.layer_shape) change no estimate: every run of a
spread of layouts and knobs, estimated with one shared cache in a shuffled order, equals its fresh
estimate exactly, and so does the CP communication type chosen with the shared cache."""

from __future__ import annotations

import random

from moeplan.plan.advice import recompute_ladder
from moeplan.hardware import load_gpu
from moeplan.models import load_model
from moeplan.run.parallel import Batch, build_pipeline
from moeplan.plan.planner import _layouts
from moeplan.plan.space import SearchSpace
from moeplan.run.config import RunConfig
from moeplan.engine.timing.attention import best_cp_comm_type
from moeplan.engine.timing.step import estimate_time


def _runs(model: str, gpu_name: str, gpus: int, seq: int, gbs: int):
    spec, gpu = load_model(model), load_gpu(gpu_name)
    ladder = recompute_ladder(spec, seq, "0.16")
    out = []
    for i, (par, mbs) in enumerate(_layouts(spec, gpu, gpus, Batch(seq, gbs, 1), SearchSpace(), "0.16")):
        if i % 7:
            continue
        base = RunConfig(spec, par, Batch(seq, gbs, mbs), gpu=gpu.name)
        for rc in (ladder[0], ladder[len(ladder) // 2], ladder[-1]):
            for d in ("alltoall", "deepep"):
                cfg = base.with_(recompute=rc, dispatcher=d, optimizer_offload=0.5 if rc is ladder[-1] else 0.0)
                out.append(cfg.evolve(ep_overlap=cfg.ep_overlap_allowed))
                if rc is ladder[0]:  # EP overlap asked for where not allowed, and off where allowed: shapes
                    out.append(cfg.evolve(ep_overlap=not cfg.ep_overlap_allowed))  # key it as it runs
    return gpu, out


def test_shared_layer_times_equal_fresh_estimates():
    for case in (("deepseek-v3", "h100", 256, 32768, 256), ("qwen3-next-80b-a3b", "gb200", 64, 65536, 64)):
        gpu, runs = _runs(*case)
        assert len(runs) > 50
        random.Random(0).shuffle(runs)
        cache: dict = {}
        for cfg in runs:
            pipe = build_pipeline(cfg.model, cfg.parallel)
            shared = estimate_time(cfg, gpu, pipeline=pipe, validated=True, layer_cache=cache)
            fresh = estimate_time(cfg, gpu, pipeline=pipe, validated=True)
            assert shared == fresh, cfg.parallel.short()
            assert best_cp_comm_type(cfg, gpu, layer_cache=cache) == best_cp_comm_type(cfg, gpu), cfg.parallel.short()
        assert len(cache) < len(runs)  # layouts did share layer times (at most one entry per run otherwise)


def test_gemm_times_shared_across_shapes_equal_fresh():
    """GEMM times memoised across layer shapes (moeplan.engine.timing._gemm_time, keyed by the GEMM, its rows and
    local experts, tokens per GPU / CP rank, TP and ETP) equal fresh ones, exactly, for runs that share
    those keys and differ in everything else a layer reads: EP (local experts of the routed GEMMs, not
    the attention ones), the imbalance (rows), the dispatcher, EP overlap, CP communication type,
    recompute, CUDA graphs, precision and gradient dtype (each their own dict), TP and CP at the same
    tokens per GPU. Each varied field changes some GEMM's inputs or none, so a key that dropped one of
    them would hand a run another run's GEMM time and fail here."""
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
    from moeplan.engine.timing.context import make_ctx
    from moeplan.engine.timing.layer import layer_time
    from moeplan.run.parallel import Parallel
    from moeplan.run.config import Recompute

    spec, gpu = load_model("deepseek-v3"), load_gpu("gb200")
    ladder = recompute_ladder(spec, 131072, "0.16")
    runs = []
    for tp, cp in ((1, 32), (2, 16), (2, 32), (4, 8)):  # (1, 32) and (2, 16) have the same tokens per CP rank
        for ep in (8, 32, 64):
            for imb in (1.0, 1.25):
                par = Parallel(tp * cp * 64, tp, 1, 1, cp, ep, 1)
                base = RunConfig(spec, par, Batch(131072, 64, 1), gpu=gpu, moe_imbalance=imb)
                runs += [base, base.evolve(dispatcher="hybridep", ep_overlap=True),
                         base.evolve(cp_comm_type="a2a", recompute=ladder[len(ladder) // 2]),
                         base.evolve(recompute=Recompute("full"), cuda_graph_scopes=frozenset({"attn", "moe"})),
                         base.evolve(precision="mxfp8"), base.evolve(grad_fp32=False)]
    random.Random(1).shuffle(runs)
    cache: dict = {}
    layers = list(dict.fromkeys(spec.layers)) + [spec.mtp_layer]
    for cfg in runs:
        shared = make_ctx(cfg, gpu, DEFAULT_CALIBRATION, cache)
        fresh = make_ctx(cfg, gpu, DEFAULT_CALIBRATION)
        assert fresh.gemms is None  # a run without a search's cache costs every GEMM afresh
        for layer in layers:
            assert layer_time(shared, layer) == layer_time(fresh, layer), (cfg.parallel.short(), cfg.precision)
    memos = [v for k, v in cache.items() if isinstance(k, tuple) and k and k[0] == "gemm_times"]
    assert len(memos) == 3  # bf16 / mxfp8 with fp32 grads, bf16 with bf16 grads
    shapes = sum(1 for k in cache if not (isinstance(k, tuple) and k and k[0] == "gemm_times"))
    gemms_costed = sum(len(m) for m in memos)
    assert gemms_costed < shapes * len(layers)  # shapes did share GEMM times
