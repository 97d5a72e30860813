"""Parameter counts against the exact checkpoint counts in ../shared/models/README.md."""

from __future__ import annotations

import re

import pytest

from moeplan.models import read_config
from moeplan.models.spec import with_mtp_layers
from moeplan.engine.params import count_params

from ..conftest import MODELS_DIR


def _readme_number(label: str) -> int:
    """Find '<label> = N' or '<label> N' with a comma-grouped integer in the README's analytic list."""
    text = (MODELS_DIR / "README.md").read_text(encoding="utf-8")
    m = re.search(re.escape(label) + r"[^0-9]{0,40}?([0-9]{1,3}(?:,[0-9]{3})+)", text)
    assert m, f"label not found in README: {label}"
    return int(m.group(1).replace(",", ""))


# (config file, README label of main-model total, README label of active, active convention)
# Active conventions as the README states them: "incl" = embedding and head included,
# "no_head" = excluding the unembedding (gpt-oss), Qwen3-Next main model excludes MTP.
CASES = [
    ("deepseek-v3", "**DeepSeek-V3:** main", "Activated (8 routed + 1 shared, including 0.93B embed and 0.93B head) =", "incl"),
    ("kimi-k2", "**Kimi-K2:** total", "Activated including embed and head =", "incl"),
    ("qwen3-235b-a22b", "**Qwen3-235B-A22B:** total", "Qwen3-235B-A22B:** total 235,093,634,560; active", "incl"),
    ("qwen3-30b-a3b", "**Qwen3-30B-A3B:** total", "Qwen3-30B-A3B:** total 30,532,122,624; active", "incl"),
    ("qwen3-next-80b-a3b", "(main, excluding MTP): total", "active (10 routed + 1 shared)", "incl"),
    ("glm-4.5", "**GLM-4.5:** main", "GLM-4.5:** main 352,797,814,784. Activated including embed and head =", "incl"),
    ("qwen3-coder-480b-a35b", "(no dump):** total", "480,154,875,392; active", "incl"),
    ("gpt-oss-120b", "**gpt-oss-120b (no dump):** total", "Active (4 experts) excluding the unembedding =", "no_head"),
    ("mixtral-8x7b", "**Mixtral-8x7B (no dump):** total", "active (top-2)", "incl"),
]


@pytest.mark.parametrize("name,total_label,active_label,convention", CASES)
def test_total_and_active_match_checkpoint_counts(name, total_label, active_label, convention):
    spec = read_config(MODELS_DIR / f"{name}.json")
    total = count_params(spec)
    active = count_params(spec, active=True)
    want_total = _readme_number(total_label)
    want_active = _readme_number(active_label)
    got_active = active.main_total - (active.output if convention == "no_head" else 0)
    assert total.main_total == pytest.approx(want_total, rel=0.005)
    assert got_active == pytest.approx(want_active, rel=0.02)


def test_exact_counts_reproduced_where_a_dump_exists():
    """Where a tensor dump exists, the count is not just close but exact."""
    exact = {
        "deepseek-v3": 671_026_404_352,
        "kimi-k2": 1_026_408_209_408,
        "qwen3-235b-a22b": 235_093_634_560,
        "qwen3-30b-a3b": 30_532_122_624,
        "qwen3-next-80b-a3b": 79_674_391_296,
        "glm-4.5": 352_797_814_784,
        "deepseek-v2-lite": 15_706_484_224,
    }
    for name, want in exact.items():
        assert count_params(read_config(MODELS_DIR / f"{name}.json")).main_total == want, name


def test_mtp_unique_parameters_match_dump():
    # README: DeepSeek-V3 MTP 11,610,067,968 unique; GLM-4.5 3,988,069,632 unique.
    assert count_params(read_config(MODELS_DIR / "deepseek-v3.json")).mtp == 11_610_067_968
    assert count_params(read_config(MODELS_DIR / "glm-4.5.json")).mtp == 3_988_069_632
    # DeepSeek-V3 MTP activated incl. shared embedding and head: 2,541,458,432
    a = count_params(read_config(MODELS_DIR / "deepseek-v3.json"), active=True)
    assert a.mtp + a.embedding + a.output == 2_541_458_432


def test_qwen3_next_mtp_module_is_the_final_layer_spec():
    """Qwen3-Next's config.json describes no MTP module, but its checkpoint holds one (mtp.* tensors,
    1,650,471,424 parameters, ../shared/models/qwen3-next-80b-a3b.json notes) and Bridge's recipes train it
    (mtp_num_layers 1). Megatron-Core builds it from the final decoder layer's spec (gated attention + MoE)
    plus eh_proj and norms; that construction gives the checkpoint's count exactly."""
    spec = read_config(MODELS_DIR / "qwen3-next-80b-a3b.json")
    assert spec.mtp_layers == 0 and count_params(spec).mtp == 0
    with_mtp = with_mtp_layers(spec, 1)
    assert count_params(with_mtp).mtp == 1_650_471_424
    assert with_mtp.mtp_layer == spec.layers[-1] and with_mtp_layers(spec, 1) is with_mtp
    assert with_mtp_layers(with_mtp, 0).mtp_layers == 0 and with_mtp_layers(spec, 0) is spec


def test_published_rounded_headlines():
    """The stated headline figures (models README 'Published' table), within the issue's bounds."""
    published = {  # total (B), active (B), with the convention each statement uses
        "deepseek-v3": (671, 37),
        "qwen3-235b-a22b": (235, 22),
        "kimi-k2": (1026.4, 32.86),  # "1T / 32B"; the checkpoint's exact total
        "mixtral-8x7b": (46.7, 12.9),
        "gpt-oss-120b": (116.8, None),
        "qwen3-30b-a3b": (30.5, None),
    }
    for name, (tot_b, act_b) in published.items():
        spec = read_config(MODELS_DIR / f"{name}.json")
        assert count_params(spec).main_total / 1e9 == pytest.approx(tot_b, rel=0.005), name
        if act_b:
            assert count_params(spec, active=True).main_total / 1e9 == pytest.approx(act_b, rel=0.02), name


def test_deepseek_v2_lite_active_excluding_embedding():
    # Published: 16B total, 2.4B active (embedding excluded)
    spec = read_config(MODELS_DIR / "deepseek-v2-lite.json")
    a = count_params(spec, active=True)
    assert (a.main_total - a.embedding) / 1e9 == pytest.approx(2.4, rel=0.025)


def test_layer_structure():
    ds = read_config(MODELS_DIR / "deepseek-v3.json")
    assert ds.dense_layers == 3 and ds.moe_layers == 58 and ds.mtp_layers == 1
    qn = read_config(MODELS_DIR / "qwen3-next-80b-a3b.json")
    linear = [i for i, layer in enumerate(qn.layers) if layer.is_linear_attention]
    assert len(linear) == 36 and 3 not in linear and 47 not in linear
    oss = read_config(MODELS_DIR / "gpt-oss-120b.json")
    assert sum(1 for layer in oss.layers if layer.mixer.sliding_window == 128) == 18
    v2 = read_config(MODELS_DIR / "deepseek-v2-lite.json")
    assert v2.first_attention.q_lora_rank is None and v2.first_attention.head_dim == 192
