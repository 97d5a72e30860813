"""``moeplan params``: parameter counts and training FLOPs per token."""

from __future__ import annotations

import argparse
from typing import Any

from moeplan.cli.args import parse_tokens, positive_int
from moeplan.cli.output import Console, Table, api, print_json


def cmd_params(args: argparse.Namespace, console: Console) -> int:
    report = api.params_report(args.model, seq_len=args.seq_len, tp=args.tp)
    if args.json:
        print_json(report)
        return 0
    table = Table(title=f"{report['model']}: parameters")
    table.add_column("component")
    table.add_column("total", justify="right")
    table.add_column("active / token", justify="right")
    for key, value in report["breakdown"].items():
        table.add_row(key, f"{value:,}", f"{report['active_breakdown'][key]:,}")
    table.add_row("[b]all (main model)", f"[b]{report['total_params']:,}", f"[b]{report['active_params']:,}")
    if report["mtp_params"]:
        table.add_row("all incl. MTP", f"{report['total_params_with_mtp']:,}", "")
    console.print(table)
    f = report["flops"]
    ft = Table(title=f"Training FLOPs per token at seq {args.seq_len:,} (Megatron-Core convention: fwd+bwd = 3x fwd GEMMs, causal attention)")
    ft.add_column("term")
    ft.add_column("GFLOPs / token", justify="right")
    ft.add_column("share", justify="right")
    total = report["flops_per_token"]
    for key in ("gemm_flops", "attention_flops", "linear_attention_flops"):
        ft.add_row(key, f"{f[key] / 1e9:,.2f}", f"{f[key] / total:.1%}")
    ft.add_row("[b]total", f"[b]{total / 1e9:,.2f}", "100%")
    console.print(ft)
    return 0


def add_params_parser(sub: Any) -> None:
    """``moeplan params``: its parser."""
    p = sub.add_parser(
        "params",
        help="parameter counts and training FLOPs per token",
        description="Total and active parameters with their breakdown, and the training FLOPs per token "
        "that Megatron-Core counts for its TFLOP/s/GPU (GEMMs vs causal attention).",
        epilog="examples:\n  moeplan params deepseek-v3 --seq-len 128k\n  moeplan params ./my-model/config.json --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL", help="catalog name or path to config.json")
    p.add_argument("--seq-len", type=parse_tokens, default=4096, help="sequence length, e.g. 4096 or 128k (default 4096)")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor parallel size (pads the vocabulary; default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=cmd_params)
