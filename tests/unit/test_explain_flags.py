"""explain of run files refuses every flag of its parser but those it reads (moeplan.cli.explain._FILES_READ): the
flags a run file says itself are read from the parser (_explain_flags), not listed by hand beside it (before,
_EXPLAIN_FILE_DECIDES), so a flag the sweep's arguments gain is refused beside run files, never silently ignored;
explain MODEL gives each of them the sweep's default (before, a second hand list, _EXPLAIN_MODEL_DEFAULTS)."""

from __future__ import annotations

import argparse

import pytest

from moeplan.cli import build_parser, main
from moeplan.cli import explain as cli_explain

FILES = ["explain", "a.yaml", "b.yaml", "--model", "qwen3-30b-a3b"]


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]


def _value(flag: str) -> list[str]:
    """``flag`` of explain's parser with a value argparse takes (none for a switch)."""
    action = next(a for a in _subparser("explain")._actions if flag in a.option_strings)
    if action.nargs == 0:
        return [flag]
    return [flag, str(list(action.choices)[-1]) if action.choices else "1"]


@pytest.mark.parametrize("dest", sorted(cli_explain._explain_flags()[0]))
def test_explain_of_run_files_refuses_each_flag_a_file_says(dest, capsys):
    flag = cli_explain._explain_flags()[0][dest]
    assert main([*FILES, *_value(flag)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"moeplan: error: {flag}: explain CONFIG reads this from the run files")
    assert err.count("\n") == 1


def test_every_flag_of_explain_is_read_with_run_files_or_refused():
    decided = cli_explain._explain_flags()[0]
    dests = {a.dest for a in _subparser("explain")._actions
             if a.option_strings and a.help != argparse.SUPPRESS and a.dest != "help"}
    assert dests == set(decided) | (cli_explain._FILES_READ - {"inputs"})
    assert not set(decided) & cli_explain._FILES_READ
    # the flags the hand list named, every one still refused
    assert {"gbs_tokens", "hold", "tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "recompute", "dispatcher",
            "optimizer_offload", "cp_comm_type", "fsdp", "fsdp_double_buffer", "mtp_layers", "precision",
            "fp8_attention", "bf16_grads", "bf16_moments", "optimizer"} <= set(decided)


def test_a_flag_the_sweep_gains_is_refused_beside_run_files(monkeypatch, capsys):
    real = cli_explain.sweep_arguments

    def more(p: argparse.ArgumentParser, **kw) -> None:
        real(p, **kw)
        p.add_argument("--probe-depth", type=int, default=3)

    monkeypatch.setattr(cli_explain, "sweep_arguments", more)
    cli_explain._explain_flags.cache_clear()
    try:
        assert cli_explain._explain_flags()[1]["probe_depth"] == 3  # explain MODEL's default: the sweep's
        assert main([*FILES, "--probe-depth", "4"]) == 2
        said = capsys.readouterr().err.strip()
        assert said == ("moeplan: error: --probe-depth: explain CONFIG reads this from the run files; edit the "
                        "files, or compare a model at two lengths with `moeplan explain MODEL --seq-len A,B`")
    finally:
        monkeypatch.undo()
        cli_explain._explain_flags.cache_clear()


def test_explain_model_takes_the_sweeps_defaults():
    """explain MODEL fills each flag it was not given with the sweep's default: the arguments a sweep of the same
    flags parses to (but explain's own inputs and switches)."""
    tail = ["--gpus", "8", "--seq-len", "4k,8k", "--gbs-tokens", "256k", "--ep", "8", "--recompute", "full"]
    swept = vars(build_parser().parse_args(["sweep", "qwen3-30b-a3b", *tail]))
    explained = vars(cli_explain._model_arguments(build_parser().parse_args(["explain", "qwen3-30b-a3b", *tail])))
    shared = set(swept) & set(explained) - {"handler", "command", "model"}  # explain: the run files' model
    assert {k: explained[k] for k in shared} == {k: swept[k] for k in shared}
    assert explained["recompute"] == "full" and explained["gpu"] == swept["gpu"] and explained["fsdp"] == "auto"
