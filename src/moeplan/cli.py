"""Command-line front end: a thin layer over the API (argparse + rich, ``--json`` everywhere).

Every input error is a :class:`moeplan.errors.MoeplanError`: one line on stderr, exit code 2, no
traceback, nothing written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from moeplan.errors import MoeplanError
from moeplan.attention_backend import TE_WIDE_HEAD_FIX_VERSION
from moeplan.te_release import (
    DEFAULT_TE_VERSION,
    GROUPED_TENSOR_ENV,
    GROUPED_TENSOR_FIRST_VERSION,
    TE_COMMIT,
    TE_RELEASES,
)
from moeplan.vocab import (
    CP_COMM_TYPES,
    DEFAULT_HEADROOM,
    DEFAULT_GPU,
    DEFAULT_MCORE_VERSION,
    DEFAULT_RESERVE_GIB,
    DISPATCHERS,
    FSDP_STRATEGIES,
    OPTIMIZERS,
    PRECISIONS,
    RESOLVED_GAIN,
    REFINE_MIN,
    TRACE_DETAIL_MICROBATCHES,
)

def _broken_pipe() -> NoReturn:
    raise BrokenPipeError(32, "Broken pipe")


# Start-up time: `moeplan --help` and `moeplan models` must start in well under 0.15 s, so rich, the
# API (and with it the engine, YAML and the planner) and the strategy reader are imported on first use.
if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from moeplan import api
    from moeplan.estimate import Estimate
    from moeplan.hardware import GPUSpec
else:
    def Console(*args: Any, **kwargs: Any) -> Any:  # noqa: N802  (rich's class, imported when printing)
        from rich.console import Console as _Console

        console = _Console(*args, **kwargs)
        console.on_broken_pipe = _broken_pipe  # rich would exit 1 ("no answer"); main() exits 141
        return console

    def Table(*args: Any, **kwargs: Any) -> Any:  # noqa: N802
        from rich.table import Table as _Table

        return _Table(*args, **kwargs)

    class _Api:
        """:mod:`moeplan.api`, imported on first use."""

        def __getattr__(self, name: str) -> Any:
            from moeplan import api as module

            return getattr(module, name)

    api = _Api()


class _LazyConsole:
    """A rich Console made (and rich imported) on first use: `--json` output never needs one."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._console: Any = None

    def real(self) -> Any:
        if self._console is None:
            self._console = Console(**self._kwargs)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)


HARDWARE_DOC = "docs/hardware.md (example: examples/hardware_h100_200g.yaml)"
TE_VERSION_HELP = (f"Transformer Engine release the run trains with, one of {', '.join(TE_RELEASES)} (default "
                   f"{DEFAULT_TE_VERSION}, the recipes' TE {TE_COMMIT}: every calibrated number was measured on it). It "
                   f"decides the attention kernel per head shape: from {TE_WIDE_HEAD_FIX_VERSION} (TE PR #3056, cuDNN 9.23) "
                   "cuDNN trains head dim 256 on B200/GB200/B300/GB300, so Qwen3-Next gets the cuDNN rate instead of "
                   "FlashAttention-2 (sm100) or the unfused path (sm103), whose s x s scores and no-CP rule disappear")
TE_GROUPED_TENSOR_HELP = (
    f"run the routed experts on TE GroupedLinear's grouped-tensor path ({GROUPED_TENSOR_ENV}=1, TE "
    f"{GROUPED_TENSOR_FIRST_VERSION}+, opt-in in every release; no released Megatron-Core has an option for it): one "
    "grouped quantize and one cuBLASLt grouped GEMM per linear instead of one per local expert, which removes the "
    "per-expert host launches of quantized experts. With Megatron-Core <= 0.19 it runs BF16 (TE 2.17, 2.18) and FP8 "
    "current scaling (TE 2.18) on H100/H200/B200/GB200/B300/GB300 in a CUDA 13 container (cuBLASLt 13.3+); MXFP8 "
    "and FP8 block scaling quantize 128-row blocks Megatron-Core does not pad to, and TE 2.19 needs the token "
    "counts on the GPU, so those raise: estimate refuses the flag there, plan keeps only runs whose experts TE's op "
    "fuser runs (it does not read the variable) and refuses it where none is left, check reports it as an error)")
HARDWARE_HELP = f"extra GPU definitions; format, units and an example in {HARDWARE_DOC}"


def escape(text: str) -> str:
    """rich markup escaping (rich imported on first use)."""
    from rich.markup import escape as _escape

    return _escape(text)


def write_bytes(*args: Any, **kwargs: Any) -> Any:
    from moeplan.outfile import write_bytes as _write

    return _write(*args, **kwargs)


def read_strategy(*args: Any, **kwargs: Any) -> Any:
    from moeplan.strategy import read_strategy as _read

    return _read(*args, **kwargs)


def strategy_text(*args: Any, **kwargs: Any) -> Any:
    from moeplan.strategy import strategy_text as _text

    return _text(*args, **kwargs)

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
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"not a token count: '{text}' (use e.g. 4096, 32k, 128k)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: '{text}'")
    return value


