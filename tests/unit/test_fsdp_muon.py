"""Megatron-FSDP and Muon: memory and communication item by item against hand-worked cases, the
planner's sharding choice, exports per Megatron-Core version, reading them back and the linter."""

from __future__ import annotations

import math

import pytest

from moeplan import api
from moeplan.engine import fsdp, muon
from types import SimpleNamespace

from moeplan.megatron import export as _export
from moeplan.base import fields as _fields
from moeplan.megatron import read as _read
from moeplan.megatron import to_run as _to_run
from moeplan.base.errors import MoeplanError
from moeplan.engine.estimate import evaluate
from moeplan.engine.flops import Gemm
from moeplan.engine.memory import GIB
from moeplan.engine.param_shards import layer_params
from moeplan.models import load_model
from moeplan.engine.params import count_params
from moeplan.run.parallel import Batch, Parallel
from moeplan.run.config import RunConfig

H100 = 80e9
M = SimpleNamespace(to_settings=_export.to_settings, to_overrides=_export.to_overrides, to_yaml=_export.to_yaml,
                    to_megatron_lm_args=_export.to_megatron_lm_args, parse_run_text=_read.parse_run_text,
                    run_config_from_settings=_to_run.run_config_from_settings, fields_for=_fields.fields_for,
                    check_settings=_fields.check_settings, dp_assertions=_fields.dp_assertions)


def _cfg(**kw: object) -> RunConfig:
    """Qwen3-30B-A3B on 64 GPUs, EP 8 (DP 64, EDP 8), one pipeline rank: every parameter on it."""
    base = RunConfig(load_model("qwen3-30b-a3b"), Parallel(64, ep=8), Batch(4096, 256, 1))
    return base.with_(**kw)


def _params() -> tuple[float, float]:
    p = count_params(load_model("qwen3-30b-a3b"))
    return p.total - p.routed_experts, p.routed_experts / 8  # dense on every GPU (TP 1), experts over EP 8


# ------------------------------------------------------------------ hand-worked buffer walks


def test_gathered_peak_walks_prefetch_window():
    # units 10,10,10,10 with a prefetch window of 15 elements: current 10 + next 10 (10 < 15) + next 10
    # (20 >= 15 stops after) = 30; double buffering: current + next = 20
    assert fsdp.gathered_peak([10, 10, 10, 10], 15, False) == 30
    assert fsdp.gathered_peak([10, 10, 10, 10], 15, True) == 20
    # a big first unit (the embedding) dominates: 50 + 10 ahead (window 5)
    assert fsdp.gathered_peak([50, 10, 10], 5, False) == 60
    assert fsdp.gathered_peak([10], 1e9, False) == 10


def test_reduce_queue_peak_walks_backward_queue():
    # backward over four units of 10 with a queue capacity of 25: computing u1 -> 10; queue 10, computing
    # u2 -> 20; queue 20, computing u3 -> 30; queue 30 (no pop: the wait runs before appending: 20 <= 25),
    # computing u4 -> 40; then 30 > 25 pops one, queue 30 -> peak 40
    assert fsdp.reduce_queue_peak([10, 10, 10, 10], 25, False) == 40
    # capacity 5: each unit waits for the previous one -> current + one queued = 20
    assert fsdp.reduce_queue_peak([10, 10, 10, 10], 5, False) == 20
    assert fsdp.reduce_queue_peak([10, 30, 10], 5, True) == 40  # double buffer: two adjacent units


# ------------------------------------------------------------------ memory items


