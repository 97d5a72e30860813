"""`moeplan check`: real-looking configs with one deliberate fault each, a clean one, and fuzzing."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moeplan import api
from moeplan.lint import checker
from moeplan.megatron import export
from moeplan.cli import main


def _best_cfg(model, gpu, gpus, seq, gbs, **kw):
    best = api.search_plans(model, gpu=gpu, gpus=gpus, seq_len=seq, gbs=gbs, top=1, **kw).best
    assert best is not None
    return best.config  # a plan carries its config


@pytest.fixture(scope="module")
def dsv3_clean(tmp_path_factory):
    cfg = _best_cfg("deepseek-v3", "h100", 1024, 131072, 1024)
    path = tmp_path_factory.mktemp("cfg") / "dsv3_128k.yaml"
    path.write_text(export.to_yaml(cfg, "0.16"))
    return cfg, path


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_clean_planned_config_has_no_errors(dsv3_clean, capsys):
    _, path = dsv3_clean
    code, out, _ = _run(capsys, "check", str(path), "--model", "deepseek-v3", "--gpus", "1024", "--json")
    data = json.loads(out)
    assert code == 0 and data["errors"] == 0, data["findings"]
    assert data["estimate"]["fits"]


def test_dsv3_core_attn_recompute_at_128k(dsv3_clean, tmp_path):
    cfg, _ = dsv3_clean
    faulty = cfg.with_(recompute=cfg.recompute.__class__("selective", cfg.recompute.modules | {"core_attn"}))
    path = tmp_path / "dsv3_core_attn.yaml"
    path.write_text(export.to_yaml(faulty, "0.16"))
    res = checker.check(str(path), model="deepseek-v3", gpus=1024)
    f = next(f for f in res.findings if f.rule == "core-attn-recompute")
    assert f.severity == "warning" and f.numbers["cost_s"] > 0 and f.numbers["saves_mib"] < 1024
    assert any(o.startswith("model.recompute_modules=") and "core_attn" not in o for o in f.fix)
    assert f.line is not None


def test_qwen3_235b_64k_dp_collapsed(tmp_path):
    # TP4 x CP8 x PP8 = 256 GPUs: DP 1, and EP32 x PP8 = 256: expert DP 1 too
    text = ("model.tensor_model_parallel_size=4 model.pipeline_model_parallel_size=8 "
            "model.virtual_pipeline_model_parallel_size=4 model.context_parallel_size=8 "
            "model.expert_model_parallel_size=32 model.expert_tensor_parallel_size=1 model.sequence_parallel=true "
            "model.seq_length=65536 "
            "train.global_batch_size=64 train.micro_batch_size=1 model.recompute_granularity=selective "
            "model.recompute_modules=[layernorm,moe] model.moe_token_dispatcher_type=flex "
            "model.moe_flex_dispatcher_backend=deepep model.cp_comm_type=p2p "
            "model.account_for_embedding_in_pipeline_split=true model.account_for_loss_in_pipeline_split=true\n")
    path = tmp_path / "qwen235b_64k.overrides"
    path.write_text(text)
    res = checker.check(str(path), model="qwen3-235b-a22b", gpus=256)
    f = next(f for f in res.findings if f.rule == "dp-collapsed")
    assert "EP in the same squeeze" in f.message and f.numbers["dp"] == 1 and f.numbers["edp"] == 1
    assert (f.severity == "warning") == bool(f.fix)  # no DP 2 layout fits: information, nothing to act on
    if f.fix:  # a DP >= 2 alternative fits: its numbers and the override that gets there
        assert f.numbers["alt_tokens_per_s"] > 0
        assert any(o.startswith(("model.context_parallel_size=", "model.pipeline_model_parallel_size=",
                                 "model.tensor_model_parallel_size=")) for o in f.fix)


def test_qwen3_next_32k_cuda_graphs_variable_shapes(tmp_path):
    args = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --context-parallel-size 1 "
            "--expert-model-parallel-size 32 --seq-length 32768 --global-batch-size 64 --micro-batch-size 1 "
            "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep "
            "--cuda-graph-impl transformer_engine --cuda-graph-scope full_iteration --variable-seq-lengths "
            "--recompute-granularity selective --recompute-modules layernorm moe_act")
    path = tmp_path / "qwen_next_32k.args"
    path.write_text(args)
    res = checker.check(str(path), model="qwen3-next-80b-a3b", gpu="gb200", gpus=32)
    rules = {f.rule: f for f in res.findings}
    assert rules["cuda-graphs-variable-shapes"].severity == "error"
    assert "model.cuda_graph_impl=none" in rules["cuda-graphs-variable-shapes"].fix
    assert rules["cuda-graphs-dropless"].severity == "warning"
    assert res.errors >= 1


def test_divisibility_errors_and_exit_codes(tmp_path, capsys):
    path = tmp_path / "bad.overrides"
    path.write_text("model.tensor_model_parallel_size=1\nmodel.context_parallel_size=3\nmodel.expert_model_parallel_size=48\n"
                    "model.seq_length=131072\ntrain.global_batch_size=96\ntrain.micro_batch_size=1\n")
    code, out, _ = _run(capsys, "check", str(path), "--model", "qwen3-235b-a22b", "--gpus", "144", "--json")
    data = json.loads(out)
    assert code == 1
    rules = {f["rule"] for f in data["findings"]}
    assert "seq-cp" in rules or "experts-ep" in rules
    assert any(f["line"] == 3 for f in data["findings"] if f["rule"] == "experts-ep")


def test_memory_error_names_dominant_item_and_cheapest_fix(capsys):
    code, out, _ = _run(capsys, "check", "examples/deepseek_v3_128k_h100.yaml", "--model", "deepseek-v3",
                        "--gpus", "1024", "--json")
    data = json.loads(out)
    f = next(f for f in data["findings"] if f["rule"] == "memory")
    assert code == 1 and f["numbers"]["dominant_item"] == "activations"
    assert f["numbers"]["fixed_memory_gib"] <= 79.65 and f["fix"]


def test_unknown_keys_reported_with_line(tmp_path, capsys):
    path = tmp_path / "typo.yaml"
    path.write_text("model:\n  tensor_model_parallel_size: 2\n  contxt_parallel_size: 4\n  seq_length: 4096\n"
                    "  expert_model_parallel_size: 8\ntrain:\n  global_batch_size: 256\n  micro_batch_size: 1\n")
    code, out, _ = _run(capsys, "check", str(path), "--model", "qwen3-30b-a3b", "--gpus", "16", "--json")
    data = json.loads(out)
    unknown = [f for f in data["findings"] if f["rule"] == "unknown-key"]
    assert unknown and unknown[0]["line"] == 3 and "contxt_parallel_size" in unknown[0]["message"]


def test_unreadable_file_exit_2(tmp_path, capsys):
    path = tmp_path / "broken.yaml"
    path.write_text("model:\n  tensor_model_parallel_size: [1, 2\n")
    code, out, err = _run(capsys, "check", str(path), "--model", "qwen3-30b-a3b", "--gpus", "8")
    assert code == 2 and out == "" and "broken.yaml:" in err and err.count("\n") == 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.sampled_from(list("model.train:=-_ [],{}\n\t'\"#0123456789abcdefgxyz|*")), max_size=200))
def test_fuzz_check_never_tracebacks(tmp_path, text):
    path = tmp_path / "fuzz.txt"
    path.write_text(text)
    try:
        code = main(["check", str(path), "--model", "qwen3-30b-a3b", "--gpus", "16", "--json"])
    except SystemExit as exc:  # argparse only; not expected here
        code = exc.code
    assert code in (0, 1, 2)


def test_uneven_pipeline_needs_a_layout(tmp_path):
    path = tmp_path / "dsv3_pp8.overrides"
    path.write_text("model.pipeline_model_parallel_size=8\nmodel.virtual_pipeline_model_parallel_size=4\n"
                    "model.expert_model_parallel_size=64\nmodel.expert_tensor_parallel_size=1\n"
                    "model.seq_length=4096\ntrain.global_batch_size=8192\ntrain.micro_batch_size=1\n")
    res = checker.check(str(path), model="deepseek-v3", gpus=1024)
    f = next(f for f in res.findings if f.rule == "layers-pp")
    assert f.severity == "error" and f.line == 1 and "61 decoder layers" in f.message
    assert "model.pipeline_model_parallel_layout='Et|(tt|)*30mL'" in f.fix


def test_mcore_checks_as_findings(dsv3_clean, tmp_path):
    pytest.importorskip("megatron.core", reason="needs the mcore extra (CI installs it)")
    _, path = dsv3_clean
    assert not [f for f in checker.check(str(path), model="deepseek-v3", gpus=1024, run_mcore=True).findings
                if f.rule == "mcore"]
    bad = tmp_path / "bad_tp.overrides"
    bad.write_text("model.tensor_model_parallel_size=3\nmodel.seq_length=4096\ntrain.global_batch_size=64\n"
                   "model.expert_model_parallel_size=8\nmodel.expert_tensor_parallel_size=1\n")
    res = checker.check(str(bad), model="qwen3-30b-a3b", gpus=24, run_mcore=True)
    rules = {f.rule for f in res.findings}
    assert "mcore" in rules and "heads-tp" in rules and res.errors >= 2


def test_impossible_layout_exit_2(capsys):
    code = main(["estimate", "deepseek-v3", "--gpus", "100", "--tp", "8", "--seq-len", "4k", "--gbs", "100"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "TP x CP x PP" in err and err.count("\n") == 1


def test_model_inferred_from_architecture_in_the_file(tmp_path, capsys):
    path = tmp_path / "dsv3.args"
    path.write_text("--num-layers 61 --hidden-size 7168 --num-attention-heads 128 --num-experts 256 --moe-router-topk 8 "
                    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 "
                    "--pipeline-model-parallel-layout 'Et|(tt|)*30mL' --num-virtual-stages-per-pipeline-rank 4 "
                    "--expert-model-parallel-size 64 --expert-tensor-parallel-size 1 --sequence-parallel "
                    "--seq-length 4096 --global-batch-size 8192 --micro-batch-size 1 --mtp-num-layers 1\n")
    code, out, _ = _run(capsys, "check", str(path), "--gpus", "1024", "--json")
    data = json.loads(out)
    assert code in (0, 1) and data["model"] == "deepseek-v3"
    path.write_text("--num-layers 48 --hidden-size 2048 --seq-length 4096 --global-batch-size 64\n")
    code, out, err = _run(capsys, "check", str(path), "--gpus", "16")
    assert code == 2 and "pass --model" in err


@pytest.mark.parametrize("rank_capacity, warned", [("", True), ("--moe-expert-rank-capacity-factor 1.5 --moe-paged-stash", False)])
def test_full_iteration_graphs_with_dropless_moe_need_rank_buffers(tmp_path, rank_capacity, warned):
    """Megatron-Core 0.18+: a full-iteration graph captures dropless MoE only with fixed HybridEP rank
    buffers (moe_expert_rank_capacity_factor); without them the expert token counts change every step."""
    args = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --expert-model-parallel-size 8 "
            "--seq-length 4096 --global-batch-size 512 --micro-batch-size 4 --moe-token-dispatcher-type flex "
            "--moe-flex-dispatcher-backend hybridep --cuda-graph-impl full_iteration " + rank_capacity)
    path = tmp_path / "qwen3_30b.args"
    path.write_text(args)
    res = checker.check(str(path), model="qwen3-30b-a3b", gpu="gb200", gpus=8, mcore_version="0.19")
    assert res.config.rank_capacity_factor == (1.5 if rank_capacity else None)
    assert res.config.cuda_graph_scopes == frozenset({"full_iteration"})
    assert ("cuda-graphs-dropless" in {f.rule for f in res.findings}) is warned


def test_checking_a_plan_never_recommends_what_the_planner_rejects(tmp_path):
    """The linter holds its fixes to the planner's 10% headroom: for DeepSeek-V3 at 32K on 64 GB200 the
    planner needs full recompute and DP 1; selective recompute or DP 2 fit only in the last 10% of HBM,
    so check must not recommend them."""
    cfg = _best_cfg("deepseek-v3", "gb200", 64, 32768, 128)
    path = tmp_path / "dsv3.overrides"
    path.write_text("\n".join(export.to_overrides(cfg, "0.16")))
    res = checker.check(str(path), model="deepseek-v3", gpu="gb200", gpus=64)
    capacity_gib = res.gpu.hbm_bytes / 2**30
    assert res.errors == 0
    for f in res.findings:
        for key in ("alt_memory_gib", "fixed_memory_gib"):
            if key in f.numbers:
                assert f.numbers[key] <= 0.9 * capacity_gib + 0.05, f
        assert f.rule != "full-recompute" or not f.fix, f


def test_cp_guidance_findings_follow_the_estimates():
    """seq/4096 is where CP starts, not a verdict: a large shard is a warning (with the fix) only when
    the guidance's CP fits and is faster, or the run does not fit; otherwise it is information that cites
    the numbers, including why the guidance's CP is impossible (Gated DeltaNet CP needs 0.18)."""
    from moeplan.lint.rules import lint

    def cp_finding(model, **kw):
        cfg, gpu = api.build_config(model, **kw)
        found = [f for f in lint(cfg, gpu) if f.rule == "cp-too-small"]
        assert len(found) == 1
        return found[0]

    common = dict(gpu="gb200", gpus=256, seq_len=32768, gbs=256, tp=2, ep=64)
    kept = cp_finding("qwen3-next-80b-a3b", mcore_version="0.19", **common)  # CP 1: the planner's choice
    assert kept.severity == "info" and not kept.fix
    assert kept.numbers["alt_tokens_per_s"] < api.estimate("qwen3-next-80b-a3b", mcore_version="0.19", **common)["tokens_per_s_per_gpu"]
    old = cp_finding("qwen3-next-80b-a3b", mcore_version="0.16", **common)
    assert old.severity == "info" and "Gated DeltaNet" in old.message
    # DeepSeek-V3 at 128K with CP 2 does not fit on 1,024 H100; CP 32 does: a warning with the override
    over = cp_finding("deepseek-v3", gpu="h100", gpus=1024, seq_len=131072, gbs=64, tp=2, pp=16, cp=2, ep=32,
                      recompute="full", optimizer_offload=1.0)
    assert over.severity == "warning" and "model.context_parallel_size=32" in over.fix


