"""Time of fine-grained activation offloading (``offload_modules``): the D2H copy of each offloaded group in the
forward and its H2D reload before the backward, over the GPU's host link, exposed where the copies outlast the
compute they overlap.

What runs (Megatron-Core megatron/core/pipeline_parallel/fine_grained_activation_offload.py, 0.16-0.19):
``on_group_commit_forward`` makes a dedicated ``d2h_stream`` wait for the compute stream and copies the group's
saved tensors to pinned host memory; nothing in the forward waits for those copies unless
``fine_grained_offloading_max_inflight_offloads`` is set (default None), so the D2H stream drains behind the
rank's compute and is bounded only by the link's throughput over the micro-batch. Before a group's backward the
compute stream waits on that group's reload event; ``bulk_reload`` issues the reload of the next group on a
dedicated ``h2d_stream`` when the previous group's backward commits (and ``pre_reload_last_layer`` the first group
of the next backward chunk), so each reload has one group's backward to hide behind. PCIe and NVLink-C2C are full
duplex: the D2H and H2D copies of different micro-batches do not share a direction. Copies run on copy engines,
not SMs. The last groups of a chunk are kept on the GPU (post-warmup margin) so the first reload of a backward does
not stall; moeplan charges every layer alike (a slight over-charge at small layer counts)."""

from __future__ import annotations

from moeplan.engine.activations import run_offloaded_layer_bytes
from moeplan.engine.timing.context import Ctx
from moeplan.hardware import GPUSpec
from moeplan.models.spec import Layer


def host_link_bytes_per_s(gpu: GPUSpec) -> float:
    """One direction of the GPU's host link as copies reach it: the catalog's measured rate (nvbandwidth), else the
    link's nominal per-direction rate (PCIe Gen5 x16 64 GB/s; NVLink-C2C 450 GB/s per Grace, 225 per GPU)."""
    return gpu.host_link_achieved_bytes_per_s or gpu.host_link_bw_bytes_per_s


def offload_copy_exposed_s(copy_bytes: float, link_bytes_per_s: float, layer_s: float, layer_bwd_s: float) -> float:
    """Exposed seconds of one layer's activation offload for one micro-batch: the D2H copy of ``copy_bytes`` beyond
    the layer's whole compute ``layer_s`` (no forward join: the d2h stream drains behind the micro-batch) plus the
    H2D reload of the same bytes beyond the one group's backward it is issued ahead of (``layer_bwd_s``)."""
    if copy_bytes <= 0:
        return 0.0
    copy_s = copy_bytes / link_bytes_per_s
    return max(0.0, copy_s - layer_s) + max(0.0, copy_s - layer_bwd_s)


def activation_offload_s(ctx: Ctx, layer: Layer, layer_s: float, layer_bwd_s: float) -> float:
    """:func:`offload_copy_exposed_s` of ``layer`` in run ``ctx``: the bytes the memory model offloads for it
    (moeplan.engine.activations.run_offloaded_layer_bytes) over :func:`host_link_bytes_per_s`."""
    copy_bytes = run_offloaded_layer_bytes(ctx.cfg, layer, ctx.tokens)
    return offload_copy_exposed_s(copy_bytes, host_link_bytes_per_s(ctx.gpu), layer_s, layer_bwd_s)
