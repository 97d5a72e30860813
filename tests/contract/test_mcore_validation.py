"""Plans exported by moeplan.megatron pass Megatron-Core's own TransformerConfig checks.

Needs megatron-core (and torch): pip install torch==2.13.0 && pip install 'moeplan[mcore]'. Runs on CPU:
megatron-core 0.16.1 imports with torch, numpy and packaging only; Transformer Engine is not needed as
long as moe_permute_fusion stays False (mcore_kwargs sets it so).
"""

from __future__ import annotations

import warnings

from dataclasses import replace

import pytest

from moeplan.api import build_config
from moeplan.base.errors import MoeplanError
from moeplan.megatron import export, mcore, read, to_run
from moeplan.run.parallel import check_layout
from moeplan.run.config import RunConfig

torch = pytest.importorskip("torch", reason="Megatron-Core validation needs torch (pip install torch)")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed" on CPU
    _tc = pytest.importorskip("megatron.core.transformer.transformer_config",
                              reason="Megatron-Core validation needs megatron-core (pip install 'moeplan[mcore]')")
TransformerConfig = _tc.TransformerConfig
MLATransformerConfig = _tc.MLATransformerConfig

pytestmark = pytest.mark.filterwarnings("ignore")

VERSION = mcore.installed_mcore_version()

PLANS = {
    "deepseek-v3 TP1 PP8 VPP4 CP32 EP32": dict(
        model="deepseek-v3", gpus=256, seq_len=131072, gbs=64, tp=1, pp=8, vpp=4, cp=32, ep=32,
        recompute="selective:mla_up_proj,layernorm", dispatcher="deepep", cuda_graphs="attn,moe_router,moe_preprocess",
        offload_modules="expert_fc1,moe_act", optimizer_offload=0.5, ep_overlap=True),
    "qwen3-235b TP4 PP8 VPP4 CP4 EP8": dict(
        model="qwen3-235b-a22b", gpus=256, seq_len=32768, gbs=64, tp=4, pp=8, vpp=4, cp=4, ep=8,
        recompute="selective:moe_act,layernorm,core_attn", dispatcher="alltoall", cp_comm_type="p2p"),
    "qwen3-next TP1 EP32 CP1": dict(
        model="qwen3-next-80b-a3b", gpus=32, seq_len=65536, gbs=32, tp=1, cp=1, ep=32, recompute="full:uniform:1",
        dispatcher="hybridep", cuda_graphs="full_iteration"),
    "mixtral TP2 PP2 EP8 capacity 1.0": dict(
        model="mixtral-8x7b", gpus=16, seq_len=32768, gbs=64, tp=2, pp=2, ep=8, dispatcher="alltoall",
        capacity_factor=1.0),
}


def plan(name: str, **changes: object) -> RunConfig:
    kwargs = {**PLANS[name], **changes}
    cfg, _ = build_config(kwargs.pop("model"), gpu="h100", mcore_version=VERSION, **kwargs)  # type: ignore[arg-type]
    return cfg


def config_class(cfg: RunConfig) -> type:
    return MLATransformerConfig if mcore.mcore_config_class(cfg) == "MLATransformerConfig" else TransformerConfig