def test_provenance_names_the_hardware_file_with_the_other_keys():
    """checker reads every '# moeplan:' key in one place (_from_provenance), the hardware file too."""
    from dataclasses import FrozenInstanceError
    from types import SimpleNamespace

    parsed = SimpleNamespace(env={}, provenance={"model": "qwen3-30b-a3b", "gpu": "mygpu", "gpus": "16",
                                         "mcore-version": "0.16", "te-version": "2.10",
                                         "NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM": "1",
                                         "hardware": "/abs/gpus.yaml"})
    prov = checker._from_provenance(parsed, "run.yaml")
    assert (prov.model, prov.gpu, prov.gpus, prov.mcore_version, prov.te_version, prov.grouped_tensor,
            prov.hardware) == ("qwen3-30b-a3b", "mygpu", 16, "0.16", "2.10", True, "/abs/gpus.yaml")
    empty = checker._from_provenance(SimpleNamespace(env={}, provenance={}), "run.yaml")
    assert (empty.hardware, empty.gpus, empty.grouped_tensor) == (None, None, False)
    with pytest.raises(FrozenInstanceError):
        prov.hardware = "/other.yaml"  # type: ignore[misc]


def test_megatron_rules_say_which_checks_moeplans_knobs_share():
    """McoreAssert.shares_knob marks the assertions moeplan.engine.knobs also makes (one finding per cause in check);
    checker asks each one's predicate whether the run's knob fails for its causes alone."""
    from moeplan.megatron.asserts import ASSERTS

    assert {a.id for a in ASSERTS if a.shares_knob is not None} == {"delay-wgrad-a2a-overlap", "delay-wgrad-graph-attn-bias",
                                                        "ep-a2a-overlap"}


