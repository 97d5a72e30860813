"""Lint rules for what users hit (moeplan.plan.pitfalls, moeplan.megatron.asserts), each citing its source: DeepEP's EP
cap, HybridEP's InfiniBand queue depth, CUDA graphs that cost the fit, throughput above peak, the paged stash's
and fine-grained offloading's exclusions."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from moeplan.api import build_config
from moeplan.base.deepep_configs import DEEPEP_NVL_PEERS, DEEPEP_RDMA_PEERS
from moeplan.base.errors import MoeplanError
from moeplan.calibrate.fit import run_from_log
from moeplan.engine.budget import MEMORY_MODEL_ERROR
from moeplan.engine.estimate import Evaluator
from moeplan.hardware import load_gpu
from moeplan.lint.rules import lint
from moeplan.logs import read_log
from moeplan.megatron import export
from moeplan.megatron.asserts import FileView, tripped
from moeplan.models import load_model
from moeplan.plan import pitfalls

from ..log_fixtures import QWEN3_30B_EP16, mlm_log, step_times


def cfg_of(model: str, **kw):  # noqa: ANN201
    cfg, gpu = build_config(model, **kw)  # type: ignore[arg-type]
    return cfg, gpu


def rules_of(findings) -> dict[str, object]:  # noqa: ANN001
    return {f.rule: f for f in findings}


# ------------------------------------------------------------------ DeepEP's EP cap (deepseek-ai/DeepEP #464)


def test_deepep_beyond_160_ep_ranks_is_an_error_with_its_source():
    cfg, gpu = cfg_of("deepseek-v3", gpu="h100", gpus=256, seq_len=4096, gbs=256, ep=256, dispatcher="deepep",
                      mcore_version="0.19")
    hit = rules_of(lint(cfg, gpu)).get("deepep-ep-ranks")
    assert hit is not None and hit.severity == "error" and "DeepEP #464" in hit.message
    assert hit.numbers == {"ep": 256, "etp": 1, "ep_ranks": 256, "max_ep": 160}
    assert "model.moe_flex_dispatcher_backend=hybridep" in hit.fix
    ok, _ = cfg_of("deepseek-v3", gpu="h100", gpus=128, seq_len=4096, gbs=256, ep=128, dispatcher="deepep",
                   mcore_version="0.19")
    assert not pitfalls.deepep_ranks(ok, {})
    other, _ = cfg_of("deepseek-v3", gpu="h100", gpus=256, seq_len=4096, gbs=256, ep=256, dispatcher="hybridep",
                      mcore_version="0.19")
    assert not pitfalls.deepep_ranks(other, {})


def test_deepeps_rank_cap_is_its_buffers_nvlink_times_rdma_peers():
    """The 160-rank cap is the Buffer's (base.deepep_configs: csrc NUM_MAX_NVL_PEERS x NUM_MAX_RDMA_PEERS, 8 x 20),
    not the config table's largest row (equal today, another fact: tests/unit/test_deepep_configs.py), and not
    restated in pitfalls; the message names both peer counts."""
    assert pitfalls.DEEPEP_MAX_RANKS == DEEPEP_NVL_PEERS * DEEPEP_RDMA_PEERS == 160
    over, _ = cfg_of("deepseek-v3", gpu="h100", gpus=256, seq_len=4096, gbs=256, ep=256, dispatcher="deepep",
                     mcore_version="0.19")
    (hit,) = pitfalls.deepep_ranks(over, {})
    assert "(8 NVLink x 20 RDMA peers;" in hit.message
    tree = ast.parse(Path(pitfalls.__file__).read_text(encoding="utf-8"))
    literal = [t.id for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
               for t in node.targets if isinstance(t, ast.Name) and t.id.startswith("DEEPEP")]
    assert not literal


# ------------------------------------------------------------------ EP sizes DeepEP lists (deep_ep get_dispatch_config)


def _deepep(model: str, ep: int, etp: int = 1, dispatcher: str = "deepep"):  # noqa: ANN202
    gpus = 16 * ep * etp
    return cfg_of(model, gpu="h100", gpus=gpus, seq_len=4096, gbs=2 * gpus, ep=ep, etp=etp, dispatcher=dispatcher,
                  mcore_version="0.19")


def test_deepep_at_an_ep_size_deepep_does_not_list_is_a_warning_citing_the_listed_sizes():
    """deep_ep Buffer.get_dispatch_config / get_combine_config assert the EP size is listed (2, 4, 8, 16, 24, 32, 48,
    64, 96, 128, 144, 160) and Megatron-Core's fused_a2a.get_buffer asks them for its group's size; above 8 ranks the
    Buffer also asserts a multiple of 8. A warning (no fix, the run itself unchanged): EP 12 (not a multiple of 8),
    EP 40 and 80 (multiples of 8, not listed); moeplan estimates them with the next listed row."""
    cfg, gpu = _deepep("kimi-k2", 12)
    hit = rules_of(lint(cfg, gpu)).get("deepep-ep-size")
    assert hit is not None and hit.severity == "warning" and hit.fix == ()
    assert hit.numbers == {"ep_ranks": 12, "listed_ep": [2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160],
                           "config_ep": 16}
    assert "2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160" in hit.message and "multiple of 8" in hit.message
    for ep, row in ((40, 48), (80, 96)):
        cfg, gpu = _deepep("glm-4.5", ep)
        (hit,) = pitfalls.deepep_ep_size(cfg, {"expert_model_parallel_size": 7})
        assert hit.numbers["config_ep"] == row and "multiple of 8" not in hit.message and hit.line == 7
    listed, _ = _deepep("glm-4.5", 32)
    other, _ = _deepep("glm-4.5", 40, dispatcher="hybridep")
    assert not pitfalls.deepep_ep_size(listed, {}) and not pitfalls.deepep_ep_size(other, {})


def test_deepeps_group_is_expert_tp_times_ep():
    """Megatron-Core's flex dispatcher hands DeepEP its expert-TP x EP group (token_dispatcher.py tp_ep_group): EP 12
    x ETP 2 is 24 ranks (listed); EP 6 x ETP 2 is 12 (not), estimated with the 16-rank row, the next listed size up
    from the group's 12 ranks (base.deepep_configs.tp_ep_group_ranks; every lookup reads the group)."""
    ok, _ = _deepep("kimi-k2", 12, etp=2)
    assert not pitfalls.deepep_ep_size(ok, {})
    bad, _ = _deepep("kimi-k2", 6, etp=2)
    (hit,) = pitfalls.deepep_ep_size(bad, {})
    assert hit.numbers["ep_ranks"] == 12 and hit.numbers["config_ep"] == 16 and "expert TP 2" in hit.message


