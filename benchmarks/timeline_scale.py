"""Cost of the iteration timeline on large pipelines: seconds to build it and write the Chrome trace, and
the trace's size (the issue's bar: PP 16 with 64 micro-batches under 1 s extra and under 20 MB). Then the headline
run, plan 1 of DeepSeek-V3 at 128K on 1,024 H100 (GBS 1,024: what `moeplan report deepseek-v3 --gpu h100 --gpus 1024
--seq-len 128k --gbs 1024` draws): build, trace (plain, and gzipped as the CLI writes .json.gz) and the report's
timeline plot as SVG (`plots.timeline_figure`; skipped with a note without matplotlib). Best of 3, each on a fresh
timeline; matplotlib's import is timed once, apart.

    python benchmarks/timeline_scale.py            # measure on one core: taskset -c 0 python ...
"""

from __future__ import annotations

import gzip
import time

from moeplan import api
from moeplan.engine.timeline import build_timeline, chrome_trace_bytes

CASES = [  # (model, GPUs, GBS, PP, VPP): 64 micro-batches on every pipeline
    ("qwen3-235b-a22b", 1024, 4096, 16, 1),
    ("qwen3-235b-a22b", 1024, 4096, 16, 2),
    ("deepseek-v3", 1024, 4096, 16, 1),
]


def main() -> None:
    print(f"{'model':18} {'PP':>3} {'VPP':>3} {'mb':>4} {'ops':>6} {'spans':>7} {'build s':>8} {'write s':>8} {'MB':>6}")
    for model, gpus, gbs, pp, vpp in CASES:
        cfg, gpu = api.build_config(model, gpu="h100", gpus=gpus, seq_len=4096, gbs=gbs, ep=8, pp=pp, vpp=vpp)
        best_build = best_write = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            tl = build_timeline(cfg, gpu)
            t1 = time.perf_counter()
            data = chrome_trace_bytes(tl)
            t2 = time.perf_counter()
            best_build, best_write = min(best_build, t1 - t0), min(best_write, t2 - t1)
        print(f"{model:18} {pp:>3} {vpp:>3} {tl.microbatches:>4} {len(tl.ops):>6} {len(tl.spans):>7} "
              f"{best_build:>8.3f} {best_write:>8.3f} {len(data) / 1e6:>6.1f}")
    headline()


def headline() -> None:
    found = api.search_plans("deepseek-v3", gpu="h100", gpus=1024, seq_len=128 * 1024, gbs=1024)
    assert found.best is not None
    cfg, gpu = found.best.config, found.best.gpu
    try:
        t0 = time.perf_counter()
        from moeplan import plots  # it imports matplotlib lazily: timed here, apart
        import matplotlib.figure  # noqa: F401
        from matplotlib.backends import backend_agg  # noqa: F401
        mpl_import = time.perf_counter() - t0
    except ImportError:
        plots = None
    best = dict.fromkeys(("build", "write", "gzip", "plot"), float("inf"))
    for _ in range(3):
        t0 = time.perf_counter()
        tl = api.timeline(cfg, gpu)
        t1 = time.perf_counter()
        data = chrome_trace_bytes(tl)
        t2 = time.perf_counter()
        gz = gzip.compress(data, compresslevel=6, mtime=0)  # as the CLI writes *.json.gz
        t3 = time.perf_counter()
        svg = plots.figure_svg(plots.timeline_figure(tl)) if plots else ""
        t4 = time.perf_counter()
        for k, v in zip(best, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            best[k] = min(best[k], v)
    par = found.best.estimate.as_dict()["parallel"]
    print(f"\nheadline: plan 1 of deepseek-v3 h100 1,024 GPUs 128K GBS 1,024 (TP{par['tp']} PP{par['pp']}x{par['vpp']} "
          f"CP{par['cp']} EP{par['ep']} DP{par['dp']}): {tl.microbatches} micro-batches, {len(tl.ops)} ops, "
          f"{len(tl.spans)} spans")
    print(f"build {best['build']:.3f} s; trace: write {best['write']:.3f} s, {len(data) / 1e6:.1f} MB, "
          f"gzip {best['gzip']:.3f} s, {len(gz) / 1e6:.2f} MB .json.gz")
    if plots:
        print(f"timeline plot (report's SVG): {best['plot']:.3f} s, {len(svg.encode()) / 1e6:.2f} MB "
              f"(matplotlib import {mpl_import:.3f} s, once, not included)")
    else:
        print("timeline plot: skipped, matplotlib is not installed (pip install 'moeplan[plot]')")


if __name__ == "__main__":
    main()
