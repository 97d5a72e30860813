"""``moeplan explain``: why one run is slower than another, and what fixes it."""

from __future__ import annotations

import argparse
import functools
import json
from typing import Any, TYPE_CHECKING

from moeplan.base.errors import MoeplanError
from moeplan.cli.args import file_imbalance, held_layout, sweep_arguments, sweep_kwargs
from moeplan.cli.output import Console, api, escape, print_json
from moeplan.cli.profile import named, warn_profile_gpu

if TYPE_CHECKING:
    from moeplan.engine.estimate import Estimate


# The knobs every estimating command takes that explain of run files reads from the files' '# moeplan:' comment
# (or the flags, where given); the files say every other knob themselves
_FILE_TAKES = frozenset({"mcore_version", "te_version", "te_grouped_tensor"})
# What explain of run files reads from the command line (the argparse destinations _explain_inputs passes to the file
# reader, moeplan.lint.checker.estimate_file, or reads itself): the inputs and their model, the cluster, the
# calibration, _FILE_TAKES, routing and reserve, run B's length and the output switches. Every other flag of
# explain's parser is a setting a run file says itself (_explain_flags), refused beside run files.
_FILES_READ = frozenset({"inputs", "model", "seq_len", "gpu", "gpus", "hardware", "calibration", "routing",
                         "moe_imbalance", "reserve_gib", "no_fix", "json", *_FILE_TAKES})
# Flags explain of run files reads whose unset value (None) means each file's '# moeplan:' comment
_COMMENT_SAYS = ("gpu", "mcore_version")


@functools.cache
def _explain_flags() -> tuple[dict[str, str], dict[str, Any]]:
    """(explain's flags a run file says itself, by argparse destination: every option of its parser but
    :data:`_FILES_READ` and the hidden --gbs, whose type refuses any value; the defaults explain MODEL gives those and
    :data:`_COMMENT_SAYS`, the sweep's), read from explain's arguments (:func:`_explain_arguments`), so a flag
    they gain is refused beside run files until explain reads it. explain's parser defaults all of them to None
    (not given)."""
    p = argparse.ArgumentParser(add_help=False)
    _explain_arguments(p)
    decided = {a.dest: a.option_strings[0] for a in p._actions
               if a.option_strings and a.dest not in _FILES_READ and a.help != argparse.SUPPRESS}
    return decided, {dest: p.get_default(dest) for dest in (*decided, *_COMMENT_SAYS)}


