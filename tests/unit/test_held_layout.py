"""The layout sweep --hold and explain MODEL hold across lengths takes its knobs from the knob table: the ``layout``
slot's, the knobs estimate's flags set for one run's layout (moeplan.cli.args.held_knobs), but fsdp, whose sweep
flag is the search's word. Before, held_layout and sweep's parser held four knobs by hand (recompute, dispatcher,
optimizer_offload, cp_comm_type), so a held layout could not say EP overlap, CUDA graphs, activation offload,
capacity factors or the router dtype. explain, whose parser has the sweep's flags, refuses each beside run files
(moeplan.cli.explain._explain_flags) and holds them for a MODEL as the sweep does."""

from __future__ import annotations

import argparse

from moeplan import api
from moeplan.cli import build_parser, main
from moeplan.cli import explain as cli_explain
from moeplan.cli.args import HELD_SIZES, held_knobs, held_layout, slot_knobs
from moeplan.run import knobs as knob_module
from moeplan.run.knobs import RunKnobs, flag_names
from tests.knob_probe import probe_record

SWEEP = ["sweep", "qwen3-30b-a3b", "--gpus", "8", "--seq-len", "4k,8k", "--gbs-tokens", "256k"]


def _parsed(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_the_held_knobs_are_the_layout_slots_but_fsdp():
    assert [k.api for k in held_knobs()] == [k.api for k in slot_knobs("layout") if k.api != "fsdp"]
    assert {"recompute", "dispatcher", "optimizer_offload", "cp_comm_type", "ep_overlap", "cuda_graphs",
            "offload_modules", "moe_router_dtype"} <= {k.api for k in held_knobs()}


def test_a_held_layout_carries_every_held_knob_with_its_default():
    held = held_layout(_parsed(*SWEEP, "--ep", "8"))
    assert held == {"ep": 8, **{k.api: k.api_default for k in held_knobs()}}
    assert held_layout(_parsed(*SWEEP)) is None  # nothing held: each length planned
    assert set(held_layout(_parsed(*SWEEP, "--hold"))) == {k.api for k in held_knobs()}


def test_a_held_knob_flag_reaches_each_lengths_estimate(monkeypatch, capsys):
    seen: list[dict] = []
    real = api.estimate_run

    def spy(model, **kw):
        seen.append(kw)
        return real(model, **kw)

    monkeypatch.setattr(api, "estimate_run", spy)
    code = main([*SWEEP, "--hold", "--ep", "8", "--ep-overlap", "--cuda-graphs", "attn", "--moe-router-dtype",
                 "fp32", "--json"])
    capsys.readouterr()
    assert code == 0 and len(seen) == 2
    assert all(kw["ep_overlap"] is True and kw["cuda_graphs"] == "attn" and kw["moe_router_dtype"] == "fp32"
               and kw["ep"] == 8 for kw in seen)


def test_a_knob_the_table_gives_a_layout_flag_is_held_and_refused_beside_run_files(monkeypatch, capsys):
    """A probe knob table whose muon_ns_steps (no flag) has one in the layout slot: sweep takes it into the held
    layout and explain of run files refuses it, without an edit of either."""
    probe = probe_record(RunKnobs, "_ProbeKnobs", {"muon_ns_steps": {"flag": {"slot": "layout", "type": int}}})
    monkeypatch.setattr(knob_module, "RunKnobs", probe)
    knob_module._hints.cache_clear()
    cli_explain._explain_flags.cache_clear()
    try:
        assert held_layout(_parsed(*SWEEP, "--hold", "--muon-ns-steps", "7"))["muon_ns_steps"] == 7
        assert main(["explain", "a.yaml", "b.yaml", "--model", "qwen3-30b-a3b", "--muon-ns-steps", "7"]) == 2
        said = capsys.readouterr().err.strip()
        assert said == ("moeplan: error: --muon-ns-steps: explain CONFIG reads this from the run files; edit the "
                        "files, or compare a model at two lengths with `moeplan explain MODEL --seq-len A,B`")
    finally:
        monkeypatch.undo()
        knob_module._hints.cache_clear()
        cli_explain._explain_flags.cache_clear()


def test_explain_refuses_the_held_knobs_and_reads_what_it_says_it_reads():
    decided = cli_explain._explain_flags()[0]
    assert {flag_names(k)[0] for k in held_knobs()} <= set(decided.values())
    assert {*HELD_SIZES, "hold", "gbs_tokens", "fsdp", "fsdp_double_buffer"} <= set(decided)
    assert not set(decided) & cli_explain._FILES_READ


def test_explain_model_holds_the_layout_sweep_holds():
    """explain MODEL fills the flags it was not given with the sweep's defaults: the same held layout."""
    tail = ["--gpus", "8", "--seq-len", "4k,8k", "--gbs-tokens", "256k", "--ep", "8", "--ep-overlap"]
    swept = _parsed("sweep", "qwen3-30b-a3b", *tail)
    explained = _parsed("explain", "qwen3-30b-a3b", *tail)
    assert held_layout(cli_explain._model_arguments(explained)) == held_layout(swept)
    assert held_layout(swept)["ep_overlap"] is True
