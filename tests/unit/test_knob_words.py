"""Every knob with a vocabulary carries it in its type (a ``Literal`` of moeplan.base, or ``Literal | None``), so
:attr:`moeplan.run.knobs.Knob.values` holds it and the CLI flag's choices are derived from it, never typed beside it
(optimizer, moe_router_dtype, muon_tp_mode and te_quant_map were ``str``: no values, hand-typed choices)."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.base.errors import MoeplanError
from moeplan.base.router_dtype import ROUTER_DTYPES
from moeplan.base.vocab import MUON_TP_MODES, OPTIMIZERS, TE_QUANT_MAP_NAMES, TE_QUANT_MAPS
from moeplan.run.knobs import flag_kwargs, knob_named, knob_table

RUN = dict(gpus=8, seq_len=4096, gbs=64, ep=8)


@pytest.mark.parametrize("name, vocabulary", [("optimizer", OPTIMIZERS), ("moe_router_dtype", ROUTER_DTYPES),
                                              ("muon_tp_mode", MUON_TP_MODES), ("te_quant_map", TE_QUANT_MAP_NAMES)])
def test_the_knob_carries_its_vocabulary(name, vocabulary):
    k = knob_named(name)
    assert k.values == tuple(vocabulary)
    assert set(k.choices) >= set(vocabulary)


def test_te_quant_map_names_are_the_maps():
    assert set(TE_QUANT_MAP_NAMES) == set(TE_QUANT_MAPS)


def test_no_flag_types_its_choices_by_hand():
    """A flag's choices come from the knob (flag_kwargs), never from its metadata."""
    for k in knob_table():
        if k.flag is not None and k.name != "fsdp":  # fsdp: its words are typed by hand still (the next change)
            assert "choices" not in k.flag, k.name
            if k.choices and k.flag.get("action") not in ("store_true", "store_false"):
                assert flag_kwargs(k)["choices"] == list(k.choices), k.name


def test_str_knobs_without_vocabulary_are_only_free_text():
    """The knobs typed plain ``str``: versions (checked against the release tables), nothing with a word list."""
    plain = {k.name for k in knob_table() if k.kind.rstrip("?") == "str" and not k.values and k.name != "recompute"}
    assert plain - {"fsdp"} == {"mcore_version", "te_version"}  # fsdp: the next change


def test_the_api_refuses_a_word_outside_the_vocabulary():
    for name, bad in (("muon_tp_mode", "distributed"), ("te_quant_map", "nemotron4"), ("moe_router_dtype", "bf16")):
        with pytest.raises(MoeplanError, match=name):
            api.build_config("qwen3-30b-a3b", **RUN, **{name: bad})
