"""The output layer and loss beyond their kept bytes (moeplan.engine.loss_memory): the cross entropy's forward peak
(bf16 logits beside the fp32 copy) and Megatron-Core's sequence-parallel gather buffer, in the loss rank's transient."""

from __future__ import annotations

import pytest

from moeplan.engine.loss_memory import loss_forward_extra_bytes, output_gather_buffer_bytes
from moeplan.engine.memory import GIB, _per_layer_bytes, estimate_memory
from moeplan.hardware import load_gpu
from moeplan.models import load_model
from moeplan.run.config import Recompute, RunConfig
from moeplan.run.parallel import Batch, Parallel

LLAMA3 = load_model("llama3-8b")  # vocab 128,256, hidden 4,096 (its config.json)
B200_BYTES = load_gpu("b200").hbm_bytes


def _cfg(tp: int, pp: int, seq: int, rc: str) -> RunConfig:
    return RunConfig(LLAMA3, Parallel(32, tp=tp, pp=pp), Batch(seq, 4, 1), precision="fp8-ds",
                     recompute=Recompute.parse(rc))


def test_sizes():
    """N40's 1M point at TP8 (131,072 tokens per GPU): the bf16 logits of the rank's tokens (2 bytes per logit
    element, the vocabulary split over TP and the sequence gathered) are 31.3 GiB; the gather buffer, the rank's
    whole sequence of bf16 hidden states, 8 GiB; none at TP 1. Either grows with the tokens."""
    tokens = 1048576 / 8
    assert loss_forward_extra_bytes(LLAMA3.vocab, tokens) / GIB == pytest.approx(31.3125)
    assert output_gather_buffer_bytes(LLAMA3.hidden, tokens, 8) / GIB == pytest.approx(8.0)
    assert output_gather_buffer_bytes(LLAMA3.hidden, tokens, 1) == 0.0
    assert loss_forward_extra_bytes(LLAMA3.vocab, 2 * tokens) == 2 * loss_forward_extra_bytes(LLAMA3.vocab, tokens)


@pytest.mark.parametrize("rc", ["full", "none"])
def test_loss_rank_transient_is_the_larger_of_layer_and_loss_peaks_plus_the_buffer(rc):
    """N40's 1M point at TP8 PP1 (Llama3-8B, 131,072 tokens per GPU): the loss's forward peak (31 GiB) is larger than
    a layer's working set, so the transient is it plus the 8 GiB gather buffer, not the layer's."""
    cfg = _cfg(8, 1, 1048576, rc)
    tokens = 1048576 / 8
    est = estimate_memory(cfg, B200_BYTES)
    layer = max(v[2] for v in _per_layer_bytes(cfg, tokens).values())
    loss = loss_forward_extra_bytes(LLAMA3.vocab, tokens)
    assert loss > layer
    assert est.peak.items["transient"] == pytest.approx(loss + output_gather_buffer_bytes(LLAMA3.hidden, tokens, 8))


def test_ranks_without_the_loss_keep_the_layer_transient():
    """PP2: the first rank has no output layer: its transient is the layer's; the last rank's adds the loss's."""
    cfg = _cfg(8, 2, 262144, "none")
    tokens = 262144 / 8
    est = estimate_memory(cfg, B200_BYTES)
    first, last = est.ranks[0].items["transient"], est.ranks[-1].items["transient"]
    layer = max(v[2] for v in _per_layer_bytes(cfg, tokens).values())
    assert first == pytest.approx(layer)
    assert last == pytest.approx(max(layer, loss_forward_extra_bytes(LLAMA3.vocab, tokens))
                                  + output_gather_buffer_bytes(LLAMA3.hidden, tokens, 8))
