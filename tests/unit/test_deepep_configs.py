"""One DeepEP config table (base.deepep_configs, DeepEP e02e4d2 .. dd758ca deep_ep get_dispatch_config /
get_combine_config) and one row rule, read by DeepEP's buffer memory (engine.dispatcher_buffers) and its RDMA message
size on EFA (engine.timing.moe.deepep_rdma_chunk_tokens)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from moeplan import api
from moeplan.base import deepep_configs as table
from moeplan.base.deepep_configs import (DEEPEP_CONFIGS, DEEPEP_NUM_SMS, deepep_config_ep, deepep_configs,
                                         tp_ep_group_ranks)
from moeplan.engine import dispatcher_buffers
from moeplan.engine.dispatcher_buffers import deepep_buffer_bytes
from moeplan.engine.timing import moe
from moeplan.engine.timing.calibration import Calibration
from moeplan.engine.timing.moe import deepep_rdma_chunk_tokens
from moeplan.models import load_model
from moeplan.run.parallel import Parallel


def test_deepep_release_values():
    """deep_ep/buffers/legacy.py at dd758ca (same since e02e4d2): EP16 dispatch Config(sms, 36, 288, 20, 128),
    combine (4, 288, 12, 128); EP32 (32, 288, 8, 128) / (1, 288, 8, 128); EP128 (20, 560, 12, 128) / (1, 560, 8, 128)."""
    assert DEEPEP_CONFIGS[16] == ((36, 288, 20, 128), (4, 288, 12, 128))
    assert DEEPEP_CONFIGS[32] == ((32, 288, 8, 128), (1, 288, 8, 128))
    assert DEEPEP_CONFIGS[128] == ((20, 560, 12, 128), (1, 560, 8, 128))


def test_the_buffers_rank_cap_is_the_config_tables_largest_row():
    """Two DeepEP facts, equal at e02e4d2 .. dd758ca: the Buffer's cap on normal-kernel ranks (csrc/kernels/configs.cuh
    NUM_MAX_NVL_PEERS x NUM_MAX_RDMA_PEERS, 8 x 20) and the largest EP size the Python config table lists. A release
    that moves one without the other fails here (the cap is moeplan.plan.pitfalls' deepep-ep-ranks; the rows
    deepep-ep-size's)."""
    assert (table.DEEPEP_NVL_PEERS, table.DEEPEP_RDMA_PEERS) == (8, 20)
    assert table.DEEPEP_MAX_RANKS == table.DEEPEP_NVL_PEERS * table.DEEPEP_RDMA_PEERS
    assert table.DEEPEP_MAX_RANKS == max(table.DEEPEP_EP_SIZES) == max(DEEPEP_CONFIGS)


def test_one_row_rule():
    """A listed size reads its own row; an unlisted one the next listed size up; beyond 160 the largest."""
    assert [deepep_config_ep(e) for e in (2, 8, 16, 32, 40, 80, 160, 256)] == [2, 8, 16, 32, 48, 96, 160, 160]


def test_message_sizes_read_the_table():
    assert deepep_rdma_chunk_tokens(16) == (20, 12) and deepep_rdma_chunk_tokens(32) == (8, 8)
    assert deepep_rdma_chunk_tokens(80) == (12, 8)  # EP80 takes EP96's row, as the buffer does
    assert deepep_rdma_chunk_tokens(8) == (6, 6) and deepep_rdma_chunk_tokens(200) == (12, 8)  # beyond 160: the last


def test_no_second_table():
    """Neither user keeps a table of its own; both read base.deepep_configs."""
    assert not hasattr(dispatcher_buffers, "DEEPEP_CONFIGS") and not hasattr(moe, "DEEPEP_RDMA_CHUNK_TOKENS")
    assert dispatcher_buffers.deepep_configs is table.deepep_configs is moe.deepep_configs


def test_buffer_bytes_follow_deepeps_size_hints():
    """EP16, hidden 4096 (BF16: 8,192 bytes a token), 20 SMs -> 10 channels, 8 NVL x 2 RDMA ranks; a token's slot
    carries 2,056 more bytes (source meta 8, top-k 128 x (8 + 4), scales 128 x 4); each hint the larger over the
    dispatch and the combine config, rounded up to 128 bytes (csrc/legacy/config.hpp, fused_a2a.get_buffer):
    NVL 10*8*(2*2+3)*4 + 10*8*288*10,248 = 236,116,160 -> 236,116,224;
    RDMA 10*2*18*2*4 + 2*10*2*128*(10,248 + 16) = 52,554,560 -> 52,554,624 (the receive ring is 128 tokens at
    every send chunk size)."""
    assert deepep_buffer_bytes(4096, 16) == 236_116_224 + 52_554_624
    assert deepep_buffer_bytes(4096, 8) == pytest.approx(10 * 8 * 5 * 4 + 10 * 8 * 256 * 10_248, abs=128)
    assert deepep_buffer_bytes(4096, 1) == 0.0



def test_one_owner_of_deepeps_sm_count():
    """DeepEP's default SM count (Megatron-Core moe_deepep_num_sms / moe_flex_dispatcher_num_sms unset: 20) lives in
    base.deepep_configs: the buffers' memory reads it there and no calibration (a user's ep_sms.deepep moves the
    kernels' time, not the buffers), and the shipped calibration's ep_sms.deepep is the same count."""
    assert DEEPEP_NUM_SMS == 20
    assert Calibration().ep_sms["deepep"] == DEEPEP_NUM_SMS  # the shipped file's value (calibration.yaml)
    tree = ast.parse(Path(dispatcher_buffers.__file__).read_text(encoding="utf-8"))
    assigned = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) for t in node.targets
                if isinstance(t, ast.Name)}
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "DEEPEP_NUM_SMS" not in assigned and "moeplan.base.deepep_configs" in imported
    assert not any("timing" in m or "calibrat" in m for m in imported if m)


