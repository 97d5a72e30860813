"""moeplan.megatron: export to Bridge overrides / YAML / Megatron-LM flags, and reading them back."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moeplan.api import build_config
from moeplan.base.errors import MoeplanError
from moeplan.base import fields
from moeplan.megatron import export, read, to_run
from moeplan.run.parallel import build_pipeline
from moeplan.run.config import Recompute, RunConfig

PLANS = {
    "dsv3": dict(model="deepseek-v3", gpus=256, seq_len=131072, gbs=64, tp=1, pp=8, vpp=4, cp=32, ep=32,
                 recompute="selective:mla_up_proj,layernorm", dispatcher="deepep", cuda_graphs="attn",
                 optimizer_offload=0.5, precision="fp8", ep_overlap=True, cp_comm_type="a2a+p2p"),
    "dsv3-offload": dict(model="deepseek-v3", gpus=256, seq_len=65536, gbs=64, tp=2, pp=8, cp=16, ep=32,
                         recompute="selective:moe_act,shared_experts", dispatcher="hybridep",
                         cuda_graphs="attn,moe_router,moe_preprocess", offload_modules="expert_fc1,moe_act",
                         bf16_moments=True, grad_fp32=False, precision="mxfp8", gpu="b200"),
    "qwen3-235b": dict(model="qwen3-235b-a22b", gpus=256, seq_len=32768, gbs=64, tp=4, pp=8, vpp=4, cp=4, ep=8,
                       recompute="full:block:2", dispatcher="alltoall", cp_comm_type="p2p", precision="fp8-cs"),
    "qwen3-next": dict(model="qwen3-next-80b-a3b", gpus=32, seq_len=65536, gbs=32, tp=1, cp=4, ep=32,
                       recompute="full:uniform:1", dispatcher="alltoall", cuda_graphs="full_iteration",
                       capacity_factor=1.25, precision="fp8-ds", mcore_version="0.18"),  # GDN with CP: 0.18+
    "mixtral": dict(model="mixtral-8x7b", gpus=16, seq_len=32768, gbs=64, tp=2, pp=2, ep=8, dispatcher="allgather",
                    cp_comm_type="allgather"),
}


def plan(name: str, **changes: object) -> RunConfig:
    kwargs = {"gpu": "h100", **PLANS[name], **changes}
    cfg, _ = build_config(kwargs.pop("model"), **kwargs)  # type: ignore[arg-type]
    return cfg


def exportable() -> list[tuple[str, str]]:
    """(plan, version) pairs the version can express."""
    pairs = []
    for name in PLANS:
        for version in fields.VERSIONS:
            try:
                export.to_settings(plan(name), version)
            except MoeplanError:
                continue
            pairs.append((name, version))
    return pairs


PAIRS = exportable()


def read_back(settings: dict[str, object]) -> dict[str, object]:
    """What a reader returns as settings: the pipeline split options come back as architecture fields."""
    return {k: v for k, v in settings.items() if not fields.KNOB_BY_FIELD[k].architecture}


def mlm_expressible(settings: dict[str, object]) -> dict[str, object]:
    """Megatron-LM flags cannot say None, False (plain store_true flags) or []."""
    return {k: v for k, v in settings.items()
            if v is not None and v != [] and (v is not False or fields.KNOB_BY_FIELD[k].mlm_false)}


def with_explicit_layout(cfg: RunConfig) -> RunConfig:
    """The plan with the layout string moeplan exports (a balanced split comes back as an explicit layout)."""
    pipe = build_pipeline(cfg.model, cfg.parallel)
    layout = pipe.layout_string() if pipe.explicit else None
    return cfg.with_(parallel=cfg.parallel.__class__(**{**cfg.parallel.__dict__, "pipeline_layout": layout}))


def as_exported(cfg: RunConfig) -> RunConfig:
    """The plan as its export says it: the explicit layout, and with EP overlap the delay_wgrad_compute the file
    spells out (Bridge's pairing, None, comes back as the value it resolved to)."""
    return with_explicit_layout(cfg).with_(delay_wgrad=cfg.delay_wgrad_on if cfg.ep_overlap else cfg.delay_wgrad)


def test_every_plan_exports_to_the_default_version() -> None:
    assert {name for name, v in PAIRS if v == fields.DEFAULT_VERSION} == set(PLANS)
    assert len(PAIRS) >= 20


@pytest.mark.parametrize(("name", "version"), PAIRS)
def test_exported_fields_exist_in_the_target_version(name: str, version: str) -> None:
    settings = export.to_settings(plan(name), version)
    assert set(settings) <= set(fields.fields_for(version).knobs)
    assert fields.check_settings(settings, version) == []


# ------------------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize(("name", "version"), PAIRS)
def test_overrides_round_trip(name: str, version: str) -> None:
    cfg = plan(name)
    run = read.parse_run_text("\n".join(export.to_overrides(cfg, version)), "o.txt")
    assert run.kind == "overrides"
    assert run.settings == read_back(export.to_settings(cfg, version))
    assert run.unknown == [] and run.conflicts == []


@pytest.mark.parametrize(("name", "version"), PAIRS)
def test_overrides_round_trip_space_separated_shell_line(name: str, version: str) -> None:
    cfg = plan(name)
    run = read.parse_run_text(shlex.join(export.to_overrides(cfg, version)))
    assert run.settings == read_back(export.to_settings(cfg, version))


@pytest.mark.parametrize(("name", "version"), PAIRS)
def test_yaml_round_trip(name: str, version: str) -> None:
    cfg = plan(name)
    run = read.parse_run_text(export.to_yaml(cfg, version), "run.yaml")
    assert run.kind == "bridge-yaml"
    assert run.settings == read_back(export.to_settings(cfg, version))
    assert run.unknown == [] and run.conflicts == []


@pytest.mark.parametrize(("name", "version"), PAIRS)
def test_megatron_lm_round_trip(name: str, version: str) -> None:
    cfg = plan(name)
    args = export.to_megatron_lm_args(cfg, version)
    expected = mlm_expressible(read_back(export.to_settings(cfg, version)))
    one_line = read.parse_run_text(shlex.join(args))
    continued = read.parse_run_text("torchrun --nproc-per-node 8 pretrain_gpt.py \\\n    "
                                 + " \\\n    ".join(shlex.quote(a) for a in args))
    assert one_line.kind == continued.kind == "megatron-lm"
    assert one_line.settings == continued.settings == expected
    assert one_line.unknown == continued.unknown == []


@pytest.mark.parametrize("name", list(PLANS))
@pytest.mark.parametrize("fmt", ["overrides", "yaml", "megatron-lm"])
def test_run_config_round_trip(name: str, fmt: str) -> None:
    cfg = plan(name)
    text = {"overrides": lambda: "\n".join(export.to_overrides(cfg)), "yaml": lambda: export.to_yaml(cfg),
            "megatron-lm": lambda: shlex.join(export.to_megatron_lm_args(cfg))}[fmt]()
    run = read.parse_run_text(text)
    back = to_run.run_config_from_settings(run.settings, cfg.model, cfg.parallel.gpus, cfg.gpu, mcore_version=cfg.mcore_version)
    assert back == as_exported(cfg)


# ------------------------------------------------------------------------------------------ export details


def test_override_syntax() -> None:
    over = export.to_overrides(plan("dsv3"))
    assert "model.context_parallel_size=32" in over
    assert "train.global_batch_size=64" in over
    assert "model.recompute_modules=[layernorm,mla_up_proj]" in over
    assert "model.recompute_method=null" in over
    assert "model.pipeline_model_parallel_layout='Et|(tt|)*30mL'" in over  # parentheses need Hydra quoting
    assert "optimizer.optimizer_cpu_offload=true" in over
    assert "optimizer.optimizer_offload_fraction=0.5" in over
    assert "optimizer.use_precision_aware_optimizer=true" in over
    assert "++comm_overlap.overlap_moe_expert_parallel_comm=true" in over
    assert "++mixed_precision.fp8_recipe=blockwise" in over
    # sections a recipe may leave None or name by a string are written as instances (fields._INSTANCE_SECTIONS)
    assert over.index("++comm_overlap._target_=megatron.bridge.training.config.CommOverlapConfig") < \
        over.index("++comm_overlap.overlap_moe_expert_parallel_comm=true")
    assert "++mixed_precision.params_dtype={_target_:torch.bfloat16,_call_:false}" in over


def test_megatron_lm_flags() -> None:
    args = export.to_megatron_lm_args(plan("dsv3"))
    text = " ".join(args)
    assert "--tensor-model-parallel-size 1" in text
    assert "--num-virtual-stages-per-pipeline-rank 4" in text
    assert "--virtual-pipeline-model-parallel-size" not in text
    assert "--fp8-format e4m3 --fp8-recipe blockwise" in text
    assert "--recompute-modules layernorm mla_up_proj" in text
    assert "--optimizer-cpu-offload" in args and "--use-precision-aware-optimizer" in args
    assert "--sequence-parallel" not in args  # TP1
    assert "--sequence-parallel" in export.to_megatron_lm_args(plan("mixtral"))


@pytest.mark.parametrize(("precision", "recipe"), [("fp8", "blockwise"), ("fp8-cs", "tensorwise"),
                                                   ("fp8-ds", "delayed"), ("mxfp8", "mxfp8")])
def test_fp8_recipes(precision: str, recipe: str) -> None:
    args = export.to_megatron_lm_args(plan("mixtral", precision=precision, gpu="b200"))
    assert shlex.join(args).count(f"--fp8-format e4m3 --fp8-recipe {recipe}") == 1
    assert export.to_settings(plan("mixtral"))["fp8"] is None


def test_settings_basics() -> None:
    s = export.to_settings(plan("qwen3-235b"))
    assert s["sequence_parallel"] is True
    assert s["recompute_granularity"] == "full" and s["recompute_method"] == "block" and s["recompute_num_layers"] == 2
    assert s["recompute_modules"] is None
    assert s["cp_comm_type"] == "p2p" and "hierarchical_context_parallel_sizes" not in s
    assert s["pipeline_model_parallel_layout"]  # 94 layers over 32 stages: explicit balanced layout
    assert "mtp_num_layers" not in s
    d = export.to_settings(plan("dsv3"))
    assert d["mtp_num_layers"] == 1
    # a2a inside the 8-GPU NVLink node, p2p ring across the 4 nodes of CP 32
    assert d["cp_comm_type"] == "a2a+p2p" and d["hierarchical_context_parallel_sizes"] == [8, 4]
    mix = export.to_settings(plan("mixtral"))
    assert mix["virtual_pipeline_model_parallel_size"] is None
    assert mix["pipeline_model_parallel_layout"] is None  # 32 layers split evenly: Megatron's default
    assert mix["recompute_granularity"] is None
    assert mix["cp_comm_type"] == "all_gather"
    assert mix["moe_token_dispatcher_type"] == "allgather"


# ------------------------------------------------------------------------------------------ versions


def test_cuda_graph_scope_renamed_to_modules_in_018() -> None:
    cfg = plan("dsv3-offload")
    old, new = export.to_settings(cfg, "0.17"), export.to_settings(cfg, "0.18")
    assert old["cuda_graph_scope"] == ["attn", "moe_preprocess", "moe_router"] and "cuda_graph_modules" not in old
    # 0.19 asserts "cuda_graph_scope and cuda_graph_modules cannot be set together": a recipe's scope is cleared
    assert new["cuda_graph_modules"] == ["attn", "moe_preprocess", "moe_router"] and new["cuda_graph_scope"] is None
    assert old["cuda_graph_impl"] == new["cuda_graph_impl"] == "transformer_engine"
    assert "model.cuda_graph_modules=[attn,moe_preprocess,moe_router]" in export.to_overrides(cfg, "0.19")
    assert "--cuda-graph-modules" in export.to_megatron_lm_args(cfg, "0.18")


def test_full_iteration_graph_per_version() -> None:
    cfg = plan("qwen3-next", recompute="none")
    assert export.to_settings(cfg, "0.16")["cuda_graph_impl"] == "local"
    assert export.to_settings(cfg, "0.16")["cuda_graph_scope"] == ["full_iteration"]
    s18 = export.to_settings(cfg, "0.18")
    # 0.19: "cuda_graph_modules must be empty when cuda_graph_impl=full_iteration"; Bridge: the NaN check off
    assert s18["cuda_graph_impl"] == "full_iteration" and s18["cuda_graph_modules"] == []
    assert s18["cuda_graph_scope"] is None and s18["check_for_nan_in_loss"] is False
    assert export.to_settings(cfg, "0.16")["check_for_nan_in_loss"] is False
    s14 = export.to_settings(cfg, "0.14")
    assert s14["enable_cuda_graph"] is True and s14["cuda_graph_scope"] == ["full_iteration"]
    with pytest.raises(MoeplanError, match="0.13"):
        export.to_settings(cfg, "0.13")


def test_single_scope_string_before_016() -> None:
    cfg = plan("mixtral", cuda_graphs="attn")
    assert "model.cuda_graph_scope=attn" in export.to_overrides(cfg, "0.15")
    assert "cuda_graph_scope: attn" in export.to_yaml(cfg, "0.15")
    assert export.to_settings(cfg, "0.13")["external_cuda_graph"] is True  # TE graphs before cuda_graph_impl
    with pytest.raises(MoeplanError, match="one at a time"):
        export.to_settings(plan("mixtral", cuda_graphs="attn,moe_router"), "0.15")


def test_flex_backend_vs_enable_deepep() -> None:
    cfg = plan("dsv3")
    new, old = export.to_settings(cfg, "0.16"), export.to_settings(cfg, "0.15")
    assert new["moe_token_dispatcher_type"] == old["moe_token_dispatcher_type"] == "flex"
    assert new["moe_flex_dispatcher_backend"] == "deepep" and "moe_enable_deepep" not in new
    assert old["moe_enable_deepep"] is True and "moe_flex_dispatcher_backend" not in old
    assert export.to_settings(plan("mixtral"), "0.15")["moe_enable_deepep"] is False
    assert export.to_settings(plan("dsv3-offload"), "0.16")["moe_flex_dispatcher_backend"] == "hybridep"
    with pytest.raises(MoeplanError, match="hybridep.*0.16"):
        export.to_settings(plan("dsv3-offload"), "0.15")
    back = read.parse_run_text("model.moe_token_dispatcher_type=flex\nmodel.moe_enable_deepep=true\n"
                            "model.seq_length=4096\ntrain.global_batch_size=8")
    assert to_run.run_config_from_settings(back.settings, cfg.model, 256, "h100").dispatcher == "deepep"


def test_gdn_norm_out_needs_019() -> None:
    gdn = Recompute("selective", frozenset({"gdn_norm_out", "moe_act"}))
    with pytest.raises(MoeplanError, match=r"gdn_norm_out not accepted by Megatron-Core 0\.18"):
        plan("qwen3-next", recompute=gdn)  # a run targeting 0.18 is refused up front, as `moeplan check` reports it
    cfg = plan("qwen3-next", recompute=gdn, mcore_version="0.19")
    with pytest.raises(MoeplanError, match=r"gdn_norm_out.*0\.16"):
        export.to_settings(cfg, "0.16")
    assert export.to_settings(cfg, "0.19")["recompute_modules"] == ["gdn_norm_out", "moe_act"]
    assert fields.check_settings({"recompute_granularity": "selective", "recompute_modules": ["gdn_norm_out"]}, "0.16")
    assert not fields.check_settings({"recompute_granularity": "selective", "recompute_modules": ["gdn_norm_out"]}, "0.19")


def test_shared_experts_needs_014() -> None:
    with pytest.raises(MoeplanError, match="shared_experts.*0.13"):
        export.to_settings(plan("dsv3-offload", dispatcher="deepep", cuda_graphs=None, offload_modules=None), "0.13")


def test_version_gated_features() -> None:
    with pytest.raises(MoeplanError, match="0.16"):
        export.to_settings(plan("dsv3-offload", dispatcher="deepep", cuda_graphs="attn"), "0.15")  # offload modules
    with pytest.raises(MoeplanError, match="0.14"):
        export.to_settings(plan("dsv3", cuda_graphs=None), "0.13")  # EP overlap


def test_dataset_sequence_length_key_per_bridge_release() -> None:
    cfg = plan("mixtral")
    assert "dataset.sequence_length=32768" in export.to_overrides(cfg, "0.16")
    assert "dataset.sequence_length=32768" in export.to_overrides(cfg, "0.18")
    assert "dataset.seq_length=32768" in export.to_overrides(cfg, "0.19")
    for key in ("dataset.seq_length", "dataset.sequence_length", "model.seq_length"):
        assert read.parse_run_text(f"{key}=8192").settings == {"seq_length": 8192}


def test_fields_for() -> None:
    f = fields.fields_for("0.16.1")
    assert f.version == "0.16" and f.cuda_graph_field == "cuda_graph_scope"
    assert "moe_flex_dispatcher_backend" in f.knobs and "cuda_graph_modules" not in f.knobs
    assert fields.fields_for("core_v0.19.0").flex_backends == ("deepep", "hybridep", "ncclep")
    assert "shared_experts" not in fields.fields_for("0.13").recompute_modules
    assert set(fields.VERSIONS) >= {"0.13", "0.14", "0.15", "0.16", "0.17", "0.18", "0.19"}
    with pytest.raises(MoeplanError) as err:
        fields.fields_for("0.12")
    assert "\n" not in str(err.value) and "0.13, 0.14" in str(err.value)


def test_check_settings_flags_fields_of_other_versions() -> None:
    problems = fields.check_settings({"cuda_graph_modules": ["attn"], "cp_comm_type": "ring"}, "0.16")
    assert any(p.field == "cuda_graph_modules" and "0.18" in p.message for p in problems)
    assert any(p.field == "cp_comm_type" and "ring" in p.message for p in problems)
    assert fields.check_settings({"moe_flex_dispatcher_backend": "ncclep"}, "0.19") == []


# ------------------------------------------------------------------------------------------ reading


def test_unknown_keys_reported_with_line_numbers() -> None:
    text = "# plan\nmodel.tensor_model_parallel_size=2\nmodel.context_paralel_size=8\n\ncheckpoint.save=/ckpt foo.bar=1\n"
    run = read.parse_run_text(text, "o.txt")
    assert run.unknown == [("model.context_paralel_size", 3), ("foo.bar", 5)]
    assert ("checkpoint.save", 5) in run.ignored
    assert run.lines == {"tensor_model_parallel_size": 2}


def test_yaml_unknown_and_ignored() -> None:
    text = ("model:\n  tensor_model_parallel_size: 2\n  tensor_model_parallel_sizee: 2\n  num_layers: 61\n"
            "  hidden_dropout: 0.0\ncheckpoint:\n  save: /ckpt\nlogger:\n  log_interval: 1\nweird: 3\n"
            "train:\n  train_iters: 10\n  global_batch_size: 128\n")
    run = read.parse_run_text(text, "run.yaml")
    assert run.kind == "bridge-yaml"
    assert run.settings == {"tensor_model_parallel_size": 2, "global_batch_size": 128}
    assert run.lines == {"tensor_model_parallel_size": 2, "global_batch_size": 13}
    assert run.unknown == [("model.tensor_model_parallel_sizee", 3), ("weird", 10)]
    assert {("checkpoint.save", 7), ("logger.log_interval", 9), ("train.train_iters", 12)} <= set(run.ignored)
    assert run.architecture == {"num_layers": 61}


def test_megatron_lm_unknown_and_forms() -> None:
    text = ("python pretrain_gpt.py \\\n  --tensor-model-parallel-size=4 \\\n  --tensor-model-paralel-size 2 \\\n"
            "  --sequence-parallel --num-layers 61 --lr 1e-4 \\\n  --recompute-activations  # selective\n"
            "  --cp-comm-type a2a p2p --moe-expert-capacity-factor 1.5 --num-experts 256\n")
    run = read.parse_run_text(text, "run.sh")
    assert run.kind == "megatron-lm"
    assert run.settings == {"tensor_model_parallel_size": 4, "sequence_parallel": True,
                            "recompute_granularity": "selective", "cp_comm_type": ["a2a", "p2p"],
                            "moe_expert_capacity_factor": 1.5}
    assert run.unknown == [("--tensor-model-paralel-size", 3)]
    assert run.architecture == {"num_layers": 61, "num_moe_experts": 256}
    assert run.lines["recompute_granularity"] == 5


def test_override_forms() -> None:
    text = ("+model.context_parallel_size=4 ++model.expert_model_parallel_size=8\n"
            "'model.pipeline_model_parallel_layout=\"Et|(tt|)*2L\"'\n"
            "model.recompute_modules=[ core_attn , 'moe_act' ]\n"
            "model.moe_expert_capacity_factor=1.0\nmodel.moe_expert_capacity_factor=2\n"
            "model.sequence_parallel=True\nmodel.recompute_method=uniform\n~model.recompute_method\n")
    run = read.parse_run_text(text)
    assert run.settings == {"context_parallel_size": 4, "expert_model_parallel_size": 8,
                            "pipeline_model_parallel_layout": "Et|(tt|)*2L", "recompute_modules": ["core_attn", "moe_act"],
                            "moe_expert_capacity_factor": 2.0, "sequence_parallel": True}
    assert run.lines["moe_expert_capacity_factor"] == 5


def test_bridge_precision_recipe_and_aliases() -> None:
    run = read.parse_run_text("mixed_precision: bf16_with_fp8_subchannel_scaling_mixed\nmodel:\n  seq_length: 4096\n"
                           "train:\n  global_batch_size: 16\n")
    assert run.settings["fp8"] == "hybrid" and run.settings["fp8_recipe"] == "blockwise"
    cfg = plan("mixtral")
    assert to_run.run_config_from_settings(run.settings, cfg.model, 16, "h100").precision == "fp8"
    assert read.parse_run_text("mixed_precision=bf16-mixed").settings == {"fp8": None}
    assert read.parse_run_text("mixed_precision=bf16_with_nvfp4_mixed").unknown == [("mixed_precision", 1)]
    assert set(fields.BRIDGE_PRECISION_RECIPE) == {"bf16", "fp8", "fp8-cs", "fp8-ds", "mxfp8", "nvfp4"}


def test_conflicting_paths() -> None:
    run = read.parse_run_text("model.seq_length=4096\ndataset.sequence_length=8192\n"
                           "optimizer.use_distributed_optimizer=true\nddp.use_distributed_optimizer=false\n"
                           "model.fp8=e4m3\nmixed_precision.fp8=null\n")
    assert run.settings == {"seq_length": 4096, "use_distributed_optimizer": True, "fp8": None}
    assert len(run.conflicts) == 2
    assert "dataset.sequence_length" in run.conflicts[0].message and ":2:" in str(run.conflicts[0])
    assert run.conflicts[0].line == 2 and "model.fp8" in run.conflicts[1].message


def test_run_config_defaults_and_missing_fields() -> None:
    model = plan("mixtral").model
    with pytest.raises(MoeplanError, match="seq_length"):
        to_run.run_config_from_settings({"global_batch_size": 8}, model, 8, "h100")
    with pytest.raises(MoeplanError, match="global_batch_size"):
        to_run.run_config_from_settings({"seq_length": 4096}, model, 8, "h100")
    cfg = to_run.run_config_from_settings({"seq_length": 4096, "global_batch_size": 8, "tensor_model_parallel_size": 2},
                                     model, 8, "h100")
    assert cfg.parallel.etp == 2  # expert_tensor_parallel_size None -> TP (ModelParallelConfig.__post_init__)
    assert cfg.dispatcher == "allgather"  # Megatron-Core's default dispatcher
    assert cfg.recompute.granularity == "none" and cfg.precision == "bf16"
    with pytest.raises(MoeplanError, match="distributed optimizer"):
        to_run.run_config_from_settings({"seq_length": 4096, "global_batch_size": 8, "use_distributed_optimizer": False},
                                   model, 8, "h100")


def test_run_config_vpp_from_layout_and_mtp() -> None:
    dsv3 = plan("dsv3").model
    s = {"seq_length": 4096, "global_batch_size": 8, "pipeline_model_parallel_size": 8,
         "pipeline_model_parallel_layout": "Et|(tt|)*30mL"}
    assert to_run.run_config_from_settings(s, dsv3, 64, "h100").parallel.vpp == 4
    no_mtp = to_run.run_config_from_settings({**s, "mtp_num_layers": None, "pipeline_model_parallel_layout": None},
                                        dsv3, 64, "h100")
    assert no_mtp.model.mtp_layers == 0 and dsv3.mtp_layers == 1
    # a model whose config describes no MTP module trains one built from its final decoder layer, as
    # Megatron-Core does (models.spec.with_mtp_layers)
    mixtral = plan("mixtral").model
    got = to_run.run_config_from_settings({**s, "mtp_num_layers": 1, "pipeline_model_parallel_layout": None},
                                          mixtral, 64, "h100").model
    assert got.mtp_layers == 1 and got.mtp_layer == mixtral.layers[-1]


# ------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(("text", "line", "words"), [
    ("model:\n  tensor_model_parallel_size: [1\ntrain: 2\n", 3, "YAML"),
    ("model:\n\ttensor_model_parallel_size: 2\n", 2, "YAML"),
    ("model:\n  tensor_model_parallel_size: two\n", 2, "integer"),
    ("model.tensor_model_parallel_size=2\nmodel.context_parallel_size\n", 2, "bad override"),
    ("model.tensor_model_parallel_size=2\nmodel.recompute_modules=[a,b\n", 2, "bracket"),
    ("model.tensor_model_parallel_size=2\nmodel.x='abc\n", 2, "quote"),
    ("model.tensor_model_parallel_size=2\n\nmodel.sequence_parallel=maybe\n", 3, "true or false"),
    ("--tensor-model-parallel-size 2 \\\n  --pipeline-model-parallel-size\n", 2, "missing its value"),
    ("--tensor-model-parallel-size --pipeline-model-parallel-size 2\n", 1, "missing its value"),
    ("--sequence-parallel=1\n", 1, "takes no value"),
    ("--context-parallel-size 2.5\n", 1, "integer"),
    ("--seq-length 'abc\n", 1, "quotation"),
    ("# big\n--context-parallel-size " + "9" * 5000 + "\n", 2, "integer"),
    ("model:\n  context_parallel_size: " + "9" * 5000 + "\n", 2, "YAML"),
])
def test_malformed_inputs_give_one_line_with_line_number(text: str, line: int, words: str) -> None:
    with pytest.raises(MoeplanError) as err:
        read.parse_run_text(text, "bad.txt")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"bad.txt:{line}:"), message
    assert words.lower() in message.lower()