def _int_from(text: str, least: int, words: str) -> int:
    """An argparse integer of at least ``least``; ``words`` says the bound in the error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: '{text}'") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {words}: '{text}'")
    return value


def positive_int(text: str) -> int:
    return _int_from(text, 1, "positive")


def nonnegative_int(text: str) -> int:
    return _int_from(text, 0, ">= 0")


def _non_finite_path(obj: Any, path: str = "") -> str | None:
    """The first key path (e.g. 'memory_gib.total') whose value is an infinite or NaN float, if any."""
    if isinstance(obj, float):
        return None if math.isfinite(obj) else (path or "(top level)")
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for k, v in items:
        hit = _non_finite_path(v, f"{path}.{k}" if path else str(k))
        if hit is not None:
            return hit
    return None


def _print_json(obj: Any) -> None:
    """Standard JSON or nothing: Python would print Infinity / NaN, which JSON parsers (jq, JSON.parse) refuse."""
    try:
        text = json.dumps(obj, indent=2, sort_keys=False, allow_nan=False)
    except ValueError:
        raise MoeplanError(f"the result is not finite at '{_non_finite_path(obj)}' (an input beyond what the "
                           "model covers, e.g. a huge --capacity-factor); no JSON written") from None
    _write_stdout(text + "\n")


def _write_stdout(text: str) -> None:
    """``text`` on standard output, all of it or BrokenPipeError: a large write into a pipe whose reader has gone
    can return after its first part with no error from the text layer (a 0.5 MB `plan --json | head -1` exited 0,
    not 141), so where stdout is a real file descriptor the bytes go out through os.write until none are left."""
    if sys.stdout is not sys.__stdout__:  # captured or replaced stdout (tests, notebooks): its own write
        sys.stdout.write(text)
        return
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    data = text.encode(sys.stdout.encoding or "utf-8")
    while data:
        data = data[os.write(fd, data):]


def _fmt_count(n: float) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


# --------------------------------------------------------------------------- models / params


def cmd_models(args: argparse.Namespace, console: Console) -> int:
    from moeplan.listing import list_models  # not the whole API: start-up time

    rows = list_models()
    if args.json:
        _print_json(_named(rows, args))
        return 0
    def build(narrow: bool) -> Table:  # narrow: compact, without the HF model_type (`--json` has it)
        table = _compact_table(title) if narrow else Table(title=title)
        for col in ("name", *(() if narrow else ("type",)), "arch", "layers", "experts", "top-k", "total", "active"):
            table.add_column(col, justify="right" if col in ("layers", "experts", "top-k", "total", "active") else "left",
                             no_wrap=col == "name")
        for r in rows:
            table.add_row(
                r["name"], *(() if narrow else (r["model_type"],)), r["architecture"], str(r["layers"]), str(r["experts"]),
                str(r["top_k"]), _fmt_count(r["total_params"]), _fmt_count(r["active_params"]),
            )
        return table

    title = "Built-in models (MODEL may also be a path to a config.json)"
    console.print(_unbroken(console, build))
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


# --------------------------------------------------------------------------- hardware / estimate


def cmd_hardware(args: argparse.Namespace, console: Console) -> int:
    from moeplan.hardware import hardware_table

    rows = hardware_table(args.hardware)
    if args.json:
        _print_json(_named(rows, args))
        return 0
    def build(narrow: bool) -> Table:  # narrow: compact, the scale-out column named by its NIC
        table = (_compact_table("GPUs (dense peak FLOP/s; GB/s per GPU per direction; NIC = scale-out)") if narrow
                 else Table(title="GPUs (dense peak FLOP/s; bandwidth per GPU per direction)"))
        cols = [("name", "name"), ("HBM GiB", "hbm_gib"), ("HBM TB/s", "hbm_tb_s"), ("BF16 TF", "bf16_tflops"),
                ("FP8 TF", "fp8_tflops"), ("MXFP8 TF", "mxfp8_tflops"), ("NVLink GB/s", "nvlink_gb_s"),
                ("domain", "nvlink_domain"), ("NIC GB/s" if narrow else "scale-out GB/s", "scaleout_gb_s"),
                ("host link", "host_link"), ("host GB/s", "host_link_gb_s")]
        for title, _ in cols:
            table.add_column(title, justify="left" if title in ("name", "host link") else "right",
                             no_wrap=title == "name")
        for r in rows:
            table.add_row(*[_cell(r.get(key)) for _, key in cols])
        return table

    console.print(_unbroken(console, build))
    for r in rows:  # what the table has no room for: each GPU's description and host memory (the offload limit)
        console.print(f"{escape(r['name'])}: {escape(r.get('description') or '(no description)')}; host memory "
                      f"{_cell(r.get('host_mem_gib'))} GiB per GPU", highlight=False, overflow="fold")
    return 0


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"
    return str(v)


def add_run_arguments(p: argparse.ArgumentParser, layout: bool = True) -> None:
    """Arguments shared by estimate / plan / report (estimate: --seq-len and --gbs may come from --strategy)."""
    p.add_argument("model", metavar="MODEL", help="catalog name or path to config.json")
    p.add_argument("--seq-len", type=parse_tokens, required=not layout, help="sequence length, e.g. 32k, 128k")
    p.add_argument("--gbs", type=positive_int, required=not layout, help="global batch size in sequences")
    _cluster_arguments(p, required=True)
    if layout:
        p.add_argument("--mbs", type=positive_int, default=1, help="micro-batch size (default 1)")
        for name, what in (("tp", "tensor"), ("pp", "pipeline"), ("vpp", "virtual pipeline (chunks per rank)"),
                           ("cp", "context"), ("ep", "expert"), ("etp", "expert tensor")):
            p.add_argument(f"--{name}", type=positive_int, default=1, help=f"{what} parallel size (default 1)")
        p.add_argument("--pipeline-layout", help="Megatron pipeline_model_parallel_layout, e.g. 'Et|(tt|)*30mL'")
        p.add_argument("--recompute", default="none",
                       help="none | full[:uniform|block[:N]] | selective:MOD[,MOD] with Megatron-Core labels "
                            "core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts, gdn_norm_out")
        p.add_argument("--dispatcher", default="auto", choices=["auto", *DISPATCHERS],
                       help="MoE token dispatcher; auto = HybridEP on NVL72, the faster of DeepEP/HybridEP on NVL8")
        p.add_argument("--ep-overlap", action="store_true", help="overlap EP all-to-all with compute (moe_a2a_overlap)")
        p.add_argument("--delay-wgrad", action=argparse.BooleanOptionalAction, default=None,
                       help="delay_wgrad_compute: with --ep-overlap, run the weight-gradient GEMMs as separate nodes "
                            "beside dispatch_bwd / the next combine_bwd (default: on with --ep-overlap, as Bridge's "
                            "moe_a2a_overlap sets it)")
        p.add_argument("--cuda-graphs", help="CUDA graph scopes, e.g. attn,moe_router,moe_preprocess or full_iteration")
        p.add_argument("--optimizer-offload", type=float, default=0.0, metavar="F",
                       help="fraction of optimizer state on the CPU (optimizer_offload_fraction; default 0)")
        p.add_argument("--offload-modules", help="fine-grained activation offload, e.g. core_attn,attn_proj")
        p.add_argument("--cp-comm-type", default="p2p", choices=list(CP_COMM_TYPES),
                       help="context-parallel communication (Megatron-Core cp_comm_type; p2p = ring; default p2p)")
        p.add_argument("--capacity-factor", type=float, help="moe_expert_capacity_factor (token dropping)")
        p.add_argument("--rank-capacity-factor", type=float, metavar="F",
                       help="moe_expert_rank_capacity_factor: sync-free dropless MoE for full-iteration CUDA graphs "
                            "(Megatron-Core 0.18+, HybridEP; Bridge perf recipes use 1.5)")
        p.add_argument("--fsdp", default=None, choices=["off", *FSDP_STRATEGIES],  # None: off, or a --strategy file's
                       help="Megatron-FSDP data_parallel_sharding_strategy (use_megatron_fsdp, Megatron-Core 0.14+); "
                            "off = distributed optimizer (default, or the --strategy file's)")
        _fsdp_buffer_argument(p)


def _fsdp_buffer_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fsdp-double-buffer", action="store_true",
                   help="Megatron-FSDP fsdp_double_buffer: two persistent buffers per unit size (needed for NCCL "
                        "user buffers); caps the gather prefetch and the reduce-scatter queue at two layers")


def _numerics(args: argparse.Namespace) -> dict[str, Any]:
    """Gradient and Adam-moment dtypes and the optimizer: the user's numerics, passed to every
    estimating command."""
    return {"grad_fp32": not args.bf16_grads, "bf16_moments": args.bf16_moments, "optimizer": args.optimizer,
            "mtp_layers": args.mtp_layers, "te_version": args.te_version or DEFAULT_TE_VERSION,
            "te_grouped_tensor": args.te_grouped_tensor}


def run_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kw: dict[str, Any] = dict(
        gpu=args.gpu, gpus=args.gpus, seq_len=args.seq_len, gbs=args.gbs, precision=args.precision,
        hardware_file=args.hardware, moe_imbalance=_imbalance(args), reserve_gib=_reserve(args),
        mcore_version=args.mcore_version, cal=args.cal, **_numerics(args),
    )
    if hasattr(args, "tp"):
        kw.update(
            mbs=args.mbs, tp=args.tp, pp=args.pp, vpp=args.vpp, cp=args.cp, ep=args.ep, etp=args.etp,
            pipeline_layout=args.pipeline_layout, recompute=args.recompute, dispatcher=args.dispatcher,
            ep_overlap=args.ep_overlap, delay_wgrad=args.delay_wgrad, cuda_graphs=args.cuda_graphs, optimizer_offload=args.optimizer_offload,
            offload_modules=args.offload_modules, cp_comm_type=args.cp_comm_type,
            capacity_factor=args.capacity_factor, rank_capacity_factor=args.rank_capacity_factor,
            fsdp=args.fsdp, fsdp_double_buffer=args.fsdp_double_buffer,
        )
    return kw


def print_estimate(est: dict[str, Any], console: Console) -> None:
    par = est["parallel"]
    head = (f"{est['model']} on {est['gpus']} x {est['gpu']} | seq {est['seq_len']:,} GBS {est['gbs']} MBS {est['mbs']} "
            f"({est['microbatches']} micro-batches) | TP{par['tp']} PP{par['pp']} VPP{par['vpp']} CP{par['cp']} "
            f"EP{par['ep']} ETP{par['etp']} DP{par['dp']} EDP{par['edp']} | {est['precision']}, "
            f"recompute {est['recompute']}, {est['dispatcher']}"
            + ((" + EP overlap" + ("" if est.get("delay_wgrad") else " (wgrad not delayed)")) if est.get("ep_overlap")
               else "")
            + (f", Megatron-FSDP {est['fsdp']}" if est.get("fsdp") else "")
            + (", Muon" if est.get("optimizer") == "muon" else ""))
    console.print(head, highlight=False, markup=False)
    mem = Table(title=f"Memory per GPU (pipeline rank {est['memory_rank']}, the most loaded)")
    mem.add_column("item")
    mem.add_column("GiB", justify="right")
    for key, value in est["memory_gib"].items():
        if key == "total":
            continue
        mem.add_row(key, f"{value:,.2f}")
    gpu_fits = est["headroom_gib"] >= 0
    verdict = "[green]fits" if gpu_fits else f"[red]does not fit: {-est['headroom_gib']:,.1f} GiB over"
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
        f"TFLOP/s per GPU [b]{est['tflops_per_gpu']:,.0f}[/]   MFU [b]{est['mfu']:.1%}[/]   "
        f"tokens/s per GPU [b]{est['tokens_per_s_per_gpu']:,.0f}[/]   (FLOPs/token {est['flops_per_token'] / 1e9:,.1f} G, "
        "Megatron-Core convention)", highlight=False)
    if est.get("outside_fit_note"):
        console.print(f"[yellow]note:[/] {escape(est['outside_fit_note'])}", highlight=False)


def strategy_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """build_config arguments of `moeplan estimate`: the flags, or a strategy file with the flags that differ
    from their defaults on top (model and cluster always come from the command line)."""
    given = run_kwargs(args)
    if not args.strategy:
        if args.seq_len is None or args.gbs is None:
            raise MoeplanError("estimate needs --seq-len and --gbs, or --strategy FILE.yaml")
        return given
    import inspect

    merged = read_strategy(args.strategy)
    defaults = {k: v.default for k, v in inspect.signature(api.build_config).parameters.items()}
    for key, value in given.items():
        if key not in merged or (value is not None and value != defaults.get(key, inspect.Parameter.empty)):
            merged[key] = value
    return merged


def _check_output(path: str | None, plot: bool = True) -> None:
    """Refuse an output path (and a plot format) before any work, so a bad path costs nothing."""
    if path is None:
        return
    from moeplan.outfile import check_target

    check_target(path)
    if plot:
        from moeplan.plots import format_of

        format_of(path)


def _check_trace(path: str | None) -> None:
    """A Chrome trace is JSON: its file says so (Perfetto and chrome://tracing open ``.json``, and gzip-compressed
    JSON: ``.json.gz`` or ``.gz``, which _write_trace compresses)."""
    _check_output(path, plot=False)
    if path is not None and not str(path).lower().endswith((".json", ".gz")):
        raise MoeplanError(f"--trace {path}: a Chrome trace is JSON; name the file *.json (or *.json.gz for a "
                           "gzip-compressed one)")


_INPUT_FILES = {"model": "MODEL", "config": "CONFIG", "hardware": "--hardware", "calibration": "--calibration",
                "strategy": "--strategy"}  # the arguments that name files a command reads


def _distinct_outputs(args: argparse.Namespace, *, inputs: Sequence[tuple[str, str]] = (),
                      **paths: str | None) -> None:
    """Two outputs of one command never share a file (the second would silently replace the first), and no output
    is a file the command reads (``--save-strategy`` over the ``--hardware`` file destroyed it): the files of
    _INPUT_FILES and ``inputs`` ((name, path) pairs, e.g. calibrate's logs). One file: moeplan.outfile.file_identity
    (a hard link, a symbolic link or another spelling of the path included)."""
    from moeplan.outfile import FileIdentity, file_identity

    read = [(name, getattr(args, attr, None)) for attr, name in _INPUT_FILES.items()]
    seen: dict[FileIdentity, str] = {}
    for name, path in [*read, *inputs]:
        if isinstance(path, str) and path != "-" and os.path.isfile(path):
            seen.setdefault(file_identity(path), f"{name} (an input)")
    for flag, path in paths.items():
        if path is None:
            continue
        name, key = "--" + flag.replace("_", "-"), file_identity(path)
        if key in seen:
            raise MoeplanError(f"{seen[key]} and {name} name the same file {path}; give each output its own path")
        seen[key] = name


def _wrote(path: str, as_json: bool, what: str = "") -> None:
    """'wrote FILE' for every file written (on stderr under --json, so stdout stays JSON)."""
    line = f"wrote {path}" + (f" ({what})" if what else "")
    if as_json:
        Console(stderr=True, width=10_000).print(line, highlight=False, markup=False)
    else:
        Console(width=10_000).print(line, highlight=False, markup=False, soft_wrap=True)


def _write_trace(path: str, tl: Any) -> None:
    """The Chrome trace-event file of a timeline (opens in Perfetto and chrome://tracing), gzip-compressed for a
    ``.gz`` name (deterministic: no time stamp or file name in the header; level 6: the headline trace's ~18 MB of
    JSON in ~1.7 MB, in ~0.15 s)."""
    from moeplan.outfile import write_bytes
    from moeplan.timeline import chrome_trace_bytes

    data = chrome_trace_bytes(tl)
    if str(path).lower().endswith(".gz"):
        import gzip

        data = gzip.compress(data, compresslevel=6, mtime=0)
    write_bytes(path, data)


def _schedule_refused(cfg: Any) -> bool:
    """Whether Megatron-Core refuses this run's pipeline schedule (then --plot and the report skip the timeline)."""
    from moeplan.timeline import schedule_problem

    par = cfg.parallel
    return schedule_problem(par.pp, par.vpp, cfg.batch.microbatches(par.dp)) is not None


def _trace_note(tl: Any) -> str:
    return (f"timeline of one iteration: {tl.pp} pipeline rank(s), {tl.microbatches} micro-batches, "
            f"{len(tl.ops)} forward/backward operations")


def cmd_estimate(args: argparse.Namespace, console: Console) -> int:
    _distinct_outputs(args, plot=args.plot, trace=args.trace)
    _check_output(args.plot)
    _check_trace(args.trace)
    estimate = api.estimate_run(args.model, **strategy_kwargs(args))
    est = estimate.as_dict()
    tl = None
    if args.trace or (args.plot and not _schedule_refused(estimate.config)):
        tl = api.timeline(estimate.config, estimate.gpu, args.cal)  # --trace: a schedule Megatron-Core refuses is an error
    if args.plot:  # written first: an error leaves nothing printed
        from moeplan import plots

        plots.write_estimate_plot(est, args.plot, ranks=est["memory_ranks_gib"], timeline=tl)
    if args.trace:
        _write_trace(args.trace, tl)
    if args.json:
        _print_json(_named(est, args))
    else:
        print_estimate(est, console)
    if args.plot:
        _wrote(args.plot, args.json, "memory and time breakdown" + (", timeline" if tl is not None else ""))
    if args.trace:
        _wrote(args.trace, args.json, _trace_note(tl))
    return 0


# --------------------------------------------------------------------------- plan


class _Progress:
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
            console = self.console.real() if isinstance(self.console, _LazyConsole) else self.console
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


def _fixed(args: argparse.Namespace) -> dict[str, Any]:
    out = {}
    for key in ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs"):
        value = getattr(args, key, None)
        if value is not None:
            out[key] = value
    if getattr(args, "dispatcher", None) not in (None, "auto"):
        out["dispatcher"] = args.dispatcher
    if getattr(args, "recompute", None):
        out["recompute"] = args.recompute
    return out


NARROW_COLUMNS = 120  # below this many terminal columns, tables fold their knob columns into one


def _wrapping(text: str) -> str:
    """A label list ('selective:a,b') that a table cell may wrap after each separator, never inside a label."""
    return text.replace(",", ", ").replace(":", ": ")


def _column_ranges(console: Console, table: Table) -> list[tuple[int, int]]:
    """(narrowest, widest) text width of each column without breaking a word: a no-wrap column needs
    its longest cell whole; a wrapping one its longest word (cells wrap at spaces)."""
    from rich.cells import cell_len

    out = []
    for col in table.columns:
        cells = [console.render_str(c) if isinstance(c, str) else c for c in (col.header, *col.cells)]
        texts = [t.plain for t in cells if hasattr(t, "plain")]
        widest = max((cell_len(line) for t in texts for line in t.splitlines() or [""]), default=1)
        longest_word = max((cell_len(w) for t in texts for w in t.split()), default=1)
        out.append((widest if col.no_wrap else max(longest_word, col.min_width or 0), widest))
    return out


def _frame_width(table: Table) -> int:
    """Columns a table takes besides its cells' text, from its public settings (box edges and rules,
    cell padding: with ``pad_edge`` off the outer edges have none, ``collapse_padding`` drops the left)."""
    n = len(table.columns)
    frame = (2 if table.box and table.show_edge else 0) + (n - 1 if table.box else 0)
    _, right, _, left = table.padding
    if table.collapse_padding:
        left = 0
    pads = n * (left + right)
    if not table.pad_edge and n:
        pads -= left + right
    return frame + pads


def _fit_unbroken(console: Console, table: Table) -> bool:
    """Give each wrapping column a width so that the table fits the terminal and no word breaks;
    False when even the narrowest such widths do not fit."""
    ranges = _column_ranges(console, table)
    room = console.width - _frame_width(table)
    if sum(hi for _, hi in ranges) <= room:
        return True  # fits as is: rich lays it out at natural widths
    if sum(lo for lo, _ in ranges) > room:
        return False
    widths = [lo for lo, _ in ranges]
    spare = room - sum(widths)
    while spare > 0:  # widen the wrapping columns that want it, one character at a time, in turn
        grew = False
        for i, (lo, hi) in enumerate(ranges):
            if spare and widths[i] < hi:
                widths[i] += 1
                spare -= 1
                grew = True
        if not grew:
            break
    for col, width in zip(table.columns, widths, strict=True):
        col.width = width
    return True


def _unbroken(console: Console, build: Callable[[bool], Table]) -> Table:
    """The wide table when the terminal holds it without breaking a word or a number, else the narrow
    one (which breaks words only on a terminal too narrow even for it)."""
    if console.width >= NARROW_COLUMNS:
        wide = build(False)
        if _fit_unbroken(console, wide):
            return wide
    narrow = build(True)
    _fit_unbroken(console, narrow)
    return narrow


def _compact_table(title: str) -> Table:
    """A table for a narrow terminal: no rules between columns, one space of padding between them."""
    return Table(title=title, box=None, padding=(0, 1), pad_edge=False, header_style="bold")


def _table(title: str, narrow: bool) -> Table:
    """A table; on a narrow terminal without vertical rules (the columns keep the room)."""
    from rich import box

    return Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1)) if narrow else Table(title=title)


