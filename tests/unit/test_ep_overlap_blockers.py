"""EP A2A overlap's rule has one owner, RunConfig.ep_overlap_blockers: the planner (ep_overlap_allowed), the knob
check (knobs.knob_problem, naming the actual causes) and the checker's split between Megatron's assertion and the
knob (the ep-a2a-overlap rule's McoreAssert.shares_knob predicate) read it. Megatron-Core asserts mtp_num_layers <= 1 with
overlap_moe_expert_parallel_comm in every release (core_v0.16/0.17 also PP > 1 with the MTP layer, lifted in 0.18):
the planner exported overlap with 2 MTP layers on 0.18, which check (and Megatron) reject."""

from __future__ import annotations

import pytest

from moeplan.lint import checker
from moeplan.cli import main
from moeplan.engine.knobs import knob_problem
from moeplan.megatron.asserts import ASSERTS, FileView, tripped
from moeplan.megatron.export import to_settings
from moeplan.models import load_model
from moeplan.models.spec import with_mtp_layers
from moeplan.run.parallel import Batch, Parallel
from moeplan.run.config import EP_OVERLAP_ASSERTED, EP_OVERLAP_BLOCKERS, Recompute, RunConfig


def _run(model: str = "qwen3-30b-a3b", *, mtp: int = 0, version: str = "0.16", gbs: int = 64, **sizes) -> RunConfig:
    spec = load_model(model)
    if mtp:
        spec = with_mtp_layers(spec, mtp)
    par = Parallel(gpus=16, **{"pp": 2, "vpp": 2, "ep": 8, **sizes})
    return RunConfig(spec, par, Batch(4096, gbs, 1), gpu="h100", mcore_version=version, dispatcher="alltoall",
                     ep_overlap=True)


# blocker -> a run whose only blocker it is
ONLY = {
    "release": lambda: _run(version="0.13"),
    "ep": lambda: _run(ep=1),
    "dispatcher": lambda: _run().with_(dispatcher="allgather"),  # plan --dispatcher allgather exported it on
    "microbatches": lambda: _run(gbs=8),  # DP 8, MBS 1: one micro-batch
    "pp": lambda: _run(vpp=1),
    "full_recompute": lambda: _run().with_(recompute=Recompute("full", frozenset(), "uniform", 1)),
    "moe_recompute": lambda: _run().with_(recompute=Recompute("selective", frozenset({"moe"}))),
    "mtp_layers": lambda: _run(mtp=2, version="0.18"),
    "mtp_pp": lambda: _run(mtp=1, pp=1, vpp=1),
    "gdn": lambda: _run("qwen3-next-80b-a3b"),
    "hybrid": lambda: _run("nemotron-3-nano-30b-a3b", version="0.19"),  # HybridModel has no build_schedule_plan
}


def test_every_blocker_has_a_case():
    assert set(ONLY) == set(EP_OVERLAP_BLOCKERS)


@pytest.mark.parametrize("key", sorted(ONLY))
def test_each_blocker_alone_and_where_megatrons_assertion_tests_it(key):
    """A run with one blocker: that blocker alone; Megatron's assertion (as the file linter reads the export)
    trips exactly for the blockers in EP_OVERLAP_ASSERTED, and its shares_knob predicate holds exactly for those."""
    cfg = ONLY[key]()
    assert cfg.ep_overlap_blockers == (EP_OVERLAP_BLOCKERS[key],)
    assert not cfg.ep_overlap_allowed
    asserted = EP_OVERLAP_BLOCKERS[key] in EP_OVERLAP_ASSERTED
    rule = next(a for a in ASSERTS if a.id == "ep-a2a-overlap")
    assert rule.shares_knob is not None and rule.shares_knob(cfg) is asserted
    if key == "release":  # no such field before 0.14: no export, no assertion
        assert not any(a.id == "ep-a2a-overlap" and a.applies("0.13") for a in ASSERTS)
    else:
        view = FileView(to_settings(cfg, cfg.mcore_version), {}, cfg.model, cfg.parallel.gpus, cfg.mcore_version)
        assert ("ep-a2a-overlap" in {rule.id for rule, _ in tripped(view)}) is asserted
    problem = knob_problem(cfg)
    assert problem is not None and problem.field == "overlap_moe_expert_parallel_comm"
    assert EP_OVERLAP_BLOCKERS[key] in problem.message
    assert not _run().ep_overlap_blockers and _run().ep_overlap_allowed  # the base has none


