"""The host timeline of one MoE layer and micro-batch: the seconds the host needs to issue it, against the GPU
time it issues.

Megatron-Core runs a layer eagerly (outside CUDA graphs): the host calls every op from Python, forward, backward
(autograd replays the forward's graph, one node per op) and a recomputed forward, and the GPU runs each op at the
later of its issue and the previous op's end. Dropless MoE syncs the host once per layer forward (tokens per
expert, D2H: token_dispatcher.py ``cuda_sync_point``; DeepEP's notify_dispatch busy-wait), so the host cannot run
more than a layer ahead: a layer whose kernels finish before the host has issued them takes the host's time, not
the GPU's (Megatron-LM docs/discussions/deepseek-v3-gb200-optimization, 2: "the CPU kernel launch speed cannot keep
up with the kernel execution speed on GPU"). Small layers (micro-batch 1, TP8 with sequence parallel) are there:
on AWS EFA (N31-N33) the step per layer and micro-batch at MBS 1 is the same whatever EP (16 / 32) and PP, while
MBS 4 grows with the bytes.

The EP calls that wait on host proxies across EFA nodes (``timing.moe.ep_proxy_call_s``) are host-blocking waits
after the launches: they stay outside the max() (the host cannot issue the next op before they return)."""

from __future__ import annotations

from moeplan.engine.timing.context import GRAPH_LAUNCH_SHARE, Ctx
from moeplan.engine.timing.moe import ep_call_s, experts_recomputed
from moeplan.models.spec import Layer, MoE

# Host passes over a layer's ops per micro-batch besides recompute: the forward, and the backward, which issues
# one autograd node per forward op (torch.autograd's engine; TE modules' backward issue their dgrad / wgrad
# GEMMs from the same node): counted as one forward pass of host work.
HOST_PASSES = 2.0
# EP dispatch / combine calls per MoE layer and micro-batch (forward and backward: the gradient of a dispatch
# is a combine and vice versa; timing.moe.ep_totals), and per recomputed forward
EP_CALLS_FWD_BWD = 4
EP_CALLS_RECOMPUTE = 2
# The graph scopes of a MoE block's launches (what selective ``moe`` recompute issues again)
MOE_BLOCK_SCOPES = ("moe", "moe_router", "moe_preprocess")


def host_passes(ctx: Ctx) -> float:
    """Host passes over one layer per micro-batch: forward + backward, and a second forward where the layer is
    recomputed: whole under full recompute; under selective ``moe`` (moe_layer.py checkpoints the whole MoE block,
    which issues the layer's router, dispatch, experts and combine again) the MoE block's share of a layer's
    launches (timing.context.GRAPH_LAUNCH_SHARE: moe, moe_router, moe_preprocess)."""
    rc = ctx.cfg.recompute
    if rc.granularity == "full":
        return HOST_PASSES + 1.0
    if experts_recomputed(rc):
        return HOST_PASSES + sum(GRAPH_LAUNCH_SHARE[s] for s in MOE_BLOCK_SCOPES)
    return HOST_PASSES


def ep_wait_s(ctx: Ctx, layer: Layer) -> float:
    """Seconds of one layer's host-blocking EP calls across EFA nodes (fixed part per call,
    :func:`timing.moe.ep_call_s`), which add after the launches rather than overlap them."""
    if not isinstance(layer.mlp, MoE):
        return 0.0
    cfg = ctx.cfg
    calls = EP_CALLS_FWD_BWD + (EP_CALLS_RECOMPUTE if experts_recomputed(cfg.recompute) else 0)
    return calls * ep_call_s(cfg, ctx.gpu, ctx.cal)


def layer_host_s(ctx: Ctx, layer: Layer, share: float) -> float:
    """Host seconds to issue one MoE layer's ops for one micro-batch: ``cal.host_layer_pass_s`` (one eager pass
    over a MoE transformer layer's ops) x :func:`host_passes` x ``share``, the part of the layer's launches not
    captured in a CUDA graph (timing.layer.launch_share)."""
    if not isinstance(layer.mlp, MoE):
        return 0.0
    return ctx.cal.host_layer_pass_s * host_passes(ctx) * share


def host_bound_s(ctx: Ctx, layer: Layer, items: dict[str, float], share: float, ep_exposed_share: float = 1.0) -> float:
    """Seconds the host adds to one layer and micro-batch beyond its GPU work: max(host, GPU) - GPU, where GPU is
    the layer's items (``items``, launch exposure included) less its host-blocking EP waits (:func:`ep_wait_s`) as
    far as the items hold them: under EP A2A overlap ``ep_exposed_share`` of the EP calls' time is exposed (the
    merged schedule hides the rest), so only that share of the waits is in the items to take out."""
    host = layer_host_s(ctx, layer, share)
    if host <= 0.0:
        return 0.0
    gpu_s = sum(items.values()) - ep_wait_s(ctx, layer) * ep_exposed_share
    return max(0.0, host - gpu_s)
