"""delay_wgrad_compute: the knob, its default (on with EP A2A overlap, as Bridge pairs them), its CLI option,
strategy key and linter checks (Megatron-Core transformer_config.py; Megatron-LM arguments.py and Bridge
comm_overlap.py for the CUDA-graph attention-bias rule)."""

from __future__ import annotations

import json

import pytest

from moeplan import api
from moeplan.lint import checker
from moeplan.cli import main
from moeplan.base.errors import MoeplanError
from moeplan.engine.knobs import knob_problem
from moeplan.megatron import export
from moeplan.run.strategy import parse_strategy, strategy_text

G11 = dict(gpu="h100", gpus=16, seq_len=4096, gbs=1024, ep=16, dispatcher="hybridep")
GPT_OSS = dict(gpu="gb200", gpus=64, seq_len=4096, gbs=1280, mbs=4, ep=16, dispatcher="hybridep", ep_overlap=True,
               cuda_graphs="attn,moe_router,moe_preprocess")


def _cfg(model: str = "qwen3-30b-a3b", **kw):
    return api.build_config(model, **{**G11, **kw})[0]


@pytest.mark.parametrize("overlap,delay,on", [(False, None, False), (True, None, True), (True, False, False),
                                              (True, True, True), (False, False, False)])
def test_delay_follows_ep_overlap_unless_set(overlap, delay, on):
    cfg = _cfg(ep_overlap=overlap, delay_wgrad=delay)
    assert cfg.delay_wgrad_on is on
    assert export.to_settings(cfg)["delay_wgrad_compute"] is on


def test_delay_without_ep_overlap_is_a_one_line_error():
    with pytest.raises(MoeplanError, match="delay_wgrad_compute needs EP A2A overlap"):
        _cfg(delay_wgrad=True)


def test_attention_bias_with_an_attn_graph_blocks_the_default_and_rejects_an_explicit_ask():
    """gpt-oss has attention biases: from Megatron-Core 0.17 Megatron-LM and Bridge reject delayed weight gradients
    with a TE CUDA graph of attention, so the default (Bridge's pairing) leaves it off and asking for it fails."""
    cfg = api.build_config("gpt-oss-120b", mcore_version="0.17", **GPT_OSS)[0]
    assert cfg.delay_wgrad_blocked and not cfg.delay_wgrad_on
    assert api.build_config("gpt-oss-120b", mcore_version="0.16", **GPT_OSS)[0].delay_wgrad_on  # the rule is 0.17+
    assert api.build_config("gpt-oss-120b", mcore_version="0.17", **{**GPT_OSS, "cuda_graphs": "moe_router"})[0] \
        .delay_wgrad_on
    problem = knob_problem(cfg.with_(delay_wgrad=True))
    assert problem is not None and problem.field == "delay_wgrad_compute" and "attention bias" in problem.message


def test_cli_option_and_json(capsys):
    base = ["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4k", "--gbs", "1024",
            "--ep", "16", "--dispatcher", "hybridep", "--json"]
    assert main([*base, "--ep-overlap"]) == 0
    assert json.loads(capsys.readouterr().out)["delay_wgrad"] is True
    assert main([*base, "--ep-overlap", "--no-delay-wgrad"]) == 0
    assert json.loads(capsys.readouterr().out)["delay_wgrad"] is False
    assert main([*base, "--delay-wgrad"]) == 2
    err = capsys.readouterr().err
    assert "delay_wgrad_compute needs EP A2A overlap" in err and "Traceback" not in err


@pytest.mark.parametrize("delay", [None, True, False])
def test_strategy_round_trip(delay):
    cfg = _cfg(ep_overlap=True, delay_wgrad=delay)
    again = api.build_config("qwen3-30b-a3b", gpu="h100", gpus=16, **parse_strategy(strategy_text(cfg)))[0]
    assert again == cfg


