"""The Transformer Engine release as a run setting (moeplan.run.attention_backend.TE_WIDE_HEAD_CUDNN, one table):
the default is the recipes' TE (71bbefb, the 2.14 line), where head dim 256 has no cuDNN training kernel on
Blackwell; from TE 2.19 (PR #3056, cuDNN 9.23) cuDNN trains it on sm10x, so FlashAttention-2 (sm100) and the
unfused path (sm103: no CP, s x s scores) give way to cuDNN's rate."""

from __future__ import annotations

import json

import pytest

from moeplan import api
from moeplan.run.attention_backend import (
    TE_WIDE_HEAD_CUDNN,
    TE_WIDE_HEAD_FIX_VERSION,
    attention_kernel,
    unfused_attention,
)
from moeplan.cli import build_parser, main
from moeplan.base.errors import MoeplanError
from moeplan.hardware import load_gpu
from moeplan.models import load_model
from moeplan.models.spec import Attention
from moeplan.run.parallel import Batch, Parallel, check_layout
from moeplan.run.config import RunConfig
from moeplan.base.te_release import DEFAULT_TE_VERSION, te_version_key
from moeplan.engine.timing.attention import attention_efficiency, fused_attention_efficiency
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION

QN = load_model("qwen3-next-80b-a3b")
QN_ATTN = next(l.mixer for l in QN.layers if isinstance(l.mixer, Attention))
GB200, GB300, H100 = load_gpu("gb200"), load_gpu("gb300"), load_gpu("h100")
NEW = TE_WIDE_HEAD_FIX_VERSION
RUN = dict(gpus=64, seq_len=65536, gbs=64, mcore_version="0.18")


def test_table_default_and_first_fixed_release():
    assert DEFAULT_TE_VERSION == "2.14" and not TE_WIDE_HEAD_CUDNN[DEFAULT_TE_VERSION]
    assert NEW == "2.19" and all(not fixed for v, fixed in TE_WIDE_HEAD_CUDNN.items() if v != NEW)
    assert te_version_key("v2.19.0") == te_version_key("2.19.1") == "2.19"
    base = dict(model=QN, parallel=Parallel(64, 1, 1, 1, 1, 8, 1), batch=Batch(4096, 64, 1))
    assert RunConfig(**base).te_version == DEFAULT_TE_VERSION
    assert RunConfig(**base, te_version="2.19.0").te_version == "2.19"
    with pytest.raises(MoeplanError, match="2.14, 2.15"):
        RunConfig(**base, te_version="3.0")


def test_kernel_per_te_version():
    # the recipes' TE: FA2 on sm100, unfused on sm103; the newer TE: cuDNN ("flash" family) on both
    assert attention_kernel(QN_ATTN, GB200) == attention_kernel(QN_ATTN, GB200, "2.18") == "flash2"
    assert attention_kernel(QN_ATTN, GB300) == attention_kernel(QN_ATTN, GB300, "2.18") == "unfused"
    assert attention_kernel(QN_ATTN, GB200, NEW) == attention_kernel(QN_ATTN, GB300, NEW) == "flash"
    assert not unfused_attention(QN_ATTN, GB300, NEW)
    assert attention_kernel(QN_ATTN, H100, NEW) == "flash"  # Hopper unchanged
    import dataclasses
    wide = dataclasses.replace(QN_ATTN, head_dim=512, v_head_dim=512)  # PR #3056 is d = 256 only
    assert attention_kernel(wide, GB200, NEW) == "unfused"
    mid = dataclasses.replace(QN_ATTN, head_dim=192, v_head_dim=192)
    assert attention_kernel(mid, GB200, NEW) == "flash2"


def test_gb200_newer_te_gets_the_cudnn_rate():
    cal = DEFAULT_CALIBRATION
    old = attention_efficiency(QN_ATTN, cal, GB200)[2]
    new = attention_efficiency(QN_ATTN, cal, GB200, te_version=NEW)[2]
    # the flash family's (Blackwell) shares; Hopper's backward has its own key (attn_bwd_eff.flash_sm90); the softmax
    # exponentials at Blackwell's rate (timing.attention.softmax_exp_share)
    assert new == pytest.approx(fused_attention_efficiency(*QN_ATTN.head_dims, "flash", cal, GB200)[2])
    assert new > old
    args = dict(tp=2, cp=2, ep=8, **RUN)
    e_old = api.estimate("qwen3-next-80b-a3b", gpu="gb200", **args)
    e_new = api.estimate("qwen3-next-80b-a3b", gpu="gb200", te_version=NEW, **args)
    assert e_new["tokens_per_s_per_gpu"] > e_old["tokens_per_s_per_gpu"]
    assert e_new["memory_gib"] == e_old["memory_gib"]  # FA2 and cuDNN both keep no scores


def test_gb300_newer_te_allows_cp_and_drops_the_scores():
    par, batch = Parallel(64, 1, 1, 1, 2, 8, 1), Batch(65536, 64, 1)
    assert [b.rule for b in check_layout(QN, par, batch, "0.18", GB300)] == ["unfused-attention-cp"]
    assert check_layout(QN, par, batch, "0.18", GB300, NEW) == []
    est = api.estimate("qwen3-next-80b-a3b", gpu="gb300", tp=1, cp=2, ep=8, te_version=NEW, **RUN)
    assert est["tokens_per_s_per_gpu"] > 0
    with pytest.raises(MoeplanError, match="--te-version 2.19"):
        api.estimate("qwen3-next-80b-a3b", gpu="gb300", tp=1, cp=2, ep=8, **RUN)
    # same layout at CP 1: the recipes' TE charges the unfused scores, the newer TE does not
    one = dict(tp=2, ep=8, **RUN)
    old = api.estimate("qwen3-next-80b-a3b", gpu="gb300", **one)["memory_gib"]
    new = api.estimate("qwen3-next-80b-a3b", gpu="gb300", te_version=NEW, **one)["memory_gib"]
    assert sum(v for v in new.values() if isinstance(v, float)) < sum(v for v in old.values() if isinstance(v, float))


