"""``moeplan hardware``: the GPU catalog (and a user file)."""

from __future__ import annotations

import argparse
from typing import Any

from moeplan.cli.args import HARDWARE_DOC, HARDWARE_HELP
from moeplan.cli.output import Console, Table, escape, print_json
from moeplan.cli.profile import named
from moeplan.cli.tables import cell, compact_table, unbroken


def cmd_hardware(args: argparse.Namespace, console: Console) -> int:
    from moeplan.hardware import hardware_table

    rows = hardware_table(args.hardware)
    if args.json:
        print_json(named(rows, args))
        return 0
    def build(narrow: bool) -> Table:  # narrow: compact, the scale-out column named by its NIC
        table = (compact_table("GPUs (dense peak FLOP/s; GB/s per GPU per direction; NIC = scale-out)") if narrow
                 else Table(title="GPUs (dense peak FLOP/s; bandwidth per GPU per direction)"))
        cols = [("name", "name"), ("HBM GiB", "hbm_gib"), ("HBM TB/s", "hbm_tb_s"), ("BF16 TF", "bf16_tflops"),
                ("FP8 TF", "fp8_tflops"), ("MXFP8 TF", "mxfp8_tflops"), ("NVLink GB/s", "nvlink_gb_s"),
                ("domain", "nvlink_domain"), ("NIC GB/s" if narrow else "scale-out GB/s", "scaleout_gb_s"),
                ("host link", "host_link"), ("host GB/s", "host_link_gb_s")]
        for title, _ in cols:
            table.add_column(title, justify="left" if title in ("name", "host link") else "right",
                             no_wrap=title == "name")
        for r in rows:
            table.add_row(*[cell(r.get(key)) for _, key in cols])
        return table

    console.print(unbroken(console, build))
    for r in rows:  # what the table has no room for: each GPU's description and host memory (the offload limit)
        console.print(f"{escape(r['name'])}: {escape(r.get('description') or '(no description)')}; host memory "
                      f"{cell(r.get('host_mem_gib'))} GiB per GPU", highlight=False, overflow="fold")
    return 0


def add_hardware_parser(sub: Any) -> None:
    """``moeplan hardware``: its parser."""
    p = sub.add_parser("hardware", help="list the GPU catalog (and a user file)",
                       description="GPU catalog: HBM, peak FLOP/s, NVLink and scale-out bandwidth, host link. "
                       "--hardware FILE.yaml adds or overrides entries (e.g. `base: h100` with 200 Gb/s NICs); the file format, "
                       f"every field with its unit, and an example: {HARDWARE_DOC}.",
                       epilog="examples:\n  moeplan hardware\n  moeplan hardware --hardware examples/hardware_h100_200g.yaml --json",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hardware", metavar="FILE.yaml", help=HARDWARE_HELP)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_hardware)
