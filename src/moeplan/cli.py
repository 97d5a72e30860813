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


# --------------------------------------------------------------------------- hardware / estimate


def cmd_hardware(args: argparse.Namespace, console: Console) -> int:
    from moeplan.hardware import hardware_table

    rows = hardware_table(args.hardware)
    if args.json:
        _print_json(rows)
        return 0
    table = Table(title="GPUs (dense peak FLOP/s; bandwidth per GPU per direction)")
    cols = [("name", "name"), ("HBM GiB", "hbm_gib"), ("HBM TB/s", "hbm_tb_s"), ("BF16 TF", "bf16_tflops"),
            ("FP8 TF", "fp8_tflops"), ("MXFP8 TF", "mxfp8_tflops"), ("NVLink GB/s", "nvlink_gb_s"),
            ("domain", "nvlink_domain"), ("scale-out GB/s", "scaleout_gb_s"), ("host link", "host_link"),
            ("host GB/s", "host_link_gb_s")]
    for title, _ in cols:
        table.add_column(title, justify="left" if title in ("name", "host link") else "right")
    for r in rows:
        table.add_row(*[_cell(r.get(key)) for _, key in cols])
    console.print(table)
    return 0


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"
    return str(v)


def add_run_arguments(p: argparse.ArgumentParser, layout: bool = True) -> None:
    """Arguments shared by estimate / plan / sweep / report."""
    p.add_argument("model", metavar="MODEL", help="catalog name or path to config.json")
    p.add_argument("--gpu", default="h100", help="GPU name from `moeplan hardware` (default h100)")
    p.add_argument("--gpus", type=positive_int, required=True, help="total GPU count")
    p.add_argument("--seq-len", type=parse_tokens, required=True, help="sequence length, e.g. 32k, 128k")
    p.add_argument("--gbs", type=positive_int, required=True, help="global batch size in sequences")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp8", "fp8-cs", "fp8-ds", "mxfp8"],
                   help="GEMM precision: fp8 = blockwise (Hopper), fp8-cs current scaling, mxfp8 (Blackwell)")
    p.add_argument("--hardware", metavar="FILE.yaml", help="extra GPU definitions (see docs)")
    p.add_argument("--moe-imbalance", type=float, default=1.0,
                   help="tokens on the busiest expert rank / mean; 1.0 = force-balanced routing (default)")
    p.add_argument("--reserve-gib", type=float, default=2.0,
                   help="GiB per GPU kept for CUDA context, NCCL and fragmentation (default 2)")
    if layout:
        p.add_argument("--mbs", type=positive_int, default=1, help="micro-batch size (default 1)")
        for name, what in (("tp", "tensor"), ("pp", "pipeline"), ("vpp", "virtual pipeline (chunks per rank)"),
                           ("cp", "context"), ("ep", "expert"), ("etp", "expert tensor")):
            p.add_argument(f"--{name}", type=positive_int, default=1, help=f"{what} parallel size (default 1)")
        p.add_argument("--pipeline-layout", help="Megatron pipeline_model_parallel_layout, e.g. 'Et|(tt|)*30mL'")
        p.add_argument("--recompute", default="none",
                       help="none | full[:uniform|block[:N]] | selective:MOD[,MOD] with Megatron-Core labels "
                            "core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts, gdn_norm_out")
        p.add_argument("--dispatcher", default="auto", choices=["auto", "alltoall", "allgather", "deepep", "hybridep"],
                       help="MoE token dispatcher; auto = HybridEP on NVL72, the faster of DeepEP/HybridEP on NVL8")
        p.add_argument("--ep-overlap", action="store_true", help="overlap EP all-to-all with compute (moe_a2a_overlap)")
        p.add_argument("--cuda-graphs", help="CUDA graph scopes, e.g. attn,moe_router,moe_preprocess or full_iteration")
        p.add_argument("--optimizer-offload", type=float, default=0.0, metavar="F",
                       help="fraction of optimizer state on the CPU (optimizer_offload_fraction; default 0)")
        p.add_argument("--offload-modules", help="fine-grained activation offload, e.g. core_attn,attn_proj")
        p.add_argument("--cp-comm-type", default="p2p", choices=["p2p", "a2a", "allgather", "a2a+p2p"])
        p.add_argument("--capacity-factor", type=float, help="moe_expert_capacity_factor (token dropping)")
        p.add_argument("--bf16-grads", action="store_true", help="main grads in bf16 (grad_reduce_in_fp32=False)")