def test_deepeps_rank_cap_counts_expert_tp_times_ep():
    """DeepEP's Buffer asserts its group's ranks (ETP x EP) <= 160: EP 64 x ETP 4 is 256 ranks and will not start,
    though EP 64 alone is within the cap; EP 80 x ETP 2 (160 ranks) starts."""
    over, _ = cfg_of("deepseek-v3", gpu="h100", gpus=256, seq_len=4096, gbs=256, tp=4, ep=64, etp=4,
                     dispatcher="deepep", mcore_version="0.19")
    (hit,) = pitfalls.deepep_ranks(over, {})
    assert hit.severity == "error" and hit.numbers == {"ep": 64, "etp": 4, "ep_ranks": 256, "max_ep": 160}
    assert "256 ranks" in hit.message and "expert TP 4" in hit.message
    assert not pitfalls.deepep_ep_size(over, {})  # one finding: the cap, not also the unlisted size
    at_cap, _ = cfg_of("glm-4.5", gpu="h100", gpus=160, seq_len=4096, gbs=160, tp=2, ep=80, etp=2,
                       dispatcher="deepep", mcore_version="0.19")
    assert not pitfalls.deepep_ranks(at_cap, {})


# ------------------------------------------------------------------ HybridEP across InfiniBand (Megatron-LM #3999)


def test_hybridep_across_infiniband_warns_when_tokens_per_rank_exceed_the_queue_depth():
    cfg, gpu = cfg_of("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=32768, gbs=64, ep=16, dispatcher="hybridep",
                      mcore_version="0.19")
    (hit,) = pitfalls.hybridep_ib_queue(cfg, {})
    assert hit.severity == "warning" and "Megatron-LM #3999" in hit.message
    assert hit.numbers == {"tokens_per_rank": 32768, "max_tokens": 21844}  # 3 x 21844 + 1 = 65533 < 65536
    assert "hybridep-ib-queue-depth" in rules_of(lint(cfg, gpu))
    # CP 2 halves the tokens per rank: inside the limit
    half, _ = cfg_of("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=32768, gbs=64, ep=8, cp=2, dispatcher="hybridep",
                     mcore_version="0.19")
    assert pitfalls.dispatch_tokens_per_rank(half) == 16384 and not pitfalls.hybridep_ib_queue(half, {})
    # inside one NVLink domain (GB200 NVL72) no NIC is involved
    nvl, _ = cfg_of("qwen3-30b-a3b", gpu="gb200", gpus=16, seq_len=32768, gbs=64, ep=16, dispatcher="hybridep",
                    mcore_version="0.19")
    assert not pitfalls.hybridep_ib_queue(nvl, {})


