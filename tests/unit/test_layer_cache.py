"""Layer times shared across estimates (moeplan.timing.layer_shape) change no estimate: every run of a
spread of layouts and knobs, estimated with one shared cache in a shuffled order, equals its fresh
estimate exactly, and so does the CP communication type chosen with the shared cache."""

from __future__ import annotations

import random

from moeplan.advice import recompute_ladder
from moeplan.hardware import load_gpu
from moeplan.models import load_model
from moeplan.parallel import Batch, build_pipeline
from moeplan.planner import SearchSpace, _layouts
from moeplan.run import RunConfig
from moeplan.timing import best_cp_comm_type, estimate_time


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
