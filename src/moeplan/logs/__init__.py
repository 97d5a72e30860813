"""Readers of Megatron-LM and Megatron Bridge training logs (engine-free: text in, numbers and settings out).

:func:`read_log` finds, in one log file (any mix of ranks' output):
- the iteration lines and the memory report lines (:mod:`moeplan.logs.lines`);
- the run's settings: Megatron-LM's argument dump (:mod:`moeplan.logs.megatron_lm`) or Megatron Bridge's
  printed configuration (:mod:`moeplan.logs.bridge`), as raw values keyed by name;
and :func:`steady_state` picks the iterations that measure the steady state.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from moeplan.errors import MoeplanError
from moeplan.logs import bridge, megatron_lm
from moeplan.logs.lines import GIB, Iteration, MemoryReport, parse_iterations, parse_memory

LogFormat = Literal["megatron-lm", "bridge-summary", "bridge-yaml", "unknown"]


@dataclass(frozen=True)
class TrainingLog:
    """What one log says. ``settings`` are raw values keyed by Megatron name: Megatron-LM argument names
    for ``megatron-lm``, ``section.field`` for the Bridge formats (``bridge-yaml`` also keeps the YAML text)."""

    path: str
    format: LogFormat
    iterations: tuple[Iteration, ...]
    memory: tuple[MemoryReport, ...]
    settings: dict[str, object]
    settings_line: int | None
    config_yaml: str | None = None
    incomplete_lines: int = 0

    @property
    def peak(self) -> MemoryReport | None:
        """The most loaded rank's latest report (peaks grow over a run; the last report holds the max)."""
        latest: dict[int, MemoryReport] = {}
        for r in self.memory:
            if r.rank not in latest or r.iteration >= latest[r.rank].iteration:
                latest[r.rank] = r
        reports = [r for r in latest.values() if r.max_allocated_bytes is not None]
        return max(reports, key=lambda r: r.max_allocated_bytes or 0.0) if reports else None


def parse_log(text: str, origin: str = "<log>") -> TrainingLog:
    iterations, incomplete = parse_iterations(text)
    memory = tuple(parse_memory(text))
    kind = bridge.find(text)
    yaml_text = None
    if megatron_lm.find(text):
        fmt: LogFormat = "megatron-lm"
        settings, line = megatron_lm.parse_arguments(text)
    elif kind == "summary":
        fmt = "bridge-summary"
        settings, line = bridge.parse_summary(text)
    elif kind == "yaml":
        fmt = "bridge-yaml"
        found = bridge.task_yaml(text)
        assert found is not None
        yaml_text, line = found
        settings = bridge.flatten_yaml(yaml_text)
    else:
        fmt, settings, line = "unknown", {}, None
    return TrainingLog(origin, fmt, tuple(iterations), memory, settings, line, yaml_text, incomplete)