def test_fsdp_memory_items_per_strategy():
    dense, expert = _params()
    dp, edp = 64, 8
    sharded = dense / dp + expert / edp
    full = dense + expert
    rows = {}
    for strategy in (None, *fsdp.SHARDS):
        items = evaluate(_cfg(fsdp=strategy), _gpu()).memory.peak.items
        rows[strategy] = items
    do = rows[None]
    assert do["weights"] == pytest.approx(2 * full) and do["gradients"] == pytest.approx(4 * full)
    assert do["optimizer_states"] == pytest.approx(12 * sharded) and do["fsdp_buffers"] == 0
    ns = rows["no_shard"]  # nothing sharded: Adam state whole on every rank
    assert ns["optimizer_states"] == pytest.approx(12 * full) and ns["gradients"] == pytest.approx(4 * full)
    op = rows["optim"]  # = distributed optimizer memory
    assert op["optimizer_states"] == pytest.approx(12 * sharded) and op["weights"] == pytest.approx(2 * full)
    og = rows["optim_grads"]
    assert og["gradients"] == pytest.approx(4 * sharded) and og["weights"] == pytest.approx(2 * full)
    ogp = rows["optim_grads_params"]
    assert ogp["weights"] == pytest.approx(2 * sharded) and ogp["gradients"] == pytest.approx(4 * sharded)
    assert ogp["optimizer_states"] == pytest.approx(12 * sharded)
    # buffers: units are the embedding (151936 x 2048 = 311.2M elements, the largest), 48 layers, the
    # output layer. Communication unit = max(1e9, 2 x mean) = 1e9: the gather prefetches 5e8 elements
    # ahead; the reduce-scatter queue keeps up to 1e9 elements
    spec = load_model("qwen3-30b-a3b")
    vocab = spec.vocab * spec.hidden
    p = layer_params(spec.layers[0], spec.hidden)
    layer = p.tp_split + p.replicated + p.expert / 8
    units = [vocab] + [layer] * 48 + [vocab]
    gathered = fsdp.gathered_peak(units, 5e8, False)
    k = math.ceil(5e8 / layer)  # layers gathered ahead of the embedding
    assert gathered == pytest.approx(vocab + k * layer)
    queued = fsdp.reduce_queue_peak(units, 1e9, False)
    assert ogp["fsdp_buffers"] == pytest.approx(2 * gathered + 4 * queued)
    assert og["fsdp_buffers"] == pytest.approx(4 * queued)  # parameters whole: nothing gathered
    assert ns["fsdp_buffers"] == op["fsdp_buffers"] == 0
    # double buffering caps both at two adjacent units (largest pair: embedding + first layer)
    db = evaluate(_cfg(fsdp="optim_grads_params", fsdp_double_buffer=True), _gpu()).memory.peak.items
    assert db["fsdp_buffers"] == pytest.approx(2 * (vocab + layer) + 4 * (vocab + layer))
    assert db["fsdp_buffers"] < ogp["fsdp_buffers"]


def _gpu():
    from moeplan.hardware import load_gpu

    return load_gpu("h100")


# ------------------------------------------------------------------ communication


def test_fsdp_comm_hand_worked():
    """dp_comm_s with a ring of b x (n-1) / bw: 1e9 dense params over DP 64 at 100 GB/s, no experts."""
    cfg = _cfg(fsdp="optim_grads_params")  # 4 micro-batches, PP 1

    def ring(b: float, n: int, bw: float) -> float:
        return 0.0 if n <= 1 else b * (n - 1) / bw

    bw = 100e9
    dense, t_mb = 1e9, 0.03
    ag = 1e9 * 2 / 64 * 63 / bw  # 19.7 ms: gather all weights once
    rs = 1e9 * 4 / 64 * 63 / bw  # 39.4 ms: reduce-scatter fp32 gradients once
    unit = 1e9 / 48
    first = unit * 2 / 64 * 63 / bw
    got, parts = fsdp.dp_comm_s(cfg, dense, 0.0, unit, t_mb, 0.0, bw, bw, 4, ring)
    per_mb = max(0, ag - t_mb / 3) + max(0, ag + rs - 2 * t_mb / 3) + 2 * first
    assert got == pytest.approx(per_mb * 4)
    assert parts["param_all_gather_s"] == pytest.approx(2 * ag * 4) and parts["grad_reduce_s"] == pytest.approx(rs * 4)
    # SM contention: 16 of 132 SMs busy with the collectives slow the compute they hide behind by
    # 16 / 116 of the hidden time (hidden = all traffic - exposed)
    share = 16 / 132
    with_sms, _ = fsdp.dp_comm_s(cfg, dense, 0.0, unit, t_mb, 0.0, bw, bw, 4, ring, share)
    hidden = (2 * ag + rs) * 4 - per_mb * 4
    assert with_sms == pytest.approx(per_mb * 4 + hidden * share / (1 - share))
    # optim: reduce-scatter once at the last micro-batch, gather once, both behind compute here
    got, _ = fsdp.dp_comm_s(cfg.with_(fsdp="optim"), dense, 0.0, unit, t_mb, 0.0, bw, bw, 4, ring)
    assert got == pytest.approx(max(0, rs - 2 * t_mb / 3) + max(0, ag - t_mb / 3))
    # no_shard: an all-reduce (twice the reduce-scatter volume), no gather
    got, parts = fsdp.dp_comm_s(cfg.with_(fsdp="no_shard"), dense, 0.0, unit, t_mb, 0.0, bw, bw, 4, ring)
    assert got == pytest.approx(max(0, 2 * rs - 2 * t_mb / 3)) and parts["param_all_gather_s"] == 0


