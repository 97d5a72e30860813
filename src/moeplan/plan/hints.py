"""Hints for ``estimate``: a knob left at its default that costs much of the step.

Each knob the user did not set and that is cheap to re-estimate (one time and memory estimate per value) is tried at
each of its other values, one knob at a time, the rest of the run unchanged; a value Megatron-Core would refuse with
this layout (moeplan.engine.knobs.knob_problem), or that does not fit where the run fits, is skipped. A knob whose best value
is at least :data:`HINT_GAIN` faster is a hint: the flag, the value and the gain (e.g. DeepSeek-V3's published 128K
recipe with cp_comm_type left at p2p: a2a+p2p, which the recipe sets, is several times faster).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from moeplan.base.deepep_configs import tp_ep_group_ranks
from moeplan.base.errors import MoeplanError
from moeplan.base.vocab import CP_COMM_TYPES, DISPATCHERS
from moeplan.engine.estimate import Estimate, evaluate
from moeplan.engine.knobs import knob_problem
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration
from moeplan.run.config import RunConfig

HINT_GAIN = 0.10  # the least throughput gain worth a line: the calibration's error band is about this size


@dataclass(frozen=True)
class Hint:
    """A knob's best other value and what it gains."""

    field: str  # RunConfig field
    flag: str  # the CLI flag that sets it
    value: Any
    default: Any
    tflops_per_gpu: float
    base_tflops_per_gpu: float

    @property
    def gain(self) -> float:
        return self.tflops_per_gpu / self.base_tflops_per_gpu - 1

    @property
    def text(self) -> str:
        shown = "" if self.value is True else f" {self.value}"
        return (f"{self.flag}{shown} estimates {self.tflops_per_gpu:,.0f} TFLOP/s per GPU against "
                f"{self.base_tflops_per_gpu:,.0f} with it left at {_word(self.default)} (+{self.gain:.0%})")

    def as_dict(self) -> dict[str, Any]:
        return {"flag": self.flag, "field": self.field, "value": self.value, "default": self.default,
                "gain": round(self.gain, 4), "tflops_per_gpu": self.tflops_per_gpu, "text": self.text}


def _word(value: Any) -> str:
    return "off" if value is False else str(value)


# field -> (CLI flag, the other values worth a try for this run). Only knobs whose change needs one estimate.
_TRIES: dict[str, tuple[str, Callable[[RunConfig], Iterable[Any]]]] = {
    "cp_comm_type": ("--cp-comm-type", lambda cfg: CP_COMM_TYPES if cfg.parallel.cp > 1 else ()),
    # every dispatcher moves tokens over the expert-TP x EP group, EP 1 x expert TP > 1 included
    # (timing.moe.ep_kernels); the EP A2A overlap needs EP > 1 itself (transformer_config.py:
    # expert_model_parallel_size > 1)
    "dispatcher": ("--dispatcher", lambda cfg: DISPATCHERS if tp_ep_group_ranks(cfg.parallel) > 1 else ()),
    "ep_overlap": ("--ep-overlap", lambda cfg: (True,) if cfg.parallel.ep > 1 else ()),
}
HINT_KNOBS = tuple(_TRIES)


def knob_hints(est: Estimate, defaulted: Iterable[str], cal: Calibration = DEFAULT_CALIBRATION) -> list[Hint]:
    """Hints for the knobs of ``defaulted`` (RunConfig fields the user left at their defaults), fastest gain first."""
    cfg, gpu = est.config, est.gpu
    base = est.time.tflops_per_gpu
    fits = est.memory.fits
    out: list[Hint] = []
    for name in defaulted:
        if name not in _TRIES:
            continue
        flag, values = _TRIES[name]
        current = getattr(cfg, name)
        best: Estimate | None = None
        best_value: Any = None
        for value in values(cfg):
            if value == current:
                continue
            alt = cfg.with_(**{name: value})
            if knob_problem(alt, gpu) is not None:
                continue
            try:
                other = evaluate(alt, gpu, cal)
            except MoeplanError:  # a value this layout cannot run
                continue
            if fits and not other.memory.fits:
                continue
            if best is None or other.time.tflops_per_gpu > best.time.tflops_per_gpu:
                best, best_value = other, value
        if best is not None and best.time.tflops_per_gpu >= base * (1 + HINT_GAIN):
            out.append(Hint(name, flag, best_value, current, best.time.tflops_per_gpu, base))
    return sorted(out, key=lambda h: -h.gain)


__all__ = ["HINT_GAIN", "HINT_KNOBS", "Hint", "knob_hints"]
