"""Where the dropless forward's host sync sits against the dispatch (timing.moe.dispatch_before_host_sync): HybridEP
reads tokens_per_expert after its dispatch kernel, DeepEP and the all-to-all dispatcher read their counts before
theirs, so only the latter two hide the experts' quantized launches behind the dispatch."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import make_ctx
from moeplan.engine.timing.layer import layer_time
from moeplan.engine.timing.moe import dispatch_before_host_sync

# Qwen3-30B-A3B MXFP8 on 8 B200 with TE-scoped graphs (N30's recipe): 16 local experts, eager
RUN = dict(gpu="b200", gpus=8, seq_len=4096, gbs=512, mbs=4, tp=1, pp=1, ep=8, precision="mxfp8",
           cuda_graphs="attn,moe_router,moe_preprocess")


def _layer(dispatcher: str, sm_bw_scale: float, precision: str = "mxfp8"):
    """(ep_comm, launch_overhead) of the first layer with the EP kernels' per-SM rates scaled (slower dispatch)."""
    cal = DEFAULT_CALIBRATION.with_overrides({"ep_sm_bw_bytes_per_s": {
        k: v * sm_bw_scale for k, v in DEFAULT_CALIBRATION.ep_sm_bw_bytes_per_s.items()}})
    cfg, gpu = api.build_config("qwen3-30b-a3b", dispatcher=dispatcher, **(RUN | dict(precision=precision)))
    lt = layer_time(make_ctx(cfg, gpu, cal), cfg.model.layers[0])
    return lt.ep_comm, lt.launch_overhead


def test_which_dispatchers_sync_after_their_dispatch():
    assert dispatch_before_host_sync("hybridep")
    assert not any(dispatch_before_host_sync(d) for d in ("deepep", "alltoall", "allgather"))


def test_a_slower_hybridep_dispatch_hides_no_expert_launch():
    """A 10x slower dispatch kernel: HybridEP's exposed expert launches do not change (the host waits for the
    dispatch before it launches them), DeepEP's shrink (they run ahead of its dispatch). DeepEP's under FP8 current
    scaling, whose split quantizes are host round trips as the GEMMs' are: MXFP8's (one kernel launch a split,
    timing.context.SPLIT_QUANTIZE_PATH "bulk") already hide behind the fast dispatch."""
    h_fast, h_slow = _layer("hybridep", 1.0), _layer("hybridep", 0.1)
    d_fast, d_slow = _layer("deepep", 1.0, "fp8-cs"), _layer("deepep", 0.1, "fp8-cs")
    assert h_slow[0] > 3 * h_fast[0] and d_slow[0] > 3 * d_fast[0]
    assert h_fast[1] > 0 and h_slow[1] == pytest.approx(h_fast[1])
    assert d_slow[1] < 0.5 * d_fast[1]
