"""What a plan search is asked to hold stays held, and how many plans it shows does not change which is first."""

from __future__ import annotations

import pytest

from moeplan import api


@pytest.mark.parametrize("dispatcher", ["alltoall", "hybridep"])
def test_a_pinned_dispatcher_is_every_plans(dispatcher):
    """--dispatcher pinned only the refined layouts; the rest kept pass 1's first choice (DeepEP on H100)."""
    plans = api.plan("qwen3-30b-a3b", gpus=16, seq_len=4096, gbs=256, top=20, fixed={"dispatcher": dispatcher})["plans"]
    assert len(plans) == 20 and {p["dispatcher"] for p in plans} == {dispatcher}


def test_how_many_plans_are_shown_does_not_change_plan_1():
    """--top 10 refined more layouts than --top 5 and found another plan 1 (and a faster plan the default's
    rationale had called 'the fastest estimate' missed): the search refines vocab.REFINE_MIN layouts whatever
    the count asked for, up to REFINE_MIN / 2 plans."""
    from moeplan.base.vocab import REFINE_MIN

    kw = dict(gpu="h100", gpus=1024, seq_len=131072, gbs=1024)
    firsts = [api.plan("deepseek-v3", top=top, **kw)["plans"] for top in (1, 5, 10, REFINE_MIN // 2)]
    assert len({(str(p[0]["parallel"]), p[0]["dispatcher"], p[0]["recompute"]) for p in firsts}) == 1
    assert len({p[0]["rationale"][0]["text"] for p in firsts}) == 1  # its tie text names the same fastest estimate


def test_a_saved_strategy_keeps_its_megatron_fsdp(tmp_path, capsys):
    """estimate --strategy took its own --fsdp default ('off') as given and dropped the file's optim_grads_params
    (DeepSeek-V3 on 256 GB200 at 32K: 162.5 GiB planned, 180.3 estimated)."""
    import json

    from moeplan.cli import main

    strategy = tmp_path / "s.yaml"
    run = ["deepseek-v3", "--gpu", "gb200", "--gpus", "256", "--seq-len", "32k"]
    assert main(["plan", *run, "--gbs", "256", "--fsdp", "optim_grads_params", "--top", "1", "--save-strategy",
                 str(strategy), "--json"]) == 0
    (plan,) = json.loads(capsys.readouterr().out)
    assert plan["fsdp"] == "optim_grads_params"
    assert main(["estimate", *run, "--strategy", str(strategy), "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert est["fsdp"] == "optim_grads_params" and est["memory_gib"]["total"] == plan["memory_gib"]["total"]
    assert est["tokens_per_s_per_gpu"] == plan["tokens_per_s_per_gpu"]
    assert main(["estimate", *run, "--strategy", str(strategy), "--fsdp", "off", "--json"]) == 0  # a flag given wins
    assert json.loads(capsys.readouterr().out)["fsdp"] is None


def test_gated_deltanet_models_search_the_cp_their_heads_allow_at_long_length():
    """Qwen3-Next's 16 key heads allow CP up to 16 (head-parallel CP); at 512K the range started at seq/4096 = 128
    and tried only CP 1 besides, so 512 H100 had 'no layout fits' where CP 16 fits in 63 GiB."""
    from moeplan.models import load_model
    from moeplan.run.parallel import Batch
    from moeplan.plan.planner import candidate_sizes
    from moeplan.plan.space import SearchSpace
    from moeplan.hardware import load_gpu

    spec = load_model("qwen3-next-80b-a3b")
    _, cps, *_ = candidate_sizes(spec, load_gpu("h100"), 512, Batch(524288, 64, 1), SearchSpace())
    assert cps == [1, 2, 4, 8, 16]  # from CP 2: TP 8 can run CP 2 only (16 key heads over TP x CP)
    plans = api.plan("qwen3-next-80b-a3b", gpu="h100", gpus=512, seq_len=524288, gbs=64, top=1,
                     mcore_version="0.18")["plans"]
    assert plans and plans[0]["parallel"]["cp"] == 16


def test_a_pinned_tp_the_heads_refuse_is_named(capsys):
    """plan --tp 8 on 4 KV heads blamed "TP x CP x PP = 8x16x1 = 128 does not divide 16 GPUs" (a CP the pinned TP
    cannot fold with); the example now folds, and names the KV-head rule."""
    from moeplan.cli import main

    assert main(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "32k", "--gbs", "64",
                 "--tp", "8"]) == 2
    err = capsys.readouterr().err
    assert "query groups (KV heads) are not divisible by TP 8" in err and "does not divide 16 GPUs" not in err
