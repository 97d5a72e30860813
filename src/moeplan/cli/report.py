"""``moeplan report``: one self-contained HTML page."""

from __future__ import annotations

import argparse
from typing import Any

from moeplan.cli.args import add_run_arguments, bounded_int, fsdp_search_argument, parse_lengths, sweep_kwargs
from moeplan.cli.output import (Console, LazyConsole, api, check_output, distinct_outputs, print_json, schedule_refused,
                                wrote)
from moeplan.cli.plan import SearchProgress, no_fit, routing_said
from moeplan.cli.profile import named


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    from moeplan import report

    distinct_outputs(args, html=args.html)
    check_output(args.html, plot=False)
    progress = SearchProgress(LazyConsole(stderr=True), not args.json, "planning")
    try:
        found = api.search_plans(args.model, seq_len=args.seq_len, gbs=args.gbs, top=args.top, progress=progress,
                                 **sweep_kwargs(args))
        result = found.as_dict()
        plans = result["plans"]
        if not plans:
            return no_fit(result, args.json)
        best = plans[0]
        assert found.best is not None
        est = found.best.estimate.as_dict()  # the plan carries its config and estimate
        tl = None if schedule_refused(found.best.config) else api.timeline(found.best.config, found.best.gpu, args.cal)
        rows = None
        if args.sweep:
            # the same run settings as the report's plans (numerics, imbalance, reserve, versions); a length with
            # no plan is a row saying why, even where no length has a valid layout (the plans answer the question)
            api.check_gbs_tokens(args.sweep, args.gbs * args.seq_len, "the token budget (--gbs x --seq-len)")
            # the report's own length is not searched again: its plans are that length's search (planned)
            rows = api.sweep(args.model, seq_lens=args.sweep, gbs_tokens=args.gbs * args.seq_len, progress=progress,
                             all_invalid_raises=False, planned=found, **sweep_kwargs(args))
    finally:
        progress.stop()
    title = (f"{result['model']} on {args.gpus} x {result['gpu']}, seq {args.seq_len:,}, GBS {result['gbs']}"
             + routing_said(result, hint=False))
    if args.profile is not None:
        title += f" ({args.profile.describe()})"
    report.write_html_report(args.html, title=title, plans=plans, estimate=est, sweep=rows,
                             overrides=best["overrides"], rationale=[f"{r['topic']}: {r['text']}" for r in best["rationale"]],
                             ranks=est["memory_ranks_gib"], timeline=tl, notes=result["notes"])
    if args.json:  # what the page shows, as plan and sweep print it
        print_json(named({"html": str(args.html), "plans": plans, "sweep": rows, "notes": result["notes"]}, args))
    missing = sum("parallel" not in r for r in rows or ())
    sweep = (f", sweep of {len(rows)} length{'s' * (len(rows) != 1)}" + (f", {missing} without a plan" if missing else "")
             if rows else "")
    wrote(args.html, args.json, f"{len(plans)} plans{sweep}")
    return 0


def add_report_parser(sub: Any) -> None:
    """``moeplan report``: its parser."""
    p = sub.add_parser(
        "report", help="one self-contained HTML page: plan, overrides, breakdowns, rationale",
        description="Plan, then write an HTML report with the plans, the best plan's memory and time breakdowns "
        "(plots embedded), its Megatron Bridge overrides and rationale, and optionally a sequence-length sweep.",
        epilog="example: moeplan report deepseek-v3 --gpu h100 --gpus 1024 --seq-len 128k --gbs 1024 --html plan.html")
    add_run_arguments(p, layout=False)
    p.add_argument("--top", type=bounded_int("top"), default=5, help="plans in the table (default 5)")
    fsdp_search_argument(p)
    p.add_argument("--sweep", type=parse_lengths, help="also sweep these lengths, e.g. 32k,64k,128k")
    p.add_argument("--html", required=True, metavar="FILE", help="output HTML file")
    p.add_argument("--json", action="store_true", help="print what the page shows as JSON: the plans (as plan --json "
                   "prints them), the sweep rows (as sweep --json) and the search's notes, with the file written")
    p.set_defaults(handler=cmd_report)
