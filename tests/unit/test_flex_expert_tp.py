"""Flex dispatchers (DeepEP / HybridEP / NCCL EP) with expert TP > 1: Megatron-Core's MoEFlexTokenDispatcher hands
the backend its expert-TP x EP group with router_topk = ETP x topk and num_experts = ETP x num_experts, and expands
the routing map over the ETP ranks of each EP rank (token_dispatcher.py _initialize_metadata): each token goes to
every expert-TP copy of its experts. Buffers, received bytes, permutes, HybridEP's routing-map gather and the
NVL72 DeepEP warning read that group (moeplan.engine.timing.moe.flex_token_copies; base.deepep_configs)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from moeplan import api
from moeplan.engine.dispatcher_buffers import hybridep_buffer_bytes
from moeplan.engine.memory import _dispatcher_bytes
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import make_ctx
from moeplan.engine.timing.moe import ep_kernels, expected_ranks_hit, flex_token_copies, routing_map_allgather_s
from moeplan.lint.rules import lint
from moeplan.models.spec import MoE
from moeplan.run.parallel import Parallel

MODEL = "qwen3-30b-a3b"  # 128 experts, top-8, no expert groups


def _setup(dispatcher: str, **kw):
    base = dict(gpu="gb200", gpus=64, seq_len=4096, gbs=512, mbs=1, tp=2)
    base.update(kw)
    cfg, gpu = api.build_config(MODEL, dispatcher=dispatcher, **base)
    moe = next(layer.mlp for layer in cfg.model.layers if isinstance(layer.mlp, MoE))
    return cfg, gpu, make_ctx(cfg, gpu, DEFAULT_CALIBRATION), moe


def test_a_token_reaches_every_expert_tp_copy_of_its_ranks():
    """ETP x the EP ranks hit; the copies of an EP rank are consecutive group ranks, so inside one NVLink domain
    ETP adds no remote domain (8-GPU domains: EP 8 x ETP 2 spans 2 domains, a top-8 token reaches the other with
    1 - 2^-8); with ETP beyond the domain each hit EP rank fills ETP / domain domains."""
    _, _, _, moe = _setup("deepep", ep=8)
    hit8 = expected_ranks_hit(moe, 8)
    assert flex_token_copies(moe, Parallel(8, ep=8), 72) == (pytest.approx(hit8), 0.0)
    assert flex_token_copies(moe, Parallel(16, ep=8, etp=2), 72) == (pytest.approx(2 * hit8), 0.0)
    ranks, remote = flex_token_copies(moe, Parallel(16, ep=8, etp=2), 8)
    assert ranks == pytest.approx(2 * hit8)
    assert remote == pytest.approx(1 - 0.5 ** moe.top_k)  # the same as EP 8 x ETP 1 over 8-GPU pairs of domains
    assert flex_token_copies(moe, Parallel(16, etp=16), 8) == (pytest.approx(16.0), pytest.approx(1.0))  # own domain + the other


def test_deepep_at_etp2_receives_twice_the_copies_of_etp1():
    """EP 16 on GB200 (one NVLink domain, both groups past 8 peers: the same kernel rate): ETP 2 receives, and
    permutes, twice what ETP 1 does at the same EP and tokens per GPU; before, both counted EP 16's ranks alone."""
    *_, ctx1, moe = _setup("deepep", ep=16)
    *_, ctx2, _ = _setup("deepep", ep=16, etp=2)
    assert ctx1.tokens == ctx2.tokens
    d1, c1, p1 = ep_kernels(ctx1, moe)
    d2, c2, p2 = ep_kernels(ctx2, moe)
    assert (d2 / d1, c2 / c1, p2 / p1) == (pytest.approx(2.0), pytest.approx(2.0), pytest.approx(2.0))


def test_flex_dispatch_at_ep1_with_expert_tp_moves_the_copies():
    """EP 1 x ETP 2: every token goes to both expert-TP ranks (Megatron asserts only TP x EP > 1); before, no
    traffic was costed at EP 1."""
    *_, ctx, moe = _setup("deepep", ep=1, etp=2)
    d, c, perm = ep_kernels(ctx, moe)
    assert d > 0 and c > 0 and perm > 0
    *_, ctx_one, _ = _setup("deepep", ep=1, etp=1, tp=1)
    assert ep_kernels(ctx_one, moe) == (0.0, 0.0, 0.0)


def test_hybridep_buffer_spans_the_expert_tp_x_ep_group():
    """ETP 2 x EP 8: HybridEP's buffer is the 16-rank group's, each rank holding 128 / 8 = 16 local experts; before,
    the 8-rank EP group's (half the tokens x ranks)."""
    cfg, gpu, ctx, moe = _setup("hybridep", ep=8, etp=2)
    tokens = 4096 / 2
    got = _dispatcher_bytes(cfg, gpu.nvlink_domain, tokens)
    assert got == pytest.approx(hybridep_buffer_bytes(cfg.model.hidden, 16, tokens, 2 * moe.num_experts,
                                                      gpu.nvlink_domain))
    per_token = cfg.model.hidden * 2 + 4 * 16 * 16 + 4 * cfg.model.hidden / 128
    assert got == pytest.approx(tokens * 16 * per_token)
    ep_only = _dispatcher_bytes(cfg.with_(parallel=replace(cfg.parallel, etp=1)), gpu.nvlink_domain, tokens)
    assert got > 1.9 * ep_only


