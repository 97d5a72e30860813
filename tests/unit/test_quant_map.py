"""NVFP4 recipe costs: TE's quantize passes (three reads of the BF16 tensor: amax of it and of its Hadamard transform,
the row-wise cast, the fused RHT + column-wise cast), a TE quantization config's per-module precisions and the BF16
end layers (moeplan.engine.timing.quant_map)."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.base.errors import MoeplanError
from moeplan.base.vocab import PRECISIONS, TE_QUANT_MAP_NAMES, TE_QUANT_MAPS
from moeplan.engine.activations import BF16_BYTES
from moeplan.engine.flops import layer_gemms
from moeplan.engine.timing.gemm import QUANTIZE_BYTES_PER_ELEM
from moeplan.engine.timing.quant_map import bf16_layer_counts, gemm_precision
from moeplan.models.spec import Attention, Mamba2, MoE

RUN = dict(gpu="gb300", gpus=64, seq_len=8192, gbs=512, ep=64, mcore_version="0.19")


def test_nvfp4_quantize_reads_the_bf16_tensor_three_times():
    """amax pass + row-wise cast + RHT column-wise cast: 3 x 2 bytes read, 2 x (0.5 + 1/16) written; more than MXFP8's
    one pass (2 read, 2 x (1 + 1/32) written)."""
    assert QUANTIZE_BYTES_PER_ELEM["nvfp4"] == pytest.approx(3 * BF16_BYTES + 2 * (0.5 + 1 / 16))
    assert QUANTIZE_BYTES_PER_ELEM["nvfp4"] > QUANTIZE_BYTES_PER_ELEM["mxfp8"] + BF16_BYTES


def test_nemotron3_te_quant_cfg_maps_the_modules_bridge_names():
    """te_quant.cfg: attention qkv / proj and the latent projections in BF16, Mamba out_proj in MXFP8; the experts and
    Mamba in_proj keep NVFP4."""
    cfg, _ = api.build_config("nemotron-3-super-120b", precision="nvfp4", te_quant_map="nemotron3", **RUN)
    got = {}
    for layer in cfg.model.distinct_layers:
        for g in layer_gemms(layer, cfg.model.hidden):
            got[g.name] = gemm_precision(cfg, g)
    assert got["qkv"] == got["o_proj"] == got["latent_fc1"] == got["latent_fc2"] == "bf16"
    assert got["mamba_out_proj"] == "mxfp8"
    assert got["mamba_in_proj"] == "nvfp4"
    experts = {p for n, p in got.items() if n.startswith(("expert_", "shared_"))}
    assert experts == {"nvfp4"}
    plain, _ = api.build_config("nemotron-3-super-120b", precision="nvfp4", **RUN)
    assert {gemm_precision(plain, g) for layer in plain.model.distinct_layers
            for g in layer_gemms(layer, plain.model.hidden)} == {"nvfp4"}


def test_bf16_end_layers_are_the_last_of_the_hybrid_pattern():
    """Nemotron-3 Super's last 14 of 88 layers (pattern ...*EMEMEM*EMEMEMEME): 7 MoE, 6 Mamba-2, 1 attention."""
    cfg, _ = api.build_config("nemotron-3-super-120b", precision="nvfp4", bf16_end_layers=14, **RUN)
    kinds: dict[str, int] = {}
    for layer, n in bf16_layer_counts(cfg).items():
        kind = "moe" if isinstance(layer.mlp, MoE) else "mamba" if isinstance(layer.mixer, Mamba2) else \
            "attn" if isinstance(layer.mixer, Attention) else "?"
        kinds[kind] = kinds.get(kind, 0) + n
    assert kinds == {"moe": 7, "mamba": 6, "attn": 1}
    bf16, _ = api.build_config("nemotron-3-super-120b", precision="bf16", bf16_end_layers=14, **RUN)
    assert bf16_layer_counts(bf16) == {}


def test_each_setting_slows_the_nvfp4_run_toward_bf16():
    """BF16 end layers and the module map each cost time, and a BF16 run is slower still."""
    kw = dict(RUN, dispatcher="alltoall")
    step = {name: api.estimate("nemotron-3-super-120b", **kw, **extra)["step_time_s"] for name, extra in {
        "plain": dict(precision="nvfp4"),
        "map": dict(precision="nvfp4", te_quant_map="nemotron3"),
        "both": dict(precision="nvfp4", te_quant_map="nemotron3", bf16_end_layers=14),
        "bf16": dict(precision="bf16")}.items()}
    assert step["plain"] < step["map"] < step["both"] < step["bf16"]


