"""DeepEP's host-proxy work per token sent across EFA nodes (engine.timing.moe.ep_proxy_token_cost_s): the internode
kernels write each remote node's tokens in fixed-size chunks, and without GPU-initiated RDMA a host proxy posts and
completes every chunk's messages, so the cost grows with tokens x remote nodes hit (top-8 routing: ~1.0 remote node
per token at EP16 over 2 nodes, ~2.7 at EP32 over 4), per NIC rail as the per-call cost."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.moe import ep_proxy_token_cost_s
from moeplan.hardware import load_gpu

AWS = dict(gpus=64, seq_len=4096, gbs=256, tp=8, precision="bf16", dispatcher="deepep")
OFF = DEFAULT_CALIBRATION.with_overrides({"ep_proxy_token_s": 1e-12})
ON = DEFAULT_CALIBRATION.with_overrides({"ep_proxy_token_s": 1e-7})


def _extra_s(gpu: str, **kw) -> float:
    """Seconds per step the token term adds (on minus off)."""
    run = AWS | kw
    return (api.estimate("qwen3-30b-a3b", gpu=gpu, cal=ON, **run)["step_time_s"]
            - api.estimate("qwen3-30b-a3b", gpu=gpu, cal=OFF, **run)["step_time_s"])


def test_function_zero_off_efa_and_inside_a_node():
    p5, p6 = load_gpu("h100-efa"), load_gpu("b300-efa")
    cal = DEFAULT_CALIBRATION
    assert ep_proxy_token_cost_s(p5, cal, 4, "deepep", 1000.0) == pytest.approx(4 * 1000.0 * cal.ep_proxy_token_s)
    assert ep_proxy_token_cost_s(p6, cal, 4, "deepep", 1000.0) == pytest.approx(2 * 1000.0 * cal.ep_proxy_token_s)
    assert ep_proxy_token_cost_s(p5, cal, 1, "deepep", 1000.0) == 0.0  # one node: no RDMA
    assert ep_proxy_token_cost_s(load_gpu("h100"), cal, 4, "deepep", 1000.0) == 0.0  # InfiniBand: IBGDA
    assert ep_proxy_token_cost_s(p5, cal, 4, "alltoall", 1000.0) == 0.0  # NCCL: its own per-call constant


def test_grows_with_remote_nodes_not_with_micro_batches():
    """Same tokens per GPU and step: EP32 (4 nodes) sends each token to ~2.70 remote nodes, EP16 (2 nodes) to ~1.0;
    the cost is per token, so MBS 1 and MBS 4 pay the same per step (unlike the per-call cost)."""
    ep32 = _extra_s("h100-efa", mbs=4, pp=2, ep=32)
    ep16 = _extra_s("h100-efa", mbs=4, pp=4, ep=16)
    # per GPU: EP32 PP2 runs 24 layers x 16 micro-batches, EP16 PP4 12 x 32 (DP 4 against 2): the same layer passes;
    # a token reaches each of the other N - 1 nodes with probability 1 - (1 - 1/N)^8
    hit32, hit16 = 3 * (1 - 0.75**8), 1 * (1 - 0.5**8)
    assert ep32 / ep16 == pytest.approx(hit32 / hit16, rel=0.05)  # the pipeline bubbles aside
    assert _extra_s("h100-efa", mbs=1, pp=2, ep=32) == pytest.approx(ep32, rel=0.1)
    assert _extra_s("h100", mbs=4, pp=2, ep=32) == 0.0
    assert _extra_s("h100-efa", mbs=4, pp=2, ep=32, dispatcher="alltoall") == 0.0


def test_paid_per_rail():
    """p5.48xlarge (4 x 100 Gb/s rails per GPU) pays twice p6-b300 (2 x 400 Gb/s) for the same layout and tokens."""
    p5 = _extra_s("h100-efa", mbs=4, pp=2, ep=32)
    p6 = _extra_s("b300-efa", mbs=4, pp=2, ep=32)
    assert p5 / p6 == pytest.approx(2.0, rel=0.15)
