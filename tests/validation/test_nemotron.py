"""Nemotron-3 (Nano, Super, 3.5 Lightning): hybrid Mamba-2 / attention / MoE stacks, Super with LatentMoE.

Checked against public measurements only:
- parameters: the checkpoints' tensor totals (Megatron Bridge verification cards, 067f987d);
- FLOPs: the TFLOP/s / tokens/s ratio of each measured row (../shared/reference/measured_variants.csv N13, N14,
  N15, N20), which is the FLOPs per token Megatron counts, independent of hardware;
- time: every measured row with a published layout within 25% in tokens/s, or named with its missing effect
  (tests/data/out_of_fit_runs.csv ``gap``; docs/calibration.md, Nemotron-3).
"""

from __future__ import annotations

import csv
import dataclasses

import pytest

from moeplan import api
from moeplan.engine.activations import layer_activation
from moeplan.engine.flops import flops_per_token, layer_gemms
from moeplan.engine.latent_moe import dispatch_width_ratio
from moeplan.engine.mamba import MAMBA_SELECTIVE_LABELS, ssd_fwd_flops
from moeplan.engine.params import count_params
from moeplan.megatron.export import to_settings
from moeplan.models import load_model, spec_from_dict
from moeplan.models.spec import Mamba2, MoE, with_mtp_layers
from moeplan.run.hybrid import hybrid_pattern_value
from moeplan.run.parallel import Parallel, check_layout

from ..measured_variants import tflops_to_flops_per_token, tokens_per_gpu_per_step
from ..reference_runs import estimate_kwargs, label, out_of_fit_runs, shared_dir

NANO, SUPER, LIGHTNING = "nemotron-3-nano-30b-a3b", "nemotron-3-super-120b", "nemotron-3.5-lightning"


# --- parameters -----------------------------------------------------------------------------------------------

def test_super_parameters_are_the_checkpoints():
    """Bridge card nemotron-3-super-120b-a12b: '123,611,033,088 elements, including the 41 FP32 router
    correction-bias tensors' (buffers of 512: not parameters, as for DeepSeek-V3's e_score_correction_bias)."""
    p = count_params(load_model(SUPER))
    assert p.total == 123_611_033_088 - 41 * 512
    assert p.main_total == 120_668_687_360  # safetensors headers minus the MTP module's 2,942,324,736
    assert p.mtp == 2_942_324_736
    assert abs(p.main_total / 120e9 - 1) < 0.01  # the published "120B"
    assert p.moe_latent_proj == 40 * 2 * 4096 * 1024
    assert count_params(load_model(SUPER), active=True).main_total == 12_770_216_960


def test_nano_and_lightning_parameters_are_the_checkpoints():
    """Bridge card nemotron-3.5-lightning: 32,913,266,240 parameters 'including the MTP layers' (24 fp32
    e_score_correction_bias buffers of 128 among them); Lightning is Nano plus one '*E' MTP module."""
    nano, light = count_params(load_model(NANO)), count_params(load_model(LIGHTNING))
    assert light.total == 32_913_266_240 - 24 * 128
    assert nano.total == nano.main_total == light.main_total
    assert abs(nano.total / 31.6e9 - 1) < 0.01  # model card: 31.6B total


# --- FLOPs: Megatron's count, read back from the measured TFLOP/s and tokens/s -----------------------------------

MODELS = {"Nemotron-3-Super-120B-A12B": SUPER, "Nemotron_3_Super": SUPER,
          "Nemotron-3.5-Lightning-30B-A3B": LIGHTNING, "Nemotron-3-Nano-30B-A3B": NANO}
MTP = {SUPER: 2, LIGHTNING: 2, NANO: 0}  # Bridge recipes: mtp_num_layers 2 (repeated layer); Nano none


def _measured_rows():
    with open(shared_dir() / "reference" / "measured_variants.csv", newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["group_id"] in ("N13", "N14", "N15", "N20")]
    return [r for r in rows if r["seq_len"] and r["tflops_per_gpu"] and r["tokens_per_s_per_gpu"]]


