"""Attention sinks (gpt-oss) run under context parallelism only with cp_comm_type a2a, which splits the heads over
CP: a CP the heads do not split has no attention backend. The planner ranked gpt-oss-120b layouts at CP 16 with
8 KV heads (cp_comm_type p2p, the default it kept when no type was allowed) that its own estimate and check
rejected: now such a layout is invalid (rule sink-attention-cp) and the planner's plan checks clean."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.lint import checker
from moeplan.base.errors import InvalidLayout, MoeplanError
from moeplan.megatron import export

Q = dict(gpu="h100", gpus=64, seq_len=131072, gbs=64)


def test_plans_of_a_sink_model_split_its_heads_over_cp():
    plans = api.plan("gpt-oss-120b", top=5, **Q)["plans"]
    assert plans
    for p in plans:
        cp, tp = p["parallel"]["cp"], p["parallel"]["tp"]
        assert cp == 1 or (p["cp_comm_type"] == "a2a" and (8 // tp) % cp == 0), p["parallel"]


def test_the_planners_plan_of_a_sink_model_checks_clean(tmp_path):
    run = tmp_path / "g.yaml"
    cfg = api.search_plans("gpt-oss-120b", top=1, **Q).plans[0].config
    run.write_text(export.to_yaml(cfg))
    result = checker.check(str(run))
    assert result.errors == 0, [f.message for f in result.findings if f.severity == "error"]


def test_a_cp_the_heads_do_not_split_is_an_invalid_layout():
    with pytest.raises((InvalidLayout, MoeplanError), match="sink.*|attention sinks run under context parallelism"):
        api.estimate("gpt-oss-120b", tp=1, cp=16, ep=64, **Q)