def _num_column(table: Table, title: str) -> None:
    table.add_column(title, justify="right", no_wrap=True)


def _text_column(table: Table, title: str, **kw: Any) -> None:
    table.add_column(title, overflow="fold", **kw)


def _knobs(p: dict[str, Any]) -> str:
    """Dispatcher, CP communication, CUDA graphs, offload and MBS of a plan, for a narrow table."""
    par = p["parallel"]
    parts = [p["dispatcher"] + (" +ovl" if p["ep_overlap"] else "")]
    if par["cp"] > 1:
        parts.append(f"CP {p['cp_comm_type']}")
    if p["cuda_graphs"]:
        parts.append("graphs " + ", ".join(p["cuda_graphs"]))
    if p["optimizer_offload"]:
        parts.append(f"offload {p['optimizer_offload']:.0%}")
    if p["mbs"] != 1:
        parts.append(f"MBS {p['mbs']}")
    return "; ".join(parts)


def print_overrides(overrides: list[str], console: Console, title: str) -> None:
    """Overrides one per line, never broken, ready to copy (the same lines as --format overrides)."""
    console.print(f"[b]{title}[/] (one per line, as `--format overrides` writes them)")
    for o in overrides:
        console.print(o, highlight=False, markup=False, soft_wrap=True)


def _plans_table(result: dict[str, Any], narrow: bool) -> Table:
    table = _table("Plans, fastest first (n= tie: bands overlap)", narrow)
    _num_column(table, "#")
    _text_column(table, "layout", min_width=13 if narrow else None)
    if narrow:
        _text_column(table, "recompute", ratio=1)
        _text_column(table, "knobs", ratio=1)
        for col in ("GiB", "TFLOP/s", "tok/s"):
            _num_column(table, col)
    else:
        _num_column(table, "MBS")
        _text_column(table, "recompute")
        for col in ("dispatcher", "CP comm", "graphs"):
            _text_column(table, col)
        for col in ("offload", "GiB/GPU", "TFLOP/s/GPU", "TFLOP/s range", "MFU", "tokens/s/GPU"):
            _num_column(table, col)
    from moeplan.report import plan_layout_label

    for p in result["plans"]:
        layout = plan_layout_label(p)
        lo, hi = p["tflops_range"]
        numbers = [f"{p['memory_gib']['total']:.1f}", f"{p['tflops_per_gpu']:,.0f}",
                   *([] if narrow else [f"{lo:,.0f}-{hi:,.0f}", f"{p['mfu']:.1%}"]), f"{p['tokens_per_s_per_gpu']:,.0f}"]
        rank = f"{p['rank']}{'=' if p['tie'] else ''}"
        recompute = escape(_wrapping(p["recompute"]))
        if narrow:
            table.add_row(rank, layout, recompute, escape(_knobs(p)), *numbers)
        else:
            table.add_row(rank, layout, str(p["mbs"]), recompute,
                          p["dispatcher"] + (" +ovl" if p["ep_overlap"] else ""),
                          p["cp_comm_type"] if p["parallel"]["cp"] > 1 else "-", ", ".join(p["cuda_graphs"]) or "-",
                          f"{p['optimizer_offload']:.0%}", *numbers)
    return table


