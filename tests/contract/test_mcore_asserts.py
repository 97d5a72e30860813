"""Megatron-Core's start-up assertions that a run file can trip (moeplan.megatron.asserts): each row
trips on a file that breaks it, none trips on moeplan's own exports, and where the check lives in a
config ``__post_init__`` the installed Megatron-Core agrees (skipped without megatron-core)."""

from __future__ import annotations

import warnings

import pytest

from moeplan import api
from moeplan.lint import checker
from moeplan.megatron import export
from moeplan.megatron.asserts import ASSERTS, FileView, tripped
from moeplan.models import load_model

BASE = {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, "context_parallel_size": 4,
        "expert_model_parallel_size": 8, "sequence_parallel": True}

# row id -> (model, settings that trip it)
CASES = {
    "hierarchical-cp-product": ("qwen3-30b-a3b", {"hierarchical_context_parallel_sizes": [2, 4]}),
    "hierarchical-cp-missing": ("qwen3-30b-a3b", {"cp_comm_type": "a2a+p2p"}),
    "vpp-without-pp": ("qwen3-30b-a3b", {"pipeline_model_parallel_size": 1, "virtual_pipeline_model_parallel_size": 1}),
    "sequence-parallel-tp": ("qwen3-30b-a3b", {"tensor_model_parallel_size": 1}),
    "ep-tp-sequence-parallel": ("qwen3-30b-a3b", {"sequence_parallel": False}),
    "deepep-flag": ("qwen3-30b-a3b", {"moe_enable_deepep": True, "moe_token_dispatcher_type": "alltoall"}),
    "recompute-method": ("qwen3-30b-a3b", {"recompute_granularity": "full"}),
    "recompute-num-layers": ("qwen3-30b-a3b", {"recompute_granularity": "full", "recompute_method": "uniform"}),
    "recompute-method-selective": ("qwen3-30b-a3b", {"recompute_granularity": "selective", "recompute_method": "uniform"}),
    "recompute-mla-up-proj": ("qwen3-30b-a3b", {"recompute_granularity": "selective", "recompute_modules": ["mla_up_proj"]}),
    "offload-modules": ("qwen3-30b-a3b", {"fine_grained_activation_offloading": True, "offload_modules": ["attn_proj"]}),
    "pipeline-layout-conflict": ("qwen3-30b-a3b", {"pipeline_model_parallel_layout": "Et*24|t*24L",
                                                   "account_for_loss_in_pipeline_split": True}),
    "pipeline-layout-vpp": ("qwen3-30b-a3b", {"pipeline_model_parallel_layout": "Et*12|t*12|t*12|t*12L",
                                              "virtual_pipeline_model_parallel_size": 4}),
    "ep-a2a-overlap": ("qwen3-30b-a3b", {"overlap_moe_expert_parallel_comm": True, "moe_token_dispatcher_type": "alltoall"}),
    "ep-a2a-overlap-moe-recompute": ("qwen3-30b-a3b", {"overlap_moe_expert_parallel_comm": True,
                                                       "moe_token_dispatcher_type": "alltoall",
                                                       "virtual_pipeline_model_parallel_size": 2,
                                                       "recompute_granularity": "selective",
                                                       "recompute_modules": ["moe", "layernorm"]}),
    "ep-a2a-overlap-moe-recompute-unsupported": ("qwen3-30b-a3b", {"overlap_moe_expert_parallel_comm": True,
                                                                   "moe_token_dispatcher_type": "alltoall",
                                                                   "virtual_pipeline_model_parallel_size": 2,
                                                                   "recompute_granularity": "selective",
                                                                   "recompute_modules": ["moe"]}),
    "delay-wgrad-a2a-overlap": ("qwen3-30b-a3b", {"delay_wgrad_compute": True}),
    "delay-wgrad-graph-attn-bias": ("qwen3-30b-a3b", {"overlap_moe_expert_parallel_comm": True,
                                                      "moe_token_dispatcher_type": "alltoall",
                                                      "virtual_pipeline_model_parallel_size": 2,
                                                      "delay_wgrad_compute": True, "add_qkv_bias": True,
                                                      "cuda_graph_impl": "transformer_engine",
                                                      "cuda_graph_scope": ["attn"]}),
    "cuda-graph-flags": ("qwen3-30b-a3b", {"enable_cuda_graph": True, "external_cuda_graph": True}),
    "cuda-graph-scopes": ("qwen3-30b-a3b", {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["moe_preprocess"]}),
    "cp-comm-type-list": ("qwen3-30b-a3b", {"cp_comm_type": ["p2p", "a2a"]}),
    "precision-aware-optimizer": ("qwen3-30b-a3b", {"exp_avg_dtype": "bfloat16"}),
    "offload-moe-recompute": ("qwen3-30b-a3b", {"fine_grained_activation_offloading": True, "offload_modules": ["moe_act"],
                                                "recompute_granularity": "selective", "recompute_modules": ["moe"]}),
    "paged-stash": ("qwen3-30b-a3b", {"moe_paged_stash": True}),
    "rank-capacity-op-fuser": ("qwen3-30b-a3b", {"moe_expert_rank_capacity_factor": 1.0,
                                                 "moe_token_dispatcher_type": "flex",
                                                 "moe_flex_dispatcher_backend": "hybridep"}),
    "dsa-cp-allgather": ("glm-5", {"cp_comm_type": "p2p"}),
}