@pytest.fixture
def oldest_known_te(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Transformer Engine, answer TransformerConfig's TE version probes (delay_wgrad_compute with TE-scoped
    graphs asks for >= 2.10) as the TE release the plans are made for (their te_version: DEFAULT_TE_VERSION) would.
    (The oldest release of moeplan's table was the answer while the table started at 2.x; it now holds TE 1.3, the
    N41 sweep's, which no plan here runs.)"""
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        from packaging.version import Version

        from moeplan.base.te_release import DEFAULT_TE_VERSION

        planned = Version(DEFAULT_TE_VERSION)
        monkeypatch.setattr(_tc, "is_te_min_version", lambda v, check_equality=True: planned >= Version(v))


@pytest.mark.parametrize("name", list(PLANS))
def test_transformer_config_accepts_plan(name: str, oldest_known_te: None) -> None:
    cfg = plan(name)
    kwargs = mcore.mcore_kwargs(cfg)
    settings = export.to_settings(cfg)
    assert {k: kwargs[k] for k in settings if k in kwargs} == {k: v for k, v in settings.items() if k in kwargs}
    tc = config_class(cfg)(**kwargs)  # __post_init__ runs Megatron-Core's checks
    assert tc.tensor_model_parallel_size == cfg.parallel.tp
    assert tc.expert_model_parallel_size == cfg.parallel.ep
    assert tc.params_dtype == torch.bfloat16
    assert isinstance(mcore.build_mcore_config(cfg), config_class(cfg))


def test_deepseek_layout_string_is_validated_by_mcore(oldest_known_te: None) -> None:
    cfg = plan("deepseek-v3 TP1 PP8 VPP4 CP32 EP32")
    kwargs = mcore.mcore_kwargs(cfg)
    assert kwargs["pipeline_model_parallel_layout"] == "Et|(tt|)*30mL"
    assert kwargs["mtp_num_layers"] == 1
    tc = MLATransformerConfig(**kwargs)
    assert tc.multi_latent_attention
    assert tc.virtual_pipeline_model_parallel_size == 4
    assert tc.pipeline_model_parallel_layout.virtual_pipeline_model_parallel_size == 4  # parsed by Megatron-Core
    broken = {**kwargs, "pipeline_model_parallel_layout": "Et|(tt|)*30tmL"}  # one decoder layer too many
    with pytest.raises((ValueError, AssertionError)):
        MLATransformerConfig(**broken)


def test_qwen3_layout_for_uneven_split() -> None:
    kwargs = mcore.mcore_kwargs(plan("qwen3-235b TP4 PP8 VPP4 CP4 EP8"))
    assert kwargs["pipeline_model_parallel_layout"]  # 94 layers over PP8 x VPP4: explicit layout
    TransformerConfig(**kwargs)


def test_gated_deltanet_with_context_parallel() -> None:
    """Megatron-Core 0.16/0.17 assert that Gated DeltaNet runs without context parallelism; 0.18 lifts it."""
    cfg = plan("qwen3-next TP1 EP32 CP1", cuda_graphs=None)
    cfg = cfg.with_(parallel=replace(cfg.parallel, cp=4))  # past moeplan's own check, which agrees:
    assert [b.rule for b in check_layout(cfg.model, cfg.parallel, cfg.batch, VERSION)] == (
        ["gdn-cp-version"] if tuple(int(p) for p in VERSION.split(".")) < (0, 18) else [])
    if tuple(int(p) for p in VERSION.split(".")) < (0, 18):
        with pytest.raises(MoeplanError, match="context parallel"):
            mcore.build_mcore_config(cfg)
    else:
        mcore.build_mcore_config(cfg)


def test_fp8_moe_needs_transformer_engine() -> None:
    """MoE + FP8 asks for Transformer Engine >= 1.7 inside __post_init__; without TE the check cannot pass."""
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("Transformer Engine is installed")
    cfg = plan("mixtral TP2 PP2 EP8 capacity 1.0", precision="fp8-cs")
    assert mcore.mcore_kwargs(cfg)["fp8"] == "e4m3" and mcore.mcore_kwargs(cfg)["fp8_recipe"] == "tensorwise"
    with pytest.raises(MoeplanError, match="Transformer Engine is not installed"):
        mcore.build_mcore_config(cfg)


def test_heads_not_divisible_by_tp_is_rejected() -> None:
    cfg = plan("qwen3-235b TP4 PP8 VPP4 CP4 EP8", pp=1, vpp=1, cp=1, cp_comm_type="p2p")
    cfg = cfg.with_(parallel=replace(cfg.parallel, tp=3))  # moeplan itself rejects it (heads-tp)
    with pytest.raises(ValueError, match="num_attention_heads"):
        TransformerConfig(**mcore.mcore_kwargs(cfg))
    with pytest.raises(MoeplanError) as err:
        mcore.build_mcore_config(cfg)
    assert "\n" not in str(err.value) and "num_attention_heads" in str(err.value)


def test_settings_read_back_from_overrides_build_the_same_config() -> None:
    cfg = plan("qwen3-235b TP4 PP8 VPP4 CP4 EP8")
    run = read.parse_run_text("\n".join(export.to_overrides(cfg)))
    back = to_run.run_config_from_settings(run.settings, cfg.model, cfg.parallel.gpus, cfg.gpu, mcore_version=VERSION)
    assert mcore.mcore_kwargs(back) == mcore.mcore_kwargs(cfg)


@pytest.mark.parametrize("delay", [None, True, False])
def test_delay_wgrad_is_exported_with_ep_overlap_and_accepted(delay: bool | None, oldest_known_te: None) -> None:
    """delay_wgrad_compute follows EP overlap as Bridge pairs them (None), or the user's choice; Megatron-Core's
    TransformerConfig accepts each with overlap_moe_expert_parallel_comm on."""
    cfg = plan("deepseek-v3 TP1 PP8 VPP4 CP32 EP32", delay_wgrad=delay)
    settings = export.to_settings(cfg)
    assert settings["overlap_moe_expert_parallel_comm"] is True
    assert settings["delay_wgrad_compute"] is (delay is not False)
    assert "++comm_overlap.delay_wgrad_compute=" + ("false" if delay is False else "true") in export.to_overrides(cfg)
    assert ("--delay-wgrad-compute" in export.to_megatron_lm_args(cfg)) is (delay is not False)
    tc = config_class(cfg)(**mcore.mcore_kwargs(cfg))
    assert tc.delay_wgrad_compute is (delay is not False)


def test_delay_wgrad_without_ep_overlap_is_rejected_by_both() -> None:
    """transformer_config.py asserts overlap_moe_expert_parallel_comm with delay_wgrad_compute; moeplan refuses
    the pair on input and exports delay off without overlap."""
    cfg = plan("qwen3-235b TP4 PP8 VPP4 CP4 EP8")
    assert export.to_settings(cfg)["delay_wgrad_compute"] is False
    kwargs = {**mcore.mcore_kwargs(cfg), "delay_wgrad_compute": True}
    with pytest.raises(AssertionError, match="overlap_moe_expert_parallel_comm must be enabled"):
        config_class(cfg)(**kwargs)
    with pytest.raises(MoeplanError, match="delay_wgrad_compute needs EP A2A overlap"):
        plan("qwen3-235b TP4 PP8 VPP4 CP4 EP8", delay_wgrad=True)


@pytest.mark.parametrize("delay", [None, True, False])
def test_delay_wgrad_reads_back(delay: bool | None) -> None:
    cfg = plan("deepseek-v3 TP1 PP8 VPP4 CP32 EP32", delay_wgrad=delay)
    for text in ("\n".join(export.to_overrides(cfg)), export.to_yaml(cfg), " ".join(export.to_megatron_lm_args(cfg))):
        run = read.parse_run_text(text)
        back = to_run.run_config_from_settings(run.settings, cfg.model, cfg.parallel.gpus, cfg.gpu,
                                               mcore_version=VERSION)
        assert back.delay_wgrad_on is cfg.delay_wgrad_on
        assert back.delay_wgrad is cfg.delay_wgrad_on  # the file says it: True / False, never None
