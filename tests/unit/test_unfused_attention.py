"""Transformer Engine's UnfusedDotProductAttention, where TE (71bbefb, the recipes' TE) trains Qwen3-Next's
head-dim-256 attention on B300 / GB300 (sm103; moeplan.run.attention_backend.attention_kernel): its s x s score
matrices in the memory model (moeplan.engine.activations.unfused_attention_bytes) and its lack of context parallelism
in the layout rules (moeplan.run.parallel.check_layout, rule ``unfused-attention-cp``), keyed on the timing model's
predicate."""

from __future__ import annotations

import dataclasses
import json

import pytest

from moeplan import api
from moeplan.engine.activations import unfused_attention_bytes
from moeplan.run.attention_backend import attention_kernel, unfused_attention
from moeplan.cli import main
from moeplan.base.errors import MoeplanError
from moeplan.hardware import load_gpu
from moeplan.engine.memory import GIB
from moeplan.models import load_model
from moeplan.models.spec import Attention
from moeplan.run.parallel import Batch, Parallel, check_layout

QN = load_model("qwen3-next-80b-a3b")
QN_ATTN = next(l.mixer for l in QN.layers if isinstance(l.mixer, Attention))
N_ATTN = sum(isinstance(l.mixer, Attention) for l in QN.layers)
GB200, GB300 = load_gpu("gb200"), load_gpu("gb300")
RUN = dict(gpus=64, seq_len=32768, gbs=64, mcore_version="0.18")


def test_one_predicate_decides():
    assert unfused_attention(QN_ATTN, GB300) and attention_kernel(QN_ATTN, GB300) == "unfused"
    assert not unfused_attention(QN_ATTN, GB200) and not unfused_attention(QN_ATTN, load_gpu("h100"))
    assert not unfused_attention(QN_ATTN, None)


def test_saved_scores_and_peak_hand_worked_long_keys():
    """32K keys (not below the fused softmax's 16,384): the torch fp32 softmax. Qwen3-Next: 16 query heads, 2 KV
    heads, head dim 256; TP 2, MBS 1."""
    assert (QN_ATTN.num_heads, QN_ATTN.num_kv_heads, QN_ATTN.head_dim) == (16, 2, 256)
    s = 32768
    scores = 1 * 8 * s * s  # E = MBS x heads/TP x s x s = 8,589,934,592
    mask = s * s  # M = 1,073,741,824
    # expanded K and V (16 - 2 heads each, bf16) and no fp32 softmax statistics (16 heads), per token of the
    # 32,768 / TP 2 sequence-parallel tokens: (2 x 14 x 256 x 2 - 16 x 4) x 16,384 = 14,272 x 16,384
    tokens = 14272 * 16384
    saved = 4 * scores + 2 * scores + mask + tokens  # fp32 P, bf16 P, masked_fill_'s bool mask
    assert saved == 52_847_181_824
    # forward at the bf16 cast: bf16 S + fp32 S + fp32 P + bf16 P and three masks, above get_full_mask's 16 M
    peak = tokens + (2 + 4 + 4 + 2) * scores + 3 * mask
    assert peak == 106_534_273_024
    u = unfused_attention_bytes(QN_ATTN, mbs=1, seq_len=s, tp=2)
    assert not u.fused_softmax
    assert u.saved_bytes == saved and u.peak_bytes == peak


def test_saved_scores_short_keys_use_the_fused_softmax():
    """4K keys, TP 1: TE's fused masked softmax keeps one bf16 P (shared with the PV bmm)."""
    s = 4096
    scores, tokens = 16 * s * s, 14272 * s
    u = unfused_attention_bytes(QN_ATTN, mbs=1, seq_len=s, tp=1)
    assert u.fused_softmax
    assert u.saved_bytes == 2 * scores + tokens == 595_329_024
    assert u.peak_bytes == tokens + 6 * scores == 1_669_070_848  # backward: bf16 P, dP, dS
    # 16,384 keys is past the kernel's limit (16 < sk < 16384): the fp32 path
    assert not unfused_attention_bytes(QN_ATTN, mbs=1, seq_len=16384, tp=1).fused_softmax


def _memory(gpu, **kw):
    return api.estimate("qwen3-next-80b-a3b", gpu=gpu, tp=2, ep=32, **RUN, **kw)["memory_gib"]


