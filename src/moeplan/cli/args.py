"""Argument types (token counts, lengths, positive integers), the argument groups several commands share
(cluster, run layout and knobs, sweep, unsaid settings) and the keyword arguments they become."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from moeplan.base.argcheck import token_count
from moeplan.base.errors import MoeplanError
from moeplan.base.limits import run_problem, sweep_lengths_problem
from moeplan.base.routing import ROUTINGS, resolve_file_imbalance, resolve_imbalance
from moeplan.base.vocab import DEFAULT_GPU, TRACE_DETAIL_MICROBATCHES
from moeplan.cli.output import api, read_strategy
from moeplan.run.knobs import (FSDP_SEARCH, TE_GROUPED_TENSOR_HELP, TE_VERSION_HELP, Knob, flag_dest, flag_kwargs,
                               flag_names, flag_value, fsdp_choices, knob_named, knob_table)


HARDWARE_DOC = "docs/hardware.md (example: examples/hardware_h100_200g.yaml)"
HARDWARE_HELP = f"extra GPU definitions; format, units and an example in {HARDWARE_DOC}"


def parse_tokens(text: str, bound: str = "seq_len") -> int:
    """'128k' -> 131072, '4096' -> 4096, '1m' -> 1048576 (moeplan.base.argcheck.token_count, which the web page reads
    too), within the bound of the run size ``bound`` (moeplan.base.limits)."""
    try:
        value = token_count(text)
    except MoeplanError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return _within(bound, value)


def parse_batch_tokens(text: str) -> int:
    """--gbs-tokens: :func:`parse_tokens` within the bound of tokens per batch."""
    return parse_tokens(text, "gbs_tokens")


def _within(name: str, value: int) -> int:
    """``value`` within moeplan.base.limits' bound of the run size ``name`` (argparse's one-line error past it)."""
    problem = run_problem(name, value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def bounded_int(name: str, least: int = 1) -> Callable[[str], int]:
    """An argparse type: an integer >= ``least`` within the bound of the run size ``name`` (moeplan.base.limits)."""
    def parse(text: str) -> int:
        return _within(name, _int_from(text, least, "positive" if least == 1 else f">= {least}"))
    parse.__name__ = name  # argparse's 'invalid <name> value'
    return parse


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
    """A GPU count or a parallel size: positive, within the GPU-count bound (moeplan.base.limits)."""
    return _within("gpus", _int_from(text, 1, "positive"))


def nonnegative_int(text: str) -> int:
    return _int_from(text, 0, ">= 0")


def add_run_arguments(p: argparse.ArgumentParser, layout: bool = True) -> None:
    """Arguments shared by estimate / plan / report (estimate: --seq-len and --gbs may come from --strategy)."""
    p.add_argument("model", metavar="MODEL", help="catalog name or path to config.json")
    p.add_argument("--seq-len", type=parse_tokens, required=not layout, help="sequence length, e.g. 32k, 128k")
    p.add_argument("--gbs", type=bounded_int("gbs"), required=not layout, help="global batch size in sequences")
    _cluster_arguments(p, required=True)
    if layout:
        p.add_argument("--mbs", type=positive_int, default=1, help="micro-batch size (default 1)")
        for name, what in (("tp", "tensor"), ("pp", "pipeline"), ("vpp", "virtual pipeline (chunks per rank)"),
                           ("cp", "context"), ("ep", "expert"), ("etp", "expert tensor")):
            p.add_argument(f"--{name}", type=positive_int, default=1, help=f"{what} parallel size (default 1)")
        p.add_argument("--pipeline-layout", help="Megatron pipeline_model_parallel_layout, e.g. 'Et|(tt|)*30mL'")
        add_knob_flags(p, "layout")
        _fsdp_buffer_argument(p)


# Where the knob table's flags stand in --help, per slot (moeplan.run.knobs: a flag's ``slot``): the order they have
# always been listed in; a knob not named here follows them in field order.
FLAG_ORDER: dict[str, tuple[str, ...]] = {
    "layout": ("recompute", "dispatcher", "ep_overlap", "delay_wgrad", "cuda_graph_scopes", "optimizer_offload",
               "offload_modules", "cp_comm_type", "capacity_factor", "rank_capacity_factor", "fsdp"),
    "cluster": ("mcore_version", "te_version", "te_grouped_tensor", "grad_fp32", "bf16_moments", "optimizer"),
}


def slot_knobs(slot: str) -> list[Knob]:
    """The knobs whose flag stands in ``slot``, in --help order (:data:`FLAG_ORDER`)."""
    order = FLAG_ORDER.get(slot, ())
    knobs = [k for k in knob_table() if k.flag is not None and k.flag["slot"] == slot]
    return sorted(knobs, key=lambda k: order.index(k.name) if k.name in order else len(order))


def add_knob_flags(p: argparse.ArgumentParser, slot: str) -> None:
    """The flags of the knob table (moeplan.run.knobs) that stand in ``slot``."""
    for k in slot_knobs(slot):
        p.add_argument(*flag_names(k), **flag_kwargs(k))


def knob_kwargs(args: argparse.Namespace, slot: str) -> dict[str, Any]:
    """The API keywords of the knob flags of ``slot``, from the parsed flags."""
    return {k.api: flag_value(k, getattr(args, flag_dest(k))) for k in slot_knobs(slot)}


def _fsdp_buffer_argument(p: argparse.ArgumentParser) -> None:
    add_knob_flags(p, "fsdp")


def _numerics(args: argparse.Namespace) -> dict[str, Any]:
    """Gradient and Adam-moment dtypes, the optimizer, the releases and the other knobs every estimating command
    takes (the knob table's ``cluster`` flags), and the model's MTP depth: passed to every estimating command."""
    return {**knob_kwargs(args, "cluster"), "mtp_layers": args.mtp_layers}


def run_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kw: dict[str, Any] = dict(
        gpu=args.gpu, gpus=args.gpus, seq_len=args.seq_len, gbs=args.gbs, **knob_kwargs(args, "gpu"),
        hardware_file=args.hardware, moe_imbalance=_imbalance(args), reserve_gib=_reserve(args), cal=args.cal,
        **_numerics(args),
    )
    if hasattr(args, "tp"):
        kw.update(mbs=args.mbs, tp=args.tp, pp=args.pp, vpp=args.vpp, cp=args.cp, ep=args.ep, etp=args.etp,
                  pipeline_layout=args.pipeline_layout, **knob_kwargs(args, "layout"), **knob_kwargs(args, "fsdp"))
    return kw


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


def fixed(args: argparse.Namespace) -> dict[str, Any]:
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


def parse_lengths(text: str) -> list[int]:
    items = [t.strip() for t in text.split(",")]
    if any(not t for t in items):
        raise argparse.ArgumentTypeError(f"empty item in '{text}': give comma-separated lengths, e.g. 16k,32k,64k")
    problem = sweep_lengths_problem(len(items))
    if problem:
        raise argparse.ArgumentTypeError(problem)
    out = [parse_tokens(t) for t in items]
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"a length appears twice in '{text}'")
    return out


# The parallel sizes and the micro-batch of a layout held across lengths (sweep, explain MODEL)
HELD_SIZES = ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs")


def held_knobs() -> list[Knob]:
    """The knobs of a layout held across lengths (sweep --hold, explain MODEL): the knob table's ``layout`` slot,
    the knobs one run's layout takes (estimate's flags), but fsdp, whose sweep flag is the search's word (a held
    layout runs the strategy it names: :func:`sweep_kwargs`)."""
    return [k for k in slot_knobs("layout") if k.api != "fsdp"]


def held_layout(args: argparse.Namespace) -> dict[str, Any] | None:
    """The layout held at every length: the sizes given and every held knob (:func:`held_knobs`) by its API keyword,
    its API default where its flag is unset; None where no size is given and --hold is not (each length planned)."""
    held = {k: getattr(args, k) for k in HELD_SIZES if getattr(args, k, None) is not None}
    if not held and not args.hold:
        return None
    return held | {k.api: flag_value(k, getattr(args, flag_dest(k))) for k in held_knobs()}


def sweep_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The cluster and run settings (_cluster_arguments, and Megatron-FSDP) as API keywords: plan, a report's
    plans and its sweep rows, a sweep, explain's MODEL lengths."""
    return dict(gpu=args.gpu, gpus=args.gpus, **knob_kwargs(args, "gpu"), hardware_file=args.hardware,
                moe_imbalance=_imbalance(args), reserve_gib=_reserve(args), cal=args.cal, fsdp=args.fsdp,
                **knob_kwargs(args, "fsdp"), **_numerics(args))


