"""Cost of the iteration timeline on large pipelines: seconds to build it and write the Chrome trace, and
the trace's size (the issue's bar: PP 16 with 64 micro-batches under 1 s extra and under 20 MB).

    python benchmarks/timeline_scale.py            # measure on one core: taskset -c 0 python ...
"""

from __future__ import annotations

import time

from moeplan import api
from moeplan.timeline import build_timeline, chrome_trace_bytes

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


if __name__ == "__main__":
    main()