def test_read_run_file(tmp_path) -> None:
    path = tmp_path / "plan.overrides"
    path.write_text("\n".join(export.to_overrides(plan("mixtral"))))
    run = read.read_run_file(path)
    assert run.origin == str(path) and run.settings == read_back(export.to_settings(plan("mixtral")))
    with pytest.raises(MoeplanError, match="missing.yaml"):
        read.read_run_file(tmp_path / "missing.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(MoeplanError, match="bin.yaml"):
        read.read_run_file(tmp_path / "bin.yaml")
    with pytest.raises(MoeplanError, match="no settings"):
        read.parse_run_text("# nothing\n\n", "empty.txt")


# ------------------------------------------------------------------------------------------ fuzz

VALID_YAML = export.to_yaml(plan("dsv3"))
VALID_OVERRIDES = "\n".join(export.to_overrides(plan("qwen3-235b")))
VALID_ARGS = " \\\n".join(shlex.quote(a) for a in export.to_megatron_lm_args(plan("dsv3")))
NOISE = st.sampled_from(list(":-[]{}'\"#=|*&!%@`\\\n\t ,.~+0123456789abcxyz") + ["--", "null", "\x00", "é", "---\n"])


def garble(base: str) -> st.SearchStrategy[str]:
    edits = st.lists(st.tuples(st.integers(0, len(base)), st.integers(0, 3), NOISE), max_size=8)
    return edits.map(lambda ops: _apply(base, ops))


def _apply(base: str, ops: list[tuple[int, int, str]]) -> str:
    text = base
    for pos, cut, ins in ops:
        pos = min(pos, len(text))
        text = text[:pos] + ins + text[pos + cut:]
    return text


def _only_moeplan_errors(text: str) -> None:
    try:
        run = read.parse_run_text(text, "fuzz")
    except MoeplanError as exc:
        assert "\n" not in str(exc)
        return
    try:
        to_run.run_config_from_settings(run.settings, plan("dsv3").model, 256, "h100")
    except MoeplanError:
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=300), garble(VALID_YAML), garble(VALID_OVERRIDES), garble(VALID_ARGS)))
def test_fuzz_only_moeplan_errors(text: str) -> None:
    _only_moeplan_errors(text)


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 300), st.floats(allow_nan=True),
                    st.sampled_from(["flex", "deepep", "full", "selective", "uniform", "a2a+p2p", "Et|tL", "attn"]),
                    st.text(max_size=12))
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(fields.KNOB_BY_FIELD)), VALUES, max_size=8))
def test_fuzz_known_keys_with_random_values(values: dict[str, object]) -> None:
    """Any value for any known field, in a Megatron-LM line or overrides, ends in settings or a MoeplanError."""
    lines = [f"{fields.KNOB_BY_FIELD[k].bridge[0] if fields.KNOB_BY_FIELD[k].bridge else 'model.' + k}="
             f"{export.format_override_value(v)}" for k, v in values.items()]
    lines = [line.replace("dataset.<seq_length>", "dataset.seq_length") for line in lines]
    text = "\n".join(["model.seq_length=4096", "train.global_batch_size=64", *lines])
    _only_moeplan_errors(text)
    flags = [f"{fields.KNOB_BY_FIELD[k].mlm} {shlex.quote(str(v))}" for k, v in values.items() if fields.KNOB_BY_FIELD[k].mlm]
    _only_moeplan_errors("--seq-length 4096 --global-batch-size 64 " + " ".join(flags))
