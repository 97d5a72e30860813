"""The exposed host launch time per layer (calibration launch_overhead_per_layer_s) is what dropless MoE's host sync
(tokens per expert copied to the host every layer) leaves showing: after the sync the host launches the layer's
remaining kernels into a drained queue. A layer without that sync (a dense MLP) launches while the GPU still runs
the kernels queued before it, so it pays none (issue 31: the dense CP sweeps N40 / N41 at 4K, GEMM-bound, were
charged 32 x the MoE figure)."""

import pytest

from moeplan.api import build_config
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.layer import layer_time
from moeplan.engine.timing.context import make_ctx


def _layers(model: str, gpu: str, gpus: int, **kw):
    cfg, g = build_config(model, gpu=gpu, gpus=gpus, seq_len=4096, gbs=64, **kw)
    ctx = make_ctx(cfg, g, DEFAULT_CALIBRATION)
    return cfg, [layer_time(ctx, layer) for layer in cfg.model.layers]


def test_a_dense_layer_pays_no_exposed_launch_time():
    _, times = _layers("llama3-8b", "h100", 8)
    assert all(t.launch_overhead == 0.0 for t in times)


def test_a_moe_layer_pays_the_calibrated_launch_time():
    cfg, times = _layers("deepseek-v3", "h100", 256, pp=8, ep=32, dispatcher="alltoall")
    kinds = [type(layer.mlp).__name__ for layer in cfg.model.layers]
    moe = [t.launch_overhead for t, k in zip(times, kinds) if k == "MoE"]
    dense = [t.launch_overhead for t, k in zip(times, kinds) if k == "DenseMLP"]
    assert moe and all(v == DEFAULT_CALIBRATION.launch_overhead_per_layer_s for v in moe)
    assert dense and all(v == 0.0 for v in dense)


def _moe_only_and_full(graphs=()):
    """The launch time of Nemotron-3 Nano's MoE-only layers (Megatron-Core's hybrid MoE layer: no mixer) and of the
    same MoE block under an attention mixer, one run."""
    from dataclasses import replace

    from moeplan.models.spec import Attention, Layer, MoE

    cfg, g = build_config("nemotron-3-nano-30b-a3b", gpu="h100", gpus=8, seq_len=4096, gbs=64, ep=8,
                          dispatcher="alltoall", cuda_graphs=",".join(graphs) or None)
    ctx = make_ctx(cfg, g, DEFAULT_CALIBRATION)
    moe_only = [layer for layer in cfg.model.layers if isinstance(layer.mlp, MoE) and layer.mixer is None]
    attn = next(layer.mixer for layer in cfg.model.layers if isinstance(layer.mixer, Attention))
    assert moe_only
    return layer_time(ctx, moe_only[0]).launch_overhead, layer_time(ctx, replace(moe_only[0], mixer=attn)).launch_overhead


def test_a_moe_only_layer_launches_no_attention_block():
    """Megatron-Core's hybrid MoE layer (mamba_layer_specs.py moe_layer: pre_mlp_layernorm, mlp, mlp_bda; the
    attention submodules IdentityOp) launches the MoE block's kernels only: the launch time less the attention
    scope's share (GRAPH_LAUNCH_SHARE["attn"]), the rule the MoE-layer benchmark (N38 / N39) is timed with."""
    from moeplan.engine.timing.context import GRAPH_LAUNCH_SHARE

    cal = DEFAULT_CALIBRATION
    moe_only, with_attn = _moe_only_and_full()
    assert with_attn == cal.launch_overhead_per_layer_s
    assert moe_only == cal.launch_overhead_per_layer_s * (1 - GRAPH_LAUNCH_SHARE["attn"])


def test_an_attention_graph_removes_nothing_from_a_moe_only_layer():
    """A CUDA graph of the attention scope captures the attention block's launches; a layer without one keeps its
    own (the MoE block's) launches, while the full layer loses the attention share."""
    from moeplan.engine.timing.context import GRAPH_LAUNCH_SHARE

    cal = DEFAULT_CALIBRATION
    moe_only, with_attn = _moe_only_and_full(["attn"])
    share = 1 - GRAPH_LAUNCH_SHARE["attn"]
    assert moe_only == with_attn == cal.launch_overhead_per_layer_s * share


def test_an_attention_graph_leaves_a_moe_only_layers_ep_overlap_host_cost():
    """EP overlap's host scheduling cost per layer (ep_overlap_layer_s) is what a CUDA graph of the captured scopes
    removes (timing.layer.captured_launch_share, the one rule launch_share reads too): an attention graph takes its
    share off a layer with attention and nothing off a layer without a mixer. (Megatron-Core builds the merged
    schedule for GPT models only, so the MoE-only layer here is a GPT MoE layer with its mixer taken away.)"""
    from dataclasses import replace

    from moeplan.engine.timing.context import GRAPH_LAUNCH_SHARE
    from moeplan.models.spec import MoE

    def ep_comm(graphs):
        cfg, g = build_config("qwen3-30b-a3b", gpu="h100", gpus=8, seq_len=4096, gbs=64, ep=8,
                              dispatcher="alltoall", ep_overlap=True, cuda_graphs=graphs)
        assert cfg.ep_overlap and cfg.ep_overlap_allowed
        ctx = make_ctx(cfg, g, DEFAULT_CALIBRATION)
        full = next(la for la in cfg.model.layers if isinstance(la.mlp, MoE))
        return layer_time(ctx, replace(full, mixer=None)).ep_comm, layer_time(ctx, full).ep_comm

    (bare_plain, full_plain), (bare_graph, full_graph) = ep_comm(None), ep_comm("attn")
    assert bare_graph == bare_plain
    assert full_plain - full_graph == pytest.approx(DEFAULT_CALIBRATION.ep_overlap_layer_s * GRAPH_LAUNCH_SHARE["attn"])