def print_plans(result: dict[str, Any], console: Console) -> None:
    console.print(f"{result['model']} on {result['gpus']} x {result['gpu']}, seq {result['seq_len']:,}, "
                  f"GBS {result['gbs']}, {result['precision']}: {result['layouts_feasible']} of "
                  f"{result['layouts_considered']} layouts fit (headroom {result['headroom']:.0%} of HBM)",
                  highlight=False)
    for note in result["notes"]:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    table = _unbroken(console, lambda narrow: _plans_table(result, narrow))
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


def _no_fit(result: dict[str, Any], as_json: bool) -> int:
    """Nothing fits: one line on stderr naming the closest run (api.PlanReport.closest_dict), what it needs and
    by how much it misses the budget; exit 1 (a valid question whose answer is "no"; bad input is exit 2)."""
    c = result.get("closest")
    where = ""
    if c:  # its strongest memory option: what `moeplan estimate` with these knobs reports
        knobs = [f"GBS {c['gbs']}", f"MBS {c['mbs']}", f"recompute {c['recompute']}", c["dispatcher"]]
        knobs += [f"optimizer offload {c['optimizer_offload']:.0%}"] if c["optimizer_offload"] else []
        knobs += [f"Megatron-FSDP {c['fsdp']}"] if c["fsdp"] else []
        knobs += ["EP overlap"] if c.get("ep_overlap") else []
        where = (f"; closest: {c['short']} ({', '.join(knobs)}) needs {c['memory_gib']:.1f} GiB per GPU, "
                 f"{c['misses_by_gib']:.1f} GiB over the {c['memory_gib_budget']:.1f} GiB budget")
    if c and c.get("offload_limited_by_host"):
        h = c["offload_limited_by_host"]
        where += (f" (optimizer offload held to {h['optimizer_offload']:.0%} by the host's {h['host_capacity_gib']:.1f} GiB "
                  f"per GPU, hardware host_mem_bytes: {h['asked']:.0%} would keep {h['host_gib_at_asked']:.1f} GiB there)")
    if c and c.get("unfused_attention"):
        from moeplan.attention_backend import TE_WIDE_HEAD_FIX

        u = c["unfused_attention"]
        where += (f" (Transformer Engine {u['te']} trains head dim {u['head_dim']} attention on {result['gpu']} with its "
                  f"unfused path: {u['peak_gib_per_layer']:.0f} GiB of s x s scores per layer at its peak, and no CP; "
                  f"{TE_WIDE_HEAD_FIX})")
    gbs, asked = result["gbs"], result["requested_gbs"]  # the search halves GBS while nothing fits (not --keep-gbs)
    halved = f", even at GBS {gbs:,} (halving the GBS from {asked:,} down to it)" if gbs != asked else ""
    msg = (f"no layout fits in {result['gpus']} x {result['gpu']} memory at seq {result['seq_len']:,} "
           f"(with {result['headroom']:.0%} headroom){halved}{where}")
    if result.get("newer") and result["newer"]["parallel"]:
        msg += "; " + result["newer"]["sentence"]
    if as_json:
        _print_json({"plans": [], "closest": c, "message": msg})
    Console(stderr=True, width=10_000).print(f"moeplan: {msg}", highlight=False, markup=False)
    return 1


def cmd_plan(args: argparse.Namespace, console: Console) -> int:
    if args.json and args.format != "table":
        raise MoeplanError(f"--json and --format {args.format} exclude each other: --json already carries each plan's "
                           "'overrides', 'yaml' and 'megatron_lm_args'")
    _distinct_outputs(args, trace=args.trace, save_strategy=args.save_strategy)
    _check_trace(args.trace)
    _check_output(args.save_strategy, plot=False)
    progress = _Progress(_LazyConsole(stderr=True), not args.json, "searching layouts")
    t0 = time.perf_counter()
    try:
        found = api.search_plans(
            args.model, seq_len=args.seq_len, gbs=args.gbs, top=args.top, headroom=args.headroom, fixed=_fixed(args),
            cuda_graphs=not args.no_cuda_graphs, optimizer_offload=not args.no_offload,
            allow_gbs_reduction=not args.keep_gbs, progress=progress if progress.enabled else None,  # no call per layout
            **_sweep_kwargs(args),
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
            _print_json([])
        return _no_fit(result, False)
    if args.save_strategy:
        assert found.best is not None
        write_bytes(args.save_strategy, strategy_text(found.best.config).encode())
        _wrote(args.save_strategy, args.json or args.format != "table", "the best plan's strategy")
    fmt = args.format
    tl = None
    if args.trace:  # plan 1, written before anything is printed
        assert found.best is not None
        tl = api.timeline(found.best.config, found.best.gpu, args.cal)
        _write_trace(args.trace, tl)
    if args.json:
        _print_json(_named(plans, args))
    elif fmt == "overrides":
        sys.stdout.write("\n".join([plans[0]["provenance"], *plans[0]["overrides"]]) + "\n")
    elif fmt == "yaml":
        sys.stdout.write(plans[0]["yaml"])
    elif fmt in ("bridge-launch", "perf-launch"):
        from moeplan.megatron import launch

        assert found.best is not None
        sys.stdout.write((launch.bridge_launch if fmt == "bridge-launch" else launch.perf_launch)(found.best.config))
    elif fmt == "megatron-lm":
        import shlex

        sys.stdout.write(plans[0]["provenance"] + "\n" + " ".join(shlex.quote(a) for a in plans[0]["megatron_lm_args"]) + "\n")
    else:
        print_plans(result, console)
    if tl is not None:  # on stderr when stdout carries JSON, overrides, YAML or flags
        _wrote(args.trace, args.json or fmt != "table", "plan 1, " + _trace_note(tl))
    return 0


# --------------------------------------------------------------------------- sweep / explain / report


def parse_lengths(text: str) -> list[int]:
    items = [t.strip() for t in text.split(",")]
    if any(not t for t in items):
        raise argparse.ArgumentTypeError(f"empty item in '{text}': give comma-separated lengths, e.g. 16k,32k,64k")
    out = [parse_tokens(t) for t in items]
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"a length appears twice in '{text}'")
    return out


def _held_layout(args: argparse.Namespace) -> dict[str, Any] | None:
    keys = ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs")
    held = {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}
    if not held and not args.hold:
        return None
    held.update(recompute=args.recompute or "none", dispatcher=args.dispatcher or "auto",
                optimizer_offload=args.optimizer_offload, cp_comm_type=args.cp_comm_type)
    return held


