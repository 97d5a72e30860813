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
