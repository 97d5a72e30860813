"""The knob table (moeplan.run.knobs): a knob is written once, as a RunConfig field with its docstring and
metadata, and the CLI flag, the API keyword and the strategy file's key follow from it. A dummy knob added by a
RunConfig subclass (no edit of moeplan.cli, moeplan.api or moeplan.run.strategy) shows up in all three."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass, fields

import pytest

from moeplan import api
from moeplan.base.errors import MoeplanError
from moeplan.cli import main
from moeplan.run import knobs as knob_module
from moeplan.run import strategy
from moeplan.run.config import RunConfig
from moeplan.run.knobs import RunKnobs, knob, knob_table


@dataclass(frozen=True)
class _WithDummy(RunConfig):
    dummy_depth: int = knob(3, group="memory", flag={"slot": "layout", "type": int, "metavar": "N",
                                                     "help": "a dummy knob of the knob-table test"})
    """A knob written only here: its flag, API keyword and strategy key follow from this field."""


RUN = dict(gpus=8, seq_len=4096, gbs=64, ep=8)


@pytest.fixture
def dummy(monkeypatch):
    """RunConfig with the dummy knob, where the CLI (the knob half), the API and the strategy file look it up."""
    monkeypatch.setattr(knob_module, "RunKnobs", _WithDummy)
    monkeypatch.setattr(api, "RunConfig", _WithDummy)
    monkeypatch.setattr(strategy, "RunConfig", _WithDummy)


def test_the_table_is_runconfigs_knob_fields():
    names = [k.name for k in knob_table(RunConfig)]
    assert names == [f.name for f in fields(RunKnobs)] == [k.name for k in knob_table()]
    assert set(names).isdisjoint({"model", "parallel", "batch", "gpu"})
    assert {f.name for f in fields(RunConfig)} == {*names, "model", "parallel", "batch", "gpu"}
    by_name = {k.name: k for k in knob_table()}
    assert by_name["cuda_graph_scopes"].api == "cuda_graphs" and by_name["cuda_graph_scopes"].kind == "list"
    assert by_name["capacity_factor"].kind == "float?" and by_name["delay_wgrad"].kind == "bool?"
    assert by_name["dispatcher"].api_default == "auto" and by_name["dispatcher"].default == "alltoall"


def test_a_dummy_knob_is_an_api_keyword(dummy):
    cfg, _ = api.build_config("qwen3-30b-a3b", **RUN, dummy_depth=7)
    assert isinstance(cfg, _WithDummy) and cfg.dummy_depth == 7
    assert api.build_config("qwen3-30b-a3b", **RUN)[0].dummy_depth == 3  # the field's default
    with pytest.raises(MoeplanError, match="dummy_depth"):  # checked by its kind (an integer >= 1)
        api.build_config("qwen3-30b-a3b", **RUN, dummy_depth="deep")
    with pytest.raises(TypeError, match="unexpected keyword argument 'dummy_width'"):
        api.build_config("qwen3-30b-a3b", **RUN, dummy_width=1)


def test_a_dummy_knob_is_a_strategy_key(dummy):
    cfg, _ = api.build_config("qwen3-30b-a3b", **RUN, dummy_depth=7)
    assert strategy.groups()["memory"][-1] == "dummy_depth"
    assert strategy.strategy_of(cfg)["memory"]["dummy_depth"] == 7
    assert strategy.parse_strategy(strategy.strategy_text(cfg))["dummy_depth"] == 7
    bad = strategy.strategy_text(cfg).replace("dummy_depth: 7", "dummy_depth: deep")
    with pytest.raises(MoeplanError, match="memory.dummy_depth: expected an integer"):
        strategy.parse_strategy(bad)


def test_a_dummy_knob_is_a_cli_flag(dummy, monkeypatch):
    built = []
    evaluate = api.evaluate
    monkeypatch.setattr(api, "evaluate", lambda cfg, *a: built.append(cfg) or evaluate(cfg, *a))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["estimate", "qwen3-30b-a3b", "--gpus", "8", "--seq-len", "4k", "--gbs", "64", "--ep", "8",
                     "--dummy-depth", "5", "--json"])
    assert code == 0 and json.loads(out.getvalue())["fits"] in (True, False)
    assert [c.dummy_depth for c in built] == [5]
    with contextlib.redirect_stdout(io.StringIO()) as help_out, pytest.raises(SystemExit):
        main(["estimate", "--help"])
    assert "--dummy-depth N" in help_out.getvalue() and "a dummy knob of the knob-table test" in help_out.getvalue()


def test_without_the_dummy_the_cli_has_no_such_flag():
    with contextlib.redirect_stdout(io.StringIO()) as help_out, pytest.raises(SystemExit):
        main(["estimate", "--help"])
    assert "--dummy-depth" not in help_out.getvalue()
