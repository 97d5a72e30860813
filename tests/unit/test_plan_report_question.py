"""A plan search's answer keeps its question once (moeplan.api.PlanReport.question): before, the report held the
model, GPU, GPU count, length, precision, headroom, routing imbalance and timing constants as fields of their own
beside the question that holds each of them, two owners that could disagree (a sweep reuses a search by its
question: api._same_question). Now they are read from the question; ``moeplan plan --json``'s keys are unchanged
(tests/contract golden files)."""

from __future__ import annotations

import dataclasses

from moeplan import api

ASKED = ("model", "gpu", "gpus", "seq_len", "precision", "headroom", "moe_imbalance", "cal")


def test_the_report_holds_no_field_its_question_holds():
    found = api.search_plans("qwen3-30b-a3b", gpus=8, seq_len=4096, gbs=64, top=1, routing="natural", headroom=0.2)
    assert {f.name for f in dataclasses.fields(found)} & set(found.question) == set()
    for name in ASKED:  # each read from the question, as the search read it
        assert getattr(found, name) is found.question[name], name
    assert found.gpu.name == "h100" and found.model.name == "qwen3-30b-a3b" and found.headroom == 0.2
    assert found.moe_imbalance == found.cal.natural_routing_imbalance > 1.0  # the routing read into the imbalance
    out = found.as_dict()
    assert (out["model"], out["gpu"], out["gpus"], out["seq_len"], out["precision"], out["headroom"]) == (
        "qwen3-30b-a3b", "h100", 8, 4096, "bf16", 0.2)
