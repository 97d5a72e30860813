"""The API's keyword arguments (moeplan.api): each knob's by its API keyword (the knob table, moeplan.run.knobs) and
the checks of their types, by the knob's kind, or by name where a knob shares its name with a switch of
:func:`moeplan.api.search_plans` (cuda_graphs, optimizer_offload: there a bool) or is a number RunConfig compares.
Bad input is one line (MoeplanError), as the CLI prints it; a keyword that is no knob a TypeError, as Python's."""

from __future__ import annotations

from typing import Any

from moeplan.base import argcheck
from moeplan.base.errors import MoeplanError
from moeplan.run.knobs import knob_table


def csv_set(text: str | list[str] | frozenset[str] | None, allowed: tuple[str, ...], what: str) -> frozenset[str]:
    if text is None:
        return frozenset()
    items = [t.strip() for t in (text.replace("+", ",").split(",") if isinstance(text, str) else text) if t.strip()]
    if items in (["none"], ["off"]):
        return frozenset()
    bad = [i for i in items if i not in allowed]
    if bad:
        raise MoeplanError(f"{what} {', '.join(bad)} unknown; choose from {', '.join(allowed)}")
    return frozenset(items)


def knob_keywords(function: str, given: dict[str, Any], record: type) -> dict[str, Any]:
    """Every knob's API keyword (moeplan.run.knobs: the knob fields of ``record``, RunConfig) with its value:
    ``given``, else the API's default. A keyword that is no knob is refused as Python refuses it (TypeError)."""
    table = knob_table(record)
    known = {k.api for k in table}
    for name in given:
        if name not in known:
            raise TypeError(f"{function}() got an unexpected keyword argument '{name}'")
    return {k.api: given.get(k.api, k.api_default) for k in table}


def check_knobs(kw: dict[str, Any], record: type) -> None:
    """The types of the knob keywords in ``kw`` (knobs of ``record``, RunConfig) by their kind
    (moeplan.run.knobs.Knob.kind): integers, numbers and flags (each optional one None too), but the numbers
    :func:`moeplan.api.build_config` checks by name (:data:`CHECKED_APART`); words and lists are build_config's to
    check."""
    table = [k for k in knob_table(record) if k.api in kw and k.api not in CHECKED_APART]
    argcheck.counts(**{k.api: kw[k.api] for k in table
                       if k.kind == "int" or (k.kind == "int?" and kw[k.api] is not None)})
    for k in table:
        if k.kind == "float?":
            argcheck.optional_number(k.api, kw[k.api])
        elif k.kind == "float":
            argcheck.number(k.api, kw[k.api])
    argcheck.flags(**{k.api: kw[k.api] for k in table if k.kind == "bool"})
    argcheck.flags(optional=True, **{k.api: kw[k.api] for k in table if k.kind == "bool?"})


def check_choices(kw: dict[str, Any], record: type) -> None:
    """Each knob keyword in ``kw`` (knobs of ``record``, RunConfig) with a vocabulary: one of the knob's choices
    (moeplan.run.knobs.Knob.choices: its Literal type's values and the API's words, 'auto', resolved by
    :func:`moeplan.api.build_config`), which the CLI's flags and the MCP tools take too; an optional knob may be
    None. The one rule of build_config and :func:`moeplan.api.search_plans`."""
    for k in knob_table(record):
        if k.api in kw and k.choices and not (k.optional and kw[k.api] is None):
            argcheck.choice(k.api, kw[k.api], k.choices)


# The numbers check_knobs leaves to build_config's check by name (check_run_knobs, which runs first): optimizer_offload
# with a hint that search_plans' switch of that name is a bool, moe_imbalance and reserve_gib with their ranges
# (argcheck.imbalance_and_reserve). The other knobs build_config checks apart are of no kind check_knobs checks (words:
# their vocabularies, the knob table's choices, and mcore_version, normalize_version; recompute: its own parse; the
# lists cuda_graphs and offload_modules: check_run_knobs).
CHECKED_APART = frozenset({"optimizer_offload", "moe_imbalance", "reserve_gib"})


def check_run_knobs(cuda_graphs: Any, offload_modules: Any, optimizer_offload: Any, moe_imbalance: Any,
                    reserve_gib: Any) -> None:
    """The types of :func:`moeplan.api.build_config`'s knobs that share a name with :func:`moeplan.api.search_plans`'
    switches (there a bool) or that RunConfig compares as numbers; RunConfig checks their ranges and vocabularies."""
    argcheck.words("cuda_graphs", cuda_graphs, hint=" (CUDA graph scopes such as 'attn,moe_router'; plan's "
                   "cuda_graphs is the bool that lets the search try them)")
    argcheck.words("offload_modules", offload_modules, hint=" (activation offload modules such as 'core_attn')")
    argcheck.number("optimizer_offload", optimizer_offload, hint=" (the fraction of optimizer state offloaded, in "
                    "[0, 1]; plan's optimizer_offload is the bool that lets the search try it)")
    argcheck.imbalance_and_reserve(moe_imbalance, reserve_gib)


def check_search_args(cuda_graphs: Any, optimizer_offload: Any, headroom: Any, moe_imbalance: Any,
                      reserve_gib: Any) -> None:
    """:func:`moeplan.api.search_plans`' switches and numbers: cuda_graphs and optimizer_offload are whether the
    search tries them (bools), where :func:`moeplan.api.build_config` takes the scopes and the fraction."""
    argcheck.flag("cuda_graphs", cuda_graphs, hint=" (whether the search tries CUDA graphs; estimate's cuda_graphs "
                  "takes scopes such as 'attn,moe_router')")
    argcheck.flag("optimizer_offload", optimizer_offload, hint=" (whether the search tries optimizer CPU offload; "
                  "estimate's optimizer_offload takes the fraction)")
    argcheck.headroom(headroom)
    argcheck.imbalance_and_reserve(moe_imbalance, reserve_gib)
