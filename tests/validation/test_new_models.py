"""The models of issue 34 this branch reads: Qwen3.5 / Qwen3.6 MoE (qwen3_5_moe, the Qwen3-Next Gated DeltaNet
hybrid) and GLM-5 / GLM-5.2 (glm_moe_dsa, DeepSeek sparse attention). Parameter counts against the checkpoint
totals published for them, the reader's rules, and the DSA cost (moeplan.engine.dsa) against Megatron Bridge's own count
of the measured runs."""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

import pytest

from moeplan import api
from moeplan.base.errors import MoeplanError
from moeplan.engine.activations import layer_activation
from moeplan.engine.dsa import indexer_params, sparse_causal_keys
from moeplan.engine.flops import flops_per_token, layer_flops
from moeplan.engine.params import count_params
from moeplan.models import load_model, spec_from_dict
from moeplan.models.spec import MODEL_FEATURES
from moeplan.run.parallel import check_layout

from ..measured_variants import _rows, tflops_to_flops_per_token


def _catalog_json(name: str) -> dict[str, Any]:
    return json.loads(resources.files("moeplan.models.data").joinpath(f"{name}.json").read_text(encoding="utf-8"))


def _vision_params(v: dict[str, Any], out_hidden: int) -> int:
    """The Qwen3.5 / Qwen3.6 vision tower's weights, from its vision_config (transformers Qwen3_5MoeVisionModel, as
    Qwen3-VL's): Conv3d patch embedding with bias, learned position embedding, ``depth`` blocks of two LayerNorms
    (weight + bias), qkv and proj with biases, a two-layer MLP with biases, and the patch merger (LayerNorm of the
    block width, fc1 on merge^2 patches, fc2 to the language model's width, with biases)."""
    h, ffn = v["hidden_size"], v["intermediate_size"]
    patch = v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2 * h + h
    block = 2 * 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * ffn + ffn) + (ffn * h + h)
    m = h * v["spatial_merge_size"] ** 2
    merger = 2 * h + (m * m + m) + (m * out_hidden + out_hidden)
    return patch + v["num_position_embeddings"] * h + v["depth"] * block + merger


# --- parameter counts -----------------------------------------------------------------------------------------

def test_qwen36_reproduces_the_checkpoint_byte_total():
    """Megatron Bridge's Qwen3.6-35B-A3B card (examples/model_verification_cards/qwen3.6-35b-a3b/card.yaml): 1,045
    BF16 tensors of 71,903,645,408 bytes. The language model, its MTP module and the vision tower add up to it."""
    spec = load_model("qwen3.6-35b-a3b")
    p = count_params(spec)
    vision = _vision_params(_catalog_json("qwen3.6-35b-a3b")["vision_config"], spec.hidden)
    assert p.main_total + p.mtp + vision == 71_903_645_408 // 2
    assert p.main_total == 34_660_610_688 and spec.mtp_layers == 1
    assert count_params(spec, active=True).main_total / 1e9 == pytest.approx(3.45, abs=0.01)  # "A3B"


def test_qwen35_397b_matches_its_name():
    """No dump or safetensors total in the stored sources: the name's 397B (total) and A17B (active)."""
    spec = load_model("qwen3.5-397b-a17b")
    assert count_params(spec).main_total == pytest.approx(397e9, rel=0.01)
    assert count_params(spec, active=True).main_total == pytest.approx(17e9, rel=0.03)


def test_glm52_reproduces_the_checkpoint_counts_exactly():
    """Megatron Bridge's GLM-5.2 card (examples/model_verification_cards/glm5-2/card.yaml): transformers loads
    743,377,000,704 parameters (it drops the MTP layer, model.layers.78); the checkpoint's 59,585 tensors hold
    753,329,940,480 elements: plus the MTP module (its DSA indexer included) and the e_score_correction_bias buffers
    of the 75 + 1 MoE layers (256 each), which moeplan does not count as parameters."""
    spec = load_model("glm-5.2")
    p = count_params(spec)
    assert p.main_total == 743_377_000_704
    assert p.main_total + p.mtp + (spec.moe_layers + spec.mtp_layers) * spec.num_experts == 753_329_940_480


