"""``moeplan check``: lint an existing run config."""

from __future__ import annotations

import argparse
from typing import Any

from moeplan.base.errors import MoeplanError
from moeplan.base.te_release import DEFAULT_TE_VERSION, GROUPED_TENSOR_ENV
from moeplan.base.vocab import DEFAULT_HEADROOM, DEFAULT_MCORE_VERSION
from moeplan.cli.args import (HARDWARE_HELP, TE_GROUPED_TENSOR_HELP, TE_VERSION_HELP, TRACE_HELP, calibration_argument,
                              file_imbalance, positive_int, unsaid_arguments)
from moeplan.cli.estimate import print_estimate
from moeplan.cli.output import (Console, api, check_trace, distinct_outputs, escape, print_json, trace_note,
                                write_trace, wrote)
from moeplan.cli.profile import named, warn_profile_gpu
from moeplan.cli.tables import NARROW_COLUMNS, make_table


def cmd_check(args: argparse.Namespace, console: Console) -> int:
    from moeplan.lint import checker

    distinct_outputs(args, trace=args.trace)
    check_trace(args.trace)
    result = checker.check(args.config, model=args.model, gpu=args.gpu, gpus=args.gpus, hardware_file=args.hardware,
                           mcore_version=args.mcore_version, headroom=args.headroom, run_mcore=args.mcore,
                           cal=args.cal, te_version=args.te_version, te_grouped_tensor=args.te_grouped_tensor,
                           moe_imbalance=file_imbalance(args), reserve_gib=args.reserve_gib)
    warn_profile_gpu(args, result.gpu)
    tl, no_trace = None, ""
    if args.trace:
        if result.estimate is None:
            no_trace = "the layout is not valid (see the findings)"
        else:
            try:
                tl = api.timeline(result.config, result.gpu, args.cal)
            except MoeplanError as exc:
                no_trace = str(exc)
        if tl is not None:
            write_trace(args.trace, tl)
    if args.json:
        print_json(named(result.as_dict(), args))
    else:
        if result.estimate is not None:
            print_estimate(result.estimate_dict(), console, routing_hint=False)  # with the routing it assumed
        table = make_table(f"Findings for {args.config} ({result.kind})", console.width < NARROW_COLUMNS)
        narrow = console.width < NARROW_COLUMNS
        table.add_column("severity", no_wrap=True)
        if not narrow:
            table.add_column("rule", no_wrap=True)
        table.add_column("line", justify="right", no_wrap=True)
        table.add_column("finding" if not narrow else "rule: finding", overflow="fold", ratio=1)
        colors = {"error": "red", "warning": "yellow", "info": "cyan"}
        numbered = [f for f in result.findings if f.fix]
        for f in result.findings:
            ref = escape(f" [fix {numbered.index(f) + 1}]") if f.fix else ""
            text = escape(f.message) + ref
            cells = [f"[{colors[f.severity]}]{f.severity}", *([] if narrow else [f.rule]), str(f.line or ""),
                     f"[b]{f.rule}[/]: {text}" if narrow else text]
            table.add_row(*cells)
        console.print(table)
        if numbered:
            console.print("[b]Fixes[/] (" + ("Megatron-LM arguments, one per line, to put in the script" if
                                            result.kind == "megatron-lm" else
                                            "Megatron Bridge overrides, one per line, to copy") + ")")
        for i, f in enumerate(numbered, start=1):
            where = f", line {f.line}" if f.line else ""
            console.print(f"# fix {i}: {f.rule}{where}", highlight=False, markup=False, soft_wrap=True)
            for o in result.fix_lines(f):
                console.print(o, highlight=False, markup=False, soft_wrap=True)
        console.print(result.summary(), highlight=False)
    if tl is not None:
        wrote(args.trace, args.json, trace_note(tl))
    elif args.trace:
        Console(stderr=True, width=10_000).print(f"moeplan: no trace written to {args.trace}: {no_trace}",
                                                 highlight=False, markup=False)
    # a file with errors exits 1 with or without --trace (its findings say why no trace was written)
    return 1 if result.errors else 2 if no_trace else 0


def add_check_parser(sub: Any) -> None:
    """``moeplan check``: its parser."""
    p = sub.add_parser(
        "check", help="lint an existing run config: findings with numbers and fixes",
        description="Read a Megatron Bridge YAML, a file of Hydra-style overrides or a Megatron-LM argument list; "
        "estimate its memory and throughput; report findings (severity, rule, numbers, the override that fixes "
        "it). Exit code 0: no errors, 1: errors found, 2: the file cannot be read.",
        epilog="example: moeplan check run.yaml --model deepseek-v3 --gpu h100 --gpus 1024 --mcore")
    p.add_argument("config", metavar="CONFIG", help="Bridge YAML, overrides file or Megatron-LM arguments; - reads standard input")
    p.add_argument("--model", help="model (catalog name or config.json); default: the file's '# moeplan:' comment "
                   "(moeplan's exports carry one), else inferred from the architecture fields it gives")
    p.add_argument("--gpu", help="GPU name (default: the file's '# moeplan:' comment, else h100)")
    p.add_argument("--gpus", type=positive_int, help="total GPU count (default: the file's '# moeplan:' comment)")
    p.add_argument("--hardware", metavar="FILE.yaml", help=HARDWARE_HELP)
    unsaid_arguments(p, from_file=True)
    calibration_argument(p)
    p.add_argument("--mcore-version", help=f"Megatron-Core version the config targets (default {DEFAULT_MCORE_VERSION})")
    p.add_argument("--te-version", help=TE_VERSION_HELP + "; default: the file's '# moeplan:' comment, else "
                   f"{DEFAULT_TE_VERSION}")
    p.add_argument("--te-grouped-tensor", action="store_true",
                   help=TE_GROUPED_TENSOR_HELP + f"; default: on where the file's '# moeplan:' comment sets {GROUPED_TENSOR_ENV}=1")
    p.add_argument("--headroom", type=float, default=DEFAULT_HEADROOM,
                   help=f"share of HBM the run should leave free (default {DEFAULT_HEADROOM:.0%}, the planner's and "
                        "estimate's: one budget); a run over it by no more than the memory model's error gets a "
                        "warning (memory-edge), an error only past that".replace("%", "%%"))
    p.add_argument("--mcore", action="store_true", help="also run Megatron-Core's TransformerConfig checks (needs the mcore extra: pip install 'moeplan[mcore]'; refused, exit 2, where megatron-core cannot be imported; a warning, not an error, where the installed release is not the file's target or Transformer Engine is missing where Megatron checks its version)")
    p.add_argument("--trace", metavar="FILE.json", help=TRACE_HELP.replace("write one iteration", "write the run's iteration"))
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_check)