def _sweep_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The cluster and run settings (_cluster_arguments, and Megatron-FSDP) as API keywords: plan, a report's
    plans and its sweep rows, a sweep, explain's MODEL lengths."""
    return dict(gpu=args.gpu, gpus=args.gpus, precision=args.precision, hardware_file=args.hardware,
                moe_imbalance=_imbalance(args), reserve_gib=_reserve(args), mcore_version=args.mcore_version,
                cal=args.cal, fsdp=args.fsdp, fsdp_double_buffer=args.fsdp_double_buffer, **_numerics(args))


def _sweep_table(rows: list[dict[str, Any]], narrow: bool) -> Table:
    from moeplan.report import no_plan_reason, plan_layout_label

    table = _table("Sequence-length sweep", narrow)
    for col in ("seq", "GBS"):
        _num_column(table, col)
    _text_column(table, "layout", min_width=13 if narrow else None)
    _text_column(table, "recompute", ratio=1 if narrow else None)
    if not narrow:
        _text_column(table, "dispatcher")
    for col in (("GiB", "fits", "TFLOP/s", "tok/s") if narrow
                else ("GiB/GPU", "fits", "TFLOP/s/GPU", "TFLOP/s range", "tokens/s/GPU")):
        _num_column(table, col)
    for r in rows:
        if "parallel" not in r:
            cells = [escape(no_plan_reason(r)), "", *([""] if not narrow else []), "", "[red]no", "",
                     *([""] if not narrow else []), ""]
            table.add_row(f"{r['seq_len']:,}", str(r["gbs"]), *cells)
            continue
        cells = [plan_layout_label(r),
                 escape(_wrapping(r["recompute"]))]
        if not narrow:
            cells.append(r["dispatcher"])
        lo, hi = r["tflops_range"]
        cells += [f"{r['memory_gib']['total']:.1f}", "[green]yes" if r["fits"] else "[red]no",
                  f"{r['tflops_per_gpu']:,.0f}", *([] if narrow else [f"{lo:,.0f}-{hi:,.0f}"]),
                  f"{r['tokens_per_s_per_gpu']:,.0f}"]
        table.add_row(f"{r['seq_len']:,}", str(r["gbs"]), *cells)
    return table


def print_sweep(rows: list[dict[str, Any]], console: Console) -> None:
    console.print(_unbroken(console, lambda narrow: _sweep_table(rows, narrow)))
    for r in rows:  # a newer Megatron-Core release that plans faster at a length (plan 1's rationale says it)
        newer = next((x["numbers"] for x in ((r.get("plan") or {}).get("rationale") or ())
                      if x["topic"] == "mcore_version"), None)
        if newer and newer.get("gain") is not None and newer["gain"] > RESOLVED_GAIN:
            console.print(f"[yellow]note:[/] seq {r['seq_len']:,}: {escape(newer['sentence'])}", highlight=False)
    first = next((r for r in rows if r.get("outside_fit_note")), None)
    if first is not None:  # the model's, so every length's: said once, with the first length's band
        console.print(f"[yellow]note:[/] seq {first['seq_len']:,}: {escape(first['outside_fit_note'])}", highlight=False)


def cmd_sweep(args: argparse.Namespace, console: Console) -> int:
    _distinct_outputs(args, plot=args.plot)
    _check_output(args.plot)
    progress = _Progress(_LazyConsole(stderr=True), not args.json, "sweeping")
    try:
        rows = api.sweep(args.model, seq_lens=args.seq_len, gbs_tokens=args.gbs_tokens, hold=_held_layout(args),
                         progress=progress, **_sweep_kwargs(args))
    finally:
        progress.stop()
    fitting = [r for r in rows if "parallel" in r]
    if args.plot and fitting:  # written first: an error leaves nothing printed
        from moeplan import plots

        plots.write_sweep_plot(fitting, args.plot, [r for r in rows if "parallel" not in r])
    if args.json:
        _print_json(_named(rows, args))
    else:
        print_sweep(rows, console)
    if args.plot and fitting:
        _wrote(args.plot, args.json, f"throughput and memory at {len(fitting)} lengths" if len(fitting) == len(rows)
               else f"throughput and memory at {len(fitting)} of {len(rows)} lengths, the others marked")
    elif args.plot:
        Console(stderr=True, width=10_000).print(f"moeplan: no length fits; {args.plot} not written",
                                                 highlight=False, markup=False)
    missing = len(rows) - len(fitting)
    if missing:  # exit 1, said on stderr as every "no answer" is (the rows say why)
        Console(stderr=True, width=10_000).print(f"moeplan: {missing} of {len(rows)} lengths have no plan",
                                                 highlight=False, markup=False)
    return 1 if missing else 0


# explain's flags that a run file says for itself (None / False: not given; explain's parser defaults them so),
# and what the MODEL path takes when they are not given (the other commands' defaults)
_EXPLAIN_FILE_DECIDES = {
    "precision": "--precision", "bf16_grads": "--bf16-grads", "bf16_moments": "--bf16-moments",
    "optimizer": "--optimizer", "mtp_layers": "--mtp-layers", "gbs_tokens": "--gbs-tokens", "hold": "--hold",
    **{k: f"--{k}" for k in ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "recompute", "dispatcher")},
    "optimizer_offload": "--optimizer-offload", "cp_comm_type": "--cp-comm-type", "fsdp": "--fsdp",
    "fsdp_double_buffer": "--fsdp-double-buffer",
}
_EXPLAIN_MODEL_DEFAULTS = {"gpu": DEFAULT_GPU, "mcore_version": DEFAULT_MCORE_VERSION, "precision": "bf16",
                           "optimizer": "adam", "optimizer_offload": 0.0, "cp_comm_type": "p2p", "fsdp": "auto"}


class _NothingToCompare(Exception):
    """A run of the comparison has no layout that fits."""


def _explain_inputs(args: argparse.Namespace) -> tuple[Estimate, Estimate]:
    """Two estimates: two config files, one config at two lengths, or a model at two lengths."""
    from moeplan.models import catalog_names

    first = args.inputs[0]
    is_model = first.lower() in catalog_names() or _looks_like_hf_config(first)
    if len(args.inputs) > 2:
        raise MoeplanError(f"explain compares two runs; got {len(args.inputs)} inputs ({', '.join(args.inputs)})")
    if is_model:
        args = argparse.Namespace(**{**vars(args), **{k: v for k, v in _EXPLAIN_MODEL_DEFAULTS.items()
                                                       if getattr(args, k) is None}})
        if len(args.inputs) == 2:
            raise MoeplanError(f"explain MODEL compares the model at two lengths (--seq-len A,B); the second input "
                               f"'{args.inputs[1]}' would be ignored: give one model, or two run files")
        if len(args.seq_len or []) != 2:
            got = f"; got {len(args.seq_len)}" if args.seq_len else ""
            raise MoeplanError(f"explain MODEL needs --seq-len A,B (two lengths{got}); for more lengths use "
                               "`moeplan sweep`")
        if not args.gpus or not args.gbs_tokens:
            raise MoeplanError("explain MODEL needs --gpus and --gbs-tokens")
        points = api.sweep_points(first, seq_lens=args.seq_len, gbs_tokens=args.gbs_tokens, hold=_held_layout(args),
                                  first_invalid_raises=True, **_sweep_kwargs(args))
        ests = []
        for pt in points:
            if pt.estimate is None:
                raise _NothingToCompare(f"no layout fits at seq {pt.seq_len:,}; nothing to compare")
            ests.append(pt.estimate)
        return ests[0], ests[1]
    from moeplan import checker

    given = [flag for key, flag in _EXPLAIN_FILE_DECIDES.items() if getattr(args, key) not in (None, False)]
    if given:
        raise MoeplanError(f"{', '.join(given)}: explain CONFIG reads {'this' if len(given) == 1 else 'these'} from "
                           "the run files; edit the files, or compare a model at two lengths with "
                           "`moeplan explain MODEL --seq-len A,B`")
    # GPU and versions: the flags where given, else each file's '# moeplan:' comment (its defaults are None);
    # routing imbalance and reserve, which no run file says, from the flags
    files = dict(model=args.model, gpu=args.gpu, gpus=args.gpus, hardware_file=args.hardware, cal=args.cal,
                 te_version=args.te_version, mcore_version=args.mcore_version, moe_imbalance=args.moe_imbalance,
                 reserve_gib=args.reserve_gib, te_grouped_tensor=args.te_grouped_tensor)
    a = checker.estimate_file(first, **files)
    if len(args.inputs) == 2:
        b = checker.estimate_file(args.inputs[1], **files)
    elif args.seq_len and len(args.seq_len) == 1:
        b = checker.estimate_file(first, seq_len=args.seq_len[0], **files)
    else:
        got = f"; got {len(args.seq_len)} lengths" if args.seq_len else ""
        raise MoeplanError(f"explain CONFIG needs a second CONFIG or --seq-len S (one length: run B's{got})")
    return a, b