def test_plan_at_64k_on_gb300_with_the_newer_te(capsys):
    argv = ["plan", "qwen3-next-80b-a3b", "--gpu", "gb300", "--gpus", "64", "--seq-len", "64k", "--gbs", "64",
            "--mcore-version", "0.18", "--json"]
    # the recipes' TE: nothing fits before Megatron-Core 0.16 (TP at most the 2 KV heads, no CP on the unfused path:
    # tests/unit/test_unfused_attention.py); from 0.16 TP 4+ replicates the KV heads and the unfused scores fit
    assert main([a if a != "0.18" else "0.15" for a in argv]) == 1
    capsys.readouterr()
    assert main(argv + ["--te-version", NEW]) == 0
    out = json.loads(capsys.readouterr().out)
    plans = out["plans"] if isinstance(out, dict) else out
    assert plans
    found = api.search_plans("qwen3-next-80b-a3b", gpu="gb300", top=20, te_version=NEW, **RUN)
    assert found.plans and all(p.config.te_version == NEW for p in found.plans)
    assert any(p.config.parallel.cp > 1 for p in found.plans)


def test_unknown_te_version_exit_2(capsys):
    code = main(["estimate", "qwen3-next-80b-a3b", "--gpu", "gb300", "--gpus", "64", "--seq-len", "32k", "--gbs", "64",
                 "--te-version", "9.9"])
    out, err = capsys.readouterr()
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "Transformer Engine version '9.9' unknown" in err and "2.19" in err and "Traceback" not in err


def _subparsers():
    import argparse
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_flag_beside_mcore_version_on_every_command():
    with_mcore = {name: p for name, p in _subparsers().items()
                  if any("--mcore-version" in a.option_strings for a in p._actions)}
    assert {"estimate", "plan", "sweep", "check"} <= set(with_mcore)
    for name, p in with_mcore.items():
        te = next((a for a in p._actions if "--te-version" in a.option_strings), None)
        assert te is not None, name
        assert f"default {DEFAULT_TE_VERSION}" in te.help and "PR #3056" in te.help and "2.19" in te.help


def test_check_and_explain_read_the_flag(tmp_path, capsys):
    """A GB300 run file with CP 2: `check` at the recipes' TE finds the unfused-attention-cp error, at the newer
    TE not; `explain` of the file at two lengths estimates (it would fail the layout at the old TE)."""
    cfg = api.build_config("qwen3-next-80b-a3b", gpu="gb300", tp=1, cp=2, ep=8, te_version=NEW, **RUN)[0]
    from moeplan.megatron.export import provenance_comment, to_overrides
    path = tmp_path / "run.txt"  # the '# moeplan:' comment carries model, GPU, count and Megatron-Core 0.18
    path.write_text("\n".join([provenance_comment(cfg, "0.18"), *to_overrides(cfg, "0.18")]) + "\n")
    base = [str(path), "--model", "qwen3-next-80b-a3b", "--gpu", "gb300", "--gpus", "64", "--mcore-version", "0.18",
            "--json"]
    main(["check", *base, "--te-version", "2.14"])  # over the file's te-version=2.19
    old = json.loads(capsys.readouterr().out)
    main(["check", *base, "--te-version", NEW])
    new = json.loads(capsys.readouterr().out)
    assert "unfused-attention-cp" in json.dumps(old) and "unfused-attention-cp" not in json.dumps(new)
    assert new.get("estimate") or new.get("tokens_per_s_per_gpu") or "estimate" in json.dumps(new)
    code = main(["explain", str(path), "--model", "qwen3-next-80b-a3b", "--gpu", "gb300", "--gpus", "64",
                 "--seq-len", "32k", "--no-fix", "--json", "--te-version", NEW])
    assert code == 0 and json.loads(capsys.readouterr().out)["reasons"] is not None
    with pytest.raises(MoeplanError, match="--te-version 2.19"):  # the recipes' TE refuses the file's CP 2
        from moeplan.lint.checker import estimate_file
        estimate_file(str(path), model="qwen3-next-80b-a3b", gpu="gb300", gpus=64, te_version="2.14")


def test_exports_name_a_non_default_te_and_check_reads_it(tmp_path, capsys):
    """A moeplan export at TE 2.19 says so in its '# moeplan:' comment (default runs keep the old line), and
    `check` of the file then needs no flag."""
    from moeplan.megatron.export import provenance_comment, to_overrides
    new = api.build_config("qwen3-next-80b-a3b", gpu="gb300", tp=1, cp=2, ep=8, te_version=NEW, **RUN)[0]
    old = api.build_config("qwen3-next-80b-a3b", gpu="gb300", tp=1, cp=1, ep=8, **RUN)[0]
    assert provenance_comment(new).endswith(" mcore-version=0.18 te-version=2.19")
    assert provenance_comment(old).endswith(" mcore-version=0.18")
    path = tmp_path / "run.txt"
    path.write_text("\n".join([provenance_comment(new), *to_overrides(new, "0.18")]) + "\n")
    main(["check", str(path), "--json"])
    out = capsys.readouterr().out
    assert "unfused-attention-cp" not in out
    main(["check", str(path), "--json", "--te-version", "2.14"])  # the flag wins over the comment
    assert "unfused-attention-cp" in capsys.readouterr().out