def _view(model: str, settings: dict, version: str = "0.16") -> FileView:
    # as a Megatron-LM argument list: every row applies to one (recompute-method-selective only to one)
    return FileView({**BASE, **settings}, {}, load_model(model), 64, version, "megatron-lm")


def test_every_row_has_a_case():
    assert {a.id for a in ASSERTS} == set(CASES)


@pytest.mark.parametrize("row", sorted(CASES))
def test_row_trips_on_its_case_and_not_on_the_base(row):
    model, settings = CASES[row]
    since = next(a.since for a in ASSERTS if a.id == row)
    version = max("0.16", since, key=lambda v: tuple(map(int, v.split("."))))
    assert row in {a.id for a, _ in tripped(_view(model, settings, version))}
    assert not tripped(_view(model, {}, version))


def test_ep_overlap_with_moe_recompute_is_an_error_from_017_and_a_warning_before():
    """transformer_config.py core_r0.17.0+ asserts "moe" not in recompute_modules with EP A2A overlap; 0.16
    accepts the pair without supporting it (Megatron-LM #3917 added the missing assertion): a warning."""
    _, settings = CASES["ep-a2a-overlap-moe-recompute"]
    assert [(a.id, a.severity) for a, _ in tripped(_view("qwen3-30b-a3b", settings, "0.16"))] == [
        ("ep-a2a-overlap-moe-recompute-unsupported", "warning")]
    for version in ("0.17", "0.19"):
        assert [(a.id, a.severity) for a, _ in tripped(_view("qwen3-30b-a3b", settings, version))] == [
            ("ep-a2a-overlap-moe-recompute", "error")]


@pytest.mark.parametrize("extra,needle", [({"moe_shared_expert_overlap": True}, "moe_shared_expert_overlap"),
                                          ({"mtp_num_layers": 2}, "at most one MTP layer")])
def test_ep_overlap_other_exclusions(extra, needle):
    settings = {"overlap_moe_expert_parallel_comm": True, "moe_token_dispatcher_type": "alltoall",
                "virtual_pipeline_model_parallel_size": 2, **extra}
    msgs = [m for a, m in tripped(_view("qwen3-30b-a3b", settings)) if a.id == "ep-a2a-overlap"]
    assert msgs and needle in msgs[0]


def test_hierarchical_cp_product_is_an_error_with_its_line(tmp_path):
    path = tmp_path / "hcp.yaml"
    path.write_text("model:\n  tensor_model_parallel_size: 2\n  context_parallel_size: 8\n"
                    "  hierarchical_context_parallel_sizes: [2, 2]\n  cp_comm_type: a2a+p2p\n"
                    "  expert_model_parallel_size: 8\n  sequence_parallel: true\n"
                    "train:\n  global_batch_size: 64\n  micro_batch_size: 1\ndataset:\n  sequence_length: 32768\n")
    result = checker.check(str(path), model="qwen3-30b-a3b", gpus=64)
    hit = [f for f in result.findings if f.rule == "mcore-hierarchical-cp-product"]
    assert hit and hit[0].severity == "error" and hit[0].line == 4
    assert "multiply to 4, not context_parallel_size 8" in hit[0].message
    assert result.errors >= 1


@pytest.mark.parametrize("model,gpus,seq,gbs,version", [
    ("deepseek-v3", 1024, 131072, 1024, "0.16"), ("qwen3-235b-a22b", 256, 131072, 256, "0.16"),
    ("qwen3-next-80b-a3b", 128, 65536, 256, "0.18"), ("qwen3-30b-a3b", 64, 32768, 64, "0.16"),
    ("deepseek-v3", 256, 65536, 256, "0.19"), ("qwen3-235b-a22b", 256, 65536, 256, "0.17")])
