"""The --calibration profile: loaded once before a command runs, named in its output, and a warning where it
was fitted on another GPU."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TYPE_CHECKING

from moeplan.cli.output import Console

if TYPE_CHECKING:
    from moeplan.hardware import GPUSpec


def apply_profile(args: argparse.Namespace) -> None:
    """Load --calibration once: ``args.cal`` (the timing constants) and the reserve when not given.
    Commands without --calibration estimate no time: they get no constants (and skip importing the
    timing engine: start-up time of `moeplan models`)."""
    args.profile = None
    args.cal = None
    if not hasattr(args, "calibration"):
        return
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION

    args.cal = DEFAULT_CALIBRATION
    if getattr(args, "calibration", None):
        from moeplan.calibrate.fit import load_profile

        args.profile = load_profile(args.calibration, getattr(args, "hardware", None))
        args.cal = args.profile.calibration
        other = args.profile.other_gpu(getattr(args, "gpu", None), getattr(args, "hardware", None))
        if other:  # a warning, not an error: the run goes on with the profile's constants
            sys.stderr.write(f"moeplan: warning: {other}\n")
    if hasattr(args, "reserve_gib") and args.reserve_gib is None and args.profile is not None:
        # the profile's fitted reserve where the flag is unset; still unset, check and explain take a run file's
        # '# moeplan:' comment and the planning commands the default (_reserve)
        args.reserve_gib = args.profile.reserve_gib


def warn_profile_gpu(args: argparse.Namespace, *gpus: GPUSpec) -> None:
    """apply_profile's warning for a profile fitted on another GPU, where the run's GPU is not the --gpu flag but
    what a run file says (its '# moeplan:' comment, else the default): once per GPU, after the files are read."""
    if getattr(args, "profile", None) is None or getattr(args, "gpu", None) is not None:
        return  # no profile, or --gpu given: apply_profile has warned already
    for name in dict.fromkeys(g.name for g in gpus):
        g = next(g for g in gpus if g.name == name)
        other = args.profile.other_gpu(g.name, g.hardware_file or getattr(args, "hardware", None))
        if other:
            sys.stderr.write(f"moeplan: warning: {other}\n")


def named(obj: Any, args: argparse.Namespace) -> Any:
    """JSON output naming the calibration profile it used (each row of a list)."""
    if getattr(args, "profile", None) is None:
        return obj
    name = args.profile.path
    if isinstance(obj, dict):
        return {**obj, "calibration": name}
    if isinstance(obj, list):
        return [{**r, "calibration": name} if isinstance(r, dict) else r for r in obj]
    return obj


def announce_profile(args: argparse.Namespace, console: Console) -> None:
    """Table output names the profile first (stderr where stdout is a pasteable format)."""
    profile = getattr(args, "profile", None)
    if profile is None or getattr(args, "json", False):
        return
    line = f"using {profile.describe()}"
    if getattr(args, "format", "table") == "table":
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    else:
        Console(stderr=True, width=10_000).print(line, highlight=False, markup=False)