def run_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kw: dict[str, Any] = dict(
        gpu=args.gpu, gpus=args.gpus, seq_len=args.seq_len, gbs=args.gbs, precision=args.precision,
        hardware_file=args.hardware, moe_imbalance=args.moe_imbalance, reserve_gib=args.reserve_gib,
    )
    if hasattr(args, "tp"):
        kw.update(
            mbs=args.mbs, tp=args.tp, pp=args.pp, vpp=args.vpp, cp=args.cp, ep=args.ep, etp=args.etp,
            pipeline_layout=args.pipeline_layout, recompute=args.recompute, dispatcher=args.dispatcher,
            ep_overlap=args.ep_overlap, cuda_graphs=args.cuda_graphs, optimizer_offload=args.optimizer_offload,
            offload_modules=args.offload_modules, cp_comm_type=args.cp_comm_type,
            capacity_factor=args.capacity_factor, grad_fp32=not args.bf16_grads,
        )
    return kw


def print_estimate(est: dict[str, Any], console: Console) -> None:
    par = est["parallel"]
    head = (f"{est['model']} on {est['gpus']} x {est['gpu']} | seq {est['seq_len']:,} GBS {est['gbs']} MBS {est['mbs']} "
            f"({est['microbatches']} micro-batches) | TP{par['tp']} PP{par['pp']} VPP{par['vpp']} CP{par['cp']} "
            f"EP{par['ep']} ETP{par['etp']} DP{par['dp']} EDP{par['edp']} | {est['precision']}, "
            f"recompute {est['recompute']}, {est['dispatcher']}")
    console.print(head, highlight=False)
    mem = Table(title=f"Memory per GPU (pipeline rank {est['memory_rank']}, the most loaded)")
    mem.add_column("item")
    mem.add_column("GiB", justify="right")
    for key, value in est["memory_gib"].items():
        if key == "total":
            continue
        mem.add_row(key, f"{value:,.2f}")
    verdict = "[green]fits" if est["fits"] else f"[red]does not fit: {-est['headroom_gib']:,.1f} GiB over"
    mem.add_row("[b]total", f"[b]{est['memory_gib']['total']:,.2f}")
    mem.add_row(f"capacity ({verdict}[/])", f"{est['capacity_gib']:,.2f}")
    if est["host_memory_gib"]:
        mem.add_row("host memory (offload)", f"{est['host_memory_gib']:,.2f}")
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
        f"TFLOP/s per GPU [b]{est['tflops_per_gpu']:,.0f}[/]   MFU [b]{est['mfu']:.1%}[/]   "
        f"tokens/s per GPU [b]{est['tokens_per_s_per_gpu']:,.0f}[/]   (FLOPs/token {est['flops_per_token'] / 1e9:,.1f} G, "
        "Megatron-Core convention)", highlight=False)


def cmd_estimate(args: argparse.Namespace, console: Console) -> int:
    est = api.estimate(args.model, **run_kwargs(args))
    if args.plot:
        from moeplan import plots

        plots.write_estimate_plot(est, args.plot)
    if args.json:
        _print_json(est)
    else:
        print_estimate(est, console)
    return 0


# --------------------------------------------------------------------------- parser


EPILOG = """\
examples:
  moeplan models
  moeplan hardware
  moeplan estimate qwen3-30b-a3b --gpu h100 --gpus 16 --seq-len 4k --gbs 1024 --ep 16
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

    p = sub.add_parser("hardware", help="list the GPU catalog (and a user file)",
                       description="GPU catalog: HBM, peak FLOP/s, NVLink and scale-out bandwidth, host link. "
                       "--hardware FILE.yaml adds or overrides entries (e.g. `base: h100` with 200 Gb/s NICs).")
    p.add_argument("--hardware", metavar="FILE.yaml", help="extra GPU definitions")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_hardware)

    p = sub.add_parser(
        "estimate",
        help="memory and throughput of one layout",
        description="Per-GPU memory item by item (most loaded pipeline rank) and step time, TFLOP/s per GPU, "
        "MFU and tokens/s with the time broken down, for one parallel layout and set of knobs.",
        epilog="example: moeplan estimate deepseek-v3 --gpu h100 --gpus 1024 --seq-len 128k --gbs 1024 "
        "--pp 8 --vpp 4 --cp 32 --ep 32 --recompute selective:mla_up_proj,layernorm --optimizer-offload 1.0",
    )
    add_run_arguments(p)
    p.add_argument("--plot", metavar="FILE", help="write the memory and time breakdown as PNG or SVG")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=cmd_estimate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console() if sys.stdout.isatty() else Console(width=160)
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
