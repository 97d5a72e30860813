"""The API's knob checks say what they do (moeplan.api.arguments): the knobs the by-kind check (check_knobs) leaves
to build_config's checks by name (CHECKED_APART) are knobs of a kind it checks, each refused by build_config with
its own message (before, the set also named precision, dispatcher, cp_comm_type, mcore_version, recompute,
cuda_graphs and offload_modules, words and lists the by-kind check never looks at, under a comment saying
build_config checks their vocabularies by name: it checks them by the knob table's choices)."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.api.arguments import CHECKED_APART, check_knobs
from moeplan.base.errors import MoeplanError
from moeplan.run.config import RunConfig
from moeplan.run.knobs import knob_named, knob_table

RUN = dict(gpus=8, seq_len=4096, gbs=64, ep=8)
CHECKED_KINDS = {"int", "int?", "float", "float?", "bool", "bool?"}  # the kinds check_knobs checks
UNCHECKED_KINDS = {"str", "str?", "list"}  # words and lists: build_config checks their vocabularies
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


def test_every_kind_of_the_knob_table_is_checked_by_kind_or_is_a_word_or_a_list():
    """A kind the table gains (int? was one: bf16_start_layers / bf16_end_layers) is checked by check_knobs or said
    to be build_config's (a vocabulary); before, int? was neither and reached RunConfig unchecked by type."""
    assert {k.kind for k in knob_table(RunConfig)} - CHECKED_KINDS - UNCHECKED_KINDS == set()


@pytest.mark.parametrize("name", sorted(k.api for k in knob_table(RunConfig)
                                        if k.kind in CHECKED_KINDS and k.api not in CHECKED_APART))
def test_check_knobs_refuses_a_word_for_each_knob_of_a_kind_it_checks(name):
    with pytest.raises(MoeplanError, match=f"^{name} must be "):
        check_knobs({name: "two"}, RunConfig)


@pytest.mark.parametrize("name", sorted(k.api for k in knob_table(RunConfig) if k.kind == "int?"))
def test_an_optional_int_knob_is_checked_as_a_count_or_none(name):
    check_knobs({name: None}, RunConfig)  # unset: the default
    check_knobs({name: 2}, RunConfig)
    for value, said in (("2", "must be an int, got '2' (str)"), (2.0, "must be an int, got 2.0 (float)"),
                        (True, "must be an int, got True (bool)"), (0, "must be a positive int, got 0")):
        with pytest.raises(MoeplanError) as exc:
            check_knobs({name: value}, RunConfig)
        assert str(exc.value) == f"{name} {said}"


def test_build_config_refuses_a_word_for_the_bf16_start_layers_as_its_type():
    with pytest.raises(MoeplanError, match="^bf16_start_layers must be an int, got 'two' \\(str\\)$"):
        api.build_config("qwen3-30b-a3b", **RUN, precision="fp8-cs", bf16_start_layers="two")

