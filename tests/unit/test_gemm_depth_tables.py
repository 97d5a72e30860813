"""gemm_epilogue_s against measured dense GEMMs on Hopper and Blackwell (XLA's matmul performance tables,
tests/data/xla_matmul_depth.csv; benchmarks/gemm_depth_tables.py prints the same numbers): the depth penalty's
per-SM scaling (timing.gemm.gemm_k_half) holds across sm_90 BF16 and sm_100 BF16 / FP8, the source value is what
batched Hopper GEMMs imply, and the fitted value is well past every kernel (a stand-in for Blackwell run costs:
benchmarks/epilogue_pull.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import gemm_depth_tables as gdt  # noqa: E402
from calibrate import PRIOR  # noqa: E402
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION  # noqa: E402

SWEEPS = gdt.groups()
IMPLIED = {key: gdt.implied_epilogue_s(sweep) for key, sweep in SWEEPS.items()}


def test_the_table_holds_the_sweeps_it_names():
    assert set(SWEEPS) == {("sm_90", "bf16", 1), ("sm_90", "bf16", 2), ("sm_90", "bf16", 4), ("sm_100", "bf16", 1),
                           ("sm_100", "fp8", 1)}
    assert all(sorted(int(r["k"]) for r in s) == [256, 512, 1024, 2048, 4096] for s in SWEEPS.values())


def test_one_epilogue_time_serves_hopper_and_blackwell_bf16_and_fp8():
    """Single GEMMs (b = 1): the implied time per output element and SM is 0.8-1.1e-10 s on H100 BF16, B200 BF16
    and B200 FP8, whose per-SM matmul rates differ 3.9x; with a depth penalty that did not scale with the per-SM
    rate the FP8 sweep would imply ~3.9x the H100 one."""
    single = [IMPLIED[k] for k in (("sm_90", "bf16", 1), ("sm_100", "bf16", 1), ("sm_100", "fp8", 1))]
    assert max(single) / min(single) < 1.5
    for key, sweep in SWEEPS.items():  # and the depth form reproduces each sweep at its own value
        assert gdt.log_rms(sweep, DEFAULT_CALIBRATION.with_overrides({"gemm_epilogue_s": IMPLIED[key]})) < 0.12


def test_the_source_value_is_what_batched_hopper_gemms_imply():
    """Back-to-back GEMMs (b = 4 in one call, launch tails amortised, as a training step issues them) on H100
    BF16 imply 4.7e-11 s: the source value (two 64-deep K-steps at H100's BF16 rate per SM, 4.25e-11) within 15%;
    single launches imply more (8.1e-11), and the depth penalty falls with the batch."""
    assert IMPLIED[("sm_90", "bf16", 4)] == pytest.approx(PRIOR.gemm_epilogue_s, rel=0.15)
    assert IMPLIED[("sm_90", "bf16", 4)] < IMPLIED[("sm_90", "bf16", 2)] < IMPLIED[("sm_90", "bf16", 1)]


@pytest.mark.xfail(strict=True, reason="the fit takes gemm_epilogue_s to 2.2e-10, 2.1x the largest value any "
                   "measured GEMM sweep implies (1.06e-10, B200 BF16 single launches): ~95% of what pulls it above "
                   "its source value are the Blackwell rows (GB200, GB300, B200; BF16 ~+8%, MXFP8 / NVFP4 more), H100 "
                   "rows ~5% (benchmarks/epilogue_pull.py); docs/calibration.md known gaps")
def test_the_fitted_epilogue_is_within_the_kernels():
    assert DEFAULT_CALIBRATION.gemm_epilogue_s <= 1.5 * max(IMPLIED.values())
