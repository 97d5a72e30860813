"""``moeplan models``: the built-in model catalog."""

from __future__ import annotations

import argparse
from typing import Any

from moeplan.cli.output import Console, Table, print_json
from moeplan.cli.profile import named
from moeplan.cli.tables import compact_table, fmt_count, unbroken


def cmd_models(args: argparse.Namespace, console: Console) -> int:
    from moeplan.engine.listing import list_models  # not the whole API: start-up time

    rows = list_models()
    if args.json:
        print_json(named(rows, args))
        return 0
    def build(narrow: bool) -> Table:  # narrow: compact, without the HF model_type (`--json` has it)
        table = compact_table(title) if narrow else Table(title=title)
        for col in ("name", *(() if narrow else ("type",)), "arch", "layers", "experts", "top-k", "total", "active"):
            table.add_column(col, justify="right" if col in ("layers", "experts", "top-k", "total", "active") else "left",
                             no_wrap=col == "name")
        for r in rows:
            table.add_row(
                r["name"], *(() if narrow else (r["model_type"],)), r["architecture"], str(r["layers"]), str(r["experts"]),
                str(r["top_k"]), fmt_count(r["total_params"]), fmt_count(r["active_params"]),
            )
        return table

    title = "Built-in models (MODEL may also be a path to a config.json)"
    console.print(unbroken(console, build))
    return 0


def add_models_parser(sub: Any) -> None:
    """``moeplan models``: its parser."""
    p = sub.add_parser(
        "models", help="list the built-in model catalog",
        description="The built-in models: architecture (MLA, GQA-MoE, hybrid Gated DeltaNet), layers, routed "
        "experts and top-k, total and active parameters (B = 1e9). Any command's MODEL is one of these names or "
        "the path to a Hugging Face config.json.",
        epilog="examples:\n  moeplan models\n  moeplan models --json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_models)