def _looks_like_hf_config(path: str) -> bool:
    import json
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if p.suffix != ".json" or not p.is_file():
        return False
    try:
        return "model_type" in json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def cmd_explain(args: argparse.Namespace, console: Console) -> int:
    from moeplan.explain import compare, remedy

    try:
        a, b = _explain_inputs(args)
    except _NothingToCompare as exc:
        if args.json:  # a JSON answer on exit 1, as plan ([]) and sweep (rows) give: the same keys, nothing compared
            _print_json(_named({"a": None, "b": None, "reasons": [], "no_answer": str(exc)}, args))
        Console(stderr=True, width=10_000).print(f"moeplan: {exc}", highlight=False, markup=False)
        return 1
    _warn_profile_gpu(args, a.gpu, b.gpu)
    comp = compare(a, b)
    fix = None
    if not args.no_fix:
        found = api.search_like(b.config, top=1, cal=args.cal)  # searched as run B is: its GPU, numerics, versions
        fix = remedy(b, found.best, found.result.newer, a)
    if args.json:
        out = comp.as_dict() | {"no_answer": None}
        if fix:
            out["reasons"].append(fix.as_dict())
        _print_json(_named(out, args))
        return 0
    console.print("[b]Why run B differs from run A[/]")
    for r in comp.reasons + ((fix,) if fix else ()):
        console.print(f" - [b]{r.topic}[/]: {escape(r.text)}", highlight=False)
    return 0


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    from moeplan import report

    _distinct_outputs(args, html=args.html)
    _check_output(args.html, plot=False)
    progress = _Progress(_LazyConsole(stderr=True), not args.json, "planning")
    try:
        found = api.search_plans(args.model, seq_len=args.seq_len, gbs=args.gbs, top=args.top, progress=progress,
                                 **_sweep_kwargs(args))
        result = found.as_dict()
        plans = result["plans"]
        if not plans:
            return _no_fit(result, args.json)
        best = plans[0]
        assert found.best is not None
        est = found.best.estimate.as_dict()  # the plan carries its config and estimate
        tl = None if _schedule_refused(found.best.config) else api.timeline(found.best.config, found.best.gpu, args.cal)
        rows = None
        if args.sweep:
            # the same run settings as the report's plans (numerics, imbalance, reserve, versions); a length with
            # no plan is a row saying why, even where no length has a valid layout (the plans answer the question)
            api.check_gbs_tokens(args.sweep, args.gbs * args.seq_len, "the token budget (--gbs x --seq-len)")
            rows = api.sweep(args.model, seq_lens=args.sweep, gbs_tokens=args.gbs * args.seq_len, progress=progress,
                             all_invalid_raises=False, **_sweep_kwargs(args))
    finally:
        progress.stop()
    title = f"{result['model']} on {args.gpus} x {result['gpu']}, seq {args.seq_len:,}, GBS {result['gbs']}"
    if args.profile is not None:
        title += f" ({args.profile.describe()})"
    report.write_html_report(args.html, title=title, plans=plans, estimate=est, sweep=rows,
                             overrides=best["overrides"], rationale=[f"{r['topic']}: {r['text']}" for r in best["rationale"]],
                             ranks=est["memory_ranks_gib"], timeline=tl, notes=result["notes"])
    if args.json:  # what the page shows, as plan and sweep print it
        _print_json(_named({"html": str(args.html), "plans": plans, "sweep": rows, "notes": result["notes"]}, args))
    missing = sum("parallel" not in r for r in rows or ())
    sweep = (f", sweep of {len(rows)} length{'s' * (len(rows) != 1)}" + (f", {missing} without a plan" if missing else "")
             if rows else "")
    _wrote(args.html, args.json, f"{len(plans)} plans{sweep}")
    return 0


# --------------------------------------------------------------------------- check


def cmd_check(args: argparse.Namespace, console: Console) -> int:
    from moeplan import checker

    _distinct_outputs(args, trace=args.trace)
    _check_trace(args.trace)
    result = checker.check(args.config, model=args.model, gpu=args.gpu, gpus=args.gpus, hardware_file=args.hardware,
                           mcore_version=args.mcore_version, headroom=args.headroom, run_mcore=args.mcore,
                           cal=args.cal, te_version=args.te_version, te_grouped_tensor=args.te_grouped_tensor,
                           moe_imbalance=args.moe_imbalance, reserve_gib=args.reserve_gib)
    _warn_profile_gpu(args, result.gpu)
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
            _write_trace(args.trace, tl)
    if args.json:
        _print_json(_named(result.as_dict(), args))
    else:
        if result.estimate is not None:
            print_estimate(result.estimate.as_dict(), console)
        table = _table(f"Findings for {args.config} ({result.kind})", console.width < NARROW_COLUMNS)
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
        _wrote(args.trace, args.json, _trace_note(tl))
    elif args.trace:
        Console(stderr=True, width=10_000).print(f"moeplan: no trace written to {args.trace}: {no_trace}",
                                                 highlight=False, markup=False)
    # a file with errors exits 1 with or without --trace (its findings say why no trace was written)
    return 1 if result.errors else 2 if no_trace else 0


# --------------------------------------------------------------------------- calibrate


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def print_calibration(result: dict[str, Any], console: Console) -> None:
    table = Table(title=f"Runs: measured vs estimated ({result['gpu']}); error = measured / estimate - 1")
    for col in ("log", "run", "steady s/step (spread)", "TFLOP/s/GPU", "default", "err", "calibrated", "err",
                "peak alloc GiB", "estimate", "err"):
        table.add_column(col, justify="left" if col in ("log", "run") else "right", overflow="fold")
    for r in result["runs"]:
        st = r["steady_state"]
        run = f"{r['model']} {r['gpus']}x {r['layout']} {r['dispatcher']}{' +ovl' if r['ep_overlap'] else ''}"
        src = "" if r["measured_tflops_source"] == "log" else "*"
        meas_mem = r["measured_peak_allocated_gib"]
        table.add_row(escape(r["log"]), escape(run),
                      f"{r['measured_step_time_s']:.3f} (±{st['spread'] / 2:.1%}, {len(st['iterations_used'])} it)",
                      f"{r['measured_tflops_per_gpu']:.1f}{src}", f"{r['default_tflops_per_gpu']:.1f}",
                      _pct(r["default_error"]), f"{r['calibrated_tflops_per_gpu']:.1f}", _pct(r["calibrated_error"]),
                      "-" if meas_mem is None else f"{meas_mem:.2f}", f"{r['estimated_peak_allocated_gib']:.2f}",
                      _pct(None if meas_mem is None else meas_mem / r["estimated_peak_allocated_gib"] - 1))
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
    console.print(f"not moved ({len(result['not_moved'])}): {', '.join(result['not_moved'])}", highlight=False)


def cmd_calibrate(args: argparse.Namespace, console: Console) -> int:
    from moeplan import calibrate

    _distinct_outputs(args, inputs=[(f"LOG {log}", log) for log in args.logs], out=args.out)  # never over a log
    _check_output(args.out, plot=False)
    result = api.calibrate(args.logs, model=args.model, gpu=args.gpu, sets=args.set, hardware_file=args.hardware,
                           warmup_iters=args.warmup)
    if args.out:
        write_bytes(args.out, calibrate.profile_yaml(result).encode())
    if args.json:
        _print_json(result)
    else:
        print_calibration(result, console)
    if args.out:
        _wrote(args.out, args.json, f"{len(result['constants'])} constant(s) from {len(result['runs'])} run(s)")
    return 0


# --------------------------------------------------------------------------- parser


EPILOG = """\
examples:
  moeplan models
  moeplan hardware
  moeplan estimate qwen3-30b-a3b --gpu h100 --gpus 16 --seq-len 4k --gbs 1024 --ep 16
  moeplan plan deepseek-v3 --gpu h100 --gpus 1024 --seq-len 128k --gbs 1024
  moeplan params deepseek-v3 --seq-len 128k
  moeplan params ./my-model/config.json --json

MODEL is a built-in catalog name (see `moeplan models`) or a path to a Hugging Face config.json.
Every command takes --json for scripts. Exit codes: 0 an answer; 1 a valid question with no answer:
plan/report: no layout fits (one line on stderr names the closest run); sweep: a length has no plan (its
row says why; one line on stderr counts them); check: the file has errors (the findings say which, on
stdout; nothing on stderr); explain MODEL --seq-len A,B: no layout fits at a length (one line on
stderr; explain of run files compares a run that does not fit and notes it, exit 0); 2 bad input, with
a one-line message and nothing written; 141 (128 + SIGPIPE) the reader closed the pipe early (`| head`),
no message.
"""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2, no usage dump): `moeplan plan: error: ...`."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