def test_linter_flags_delay_without_overlap(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  expert_model_parallel_size: 16\n  moe_token_dispatcher_type: alltoall\n"
                    "comm_overlap:\n  delay_wgrad_compute: true\n"
                    "train:\n  global_batch_size: 1024\n  micro_batch_size: 1\ndataset:\n  sequence_length: 4096\n")
    result = checker.check(str(path), model="qwen3-30b-a3b", gpu="h100", gpus=16)
    hit = [f for f in result.findings if f.rule == "mcore-delay-wgrad-a2a-overlap"]
    assert hit and hit[0].severity == "error" and hit[0].line == 5
    assert "needs overlap_moe_expert_parallel_comm" in hit[0].message


def test_linter_warns_when_overlap_runs_without_delayed_wgrad(tmp_path):
    """Qwen3-30B-A3B on 64 H100, DeepEP EP16 with overlap and delay_wgrad_compute off (G11's recipe at 4x the
    GPUs): the dispatch outlasts mlp_fwd, so delaying the weight gradients is worth a warning with its numbers
    and the override that turns it on; with it on, no finding."""
    text = ("model:\n  expert_model_parallel_size: 16\n  moe_token_dispatcher_type: flex\n"
            "  moe_flex_dispatcher_backend: deepep\ncomm_overlap:\n  overlap_moe_expert_parallel_comm: true\n"
            "  delay_wgrad_compute: {}\ntrain:\n  global_batch_size: 1024\n  micro_batch_size: 1\n"
            "dataset:\n  sequence_length: 4096\n")
    path = tmp_path / "run.yaml"
    path.write_text(text.format("false"))
    result = checker.check(str(path), model="qwen3-30b-a3b", gpu="h100", gpus=64)
    hit = [f for f in result.findings if f.rule == "delay-wgrad"]
    assert hit and hit[0].severity == "warning" and hit[0].line == 7
    assert hit[0].fix == ("++comm_overlap.delay_wgrad_compute=true",)
    assert hit[0].numbers["gain"] >= 0.03 and hit[0].numbers["delayed_ep_comm_s"] < hit[0].numbers["ep_comm_s"]
    path.write_text(text.format("true"))
    assert not [f for f in checker.check(str(path), model="qwen3-30b-a3b", gpu="h100", gpus=64).findings
                if "delay" in f.rule]


def test_merged_layer_nodes_never_run_backwards_when_wgrad_outweighs_the_backward():
    """A wgrad estimate above the backward (few rows per expert, its own roofline) is capped at the backward:
    the layer is then no faster than with the whole backward delayed, and never faster than its comm chain."""
    from moeplan.engine.timing.context import TRAIN
    from moeplan.engine.timing.moe import merged_layer_s

    d = c = 1e-3
    experts_s, attn_s = 3e-3, 3e-3
    back = experts_s * (1 - 1 / TRAIN)
    over = merged_layer_s(d, c, attn_s, experts_s, attn_wgrad_s=0.0, experts_wgrad_s=5 * back)
    capped = merged_layer_s(d, c, attn_s, experts_s, attn_wgrad_s=0.0, experts_wgrad_s=back)
    assert over == capped
    # a chunk's first layer (idle streams) is where an uncapped wgrad would run a node backwards and shift the
    # dispatch_bwd that waits on it (~1 s instead of ~8 ms for a 1 s wgrad): the cap holds it at the backward
    huge = merged_layer_s(d, c, attn_s, experts_s, attn_wgrad_s=1.0, experts_wgrad_s=1.0, carry=False)
    assert huge == merged_layer_s(d, c, attn_s, experts_s, attn_wgrad_s=attn_s * (1 - 1 / TRAIN),
                                  experts_wgrad_s=back, carry=False) < 0.1
    assert over >= 2 * (d + c) - 1e-12