def test_hybridep_gathers_the_group_routing_map():
    """HybridEP's routing map has ETP x num_experts columns and is gathered over the ETP x EP ranks, consecutive ones
    (stride 1). On H100 (8-GPU NVLink domains) EP 4 x ETP 2 is one domain's 8 ranks: 7 x 2,048 tokens per rank x
    (2 x 128) one-byte columns over the ring's 370 GB/s NVLink bus bandwidth (hardware catalog, h100), 9.92 us; read
    with the EP ranks' stride (2) the ring would span 16 GPUs and take the NIC rate."""
    cfg, gpu, ctx, moe = _setup("hybridep", gpu="h100", gpus=8, ep=4, etp=2)
    assert (ctx.tokens, moe.num_experts, gpu.nvlink_domain) == (2048, 128, 8)
    assert routing_map_allgather_s(ctx, moe) == pytest.approx(7 * 2048 * 256 / 370e9, rel=1e-9)  # 9.918962e-6 s


def test_dispatcher_nvl72_warning_reads_the_group():
    """DeepEP on NVL72 warns for EP 1 x ETP 2 too (its group has 2 ranks), with and without an estimate."""
    cfg, gpu, _, _ = _setup("deepep", ep=1, etp=2)
    assert "dispatcher-nvl72" in {f.rule for f in lint(cfg, gpu)}
    bad = cfg.with_(parallel=replace(cfg.parallel, pp=5))  # 48 layers over 5 stages: no estimate
    rules = {f.rule for f in lint(bad, gpu)}
    assert "skipped" in rules and "dispatcher-nvl72" in rules
    one, gpu, _, _ = _setup("deepep", ep=1, etp=1, tp=1)
    assert "dispatcher-nvl72" not in {f.rule for f in lint(one, gpu)}


def test_etp1_unchanged_counts():
    """ETP 1: the group is EP and the copies are the EP ranks hit, as before."""
    *_, moe = _setup("deepep", ep=8)
    for ep in (2, 8, 32):
        assert flex_token_copies(moe, Parallel(ep, ep=ep), 72)[0] == pytest.approx(expected_ranks_hit(moe, ep))
    # remote domains over 8-GPU domains: EP 2 and EP 8 fit one; EP 32 spans 4, and a top-8 token misses each of the
    # other 3 with probability (3/4)^8
    remote = {ep: flex_token_copies(moe, Parallel(ep, ep=ep), 8)[1] for ep in (2, 8, 32)}
    assert remote == {2: 0.0, 8: 0.0, 32: pytest.approx(3 * (1 - 0.75 ** 8))}
    assert remote[32] == pytest.approx(2.6996612548828125)


def test_dispatcher_nvl72_reads_one_finding_with_and_without_an_estimate():
    """lint builds the dispatcher-nvl72 warning in one place (lint.rules._dispatcher_nvl72): with an estimate and
    without one (an invalid layout) its severity and message are the same."""
    cfg, gpu, _, _ = _setup("deepep", ep=8, etp=2)
    bad = cfg.with_(parallel=replace(cfg.parallel, pp=5))  # 48 layers over 5 stages: no estimate
    found = [[f for f in lint(c, gpu) if f.rule == "dispatcher-nvl72"] for c in (cfg, bad)]
    assert all(len(f) == 1 for f in found)
    (a,), (b,) = found
    assert (a.severity, a.message) == (b.severity, b.message) == ("warning", a.message)


def test_the_nvl72_warning_keeps_its_own_numbers():
    """With an estimate, the dispatcher-nvl72 warning's numbers are its own: the dispatcher comparison that follows
    adds the faster dispatcher's figures to its own finding, not to this one (they shared one dict). MBS 2: at MBS 1
    this small layer is host-bound (engine.timing.host), so no dispatcher is faster and no comparison follows."""
    cfg, gpu, _, _ = _setup("deepep", ep=8, etp=2, mbs=2)
    found = {f.rule: f for f in lint(cfg, gpu) if f.rule in ("dispatcher-nvl72", "dispatcher")}
    assert "best" in found["dispatcher"].numbers
    assert "best" not in found["dispatcher-nvl72"].numbers


def test_the_group_size_is_read_not_written_by_hand():
    """The expert-TP x EP group size has one home (base.deepep_configs.tp_ep_group_ranks): the EP timing and lint's
    rules read it rather than multiplying EP by ETP themselves."""
    import re
    from pathlib import Path

    from moeplan.base import deepep_configs

    assert deepep_configs.tp_ep_group_ranks(Parallel(64, ep=16, etp=2)) == 32
    src = Path(__file__).resolve().parents[2] / "src" / "moeplan"
    by_hand = re.compile(r"\bep \* [\w.]*etp\b|\betp \* [\w.]*\bep\b")
    for rel in ("engine/timing/moe.py", "lint/rules.py"):
        assert not by_hand.findall((src / rel).read_text()), rel
    # DeepEP's NVLink-peer limit is read from base.deepep_configs.DEEPEP_NVL_PEERS, not a literal 8
    assert not re.search(r"peers_in_domain > \d", (src / "engine/timing/moe.py").read_text())