def test_check_reports_a_shared_cause_once_by_the_rules_flag(tmp_path, monkeypatch):
    """A file asking for delay_wgrad_compute without EP overlap: Megatron's assertion, with the knob's fix, and
    no knob-layout finding, because the rule says moeplan.engine.knobs shares it; unflagged, both would report."""
    from dataclasses import replace

    from moeplan.megatron import asserts

    path = tmp_path / "run.yaml"
    path.write_text("model:\n  expert_model_parallel_size: 16\n  moe_token_dispatcher_type: alltoall\n"
                    "comm_overlap:\n  delay_wgrad_compute: true\n"
                    "train:\n  global_batch_size: 1024\n  micro_batch_size: 1\ndataset:\n  sequence_length: 4096\n")

    def rules() -> list:
        found = checker.check(str(path), model="qwen3-30b-a3b", gpu="h100", gpus=16).findings
        return [(f.rule, bool(f.fix)) for f in found if f.rule == "knob-layout" or "delay" in f.rule]

    assert rules() == [("mcore-delay-wgrad-a2a-overlap", True)]
    monkeypatch.setattr(asserts, "ASSERTS", tuple(replace(a, shares_knob=None) for a in asserts.ASSERTS))
    assert sorted(rules()) == [("knob-layout", True), ("mcore-delay-wgrad-a2a-overlap", False)]


