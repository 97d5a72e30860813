"""``moeplan estimate``: memory and throughput of one layout."""

from __future__ import annotations

import argparse
from typing import Any

from moeplan.cli.args import TRACE_HELP, add_run_arguments, strategy_kwargs
from moeplan.cli.output import (Console, Table, api, check_output, check_trace, distinct_outputs, escape, print_json,
                                schedule_refused, trace_note, write_trace, wrote)
from moeplan.cli.plan import routing_said
from moeplan.cli.profile import named


def print_estimate(est: dict[str, Any], console: Console, routing_hint: bool = True) -> None:
    """The estimate's tables; its first line says the run and the routing assumed (``routing_hint``: name --routing
    natural after force-balanced routing, where the command takes the flag)."""
    par = est["parallel"]
    head = (f"{est['model']} on {est['gpus']} x {est['gpu']} | seq {est['seq_len']:,} GBS {est['gbs']} MBS {est['mbs']} "
            f"({est['microbatches']} micro-batches) | TP{par['tp']} PP{par['pp']} VPP{par['vpp']} CP{par['cp']} "
            f"EP{par['ep']} ETP{par['etp']} DP{par['dp']} EDP{par['edp']} | {est['precision']}"
            + (" + FP8 attention" if est.get("fp8_attention") else "") + ", "
            + f"recompute {est['recompute']}, {est['dispatcher']}"
            + ((" + EP overlap" + ("" if est.get("delay_wgrad") else " (wgrad not delayed)")) if est.get("ep_overlap")
               else "")
            + (f", Megatron-FSDP {est['fsdp']}" if est.get("fsdp") else "")
            + (", Muon" if est.get("optimizer") == "muon" else "") + routing_said(est, routing_hint))
    console.print(head, highlight=False, markup=False)
    mem = Table(title=f"Memory per GPU (pipeline rank {est['memory_rank']}, the most loaded)")
    mem.add_column("item")
    mem.add_column("GiB", justify="right")
    for key, value in est["memory_gib"].items():
        if key == "total":
            continue
        mem.add_row(key, f"{value:,.2f}")
    verdict = {"fits": "[green]fits",  # the budget's rule (moeplan.engine.budget), as plan and check apply it
               "edge": f"[yellow]fits at the edge: over the {est['budget_gib']:,.1f} GiB budget, inside the memory "
                       "model's error"}.get(est["memory_verdict"],
                                           f"[red]does not fit: {-est['headroom_gib']:,.1f} GiB over")
    mem.add_row("[b]total", f"[b]{est['memory_gib']['total']:,.2f}")
    mem.add_row(f"capacity ({verdict}[/])", f"{est['capacity_gib']:,.2f}")
    if est["host_peak_gib"]:
        host_over = est["host_peak_gib"] - est["host_capacity_gib"]
        mem.add_row("host memory (offload)", f"{est['host_peak_gib']:,.2f}")
        mem.add_row("host capacity (" + ("[green]fits" if host_over <= 0 else f"[red]does not fit: {host_over:,.1f} GiB "
                    "over") + "[/])", f"{est['host_capacity_gib']:,.2f}")
    console.print(mem)
    tt = Table(title="Time per step")
    tt.add_column("item")
    tt.add_column("seconds", justify="right")
    tt.add_column("share", justify="right")
    step = est["step_time_s"]
    for key, value in sorted(est["time_breakdown_s"].items(), key=lambda kv: -kv[1]):
        if value > 0:
            tt.add_row(key, f"{value:,.3f}", f"{value / step:.1%}")
    tt.add_row("[b]step", f"[b]{step:,.3f}", "")
    console.print(tt)
    console.print(
        f"TFLOP/s per GPU [b]{est['tflops_per_gpu']:,.0f}[/]   MFU (vs {est['mfu_peak'].upper()} peak) [b]{est['mfu']:.1%}[/]   "
        f"tokens/s per GPU [b]{est['tokens_per_s_per_gpu']:,.0f}[/]   (FLOPs/token {est['flops_per_token'] / 1e9:,.1f} G, "
        "Megatron-Core convention)", highlight=False)
    if est.get("outside_fit_note"):
        console.print(f"[yellow]note:[/] {escape(est['outside_fit_note'])}", highlight=False)
    for hint in est.get("hints", ()):
        console.print(f"[yellow]hint:[/] {escape(hint['text'])}", highlight=False)


def cmd_estimate(args: argparse.Namespace, console: Console) -> int:
    distinct_outputs(args, plot=args.plot, trace=args.trace)
    check_output(args.plot)
    check_trace(args.trace)
    kwargs = strategy_kwargs(args)
    estimate = api.estimate_run(args.model, **kwargs)
    est = api.estimate_dict(estimate, args.cal)  # with the routing it assumed
    est["hints"] = [h.as_dict() for h in api.estimate_hints(estimate, kwargs, args.cal)]
    tl = None
    if args.trace or (args.plot and not schedule_refused(estimate.config)):
        tl = api.timeline(estimate.config, estimate.gpu, args.cal)  # --trace: a schedule Megatron-Core refuses is an error
    if args.plot:  # written first: an error leaves nothing printed
        from moeplan import plots

        plots.write_estimate_plot(est, args.plot, ranks=est["memory_ranks_gib"], timeline=tl)
    if args.trace:
        write_trace(args.trace, tl)
    if args.json:
        print_json(named(est, args))
    else:
        print_estimate(est, console)
    if args.plot:
        wrote(args.plot, args.json, "memory and time breakdown" + (", timeline" if tl is not None else ""))
    if args.trace:
        wrote(args.trace, args.json, trace_note(tl))
    return 0


def add_estimate_parser(sub: Any) -> None:
    """``moeplan estimate``: its parser."""
    p = sub.add_parser(
        "estimate",
        help="memory and throughput of one layout",
        description="Per-GPU memory item by item (most loaded pipeline rank) and step time, TFLOP/s per GPU, "
        "MFU and tokens/s with the time broken down, for one parallel layout and set of knobs.",
        epilog="example: moeplan estimate deepseek-v3 --gpu h100 --gpus 1024 --seq-len 128k --gbs 1024 --tp 2 --pp 8 "
        "--vpp 4 --cp 32 --ep 64 --recompute selective:layernorm,mla_up_proj,moe_act --dispatcher deepep --ep-overlap "
        "--cp-comm-type a2a+p2p",
    )
    add_run_arguments(p)
    p.add_argument("--strategy", metavar="FILE.yaml",
                   help="take layout, batch and knobs from a strategy file (`moeplan plan --save-strategy`); flags "
                        "that differ from their defaults override it")
    p.add_argument("--plot", metavar="FILE",
                   help="write the memory and time breakdown, the timeline of one iteration (Gantt per pipeline "
                        "rank) and the most loaded rank's memory over it, as PNG or SVG (a long pipeline's Gantt "
                        "is drawn over time bins, its warm-up and cool-down operation by operation)")
    p.add_argument("--trace", metavar="FILE.json", help=TRACE_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=cmd_estimate)
