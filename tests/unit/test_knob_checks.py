"""The API's knob checks say what they do (moeplan.api.arguments): the knobs the by-kind check (check_knobs) leaves
to build_config's checks by name (CHECKED_APART) are knobs of a kind it checks, each refused by build_config with
its own message (before, the set also named precision, dispatcher, cp_comm_type, mcore_version, recompute,
cuda_graphs and offload_modules, words and lists the by-kind check never looks at, under a comment saying
build_config checks their vocabularies by name: it checks them by the knob table's choices)."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.api.arguments import CHECKED_APART
from moeplan.base.errors import MoeplanError
from moeplan.run.knobs import knob_named

RUN = dict(gpus=8, seq_len=4096, gbs=64, ep=8)
CHECKED_KINDS = {"int", "float", "float?", "bool", "bool?"}  # the kinds check_knobs checks
# each knob left to build_config, and what its own check says beside the type
OWN_MESSAGE = {"optimizer_offload": "plan's optimizer_offload is the bool", "moe_imbalance": "over the mean, >= 1",
               "reserve_gib": "GiB per GPU, >= 0"}


def test_the_knobs_checked_apart_are_knobs_the_kind_check_would_check():
    assert {name: knob_named(name).kind for name in CHECKED_APART if knob_named(name).kind not in CHECKED_KINDS} == {}


@pytest.mark.parametrize("name", sorted(CHECKED_APART))
def test_build_config_refuses_each_with_its_own_message(name):
    with pytest.raises(MoeplanError, match=f"{name} must be a number.*{OWN_MESSAGE[name].replace('(', '.')}"):
        api.build_config("qwen3-30b-a3b", **RUN, **{name: "half"})


def test_search_plans_checks_its_knobs_values_by_the_build_configs_rule(monkeypatch):
    """One rule for a knob's values, the knob table's choices, in build_config and search_plans alike: a knob every
    estimating command takes (here moe_router_dtype, given a flag in the cluster slot in a probe RunConfig) is refused
    by the search with a value outside its choices, as build_config refuses it (before, search_plans checked
    precision and the optimizer by name, and any other such knob not at all)."""
    import dataclasses
    import inspect

    from moeplan.run.config import RunConfig

    field = next(f for f in dataclasses.fields(RunConfig) if f.name == "moe_router_dtype")
    meta = field.metadata["knob"]
    flag = {**meta["flag"], "slot": "cluster"}
    probe = dataclasses.make_dataclass("_ProbeConfig", [("moe_router_dtype", field.type, dataclasses.field(
        default=field.default, kw_only=True, metadata={"knob": {**meta, "flag": flag}}))], bases=(RunConfig,),
        frozen=True)
    monkeypatch.setattr(api, "RunConfig", probe)

    def question(**knobs):
        bound = inspect.signature(api.search_plans).bind("qwen3-30b-a3b", gpus=8, seq_len=4096, gbs=64, **knobs)
        bound.apply_defaults()
        return api._search_question(dict(bound.arguments))

    assert question(moe_router_dtype="fp32")["knobs"] == {"moe_router_dtype": "fp32"}
    with pytest.raises(MoeplanError, match="moe_router_dtype 'fp7' unknown; choose one of auto, "):
        question(moe_router_dtype="fp7")


@pytest.mark.parametrize("name", ["precision", "optimizer"])
def test_search_plans_and_build_config_refuse_a_value_alike(name):
    with pytest.raises(MoeplanError) as built:
        api.build_config("qwen3-30b-a3b", **RUN, **{name: "fp7"})
    with pytest.raises(MoeplanError) as searched:
        api.search_plans("qwen3-30b-a3b", gpus=8, seq_len=4096, gbs=64, **{name: "fp7"})
    assert str(searched.value) == str(built.value) == (f"{name} 'fp7' unknown; choose one of "
                                                       f"{', '.join(knob_named(name).choices)}")
