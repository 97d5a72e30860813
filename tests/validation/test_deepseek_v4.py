"""DeepSeek-V4-Flash (model_type deepseek_v4): its config read, its parameters against the published total, its
FLOPs against Megatron Bridge's dsv4_hybrid count as the measured rows report it, its compressed attention and mHC
in memory and time, and Megatron-Core's version rule (moeplan.engine.compressed_attention,
moeplan.engine.hyper_connections, moeplan.run.dsv4_rules)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from importlib import resources

import pytest

from moeplan import api
from moeplan.base.errors import MoeplanError
from moeplan.engine.activations import layer_activation
from moeplan.engine.flops import flops_per_token, layer_flops
from moeplan.engine.params import count_params
from moeplan.models import load_model, spec_from_dict

from ..measured_variants import _rows, tflops_to_flops_per_token

FLASH = "deepseek-v4-flash"
RUN = dict(gpu="gb200", gpus=128, precision="mxfp8", seq_len=4096, gbs=2048, mbs=1, tp=1, pp=1, cp=1, ep=64,
           dispatcher="hybridep", mtp_layers=1, mcore_version="0.20")


def _flash_json() -> dict:
    return json.loads(resources.files("moeplan.models.data").joinpath(f"{FLASH}.json").read_text(encoding="utf-8"))


def test_flash_params_match_the_published_total():
    """The model card's 284B total (Bridge's card: 285B); the transformers shapes give 284,332,230,231 for the main
    model (the learned router bias of the non-hash layers is a buffer, as DeepSeek-V3's e_score_correction_bias)."""
    spec = load_model(FLASH)
    p = count_params(spec)
    assert p.main_total == 284_332_230_231
    assert p.main_total == pytest.approx(284e9, rel=0.01)
    assert p.hyper_connections == 43 * 2 * (24 * 4 * 4096 + 24 + 3) + (4 * 4 * 4096 + 4 + 1)
    assert count_params(spec, active=True).main_total / 1e9 == pytest.approx(13.8, abs=0.1)  # "13B activated"


def test_pro_params_round_to_the_published_totals():
    """DeepSeek-V4-Pro's cards give 1.6T total and 49B activated, to two figures: the transformers shapes of its
    config (1,572,997,179,491, i.e. 1.573T; 49.8B active) round to them. The published figure is coarser than 1%,
    so the test pins the count and its rounding."""
    spec = load_model("deepseek-v4-pro")
    p = count_params(spec)
    assert p.main_total == 1_572_997_179_491 and round(p.main_total / 1e12, 1) == 1.6
    assert int(count_params(spec, active=True).main_total / 1e9) == 49
    ratios = [layer.mixer.compressed.compress_ratio for layer in spec.layers]
    assert ratios == [128, 128] + [4, 128] * 29 + [4]


def test_pro_recipe_row_within_25_percent():
    """measured_variants.csv N06 (Megatron-LM's DeepSeek-V4-Pro GB300 recipe, 929 TFLOP/s/GPU): its layout TP1 PP4
    VPP4 EP64 with the recipe's pipeline layout, mla_up_proj + mhc recompute and core_attn offload."""
    est = api.estimate("deepseek-v4-pro", gpu="gb300", gpus=256, precision="mxfp8", seq_len=4096, gbs=4096, pp=4, vpp=4,
                       ep=64, dispatcher="hybridep", mtp_layers=1, mcore_version="0.20",
                       pipeline_layout="Et*4|(tttt|)*14tmL", recompute="selective:mla_up_proj,mhc",
                       offload_modules="core_attn")
    assert est["tflops_per_gpu"] / 929 == pytest.approx(1.0, abs=0.25)


def test_flash_reads_its_layer_schedule():
    spec = load_model(FLASH)
    ratios = [layer.mixer.compressed.compress_ratio for layer in spec.layers]
    assert ratios == [0, 0] + [4, 128] * 20 + [4]
    assert spec.mtp_layers == 1 and spec.mtp_layer.mixer.compressed.compress_ratio == 0  # the trailing entry
    assert spec.hc_mult == 4 and all(layer.hc_mult == 4 for layer in spec.layers)
    assert {"compressed_attention", "hyper_connections"} <= spec.features


@pytest.mark.parametrize("label", ["GB200", "GB300", "GB200 functional"])
def test_flops_are_bridges_as_the_measured_rows_report_them(label):
    """measured_variants.csv N12 (Bridge's DeepSeek-V4-Flash card): TFLOP/s over tokens/s per GPU is the FLOPs per
    token Bridge's flop_utils counted (dsv4_hybrid, MTP 1, sequence 4096): moeplan's count within 0.1%."""
    rows = [r for r in _rows() if r["group_id"] == "N12"]
    r = {"GB200": rows[0], "GB300": rows[1], "GB200 functional": rows[2]}[label]
    implied = tflops_to_flops_per_token(float(r["tflops_per_gpu"]), float(r["tokens_per_s_per_gpu"]))
    assert flops_per_token(load_model(FLASH), 4096).total_flops == pytest.approx(implied, rel=1e-3)


def test_compressed_attention_costs_what_each_layer_reads():
    """Sliding window only: 128 keys per query; HCA: + (s // 128) / 2 entries; CSA: + the top-k entries (at most
    s / 4) and the indexer's scores over all s / 4 compressed keys. Longer sequences cost the compressed layers
    more, the sliding ones nothing."""
    spec = load_model(FLASH)
    sliding, csa, hca = spec.layers[0], spec.layers[2], spec.layers[3]
    h = spec.hidden
    core = {n: {s: layer_flops(l, h, s).attn_core_flops for s in (4096, 65536)}
            for n, l in (("w", sliding), ("c", csa), ("h", hca))}
    per_key = 2 * 2 * 64 * 512
    assert core["w"][4096] == core["w"][65536] == per_key * 128
    assert core["h"][4096] == per_key * (128 + 16)
    assert core["c"][65536] == pytest.approx(per_key * (128 + 512 * (1 - 512 * 4 / (2 * 65536))) + 2 * 64 * 128 * 16384)


def test_mhc_adds_its_streams_to_activations_and_time():
    spec = load_model(FLASH)
    layer = spec.layers[3]
    plain = replace(layer, hc_mult=1)
    with_hc = layer_activation(layer, spec.hidden, frozenset(), frozenset(), None).token_bytes
    without = layer_activation(plain, spec.hidden, frozenset(), frozenset(), None).token_bytes
    assert with_hc - without == pytest.approx(2 * (4 * 4096 * 2 + 24 * 4))  # two blocks: streams bf16, coeffs fp32
    dropped = layer_activation(layer, spec.hidden, frozenset({"mhc"}), frozenset(), None).token_bytes
    assert with_hc - dropped == pytest.approx(2 * 24 * 4)
    est = api.estimate(FLASH, **RUN)
    assert est["outside_fit"] == []  # compressed attention and mHC are fitted features (N06 / N12 in the fit)


def test_performance_rows_within_25_percent():
    """N12's GB200 performance row (forced balance, MXFP8, TP1 PP1 EP64): moeplan's tokens/s within 25%."""
    est = api.estimate(FLASH, **RUN)
    assert est["tokens_per_s_per_gpu"] / 8056.45 == pytest.approx(1.0, abs=0.25)


def test_older_megatron_core_is_refused_in_one_line(capsys):
    from moeplan.cli import main

    with pytest.raises(MoeplanError, match="0.19 has no DeepSeek-V4 attention or mHC"):
        api.estimate(FLASH, **{**RUN, "mcore_version": "0.19"})
    assert main(["estimate", FLASH, "--gpu", "gb200", "--gpus", "128", "--ep", "64", "--seq-len", "4096", "--gbs", "2048",
                 "--mcore-version", "0.18"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "dsv4_hybrid" in err


def test_the_reader_refuses_what_v4_does_not_have():
    base = _flash_json()
    bad = copy.deepcopy(base)
    bad["compress_ratios"][2] = 8
    with pytest.raises(MoeplanError, match="compresses by 0 .sliding window., 4 or 128"):
        spec_from_dict(bad, "x", "x.json")
    short = copy.deepcopy(base)
    short["compress_ratios"] = short["compress_ratios"][:10]
    with pytest.raises(MoeplanError, match="entries for 43 layers"):
        spec_from_dict(short, "x", "x.json")
    gqa = copy.deepcopy(base)
    gqa["num_key_value_heads"] = 8
    with pytest.raises(MoeplanError, match="one shared K=V head"):
        spec_from_dict(gqa, "x", "x.json")
    typed = copy.deepcopy(base)
    del typed["compress_ratios"]
    typed["layer_types"] = ["sliding_attention"] * 2 + ["compressed_sparse_attention", "heavily_compressed_attention"] * 20 \
        + ["compressed_sparse_attention"]
    assert count_params(spec_from_dict(typed, "x", "x.json")).main_total == 284_332_230_231


def test_exports_carry_megatron_cores_v4_fields():
    """Megatron-Core 0.20's names (Bridge's DeepSeek-V4 provider): the compress ratios of the 43 layers and the MTP
    layer, the window, the grouped output projection and mHC; a version without the fields gets none of them."""
    from moeplan.megatron.export import to_settings

    cfg, _ = api.build_config(FLASH, **{k: v for k, v in RUN.items() if k not in ("mbs", "tp", "pp", "cp", "dispatcher")})
    s = to_settings(cfg)
    assert s["experimental_attention_variant"] == "dsv4_hybrid"
    assert s["csa_compress_ratios"] == [0, 0] + [4, 128] * 20 + [4, 0]
    assert (s["csa_window_size"], s["output_projection_groups"], s["output_projection_lora_rank"]) == (128, 8, 1024)
    assert s["enable_mhc_connections"] is True and s["mhc_num_residual_streams"] == 4
    assert not {"csa_compress_ratios", "enable_mhc_connections"} & set(to_settings(cfg, "0.19"))


def test_compressed_layers_keep_their_compressor_and_indexer_tensors():
    """Beyond a sliding-window layer, an HCA layer keeps its compressor's per-token kv and gate projections (head_dim
    each) and its pooled entries (head_dim / 128 per token); a CSA layer twice-wide projections (overlapping windows),
    entries per 4 tokens, and the indexer's query (64 x 128), its own compressor's, its weights and int32 top-k."""
    spec = load_model(FLASH)
    sliding, csa, hca = spec.layers[0], spec.layers[2], spec.layers[3]

    def tok(layer):
        return layer_activation(layer, spec.hidden, frozenset(), frozenset(), None).token_bytes

    assert tok(hca) - tok(sliding) == pytest.approx((2 * 512 + 512 / 128) * 2)
    indexer = 64 * 128 * 2 + (2 * 2 * 128 + 128 / 4) * 2 + 64 * 2 + 512 * 4
    assert tok(csa) - tok(sliding) == pytest.approx((2 * 2 * 512 + 512 / 4) * 2 + indexer)