def test_full_sharding_costs_time_per_micro_batch():
    """optim_grads_params gathers and reduces every micro-batch: more DP traffic than the distributed
    optimizer, growing with the micro-batch count."""
    do = evaluate(_cfg(), _gpu()).time.breakdown_s["dp_comm"]
    f4 = evaluate(_cfg(fsdp="optim_grads_params"), _gpu()).time.breakdown_s["dp_comm"]
    f8 = evaluate(_cfg(fsdp="optim_grads_params", batch=Batch(4096, 512, 1)), _gpu()).time.breakdown_s["dp_comm"]
    assert f4 > do
    assert f8 > 1.5 * f4


# ------------------------------------------------------------------ Muon


def test_ns_flops_hand_worked():
    # 2 x 3 matrix, one step: m = 2, n = 3: 4 m^2 n + 2 m^3 = 48 + 16 = 64
    assert muon.ns_flops(2, 3, 1) == 64
    assert muon.ns_flops(3, 2, 5) == 5 * 64  # orientation does not matter
    # DeepSeek-V3 expert fc1 (7168 x 4096), 5 steps: 5 x (4 x 4096^2 x 7168 + 2 x 4096^3)
    assert muon.ns_flops(7168, 4096, 5) == 5 * (4 * 4096**2 * 7168 + 2 * 4096**3)


def test_muon_takes_every_matrix_and_leaves_norms_to_adam():
    """Qwen3-30B-A3B layer: Muon holds q, k, v, o, 128 experts' fc1/fc2 and the router; Adam keeps the
    two layer norms and the q/k norms (2 x 2048 + 2 x 128 parameters)."""
    spec = load_model("qwen3-30b-a3b")
    layer = spec.layers[0]
    p = layer_params(layer, spec.hidden)
    total = p.tp_split + p.replicated + p.expert
    on_muon = sum(m.params for m in muon.layer_matrices(layer, spec.hidden, 1, 1, 1))
    assert total - on_muon == 2 * spec.hidden + 2 * 128
    # qkv is split into q, k and v blocks (muon_split_qkv)
    shapes = {(m.rows, m.cols) for m in muon.layer_matrices(layer, spec.hidden, 1, 1, 1) if not m.expert}
    assert (2048, 32 * 128) in shapes and (2048, 4 * 128) in shapes and (128, 2048) in shapes  # q, k/v, router


