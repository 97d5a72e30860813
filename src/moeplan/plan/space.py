"""What a plan search is asked and what it answers: the search space, a candidate run, a plan, the result
with its notes and closest miss, and the release gate that names a newer Megatron-Core release."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from moeplan.base.fields import version_key
from moeplan.base.vocab import RESOLVED_GAIN
from moeplan.engine.estimate import Estimate
from moeplan.engine.fsdp import label as fsdp_label
from moeplan.engine.memory import GIB
from moeplan.hardware import GPUSpec
from moeplan.models.spec import ModelSpec
from moeplan.plan.advice import DEFAULT_HEADROOM, Reason
from moeplan.run.config import Recompute, RunConfig
from moeplan.run.parallel import GDN_CP_SINCE, Pipeline


@dataclass(frozen=True)
class Candidate:
    cfg: RunConfig
    pipeline: Pipeline
    memory_bytes: float
    tokens_per_s_per_gpu: float


@dataclass(frozen=True)
class Plan:
    config: RunConfig
    gpu: GPUSpec
    rationale: tuple[Reason, ...]
    estimate: Estimate
    tie: bool = False  # its error band overlaps the fastest plan's (see rank_candidates)


def plan_layout(cfg: RunConfig) -> str:
    """'TP1 PP8 VPP4 CP32 EP32 DP4' and, where the run needs it, its Megatron-FSDP mark (moeplan.engine.fsdp.label):
    a layout quoted without it would read as fitting with the distributed optimizer alone."""
    return " ".join(x for x in (cfg.parallel.short(), fsdp_label(cfg.fsdp)) if x)


@dataclass(frozen=True)
class NewerRelease:
    """What a newer Megatron-Core release would plan: the release, the feature it adds that this target
    lacks, and its best plan (None when nothing fits there either); ``gain`` is its tokens/s/GPU over
    this answer's fastest plan (None when nothing fits at the target); never below 0, since the newer
    release also runs this answer's plans."""

    target: str  # the release the answer targets
    version: str
    feature: str
    config: RunConfig | None = None
    tokens_per_s_per_gpu: float = 0.0
    memory_bytes: float = 0.0
    gain: float | None = None

    def sentence(self) -> str:
        head = f"Megatron-Core {self.target} has no {self.feature}; {self.version} adds it"
        if self.config is None:
            return head + ", but no layout fits there either."
        rc = self.config.recompute
        plan = f"{plan_layout(self.config)} with {'no' if rc.granularity == 'none' else rc.label()} recompute"
        runs = f"{self.tokens_per_s_per_gpu:,.0f} tokens/s/GPU"
        mem = f"in {self.memory_bytes / GIB:,.1f} GiB"
        if self.gain is None:
            return f"{head} and a plan fits there: {plan}, {runs} {mem} (--mcore-version {self.version})."
        if self.gain > RESOLVED_GAIN:
            return (f"{head}: its best plan, {plan}, runs {runs} ({self.gain:+.0%} over the best plan at {self.target}) {mem} "
                    f"(--mcore-version {self.version}).")
        return f"{head}, but its best plan, {plan}, runs {runs} ({self.gain:+.0%}): no gain at this length."

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "mcore_version": self.version, "feature": self.feature,
                "parallel": self.config.parallel.as_dict() if self.config else None,
                "tokens_per_s_per_gpu": round(self.tokens_per_s_per_gpu, 1) if self.config else None,
                "memory_gib": round(self.memory_bytes / GIB, 2) if self.config else None,
                "gain": None if self.gain is None else round(self.gain, 4), "sentence": self.sentence()}


def release_gate(spec: ModelSpec, space: "SearchSpace", mcore_version: str) -> tuple[str, str] | None:
    """(release, feature) when the target Megatron-Core release rules out part of the search that a
    newer release allows: context parallel for Gated DeltaNet before 0.18 (moeplan.run.parallel.GDN_CP_SINCE)."""
    if (any(layer.is_linear_attention for layer in spec.layers) and version_key(mcore_version) < GDN_CP_SINCE
            and space.cp != 1):
        return ".".join(map(str, GDN_CP_SINCE)), "context parallel for Gated DeltaNet"
    return None


@dataclass
class PlanResult:
    plans: list[Plan]
    requested_gbs: int
    gbs: int
    layouts_considered: int
    layouts_feasible: int
    closest: tuple[RunConfig, float] | None = None  # best miss and by how many bytes
    notes: list[str] = field(default_factory=list)
    layouts_evaluated: int = 0  # layouts costed in full (memory ladder + timing) after the cheap bounds
    ties: dict[int, str] = field(default_factory=dict)  # id(candidate) -> why it is a tie (search only)
    newer: NewerRelease | None = None  # a newer Megatron-Core release unlocks part of the search
    raising_dropped: int = 0  # refined layouts with no run left where TE raises with te_grouped_tensor (search)
    # _search_once's: finds ``closest`` where nothing fits; search() calls it on the answer it keeps, then drops it
    find_closest: Callable[[], tuple[RunConfig, float, float | None]] | None = field(default=None, repr=False,
                                                                                     compare=False)
    # the optimizer offload fraction the closest run asked for where the host's memory held it lower (else None)
    closest_offload_asked: float | None = None


@dataclass(frozen=True)
class SearchSpace:
    """Fixed values (None = search). ``headroom`` is the share of HBM left free."""

    tp: int | None = None
    pp: int | None = None
    vpp: int | None = None
    cp: int | None = None
    ep: int | None = None
    etp: int | None = None
    mbs: int | None = None
    dispatcher: str | None = None
    recompute: Recompute | None = None
    cuda_graphs: bool = True
    optimizer_offload: bool = True
    headroom: float = DEFAULT_HEADROOM
    fsdp: str = "auto"  # auto: Megatron-FSDP (optim_grads_params) beside the distributed optimizer; off; a strategy
    fsdp_double_buffer: bool = False


__all__ = ["NewerRelease", "Plan", "PlanResult", "SearchSpace", "release_gate"]
