"""Cache keys of the plan search built from "every other field" of a run (moeplan.run.config.other_fields): the same
values in the same order as a copy of the run's fields less the excluded ones, for every field, including
those set by evolve; and a name that is no field is refused (a typo would silently key on too much)."""

from __future__ import annotations

import pytest

from moeplan.hardware import load_gpu
from moeplan.models import load_model
from moeplan.run.parallel import Batch, Parallel
from moeplan.run.config import Recompute, RunConfig, other_fields


def test_other_fields_is_the_field_copy_less_the_excluded():
    spec = load_model("deepseek-v3")
    base = RunConfig(spec, Parallel(256, 2, 4, 2, 8, 32, 1), Batch(32768, 256, 1), gpu=load_gpu("h100"))
    runs = [base, base.evolve(dispatcher="deepep", ep_overlap=True, fsdp="optim_grads_params"),
            base.with_(recompute=Recompute("full"), optimizer_offload=0.5, cuda_graph_scopes=frozenset({"attn"}))]
    for excluded in (("parallel", "batch", "recompute", "optimizer_offload"),
                     ("parallel", "batch", "recompute", "optimizer_offload", "ep_overlap", "cp_comm_type")):
        get = other_fields(*excluded)
        for cfg in runs:
            copy = dict(cfg.__dict__)
            for k in excluded:
                del copy[k]
            assert get(cfg) == tuple(copy.values())
    # runs that differ in an included field get different keys, in an excluded one the same
    get = other_fields("parallel", "batch")
    assert get(runs[0]) != get(runs[1])
    assert get(base) == get(base.evolve(parallel=Parallel(512, 2, 4, 2, 8, 32, 1)))


def test_other_fields_refuses_unknown_names():
    with pytest.raises(ValueError, match="not RunConfig fields: paralel"):
        other_fields("paralel")


def test_pass_one_runs_share_field_ids_per_dispatcher_overlap_and_sharding():
    """The planner's first pass makes every run from one template (its layout, batch, first dispatcher, EP
    overlap where allowed, sharding choice) and finds the memory and bound caches' "every other field" ids
    once per (dispatcher, EP overlap, sharding): every run's ids, computed afresh, are those of the first run
    with the same three. Each of the three changes the memory id, so a memo that dropped one would fail."""
    from moeplan.plan import planner as P
    from moeplan.plan.bounds import ThroughputBound
    from moeplan.engine.fsdp import FULL_SHARD
    from moeplan.engine.memory import shared_fields_key
    from moeplan.base.vocab import DEFAULT_MCORE_VERSION

    spec, gpu = load_model("deepseek-v3"), load_gpu("gb200")
    space = P.SearchSpace()
    batch = Batch(131072, 64, 1)
    layouts = P._layouts(spec, gpu, 256, batch, space, DEFAULT_MCORE_VERSION, None)
    template = RunConfig(spec, layouts[0][0], batch, gpu=gpu, dispatcher="alltoall")
    mem_cache: dict[object, object] = {}
    bound = ThroughputBound(gpu)
    first: dict[tuple[object, ...], tuple[object, int]] = {}
    for par, mbs in layouts:
        b = Batch(batch.seq_len, batch.gbs, mbs)
        for disp in ("alltoall", "hybridep"):
            cfg = P._layout_run(template, par, b, disp)
            two = template.evolve(parallel=par, batch=b, dispatcher=disp)
            assert cfg.__dict__ == two.evolve(ep_overlap=two.ep_overlap_allowed).__dict__
            for sh in (None, FULL_SHARD):
                trial = P._base_cfg(cfg, sh, space)
                ids = (shared_fields_key(trial, mem_cache), bound.fields_id(P._base_cfg(trial, None, space)))
                assert first.setdefault((disp, cfg.ep_overlap, sh), ids) == ids
    assert {overlap for _, overlap, _ in first} == {False, True}  # the spread has both
    mem_ids = {k: v[0] for k, v in first.items()}
    assert len(set(mem_ids.values())) == len(mem_ids)  # each part of the key changes the memory id
    assert len({v[1] for v in first.values()}) == 2  # the bound's: the dispatcher only (it sets EP overlap itself)


def test_evolve_is_replace_without_validation_and_leaves_the_original_alone():
    """RunConfig.evolve (the planner's copy: one sized copy of the fields dict) gives the run
    dataclasses.replace gives, field for field and in field order, and shares no dict with its source."""
    from dataclasses import fields, replace

    base = RunConfig(load_model("deepseek-v3"), Parallel(256, 2, 4, 1, 4, 8, 1), Batch(16384, 64, 1),
                     gpu=load_gpu("h100"))
    before = dict(base.__dict__)
    changes = {"parallel": Parallel(256, 4, 4, 1, 2, 16, 1), "dispatcher": "deepep", "ep_overlap": True}
    new = base.evolve(**changes)
    want = replace(base, **changes)
    assert [getattr(new, f.name) for f in fields(RunConfig)] == [getattr(want, f.name) for f in fields(RunConfig)]
    assert list(new.__dict__)[:len(fields(RunConfig))] == [f.name for f in fields(RunConfig)]
    assert new.__dict__ is not base.__dict__ and base.__dict__ == before
    new.__dict__["ep_overlap"] = False  # the planner's one in-place write (planner._layout_run) stays in the copy
    assert base.ep_overlap == before["ep_overlap"]