TRACE_HELP = ("write one iteration as a Chrome trace-event JSON (open in https://ui.perfetto.dev or chrome://tracing): "
              "one process per pipeline rank; forwards and backwards in Megatron-Core's interleaved 1F1B order, "
              "compute and TP/CP/EP/PP/DP communication tracks, recompute, optimizer, offload; the most loaded "
              f"rank's memory as a counter. Beyond {TRACE_DETAIL_MICROBATCHES} micro-batches only the first and the last "
              f"{TRACE_DETAIL_MICROBATCHES // 2} carry the items nested in their operations (GEMMs, attention, communication: "
              "every other operation repeats them exactly); every operation, flow and memory change stays, and the "
              "file's otherData says so. A FILE.json.gz (or .gz) name writes it gzip-compressed, which both open "
              "(~10x smaller)")


def _cluster_arguments(p: argparse.ArgumentParser, required: bool) -> None:
    """GPU, count, precision and the modelling knobs every estimating command takes."""
    p.add_argument("--gpu", default=DEFAULT_GPU, help=f"GPU name from `moeplan hardware` (default {DEFAULT_GPU})")
    p.add_argument("--gpus", type=positive_int, required=required, help="total GPU count")
    add_knob_flags(p, "gpu")
    p.add_argument("--hardware", metavar="FILE.yaml", help=HARDWARE_HELP)
    p.add_argument("--mtp-layers", type=bounded_int("mtp_layers", 0), default=None, metavar="N",
                   help="multi-token prediction modules trained (Megatron-Core mtp_num_layers; default: the model's "
                        "config, none for Qwen3-Next, whose checkpoint holds one and whose Bridge recipes train 1)")
    unsaid_arguments(p)
    calibration_argument(p)
    add_knob_flags(p, "cluster")