def _model_arguments(args: argparse.Namespace) -> argparse.Namespace:
    """explain MODEL's arguments: each flag explain's parser leaves None (not given) at the sweep's default."""
    return argparse.Namespace(**{**vars(args), **{k: v for k, v in _explain_flags()[1].items()
                                                  if getattr(args, k) is None}})


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
        args = _model_arguments(args)
        if len(args.inputs) == 2:
            raise MoeplanError(f"explain MODEL compares the model at two lengths (--seq-len A,B); the second input "
                               f"'{args.inputs[1]}' would be ignored: give one model, or two run files")
        if len(args.seq_len or []) != 2:
            got = f"; got {len(args.seq_len)}" if args.seq_len else ""
            raise MoeplanError(f"explain MODEL needs --seq-len A,B (two lengths{got}); for more lengths use "
                               "`moeplan sweep`")
        if not args.gpus or not args.gbs_tokens:
            raise MoeplanError("explain MODEL needs --gpus and --gbs-tokens")
        points = api.sweep_points(first, seq_lens=args.seq_len, gbs_tokens=args.gbs_tokens, hold=held_layout(args),
                                  first_invalid_raises=True, **sweep_kwargs(args))
        ests = []
        for pt in points:
            if pt.estimate is None:
                raise _NothingToCompare(f"no layout fits at seq {pt.seq_len:,}; nothing to compare")
            ests.append(pt.estimate)
        return ests[0], ests[1]
    from moeplan.lint import checker

    given = [flag for key, flag in _explain_flags()[0].items() if getattr(args, key) is not None]
    if given:
        raise MoeplanError(f"{', '.join(given)}: explain CONFIG reads {'this' if len(given) == 1 else 'these'} from "
                           "the run files; edit the files, or compare a model at two lengths with "
                           "`moeplan explain MODEL --seq-len A,B`")
    # GPU and versions: the flags where given, else each file's '# moeplan:' comment (its defaults are None);
    # routing imbalance and reserve from the flags, else the comment (routing) or the default
    files = dict(model=args.model, gpu=args.gpu, gpus=args.gpus, hardware_file=args.hardware, cal=args.cal,
                 te_version=args.te_version, mcore_version=args.mcore_version, moe_imbalance=file_imbalance(args),
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
    except (OSError, ValueError, RecursionError):  # the reader says why
        return False


def cmd_explain(args: argparse.Namespace, console: Console) -> int:
    from moeplan.plan.explain import compare, remedy

    try:
        a, b = _explain_inputs(args)
    except _NothingToCompare as exc:
        if args.json:  # a JSON answer on exit 1, as plan ([]) and sweep (rows) give: the same keys, nothing compared
            print_json(named({"a": None, "b": None, "reasons": [], "no_answer": str(exc)}, args))
        Console(stderr=True, width=10_000).print(f"moeplan: {exc}", highlight=False, markup=False)
        return 1
    warn_profile_gpu(args, a.gpu, b.gpu)
    comp = compare(a, b)
    fix = None
    if not args.no_fix:
        found = api.search_like(b.config, top=1, cal=args.cal)  # searched as run B is: its GPU, numerics, versions
        fix = remedy(b, found.best, found.result.newer, a)
    if args.json:
        out = comp.as_dict() | {"no_answer": None}
        if fix:
            out["reasons"].append(fix.as_dict())
        print_json(named(out, args))
        return 0
    console.print("[b]Why run B differs from run A[/]")
    for r in comp.reasons + ((fix,) if fix else ()):
        console.print(f" - [b]{r.topic}[/]: {escape(r.text)}", highlight=False)
    return 0


def add_explain_parser(sub: Any) -> None:
    """``moeplan explain``: its parser."""
    p = sub.add_parser(
        "explain", help="why one run is slower than another, and what fixes it",
        description="Compare two runs: name every setting that differs (model, GPU, GPU count, precision, length, "
        "batch, layout, knobs) and attribute the throughput change to the time model's items (attention "
        "FLOPs share, exposed CP/EP/PP/DP communication, recompute, bubble) and memory; then ask the planner "
        "what fixes the second run. Inputs: MODEL with --seq-len A,B; CONFIG_A CONFIG_B; or CONFIG --seq-len B. "
        "For run files --gpu, --gpus, --mcore-version and --te-version default to each file's '# moeplan:' "
        "comment (moeplan's exports carry one); --routing / --moe-imbalance and --reserve-gib apply to both "
        "runs; what a file says itself (precision, grad and moment dtypes, layout, recompute) comes from the file. "
        "The remedy is searched as run B runs: its GPU, numerics, imbalance, reserve and versions.",
        epilog="examples:\n  moeplan explain qwen3-next-80b-a3b --gpu gb200 --gpus 32 --seq-len 32k,64k --gbs-tokens 1m\n"
        "  moeplan explain run32k.yaml run64k.yaml --model qwen3-next-80b-a3b --gpu gb200 --gpus 32",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    _explain_arguments(p)
    # run files: an unset --gpu / --mcore-version means the file's '# moeplan:' comment; the flags a file says
    # itself are refused with files (given: not None); MODEL fills the sweep's defaults (_explain_flags)
    p.set_defaults(handler=cmd_explain, **dict.fromkeys(_explain_flags()[1]))


def _explain_arguments(p: argparse.ArgumentParser) -> None:
    """explain's arguments: the inputs, the sweep's (moeplan.cli.args.sweep_arguments) and its own switches."""
    p.add_argument("inputs", nargs="+", metavar="MODEL|CONFIG", help="a model, or one or two run configs")
    p.add_argument("--model", help="model of the config files (catalog name or config.json)")
    sweep_arguments(p, required=False, seq_help="with MODEL: the two lengths to compare, A,B (e.g. 32k,64k); with "
                     "one CONFIG: the length of run B (e.g. 64k)")
    p.add_argument("--no-fix", action="store_true", help="skip the planner's remedy")
    p.add_argument("--json", action="store_true", help="print JSON")
