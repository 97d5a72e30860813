"""``moeplan calibrate``: fit the timing model to a cluster's training logs."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from moeplan.cli.args import HARDWARE_HELP, nonnegative_int
from moeplan.cli.output import (Console, Table, api, check_output, distinct_outputs, escape, print_json, write_bytes,
                                wrote)
from moeplan.cli.tables import compact_table, unbroken


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _run_text(r: dict[str, Any]) -> str:
    return f"{r['model']} {r['gpus']}x {r['layout']} {r['dispatcher']}{' +ovl' if r['ep_overlap'] else ''}"


def _steady_text(r: dict[str, Any], unit: str = "") -> str:
    st = r["steady_state"]
    return f"{r['measured_step_time_s']:.3f}{unit} (±{st['spread'] / 2:.1%}, {len(st['iterations_used'])} it)"


def _runs_table(result: dict[str, Any], narrow: bool) -> Any:
    """Measured against estimated, one row per run; narrow (under NARROW_COLUMNS): the log, the run and its steady
    state move to a numbered line each above the table (print_calibration), the row keeps the numbers."""
    title = (f"Runs: measured vs estimated ({result['gpu']}); err = measured / estimate - 1 of the column before it "
             "(TFLOP/s: - = the estimate is too fast; GiB: + = the estimate is low)")
    table = compact_table(title) if narrow else Table(title=title)
    cols = (("#", "TFLOP/s/GPU", "default", "err", "calibrated", "err", "peak alloc GiB", "estimate", "err") if narrow
            else ("log", "run", "steady s/step (spread)", "TFLOP/s/GPU", "default", "err", "calibrated", "err",
                  "peak alloc GiB", "estimate", "err"))
    for col in cols:
        table.add_column(col, justify="left" if col in ("log", "run", "#") else "right", overflow="fold")
    for i, r in enumerate(result["runs"], 1):
        src = "" if r["measured_tflops_source"] == "log" else "*"
        meas_mem = r["measured_peak_allocated_gib"]
        head = [str(i)] if narrow else [escape(r["log"]), escape(_run_text(r)), _steady_text(r)]
        table.add_row(*head,
                      f"{r['measured_tflops_per_gpu']:.1f}{src}", f"{r['default_tflops_per_gpu']:.1f}",
                      _pct(r["default_tflops_error"]), f"{r['calibrated_tflops_per_gpu']:.1f}",
                      _pct(r["calibrated_tflops_error"]),
                      "-" if meas_mem is None else f"{meas_mem:.2f}", f"{r['estimated_peak_allocated_gib']:.2f}",
                      _pct(None if meas_mem is None else meas_mem / r["estimated_peak_allocated_gib"] - 1))
    return table


def print_calibration(result: dict[str, Any], console: Console) -> None:
    narrow: list[bool] = []
    table = unbroken(console, lambda n: narrow.append(n) or _runs_table(result, n))
    if narrow[-1]:  # at 80 columns the log names and runs broke every cell: one line each, above the table
        for i, r in enumerate(result["runs"], 1):
            console.print(f"{i}: {escape(r['log'])}: {escape(_run_text(r))}; steady {_steady_text(r, ' s/step')}",
                          highlight=False)
    console.print(table)
    for r in result["runs"]:
        dropped = r["steady_state"]["dropped"]
        if dropped:
            reasons: dict[str, list[int]] = {}
            for d in dropped:
                reasons.setdefault(d["reason"], []).append(d["iteration"])
            text = "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in reasons.items())
            console.print(f"{escape(r['log'])}: dropped {text}", highlight=False)
        for note in r["notes"]:
            console.print(f"[yellow]note:[/] {escape(r['log'])}: {escape(note)}", highlight=False)
    fit = result["fit"]
    ct = Table(title="Fitted constants (the rest keep their defaults)")
    for col in ("constant", "default", "fitted", "change"):
        ct.add_column(col, justify="left" if col == "constant" else "right")
    for name, value in result["constants"].items():
        d = result["defaults"][name]
        ct.add_row(name, f"{d:.4g}", f"{value:.4g}", f"{value / d - 1:+.1%}")
    mem = result["memory"]
    if mem["reserve_gib"] is not None:
        ct.add_row("memory: reserve_gib", f"{mem['reserve_gib_default']:.3g}", f"{mem['reserve_gib']:.3g}", "")
    console.print(ct)
    console.print(f"{escape(fit['message'])}; RMS log step-time error {fit['rms_log_error_before']:.3f} -> "
                  f"{fit['rms_log_error_after']:.3f}", highlight=False)
    for warning in result.get("warnings", []):  # the fit is suspect: constants at their bounds, a large residual
        console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    console.print(_folded("not moved", result["not_moved"]), highlight=False)


def _folded(label: str, names: Sequence[str], shown: int = 5) -> str:
    """A long list of names as its count and the first few (``--json`` has them all, with their reasons)."""
    more = len(names) - shown
    head = ", ".join(names[:shown])
    return f"{label} ({len(names)}): {head}" + (f", and {more} more (--json lists them with reasons)" if more > 0 else "")


def cmd_calibrate(args: argparse.Namespace, console: Console) -> int:
    from moeplan.calibrate import fit as calibrate

    distinct_outputs(args, inputs=[(f"LOG {log}", log) for log in args.logs], out=args.out)  # never over a log
    check_output(args.out, plot=False)
    result = api.calibrate(args.logs, model=args.model, gpu=args.gpu, sets=args.set, hardware_file=args.hardware,
                           warmup_iters=args.warmup)
    if args.out:
        write_bytes(args.out, calibrate.profile_yaml(result).encode())
    if args.json:
        print_json(result)
    else:
        print_calibration(result, console)
    if args.out:
        wrote(args.out, args.json, f"{len(result['constants'])} constant(s) from {len(result['runs'])} run(s)")
    return 0


def add_calibrate_parser(sub: Any) -> None:
    """``moeplan calibrate``: its parser."""
    p = sub.add_parser(
        "calibrate", help="fit the timing model to your cluster from Megatron-LM / Megatron Bridge training logs",
        description="Read training logs (Megatron-LM: argument dump, iteration and memory lines; Megatron Bridge: "
        "configuration summary or Task Configuration YAML, iteration and memory lines), take each run's steady state "
        "(warm-up, CUDA graph capture, batch-size ramp-up and profiler iterations dropped; median and spread), rebuild each run from its "
        "settings, and fit by least squares on log step time the global timing constants the runs pin down (one "
        "run configuration moves one overall scale), plus the memory reserve from peak reserved memory. Prints "
        "measured vs default vs calibrated estimates per run; --out writes a profile for --calibration.",
        epilog="examples:\n  moeplan calibrate run.log --gpu h100 --out profile.yaml\n"
        "  moeplan calibrate logs/*.log --gpu h100 --set gpus=16 --json\n"
        "  moeplan plan qwen3-30b-a3b --gpus 16 --seq-len 4k --gbs 1024 --calibration profile.yaml",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("logs", nargs="+", metavar="LOG",
                   help="training log(s) of one cluster (stdout of any rank mix; gzip-compressed or not; - reads "
                        "standard input); a log holding several runs (a job restarted with other settings) gives each")
    p.add_argument("--model", help="model (catalog name or config.json); inferred from the log's architecture")
    p.add_argument("--gpu", help="GPU type the logs ran on (logs do not name it), e.g. h100")
    p.add_argument("--hardware", metavar="FILE.yaml", help=HARDWARE_HELP)
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="a setting the log lacks or gets wrong: a Megatron-Core field (seq_length=4096), a Bridge "
                        "path (dataset.seq_length=4096), gpus=N, model=NAME, mcore_version=0.16, moe_imbalance=F; "
                        "repeatable, applies to every log")
    p.add_argument("--warmup", type=nonnegative_int, metavar="N",
                   help="iterations dropped as warm-up after the start and after each restart (default 2, plus "
                        "cuda_graph_warmup_steps with CUDA graphs)")
    p.add_argument("--out", metavar="PROFILE.yaml", help="write the fitted profile (use with --calibration)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_calibrate)