def _flops_param(row):
    rid = f"{row['group_id']}-{row['system']}-{row['precision']}-{row['tflops_per_gpu']}"
    # N13's H100 functional row: its seq_len 4096 is DERIVED (tokens/s x step time / GBS, the group's notes), but its
    # TFLOP/s / tokens/s is the 8192 count (84.727e9): the row's GBS or length is not the perf row's
    odd = row["group_id"] == "N13" and row["status"] == "functional" and row["system"] == "H100"
    marks = [pytest.mark.xfail(strict=True, reason="derived seq_len inconsistent with its FLOPs (measured_variants "
                               "N13 H100 functional)")] if odd else []
    return pytest.param(row, marks=marks, id=rid)


@pytest.mark.parametrize("row", [_flops_param(r) for r in _measured_rows()])
def test_flops_per_token_is_what_megatron_counted(row):
    """TFLOP/s / tokens/s of every measured row with both (the perf summary rounds TFLOP/s to 3 digits)."""
    spec = with_mtp_layers(load_model(MODELS[row["model"]]), MTP[MODELS[row["model"]]])
    measured = tflops_to_flops_per_token(float(row["tflops_per_gpu"]), float(row["tokens_per_s_per_gpu"]))
    estimated = flops_per_token(spec, int(row["seq_len"])).total_flops
    tol = 0.006 if "performance-summary" in row["source_path"] else 5e-4
    assert estimated == pytest.approx(measured, rel=tol)


def test_megatron_counts_mamba_at_twice_the_hidden():
    """training.py mamba_layer_flops takes d_in = 2 x hidden: Nano's 64 x 64 heads are 4096 wide, not 5376, so
    the count is above its GEMMs; Super's 128 x 64 = 2 x 4096 matches them."""
    for name, above in ((NANO, True), (SUPER, False)):
        spec = load_model(name)
        layer = next(l for l in spec.layers if l.is_mamba)
        from moeplan.engine.flops import layer_flops
        gemm = sum(g.fwd_flops for g in layer_gemms(layer, spec.hidden))
        assert (layer_flops(layer, spec.hidden, 4096).mamba_proj_flops > gemm) == above


# --- the reader -------------------------------------------------------------------------------------------------

def _nano_dict():
    import json
    from importlib import resources
    return json.loads(resources.files("moeplan.models.data").joinpath(f"{NANO}.json").read_text())


def test_the_pattern_is_one_layer_per_symbol():
    spec = load_model(SUPER)
    assert spec.hybrid_pattern.count("M") == 40 and spec.hybrid_pattern.count("E") == 40
    assert [l.mixer is not None for l in spec.layers] == [s in "M*" for s in spec.hybrid_pattern]
    assert spec.mtp_layers == 1 and spec.mtp_layer.is_moe and spec.mtp_layer.mixer == spec.first_attention
    assert spec.features == {"mamba2", "latent_moe"} and load_model(NANO).features == {"mamba2"}
    data = _nano_dict()
    pattern = data.pop("hybrid_override_pattern")
    names = {"M": "mamba", "*": "attention", "E": "moe"}
    again = spec_from_dict({**data, "layers_block_type": [names[s] for s in pattern]}, "n", "test")
    assert again.layers == load_model(NANO).layers


@pytest.mark.parametrize("change, message", [
    ({"hybrid_override_pattern": "MEX*"}, r"has symbol\(s\) X"),
    ({"num_hidden_layers": 51}, "differs from the 52 layers"),
    ({"mlp_hidden_act": "silu"}, "relu2"),
    ({"n_groups": 7}, "not divisible by n_groups"),
    ({"num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*M"}, "'*E'"),
])
def test_bad_configs_are_refused_in_one_line(change, message, tmp_path):
    from moeplan.cli import main
    path = tmp_path / "config.json"
    import json
    path.write_text(json.dumps({**_nano_dict(), **change}))
    with pytest.raises(Exception, match=message):
        spec_from_dict({**_nano_dict(), **change}, "n", "test")
    assert main(["params", str(path)]) == 2


# --- Mamba and LatentMoE in the cost model ---------------------------------------------------------------------

def test_mamba_saved_activations_and_recompute():
    """The mem-eff path keeps the pre-norm input and its output, zxBCdt, the scan output, the norm's rstd and out_proj's
    input; selective recompute labels do not reach a Mamba layer (its norm is fused into in_proj)."""
    spec = load_model(SUPER)
    layer = next(l for l in spec.layers if l.is_mamba)
    m: Mamba2 = layer.mixer
    la = layer_activation(layer, spec.hidden, frozenset(), frozenset(), None)
    assert la.token_bytes == 2 * (2 * spec.hidden + m.in_proj_dim + 2 * m.d_inner) + 4 * m.num_groups
    assert la.row_bytes == 0
    every = frozenset({"layernorm", "core_attn", "moe", "moe_act", "mlp", "shared_experts"})
    assert layer_activation(layer, spec.hidden, every, frozenset(), None) == la and not MAMBA_SELECTIVE_LABELS


