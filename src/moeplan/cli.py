"""Command-line front end: a thin layer over the API (argparse + rich, ``--json`` everywhere).

Every input error is a :class:`moeplan.errors.MoeplanError`: one line on stderr, exit code 2, no
traceback, nothing written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from moeplan import api
from moeplan.errors import MoeplanError

Handler = Callable[[argparse.Namespace, Console], int]


def parse_tokens(text: str) -> int:
    """'128k' -> 131072, '4096' -> 4096, '1m' -> 1048576 (powers of two, as sequence lengths are)."""
    t = str(text).strip().lower()
    scale = 1
    if t.endswith("k"):
        scale, t = 1024, t[:-1]
    elif t.endswith("m"):
        scale, t = 1024 * 1024, t[:-1]
    try:
        value = int(float(t) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a token count: '{text}' (use e.g. 4096, 32k, 128k)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: '{text}'")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: '{text}'") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: '{text}'")
    return value


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def _fmt_count(n: float) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


# --------------------------------------------------------------------------- models / params


def cmd_models(args: argparse.Namespace, console: Console) -> int:
    rows = api.list_models()
    if args.json:
        _print_json(rows)
        return 0
    table = Table(title="Built-in models (MODEL may also be a path to a config.json)")
    for col in ("name", "type", "arch", "layers", "experts", "top-k", "total", "active"):
        table.add_column(col, justify="right" if col in ("layers", "experts", "top-k", "total", "active") else "left")
    for r in rows:
        table.add_row(
            r["name"], r["model_type"], r["architecture"], str(r["layers"]), str(r["experts"]),
            str(r["top_k"]), _fmt_count(r["total_params"]), _fmt_count(r["active_params"]),
        )
    console.print(table)
    return 0


def cmd_params(args: argparse.Namespace, console: Console) -> int:
    report = api.params_report(args.model, seq_len=args.seq_len, tp=args.tp)
    if args.json:
        _print_json(report)
        return 0
    table = Table(title=f"{report['model']}: parameters")
    table.add_column("component")
    table.add_column("total", justify="right")
    table.add_column("active / token", justify="right")
    for key, value in report["breakdown"].items():
        table.add_row(key, f"{value:,}", f"{report['active_breakdown'][key]:,}")
    table.add_row("[b]all (main model)", f"[b]{report['main_params']:,}", f"[b]{report['active_params']:,}")
    if report["mtp_params"]:
        table.add_row("all incl. MTP", f"{report['total_params']:,}", "")
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


# --------------------------------------------------------------------------- parser


EPILOG = """\
examples:
  moeplan models
  moeplan params deepseek-v3 --seq-len 128k
  moeplan params ./my-model/config.json --json

MODEL is a built-in catalog name (see `moeplan models`) or a path to a Hugging Face config.json.
Every command takes --json for scripts; bad input exits with code 2 and a one-line message.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moeplan",
        description="Plan, check and explain long-context MoE training runs on Megatron Bridge / Megatron-Core.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("models", help="list the built-in model catalog")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_models)

    p = sub.add_parser(
        "params",
        help="parameter counts and training FLOPs per token",
        description="Total and active parameters with their breakdown, and the training FLOPs per token "
        "that Megatron-Core counts for its TFLOP/s/GPU (GEMMs vs causal attention).",
    )
    p.add_argument("model", metavar="MODEL", help="catalog name or path to config.json")
    p.add_argument("--seq-len", type=parse_tokens, default=4096, help="sequence length, e.g. 4096 or 128k (default 4096)")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor parallel size (pads the vocabulary; default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=cmd_params)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console()
    err = Console(stderr=True)
    try:
        return int(args.handler(args, console))
    except MoeplanError as exc:
        err.print(f"moeplan: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
