"""``moeplan sweep``: plan (or hold a layout) across sequence lengths."""

from __future__ import annotations

import argparse
from typing import Any

from moeplan.base.vocab import RESOLVED_GAIN
from moeplan.cli.args import held_layout, sweep_arguments, sweep_kwargs
from moeplan.cli.output import (Console, LazyConsole, Table, api, check_output, distinct_outputs, escape, print_json,
                                wrote)
from moeplan.cli.plan import SearchProgress, routing_said
from moeplan.cli.profile import named
from moeplan.cli.tables import make_table, num_column, text_column, unbroken, wrapping


def _sweep_table(rows: list[dict[str, Any]], narrow: bool) -> Table:
    from moeplan.report import no_plan_reason, plan_layout_label

    table = make_table("Sequence-length sweep", narrow)
    for col in ("seq", "GBS"):
        num_column(table, col)
    text_column(table, "layout", min_width=13 if narrow else None)
    text_column(table, "recompute", ratio=1 if narrow else None)
    if not narrow:
        text_column(table, "dispatcher")
    for col in (("GiB", "fits", "TFLOP/s", "tok/s") if narrow
                else ("GiB/GPU", "fits", "TFLOP/s/GPU", "TFLOP/s range", "tokens/s/GPU")):
        num_column(table, col)
    for r in rows:
        if "parallel" not in r:
            cells = [escape(no_plan_reason(r)), "", *([""] if not narrow else []), "", "[red]no", "",
                     *([""] if not narrow else []), ""]
            table.add_row(f"{r['seq_len']:,}", str(r["gbs"]), *cells)
            continue
        cells = [plan_layout_label(r),
                 escape(wrapping(r["recompute"]))]
        if not narrow:
            cells.append(r["dispatcher"])
        lo, hi = r["tflops_range"]
        cells += [f"{r['memory_gib']['total']:.1f}", "[green]yes" if r["fits"] else "[red]no",
                  f"{r['tflops_per_gpu']:,.0f}", *([] if narrow else [f"{lo:,.0f}-{hi:,.0f}"]),
                  f"{r['tokens_per_s_per_gpu']:,.0f}"]
        table.add_row(f"{r['seq_len']:,}", str(r["gbs"]), *cells)
    return table


def print_sweep(rows: list[dict[str, Any]], console: Console) -> None:
    said = routing_said(rows[0]) if rows else ""  # one question: every row assumes the same routing
    if said:
        console.print(f"Assumes {said.removeprefix('; ')}", highlight=False, markup=False)
    console.print(unbroken(console, lambda narrow: _sweep_table(rows, narrow)))
    for r in rows:  # a newer Megatron-Core release that plans faster at a length (plan 1's rationale says it)
        newer = next((x["numbers"] for x in ((r.get("plan") or {}).get("rationale") or ())
                      if x["topic"] == "mcore_version"), None)
        if newer and newer.get("gain") is not None and newer["gain"] > RESOLVED_GAIN:
            console.print(f"[yellow]note:[/] seq {r['seq_len']:,}: {escape(newer['sentence'])}", highlight=False)
    first = next((r for r in rows if r.get("outside_fit_note")), None)
    if first is not None:  # the model's, so every length's: said once, with the first length's band
        console.print(f"[yellow]note:[/] seq {first['seq_len']:,}: {escape(first['outside_fit_note'])}", highlight=False)


def cmd_sweep(args: argparse.Namespace, console: Console) -> int:
    distinct_outputs(args, plot=args.plot)
    check_output(args.plot)
    progress = SearchProgress(LazyConsole(stderr=True), not args.json, "sweeping")
    try:
        rows = api.sweep(args.model, seq_lens=args.seq_len, gbs_tokens=args.gbs_tokens, hold=held_layout(args),
                         progress=progress, **sweep_kwargs(args))
    finally:
        progress.stop()
    fitting = [r for r in rows if "parallel" in r]
    if args.plot and fitting:  # written first: an error leaves nothing printed
        from moeplan.plots.sweep import write_sweep_plot

        write_sweep_plot(fitting, args.plot, [r for r in rows if "parallel" not in r])
    if args.json:
        print_json(named(rows, args))
    else:
        print_sweep(rows, console)
    if args.plot and fitting:
        wrote(args.plot, args.json, f"throughput and memory at {len(fitting)} lengths" if len(fitting) == len(rows)
               else f"throughput and memory at {len(fitting)} of {len(rows)} lengths, the others marked")
    elif args.plot:
        Console(stderr=True, width=10_000).print(f"moeplan: no length fits; {args.plot} not written",
                                                 highlight=False, markup=False)
    missing = len(rows) - len(fitting)
    if missing:  # exit 1, said on stderr as every "no answer" is (the rows say why)
        Console(stderr=True, width=10_000).print(f"moeplan: {missing} of {len(rows)} lengths have no plan",
                                                 highlight=False, markup=False)
    return 1 if missing else 0


def add_sweep_parser(sub: Any) -> None:
    """``moeplan sweep``: its parser."""
    p = sub.add_parser(
        "sweep", help="plan (or hold a layout) across sequence lengths",
        description="Plan each sequence length (or, with --hold or layout flags, estimate one layout at each) "
        "with a constant number of tokens per global batch; table, JSON and a throughput/memory plot.",
        epilog="example: moeplan sweep qwen3-235b-a22b --gpu gb200 --gpus 256 --seq-len 16k,32k,64k,128k "
        "--gbs-tokens 4m --plot sweep.png. A length where nothing fits, or no layout is valid, gets a row saying "
        "why (JSON: its 'closest' or 'invalid'; both null on a row with a plan), and exit code 1 with one line "
        "on stderr ('N of M lengths have no plan'); exit 2 when no length is valid, or when --gbs-tokens is not a "
        "whole number of sequences at some length (an argument error for the whole sweep).")
    p.add_argument("model", metavar="MODEL", help="catalog name or path to config.json")
    sweep_arguments(p)
    p.add_argument("--plot", metavar="FILE", help="write throughput and memory vs sequence length (PNG or SVG)")
    p.add_argument("--json", action="store_true", help="print JSON rows")
    p.set_defaults(handler=cmd_sweep)