def test_muon_optimizer_state_and_step():
    dense, expert = _params()
    spec = load_model("qwen3-30b-a3b")
    adam = evaluate(_cfg(), _gpu())
    mu = evaluate(_cfg(optimizer="muon"), _gpu())
    m_dense, m_expert = muon.matrix_params(muon.rank_matrices(spec, tuple(spec.layer_groups()), 0, 1, 8, 1))
    expected = (8 * m_dense + 12 * (dense - m_dense)) / 64 + (8 * m_expert + 12 * (expert - m_expert)) / 8
    assert mu.memory.peak.items["optimizer_states"] == pytest.approx(expected)
    assert mu.memory.peak.items["optimizer_states"] < adam.memory.peak.items["optimizer_states"]
    assert mu.memory.peak.items["weights"] == adam.memory.peak.items["weights"]
    # Newton-Schulz adds time; more steps add more
    assert mu.time.breakdown_s["optimizer"] > adam.time.breakdown_s["optimizer"]
    more = evaluate(_cfg(optimizer="muon", muon_ns_steps=10), _gpu())
    assert more.time.breakdown_s["optimizer"] > mu.time.breakdown_s["optimizer"]
    # plain muon (no layer-wise distribution) keeps the whole state on each rank
    plain = evaluate(_cfg(optimizer="muon", muon_layer_wise=False), _gpu())
    assert plain.memory.peak.items["optimizer_states"] == pytest.approx(8 * (m_dense + m_expert)
                                                                        + 12 * (dense + expert - m_dense - m_expert))
    # 0.16: Muon cannot overlap its all-reduce; 0.17 can
    t16 = mu.time.breakdown_s["dp_comm"]
    t17 = evaluate(_cfg(optimizer="muon", mcore_version="0.17"), _gpu()).time.breakdown_s["dp_comm"]
    assert t17 < t16