def test_glm5_matches_its_published_total():
    """GLM-5: "744B parameter architecture with 40B activated" (Vultr's model page for zai-org/GLM-5-FP8)."""
    spec = load_model("glm-5")
    assert count_params(spec).main_total == pytest.approx(744e9, rel=0.01)
    active = count_params(spec, active=True)
    assert active.main_total - active.embedding == pytest.approx(40e9, rel=0.03)


def test_indexer_parameters_of_one_layer():
    """wq_b 2048 -> 32 x 128, wk 6144 -> 128, k_norm weight + bias 2 x 128, weights_proj 6144 -> 32."""
    attn = load_model("glm-5.2").layers[0].mixer
    assert indexer_params(attn, 6144) == 2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32
    shared = load_model("glm-5.2").layers[3].mixer
    assert not shared.sparse.runs_indexer and indexer_params(shared, 6144) == 0


def test_new_models_in_the_catalog_listing(capsys):
    from moeplan.cli import main

    assert main(["models", "--json"]) == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    for name, model_type in (("qwen3.6-35b-a3b", "qwen3_5_moe"), ("qwen3.5-397b-a17b", "qwen3_5_moe"),
                             ("glm-5", "glm_moe_dsa"), ("glm-5.2", "glm_moe_dsa")):
        assert listed[name]["model_type"] == model_type


# --- readers --------------------------------------------------------------------------------------------------

def test_qwen36_layer_pattern_and_shared_gdn_model():
    spec = load_model("qwen3.6-35b-a3b")
    linear = [i for i, layer in enumerate(spec.layers) if layer.is_linear_attention]
    assert len(linear) == 30 and all((i + 1) % 4 for i in linear) and spec.moe_layers == 40
    assert spec.architecture == "hybrid-gdn" and spec.features == {"gated_deltanet", "gated_attention"}
    assert spec.mtp_layer is not None and not spec.mtp_layer.is_linear_attention  # MTP: gated attention + MoE


def test_qwen35_text_config_read_bare_or_nested():
    """A bare text config (model_type qwen3_5_moe_text) reads as the nested one; the outer tie_word_embeddings rules."""
    data = _catalog_json("qwen3.6-35b-a3b")
    nested = spec_from_dict(data, "x", "x.json")
    bare = spec_from_dict(data["text_config"], "x", "x.json")
    assert bare.layers == nested.layers and count_params(bare).total == count_params(nested).total
    tied = copy.deepcopy(data)
    tied["tie_word_embeddings"] = True
    assert spec_from_dict(tied, "x", "x.json").tie_embeddings
    with pytest.raises(MoeplanError, match="key 'text_config' must be an object"):
        spec_from_dict({**data, "text_config": None}, "x", "x.json")


# (catalog file, key, the transformers default of its class: Qwen3_5MoeTextConfig, GlmMoeDsaConfig)
DEFAULTS = [
    ("qwen3.6-35b-a3b", "num_key_value_heads", 2),
    ("qwen3.6-35b-a3b", "head_dim", 256),
    ("qwen3.6-35b-a3b", "shared_expert_intermediate_size", 512),
    ("qwen3.6-35b-a3b", "num_experts_per_tok", 8),
    ("glm-5.2", "n_shared_experts", 1),
    ("glm-5", "index_topk", 2048),
    ("glm-5", "index_head_dim", 128),
    ("glm-5", "index_n_heads", 32),
]


@pytest.mark.parametrize("name,key,default", DEFAULTS)
def test_a_missing_key_takes_the_class_default(name, key, default):
    data = _catalog_json(name)
    inner = data["text_config"] if "text_config" in data else data
    with_key = copy.deepcopy(data)
    (with_key["text_config"] if "text_config" in data else with_key)[key] = default
    inner.pop(key, None)
    a, b = spec_from_dict(data, "x", "x.json"), spec_from_dict(with_key, "x", "x.json")
    assert a.layers == b.layers and count_params(a).total == count_params(b).total