def fsdp_search_argument(p: argparse.ArgumentParser) -> None:
    """--fsdp and --fsdp-double-buffer of the searching commands (plan, report)."""
    p.add_argument("--fsdp", default=FSDP_SEARCH, choices=list(fsdp_choices(search=True)), metavar="MODE",
                   help="Megatron-FSDP (%(choices)s): auto = search optim_grads_params beside the distributed optimizer "
                        "(default), off = distributed optimizer only, or pin a data_parallel_sharding_strategy")
    _fsdp_buffer_argument(p)


def _imbalance(args: argparse.Namespace) -> float:
    """--moe-imbalance as the planning commands take it (unset: the --routing's, force-balanced 1.0 by default;
    natural: the calibration's natural_routing_imbalance): moeplan.base.routing.resolve_imbalance, as the API, the
    MCP tools and the page resolve it, which refuses both flags together."""
    return float(resolve_imbalance(getattr(args, "routing", None), args.moe_imbalance, args.cal.natural_routing_imbalance,
                                   names=("--routing", "--moe-imbalance")))


def file_imbalance(args: argparse.Namespace) -> float | None:
    """--routing / --moe-imbalance as the commands that read run files take them (check, explain of configs): None
    where neither is given (each file's '# moeplan:' comment decides); moeplan.base.routing.resolve_file_imbalance."""
    return resolve_file_imbalance(args.routing, args.moe_imbalance, args.cal.natural_routing_imbalance,
                                  names=("--routing", "--moe-imbalance"))


