"""The search's layout enumeration (planner._layouts) checks check_layout's rule groups once per value of
the sizes each reads; it must keep exactly the layouts, in the same order, that calling check_layout on
every folding candidate keeps (the reference loop below), on models whose rules differ (MLA, GQA, Gated
DeltaNet before and after Megatron-Core 0.18, attention sinks with wide heads on Blackwell), on GPU counts
that are and are not powers of two, and with pinned sizes that break rules."""

from __future__ import annotations

import pytest

from moeplan.hardware import load_gpu
from moeplan.models import load_model
from moeplan.run.parallel import Batch, Parallel, balanced_layout, check_layout
from moeplan.plan.planner import _layouts, candidate_sizes, candidate_vpps
from moeplan.plan.space import SearchSpace


def _reference(spec, gpu, gpus, batch, space, mcore_version, te_version=None):
    """The enumeration as it was: every folding candidate through the whole check_layout."""
    tps, cps, pps, eps, mbss, etps = candidate_sizes(spec, gpu, gpus, batch, space)  # the same sizes tried
    out = []
    for tp in tps:
        for cp in cps:
            for pp in pps:
                if gpus % (tp * cp * pp):
                    continue
                dp = gpus // (tp * cp * pp)
                vpps = candidate_vpps(spec, pp, space)  # 1/2/4/8 and the model's recipe VPPs (the same sizes tried)
                for vpp in vpps:
                    split = balanced_layout(spec, pp, vpp)
                    for ep in eps:
                        for etp in etps:
                            if gpus % (ep * etp * pp):
                                continue
                            par = Parallel(gpus, tp, pp, vpp, cp, ep, etp, split)
                            for mbs in mbss:
                                if batch.gbs % (mbs * dp):
                                    continue
                                if not check_layout(spec, par, Batch(batch.seq_len, batch.gbs, mbs), mcore_version, gpu,
                                                    te_version):
                                    out.append((par, mbs))
    return out


CASES = [
    ("deepseek-v3", "gb200", 16384, 1048576, 512, SearchSpace()),
    ("deepseek-v3", "h100", 1024, 4096, 8192, SearchSpace()),
    ("deepseek-v3", "h100", 96, 32768, 48, SearchSpace()),
    ("kimi-k2", "h100", 4096, 131072, 1024, SearchSpace()),
    ("qwen3-235b-a22b", "gb200", 1024, 32768, 1024, SearchSpace()),
    ("qwen3-30b-a3b", "h100", 64, 8192, 100, SearchSpace()),
    ("qwen3-next-80b-a3b", "gb200", 512, 65536, 256, SearchSpace()),
    ("gpt-oss-120b", "gb200", 256, 131072, 64, SearchSpace()),
    ("gpt-oss-120b", "h100", 128, 4096, 384, SearchSpace()),
    ("mixtral-8x7b", "h100", 48, 4096, 96, SearchSpace()),
    ("deepseek-v3", "h100", 1024, 4096, 1024, SearchSpace(vpp=16)),
    ("deepseek-v3", "h100", 1024, 4096, 1024, SearchSpace(tp=3, cp=2)),
    ("qwen3-235b-a22b", "h100", 512, 32768, 512, SearchSpace(ep=3, etp=2, mbs=3)),
    ("qwen3-235b-a22b", "h100", 512, 32768, 512, SearchSpace(cp=-1)),
    ("qwen3-30b-a3b", "h100", 64, 32768, 64, SearchSpace(ep=-4, mbs=-1)),
    ("qwen3-30b-a3b", "h100", 64, 6000, 64, SearchSpace(tp=4, cp=4)),
    ("qwen3-30b-a3b", "h100", 64, 4096, 0, SearchSpace()),
]


@pytest.mark.parametrize("mcore", ["0.16", "0.18"])
@pytest.mark.parametrize("model,gpu_name,gpus,seq,gbs,space", CASES)
def test_layouts_match_check_layout_on_every_candidate(model, gpu_name, gpus, seq, gbs, space, mcore):
    spec, gpu = load_model(model), load_gpu(gpu_name)
    batch = Batch(seq, gbs, 1)
    want = _reference(spec, gpu, gpus, batch, space, mcore)
    got = _layouts(spec, gpu, gpus, batch, space, mcore)
    assert got == want
    assert [p.pipeline_layout for p, _ in got] == [p.pipeline_layout for p, _ in want]


def test_the_cases_exercise_rejections():
    """The cases above are not all-valid: some candidates fail rules of each group."""
    spec, gpu = load_model("qwen3-next-80b-a3b"), load_gpu("gb200")
    batch = Batch(65536, 256, 1)
    kept = _reference(spec, gpu, 512, batch, SearchSpace(), "0.16")
    assert kept and all(p.cp == 1 for p, _ in kept)  # GDN has no CP before 0.18
    assert any(p.cp > 1 for p, _ in _reference(spec, gpu, 512, batch, SearchSpace(), "0.18"))
