"""The exposed host launch time per layer (calibration launch_overhead_per_layer_s) is what dropless MoE's host sync
(tokens per expert copied to the host every layer) leaves showing: after the sync the host launches the layer's
remaining kernels into a drained queue. A layer without that sync (a dense MLP) launches while the GPU still runs
the kernels queued before it, so it pays none (issue 31: the dense CP sweeps N40 / N41 at 4K, GEMM-bound, were
charged 32 x the MoE figure)."""

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
