"""DeepEP's host-proxy work per RDMA message across EFA nodes (engine.timing.moe.ep_proxy_messages_s): the internode
kernels write each remote node's tokens in messages of at most num_max_rdma_chunked_send_tokens (DeepEP's default
configs: 20 / 12 tokens for dispatch / combine at EP16, 8 / 8 at EP32), and without GPU-initiated RDMA a host proxy
posts and completes every message, so the cost grows with tokens x remote nodes hit / chunk (top-8 routing: ~1.0
remote node per token at EP16 over 2 nodes, ~2.7 at EP32 over 4), per NIC rail as the per-call cost."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.moe import deepep_rdma_chunk_tokens, ep_proxy_messages_s
from moeplan.hardware import load_gpu

AWS = dict(gpus=64, seq_len=4096, gbs=256, tp=8, precision="bf16", dispatcher="deepep")
# the host floor (engine.timing.host) off: at these small layers (Qwen3-30B-A3B, TP8) it covers the messages' delay
OFF = DEFAULT_CALIBRATION.with_overrides({"ep_proxy_message_s": 1e-15, "host_layer_pass_s": 1e-15})
ON = DEFAULT_CALIBRATION.with_overrides({"ep_proxy_message_s": 1e-6, "host_layer_pass_s": 1e-15})


def _extra_s(gpu: str, **kw) -> float:
    """Seconds per step the message term adds (on minus off)."""
    run = AWS | kw
    return (api.estimate("qwen3-30b-a3b", gpu=gpu, cal=ON, **run)["step_time_s"]
            - api.estimate("qwen3-30b-a3b", gpu=gpu, cal=OFF, **run)["step_time_s"])


def test_deepep_default_chunks():
    """deep_ep get_dispatch_config / get_combine_config (num_max_rdma_chunked_send_tokens), DeepEP e02e4d2 ..
    dd758ca (base.deepep_configs): EP16 (20, 12), EP24-EP64 (8, 8), EP96 and up (12, 8); other sizes take the next
    listed size up (tests/unit/test_deepep_configs.py)."""
    assert deepep_rdma_chunk_tokens(16) == (20, 12) and deepep_rdma_chunk_tokens(32) == (8, 8)
    assert deepep_rdma_chunk_tokens(128) == (12, 8) and deepep_rdma_chunk_tokens(40) == (8, 8)
    assert deepep_rdma_chunk_tokens(8) == (6, 6)


def test_function_zero_off_efa_and_inside_a_node():
    p5, p6 = load_gpu("h100-efa"), load_gpu("b300-efa")
    cal = DEFAULT_CALIBRATION
    per = cal.ep_proxy_message_s
    assert ep_proxy_messages_s(p5, cal, 4, "deepep", 32, 800.0) == pytest.approx((4 * 100 * per, 4 * 100 * per))
    assert ep_proxy_messages_s(p6, cal, 2, "deepep", 16, 240.0) == pytest.approx((2 * 12 * per, 2 * 20 * per))
    assert ep_proxy_messages_s(p5, cal, 1, "deepep", 8, 800.0) == (0.0, 0.0)  # one node: no RDMA
    assert ep_proxy_messages_s(load_gpu("h100"), cal, 4, "deepep", 32, 800.0) == (0.0, 0.0)  # InfiniBand: IBGDA
    assert ep_proxy_messages_s(p5, cal, 4, "alltoall", 32, 800.0) == (0.0, 0.0)  # NCCL: its own per-call constant


def test_grows_with_remote_nodes_and_smaller_chunks_not_with_micro_batches():
    """Same tokens per GPU and step (EP32 PP2: 24 layers x 16 micro-batches, EP16 PP4: 12 x 32): EP32 sends each token
    to ~2.70 remote nodes in messages of 8 tokens both ways, EP16 to ~1.0 in messages of 20 (dispatch) and 12
    (combine). The cost is per message, so MBS 1 and MBS 4 pay the same per step (unlike the per-call cost)."""
    ep32 = _extra_s("h100-efa", mbs=4, pp=2, ep=32)
    ep16 = _extra_s("h100-efa", mbs=4, pp=4, ep=16)
    hit32, hit16 = 3 * (1 - 0.75**8), 1 * (1 - 0.5**8)
    msgs32, msgs16 = hit32 * (1 / 8 + 1 / 8), hit16 * (1 / 20 + 1 / 12)
    assert ep32 / ep16 == pytest.approx(msgs32 / msgs16, rel=0.05)  # the pipeline bubbles aside
    assert _extra_s("h100-efa", mbs=1, pp=2, ep=32) == pytest.approx(ep32, rel=0.1)
    assert _extra_s("h100", mbs=4, pp=2, ep=32) == 0.0
    assert _extra_s("h100-efa", mbs=4, pp=2, ep=32, dispatcher="alltoall") == 0.0


def test_paid_per_rail():
    """p5.48xlarge (4 x 100 Gb/s rails per GPU) pays twice p6-b300 (2 x 400 Gb/s) for the same layout and tokens."""
    assert _extra_s("h100-efa", mbs=4, pp=2, ep=32) / _extra_s("b300-efa", mbs=4, pp=2, ep=32) == pytest.approx(
        2.0, rel=0.15)


def test_expert_tp_counts_in_deepeps_group():
    """DeepEP runs on Megatron-Core's expert-TP x EP group (base.deepep_configs.tp_ep_group_ranks): ETP 2 x EP 16
    spans the same 4 nodes as EP 32 and sends its RDMA messages in the 32-rank row's chunks (8 / 8 tokens), so with
    the same tokens per rank it pays EP 32's message cost, not EP 16's chunks of 20 / 12 (0.53x)."""
    etp2 = _extra_s("h100-efa", mbs=4, tp=2, pp=2, ep=16, etp=2)
    assert etp2 == pytest.approx(_extra_s("h100-efa", mbs=4, tp=2, pp=2, ep=32), rel=0.01)
