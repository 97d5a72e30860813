"""The search's sizes beyond powers of two: PP may be any divisor of the GPU count up to 32 (PP 3 / 6 / 12 on 6- or
12-node clusters), and where the CP range around seq/4096 leaves no valid layout (a length 2 x CP x TP does not
divide) a second try adds CP 1 and 2. Each case here answered "no valid layout" (exit 2, as bad input) or missed a
faster plan."""

from __future__ import annotations

import pytest

from moeplan import api


@pytest.mark.parametrize("model,kw", [
    ("qwen3-235b-a22b", dict(gpu="h200", gpus=96, seq_len=32768, gbs=1024)),
    ("qwen3-30b-a3b", dict(gpu="h100", gpus=3, seq_len=4096, gbs=64)),
    ("qwen3-30b-a3b", dict(gpu="h200", gpus=6, seq_len=4096, gbs=64)),
    ("qwen3-30b-a3b", dict(gpu="h100", gpus=16, seq_len=24577, gbs=64)),
    ("qwen3-30b-a3b", dict(gpu="h200", gpus=64, seq_len=98300, gbs=64)),
])
def test_questions_with_valid_layouts_get_a_plan(model, kw):
    assert api.plan(model, top=1, **kw)["plans"]


def test_a_pipeline_of_six_is_found_on_96_gpus():
    """DeepSeek-V3 on 96 H100 (12 nodes): PP 6 beat every power-of-two PP by ~30%; it is now searched."""
    kw = dict(gpu="h100", gpus=96, seq_len=4096, gbs=96)
    best = api.plan("deepseek-v3", top=1, **kw)["plans"][0]
    pow2 = max(p["tokens_per_s_per_gpu"] for pp in (1, 2, 4, 8, 16, 32)
               for p in api.plan("deepseek-v3", top=1, fixed={"pp": pp}, **kw)["plans"])
    assert best["parallel"]["pp"] in (3, 6, 12, 24) and best["tokens_per_s_per_gpu"] > pow2


def test_power_of_two_clusters_search_the_same_pipelines():
    from moeplan.hardware import load_gpu
    from moeplan.models import load_model
    from moeplan.run.parallel import Batch
    from moeplan.plan.planner import candidate_sizes
    from moeplan.plan.space import SearchSpace

    _, _, pps, *_ = candidate_sizes(load_model("deepseek-v3"), load_gpu("h100"), 1024, Batch(131072, 1024, 1),
                                    SearchSpace())
    assert pps == [1, 2, 4, 8, 16, 32]