TRACE_HELP = ("write one iteration as a Chrome trace-event JSON (open in https://ui.perfetto.dev or chrome://tracing): "
              "one process per pipeline rank; forwards and backwards in Megatron-Core's interleaved 1F1B order, "
              "compute and TP/CP/EP/PP/DP communication tracks, recompute, optimizer, offload; the most loaded "
              f"rank's memory as a counter. Beyond {TRACE_DETAIL_MICROBATCHES} micro-batches only the first and the last "
              f"{TRACE_DETAIL_MICROBATCHES // 2} carry the items nested in their operations (GEMMs, attention, communication: "
              "every other operation repeats them exactly); every operation, flow and memory change stays, and the "
              "file's otherData says so. A FILE.json.gz (or .gz) name writes it gzip-compressed, which both open "
              "(~10x smaller)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="moeplan",
        description="Plan, check and explain long-context MoE training runs on Megatron Bridge / Megatron-Core.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    p = sub.add_parser(
        "models", help="list the built-in model catalog",
        description="The built-in models: architecture (MLA, GQA-MoE, hybrid Gated DeltaNet), layers, routed "
        "experts and top-k, total and active parameters (B = 1e9). Any command's MODEL is one of these names or "
        "the path to a Hugging Face config.json.",
        epilog="examples:\n  moeplan models\n  moeplan models --json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_models)

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

    p = sub.add_parser("hardware", help="list the GPU catalog (and a user file)",
                       description="GPU catalog: HBM, peak FLOP/s, NVLink and scale-out bandwidth, host link. "
                       "--hardware FILE.yaml adds or overrides entries (e.g. `base: h100` with 200 Gb/s NICs); the file format, "
                       f"every field with its unit, and an example: {HARDWARE_DOC}.",
                       epilog="examples:\n  moeplan hardware\n  moeplan hardware --hardware examples/hardware_h100_200g.yaml --json",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hardware", metavar="FILE.yaml", help=HARDWARE_HELP)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_hardware)

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
    p.add_argument("--top", type=positive_int, default=5,
                   help=f"plans to show (default 5); the search refines {REFINE_MIN} layouts whatever --top asks up to "
                        f"{REFINE_MIN // 2}, so plan 1 is the same for any of them (beyond, 2 layouts per plan)")
    p.add_argument("--headroom", type=float, default=DEFAULT_HEADROOM,
                   help=f"share of HBM left free (default {DEFAULT_HEADROOM:.2f})")
    p.add_argument("--format", default="table",
                   choices=["table", "overrides", "yaml", "megatron-lm", "bridge-launch", "perf-launch"],
                   help="output: table (default), or the best plan as overrides / YAML / Megatron-LM flags / a Megatron "
                        "Bridge launch command (train.sh or the performance setup_experiment.py; Megatron-Core 0.19)")
    for name in ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs"):
        p.add_argument(f"--{name}", type=positive_int, help=f"fix {name.upper()} instead of searching it")
    p.add_argument("--dispatcher", choices=["auto", *DISPATCHERS], help="fix the dispatcher")
    p.add_argument("--recompute", help="fix recompute (none, full, selective:...)")
    p.add_argument("--no-cuda-graphs", action="store_true", help="do not consider CUDA graphs")
    p.add_argument("--no-offload", action="store_true", help="do not consider optimizer CPU offload")
    _fsdp_search_argument(p)
    p.add_argument("--keep-gbs", action="store_true", help="never lower GBS when nothing fits")
    p.add_argument("--trace", metavar="FILE.json", help=TRACE_HELP.replace("write one iteration", "write plan 1's iteration"))
    p.add_argument("--save-strategy", metavar="FILE.yaml",
                   help="write the best plan's strategy (layout, batch, knobs) for `moeplan estimate --strategy`")
    p.add_argument("--json", action="store_true", help="print the list of plans as JSON ([] when nothing fits)")
    p.add_argument("--stats", action="store_true", help="print the search's statistics on stderr: layouts "
                   "considered, fully evaluated (after the cheap bounds) and fitting, and the search time")
    p.set_defaults(handler=cmd_plan)

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
    _sweep_arguments(p)
    p.add_argument("--plot", metavar="FILE", help="write throughput and memory vs sequence length (PNG or SVG)")
    p.add_argument("--json", action="store_true", help="print JSON rows")
    p.set_defaults(handler=cmd_sweep)

    p = sub.add_parser(
        "explain", help="why one run is slower than another, and what fixes it",
        description="Compare two runs: name every setting that differs (model, GPU, GPU count, precision, length, "
        "batch, layout, knobs) and attribute the throughput change to the time model's items (attention "
        "FLOPs share, exposed CP/EP/PP/DP communication, recompute, bubble) and memory; then ask the planner "
        "what fixes the second run. Inputs: MODEL with --seq-len A,B; CONFIG_A CONFIG_B; or CONFIG --seq-len B. "
        "For run files --gpu, --gpus, --mcore-version and --te-version default to each file's '# moeplan:' "
        "comment (moeplan's exports carry one); --moe-imbalance and --reserve-gib, which no file says, apply to both "
        "runs; what a file says itself (precision, grad and moment dtypes, layout, recompute) comes from the file. "
        "The remedy is searched as run B runs: its GPU, numerics, imbalance, reserve and versions.",
        epilog="examples:\n  moeplan explain qwen3-next-80b-a3b --gpu gb200 --gpus 32 --seq-len 32k,64k --gbs-tokens 1m\n"
        "  moeplan explain run32k.yaml run64k.yaml --model qwen3-next-80b-a3b --gpu gb200 --gpus 32",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="MODEL|CONFIG", help="a model, or one or two run configs")
    p.add_argument("--model", help="model of the config files (catalog name or config.json)")
    _sweep_arguments(p, required=False, seq_help="with MODEL: the two lengths to compare, A,B (e.g. 32k,64k); with "
                     "one CONFIG: the length of run B (e.g. 64k)")
    # run files: an unset --gpu / --mcore-version means the file's '# moeplan:' comment; the flags a file says
    # itself are refused with files; MODEL fills the usual defaults (_EXPLAIN_MODEL_DEFAULTS)
    p.set_defaults(gpu=None, mcore_version=None, precision=None, optimizer=None, optimizer_offload=None,
                   cp_comm_type=None, fsdp=None)
    p.add_argument("--no-fix", action="store_true", help="skip the planner's remedy")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_explain)

    p = sub.add_parser(
        "report", help="one self-contained HTML page: plan, overrides, breakdowns, rationale",
        description="Plan, then write an HTML report with the plans, the best plan's memory and time breakdowns "
        "(plots embedded), its Megatron Bridge overrides and rationale, and optionally a sequence-length sweep.",
        epilog="example: moeplan report deepseek-v3 --gpu h100 --gpus 1024 --seq-len 128k --gbs 1024 --html plan.html")
    add_run_arguments(p, layout=False)
    p.add_argument("--top", type=positive_int, default=5, help="plans in the table (default 5)")
    _fsdp_search_argument(p)
    p.add_argument("--sweep", type=parse_lengths, help="also sweep these lengths, e.g. 32k,64k,128k")
    p.add_argument("--html", required=True, metavar="FILE", help="output HTML file")
    p.add_argument("--json", action="store_true", help="print what the page shows as JSON: the plans (as plan --json "
                   "prints them), the sweep rows (as sweep --json) and the search's notes, with the file written")
    p.set_defaults(handler=cmd_report)

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
    _unsaid_arguments(p, from_file=True)
    _calibration_argument(p)
    p.add_argument("--mcore-version", help=f"Megatron-Core version the config targets (default {DEFAULT_MCORE_VERSION})")
    p.add_argument("--te-version", help=TE_VERSION_HELP + "; default: the file's '# moeplan:' comment, else "
                   f"{DEFAULT_TE_VERSION}")
    p.add_argument("--te-grouped-tensor", action="store_true",
                   help=TE_GROUPED_TENSOR_HELP + f"; default: on where the file's '# moeplan:' comment sets {GROUPED_TENSOR_ENV}=1")
    p.add_argument("--headroom", type=float, default=0.0,
                   help="share of HBM the run must leave free (default 0); recommended fixes always keep at least "
                        f"the planner's {DEFAULT_HEADROOM:.0%}".replace("%", "%%"))
    p.add_argument("--mcore", action="store_true", help="also run Megatron-Core's TransformerConfig checks (needs the mcore extra: pip install 'moeplan[mcore]'; refused, exit 2, where megatron-core cannot be imported; a warning, not an error, where the installed release is not the file's target or Transformer Engine is missing where Megatron checks its version)")
    p.add_argument("--trace", metavar="FILE.json", help=TRACE_HELP.replace("write one iteration", "write the run's iteration"))
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_check)
    return parser


