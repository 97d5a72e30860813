"""``moeplan plan``: search every layout and knob, rank by throughput."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from moeplan.base.errors import MoeplanError
from moeplan.base.routing import routing_words
from moeplan.base.vocab import DEFAULT_HEADROOM, LAUNCH_FORMATS, REFINE_MIN
from moeplan.run.knobs import knob_named
from moeplan.cli.args import (TRACE_HELP, add_run_arguments, bounded_int, fixed, fsdp_search_argument, positive_int,
                              sweep_kwargs)
from moeplan.cli.output import (Console, LazyConsole, Table, api, check_output, check_trace, distinct_outputs, escape,
                                print_json, strategy_text, trace_note, write_bytes, write_stdout, write_trace, wrote)
from moeplan.cli.profile import named
from moeplan.cli.tables import knobs_text, make_table, num_column, print_overrides, text_column, unbroken, wrapping


class SearchProgress:
    """A rich progress bar on a terminal; nothing when piped or with --json."""

    def __init__(self, console: Console, enabled: bool, label: str) -> None:
        self.enabled = enabled and console.is_terminal
        self.console = console
        self.label = label
        self._bar: Any = None
        self._task: Any = None

    def start(self, total: int) -> None:
        if not self.enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        if self._bar is None:
            console = self.console.real() if isinstance(self.console, LazyConsole) else self.console
            self._bar = Progress(TextColumn(self.label), BarColumn(), MofNCompleteColumn(), console=console,
                                 transient=True)
            self._bar.start()
        self._task = self._bar.add_task(self.label, total=total)

    def advance(self) -> None:
        if self._bar is not None:
            self._bar.advance(self._task)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _plans_table(result: dict[str, Any], narrow: bool) -> Table:
    table = make_table("Plans, fastest first (n= tie: bands overlap)", narrow)
    num_column(table, "#")
    text_column(table, "layout", min_width=13 if narrow else None)
    if narrow:
        text_column(table, "recompute", ratio=1)
        text_column(table, "knobs", ratio=1)
        for col in ("GiB", "TFLOP/s", "tok/s"):
            num_column(table, col)
    else:
        num_column(table, "MBS")
        text_column(table, "recompute")
        for col in ("dispatcher", "CP comm", "graphs"):
            text_column(table, col)
        for col in ("offload", "GiB/GPU", "TFLOP/s/GPU", "TFLOP/s range", "MFU vs BF16", "tokens/s/GPU"):
            num_column(table, col)
    from moeplan.report import plan_layout_label

    for p in result["plans"]:
        layout = plan_layout_label(p)
        lo, hi = p["tflops_range"]
        numbers = [f"{p['memory_gib']['total']:.1f}", f"{p['tflops_per_gpu']:,.0f}",
                   *([] if narrow else [f"{lo:,.0f}-{hi:,.0f}", f"{p['mfu']:.1%}"]), f"{p['tokens_per_s_per_gpu']:,.0f}"]
        rank = f"{p['rank']}{'=' if p['tie'] else ''}"
        recompute = escape(wrapping(p["recompute"]))
        if narrow:
            table.add_row(rank, layout, recompute, escape(knobs_text(p)), *numbers)
        else:
            table.add_row(rank, layout, str(p["mbs"]), recompute,
                          p["dispatcher"] + (" +ovl" if p["ep_overlap"] else ""),
                          p["cp_comm_type"] if p["parallel"]["cp"] > 1 else "-", ", ".join(p["cuda_graphs"]) or "-",
                          f"{p['optimizer_offload']:.0%}", *numbers)
    return table


def routing_said(answer: dict[str, Any], hint: bool = True) -> str:
    """The routing an answer assumes (its ``routing`` and ``moe_imbalance``), for a header: '; ' and the words of
    moeplan.base.routing.routing_words (nothing for a model without experts); ``hint``: force-balanced routing
    names the flag for natural routing."""
    words = routing_words(answer)
    if not words:
        return ""
    return "; " + words + (" (--routing natural for the router's own)" if hint and answer["routing"] == "forced" else "")


def print_plans(result: dict[str, Any], console: Console) -> None:
    console.print(f"{result['model']} on {result['gpus']} x {result['gpu']}, seq {result['seq_len']:,}, "
                  f"GBS {result['gbs']}, {result['precision']}: {result['layouts_feasible']} of "
                  f"{result['layouts_considered']} layouts fit (headroom {result['headroom']:.0%} of HBM)"
                  + routing_said(result), highlight=False)
    for note in result["notes"]:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    table = unbroken(console, lambda narrow: _plans_table(result, narrow))
    console.print(table)
    if result["plans"]:
        best = result["plans"][0]
        console.print("[b]Why plan 1[/]")
        for r in best["rationale"]:
            console.print(f" - [b]{r['topic']}[/]: {escape(r['text'])}", highlight=False)
        print_overrides(best["overrides"], console, "Megatron Bridge overrides (plan 1)")
        if best.get("env"):
            console.print("[b]Environment of the job[/] (no Megatron-Core field selects it)")
            for name, value in best["env"].items():
                console.print(f"{name}={value}", highlight=False, markup=False, soft_wrap=True)


def no_fit(result: dict[str, Any], as_json: bool) -> int:
    """Nothing fits: one line on stderr naming the closest run (api.PlanReport.closest_dict), what it needs and
    by how much it misses the budget (moeplan.report.no_fit_sentence, the page's line too); exit 1 (a valid
    question whose answer is "no"; bad input is exit 2)."""
    from moeplan.report import no_fit_sentence

    msg = no_fit_sentence(result)
    if as_json:
        print_json({"plans": [], "closest": result.get("closest"), "message": msg})
    Console(stderr=True, width=10_000).print(f"moeplan: {msg}", highlight=False, markup=False)
    return 1


def cmd_plan(args: argparse.Namespace, console: Console) -> int:
    if args.json and args.format != "table":
        raise MoeplanError(f"--json and --format {args.format} exclude each other: --json already carries each plan's "
                           "'overrides', 'yaml' and 'megatron_lm_args'")
    distinct_outputs(args, trace=args.trace, save_strategy=args.save_strategy)
    run_settings = sweep_kwargs(args)
    if args.format in LAUNCH_FORMATS:  # before the search: a wrong version costs no search
        from moeplan.megatron import launch

        launch.check_version(run_settings["mcore_version"])
    check_trace(args.trace)
    check_output(args.save_strategy, plot=False)
    progress = SearchProgress(LazyConsole(stderr=True), not args.json, "searching layouts")
    t0 = time.perf_counter()
    try:
        found = api.search_plans(
            args.model, seq_len=args.seq_len, gbs=args.gbs, top=args.top, headroom=args.headroom, fixed=fixed(args),
            cuda_graphs=not args.no_cuda_graphs, optimizer_offload=not args.no_offload,
            allow_gbs_reduction=not args.keep_gbs, progress=progress if progress.enabled else None,  # no call per layout
            **run_settings,
        )
    finally:
        progress.stop()
    result = found.as_dict()
    if args.stats:
        sys.stderr.write(f"search: {result['layouts_considered']} layouts considered, {result['layouts_evaluated']} "
                         f"fully evaluated, {result['layouts_feasible']} fit; {time.perf_counter() - t0:.3f} s\n")
    plans = result["plans"]
    if not plans:
        if args.json:
            print_json([])
        return no_fit(result, False)
    if args.save_strategy:
        assert found.best is not None
        write_bytes(args.save_strategy, strategy_text(found.best.config).encode())
        wrote(args.save_strategy, args.json or args.format != "table", "the best plan's strategy")
    fmt = args.format
    tl = None
    if args.trace:  # plan 1, written before anything is printed
        assert found.best is not None
        tl = api.timeline(found.best.config, found.best.gpu, args.cal)
        write_trace(args.trace, tl)
    if args.json:
        print_json(named(plans, args))
    elif fmt == "overrides":
        write_stdout("\n".join([plans[0]["provenance"], *plans[0]["overrides"]]) + "\n")
    elif fmt == "yaml":
        write_stdout(plans[0]["yaml"])
    elif fmt in LAUNCH_FORMATS:
        from moeplan.megatron import launch

        assert found.best is not None
        write_stdout(launch.launch_command(found.best.config, fmt))
    elif fmt == "megatron-lm":
        import shlex

        write_stdout(plans[0]["provenance"] + "\n" + " ".join(shlex.quote(a) for a in plans[0]["megatron_lm_args"]) + "\n")
    else:
        print_plans(result, console)
    if tl is not None:  # on stderr when stdout carries JSON, overrides, YAML or flags
        wrote(args.trace, args.json or fmt != "table", "plan 1, " + trace_note(tl))
    return 0


def add_plan_parser(sub: Any) -> None:
    """``moeplan plan``: its parser."""
    p = sub.add_parser(
        "plan",
        help="search every layout and knob, rank by throughput (the main job)",
        description="Search TP, PP, VPP, CP, EP, MBS, recompute, dispatcher, CP communication, EP overlap, CUDA "
        "graphs and optimizer offload; keep what fits in HBM with headroom; rank by tokens/s per GPU; explain "
        "each choice with numbers; export Megatron Bridge overrides, YAML or Megatron-LM flags.",
        epilog="examples:\n  moeplan plan deepseek-v3 --gpu h100 --gpus 1024 --seq-len 128k --gbs 1024\n"
        "  moeplan plan qwen3-235b-a22b --gpu gb200 --gpus 256 --seq-len 128k --gbs 256 --format overrides\n"
        "  moeplan plan qwen3-next-80b-a3b --gpus 128 --seq-len 64k --gbs 256 --cp 8 --json\n\n"
        "exit codes: 0 plans found; 1 no layout fits (even at a halved GBS, unless --keep-gbs): one line on\n"
        "stderr names the closest run, its layout at its strongest memory option (the knobs `moeplan\n"
        "estimate` takes to reproduce it), what it needs per GPU and by how much it misses the budget; with\n"
        "--json stdout still carries the list of plans, [] (moeplan.api.plan()['closest'] has the closest\n"
        "run as a dict); 2 bad input (no valid layout at all, unknown model, ...): one line, nothing written.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_arguments(p, layout=False)
    p.add_argument("--top", type=bounded_int("top"), default=5,
                   help=f"plans to show (default 5); the search refines {REFINE_MIN} layouts whatever --top asks up to "
                        f"{REFINE_MIN // 2}, so plan 1 is the same for any of them (beyond, 2 layouts per plan)")
    p.add_argument("--headroom", type=float, default=DEFAULT_HEADROOM,
                   help=f"share of HBM left free (default {DEFAULT_HEADROOM:.2f})")
    p.add_argument("--format", default="table", metavar="FORMAT",
                   choices=["table", "overrides", "yaml", "megatron-lm", *LAUNCH_FORMATS],
                   help="output: table (default), or the best plan as overrides / yaml (Bridge YAML) / megatron-lm "
                        "(flags) / bridge-launch or perf-launch (a Megatron Bridge v0.6 launch command: train.sh or the "
                        "performance setup_experiment.py; needs --mcore-version 0.19)")
    for name in ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs"):
        p.add_argument(f"--{name}", type=positive_int, help=f"fix {name.upper()} instead of searching it")
    p.add_argument("--dispatcher", choices=list(knob_named("dispatcher").choices), metavar="NAME",
                   help="fix the dispatcher: %(choices)s")
    p.add_argument("--recompute", help="fix recompute (none, full, selective:...)")
    p.add_argument("--no-cuda-graphs", action="store_true", help="do not consider CUDA graphs")
    p.add_argument("--no-offload", action="store_true", help="do not consider optimizer CPU offload")
    fsdp_search_argument(p)
    p.add_argument("--keep-gbs", action="store_true", help="never lower GBS when nothing fits")
    p.add_argument("--trace", metavar="FILE.json", help=TRACE_HELP.replace("write one iteration", "write plan 1's iteration"))
    p.add_argument("--save-strategy", metavar="FILE.yaml",
                   help="write the best plan's strategy (layout, batch, knobs) for `moeplan estimate --strategy`")
    p.add_argument("--json", action="store_true", help="print the list of plans as JSON ([] when nothing fits)")
    p.add_argument("--stats", action="store_true", help="print the search's statistics on stderr: layouts "
                   "considered, fully evaluated (after the cheap bounds) and fitting, and the search time")
    p.set_defaults(handler=cmd_plan)
