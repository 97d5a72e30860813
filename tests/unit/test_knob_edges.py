"""Every edge of moeplan takes the same values for a knob: the knob table's choices (moeplan.run.knobs: the field's
Literal vocabulary and the words the API resolves). The CLI flags (estimate's layout, sweep's held layout), the
Python API, the MCP tools and the strategy file agree; ``cp_comm_type="auto"`` (the planner's choice) was taken by
the API alone, the CLI and the MCP schemas refused it."""

from __future__ import annotations

import argparse
import json

import pytest

from moeplan import api
from moeplan.base.errors import MoeplanError
from moeplan.base.vocab import CP_COMM_TYPES, DEFAULT_MCORE_VERSION
from moeplan.cli import build_parser, main
from moeplan.run.knobs import knob_named, knob_table
from moeplan.run.strategy import parse_strategy

M = "qwen3-30b-a3b"
EST = dict(gpu="h100", gpus=16, seq_len=4096, gbs=1024, ep=8, cp=2)
CHOICE_KNOBS = [k for k in knob_table() if k.choices]
FLAG_CHOICE_KNOBS = [k for k in CHOICE_KNOBS if k.flag is not None]  # te_quant_map, muon_tp_mode: API / file only


def _choices(parser: argparse.ArgumentParser, command: str, flag: str) -> list[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return list(next(a for a in sub._actions if flag in a.option_strings).choices)


def test_the_knob_table_names_auto_for_cp_comm_type():
    assert knob_named("cp_comm_type").choices == ("auto", *CP_COMM_TYPES)
    assert knob_named("cp_comm_type").api_default == "p2p"  # the default is unchanged: auto is asked for


@pytest.mark.parametrize("k", FLAG_CHOICE_KNOBS, ids=lambda k: k.api)
def test_cli_flags_take_the_knob_tables_choices(k):
    parser = build_parser()
    flag = "--" + k.api.replace("_", "-")
    assert _choices(parser, "estimate", flag) == list(k.choices)
    if k.api in ("cp_comm_type", "dispatcher"):  # the held layout of sweep / explain MODEL
        assert _choices(parser, "sweep", flag) == list(k.choices)
        assert _choices(parser, "explain", flag) == list(k.choices)
    if k.api == "dispatcher":  # the pinned dispatcher of a search
        assert _choices(parser, "plan", flag) == list(k.choices)


def test_cli_estimate_takes_cp_comm_type_auto(capsys):
    code = main(["estimate", M, "--gpu", "h100", "--gpus", "16", "--seq-len", "4096", "--gbs", "1024", "--ep", "8",
                 "--cp", "2", "--cp-comm-type", "auto", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["cp_comm_type"] == api.estimate(M, **EST, cp_comm_type="auto")["cp_comm_type"]
    assert out["cp_comm_type"] in CP_COMM_TYPES


def test_cli_sweep_holds_cp_comm_type_auto(capsys):
    code = main(["sweep", M, "--gpu", "h100", "--gpus", "16", "--seq-len", "4k,8k", "--gbs-tokens", "4m", "--hold",
                 "--ep", "8", "--cp", "2", "--cp-comm-type", "auto", "--json"])
    rows = json.loads(capsys.readouterr().out)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert code == 0 and all(r["invalid"] is None and r["cp_comm_type"] in CP_COMM_TYPES for r in rows), rows


@pytest.mark.parametrize("k", CHOICE_KNOBS, ids=lambda k: k.api)
def test_api_takes_every_choice_and_nothing_else(k):
    """Each choice gets past the vocabulary check (an answer, or a refusal of that value for this run, never
    'unknown'); a word outside the choices is refused naming them all."""
    run = {**EST, "gpu": "b200"}  # every precision's tensor cores
    for value in k.choices:
        try:
            got = getattr(api.build_config(M, **run, **{k.api: value})[0], k.name)
            assert got in k.choices or (k.optional and got is None), (value, got)  # fsdp 'off': None
        except MoeplanError as exc:
            assert "unknown" not in str(exc), (value, str(exc))
    with pytest.raises(MoeplanError) as exc:
        api.build_config(M, **run, **{k.api: "bogus"})
    assert k.api in str(exc.value) and all(c in str(exc.value) for c in k.choices)


def test_strategy_file_takes_cp_comm_type_auto():
    kw = parse_strategy("batch: {seq_len: 4096, gbs: 1024}\nlayout: {ep: 8, cp: 2}\n"
                        "communication: {cp_comm_type: auto}\n")
    cfg, _ = api.build_config(M, gpu="h100", gpus=16, **kw)
    assert kw["cp_comm_type"] == "auto" and cfg.cp_comm_type in CP_COMM_TYPES


# the edges: the CLI command modules, the MCP server, the web page
EDGE_MODULES = ("moeplan.cli.args", "moeplan.cli.plan", "moeplan.cli.estimate", "moeplan.cli.sweep",
                "moeplan.cli.explain", "moeplan.assistant.mcp_server", "moeplan.web.app")


@pytest.mark.parametrize("module", EDGE_MODULES)
def test_edges_read_dispatchers_and_cp_types_from_the_knob_table(module):
    """No edge spells the dispatcher or CP-communication choices itself (before: ``("auto", *DISPATCHERS)`` in the
    plan and sweep flags, the MCP schema and the page's select and its check, ``CP_COMM_TYPES`` in sweep's flag and
    the MCP schema): each reads the knob's choices, so a word the API takes is one every edge takes."""
    import importlib
    import inspect

    pytest.importorskip("mcp") if module.endswith("mcp_server") else None
    pytest.importorskip("starlette") if module.startswith("moeplan.web") else None
    source = inspect.getsource(importlib.import_module(module))
    for name in ("DISPATCHERS", "CP_COMM_TYPES"):
        assert name not in source.replace("FLEX_DISPATCHERS", ""), (module, name)


def test_web_selects_are_the_knob_tables():
    pytest.importorskip("starlette")
    from moeplan.web.app import catalogs

    got = catalogs()
    assert tuple(got["dispatchers"]) == knob_named("dispatcher").choices
    assert tuple(got["precisions"]) == knob_named("precision").choices


def test_explain_model_defaults_are_the_knob_tables():
    """explain MODEL fills the flags it was not given with the sweep's defaults (cli.explain._explain_flags), which
    are the other commands' defaults: every knob flag among them reads as the knob table's API default."""
    from moeplan.base.vocab import DEFAULT_GPU
    from moeplan.cli.args import slot_knobs
    from moeplan.cli.explain import _explain_flags
    from moeplan.run.knobs import FSDP_SEARCH, flag_dest, flag_value

    defaults = _explain_flags()[1]
    knobs = [k for slot in ("layout", "gpu", "cluster", "fsdp") for k in slot_knobs(slot)
             if flag_dest(k) in defaults and k.api != "fsdp"]
    assert {k.api: flag_value(k, defaults[flag_dest(k)]) for k in knobs} == {k.api: k.api_default for k in knobs}
    # the defaults the other commands show in --help (estimate's and plan's), and the held layout's knobs
    assert {"mcore_version", "precision", "optimizer", "optimizer_offload", "cp_comm_type", "recompute",
            "dispatcher", "grad_fp32"} <= {k.api for k in knobs}
    assert defaults["mcore_version"] == DEFAULT_MCORE_VERSION and defaults["precision"] == "bf16"
    assert defaults["gpu"] == DEFAULT_GPU and defaults["fsdp"] == FSDP_SEARCH  # fsdp: the search's word


def test_recompute_help_names_every_module_and_method():
    """--recompute's help lists the vocabulary's modules and methods (before: typed by hand, without mhc)."""
    from moeplan.base.vocab import RECOMPUTE_METHODS, RECOMPUTE_MODULES

    text = knob_named("recompute").flag["help"]
    assert all(m in text for m in (*RECOMPUTE_MODULES, *RECOMPUTE_METHODS)), text


def test_explain_of_run_files_refuses_every_knob_the_files_say(capsys, tmp_path):
    """explain CONFIG reads the knobs from the files; a command knob's flag beside them (but the releases and the
    grouped-tensor switch, which the files' comment or the flag give) is refused in one line, not silently ignored
    (--fp8-attention was)."""
    from pathlib import Path

    run = Path(__file__).resolve().parents[1] / "data" / "deepseek_v3_128k_256_h100.yaml"
    assert main(["explain", str(run), "--model", "deepseek-v3", "--seq-len", "64k", "--fp8-attention"]) == 2
    err = capsys.readouterr().err
    assert "--fp8-attention: explain CONFIG reads this from the run files" in err and err.count("\n") == 1