def test_moeplan_exports_trip_nothing(model, gpus, seq, gbs, version):
    gpu = "gb200" if model == "qwen3-235b-a22b" else "h100"
    result = api.search_plans(model, gpu=gpu, gpus=gpus, seq_len=seq, gbs=gbs, top=3, mcore_version=version)
    assert result.plans
    for p in result.plans:
        cfg = p.config
        settings = export.to_settings(cfg, version)
        assert not tripped(FileView(settings, {}, cfg.model, gpus, version)), cfg.parallel.short()


# The rows whose check is in a config __post_init__, against the installed Megatron-Core.
POST_INIT = ("sequence-parallel-tp", "deepep-flag", "delay-wgrad-a2a-overlap", "recompute-method", "recompute-num-layers", "offload-modules",
             "pipeline-layout-conflict", "cuda-graph-flags", "precision-aware-optimizer")


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("row", POST_INIT)
def test_installed_megatron_core_agrees(row):
    pytest.importorskip("torch", reason="needs torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tc = pytest.importorskip("megatron.core.transformer.transformer_config", reason="needs megatron-core")
        oc = pytest.importorskip("megatron.core.optimizer.optimizer_config", reason="needs megatron-core")
    import torch

    _, settings = CASES[row]
    kw = {**BASE, **settings}
    for k in ("context_parallel_size", "expert_model_parallel_size"):
        kw.pop(k)
    base = dict(num_layers=4, hidden_size=64, num_attention_heads=4, pipeline_dtype=torch.bfloat16, bf16=True)
    if row == "precision-aware-optimizer":
        with pytest.raises(AssertionError):
            oc.OptimizerConfig(exp_avg_dtype=torch.bfloat16)
        return
    if row == "pipeline-layout-conflict":
        kw["pipeline_model_parallel_layout"] = "Et*2|t*2L"
    with pytest.raises((ValueError, AssertionError)):
        tc.TransformerConfig(**base, **kw)
    ok = {**kw}
    for key in settings:  # the base alone is accepted
        ok.pop(key, None)
    ok.setdefault("tensor_model_parallel_size", 2)
    tc.TransformerConfig(**base, **ok)


def test_planner_never_pairs_ep_overlap_with_moe_recompute_from_017():
    """RunConfig.ep_overlap_allowed refuses the pair in every release (unsupported before 0.17, asserted
    from it), so no plan pairs them and the estimate refuses the pair as a knob problem."""
    from moeplan.engine.knobs import knob_problem
    from moeplan.run.parallel import Batch, Parallel
    from moeplan.run.config import Recompute, RunConfig
    from moeplan.hardware import load_gpu

    spec = load_model("qwen3-30b-a3b")
    par = Parallel(gpus=16, tp=1, pp=2, vpp=2, ep=8)
    for version, allowed in (("0.16", False), ("0.17", False), ("0.18", False), ("0.19", False)):
        cfg = RunConfig(spec, par, Batch(8192, 64, 1), gpu="h100", mcore_version=version,
                        recompute=Recompute.parse("selective:moe,layernorm"), dispatcher="alltoall")
        assert cfg.ep_overlap_allowed is allowed, version
        problem = knob_problem(cfg.evolve(ep_overlap=True), load_gpu("h100"))
        assert (problem is None) is allowed, version
        assert RunConfig(spec, par, Batch(8192, 64, 1), gpu="h100", mcore_version=version,
                         recompute=Recompute.parse("selective:moe_act"), dispatcher="alltoall").ep_overlap_allowed
    for version in ("0.16", "0.17"):
        for p in api.search_plans("qwen3-235b-a22b", gpu="h100", gpus=256, seq_len=65536, gbs=256, top=5,
                                  mcore_version=version).plans:
            assert not (p.config.ep_overlap and "moe" in p.config.recompute.modules), p.config.parallel.short()


def test_dsa_cp_takes_either_spelling_of_all_gather():
    """Megatron-Core's DSAttention normalises cp_comm_type (no underscores): Bridge's all_gather is its allgather."""
    for spelling in ("all_gather", "allgather"):
        assert not tripped(_view("glm-5", {"cp_comm_type": spelling}))
    assert "dsa-cp-allgather" in {a.id for a, _ in tripped(_view("glm-5", {"cp_comm_type": "a2a"}))}
