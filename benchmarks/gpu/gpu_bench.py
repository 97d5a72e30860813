"""What the GPU measurement scripts beside this file share (needs CUDA and PyTorch): the device line, CUDA-event
timing of a callable or of a captured CUDA graph's replays, and the CSV each writes to stdout and $OUT."""

from __future__ import annotations

import csv
import os
import sys
from typing import Any, Callable

import torch


def device_ready() -> bool:
    """Whether a CUDA device is there; prints the device line (stderr) or why not."""
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return False
    p = torch.cuda.get_device_properties(0)
    print(f"# {p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, torch {torch.__version__}", file=sys.stderr)
    return True


def event_seconds(fn: Callable[[], Any], warmup: int, iters: int) -> float:
    """Mean GPU seconds of ``fn`` over ``iters`` calls after ``warmup``, by CUDA events on the current stream."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def graph_seconds(fn: Callable[[], Any], warmup: int, iters: int) -> float:
    """GPU seconds of one ``fn`` captured as a CUDA graph and replayed (after ``warmup`` eager calls on a side
    stream, as capture needs): no host launch cost enters."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return event_seconds(graph.replay, warmup, iters)


def sdpa_seconds(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor, causal: bool, warmup: int,
                 iters: int) -> tuple[float, float]:
    """(forward, backward) GPU seconds of PyTorch's scaled_dot_product_attention on q, k, v under the SDPA backend
    the caller selected (``torch.nn.attention.sdpa_kernel``): the forward alone, then the gradient of one forward's
    output with respect to q, k and v (``dout``), each by :func:`event_seconds`."""
    import torch.nn.functional as F

    fwd_s = event_seconds(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), warmup, iters)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    bwd_s = event_seconds(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), warmup, iters)
    return fwd_s, bwd_s


class Table:
    """Rows printed as CSV lines as they come, and written to $OUT/``name`` at the end when OUT is set."""

    def __init__(self, name: str) -> None:
        self.name, self.rows = name, []  # type: ignore[var-annotated]

    def add(self, **row: Any) -> None:
        self.rows.append(row)
        print(",".join(str(v) for v in row.values()), flush=True)

    def write(self) -> None:
        out = os.environ.get("OUT")
        if out and self.rows:
            with open(os.path.join(out, self.name), "w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=list(self.rows[0]))
                w.writeheader()
                w.writerows(self.rows)