def test_check_takes_the_reserve_and_imbalance_no_file_says(tmp_path, capsys):
    """check applies --reserve-gib / --moe-imbalance and a --calibration profile's fitted reserve, as estimate, plan
    and explain do (it estimated every file at the default 2 GiB reserve)."""
    run = tmp_path / "r.yaml"
    run.write_text(api.plan("qwen3-30b-a3b", gpus=16, seq_len=4096, gbs=1024, top=1)["plans"][0]["yaml"])
    base = checker.check(str(run)).estimate
    more = checker.check(str(run), reserve_gib=6.5, moe_imbalance=1.5).estimate
    assert base is not None and more is not None
    assert more.memory.as_gib()["reserve"] == pytest.approx(6.5) and base.memory.as_gib()["reserve"] == pytest.approx(2.0)
    assert more.config.moe_imbalance == 1.5
    profile = tmp_path / "p.yaml"
    profile.write_text("gpu: H100\nconstants: {}\nmemory: {reserve_gib: 6.5}\n")
    main(["check", str(run), "--calibration", str(profile), "--json"])  # exit 1: 4.5 GiB more than planned for
    out = json.loads(capsys.readouterr().out)
    assert out["estimate"]["memory_gib"]["reserve"] == pytest.approx(6.5)
    assert main(["check", str(run), "--calibration", str(profile), "--reserve-gib", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["estimate"]["memory_gib"]["reserve"] == pytest.approx(2.0)


def test_dispatcher_finding_names_the_files_dispatcher(tmp_path):
    """An allgather run's finding named alltoall (the text was written for alltoall only)."""
    cfg, _ = api.build_config("qwen3-30b-a3b", gpus=16, seq_len=4096, gbs=1024, ep=16, dispatcher="allgather")
    run = tmp_path / "ag.yaml"
    run.write_text(export.to_yaml(cfg))
    found = [f for f in checker.check(str(run)).findings if f.rule == "dispatcher"]
    assert len(found) == 1 and found[0].message.startswith("allgather with EP 16 across 2 NVLink domains")


def test_a_model_that_contradicts_the_files_architecture_is_a_finding(tmp_path, capsys):
    """--model deepseek-v3 on a file that trains Qwen3-30B-A3B's architecture was estimated silently."""
    cfg, _ = api.build_config("qwen3-30b-a3b", gpus=16, seq_len=4096, gbs=1024, ep=16)
    run = tmp_path / "q.yaml"
    run.write_text(export.to_yaml(cfg).replace("model:\n", "model:\n  num_layers: 48\n  hidden_size: 2048\n", 1))
    same = [f for f in checker.check(str(run), model="qwen3-30b-a3b", gpus=16).findings if f.rule == "model-mismatch"]
    other = [f for f in checker.check(str(run), model="deepseek-v3", gpus=16).findings if f.rule == "model-mismatch"]
    assert same == [] and len(other) == 1 and other[0].severity == "warning"
    assert other[0].numbers == {"num_layers": {"file": 48, "model": 61}, "hidden_size": {"file": 2048, "model": 7168}}
    assert "num_layers 48 in the file, 61 in deepseek-v3" in other[0].message
    text = run.read_text().splitlines()
    assert text[other[0].line - 1].strip() == "num_layers: 48"  # the first differing field's line (it had none)


def test_a_megatron_lm_files_model_mismatch_has_its_flags_line(tmp_path):
    cfg, _ = api.build_config("qwen3-30b-a3b", gpus=16, seq_len=4096, gbs=1024, ep=16)
    run = tmp_path / "q.sh"
    run.write_text(" \\\n".join(export.to_megatron_lm_args(cfg)) + " \\\n--hidden-size 2048\n")
    (found,) = [f for f in checker.check(str(run), model="deepseek-v3", gpus=16).findings if f.rule == "model-mismatch"]
    assert run.read_text().splitlines()[found.line - 1].startswith("--hidden-size 2048")


def test_a_megatron_lm_files_fixes_are_megatron_lm_arguments_that_work(tmp_path, capsys):
    """check offered only Megatron Bridge overrides for a Megatron-LM argument list; its fixes are now the file's
    own flags (export.overrides_to_megatron_lm), and appending a fix's flags clears its finding."""
    import shlex

    cfg, _ = api.build_config("qwen3-30b-a3b", gpus=16, seq_len=16384, gbs=256, ep=16)
    run = tmp_path / "m.txt"
    run.write_text(export.provenance_comment(cfg) + "\n" + shlex.join(export.to_megatron_lm_args(cfg)) + "\n")
    result = checker.check(str(run))
    fixed = next(f for f in result.findings if f.rule == "memory")
    lines = result.fix_lines(fixed)
    assert lines and all(line.startswith("--") for line in lines) and "--optimizer-cpu-offload" in lines
    assert result.as_dict()["findings"][0]["fix_megatron_lm"] == result.fix_lines(result.findings[0])
    run.write_text(run.read_text().rstrip("\n") + " " + " ".join(lines) + "\n")
    assert [f for f in checker.check(str(run)).findings if f.severity == "error"] == []
    assert main(["check", str(tmp_path / "m.txt")]) == 0
    assert "Fixes (Megatron-LM arguments" not in capsys.readouterr().out  # the fixed file has none left


def test_overrides_become_megatron_lm_flags_by_the_field_table():
    got = export.overrides_to_megatron_lm(["optimizer.optimizer_cpu_offload=true", "model.recompute_modules=[layernorm,moe]",
                                           "ddp.fsdp_double_buffer=false", "mixed_precision.grad_reduce_in_fp32=false",
                                           "model.num_layers=48"], "0.16")
    assert got == ["--optimizer-cpu-offload", "--recompute-modules layernorm moe", "# remove --fsdp-double-buffer",
                   "--grad-reduce-in-bf16",
                   "# model.num_layers=48  (no Megatron-LM flag in moeplan's field table: set it by hand)"]


@pytest.mark.parametrize("model,kw,target,first", [
    ("qwen3-30b-a3b", dict(gpus=16, ep=16, dispatcher="hybridep"), "0.15", "0.16"),
    ("qwen3-next-80b-a3b", dict(gpus=128, ep=16, cp=8, recompute="selective:layernorm,moe,gdn_norm_out"), "0.18", "0.19")])
def test_a_file_its_target_release_cannot_run_is_a_finding_not_unreadable(model, kw, target, first, tmp_path, capsys):
    """A readable file with a value its target release lacks (HybridEP before 0.16, gdn_norm_out before 0.19) exited
    2 (unreadable) from inside the linter's fix writer; now it is an error finding (exit 1) and the other checks
    run at the first release that can run it."""
    cfg, _ = api.build_config(model, seq_len=32768, gbs=256, mcore_version="0.19", **kw)
    run = tmp_path / "r.yaml"
    run.write_text(export.to_yaml(cfg))
    assert main(["check", str(run), "--mcore-version", target, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    (release,) = [f for f in out["findings"] if f["rule"] == "mcore-release"]
    assert release["numbers"] == {"target": target, "first_release": first}
    versions = [f for f in out["findings"] if f["rule"] == "mcore-version"]
    if versions:  # the values the target lacks are errors already: the release finding says what follows, on their line
        assert release["severity"] == "info" and release["line"] == versions[0]["line"] is not None
        assert f"assume Megatron-Core {first}, the first release that accepts the file's values" in release["message"]
    else:
        assert release["severity"] == "error"
        assert f"assume Megatron-Core {first}, the first release that can" in release["message"]
    assert out["estimate"] is not None


def test_the_release_finding_does_not_repeat_the_version_error(tmp_path):
    """A value the target lacks (gdn_norm_out before 0.19) was two errors, mcore-version on its line and
    mcore-release without one saying the same; now one error and an information finding on that line."""
    run = tmp_path / "r.yaml"
    run.write_text("model:\n  expert_model_parallel_size: 32\n  recompute_granularity: selective\n"
                   "  recompute_modules: [gdn_norm_out]\ntrain:\n  global_batch_size: 1024\n  micro_batch_size: 1\n"
                   "dataset:\n  sequence_length: 4096\n")
    result = checker.check(str(run), model="qwen3-next-80b-a3b", gpu="gb200", gpus=64, mcore_version="0.18")
    got = [(f.severity, f.rule, f.line) for f in result.findings if f.rule.startswith("mcore-")]
    assert got == [("error", "mcore-version", 4), ("info", "mcore-release", 4)]


def test_recompute_modules_without_a_granularity_is_a_warning(tmp_path):
    """Megatron-Core recomputes nothing then (the modules are read only with granularity 'selective')."""
    run = tmp_path / "r.yaml"
    run.write_text("model:\n  seq_length: 4096\n  expert_model_parallel_size: 16\n  recompute_modules: [core_attn]\n"
                   "train:\n  global_batch_size: 1024\n")
    result = checker.check(str(run), model="qwen3-30b-a3b", gpus=16)
    (found,) = [f for f in result.findings if f.rule == "recompute-modules-unused"]
    assert found.severity == "warning" and found.line == 4 and result.config.recompute.granularity == "none"
    run.write_text(run.read_text().replace("  recompute_modules", "  recompute_granularity: selective\n  recompute_modules"))
    assert not [f for f in checker.check(str(run), model="qwen3-30b-a3b", gpus=16).findings
                if f.rule == "recompute-modules-unused"]


def _apply_megatron_lm_fix(args: list[str], lines: list[str]) -> list[str]:
    """A user applying check's Megatron-LM fix lines: '# remove --flag' drops the flag and its values, any other
    line's flags replace the same flags in the script."""
    import shlex

    def drop(tokens: list[str], flag: str) -> list[str]:
        out, skip = [], False
        for tok in tokens:
            if tok.startswith("--"):
                skip = tok == flag
            if not skip:
                out.append(tok)
        return out

    for line in lines:
        if line.startswith("# remove "):
            args = drop(args, line.removeprefix("# remove "))
        elif not line.startswith("#"):
            tokens = shlex.split(line)
            args = drop(args, tokens[0]) + tokens
    return args


def test_megatron_lm_fixes_work_on_a_file_that_sets_recompute_by_recompute_activations(tmp_path):
    """A fix to full recompute said --recompute-granularity full, which --recompute-activations overrides in
    Megatron-LM (validate_args); the fix now removes it first, and applied, clears the finding (review)."""
    import shlex

    cfg, _ = api.build_config("qwen3-30b-a3b", gpus=16, seq_len=32768, gbs=64, ep=16)
    args = export.to_megatron_lm_args(cfg) + ["--recompute-activations"]
    run = tmp_path / "ra.txt"
    run.write_text(export.provenance_comment(cfg) + "\n" + shlex.join(args) + "\n")
    result = checker.check(str(run))
    memory = next(f for f in result.findings if f.rule == "memory")
    lines = result.fix_lines(memory)
    assert lines[0] == "# remove --recompute-activations" and "--recompute-granularity full" in lines
    run.write_text(export.provenance_comment(cfg) + "\n" + shlex.join(_apply_megatron_lm_fix(args, lines)) + "\n")
    after = checker.check(str(run))
    assert not [f for f in after.findings if f.severity == "error"], [f.rule for f in after.findings]
    assert after.config.recompute.granularity == "full"


def test_megatron_lm_fixes_say_remove_only_for_flags_the_file_has():
    lines = export.overrides_to_megatron_lm(["ddp.fsdp_double_buffer=false", "model.recompute_modules=null"], "0.16",
                                            {"recompute_modules": "--recompute-modules"})
    assert lines == ["# remove --recompute-modules"]
    # the opposite flag of a boolean goes too, else the file would hold both (review)
    lines = export.overrides_to_megatron_lm(["mixed_precision.grad_reduce_in_fp32=false"], "0.16",
                                            {"grad_reduce_in_fp32": "--accumulate-allreduce-grads-in-fp32"})
    assert lines == ["# remove --accumulate-allreduce-grads-in-fp32", "--grad-reduce-in-bf16"]


def test_megatron_lm_fixes_are_written_for_the_release_the_other_checks_ran_at(tmp_path):
    """With an mcore-release finding the fixes come from the first release that runs the file; they were
    translated with the target's field table, so 0.14+ flags read 'no Megatron-LM flag' on a 0.13 target."""
    import shlex

    cfg, _ = api.build_config("qwen3-30b-a3b", gpus=16, seq_len=32768, gbs=64, ep=16, dispatcher="hybridep")
    run = tmp_path / "q.txt"
    run.write_text(shlex.join(export.to_megatron_lm_args(cfg)) + "\n")
    result = checker.check(str(run), model="qwen3-30b-a3b", gpus=16, mcore_version="0.13")
    assert result.fix_version == "0.16" and any(f.rule == "mcore-release" for f in result.findings)
    lines = [line for f in result.findings if f.fix for line in result.fix_lines(f)]
    assert "--use-megatron-fsdp" in lines and not [line for line in lines if "no Megatron-LM flag" in line]


def test_a_combination_no_release_runs_is_a_finding_not_unreadable(tmp_path, capsys):
    """A token budget per rank with alltoall (Megatron needs HybridEP for it in every release) exited 2 from inside
    the linter's fix writer (review)."""
    run = tmp_path / "rc.yaml"
    run.write_text("model:\n  seq_length: 4096\n  expert_model_parallel_size: 16\n  moe_token_dispatcher_type: alltoall\n"
                   "  moe_expert_rank_capacity_factor: 1.5\ntrain:\n  global_batch_size: 1024\n")
    assert main(["check", str(run), "--model", "qwen3-30b-a3b", "--gpus", "16", "--mcore-version", "0.18", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [f["rule"] for f in out["findings"] if f["severity"] == "error"] == ["mcore-settings"]
    assert "needs the HybridEP dispatcher" in out["findings"][0]["message"]
    # at a target before 0.18 the reason is still the one no upgrade mends, not 'needs Megatron-Core >= 0.18'
    assert main(["check", str(run), "--model", "qwen3-30b-a3b", "--gpus", "16", "--json"]) == 1
    (message,) = [f["message"] for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "mcore-settings"]
    assert "needs the HybridEP dispatcher" in message and ">= 0.18" not in message


def test_recompute_modules_unused_speaks_the_files_language(tmp_path):
    run = tmp_path / "r.txt"
    run.write_text("--seq-length 4096 --global-batch-size 1024 --expert-model-parallel-size 16 "
                   "--recompute-modules core_attn\n")
    (found,) = [f for f in checker.check(str(run), model="qwen3-30b-a3b", gpus=16).findings
                if f.rule == "recompute-modules-unused"]
    assert found.message.startswith("--recompute-modules is set but --recompute-granularity is not")


def test_an_export_carries_the_imbalance_and_reserve_its_plan_assumed(tmp_path, capsys):
    """Exports dropped --moe-imbalance / --reserve-gib, so check of a plan made for 1.5x routing skew estimated it
    balanced (6,429 vs 5,816 tokens/s/GPU); the '# moeplan:' comment now says them and check takes them."""
    args = ["qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "32k", "--gbs", "64", "--moe-imbalance",
            "1.5", "--reserve-gib", "4"]
    assert main(["plan", *args, "--top", "1", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)[0]
    assert main(["plan", *args, "--format", "yaml"]) == 0
    text = capsys.readouterr().out
    assert "moe-imbalance=1.5 reserve-gib=4" in text.splitlines()[0]
    run = tmp_path / "r.yaml"
    run.write_text(text)
    main(["check", str(run), "--json"])
    est = json.loads(capsys.readouterr().out)["estimate"]
    assert est["tokens_per_s_per_gpu"] == pytest.approx(planned["tokens_per_s_per_gpu"], rel=1e-9)
    assert est["memory_gib"]["total"] == pytest.approx(planned["memory_gib"]["total"], rel=1e-9)
    main(["check", str(run), "--moe-imbalance", "1.0", "--json"])  # the flag still wins
    assert json.loads(capsys.readouterr().out)["estimate"]["tokens_per_s_per_gpu"] > planned["tokens_per_s_per_gpu"]


def test_a_bad_header_value_names_the_file_and_the_comment(tmp_path, capsys):
    run = tmp_path / "bad.yaml"
    run.write_text("# moeplan: model=qwen3-30b-a3b gpu=h100 gpus=16 mcore-version=0.16 reserve-gib=nan\nmodel:\n"
                   "  expert_model_parallel_size: 16\ntrain:\n  global_batch_size: 1024\ndataset:\n  sequence_length: 4096\n")
    assert main(["check", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run}: the '# moeplan:' comment: reserve" in err and err.count("\n") == 1