def test_memory_model_charges_the_scores_on_gb300_only():
    """Same run on GB300 and on a GB300 whose compute capability is unknown (the fused choice): PP 1 with 2
    micro-batches holds one in flight, so the activations differ by the 12 attention layers' saved bytes."""
    blind = dataclasses.replace(GB300, compute_capability=None)
    assert not unfused_attention(QN_ATTN, blind)
    u = unfused_attention_bytes(QN_ATTN, mbs=1, seq_len=RUN["seq_len"], tp=2)
    on, off = _memory(GB300), _memory(blind)
    said = api.estimate("qwen3-next-80b-a3b", gpu=GB300, tp=2, ep=32, **RUN)["assumptions"]
    assert said["flash_attention"] is False and said["unfused_attention_saved_bytes_per_layer_microbatch"] == u.saved_bytes
    assert N_ATTN == 12
    assert on["activations"] - off["activations"] == pytest.approx(N_ATTN * u.saved_bytes / GIB, rel=1e-6)
    # the layer run alone adds its working peak beyond what it keeps
    assert on["transient"] - off["transient"] == pytest.approx((u.peak_bytes - u.saved_bytes) / GIB, rel=0.05)
    # core_attn recompute (TE checkpoints the whole unfused attention) keeps none of it, and the peak is transient
    rc_on, rc_off = _memory(GB300, recompute="core_attn"), _memory(blind, recompute="core_attn")
    assert rc_on["activations"] == pytest.approx(rc_off["activations"], rel=1e-9)
    assert rc_on["transient"] == pytest.approx(u.peak_bytes / GIB, rel=0.1)


def test_cp_rejected_on_gb300_allowed_on_gb200():
    args = dict(tp=1, cp=2, ep=8, gpus=64, seq_len=65536, gbs=64, mcore_version="0.18")
    with pytest.raises(MoeplanError) as exc:
        api.estimate("qwen3-next-80b-a3b", gpu="gb300", **args)
    msg = str(exc.value)
    assert "\n" not in msg
    for word in ("Transformer Engine", "71bbefb", "head dim 256", "UnfusedDotProductAttention", "CP 2", "sm103"):
        assert word in msg
    assert api.estimate("qwen3-next-80b-a3b", gpu="gb200", **args)["tokens_per_s_per_gpu"] > 0
    # the one rule, and only with CP > 1 and a GPU that picks the unfused path
    par = Parallel(64, 1, 1, 1, 2, 8, 1)
    batch = Batch(65536, 64, 1)
    assert [b.rule for b in check_layout(QN, par, batch, "0.18", GB300)] == ["unfused-attention-cp"]
    assert check_layout(QN, par, batch, "0.18", GB200) == []
    assert check_layout(QN, par, batch, "0.18") == []
    assert check_layout(QN, dataclasses.replace(par, cp=1), batch, "0.18", GB300) == []


def test_cli_estimate_exit_2(capsys):
    code = main(["estimate", "qwen3-next-80b-a3b", "--gpu", "gb300", "--gpus", "64", "--seq-len", "64k", "--gbs", "64",
                 "--mcore-version", "0.18", "--cp", "2"])
    out, err = capsys.readouterr()
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "UnfusedDotProductAttention" in err and "context parallelism" in err
    assert "TE PR #3056" in err  # where the limit ends: the user on a newer TE knows it is not theirs


def test_planner_returns_no_cp_on_gb300():
    found = api.search_plans("qwen3-next-80b-a3b", gpu="gb300", top=50, **RUN)
    assert found.plans
    assert all(p.config.parallel.cp == 1 for p in found.plans)
    # on GB200 (FlashAttention-2 supports CP) the same search keeps CP > 1 layouts among those it costs
    gb200 = api.search_plans("qwen3-next-80b-a3b", gpu="gb200", top=50, **RUN)
    assert any(p.config.parallel.cp > 1 for p in gb200.plans)