def test_hybridep_queue_rule_reads_the_flex_dispatchers_group():
    """The span across NVLink is the flex dispatcher's expert TP x EP group as every lookup reads it
    (base.deepep_configs.tp_ep_group_ranks), not a product written again: EP 4 x ETP 4 is 16 ranks on 8-GPU H100
    nodes (across InfiniBand), EP 4 alone is inside one node."""
    across, _ = cfg_of("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=131072, gbs=16, tp=4, ep=4, etp=4,
                       dispatcher="hybridep", mcore_version="0.19")
    (hit,) = pitfalls.hybridep_ib_queue(across, {})
    assert "EP x ETP 16 > NVLink domain 8" in hit.message
    inside, _ = cfg_of("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=131072, gbs=16, tp=4, ep=4,
                       dispatcher="hybridep", mcore_version="0.19")
    assert not pitfalls.hybridep_ib_queue(inside, {})
    tree = ast.parse(Path(pitfalls.__file__).read_text(encoding="utf-8"))
    products = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult)
                and {getattr(n.left, "attr", None), getattr(n.right, "attr", None)} == {"ep", "etp"}]
    assert not products


def test_hybridep_queue_rule_is_keyed_by_version():
    from moeplan.base.fields import hybridep_ib_tokens_cap

    assert hybridep_ib_tokens_cap("0.15") is None  # no HybridEP before 0.16
    assert {hybridep_ib_tokens_cap(v) for v in ("0.16", "0.17", "0.18", "0.19")} == {21844}


# ------------------------------------------------------------------ CUDA graphs that cost the fit


def test_cuda_graphs_that_make_a_fitting_run_not_fit_name_the_scope():
    cfg, gpu = cfg_of("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=64, ep=8, dispatcher="alltoall",
                      recompute="full:uniform:1", cuda_graphs="attn,moe_router,moe_preprocess", mcore_version="0.19")
    probe = Evaluator(gpu, gpu.hbm_bytes, gpu.hbm_bytes)
    with_graphs = probe(cfg).memory.total_bytes
    without = probe(cfg.with_(cuda_graph_scopes=frozenset())).memory.total_bytes
    assert gpu.hbm_bytes > with_graphs > without
    # a headroom that puts the budget's edge (the budget + the memory model's error, engine.budget) between the two
    mid = (with_graphs + without) / 2
    headroom = 1 - mid / (1 + MEMORY_MODEL_ERROR) / gpu.hbm_bytes
    found = rules_of(lint(cfg, gpu, headroom=headroom))
    hit = found.get("cuda-graphs-memory")
    assert hit is not None and hit.severity == "error", sorted(found)
    assert "memory" in found  # the memory error it explains
    # at the edge (over the budget, inside its edge) with the bare run under the budget: a warning
    headroom = 1 - mid / gpu.hbm_bytes
    assert with_graphs <= gpu.hbm_bytes * (1 - headroom) * (1 + MEMORY_MODEL_ERROR)  # inside the edge
    found = rules_of(lint(cfg, gpu, headroom=headroom))
    assert found["cuda-graphs-memory"].severity == "warning" and "memory-edge" in found, sorted(found)
    assert set(hit.numbers["scopes"]) <= {"attn", "moe_router", "moe_preprocess"} and hit.numbers["scopes"]
    assert any("cuda_graph" in o for o in hit.fix)
    # with room for the graphs: no finding
    assert "cuda-graphs-memory" not in rules_of(lint(cfg, gpu, headroom=max(0.0, 1 - with_graphs / gpu.hbm_bytes - 0.01)))


# ------------------------------------------------------------------ above the GPU's peak