def test_muon_has_no_cpu_offload_or_bf16_moments():
    """Megatron-Core's OptimizerConfig allows the precision-aware optimizer (which optimizer CPU offload
    needs in Megatron-LM, and bf16 moments are) with adam and the distributed optimizer only."""
    with pytest.raises(MoeplanError, match="precision-aware"):
        _cfg(optimizer="muon", optimizer_offload=0.5)
    with pytest.raises(MoeplanError, match="precision-aware"):
        _cfg(optimizer="muon", bf16_moments=True)
    with pytest.raises(MoeplanError, match="bf16 moments"):
        api.plan("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=256, optimizer="muon", bf16_moments=True)


def test_duplicated_tp_mode_runs_whole_matrices():
    g = [(muon.Matrix(1024, 512, 1, False, True, 1024, 1024), 1.0)]
    block = muon.newton_schulz(g, 5, "blockwise")
    dup = muon.newton_schulz(g, 5, "duplicated")
    assert block.dense_flops == muon.ns_flops(1024, 512, 5)
    assert dup.dense_flops == muon.ns_flops(1024, 1024, 5)
    assert dup.tp_gather_bytes == (1024 * 1024 - 1024 * 512) * 4
    assert isinstance(Gemm("x", "attn", 1, 1), Gemm)


def test_muon_and_fsdp_do_not_combine():
    with pytest.raises(MoeplanError, match="Megatron-FSDP"):
        _cfg(optimizer="muon", fsdp="optim_grads_params")
    with pytest.raises(MoeplanError, match="strategy"):
        _cfg(fsdp="full")
    with pytest.raises(MoeplanError, match="optimizer"):
        _cfg(optimizer="lion")


# ------------------------------------------------------------------ exports per version


def test_fsdp_exports_per_version():
    cfg = _cfg(fsdp="optim_grads_params", fsdp_double_buffer=True)
    for version in ("0.14", "0.15", "0.16", "0.17", "0.18", "0.19"):
        st = M.to_settings(cfg, version)
        assert st["use_megatron_fsdp"] is True and st["data_parallel_sharding_strategy"] == "optim_grads_params"
        assert st["fsdp_double_buffer"] is True and st["ckpt_format"] == "fsdp_dtensor"
        assert st["use_distributed_optimizer"] is True and st["overlap_grad_reduce"] is True
    ov = M.to_overrides(cfg, "0.16")
    assert "ddp.use_megatron_fsdp=true" in ov and "checkpoint.ckpt_format=fsdp_dtensor" in ov
    args = M.to_megatron_lm_args(cfg, "0.16")
    assert "--use-megatron-fsdp" in args and args[args.index("--data-parallel-sharding-strategy") + 1] == "optim_grads_params"
    assert args[args.index("--ckpt-format") + 1] == "fsdp_dtensor"
    with pytest.raises(MoeplanError, match=r"Megatron-FSDP .* needs Megatron-Core >= 0.14"):
        M.to_settings(cfg, "0.13")


def test_muon_exports_per_version():
    cfg = _cfg(optimizer="muon")
    st16 = M.to_settings(cfg, "0.16")
    assert st16["optimizer"] == "dist_muon" and st16["use_distributed_optimizer"] is False
    assert st16["overlap_grad_reduce"] is False and st16["overlap_param_gather"] is False  # 0.16 asserts
    assert st16["muon_num_ns_steps"] == 5 and st16["muon_tp_mode"] == "blockwise"
    st17 = M.to_settings(cfg, "0.17")
    assert st17["overlap_grad_reduce"] is True
    args = M.to_megatron_lm_args(cfg, "0.16")
    assert args[args.index("--optimizer") + 1] == "dist_muon" and "--use-distributed-optimizer" not in args
    for old in ("0.13", "0.14", "0.15"):
        with pytest.raises(MoeplanError, match="Muon optimizer needs Megatron-Core >= 0.16"):
            M.to_settings(cfg, old)
    assert "optimizer.optimizer=dist_muon" in M.to_overrides(cfg, "0.16")


@pytest.mark.parametrize("kw", [dict(fsdp="optim_grads_params"), dict(fsdp="optim_grads", fsdp_double_buffer=True),
                                dict(fsdp="no_shard"), dict(optimizer="muon"),
                                dict(optimizer="muon", muon_layer_wise=False, dp_overlap=False)])
@pytest.mark.parametrize("kind", ["overrides", "megatron-lm", "yaml"])
def test_round_trip(kw: dict[str, object], kind: str):
    cfg = _cfg(dispatcher="alltoall", **kw)
    text = {"overrides": lambda: "\n".join(M.to_overrides(cfg)),
            "megatron-lm": lambda: " ".join(M.to_megatron_lm_args(cfg)),
            "yaml": lambda: M.to_yaml(cfg)}[kind]()
    parsed = M.parse_run_text(text, "run")
    back = M.run_config_from_settings(parsed.settings, cfg.model, 64, "h100")
    for key in ("fsdp", "fsdp_double_buffer", "optimizer", "muon_ns_steps", "muon_tp_mode", "muon_layer_wise"):
        assert getattr(back, key) == getattr(cfg, key), key
    assert not parsed.unknown


def test_reading_rejects_unmodelled_optimizer():
    with pytest.raises(MoeplanError, match="optimizer 'sgd' is not modelled"):
        M.run_config_from_settings({"optimizer": "sgd", "seq_length": 4096, "global_batch_size": 8},
                                   load_model("qwen3-30b-a3b"), 8, "h100")


def test_dp_assertions():
    bad = M.dp_assertions({"use_megatron_fsdp": True, "ckpt_format": "torch_dist"}, "0.16")
    assert [p.field for p in bad] == ["ckpt_format"]
    bad = M.dp_assertions({"optimizer": "dist_muon", "overlap_grad_reduce": True}, "0.16")
    assert [p.field for p in bad] == ["overlap_grad_reduce"]
    assert M.dp_assertions({"optimizer": "dist_muon", "overlap_grad_reduce": True}, "0.17") == []
    assert [p.field for p in M.dp_assertions({"optimizer": "muon", "overlap_param_gather": True}, "0.17")] == \
        ["overlap_param_gather"]
    assert "optimizer: dist_muon not accepted" in " ".join(str(p) for p in M.check_settings({"optimizer": "dist_muon"},
                                                                                             "0.15"))
    assert any("use_megatron_fsdp is not a Megatron-Core 0.13 field" in str(p)
               for p in M.check_settings({"use_megatron_fsdp": True}, "0.13"))


# ------------------------------------------------------------------ Megatron-Core 0.16.1 validation


def test_exports_build_megatron_core_configs():
    """The DDP and optimizer fields moeplan emits are accepted by the installed Megatron-Core's own
    DistributedDataParallelConfig / OptimizerConfig (0.16.1 has every FSDP and Muon field used)."""
    torch = pytest.importorskip("torch", reason="Megatron-Core validation needs torch")
    ddp_mod = pytest.importorskip("megatron.core.distributed.distributed_data_parallel_config",
                                  reason="needs megatron-core (pip install 'moeplan[mcore]')")
    opt_mod = pytest.importorskip("megatron.core.optimizer.optimizer_config", reason="needs megatron-core")
    from moeplan.megatron.mcore import installed_mcore_version

    version = installed_mcore_version()
    for kw in (dict(fsdp="optim_grads_params", fsdp_double_buffer=True), dict(optimizer="muon")):
        cfg = _cfg(mcore_version=version, **kw)
        st = M.to_settings(cfg, version)
        f = M.fields_for(version)
        ddp = {k: v for k, v in st.items() if f.knobs[k].owner == "DistributedDataParallelConfig"}
        # dtype fields as Bridge applies them (a torch dtype from its name: training/utils/omegaconf_utils.py)
        opt = {k: getattr(torch, v) if f.knobs[k].kind == "dtype" else v
               for k, v in st.items() if f.knobs[k].owner == "OptimizerConfig"}
        d = ddp_mod.DistributedDataParallelConfig(**ddp)
        o = opt_mod.OptimizerConfig(**opt)
        for k, v in ddp.items():
            assert getattr(d, k) == v
        for k, v in opt.items():
            assert getattr(o, k) == v


# ------------------------------------------------------------------ planner, CLI, linter


def test_planner_uses_fsdp_where_the_distributed_optimizer_does_not_fit():
    """Qwen3-235B-A22B on 64 H100 at 4K, PP and EP pinned to 1 and 8: weights + fp32 gradients alone are
    ~235e9 x 6 / 8 ... far over 80 GB unless Megatron-FSDP shards them over DP."""
    fixed = {"tp": 1, "pp": 1, "ep": 8}
    off = api.plan("qwen3-235b-a22b", gpu="h100", gpus=64, seq_len=4096, gbs=256, top=1, fixed=fixed,
                   fsdp="off", allow_gbs_reduction=False)
    assert not off["plans"]
    auto = api.plan("qwen3-235b-a22b", gpu="h100", gpus=64, seq_len=4096, gbs=256, top=1, fixed=fixed,
                    allow_gbs_reduction=False)
    assert auto["plans"] and auto["plans"][0]["fsdp"] == "optim_grads_params"
    assert "ddp.use_megatron_fsdp=true" in auto["plans"][0]["overrides"]
    # the rationale says why FSDP, with the numbers: the distributed optimizer alone does not fit
    why = {r["topic"]: r for r in auto["plans"][0]["rationale"]}["fsdp"]
    plain = api.estimate("qwen3-235b-a22b", gpu="h100", gpus=64, seq_len=4096, gbs=256, tp=1, pp=1, ep=8,
                         **{k: auto["plans"][0][k] for k in ("mbs", "dispatcher", "cp_comm_type", "optimizer_offload")},
                         recompute=auto["plans"][0]["recompute"], fsdp="off",
                         cuda_graphs=",".join(auto["plans"][0]["cuda_graphs"]) or None)
    assert why["numbers"]["memory_without_gib"] == pytest.approx(plain["memory_gib"]["total"], abs=0.06)
    assert plain["memory_gib"]["total"] > auto["plans"][0]["capacity_gib"] and "over the" in why["text"]
    assert why["numbers"]["dp_comm_s"] == pytest.approx(auto["plans"][0]["time_breakdown_s"]["dp_comm"], abs=1e-3)


def test_planner_keeps_the_users_optimizer():
    out = api.plan("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=256, top=1, optimizer="muon")
    best = out["plans"][0]
    assert best["optimizer"] == "muon" and best["fsdp"] is None  # FSDP is not searched with Muon
    assert "optimizer.optimizer=dist_muon" in best["overrides"]
    with pytest.raises(MoeplanError, match="Muon does not run with Megatron-FSDP"):
        api.plan("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=256, optimizer="muon",
                 fsdp="optim_grads_params")
    with pytest.raises(MoeplanError, match="needs Megatron-Core >= 0.14"):
        api.plan("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=256, fsdp="optim", mcore_version="0.13")


def test_version_errors_before_any_estimate():
    with pytest.raises(MoeplanError, match="Muon optimizer needs Megatron-Core >= 0.16"):
        api.build_config("qwen3-30b-a3b", gpus=16, seq_len=4096, gbs=256, ep=16, optimizer="muon",
                         mcore_version="0.15")
    with pytest.raises(MoeplanError, match="Megatron-FSDP .* needs Megatron-Core >= 0.14"):
        api.build_config("qwen3-30b-a3b", gpus=16, seq_len=4096, gbs=256, ep=16, fsdp="optim", mcore_version="0.13")
    with pytest.raises(MoeplanError, match="Muon optimizer needs Megatron-Core >= 0.16"):
        api.plan("qwen3-30b-a3b", gpus=16, seq_len=4096, gbs=256, optimizer="muon", mcore_version="0.14")
    cfg, _ = api.build_config("qwen3-30b-a3b", gpus=16, seq_len=4096, gbs=256, ep=16, fsdp="optim_grads_params",
                              mcore_version="0.14")
    assert cfg.fsdp == "optim_grads_params"


def test_cli_optimizer_and_fsdp(capsys):
    from moeplan.cli import main

    assert main(["estimate", "qwen3-30b-a3b", "--gpus", "64", "--seq-len", "4k", "--gbs", "256", "--ep", "8",
                 "--fsdp", "optim_grads_params", "--json"]) == 0
    import json

    est = json.loads(capsys.readouterr().out)
    assert est["fsdp"] == "optim_grads_params" and est["memory_gib"]["fsdp_buffers"] > 0
    assert main(["estimate", "qwen3-30b-a3b", "--gpus", "64", "--seq-len", "4k", "--gbs", "256", "--ep", "8",
                 "--optimizer", "muon", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["optimizer"] == "muon"
    assert main(["estimate", "qwen3-30b-a3b", "--gpus", "64", "--seq-len", "4k", "--gbs", "256", "--ep", "8",
                 "--optimizer", "muon", "--fsdp", "optim"]) == 2
    assert "Muon does not run with Megatron-FSDP" in capsys.readouterr().err


def test_check_reads_fsdp_and_lints(tmp_path):
    from moeplan.lint import checker

    path = tmp_path / "run.yaml"
    path.write_text("model:\n  tensor_model_parallel_size: 1\n  pipeline_model_parallel_size: 1\n"
                    "  expert_model_parallel_size: 8\n  seq_length: 4096\n"
                    "train:\n  global_batch_size: 256\n  micro_batch_size: 1\n"
                    "ddp:\n  use_megatron_fsdp: true\n  data_parallel_sharding_strategy: optim_grads_params\n"
                    "checkpoint:\n  ckpt_format: torch_dist\n", encoding="utf-8")
    result = checker.check(str(path), model="qwen3-235b-a22b", gpus=64)
    assert result.config.fsdp == "optim_grads_params"
    rules = {f.rule for f in result.findings}
    assert "mcore-assert" in rules  # fsdp_dtensor required
    path2 = tmp_path / "do.yaml"
    path2.write_text(path.read_text().replace("use_megatron_fsdp: true", "use_megatron_fsdp: false"), encoding="utf-8")
    result = checker.check(str(path2), model="qwen3-235b-a22b", gpus=64)
    sharding = [f for f in result.findings if f.rule == "dp-sharding"]
    assert sharding and sharding[0].severity == "error"  # does not fit; FSDP fits
    assert "ddp.use_megatron_fsdp=true" in sharding[0].fix


def test_muon_lint_findings():
    from moeplan.lint.rules import lint

    findings = lint(_cfg(optimizer="muon", muon_layer_wise=False, dp_overlap=False), _gpu())
    lw = [f for f in findings if f.rule == "muon-layer-wise"]
    assert lw and lw[0].numbers["saved_gib"] > 1
    assert "optimizer.optimizer=dist_muon" in lw[0].fix
    assert GIB > 0 and H100 > 0


def test_plan_table_marks_fsdp(capsys, monkeypatch):
    """A plan that needs Megatron-FSDP says so in its table row, not only in the overrides."""
    from moeplan.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    argv = ["plan", "qwen3-235b-a22b", "--gpus", "64", "--seq-len", "4k", "--gbs", "256", "--tp", "1", "--pp", "1",
            "--ep", "8", "--top", "1", "--keep-gbs"]
    assert main(argv) == 0
    assert "EP8 DP64 FSDP" in capsys.readouterr().out
    assert main([*argv, "--fsdp", "off"]) == 1  # nothing fits without it
    assert "no layout fits" in capsys.readouterr().err
    # a plan without Megatron-FSDP carries no mark (a table is printed, so the check can fail)
    assert main(["plan", "qwen3-30b-a3b", "--gpus", "16", "--seq-len", "4k", "--gbs", "256", "--top", "1",
                 "--fsdp", "off"]) == 0
    table = capsys.readouterr().out.split("Why plan 1")[0]
    assert "DP" in table and "FSDP" not in table


def test_fsdp_reason_when_the_distributed_optimizer_fits_and_is_faster():
    """An FSDP plan the distributed optimizer would run faster (a tie the planner lists) must not read as if
    FSDP were the faster choice: the reason says the plain plan fits and is faster, with both rates."""
    from moeplan.plan.advice import explain_plan
    from moeplan.engine.estimate import evaluate

    cfg, gpu = api.build_config("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=256, ep=16,
                                fsdp="optim_grads_params")
    est = evaluate(cfg, gpu)
    plain = evaluate(cfg.with_(fsdp=None, fsdp_double_buffer=False), gpu)
    budget = 72 * GIB
    assert plain.memory.total_bytes < budget and plain.time.tokens_per_s_per_gpu > 1.01 * est.time.tokens_per_s_per_gpu
    why = {r.topic: r for r in explain_plan(cfg, gpu, est, budget, 256)}["fsdp"]
    assert "runs faster" in why.text and "not needed for memory" in why.text and " but runs at " not in why.text
    assert why.numbers["tokens_per_s_per_gpu_without"] == pytest.approx(plain.time.tokens_per_s_per_gpu, abs=0.1)


def test_sweep_tables_mark_fsdp_as_the_plan_table_does():
    """The CLI sweep table and the HTML sweep section print a row's layout with its FSDP mark (one helper,
    report.plan_layout_label), as the plan table does: 'FSDP' for the full shard, 'FSDP <strategy>' else."""
    from rich.console import Console

    from moeplan.cli.sweep import _sweep_table
    from moeplan.report import _sweep_section, layout_label, plan_layout_label

    row = api.sweep("qwen3-30b-a3b", gpu="h100", gpus=16, seq_lens=[4096], gbs_tokens=1 << 20)[0]
    assert not row.get("fsdp") and plan_layout_label(row) == layout_label(row)
    for strategy, mark in (("optim_grads_params", " FSDP"), ("optim_grads", " FSDP optim_grads")):
        r = {**row, "fsdp": strategy}
        assert plan_layout_label(r) == layout_label(row) + mark
        console = Console(width=300, record=True)
        console.print(_sweep_table([r], narrow=False))
        assert layout_label(row) + mark in console.export_text()
        assert layout_label(row) + mark in _sweep_section([r])


def test_newer_release_sentence_marks_fsdp():
    """The 'a newer Megatron-Core adds it' sentence prints its plan's layout with the FSDP mark too."""
    from moeplan.plan.space import NewerRelease

    cfg, _ = api.build_config("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=256, ep=16,
                              fsdp="optim_grads_params")
    text = NewerRelease("0.16", "0.18", "context parallel for Gated DeltaNet", cfg, 1000.0, 60 * GIB, 0.2).sentence()
    assert "TP1 PP1 CP1 EP16 DP16 FSDP with no recompute" in text
    plain = NewerRelease("0.16", "0.18", "x", cfg.with_(fsdp=None, fsdp_double_buffer=False), 1000.0, 60 * GIB, 0.2)
    assert "DP16 with no recompute" in plain.sentence()