def test_linter_reports_cp_on_the_unfused_path(tmp_path, capsys):
    path = tmp_path / "qn.overrides"
    path.write_text("model.tensor_model_parallel_size=1\nmodel.context_parallel_size=2\n"
                    "model.expert_model_parallel_size=8\nmodel.seq_length=65536\ntrain.global_batch_size=64\n"
                    "train.micro_batch_size=1\n")
    code = main(["check", str(path), "--model", "qwen3-next-80b-a3b", "--gpu", "gb300", "--gpus", "64",
                 "--mcore-version", "0.18", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    found = [f for f in data["findings"] if f["rule"] == "unfused-attention-cp"]
    assert len(found) == 1 and found[0]["severity"] == "error" and found[0]["line"] == 2
    assert "head dim 256" in found[0]["message"] and "CP 2" in found[0]["message"]
    assert found[0]["fix"] == ["model.context_parallel_size=1"]
    main(["check", str(path), "--model", "qwen3-next-80b-a3b", "--gpu", "gb200", "--gpus", "64",
          "--mcore-version", "0.18", "--json"])
    assert not [f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "unfused-attention-cp"]


def test_core_attn_recompute_is_a_candidate_where_it_frees_the_scores():
    """At 32K core_attn is no recompute candidate where attention keeps only softmax statistics (GB200's
    FlashAttention-2), and is one on GB300, where it frees ~6 bytes per score element per layer: the planner's
    best GB300 plan recomputes it, and the linter does not warn about it there."""
    from moeplan.plan.advice import recompute_ladder
    from moeplan.lint.rules import lint

    def labels(gpu):
        return set().union(*(rc.modules for rc in recompute_ladder(QN, RUN["seq_len"], "0.18", gpu)))

    assert "core_attn" in labels(GB300) and "core_attn" not in labels(GB200) and "core_attn" not in labels(None)
    best = api.search_plans("qwen3-next-80b-a3b", gpu="gb300", top=1, **RUN).best
    assert best is not None and "core_attn" in best.config.recompute.modules
    cfg, gpu = api.build_config("qwen3-next-80b-a3b", gpu="gb300", tp=2, ep=8, recompute="core_attn", **RUN)
    assert not [f for f in lint(cfg, gpu) if f.rule == "core-attn-recompute"]
    cfg, gpu = api.build_config("qwen3-next-80b-a3b", gpu="gb200", tp=2, ep=8, recompute="core_attn", **RUN)
    assert [f for f in lint(cfg, gpu) if f.rule == "core-attn-recompute"]


def test_timing_moves_the_torch_softmax_bytes_from_16k_keys():
    """The timing model keys the softmax path on the same predicate as the memory model: from 16,384 keys the
    fp32 torch softmax moves 32 / 40 bytes per score element forward / backward (8 / 14 with TE's fused kernel),
    plus the masks' bytes per s x s element over the batch x heads they mask."""
    from moeplan.engine.timing.attention import attention_efficiency
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION

    cal = DEFAULT_CALIBRATION
    peak = GB300.peak("bf16")
    byte = peak / (GB300.hbm_bw_bytes_per_s * cal.hbm_eff)
    mm = (GB300.gemm_bf16_achieved_flops or 0.75 * peak) / peak
    counted = 4 * 256  # Megatron's forward FLOPs per causal score, d = 256

    def expected(fwd_bytes, bwd_bytes):
        fwd_t = 2 * (counted / mm + fwd_bytes * byte)
        bwd_t = 2 * (2 * counted / mm + bwd_bytes * byte)
        return counted / fwd_t, 2 * counted / bwd_t, 3 * counted / (fwd_t + bwd_t)

    long_keys = attention_efficiency(QN_ATTN, cal, GB300, (8, 32768))  # MBS 1 x 16 heads / TP 2
    assert long_keys == pytest.approx(expected(32 + 41 / 8, 40 + 1 / 8))
    short_keys = attention_efficiency(QN_ATTN, cal, GB300, (64, 4096))  # PR #3168's GB300 recipe: MBS 4, TP 1
    assert short_keys == pytest.approx(expected(8 + 38 / 64, 14))
    assert long_keys[2] < short_keys[2]


def test_no_fit_names_the_unfused_attention_peak(capsys):
    """64K on 64 GB300: TP is at most 2 (2 KV heads) and CP is refused, so one layer's unfused attention peaks at
    ~396 GiB (12 x E = 12 x 16 heads / 2 x 65,536^2 bytes, more than a GB300 holds): nothing fits, and the one
    line says why."""
    code = main(["plan", "qwen3-next-80b-a3b", "--gpu", "gb300", "--gpus", "64", "--seq-len", "64k", "--gbs", "64",
                 "--mcore-version", "0.18"])
    out, err = capsys.readouterr()
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "no layout fits" in err and "unfused path" in err and "head dim 256" in err and "TE PR #3056" in err
    peak = unfused_attention_bytes(QN_ATTN, 1, 65536, 2).peak_bytes / GIB
    assert peak > GB300.hbm_bytes / GIB and f"{peak:.0f} GiB" in err
