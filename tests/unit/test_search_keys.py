"""Cache keys of the plan search built from "every other field" of a run (moeplan.run.other_fields): the same
values in the same order as a copy of the run's fields less the excluded ones, for every field, including
those set by evolve; and a name that is no field is refused (a typo would silently key on too much)."""

from __future__ import annotations

import pytest

from moeplan.hardware import load_gpu
from moeplan.models import load_model
from moeplan.parallel import Batch, Parallel
from moeplan.run import Recompute, RunConfig, other_fields


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