def read_log(path: str | Path) -> TrainingLog:
    """A log file; MoeplanError (one line) when it cannot be read or holds no complete iteration line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise MoeplanError(f"{p}: cannot read log: {exc.strerror or exc}") from None
    log = parse_log(text, str(p))
    if not log.iterations:
        cut = f" ({log.incomplete_lines} cut short)" if log.incomplete_lines else ""
        raise MoeplanError(f"{p}: no complete iteration line{cut} (' iteration N/M | ... | elapsed time per "
                           "iteration (ms): ... |'); the run crashed or stopped before its first logged step")
    return log


# ---------------------------------------------------------------------------------------- steady state

# Settling: a logged interval slower than the median of the later ones by more than this share is
# still warming up (allocator growth, NCCL communicator set-up, autotuning, JIT).
SETTLE_TOLERANCE = 0.05
DEFAULT_WARMUP_ITERS = 2  # Megatron logs iteration 1 on its own (initialisation); its next one still warms


@dataclass(frozen=True)
class SteadyState:
    """The iterations kept, why the others were dropped, and the statistics of the kept step times."""

    used: tuple[Iteration, ...]
    dropped: tuple[tuple[int, str], ...]  # (iteration, reason)
    step_time_s: float  # median of the kept lines
    spread: float  # (max - min) / median of the kept lines
    tflops_per_gpu: float | None  # median of the logged throughput of the kept lines

    def as_dict(self) -> dict[str, object]:
        return {"iterations_used": [i.iteration for i in self.used],
                "dropped": [{"iteration": i, "reason": r} for i, r in self.dropped],
                "median_step_time_s": self.step_time_s, "spread": self.spread,
                "min_step_time_s": min(i.elapsed_s for i in self.used),
                "max_step_time_s": max(i.elapsed_s for i in self.used)}


def _drop_reason(it: Iteration, first: int, warmup: int, graph_warmup: int,
                 profile_window: tuple[int, int] | None) -> tuple[str, str] | None:
    """(kind, reason) why the line ending at ``it`` (averaging iterations ``first``..) is not steady, or None."""
    if it.iteration <= warmup:
        return "warm-up", f"warm-up (first {warmup} iterations)"
    if it.iteration <= warmup + graph_warmup:
        return "graph", f"CUDA-graph warm-up (cuda_graph_warmup_steps {graph_warmup})"
    if profile_window and first <= profile_window[1] and it.iteration >= profile_window[0]:
        return "profiler", f"profiler window {profile_window[0]}-{profile_window[1]}"
    if it.nan and it.skipped:
        return "nan", "NaN and skipped iterations in the interval"
    if it.nan:
        return "nan", "NaN iterations in the interval"
    if it.skipped:
        return "skipped", "skipped iterations in the interval"
    return None


def _classify(its: list[Iteration], warmup: int, graph_warmup: int,
              profile_window: tuple[int, int] | None) -> list[tuple[Iteration, tuple[str, str] | None]]:
    out = []
    prev = 0
    for it in its:
        out.append((it, _drop_reason(it, prev + 1, warmup, graph_warmup, profile_window)))
        prev = it.iteration
    return out


def _no_steady_message(log: TrainingLog, classified: list[tuple[Iteration, tuple[str, str] | None]],
                       kinds: dict[str, int], warmup: int, graph_warmup: int, profile_window: tuple[int, int] | None) -> str:
    """One line: how many lines each rule dropped (``classified``: :func:`_classify`'s answer, ``kinds`` its
    counts), and the remedy that can help (--warmup 0 only where the warm-up rule dropped lines that would be
    kept without it)."""
    its = [it for it, _ in classified]
    labels = {"warm-up": f"in warm-up (iterations 1-{warmup})",
              "graph": f"in CUDA-graph warm-up (iterations {warmup + 1}-{warmup + graph_warmup}: "
                       f"cuda_graph_warmup_steps {graph_warmup})",
              "profiler": "in the profiler window ({}-{})".format(*(profile_window or (0, 0))),
              "nan": "with NaN iterations", "skipped": "with skipped iterations"}
    parts = [f"{n} {labels[k]}" for k, n in kinds.items() if n]
    advice = []
    if warmup and any(reason is None for _, reason in _classify(its, 0, graph_warmup, profile_window)):
        advice.append("pass --warmup 0 (fewer warm-up iterations) or run longer")
    elif classified[-1][1] is not None and classified[-1][1][0] in ("warm-up", "graph", "profiler"):
        # the log stops inside a window: later lines would be kept
        past = max(warmup + graph_warmup, profile_window[1] if kinds["profiler"] and profile_window else 0)
        why = (f" (warm-up {warmup} + cuda_graph_warmup_steps {graph_warmup})" if warmup and graph_warmup
               and past == warmup + graph_warmup else "")
        advice.append(f"run past iteration {past}{why}")
    if kinds["nan"] or kinds["skipped"]:
        advice.append("intervals with NaN or skipped iterations do not time normal steps: log a run without them")
    return (f"{log.path}: no steady iteration left: of {len(its)} logged line(s) (last iteration {its[-1].iteration}), "
            f"{', '.join(parts)}; {'; '.join(advice)}")


def steady_state(log: TrainingLog, *, warmup_iters: int | None = None, graph_warmup_iters: int = 0,
                 profile_window: tuple[int, int] | None = None) -> SteadyState:
    """Drop warm-up (the first ``warmup_iters`` iterations, then ``graph_warmup_iters`` more when CUDA graphs
    are captured), intervals that overlap a profiler window, intervals with skipped or NaN iterations,
    and leading intervals still slower than the rest by more than SETTLE_TOLERANCE; the median and
    spread of what is left. When nothing is left: MoeplanError (one line) counting the lines each rule
    dropped, suggesting ``--warmup 0`` only where the warm-up rule is what removed them."""
    warmup = DEFAULT_WARMUP_ITERS if warmup_iters is None else warmup_iters
    its = list(log.iterations)
    dropped: list[tuple[int, str]] = []
    kept: list[Iteration] = []
    kinds = dict.fromkeys(("warm-up", "graph", "profiler", "nan", "skipped"), 0)
    classified = _classify(its, warmup, graph_warmup_iters, profile_window)
    for it, why in classified:
        if why is None:
            kept.append(it)
        else:
            kinds[why[0]] += 1
            dropped.append((it.iteration, why[1]))
    while len(kept) > 2:
        rest = statistics.median(i.elapsed_s for i in kept[1:])
        if kept[0].elapsed_s <= rest * (1 + SETTLE_TOLERANCE):
            break
        dropped.append((kept[0].iteration, f"still settling ({kept[0].elapsed_s / rest - 1:+.0%} vs the rest)"))
        kept.pop(0)
    if not kept:  # settling keeps at least two lines: only the rules above can drop every line
        raise MoeplanError(_no_steady_message(log, classified, kinds, warmup, graph_warmup_iters, profile_window))
    times = [i.elapsed_s for i in kept]
    med = statistics.median(times)
    tflops = [i.tflops_per_gpu for i in kept if i.tflops_per_gpu is not None]
    return SteadyState(tuple(kept), tuple(sorted(dropped)), med, (max(times) - min(times)) / med,
                       statistics.median(tflops) if tflops else None)


__all__ = ["GIB", "Iteration", "MemoryReport", "SteadyState", "TrainingLog", "parse_log", "read_log", "steady_state"]