@pytest.mark.parametrize("extra, match", [
    (dict(precision="mxfp8", te_quant_map="nemotron3"), "te_quant_map 'nemotron3' maps modules of an NVFP4 run"),
    (dict(precision="nvfp4", te_quant_map="all"), "te_quant_map 'all' unknown"),
    (dict(precision="nvfp4", bf16_end_layers=89), "bf16_end_layers must be an integer from 1"),
    # a string that reads as a number is shown quoted, so the message says what was wrong with it (the API's check
    # by the knob's kind, moeplan.api.arguments.check_knobs, before RunConfig's range)
    (dict(precision="nvfp4", bf16_start_layers="2"), r"^bf16_start_layers must be an int, got '2' \(str\)$"),
])
def test_bad_settings_are_one_line_errors(extra, match):
    with pytest.raises(MoeplanError, match=match):
        api.build_config("nemotron-3-super-120b", **RUN, **extra)


def test_nvfp4_experts_quantize_grouped_in_two_passes_and_launch_once():
    """TE's split_quantize for NVFP4 (PR #2411, TE >= 2.12): one grouped amax and one fused row / RHT column-wise cast
    for all experts (2 reads, not 3), and no per-expert quantize launches (MXFP8 still launches one kernel per expert
    split from split_quantize's C++ loop: timing.context.SPLIT_QUANTIZE_LAUNCH_S)."""
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
    from moeplan.engine.timing.gemm import NVFP4_GROUPED_QUANTIZE_BYTES_PER_ELEM
    from moeplan.engine.timing.context import SPLIT_QUANTIZE_LAUNCH_S
    from moeplan.engine.timing.moe import EXPERT_LAUNCHES, expert_host_s

    assert NVFP4_GROUPED_QUANTIZE_BYTES_PER_ELEM == pytest.approx(QUANTIZE_BYTES_PER_ELEM["nvfp4"] - BF16_BYTES)
    cal = DEFAULT_CALIBRATION
    fp4 = expert_host_s(64, 1e4, "nvfp4", frozenset(), cal)
    mx = expert_host_s(64, 1e4, "mxfp8", frozenset(), cal)
    assert fp4[0] == pytest.approx(64 * EXPERT_LAUNCHES["fwd"]["gemm"] * cal.expert_launch_host_s)
    assert mx[0] == pytest.approx(64 * (EXPERT_LAUNCHES["fwd"]["gemm"] * cal.expert_launch_host_s
                                        + EXPERT_LAUNCHES["fwd"]["quantize"] * SPLIT_QUANTIZE_LAUNCH_S))


def test_bf16_layers_export_and_read_back_as_megatron_names_them():
    """``bf16_start_layers`` / ``bf16_end_layers`` are Megatron-Core's first_last_layers_bf16 with
    num_layers_at_start_in_bf16 / num_layers_at_end_in_bf16 (Bridge: mixed_precision.*), both counts written; a file
    that turns first_last_layers_bf16 on without a count gets Megatron-Core's default 1."""
    import shlex

    from moeplan.megatron import export, read, to_run

    cfg, _ = api.build_config("nemotron-3-super-120b", precision="nvfp4", bf16_end_layers=14, **RUN)
    s = export.to_settings(cfg)
    assert (s["first_last_layers_bf16"], s["num_layers_at_start_in_bf16"], s["num_layers_at_end_in_bf16"]) == (True, 0, 14)
    assert "++mixed_precision.num_layers_at_end_in_bf16=14" in export.to_overrides(cfg)
    for text in ("\n".join(export.to_overrides(cfg)), export.to_yaml(cfg), shlex.join(export.to_megatron_lm_args(cfg))):
        run = read.parse_run_text(text)
        back = to_run.run_config_from_settings(run.settings, cfg.model, 64, cfg.gpu, mcore_version=cfg.mcore_version)
        assert (back.bf16_start_layers, back.bf16_end_layers) == (None, 14)
    run = read.parse_run_text("mixed_precision.fp8=e4m3\nmixed_precision.fp8_recipe=tensorwise\n"
                              "mixed_precision.first_last_layers_bf16=true\nmodel.seq_length=4096\n"
                              "train.global_batch_size=64")
    back = to_run.run_config_from_settings(run.settings, cfg.model, 64, "h100", mcore_version="0.19")
    assert (back.precision, back.bf16_start_layers, back.bf16_end_layers) == ("fp8-cs", 1, 1)
    plain, _ = api.build_config("nemotron-3-super-120b", precision="nvfp4", **RUN)
    assert "first_last_layers_bf16" not in export.to_settings(plain)