# ------------------------------------------------------------------ DeepEP's group: expert TP x EP


def test_deepeps_group_is_expert_tp_times_ep():
    """Megatron-Core hands DeepEP its tp_ep group (token_dispatcher.py MoEFlexTokenDispatcher, pg_collection.tp_ep)
    and fused_a2a.get_buffer reads the configs of group.size(): ETP x EP ranks."""
    assert tp_ep_group_ranks(Parallel(gpus=64, tp=2, ep=16, etp=2)) == 32
    assert tp_ep_group_ranks(Parallel(gpus=64, tp=2, ep=16)) == 16  # ETP 1: the EP size, as before


def _deepep_buffer_gib(ep: int, etp: int) -> float:
    run = api.estimate("qwen3-30b-a3b", gpu="h100", gpus=64, seq_len=4096, gbs=256, tp=2, ep=ep, etp=etp,
                       dispatcher="deepep")
    return run["memory_gib"]["dispatcher_buffers"]


def test_etp2_ep16_buffer_reads_the_32_rank_row():
    """An ETP 2 x EP 16 DeepEP run's Buffer spans 32 ranks: 8 NVLink x 4 RDMA peers and EP32's configs (NVL ring 288
    tokens, RDMA ring 128), so its buffers are those of a 32-rank group, not of 16; ETP 1 x EP 16 keeps EP16's."""
    hidden = load_model("qwen3-30b-a3b").hidden
    assert deepep_buffer_bytes(hidden, 32) != deepep_buffer_bytes(hidden, 16)
    assert _deepep_buffer_gib(16, 2) * 2**30 == pytest.approx(deepep_buffer_bytes(hidden, 32))
    assert _deepep_buffer_gib(16, 1) * 2**30 == pytest.approx(deepep_buffer_bytes(hidden, 16))


def test_etp2_ep16_rdma_messages_read_the_32_rank_row(monkeypatch: pytest.MonkeyPatch):
    """The RDMA message sizes of an ETP 2 x EP 16 run are the 32-rank row's (8 / 8 tokens), not EP16's (20 / 12): every
    config lookup of the timing asks for the group's 32 ranks."""
    asked: list[int] = []

    def spy(ranks: int):  # noqa: ANN202
        asked.append(ranks)
        return deepep_configs(ranks)

    monkeypatch.setattr(moe, "deepep_configs", spy)
    api.estimate("qwen3-30b-a3b", gpu="h100-efa", gpus=64, seq_len=4096, gbs=256, tp=2, ep=16, etp=2,
                 dispatcher="deepep")
    assert asked and set(asked) == {32}