def test_glm52_index_share_pattern_and_its_rules():
    spec = load_model("glm-5.2")
    runs = [i for i, layer in enumerate(spec.layers) if layer.mixer.sparse.runs_indexer]
    assert runs == [0, 1, 2] + list(range(6, 78, 4)) and spec.mtp_layer.mixer.sparse.runs_indexer
    assert spec.dense_layers == 3 and spec.features == {"sparse_attention"}
    data = _catalog_json("glm-5.2")
    pattern = {k: v for k, v in data.items() if k != "indexer_types"}
    pattern["index_topk_pattern"] = "".join("F" if i in runs else "S" for i in range(78))
    assert spec_from_dict(pattern, "x", "x.json").layers == spec.layers
    freq = {k: v for k, v in data.items() if k not in ("indexer_types", "index_topk_pattern")}
    assert spec_from_dict(freq, "x", "x.json").layers == spec.layers  # index_topk_freq 4, offset 3
    for bad, match in (({"indexer_types": ["full"] * 77}, "has 77 entries"),
                       ({"indexer_types": ["shared"] + ["full"] * 77}, "starts with 'shared'"),
                       ({"indexer_types": None, "index_topk_pattern": "FX" * 39}, "only F and S")):
        with pytest.raises(MoeplanError, match=match):
            spec_from_dict({**data, **bad}, "x", "x.json")


# --- DSA costs ------------------------------------------------------------------------------------------------

def _n18_rows() -> list[dict[str, str]]:
    return [r for r in _rows() if r["group_id"] == "N18"]


def test_dsa_flops_per_token_equal_bridge_counts_of_the_measured_runs():
    """Megatron Bridge reports each run's model TFLOP/s with its own DSA count (flop_utils.py, dsa branch): the
    card's TFLOP/s over its tokens/s is that count per token. moeplan's FLOPs per token of GLM-5.2 with its MTP
    layer reproduce it at each of the four lengths (2K to 200K), to the cards' rounding."""
    spec = load_model("glm-5.2")
    rows = _n18_rows()
    assert len(rows) == 4
    for r in rows:
        implied = tflops_to_flops_per_token(float(r["tflops_per_gpu"]), float(r["tokens_per_s_per_gpu"]))
        assert flops_per_token(spec, int(r["seq_len"])).total_flops == pytest.approx(implied, rel=2e-4), r["seq_len"]


def test_qwen36_flops_against_bridge_count_leave_the_vision_tower():
    """N16's Bridge count includes the vision tower moeplan does not cost: the language model is 2-3% below it."""
    spec = load_model("qwen3.6-35b-a3b")
    for r in (r for r in _rows() if r["group_id"] == "N16"):
        implied = tflops_to_flops_per_token(float(r["tflops_per_gpu"]), float(r["tokens_per_s_per_gpu"]))
        assert 0.96 < flops_per_token(spec, 4096).total_flops / implied < 0.99


def test_sparse_attention_costs_its_top_k_keys_and_the_indexer_the_whole_sequence():
    spec = load_model("glm-5.2")
    full, shared = spec.layers[3 + 3].mixer, spec.layers[3].mixer  # an indexer layer and an IndexShare one
    assert sparse_causal_keys(2048, 1024) == (1024 + 1) / 2  # short sequences: every causal key
    assert sparse_causal_keys(2048, 10**6) == pytest.approx(2048 - 2048 * 2047 / 2e6)
    lengths = (8192, 65536, 524288)
    f = {s: layer_flops(spec.layers[6], spec.hidden, s).attn_core_flops for s in lengths}
    g = {s: layer_flops(spec.layers[3], spec.hidden, s).attn_core_flops for s in lengths}
    # top-k attention alone: bounded by top-k keys per query, whatever the length
    assert g[65536] / g[8192] == pytest.approx(sparse_causal_keys(2048, 65536) / sparse_causal_keys(2048, 8192))
    # the indexer scores every causal key in the forward: 2 x (s + 1) / 2 x 32 heads x (128 + 1) per token, which
    # is what grows with the length (its loss and teacher terms read the top-k keys); forward equivalent = / 3
    index = {s: f[s] - g[s] for s in lengths}
    slope = 2 * (524288 - 65536) / 2 * 32 * 129 / 3
    assert index[524288] - index[65536] == pytest.approx(slope, rel=0.01)
    assert full.sparse.runs_indexer and not shared.sparse.runs_indexer


def test_indexer_layers_keep_their_top_k_indices():
    spec = load_model("glm-5.2")
    full = layer_activation(spec.layers[6], spec.hidden, frozenset(), frozenset(), None)
    shared = layer_activation(spec.layers[7], spec.hidden, frozenset(), frozenset(), None)
    assert full.token_bytes - shared.token_bytes == pytest.approx(2048 * 4 + (32 * 128 + 128 + 32) * 2)


