"""The memory reserve's default has one owner, the knob table (moeplan.run.knobs: reserve_gib's ``api_default``), from
which the API keyword and the strategy file take it: the planning commands' unset --reserve-gib (cli.args._reserve)
and its help, and the sweep's check of a reserve it was not given (api.sweep_points), read it there too. Before,
both read moeplan.base.vocab.DEFAULT_RESERVE_GIB beside the table. The probe changes the table's default (the knob
record swapped as tests/knob_probe.py builds it) and asks each reader."""

from __future__ import annotations

import argparse

import pytest

from moeplan import api
from moeplan.base import argcheck
from moeplan.cli import args as cli_args
from moeplan.run import knobs as knob_module
from moeplan.run.knobs import RunKnobs, knob_named
from tests.knob_probe import probe_record

PROBE_GIB = 3.5


@pytest.fixture
def probe_table(monkeypatch):
    """The knob table with reserve_gib's API default PROBE_GIB."""
    monkeypatch.setattr(knob_module, "RunKnobs", probe_record(RunKnobs, "_ProbeKnobs",
                                                              {"reserve_gib": {"api_default": PROBE_GIB}}))
    knob_module._hints.cache_clear()
    assert knob_named("reserve_gib").api_default == PROBE_GIB
    yield
    monkeypatch.undo()
    knob_module._hints.cache_clear()


def test_an_unset_reserve_flag_takes_the_knob_tables_default(probe_table):
    assert cli_args._reserve(argparse.Namespace(reserve_gib=None)) == PROBE_GIB
    assert cli_args._reserve(argparse.Namespace(reserve_gib="1.5")) == 1.5  # a given flag is the flag's


def test_the_reserve_flags_help_says_the_knob_tables_default(probe_table):
    p = argparse.ArgumentParser()
    cli_args.unsaid_arguments(p)
    assert f"(default {PROBE_GIB:g}, or the --calibration profile's)" in " ".join(p.format_help().split())


class _Checked(Exception):
    pass


def test_the_sweeps_reserve_check_reads_the_knob_tables_default(probe_table, monkeypatch):
    """sweep_points checks the reserve before any search; without one given it checks the table's default."""
    seen = []

    def record(moe_imbalance, reserve_gib, **_):
        seen.append(reserve_gib)
        raise _Checked

    monkeypatch.setattr(argcheck, "imbalance_and_reserve", record)
    with pytest.raises(_Checked):
        api.sweep_points("qwen3-30b-a3b", seq_lens=[4096], gbs_tokens=4096 * 64, gpus=8)
    assert seen == [PROBE_GIB]