def test_latent_experts_run_and_dispatch_at_the_latent_width():
    spec = load_model(SUPER)
    layer = next(l for l in spec.layers if l.is_moe)
    moe: MoE = layer.mlp
    gemms = {g.name: g for g in layer_gemms(layer, spec.hidden)}
    assert gemms["expert_fc1"].k == 1024 and gemms["expert_fc2"].n == 1024
    assert gemms["latent_fc1"].split == "" and gemms["latent_fc2"].n == spec.hidden
    assert dispatch_width_ratio(moe, spec.hidden) == 0.25
    wide = dataclasses.replace(spec, name="super-no-latent", layers=tuple(
        dataclasses.replace(l, mlp=dataclasses.replace(l.mlp, latent_size=None)) if l.is_moe else l
        for l in spec.layers))
    kw = dict(gpu="gb200", gpus=64, seq_len=8192, gbs=512, ep=64, mcore_version="0.19")
    assert (api.estimate(spec, **kw)["time_breakdown_s"]["ep_comm"]
            < 0.5 * api.estimate(wide, **kw)["time_breakdown_s"]["ep_comm"])


def test_the_ssd_scan_costs_less_than_the_projections():
    m = next(l.mixer for l in load_model(SUPER).layers if l.is_mamba)
    assert 0 < ssd_fwd_flops(m) < 0.05 * 2 * 4096 * (m.in_proj_dim + m.d_inner)


# --- layouts and exports -----------------------------------------------------------------------------------------

def _rules(name, version, **par):
    p = Parallel(**({"gpus": 64, "tp": 1, "pp": 1, "vpp": 1, "cp": 1, "ep": 1, "etp": 1} | par))
    return [c.rule for c in check_layout(load_model(name), p, None, version)]


def test_mamba_heads_groups_and_cp_follow_megatron_core():
    assert "mamba-groups-tp" in _rules(NANO, "0.19", tp=16, gpus=64)  # 8 groups over TP 16
    assert "mamba-heads-cp" in _rules(SUPER, "0.19", tp=2, cp=128, gpus=256)  # 64 heads per TP rank over CP 128
    assert not [r for r in _rules(SUPER, "0.19", tp=2, cp=4) if r.startswith("mamba")]


def test_hybrid_pipeline_splits_by_release():
    """0.16: even split over PP, no VPP, no MTP; 0.17+: '|' segments in hybrid_layer_pattern, MTP on the last stage."""
    nano = with_mtp_layers(load_model(NANO), 0)
    assert _rules(NANO, "0.16", pp=4, gpus=64) == []  # 52 = 4 x 13
    assert "hybrid-vpp-version" in _rules(NANO, "0.16", pp=2, vpp=2, gpus=64)
    assert "hybrid-mtp-version" in _rules(SUPER, "0.16")
    assert _rules(SUPER, "0.19", pp=4, vpp=2, gpus=64, pipeline_layout="Et*11|(t*11|)*6t*11mL") == []
    cfg, _ = api.build_config(SUPER, gpu="h100", gpus=64, seq_len=4096, gbs=1280, pp=2, ep=32, mtp_layers=2,
                              pipeline_layout="Et*44|t*44mmL", mcore_version="0.19")
    s = to_settings(cfg)
    assert s["hybrid_layer_pattern"] == load_model(SUPER).hybrid_pattern[:44] + "|" + \
        load_model(SUPER).hybrid_pattern[44:] + "/*E/*E"
    assert s["pipeline_model_parallel_layout"] is None and s["moe_latent_size"] == 1024 and s["is_hybrid_model"]
    assert s["mamba_num_heads"] == 128 and s["mamba_state_dim"] == 128 and s["mamba_num_groups"] == 8
    cfg16, _ = api.build_config(nano, gpu="h100", gpus=8, seq_len=4096, gbs=64, pp=2, ep=4, mcore_version="0.16")
    s16 = to_settings(cfg16)
    assert s16["hybrid_override_pattern"] == nano.hybrid_pattern and "hybrid_layer_pattern" not in s16
    assert hybrid_pattern_value(nano, None, (0, 19)) == nano.hybrid_pattern