def _cluster_arguments(p: argparse.ArgumentParser, required: bool) -> None:
    """GPU, count, precision and the modelling knobs every estimating command takes."""
    p.add_argument("--gpu", default=DEFAULT_GPU, help=f"GPU name from `moeplan hardware` (default {DEFAULT_GPU})")
    p.add_argument("--gpus", type=positive_int, required=required, help="total GPU count")
    p.add_argument("--precision", default="bf16", choices=list(PRECISIONS),
                   help="GEMM precision: fp8 = blockwise (Hopper), fp8-cs current scaling, mxfp8 (Blackwell)")
    p.add_argument("--hardware", metavar="FILE.yaml", help=HARDWARE_HELP)
    p.add_argument("--mtp-layers", type=nonnegative_int, default=None, metavar="N",
                   help="multi-token prediction modules trained (Megatron-Core mtp_num_layers; default: the model's "
                        "config, none for Qwen3-Next, whose checkpoint holds one and whose Bridge recipes train 1)")
    _unsaid_arguments(p)
    _calibration_argument(p)
    p.add_argument("--mcore-version", default=DEFAULT_MCORE_VERSION,
                   help=f"Megatron-Core version targeted: field names, allowed values, rules (default {DEFAULT_MCORE_VERSION})")
    p.add_argument("--te-version", help=TE_VERSION_HELP)
    p.add_argument("--te-grouped-tensor", action="store_true", help=TE_GROUPED_TENSOR_HELP)
    p.add_argument("--bf16-grads", action="store_true",
                   help="main grads reduced and accumulated in bf16 (grad_reduce_in_fp32=False, as Megatron Bridge "
                        "perf recipes do); default fp32")
    p.add_argument("--bf16-moments", action="store_true",
                   help="precision-aware optimizer with bf16 Adam moments (exp_avg/exp_avg_sq, as the DeepSeek-V3 "
                        "recipes do); default fp32")
    p.add_argument("--optimizer", default="adam", choices=list(OPTIMIZERS),
                   help="adam (distributed optimizer or Megatron-FSDP) or muon (Megatron-Core 0.16+ dist_muon: one "
                        "fp32 momentum per 2-D weight, Newton-Schulz each step; embeddings, output layer and norms "
                        "stay on Adam; no CPU offload or bf16 moments); default adam")


def _fsdp_search_argument(p: argparse.ArgumentParser) -> None:
    """--fsdp and --fsdp-double-buffer of the searching commands (plan, report)."""
    p.add_argument("--fsdp", default="auto", choices=["auto", "off", *FSDP_STRATEGIES],
                   help="Megatron-FSDP: auto = search optim_grads_params beside the distributed optimizer (default), "
                        "off = distributed optimizer only, or pin a data_parallel_sharding_strategy")
    _fsdp_buffer_argument(p)


def _imbalance(args: argparse.Namespace) -> float:
    """--moe-imbalance as the planning commands take it (unset: force-balanced routing, 1.0)."""
    return 1.0 if args.moe_imbalance is None else float(args.moe_imbalance)


def _reserve(args: argparse.Namespace) -> float:
    """--reserve-gib as the planning commands take it (unset, where a run file could say it: the default)."""
    return DEFAULT_RESERVE_GIB if args.reserve_gib is None else float(args.reserve_gib)


def _unsaid_arguments(p: argparse.ArgumentParser, from_file: bool = False) -> None:
    """What no Megatron field says: routing imbalance and the memory reserve (``from_file``: check, where a
    moeplan export's '# moeplan:' comment says what its plan assumed, and an unset flag takes that; explain of run
    files reads it the same way, whose unset flag is None too: :func:`_imbalance` for the planning commands)."""
    said = ", else a run file's '# moeplan:' comment" if from_file else ""
    p.add_argument("--moe-imbalance", type=float, default=None,
                   help=f"tokens on the busiest expert rank / mean; 1.0 = force-balanced routing (default{said}); capped "
                        "per layout at EP x min(top-k, local experts) / top-k, every token on one rank")
    p.add_argument("--reserve-gib", type=float, default=None,
                   help=f"GiB per GPU kept for CUDA context, NCCL and fragmentation (default {DEFAULT_RESERVE_GIB:g}, or "
                        f"the --calibration profile's{said})")


def _calibration_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calibration", metavar="PROFILE.yaml",
                   help="timing constants (and memory reserve) fitted to your cluster by `moeplan calibrate --out`")


def _apply_profile(args: argparse.Namespace) -> None:
    """Load --calibration once: ``args.cal`` (the timing constants) and the reserve when not given.
    Commands without --calibration estimate no time: they get no constants (and skip importing the
    timing engine: start-up time of `moeplan models`)."""
    args.profile = None
    args.cal = None
    if not hasattr(args, "calibration"):
        return
    from moeplan.timing import DEFAULT_CALIBRATION

    args.cal = DEFAULT_CALIBRATION
    if getattr(args, "calibration", None):
        from moeplan.calibrate import load_profile

        args.profile = load_profile(args.calibration, getattr(args, "hardware", None))
        args.cal = args.profile.calibration
        other = args.profile.other_gpu(getattr(args, "gpu", None), getattr(args, "hardware", None))
        if other:  # a warning, not an error: the run goes on with the profile's constants
            sys.stderr.write(f"moeplan: warning: {other}\n")
    if hasattr(args, "reserve_gib") and args.reserve_gib is None and args.profile is not None:
        # the profile's fitted reserve where the flag is unset; still unset, check and explain take a run file's
        # '# moeplan:' comment and the planning commands the default (_reserve)
        args.reserve_gib = args.profile.reserve_gib


def _warn_profile_gpu(args: argparse.Namespace, *gpus: GPUSpec) -> None:
    """_apply_profile's warning for a profile fitted on another GPU, where the run's GPU is not the --gpu flag but
    what a run file says (its '# moeplan:' comment, else the default): once per GPU, after the files are read."""
    if getattr(args, "profile", None) is None or getattr(args, "gpu", None) is not None:
        return  # no profile, or --gpu given: _apply_profile has warned already
    for name in dict.fromkeys(g.name for g in gpus):
        g = next(g for g in gpus if g.name == name)
        other = args.profile.other_gpu(g.name, g.hardware_file or getattr(args, "hardware", None))
        if other:
            sys.stderr.write(f"moeplan: warning: {other}\n")


def _named(obj: Any, args: argparse.Namespace) -> Any:
    """JSON output naming the calibration profile it used (each row of a list)."""
    if getattr(args, "profile", None) is None:
        return obj
    name = args.profile.path
    if isinstance(obj, dict):
        return {**obj, "calibration": name}
    if isinstance(obj, list):
        return [{**r, "calibration": name} if isinstance(r, dict) else r for r in obj]
    return obj


def _announce_profile(args: argparse.Namespace, console: Console) -> None:
    """Table output names the profile first (stderr where stdout is a pasteable format)."""
    profile = getattr(args, "profile", None)
    if profile is None or getattr(args, "json", False):
        return
    line = f"using {profile.describe()}"
    if getattr(args, "format", "table") == "table":
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    else:
        Console(stderr=True, width=10_000).print(line, highlight=False, markup=False)


def _gbs_is_tokens_here(text: str) -> int:
    raise argparse.ArgumentTypeError(
        f"the tokens per global batch are held constant across lengths here: give --gbs-tokens (e.g. 4m, or "
        f"GBS x seq-len), not --gbs {text}")


def _sweep_arguments(p: argparse.ArgumentParser, required: bool = True,
                     seq_help: str = "comma-separated lengths, e.g. 16k,32k,64k") -> None:
    p.add_argument("--seq-len", type=parse_lengths, required=required, help=seq_help)
    p.add_argument("--gbs-tokens", type=parse_tokens, required=required,
                   help="tokens per global batch, constant across lengths (e.g. 4m); GBS = tokens / seq")
    # Not an option here: without it argparse would take `--gbs N` (sequences, as plan and estimate read it)
    # as an abbreviation of --gbs-tokens N and silently plan N tokens per batch.
    p.add_argument("--gbs", type=_gbs_is_tokens_here, help=argparse.SUPPRESS)
    _cluster_arguments(p, required)
    p.add_argument("--hold", action="store_true", help="hold the layout given by the flags below at every length")
    for name in ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs"):
        p.add_argument(f"--{name}", type=positive_int, help=f"{name.upper()} of the held layout")
    p.add_argument("--recompute", help="recompute of the held layout (none, full, selective:...)")
    p.add_argument("--dispatcher", choices=["auto", *DISPATCHERS],
                   help="MoE token dispatcher of the held layout (auto: the estimates' choice for the GPU)")
    p.add_argument("--optimizer-offload", type=float, default=0.0, metavar="F",
                   help="fraction 0-1 of the held layout's optimizer state on the CPU (optimizer_offload_fraction; "
                   "default 0)")
    p.add_argument("--cp-comm-type", default="p2p", choices=list(CP_COMM_TYPES),
                   help="context-parallel communication of the held layout (Megatron-Core cp_comm_type; default p2p)")
    p.add_argument("--fsdp", default="auto", choices=["auto", "off", *FSDP_STRATEGIES],
                   help="Megatron-FSDP: planned lengths search optim_grads_params beside the distributed optimizer "
                        "(auto, default), never (off), or pin a data_parallel_sharding_strategy; a held layout runs the "
                        "strategy given, else the distributed optimizer")
    _fsdp_buffer_argument(p)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console: Any = _LazyConsole() if sys.stdout.isatty() or os.environ.get("COLUMNS") else _LazyConsole(width=160)
    err: Any = _LazyConsole(stderr=True)
    try:
        _apply_profile(args)
        _announce_profile(args, console)
        code = int(args.handler(args, console))
        sys.stdout.flush()  # a closed pipe raises here, not in the interpreter's flush at exit
        return code
    except MoeplanError as exc:
        err.print(f"moeplan: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`moeplan plan ... | head`): stop quietly with 141 (128 + SIGPIPE, what a shell
        # reports for a filter the pipe ended; not 1, "no answer"), stdout pointed at /dev/null so that the
        # interpreter's final flush does not raise again (Python docs, "Note on SIGPIPE")
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