def test_ep_overlap_with_gated_deltanet_needs_its_backward_dw():
    """core_v0.16.1's GatedDeltaNet has no backward_dw, which EP overlap's callables read for every layer
    (fine_grained_callables.py init_backward_dw_wrapper): refused there, accepted from 0.17 (Megatron-LM #2997),
    where delay_wgrad also delays its in_proj / out_proj weight gradients."""
    from moeplan.base.errors import MoeplanError
    from moeplan.base.fields import gdn_backward_dw

    assert not gdn_backward_dw("0.16.1") and gdn_backward_dw("0.17") and gdn_backward_dw("0.19")
    kw = dict(gpu="h100", gpus=64, seq_len=4096, gbs=512, pp=2, vpp=4, ep=32, dispatcher="deepep", ep_overlap=True)
    with pytest.raises(MoeplanError, match="Gated DeltaNet"):
        api.estimate("qwen3-next-80b-a3b", mcore_version="0.16", **kw)
    on = api.estimate("qwen3-next-80b-a3b", mcore_version="0.17", **kw)
    off = api.estimate("qwen3-next-80b-a3b", mcore_version="0.17", delay_wgrad=False, **kw)
    assert on["step_time_s"] < off["step_time_s"]


_EXPORTS = {"overrides": lambda cfg, v=None: "\n".join(export.to_overrides(cfg, v)),
            "yaml": lambda cfg, v=None: export.to_yaml(cfg, v),
            "megatron-lm": lambda cfg, v=None: " ".join(export.to_megatron_lm_args(cfg, v))}


@pytest.mark.parametrize("fmt", list(_EXPORTS))
@pytest.mark.parametrize("delay", [None, True, False])
def test_export_then_check_keeps_what_the_file_says(tmp_path, fmt, delay):
    """An export with EP overlap spells delay_wgrad_compute out; `moeplan check` (checker.load_run) reads that
    value back, True or False, never None (an explicit true used to come back as Bridge's pairing)."""
    cfg = _cfg(ep_overlap=True, delay_wgrad=delay)
    path = tmp_path / f"run.{fmt}"
    path.write_text(_EXPORTS[fmt](cfg))
    back = checker.load_run(str(path), model="qwen3-30b-a3b", gpu="h100", gpus=16)[0]
    assert back.delay_wgrad is cfg.delay_wgrad_on is (delay is not False)
    assert back == cfg.with_(delay_wgrad=cfg.delay_wgrad_on)


_TEXTS = {  # (EP overlap, delay_wgrad_compute: None = left out) -> the file
    "yaml": lambda overlap, delay: (
        "model:\n  expert_model_parallel_size: 16\n  moe_token_dispatcher_type: flex\n"
        "  moe_flex_dispatcher_backend: hybridep\ncomm_overlap:\n"
        f"  overlap_moe_expert_parallel_comm: {str(overlap).lower()}\n"
        + ("" if delay is None else f"  delay_wgrad_compute: {str(delay).lower()}\n")
        + "train:\n  global_batch_size: 1024\n  micro_batch_size: 1\ndataset:\n  sequence_length: 4096\n"),
    "overrides": lambda overlap, delay: "\n".join(
        ["model.expert_model_parallel_size=16", "model.moe_token_dispatcher_type=flex",
         "model.moe_flex_dispatcher_backend=hybridep",
         f"comm_overlap.overlap_moe_expert_parallel_comm={str(overlap).lower()}",
         *([] if delay is None else [f"comm_overlap.delay_wgrad_compute={str(delay).lower()}"]),
         "train.global_batch_size=1024", "train.micro_batch_size=1", "dataset.sequence_length=4096"]),
    "megatron-lm": lambda overlap, delay: " ".join(
        ["--expert-model-parallel-size 16 --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep",
         *(["--overlap-moe-expert-parallel-comm"] if overlap else []),
         *(["--delay-wgrad-compute"] if delay else []),  # no flag turns it off: left out is off
         "--global-batch-size 1024 --micro-batch-size 1 --seq-length 4096"]),
}


@pytest.mark.parametrize("fmt", list(_TEXTS))
@pytest.mark.parametrize("overlap,delay,read", [
    (True, True, True), (True, False, False),
    (True, None, False),  # left out: Megatron's default (off); Bridge pairs them only in its perf scripts
    (False, None, None), (False, False, None),  # off either way, as None says without overlap
    (False, True, True)])  # kept, so the linter reports what Megatron rejects
