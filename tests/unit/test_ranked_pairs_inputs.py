"""The ranking tests pair two measured rows only where moeplan is asked two different things
(tests/measured_variants.same_inputs: model and estimate arguments). Before, ranked_pairs skipped a pair only where
kwargs AND extra were equal, so two runs of one configuration whose ``extra`` differed (a repeat, kernel tuning
moeplan does not model, its why-out-of-fit note) were ranked against one estimate: G11's HybridEP overlap row and
its tuned twin are such a pair (4.4% apart measured: under the 10% gap, so the shared pair count, 24 + 96 = 120 at
this change, did not move)."""

from __future__ import annotations

from tests.measured_variants import Variant, n_ranked_pairs, ranked_pairs, same_inputs, variants

KW = dict(gpu="h100", gpus=16, seq_len=4096, gbs=1024, ep=16, dispatcher="hybridep", ep_overlap=True)


def _row(label: str, tflops: float, model: str = "qwen3-30b-a3b", **extra: object) -> Variant:
    return Variant("G11", label, model, dict(KW), tflops, None, extra=dict(extra))


def test_two_runs_of_one_configuration_are_no_pair_whatever_their_extra_says():
    plain, tuned = _row("overlap", 250.0, why=""), _row("overlap tuned", 300.0, why="kernel tuning", repeats=1)
    assert same_inputs(plain, tuned)
    assert ranked_pairs([plain, tuned]) == []


def test_rows_of_different_models_with_the_same_arguments_are_a_pair():
    a, b = _row("30b", 250.0), _row("235b", 300.0, model="qwen3-235b-a22b")
    assert not same_inputs(a, b)
    assert ranked_pairs([a, b]) == [(a, b)]


def test_no_measured_pair_shares_its_estimates_inputs():
    """At any gap (0: every pair the groups form), shared and older groups alike."""
    pairs = ranked_pairs(variants(), min_gap=0.0) + n_ranked_pairs(min_gap=0.0)
    assert pairs and [(lo.group, lo.label, hi.label) for lo, hi in pairs if same_inputs(lo, hi)] == []