# --- the calibration check ---------------------------------------------------------------------------------------

NEMOTRON_RUNS = [r for r in out_of_fit_runs() if r["model"] in (NANO, SUPER, LIGHTNING)]


def _run_id(r):
    return f"{label(r)}-{r['precision']}-tp{r['tp']}"


@pytest.mark.parametrize("run", NEMOTRON_RUNS, ids=_run_id)
def test_every_measured_row_is_within_25_percent_or_named(run):
    """Estimated tokens/s within 25% of the measured (GBS x seq / (GPUs x step time)), else the row names the effect
    moeplan misses; a named row that comes inside 25% must lose its name (the table stays honest)."""
    est = api.estimate(run["model"], **estimate_kwargs(run))
    measured = tokens_per_gpu_per_step(run) / float(run["measured_step_time_s"])
    off = est["tokens_per_s_per_gpu"] / measured - 1
    # an "above the band" note is the band check's (tests/validation/test_outside_fit.py): it may stand on a row
    # inside 25%, and names the effect on one beyond it
    above = run["gap"].startswith("above the band")
    assert (abs(off) > 0.25) == bool(run["gap"]) or (above and abs(off) <= 0.25), (off, run["gap"])
    assert est["outside_fit"] == []  # Mamba-2 and LatentMoE are fitted features (the tuned rows are in the fit)


def test_every_nemotron_group_is_in_the_check():
    assert {r["model"] for r in NEMOTRON_RUNS} == {NANO, SUPER, LIGHTNING} and len(NEMOTRON_RUNS) == 8


def test_ssd_working_buffers_are_in_the_transient_peak():
    """The SSD kernels' fp32 chunk states, dt / dA_cumsum and C B^T blocks are a layer's working memory, not kept."""
    from moeplan.engine.mamba import ssd_transient_bytes_per_token
    m = next(l.mixer for l in load_model(SUPER).layers if l.is_mamba)
    assert ssd_transient_bytes_per_token(m) == 4 * (128 * 64 * 128 / 128 + 2 * 128 + 8 * 128)
    kw = dict(gpu="gb200", gpus=64, seq_len=8192, gbs=512, ep=64, mcore_version="0.19")
    short, long = (api.estimate(SUPER, **(kw | {"seq_len": s, "gbs": 512 * 8192 // s}))["memory_gib"]["transient"]
                   for s in (8192, 65536))
    assert long > short


def _peak_alloc_gib(group: str, system: str) -> float:
    """The card's 'peak alloc X GiB' of a group's measured (performance) row on ``system``."""
    import re
    with open(shared_dir() / "reference" / "measured_variants.csv", newline="", encoding="utf-8") as fh:
        row = next(r for r in csv.DictReader(fh) if r["group_id"] == group and r["system"] == system
                   and r["status"] == "measured")
    return float(re.search(r"peak alloc ([0-9.]+) GiB", row["other_knobs"]).group(1))


@pytest.mark.parametrize("group, model, system", [
    ("N13", SUPER, "h100"),
    pytest.param("N14", LIGHTNING, "gb200", marks=pytest.mark.xfail(strict=True, reason=(
        "named gap: the estimate is 27% above the card's 156.85 GiB; 25.6 GiB of it are the CUDA graphs' static "
        "buffers of the attn / mamba / moe_router / moe_preprocess scopes (without graphs: +9%), and the recipe's "
        "gradient / optimizer dtypes are not stated (fp32 assumed)"))),
])
def test_peak_memory_matches_the_cards(group, model, system):
    """Weights, gradients, optimizer states (Super's H100 recipe: precision-aware optimizer, bf16 grads and moments),
    activations with the Mamba layers' saved tensors, transient: the estimate less its reserve within 5% of the
    card's peak allocated memory (torch.cuda.max_memory_allocated)."""
    run = next(r for r in NEMOTRON_RUNS if r["model"] == model and r["system"] == system)
    est = api.estimate(run["model"], **estimate_kwargs(run))["memory_gib"]
    measured = _peak_alloc_gib(group, "H100" if system == "h100" else "GB200 NVL72")
    assert est["total"] - est["reserve"] == pytest.approx(measured, rel=0.05)
