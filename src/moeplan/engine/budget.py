"""The memory budget: one rule for `estimate`, `plan` and `check`.

A run's estimated peak per GPU (moeplan.engine.memory: the most loaded pipeline rank, the ``--reserve-gib``
reserve included) is judged against the GPU's HBM less the headroom (``--headroom``, default
moeplan.base.vocab.DEFAULT_HEADROOM):

- ``fits``: at or under the budget. The planner keeps only such runs, and `check` recommends only such fixes.
- ``edge``: over the budget by no more than the memory model's measured error (MEMORY_MODEL_ERROR) and
  within the HBM itself: the estimate cannot tell it from a run that fits. `check` warns, never errors;
  `estimate` says it fits, at the edge.
- ``over``: further over. `check` errors; `estimate` says it does not fit.

The default headroom (10%) is kept: every shared run with a measured peak stays inside it as moeplan estimates
it (tests/validation/test_memory_budget.py), and the one shared run that used more of the HBM (N26 arm A:
DeepSeek-V3 14-layer proxy on H100, 70,279 MB allocated, 75,594 MB reserved, 79,677 MB device memory used,
Megatron-LM PR #6429) ran 5x slower from allocator pressure near the limit.
"""

from __future__ import annotations

from typing import Literal

from moeplan.base.vocab import DEFAULT_HEADROOM

# The memory model's measured error: the largest |estimated / measured - 1| of peak allocated memory over the
# shared rows with a measured peak that moeplan can express (guidance.md's Qwen3-30B-A3B EP16 point, +3.6%;
# measured_variants.csv N25/N26, the DeepSeek-V3 14-layer proxy on 64 H100: +4.1%, +1.3%, +4.5%), recomputed
# by tests/validation/test_memory_budget.py.
MEMORY_MODEL_ERROR = 0.045

Verdict = Literal["fits", "edge", "over"]


def budget_bytes(hbm_bytes: float, headroom: float = DEFAULT_HEADROOM) -> float:
    """HBM less the headroom: what a run may use."""
    return hbm_bytes * (1 - headroom)


def edge_bytes(hbm_bytes: float, headroom: float = DEFAULT_HEADROOM) -> float:
    """The most a run at the edge of the budget may use: the budget plus the memory model's error, never past
    the HBM."""
    return min(hbm_bytes, budget_bytes(hbm_bytes, headroom) * (1 + MEMORY_MODEL_ERROR))


def memory_verdict(total_bytes: float, hbm_bytes: float, headroom: float = DEFAULT_HEADROOM) -> Verdict:
    """``fits``, ``edge`` or ``over`` (module docstring): the one rule every command applies."""
    if total_bytes <= budget_bytes(hbm_bytes, headroom):
        return "fits"
    return "edge" if total_bytes <= edge_bytes(hbm_bytes, headroom) else "over"


__all__ = ["MEMORY_MODEL_ERROR", "Verdict", "budget_bytes", "edge_bytes", "memory_verdict"]
