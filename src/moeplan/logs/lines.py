"""The per-iteration and memory report lines that Megatron-LM and Megatron Bridge print.

Engine-free: text in, numbers out. Formats, as the code that writes them prints them:

- iteration line, Megatron-LM ``megatron/training/training.py`` ``training_log`` and Megatron Bridge
  ``src/megatron/bridge/training/utils/train_utils.py`` ``training_log`` (same fields)::

     [2026-07-25 10:01:02] iteration       20/      50 | consumed samples: 20480 | elapsed time per
     iteration (ms): 20147.3 | throughput per GPU (TFLOP/s/GPU): 299.4 | learning rate: ... |
     global batch size:  1024 | lm loss: ... | number of skipped iterations:   0 | number of nan iterations:   0 |

  ``elapsed time per iteration`` is the mean over the ``log_interval`` iterations since the last line.
- memory report, Megatron-LM ``megatron/training/utils/common_utils.py`` ``report_memory`` (MiB, 2**20
  bytes)::

    [Rank 0] (after 10 iterations) memory (MB) | allocated: ... | max allocated: ... | reserved: ... | max reserved: ...

- memory report, Megatron Bridge ``train_utils.py`` ``report_memory`` (GB = 1e9 bytes, keys from
  ``MEMORY_KEYS``)::

    [Rank 0] (after 10 iterations) memory (GB) | mem-allocated-gigabytes: ... | mem-max-allocated-gigabytes: ... | ...

Only DP rank 0 of each model-parallel group prints its memory line, so the ranks seen are one per
pipeline/tensor/expert position; logs of several ranks interleave (one line glued to the next).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

GIB = 1024**3
MIB = 1024**2

# One logged iteration: the numbers up to the end of its line (or the next glued record).
_ITERATION = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_FIELD = re.compile(r"\s*([^|:]+?):\s*([^|]*?)\s*\|")
_MEMORY = re.compile(r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \((MB|GB)\)")
_MEM_FIELD = re.compile(r"\s*\|\s*([A-Za-z][\w -]*?):\s*([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)")
_NEXT_RECORD = re.compile(r"\[Rank \d+\]|\biteration\s+\d+\s*/")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Iteration:
    """One iteration line: the mean of the ``log_interval`` iterations that end at ``iteration``."""

    iteration: int
    train_iters: int
    elapsed_s: float
    tflops_per_gpu: float | None
    global_batch_size: int | None
    skipped: int
    nan: int
    offset: int  # character offset in the log


@dataclass(frozen=True)
class MemoryReport:
    """One rank's memory line, in bytes."""

    rank: int
    iteration: int
    allocated_bytes: float | None
    max_allocated_bytes: float | None
    reserved_bytes: float | None
    max_reserved_bytes: float | None


def _segment(text: str, start: int) -> str:
    """From ``start`` to the end of the line or the next record glued onto it."""
    end = text.find("\n", start)
    seg = text[start:] if end < 0 else text[start:end]
    glued = _NEXT_RECORD.search(seg)
    return seg[:glued.start()] if glued else seg


def _number(value: str) -> float | None:
    m = _NUMBER.fullmatch(value.strip())
    return float(m.group(0)) if m else None


def scan_iterations(text: str) -> tuple[list[Iteration], list[int]]:
    """Complete iteration lines (each field closed by ``|``) in log order, repeats included (a restarted run
    logs its iterations again); and the offsets of the incomplete ones (a truncated or interleaved line)."""
    out: list[Iteration] = []
    incomplete: list[int] = []
    for m in _ITERATION.finditer(text):
        fields = {k.strip(): v for k, v in _FIELD.findall(_segment(text, m.end()))}
        elapsed = _number(fields.get("elapsed time per iteration (ms)", ""))
        if elapsed is None or elapsed <= 0:
            incomplete.append(m.start())
            continue
        tflops = _number(fields.get("throughput per GPU (TFLOP/s/GPU)", ""))
        gbs = _number(fields.get("global batch size", ""))
        skipped = _number(fields.get("number of skipped iterations", "0")) or 0
        nan = _number(fields.get("number of nan iterations", "0")) or 0
        out.append(Iteration(int(m.group(1)), int(m.group(2)), elapsed / 1000.0, tflops, int(gbs) if gbs else None,
                             int(skipped), int(nan), m.start()))
    return out, incomplete


def iterations_in_order(text: str) -> tuple[list[Iteration], int]:
    """Complete iteration lines in log order, repeats included, and how many lines were incomplete
    (:func:`scan_iterations`)."""
    lines, incomplete = scan_iterations(text)
    return lines, len(incomplete)


def first_of_each(lines: Iterable[Iteration]) -> list[Iteration]:
    """The first occurrence of each iteration, by iteration (a line printed twice counts once)."""
    out: dict[int, Iteration] = {}
    for it in lines:
        out.setdefault(it.iteration, it)
    return [out[k] for k in sorted(out)]


def parse_iterations(text: str) -> tuple[list[Iteration], int]:
    """Complete iteration lines, first occurrence of each iteration, by iteration; and how many lines were
    incomplete (:func:`iterations_in_order`)."""
    lines, incomplete = iterations_in_order(text)
    return first_of_each(lines), incomplete


# Field names of the two memory formats -> (allocated, max allocated, reserved, max reserved).
_MLM_KEYS = ("allocated", "max allocated", "reserved", "max reserved")
_BRIDGE_KEYS = ("mem-allocated-gigabytes", "mem-max-allocated-gigabytes", "mem-reserved-gigabytes",
                "mem-max-reserved-gigabytes")


def parse_memory(text: str) -> list[MemoryReport]:
    """Every memory line, in log order (MB lines are MiB: report_memory divides by 1024 x 1024;
    GB lines are 1e9 bytes: Bridge's report_memory divides by 1.0e9)."""
    out = []
    for m in _MEMORY.finditer(text):
        unit = MIB if m.group(3) == "MB" else 1e9
        keys = _MLM_KEYS if m.group(3) == "MB" else _BRIDGE_KEYS
        values = {k.strip(): float(v) for k, v in _MEM_FIELD.findall(_segment(text, m.end()))}
        got = [values.get(k) for k in keys]
        if all(v is None for v in got):
            continue
        out.append(MemoryReport(int(m.group(1)), int(m.group(2)), *[None if v is None else v * unit for v in got]))
    return out


__all__ = ["GIB", "Iteration", "MemoryReport", "first_of_each", "iterations_in_order", "parse_iterations", "parse_memory",
           "scan_iterations"]