def test_dsa_context_parallel_is_all_gather_and_cheaper_than_a_dense_mla_ring():
    kw = dict(gpu="gb200", gpus=64, seq_len=131072, gbs=8, tp=1, pp=2, cp=32, ep=32, mcore_version="0.19")
    with pytest.raises(MoeplanError, match="cp_comm_type allgather only, not p2p"):
        api.estimate("glm-5.2", **kw)  # Megatron-Core's DSAttention asserts it
    est = api.estimate("glm-5.2", cp_comm_type="auto", **kw)
    assert est["cp_comm_type"] == "allgather"
    dense = api.estimate("deepseek-v3", cp_comm_type="allgather", **kw)  # dense MLA's K/V gathered the same way
    assert est["time_breakdown_s"]["cp_comm"] < 0.1 * dense["time_breakdown_s"]["cp_comm"]


def test_dsa_release_rules():
    """DSA arrives in Megatron-Core 0.16, IndexShare (dsa_indexer_topk_freq) in 0.19."""
    from moeplan.run.parallel import Parallel

    par = Parallel(gpus=64, tp=1, pp=1, cp=1, ep=64)
    assert [c.rule for c in check_layout(load_model("glm-5.2"), par, mcore_version="0.18")] == ["dsa-version"]
    assert not check_layout(load_model("glm-5.2"), par, mcore_version="0.19")
    assert not check_layout(load_model("glm-5"), par, mcore_version="0.16")
    assert [c.rule for c in check_layout(load_model("glm-5"), par, mcore_version="0.15")] == ["dsa-version"]


def test_dsa_is_a_feature_outside_the_fit():
    est = api.estimate("glm-5.2", gpu="gb200", gpus=192, seq_len=4096, gbs=1024, pp=6, ep=32, mcore_version="0.19")
    assert "sparse_attention" in MODEL_FEATURES and est["outside_fit"] == ["sparse_attention"]
    assert api.estimate("qwen3.6-35b-a3b", gpus=8, seq_len=4096, gbs=64, ep=8)["outside_fit"] == \
        ["gated_deltanet", "gated_attention"]


def test_planner_layouts_follow_the_head_and_expert_rules():
    for model, kw in (("glm-5.2", dict(gpu="gb200", gpus=192, seq_len=4096, gbs=1024, mcore_version="0.19")),
                      ("qwen3.6-35b-a3b", dict(gpu="h100", gpus=16, seq_len=4096, gbs=512))):
        spec = load_model(model)
        plans = api.search_plans(model, top=3, **kw).plans
        assert plans
        for p in plans:
            par = p.config.parallel
            assert spec.first_attention.num_heads % par.tp == 0 and spec.num_experts % par.ep == 0
            assert not check_layout(spec, par, p.config.batch, p.config.mcore_version)


def test_dsa_does_not_take_te_attention_backend_rules():
    """Megatron-Core's DSAttention runs its own kernels, not TE's DotProductAttention: GLM's 256-wide MLA heads do not
    fall to TE's unfused path on sm103 (which has no CP), and are timed at cuDNN's fused MLA rates."""
    from moeplan.run.attention_backend import attention_kernel
    from moeplan.hardware import load_gpu

    attn = load_model("glm-5.2").first_attention
    assert attention_kernel(attn, load_gpu("gb300")) == "cudnn_mla"
    est = api.estimate("glm-5.2", gpu="gb300", gpus=192, seq_len=131072, gbs=56, pp=6, cp=32, ep=32,
                       cp_comm_type="allgather", mcore_version="0.19", recompute="full")
    assert est["assumptions"]["unfused_attention_saved_bytes_per_layer_microbatch"] == 0.0


def test_a_partial_deepseek_v4_file_names_its_missing_key(tmp_path, capsys):
    """deepseek_v4 is read now (tests/validation/test_deepseek_v4.py); a file without its sizes is refused in one line
    naming the first missing key, as for the other types."""
    from moeplan.cli import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "deepseek_v4", "hidden_size": 4096}), encoding="utf-8")
    assert main(["params", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "key 'vocab_size' is missing" in err
