"""A search's question (moeplan.api._search_question: what a sweep compares to reuse a search) is read from
search_plans' own parameters, not a second list of them: its keys are search_plans' parameters less those it folds
into others (routing into moe_imbalance, hardware_file into gpu, mtp_layers into model) and those that say how it
answers (top, progress), and a parameter search_plans gains is in its question with no other edit (before,
_search_question re-declared search_plans' 28 parameters: a new one needed three edits). One search arguments'
check for the knobs with a vocabulary: the knob table's choices, as build_config checks them."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from moeplan import api
from moeplan.base.errors import MoeplanError

M = "qwen3-30b-a3b"
QUESTION = dict(gpus=8, seq_len=4096, gbs=64)
NOT_ASKED = {"top", "progress", "routing", "hardware_file", "mtp_layers"}


def _arguments(**kwargs):
    """search_plans' arguments by name, as it binds them (its defaults applied)."""
    bound = inspect.signature(api.search_plans).bind(M, **QUESTION, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def test_the_question_is_search_plans_parameters():
    q = api._search_question(_arguments())
    assert set(q) == set(inspect.signature(api.search_plans).parameters) - NOT_ASKED
    assert q["gpu"].name == "h100" and q["model"].name == M and q["knobs"] == {}


def test_a_new_search_parameter_is_in_the_question_without_an_edit():
    """search_plans' arguments with one more (as its locals() would carry a new parameter) give a question that
    holds it, so two searches that differ only in it are not the same question."""
    q = api._search_question({**_arguments(), "probe_depth": 3})
    assert q["probe_depth"] == 3
    assert q != api._search_question({**_arguments(), "probe_depth": 4})
