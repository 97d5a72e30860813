"""The published runs are estimated with the settings of the recipe release that measured them
(tests/data/published_runs_recipes.csv; tests.reference_runs)."""

from __future__ import annotations

from tests.reference_runs import FP8_RECIPE_PRECISION, estimate_kwargs, label, published_runs, run_precision, shared_dir


def _runs() -> dict[str, dict[str, str]]:
    return {label(r): r for r in published_runs(shared_dir() / "reference")}


def test_deepseek_v3_h100_1024_is_the_25_09_recipe():
    """Megatron Bridge's 25.09 summary lists DeepSeek-V3 on 1,024 H100 at 338 (330) TFLOP/s: FP8 current scaling,
    and in parentheses the 1x128 / 128x128 blockwise run (the 25.11 table labels the same columns FP8-CS (...)).
    Its scripts (v0.1.0rc3 scripts/performance/run_script.py, Megatron-Core 0.14) set, on H100, enable_deepep and
    A2A_1F1B (overlap_moe_expert_parallel_comm with delay_wgrad_compute), recompute mla_up_proj + mlp and
    overlap_grad_reduce False; the later perf_recipes (HybridEP, no overlap) are another release's."""
    kw = estimate_kwargs(_runs()["deepseek-v3-H100-1024-4096"])
    assert kw["precision"] == "fp8-cs"
    assert kw["dispatcher"] == "deepep"
    assert kw["ep_overlap"] is True and kw["delay_wgrad"] is None  # blank: paired with the overlap, as the run did
    assert kw["recompute"] == "selective:mla_up_proj+mlp"
    assert kw["dp_overlap"] is False
    assert kw["mcore_version"] == "0.14"
    assert (kw["tp"], kw["pp"], kw["vpp"], kw["ep"]) == (2, 8, 4, 64)


def test_fp8_recipe_names_the_scaling_only_where_the_csv_says_fp8():
    assert run_precision({"precision": "fp8", "fp8_recipe": "cs"}) == "fp8-cs"
    assert run_precision({"precision": "fp8", "fp8_recipe": "ss"}) == "fp8"  # sub-channel: blockwise
    assert run_precision({"precision": "fp8"}) == "fp8"
    assert run_precision({"precision": "mxfp8", "fp8_recipe": "cs"}) == "mxfp8"
    assert set(FP8_RECIPE_PRECISION) == {"ds", "cs", "mx", "ss"}  # Bridge's --fp8_recipe choices
