"""The Hopper attention kernel class by Transformer Engine release (moeplan.base.te_release TERelease.hopper_attention):
NeMo 24.03.01's TE 1.3 is costed at FlashAttention-2's measured Hopper rates (attn_*_eff.flash2_sm90, from one
H200's table), every later release at the FA3 / cuDNN 9 class; FlashAttention-2's shares are per architecture."""

from __future__ import annotations

import statistics

import pytest

from moeplan.base.te_release import DEFAULT_TE_VERSION, TE_RELEASES, hopper_attention, te_version_key
from moeplan.engine.timing.attention import FLASH2_HOPPER_KEY, attention_efficiency, rate_key
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as CAL
from moeplan.hardware import load_gpu
from moeplan.models import load_model
from moeplan.run.attention_backend import attention_kernel

from ..kernel_tables import LONG, tensor_core_eff

LLAMA2 = load_model("llama2-7b").first_attention


def test_table_rows_and_hopper_class():
    assert list(TE_RELEASES)[:2] == ["1.3", "1.11"]  # oldest first (the lint rules read it in order)
    assert hopper_attention("1.3") == "flash2"
    assert hopper_attention("1.11") == hopper_attention(DEFAULT_TE_VERSION) == "flash"
    assert te_version_key("v1.3.0") == "1.3"


def test_kernel_by_release_and_gpu():
    h100, b200 = load_gpu("h100"), load_gpu("b200")
    assert attention_kernel(LLAMA2, h100, "1.3") == "flash2"
    assert attention_kernel(LLAMA2, h100) == attention_kernel(LLAMA2, h100, "1.11") == "flash"
    assert attention_kernel(LLAMA2, b200, "1.3") == "flash"  # the Hopper class is Hopper's only
    assert attention_kernel(LLAMA2, None, "1.3") == "flash"  # unknown GPU: today's Hopper choice
    assert rate_key("flash2", h100) == FLASH2_HOPPER_KEY and rate_key("flash2", b200) == "flash2"


@pytest.mark.parametrize("p,key", [("fwd", "attn_fwd_eff"), ("bwd", "attn_bwd_eff")])
def test_flash2_hopper_shares_are_the_h200_tables(p, key):
    """flash2_sm90 = the causal median over 8K / 16K at head dim 128 of FlashAttention-2 on one H200, not fitted."""
    eff = tensor_core_eff("attention_headdim_h200.csv")
    measured = statistics.median(eff[("flash2", p, 128, 128, "1", s)] for s in LONG)
    assert getattr(CAL, key)[FLASH2_HOPPER_KEY] == pytest.approx(measured, abs=0.005)


def test_flash2_share_of_peak_is_per_architecture():
    """FA2's mma.sync kernels run at about the same TFLOP/s on H100 and B200 (B200's BF16 peak is 2.3x H100's), so
    its Hopper share of peak is ~2x its B200 share; TE 1.3 on H100 costs ~0.73 of the FA3 / cuDNN 9 class."""
    h100, b200 = load_gpu("h100"), load_gpu("b200")
    hop = attention_efficiency(LLAMA2, CAL, h100, te_version="1.3")[2] * h100.peak("bf16")
    bw = attention_efficiency(load_model("qwen3-next-80b-a3b").first_attention, CAL, b200)[2] * b200.peak("bf16")
    assert 0.7 < hop / bw < 1.4
    ratio = attention_efficiency(LLAMA2, CAL, h100, te_version="1.3")[2] / attention_efficiency(LLAMA2, CAL, h100)[2]
    assert 0.6 < ratio < 0.85
