"""Every knob with a vocabulary carries it in its type (a ``Literal`` of moeplan.base, or ``Literal | None``), so
:attr:`moeplan.run.knobs.Knob.values` holds it and the CLI flag's choices are derived from it, never typed beside it
(optimizer, moe_router_dtype, muon_tp_mode and te_quant_map were ``str``: no values, hand-typed choices).
Megatron-FSDP's words have one owner, the knob table (the knob ``fsdp``: 'off' and the strategies; a search adds
'auto', :func:`moeplan.run.knobs.fsdp_choices`), read by the CLI, the API and the MCP tools alike; 'none' and '' are
no words of it at any edge."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.base.errors import MoeplanError
from moeplan.base.router_dtype import ROUTER_DTYPES
from moeplan.base.vocab import FSDP_STRATEGIES, MUON_TP_MODES, OPTIMIZERS, TE_QUANT_MAP_NAMES, TE_QUANT_MAPS
from moeplan.cli import main as cli_main
from moeplan.run import knobs as knob_module
from moeplan.run.knobs import flag_kwargs, fsdp_choices, knob_named, knob_table

RUN = dict(gpus=8, seq_len=4096, gbs=64, ep=8)


@pytest.mark.parametrize("name, vocabulary", [("optimizer", OPTIMIZERS), ("moe_router_dtype", ROUTER_DTYPES),
                                              ("muon_tp_mode", MUON_TP_MODES), ("te_quant_map", TE_QUANT_MAP_NAMES),
                                              ("fsdp", FSDP_STRATEGIES)])
def test_the_knob_carries_its_vocabulary(name, vocabulary):
    k = knob_named(name)
    assert k.values == tuple(vocabulary)
    assert set(k.choices) >= set(vocabulary)


def test_te_quant_map_names_are_the_maps():
    assert set(TE_QUANT_MAP_NAMES) == set(TE_QUANT_MAPS)


def test_no_flag_types_its_choices_by_hand():
    """A flag's choices come from the knob (flag_kwargs), never from its metadata."""
    for k in knob_table():
        if k.flag is not None:
            assert "choices" not in k.flag, k.name
            if k.choices and k.flag.get("action") not in ("store_true", "store_false"):
                assert flag_kwargs(k)["choices"] == list(k.choices), k.name


def test_str_knobs_without_vocabulary_are_only_free_text():
    """The knobs typed plain ``str``: versions (checked against the release tables), nothing with a word list."""
    plain = {k.name for k in knob_table() if k.kind.rstrip("?") == "str" and not k.values and k.name != "recompute"}
    assert plain == {"mcore_version", "te_version"}


def test_the_api_refuses_a_word_outside_the_vocabulary():
    for name, bad in (("muon_tp_mode", "distributed"), ("te_quant_map", "nemotron4"), ("moe_router_dtype", "bf16")):
        with pytest.raises(MoeplanError, match=name):
            api.build_config("qwen3-30b-a3b", **RUN, **{name: bad})


# ---- Megatron-FSDP's words


def test_fsdp_words_have_one_owner():
    assert fsdp_choices() == knob_named("fsdp").choices == ("off", *FSDP_STRATEGIES)
    assert fsdp_choices(search=True) == ("auto", "off", *FSDP_STRATEGIES)


def _choices(argv: list[str]) -> list[str]:
    """The --fsdp choices of a command's parser (read from its error for a bad word)."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
        cli_main(argv + ["--fsdp", "nonsense"])
    return err.getvalue()


@pytest.mark.parametrize("command, search", [(["estimate", "qwen3-30b-a3b", "--gpus", "8", "--seq-len", "4096",
                                                "--gbs", "64"], False),
                                              (["plan", "qwen3-30b-a3b", "--gpus", "8", "--seq-len", "4096",
                                                "--gbs", "64"], True),
                                              (["sweep", "qwen3-30b-a3b", "--gpus", "8", "--seq-lens", "4096",
                                                "--gbs-tokens", "262144"], True)])
def test_the_cli_takes_the_owners_words(command, search):
    text = _choices(command)
    want = ", ".join(f"'{w}'" for w in fsdp_choices(search=search))
    assert want in text, text


@pytest.mark.parametrize("word", ["none", ""])
def test_none_and_empty_are_refused_at_the_api_as_at_the_cli(word):
    """'none' / '' are no word of fsdp: the API refuses them (one line naming the words), as the CLI's choices and the
    MCP schemas do; 'off' (or None, the keyword left out) is the distributed optimizer."""
    with pytest.raises(MoeplanError, match="fsdp .* unknown; choose one of auto, off, no_shard"):
        api.search_plans("qwen3-30b-a3b", gpus=8, seq_len=4096, gbs=64, fsdp=word)
    with pytest.raises(MoeplanError, match="fsdp .* unknown; choose one of off, no_shard"):
        api.build_config("qwen3-30b-a3b", **RUN, fsdp=word)
    assert api.build_config("qwen3-30b-a3b", **RUN, fsdp="off")[0].fsdp is None
    assert api.build_config("qwen3-30b-a3b", **RUN)[0].fsdp is None




@pytest.mark.parametrize("module", ["moeplan.cli.args", "moeplan.assistant.mcp_server", "moeplan.api"])
def test_no_edge_spells_fsdps_words(module):
    """Before: ``["auto", "off", *FSDP_STRATEGIES]`` typed twice in cli/args.py, the MCP Fsdp / FsdpSearch types and
    search_plans' check each wrote the list (and build_config took 'none' and '' too)."""
    import importlib.util
    from pathlib import Path

    text = Path(importlib.util.find_spec(module).origin).read_text(encoding="utf-8")  # no import: the MCP SDK is optional
    assert "FSDP_STRATEGIES" not in text and '"none")' not in text


def test_a_strategy_file_writes_fsdp_off_unquoted():
    """YAML 1.1 reads an unquoted `off` as false; the strategy file's fsdp takes it as the knob's word 'off' (the
    distributed optimizer), as it does quoted and null; another boolean stays refused."""
    from moeplan.run.strategy import parse_strategy

    head = "batch: {seq_len: 4096, gbs: 64}\nlayout: {ep: 8}\n"
    for text in ("optimizer: {fsdp: off}\n", "optimizer: {fsdp: 'off'}\n"):
        kw = parse_strategy(head + text)
        assert kw["fsdp"] == "off"
        assert api.build_config("qwen3-30b-a3b", gpus=8, **kw)[0].fsdp is None
    with pytest.raises(MoeplanError, match="expected a string"):
        parse_strategy(head + "optimizer: {fsdp: on}\n")