def test_bf16_start_layers_sit_on_the_first_pipeline_rank():
    """At PP 2 the BF16 start layers slow the first rank, the end layers the last; at PP 1 both add up."""
    from moeplan.engine.timing.quant_map import bf16_layer_counts

    cfg, _ = api.build_config("nemotron-3-super-120b", precision="nvfp4", bf16_start_layers=2, bf16_end_layers=3, **RUN)
    assert sum(bf16_layer_counts(cfg, first=True, last=False).values()) == 2
    assert sum(bf16_layer_counts(cfg, first=False, last=True).values()) == 3
    assert sum(bf16_layer_counts(cfg, first=True, last=True).values()) == 5
    kw = dict(RUN, dispatcher="alltoall", precision="nvfp4")
    base = api.estimate("nemotron-3-super-120b", **kw)["step_time_s"]
    assert api.estimate("nemotron-3-super-120b", **kw, bf16_start_layers=4)["step_time_s"] > base


def test_bf16_start_layers_cost_the_first_pipeline_rank_alone():
    """Rank 0 holds the BF16 start layers; ranks with the same work as rank 0 keep their own (quantized) time rather
    than a copy of rank 0's (review 2026-12-05: the per-rank memo stored rank 0's BF16 time for them)."""
    from moeplan.engine.timing.step import step_parts
    from moeplan.hardware import load_gpu

    run = dict(gpu="h100", gpus=8, seq_len=4096, gbs=64, tp=2, pp=4, precision="fp8")
    gpu = load_gpu("h100")
    plain, _ = api.build_config("llama3-8b", **run)
    bf16, _ = api.build_config("llama3-8b", bf16_start_layers=2, **run)
    a = [sum(r.values()) for r in step_parts(plain, gpu).rank_microbatch_s]
    b = [sum(r.values()) for r in step_parts(bf16, gpu).rank_microbatch_s]
    assert b[0] != pytest.approx(a[0])  # rank 0's BF16 layers cost differently
    assert b[1:3] == pytest.approx(a[1:3])  # the middle ranks' work is unchanged


def test_the_knob_names_are_the_maps_names():
    """One owner (moeplan.base.vocab): the te_quant_map knob's names are the maps' own keys, in their order, and each
    map sends a GEMM name (or "mtp") to a precision moeplan knows; a name outside them is refused."""
    assert TE_QUANT_MAP_NAMES == tuple(TE_QUANT_MAPS)
    assert TE_QUANT_MAPS["none"] == {}
    assert all(p in PRECISIONS for m in TE_QUANT_MAPS.values() for p in m.values())
    with pytest.raises(MoeplanError, match="te_quant_map"):
        api.build_config("nemotron-3-super-120b", precision="nvfp4", te_quant_map="bridge", **RUN)


def test_every_quant_map_key_names_a_gemm():
    """The maps live in the base vocabulary, below the engine that names the GEMMs: each key must be a GEMM name
    some catalogued model's layers produce (engine.flops.layer_gemms) or the MTP modules' ``mtp``; a misspelt key
    would silently leave its GEMM at the run's precision."""
    from moeplan.models.catalog import catalog_names, load_model

    names = {"mtp"}
    for model_name in catalog_names():
        model = load_model(model_name)
        for layer in model.distinct_layers:
            names |= {g.name for g in layer_gemms(layer, model.hidden)}
    for map_name, mapping in TE_QUANT_MAPS.items():
        assert set(mapping) <= names, (map_name, set(mapping) - names)


def test_an_mtp_entry_is_bf16():
    """The step applies a map's "mtp" entry as BF16 (timing.step: the MTP modules' layer in the BF16 context); an
    entry naming another precision would be silently ignored, so none may."""
    assert all(m.get("mtp", "bf16") == "bf16" for m in TE_QUANT_MAPS.values())