def test_hand_written_files_read_as_they_say(tmp_path, fmt, overlap, delay, read):
    path = tmp_path / "run.txt"
    path.write_text(_TEXTS[fmt](overlap, delay))
    cfg = checker.load_run(str(path), model="qwen3-30b-a3b", gpu="h100", gpus=16)[0]
    assert cfg.ep_overlap is overlap and cfg.delay_wgrad is read


@pytest.mark.parametrize("fmt", list(_EXPORTS))
def test_explicit_delay_where_megatron_rejects_it_is_reported(tmp_path, fmt):
    """gpt-oss (attention bias) with an attn CUDA graph on Megatron-Core 0.17: a file that asks for
    delay_wgrad_compute with EP overlap is an error citing why (Megatron-LM arguments.py / Bridge comm_overlap.py),
    with the override that removes it, not read as Bridge's pairing (which leaves it off there). The finding is
    Megatron's assertion (mcore-delay-wgrad-graph-attn-bias), not also knob-layout: one finding per cause."""
    cfg16 = api.build_config("gpt-oss-120b", mcore_version="0.16", **GPT_OSS)[0]
    assert cfg16.delay_wgrad_on
    path = tmp_path / f"run.{fmt}"
    path.write_text(_EXPORTS[fmt](cfg16, "0.17"))
    result = checker.check(str(path), model="gpt-oss-120b", gpu="gb200", gpus=64, mcore_version="0.17")
    assert result.config.delay_wgrad is True and result.config.delay_wgrad_blocked
    hit = [f for f in result.findings if f.rule == "knob-layout" or "delay" in f.rule]
    assert [f.rule for f in hit] == ["mcore-delay-wgrad-graph-attn-bias"]
    assert hit[0].severity == "error" and "attention bias" in hit[0].message
    assert "arguments.py" in hit[0].numbers["source"] and "Bridge training/comm_overlap.py" in hit[0].numbers["source"]
    assert hit[0].fix == ("++comm_overlap.delay_wgrad_compute=false",)
    # what moeplan exports for the same run at 0.17 (Bridge's pairing: off there) reads back clean
    cfg17 = api.build_config("gpt-oss-120b", mcore_version="0.17", **GPT_OSS)[0]
    path.write_text(_EXPORTS[fmt](cfg17))
    result = checker.check(str(path), model="gpt-oss-120b", gpu="gb200", gpus=64)
    assert result.config.delay_wgrad is False
    assert not [f for f in result.findings if f.rule == "knob-layout" or "delay" in f.rule]


@pytest.mark.parametrize("fmt", list(_TEXTS))
@pytest.mark.parametrize("cause", ["a2a-overlap", "graph-attn-bias"])
def test_delay_megatron_rejects_is_one_finding_with_its_fix(tmp_path, fmt, cause):
    """delay_wgrad_compute without EP overlap (Qwen3-30B-A3B), or with gpt-oss's attention bias and an attn CUDA
    graph on 0.17: one error on the line, Megatron's assertion with its source (knob-layout, the same cause, is
    left out), and the override that removes it (the export of the fixed run: false)."""
    path = tmp_path / "run.txt"
    if cause == "a2a-overlap":
        path.write_text(_TEXTS[fmt](False, True))
        result = checker.check(str(path), model="qwen3-30b-a3b", gpu="h100", gpus=16)
    else:
        path.write_text(_EXPORTS[fmt](api.build_config("gpt-oss-120b", mcore_version="0.16", **GPT_OSS)[0], "0.17"))
        result = checker.check(str(path), model="gpt-oss-120b", gpu="gb200", gpus=64, mcore_version="0.17")
    hit = [f for f in result.findings if f.rule == "knob-layout" or "delay" in f.rule]
    assert [(f.rule, f.severity) for f in hit] == [(f"mcore-delay-wgrad-{cause}", "error")]
    assert hit[0].line and hit[0].numbers["source"]
    assert hit[0].fix == ("++comm_overlap.delay_wgrad_compute=false",)