def test_an_estimate_above_the_gpus_peak_is_misconfigured():
    cfg, gpu = cfg_of("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=64, ep=8, dispatcher="alltoall")
    assert not pitfalls.estimate_above_peak(cfg, Evaluator(gpu, gpu.hbm_bytes, gpu.hbm_bytes)(cfg))
    # a hardware entry whose peak is a hundredth of the real one (its measured GEMM rates unchanged)
    wrong = replace(gpu, peak_flops={k: v / 100 for k, v in gpu.peak_flops.items()})
    cfg_wrong = cfg.with_(gpu=wrong)
    hit = rules_of(lint(cfg_wrong, wrong)).get("above-peak")
    assert hit is not None and hit.severity == "error" and "peak" in hit.message


def test_a_logged_throughput_above_the_peak_is_refused(tmp_path):
    path = tmp_path / "impossible.log"
    path.write_text(mlm_log(QWEN3_30B_EP16, step_times(20.147, 20), tflops_steady=5000.0, peak_alloc_gib=62.0,
                            peak_reserved_gib=66.0))
    with pytest.raises(MoeplanError, match="above h100's dense bf16 peak"):
        run_from_log(read_log(path), gpu="h100")
    assert pitfalls.above_peak(989.0, load_gpu("h100"), "bf16") is None


# ------------------------------------------------------------------ Megatron-Core's exclusions (file checks)


def _ids(settings: dict, version: str) -> set[str]:
    base = {"tensor_model_parallel_size": 1, "expert_model_parallel_size": 8}
    return {a.id for a, _ in tripped(FileView({**base, **settings}, {}, load_model("qwen3-30b-a3b"), 16, version))}


def test_fine_grained_offloading_exclusions():
    cpu = {"fine_grained_activation_offloading": True, "offload_modules": ["core_attn"]}
    assert "offload-modules" not in _ids(dict(cpu), "0.16")
    view = FileView({**cpu}, {"cpu_offloading": True}, load_model("qwen3-30b-a3b"), 16, "0.16")
    assert [m for a, m in tripped(view) if a.id == "offload-modules"][0].startswith(
        "fine_grained_activation_offloading cannot be enabled with cpu_offloading")
    moe = {"fine_grained_activation_offloading": True, "offload_modules": ["expert_fc1"],
           "recompute_granularity": "selective", "recompute_modules": ["moe"]}
    assert "offload-moe-recompute" in _ids(moe, "0.19")
    assert "offload-moe-recompute" not in _ids(moe, "0.18")  # Megatron-LM #3697, in core_v0.19.0


def test_check_reads_cpu_offloading_from_a_file(tmp_path):
    from moeplan.lint import checker

    path = tmp_path / "run.yaml"
    path.write_text("model:\n  expert_model_parallel_size: 8\n  moe_token_dispatcher_type: alltoall\n"
                    "  fine_grained_activation_offloading: true\n  offload_modules: [core_attn]\n"
                    "  cpu_offloading: true\n"
                    "train:\n  global_batch_size: 64\n  micro_batch_size: 1\ndataset:\n  seq_length: 4096\n")
    found = checker.check(str(path), model="qwen3-30b-a3b", gpu="h100", gpus=16, mcore_version="0.19").findings
    hit = [f for f in found if f.rule == "mcore-offload-modules"]
    assert hit and "cpu_offloading" in hit[0].message and hit[0].severity == "error"


def test_paged_stash_needs_hybridep_and_the_op_fuser():
    stash = {"moe_paged_stash": True, "moe_expert_rank_capacity_factor": 1.25, "moe_token_dispatcher_type": "flex",
             "moe_flex_dispatcher_backend": "hybridep", "use_transformer_engine_op_fuser": True}
    assert not _ids(stash, "0.18") & {"paged-stash", "rank-capacity-op-fuser"}
    assert "rank-capacity-op-fuser" in _ids({**stash, "use_transformer_engine_op_fuser": False}, "0.18")
    assert "paged-stash" in _ids({"moe_paged_stash": True}, "0.18")
    assert "paged-stash" not in _ids({"moe_paged_stash": True}, "0.17")  # no paged stash before core_v0.18.0
    offload = {**stash, "fine_grained_activation_offloading": True, "offload_modules": ["moe_act"]}
    assert "paged-stash" in _ids(offload, "0.19")


def test_rank_capacity_without_hybridep_is_one_finding(tmp_path):
    """The HybridEP requirement of the per-rank capacity is moeplan's settings check; the paged stash's op fuser
    requirement is Megatron-Core's assertion: a file with both faults gets each once."""
    from moeplan.lint import checker

    path = tmp_path / "rc.yaml"
    path.write_text("model:\n  seq_length: 4096\n  expert_model_parallel_size: 16\n  moe_token_dispatcher_type: flex\n"
                    "  moe_flex_dispatcher_backend: hybridep\n  moe_expert_rank_capacity_factor: 1.5\n"
                    "  moe_paged_stash: true\ntrain:\n  global_batch_size: 1024\n")
    rules = [f.rule for f in checker.check(str(path), model="qwen3-30b-a3b", gpus=16, mcore_version="0.18").findings
             if f.severity == "error"]
    assert rules.count("mcore-rank-capacity-op-fuser") == 1, rules


def test_moeplans_own_sync_free_export_trips_none_of_them():
    cfg, _ = cfg_of("qwen3-30b-a3b", gpu="h100", gpus=16, seq_len=4096, gbs=64, ep=8, dispatcher="hybridep",
                    rank_capacity_factor=1.25, mcore_version="0.19")
    settings = export.to_settings(cfg)
    assert not tripped(FileView(settings, {}, cfg.model, 16, "0.19"))