@pytest.mark.parametrize("version", ["0.14", "0.15", "0.16", "0.17", "0.18", "0.19"])
def test_two_mtp_layers_block_overlap_in_every_release(version):
    cfg = _run(mtp=2, version=version)
    assert not cfg.ep_overlap_allowed and EP_OVERLAP_BLOCKERS["mtp_layers"] in cfg.ep_overlap_blockers
    one = _run(mtp=1, version=version)  # one MTP layer with PP 2 VPP 2: fine everywhere
    assert one.ep_overlap_allowed, one.ep_overlap_blockers


def test_plan_with_two_mtp_layers_exports_what_check_accepts(capsys, tmp_path):
    """The reviewer's repro: plan exported EP A2A overlap with 2 MTP layers on 0.18, check gave 1 error (exit 1)."""
    assert main(["plan", "deepseek-v3", "--gpus", "1024", "--seq-len", "128k", "--gbs", "1024", "--mtp-layers", "2",
                 "--mcore-version", "0.18", "--format", "yaml"]) == 0
    text = capsys.readouterr().out
    assert "overlap_moe_expert_parallel_comm: true" not in text
    path = tmp_path / "m.yaml"
    path.write_text(text)
    assert main(["check", str(path), "--json"]) == 0
    capsys.readouterr()


def test_knob_problem_names_the_actual_blocker(capsys):
    """DeepSeek-V3 (one MTP layer) at PP 1 on 0.16: the refusal listed EP > 1, several micro-batches, PP 1 or VPP,
    ... (all of which hold) and never said that 0.16 needs PP > 1 with an MTP layer."""
    code = main(["estimate", "deepseek-v3", "--gpus", "1024", "--seq-len", "128k", "--gbs", "1024", "--tp", "2",
                 "--cp", "32", "--ep", "64", "--pp", "1", "--ep-overlap"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert EP_OVERLAP_BLOCKERS["mtp_pp"] in err
    assert "micro-batches" not in err and "full recompute" not in err
    assert main(["estimate", "deepseek-v3", "--gpus", "1024", "--seq-len", "128k", "--gbs", "1024", "--tp", "2",
                 "--cp", "32", "--ep", "64", "--pp", "1", "--ep-overlap", "--mcore-version", "0.18", "--json"]) == 0
    capsys.readouterr()


def test_check_of_mtp_layer_at_pp1_on_016_is_megatrons_assertion_with_its_fix(tmp_path):
    """core_v0.16/0.17 assert PP > 1 with an MTP layer under EP A2A overlap: the file linter says so (one finding,
    Megatron's, with the knob's fix); 0.18 lifts it."""
    path = tmp_path / "run.yaml"
    for version, hit in (("0.16", True), ("0.17", True), ("0.18", False)):
        path.write_text("model:\n  expert_model_parallel_size: 16\n  moe_token_dispatcher_type: alltoall\n"
                        "  mtp_num_layers: 1\ncomm_overlap:\n  overlap_moe_expert_parallel_comm: true\n"
                        "train:\n  global_batch_size: 1024\n  micro_batch_size: 1\n"
                        "dataset:\n  sequence_length: 4096\n")
        result = checker.check(str(path), model="qwen3-30b-a3b", gpu="h100", gpus=16, mcore_version=version)
        found = [f for f in result.findings if f.rule in ("knob-layout", "mcore-ep-a2a-overlap")]
        if not hit:
            assert not found, version
            continue
        assert [(f.rule, f.severity) for f in found] == [("mcore-ep-a2a-overlap", "error")], version
        assert "MTP layer" in found[0].message and found[0].line
        assert found[0].fix[0] == "++comm_overlap.overlap_moe_expert_parallel_comm=false"