def test_knob_layout_for_delay_without_overlap_has_its_fix():
    """Where only knob-layout reports it (rules.lint on a run, no file): the override that removes it, although
    the run's own export already says false (delay_wgrad_compute is off without EP overlap)."""
    from moeplan.lint.rules import lint

    cfg = _cfg().with_(delay_wgrad=True)
    hit = [f for f in lint(cfg, cfg.gpu) if f.rule == "knob-layout"]
    assert [f.fix for f in hit] == [("++comm_overlap.delay_wgrad_compute=false",)]


_FULL_RECOMPUTE = {  # EP A2A overlap with full recompute, at GBS B (Qwen3-30B-A3B on 16 H100: DP 16, MBS 1)
    "yaml": lambda gbs: (
        "model:\n  expert_model_parallel_size: 16\n  moe_token_dispatcher_type: flex\n"
        "  moe_flex_dispatcher_backend: hybridep\n  recompute_granularity: full\n  recompute_method: uniform\n"
        "  recompute_num_layers: 1\ncomm_overlap:\n  overlap_moe_expert_parallel_comm: true\n"
        f"train:\n  global_batch_size: {gbs}\n  micro_batch_size: 1\ndataset:\n  sequence_length: 4096\n"),
    "overrides": lambda gbs: "\n".join(
        ["model.expert_model_parallel_size=16", "model.moe_token_dispatcher_type=flex",
         "model.moe_flex_dispatcher_backend=hybridep", "model.recompute_granularity=full",
         "model.recompute_method=uniform", "model.recompute_num_layers=1",
         "comm_overlap.overlap_moe_expert_parallel_comm=true",
         f"train.global_batch_size={gbs}", "train.micro_batch_size=1", "dataset.sequence_length=4096"]),
    "megatron-lm": lambda gbs: (
        "--expert-model-parallel-size 16 --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep "
        "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 "
        f"--overlap-moe-expert-parallel-comm --global-batch-size {gbs} --micro-batch-size 1 --seq-length 4096"),
}


@pytest.mark.parametrize("fmt", list(_FULL_RECOMPUTE))
def test_ep_overlap_with_full_recompute_is_one_finding_with_its_fix(tmp_path, fmt):
    """EP A2A overlap with full recompute: Megatron's assertion (mcore-ep-a2a-overlap) and knob-layout test the same
    cause, so one error on the line, Megatron's, with the override that turns the overlap off. With a single
    micro-batch as well (a cause the assertion does not test: the ep-a2a-overlap rule's shares_knob predicate) both are kept, the
    fix on knob-layout's."""
    path = tmp_path / "run.txt"
    path.write_text(_FULL_RECOMPUTE[fmt](1024))
    result = checker.check(str(path), model="qwen3-30b-a3b", gpu="h100", gpus=16)
    hit = [f for f in result.findings if f.rule in ("knob-layout", "mcore-ep-a2a-overlap")]
    assert [(f.rule, f.severity) for f in hit] == [("mcore-ep-a2a-overlap", "error")]
    assert "full recompute" in hit[0].message and hit[0].line and hit[0].numbers["source"]
    assert hit[0].fix == ("++comm_overlap.overlap_moe_expert_parallel_comm=false",)
    path.write_text(_FULL_RECOMPUTE[fmt](16))  # one micro-batch per DP rank
    result = checker.check(str(path), model="qwen3-30b-a3b", gpu="h100", gpus=16)
    hit = {f.rule: f for f in result.findings if f.rule in ("knob-layout", "mcore-ep-a2a-overlap")}
    assert set(hit) == {"knob-layout", "mcore-ep-a2a-overlap"}
    assert hit["knob-layout"].fix == ("++comm_overlap.overlap_moe_expert_parallel_comm=false",)
    assert "micro-batches" in hit["knob-layout"].message and not hit["mcore-ep-a2a-overlap"].fix