def _reserve(args: argparse.Namespace) -> float:
    """--reserve-gib as the planning commands take it (unset, where a run file could say it: the knob table's
    default, as the API's keyword and the strategy file take it)."""
    return knob_named("reserve_gib").api_default if args.reserve_gib is None else float(args.reserve_gib)


def unsaid_arguments(p: argparse.ArgumentParser, from_file: bool = False) -> None:
    """What no Megatron field says: routing imbalance and the memory reserve (``from_file``: check, where a
    moeplan export's '# moeplan:' comment says what its plan assumed, and an unset flag takes that; explain of run
    files reads it the same way, whose unset flag is None too: :func:`_imbalance` for the planning commands)."""
    said = ", else a run file's '# moeplan:' comment" if from_file else ""
    p.add_argument("--moe-imbalance", type=float, default=None,
                   help=f"tokens on the busiest expert rank / mean; 1.0 = force-balanced routing (default{said}); capped "
                        "per layout at EP x min(top-k, local experts) / top-k, every token on one rank")
    p.add_argument("--routing", choices=ROUTINGS, default=None,
                   help=f"routing the estimate assumes: forced (force-balanced, the perf recipes'; default{said}) or "
                        "natural (the router's own choices: the calibration's natural_routing_imbalance)")
    p.add_argument("--reserve-gib", type=float, default=None,
                   help=f"GiB per GPU kept for CUDA context, NCCL and fragmentation (default "
                        f"{knob_named('reserve_gib').api_default:g}, or "
                        f"the --calibration profile's{said})")


def calibration_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calibration", metavar="PROFILE.yaml",
                   help="timing constants (and memory reserve) fitted to your cluster by `moeplan calibrate --out`")


def _gbs_is_tokens_here(text: str) -> int:
    raise argparse.ArgumentTypeError(
        f"the tokens per global batch are held constant across lengths here: give --gbs-tokens (e.g. 4m, or "
        f"GBS x seq-len), not --gbs {text}")


def sweep_arguments(p: argparse.ArgumentParser, required: bool = True,
                     seq_help: str = "comma-separated lengths, e.g. 16k,32k,64k") -> None:
    p.add_argument("--seq-len", type=parse_lengths, required=required, help=seq_help)
    p.add_argument("--gbs-tokens", type=parse_batch_tokens, required=required,
                   help="tokens per global batch, constant across lengths (e.g. 4m); GBS = tokens / seq")
    # Not an option here: without it argparse would take `--gbs N` (sequences, as plan and estimate read it)
    # as an abbreviation of --gbs-tokens N and silently plan N tokens per batch.
    p.add_argument("--gbs", type=_gbs_is_tokens_here, help=argparse.SUPPRESS)
    _cluster_arguments(p, required)
    held = p.add_argument_group("held layout", "with --hold or a size below, this layout is estimated at every "
                                "length (else each length is planned); its knobs are estimate's layout flags")
    held.add_argument("--hold", action="store_true", help="hold the layout given by the flags below at every length")
    for name in HELD_SIZES:
        held.add_argument(f"--{name}", type=positive_int, help=f"{name.upper()} of the held layout")
    for k in held_knobs():
        held.add_argument(*flag_names(k), **flag_kwargs(k))
    p.add_argument("--fsdp", default=FSDP_SEARCH, choices=list(fsdp_choices(search=True)), metavar="MODE",
                   help="Megatron-FSDP (%(choices)s): planned lengths search optim_grads_params beside the distributed optimizer "
                        "(auto, default), never (off), or pin a data_parallel_sharding_strategy; a held layout runs the "
                        "strategy given, else the distributed optimizer")
    _fsdp_buffer_argument(p)
