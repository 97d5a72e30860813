"""Readers of Megatron-LM and Megatron Bridge training logs (engine-free: text in, numbers and settings out).

:func:`read_log` finds, in one log file (any mix of ranks' output; gzip-compressed or not; ``-``: standard input):
- the iteration lines and the memory report lines (:mod:`moeplan.logs.lines`);
- the run's settings: Megatron-LM's argument dump (:mod:`moeplan.logs.megatron_lm`) or Megatron Bridge's
  printed configuration (:mod:`moeplan.logs.bridge`), as raw values keyed by name;
and :func:`steady_state` picks the iterations that measure the steady state.

A log may hold several start-ups (a job restarted or resumed and appended to the same file): each prints its
settings again (rank 0's argument dump, Bridge's configuration), and a job resumed from an earlier checkpoint
logs iteration numbers that go back. :func:`split_log` cuts the log there; :func:`group_runs` joins consecutive
start-ups with the same identity (the settings that make the run; by default every printed setting,
:func:`printed_settings`) into one resumed run and names the others ``PATH#1``, ``PATH#2``, ...
:func:`read_runs` / :func:`parse_runs` give every run of a log; :func:`read_log` / :func:`parse_log` give its one
run and refuse a log that holds several (never a run with one start-up's settings and another's numbers).
"""

from __future__ import annotations

import statistics
import sys
import zlib
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from moeplan.base.errors import MoeplanError
from moeplan.logs import bridge, megatron_lm
from moeplan.logs.lines import GIB, Iteration, MemoryReport, first_of_each, parse_memory, scan_iterations

LogFormat = Literal["megatron-lm", "bridge-summary", "bridge-yaml", "unknown"]
STDIN = "-"  # the log name that reads standard input (`kubectl logs POD | moeplan calibrate -`), as `check -` does
GZIP_MAGIC = b"\x1f\x8b"  # RFC 1952: every gzip member starts with these two bytes, whatever the file's name


@dataclass(frozen=True)
class Restart:
    """A start-up after the first in one run: the job resumed (same settings) and logged on in the same file."""

    line: int  # line of the log where the new start-up begins (its argument dump, or its first iteration line)
    offset: int  # character offset of its first iteration line: the lines from here on are the resumed job's
    after: int  # the iteration it resumed after (its first logged iteration minus the logging interval)


@dataclass(frozen=True)
class TrainingLog:
    """What one log (or one run of a log holding several) says. ``settings`` are raw values keyed by Megatron
    name: Megatron-LM argument names for ``megatron-lm``, ``section.field`` for the Bridge formats
    (``bridge-yaml`` also keeps the YAML text). ``iterations`` are in log order (by iteration within a start-up);
    ``start`` is the iteration the run started after (0 from scratch; a resumed job's checkpoint: read as
    :func:`split_log` says), ``restarts`` the later start-ups of the same run, ``lines`` the first and last line
    of the log the run spans."""

    path: str
    format: LogFormat
    iterations: tuple[Iteration, ...]
    memory: tuple[MemoryReport, ...]
    settings: dict[str, object]
    settings_line: int | None
    config_yaml: str | None = None
    incomplete_lines: int = 0
    start: int = 0
    restarts: tuple[Restart, ...] = ()
    lines: tuple[int, int] | None = None
    notes: tuple[str, ...] = ()

    @property
    def peak(self) -> MemoryReport | None:
        """The most loaded rank's latest report (peaks grow over a run; the last report holds the max)."""
        latest: dict[int, MemoryReport] = {}
        for r in self.memory:
            if r.rank not in latest or r.iteration >= latest[r.rank].iteration:
                latest[r.rank] = r
        reports = [r for r in latest.values() if r.max_allocated_bytes is not None]
        return max(reports, key=lambda r: r.max_allocated_bytes or 0.0) if reports else None


# ---------------------------------------------------------------------------------------- start-ups


def _line_start(text: str, offset: int) -> int:
    return text.rfind("\n", 0, offset) + 1


def _line_no(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _cuts(text: str, lines: Sequence[Iteration]) -> list[int]:
    """Offsets (line starts) where a new start-up begins: a settings print (Megatron-LM's argument dump, Bridge's
    configuration) once the current start-up has logged an iteration or printed the same kind already, and an
    iteration number lower than the one logged before it (a job resumed from an earlier checkpoint). ``lines``:
    the log's complete iteration lines in log order (:func:`~moeplan.logs.lines.scan_iterations`)."""
    events: list[tuple[int, str, int | str]] = [(o, "settings", "megatron-lm") for o in megatron_lm.starts(text)]
    events += [(o, "settings", kind) for o, kind in bridge.starts(text)]
    events += [(it.offset, "iteration", it.iteration) for it in lines]
    cuts: list[int] = []
    printed: set[object] = set()
    previous: int | None = None
    for offset, what, value in sorted(events, key=lambda e: e[0]):
        if what == "settings":
            if previous is not None or value in printed:
                cuts.append(_line_start(text, offset))
                printed, previous = set(), None
            printed.add(value)
        else:
            assert isinstance(value, int)
            if previous is not None and value < previous:
                cuts.append(_line_start(text, offset))
                printed = set()
            previous = value
    return cuts


def _settings_of(text: str) -> tuple[LogFormat, dict[str, object], int | None, str | None]:
    """(format, settings, line of the settings print within ``text``, Task Configuration YAML) of one start-up."""
    kind = bridge.find(text)
    if megatron_lm.find(text):
        settings, line = megatron_lm.parse_arguments(text)
        return "megatron-lm", settings, line, None
    if kind == "summary":
        settings, line = bridge.parse_summary(text)
        return "bridge-summary", settings, line, None
    if kind == "yaml":
        found = bridge.task_yaml(text)
        assert found is not None
        yaml_text, line = found
        return "bridge-yaml", bridge.flatten_yaml(yaml_text), line, yaml_text
    return "unknown", {}, None, None


# Megatron-LM argument -> Megatron Bridge config path, of the settings that say how a start-up logs and starts:
# Megatron-LM --log-interval / --load (arguments.py), Bridge LoggerConfig.log_interval / CheckpointConfig.load.
_BRIDGE_PATHS = {"log_interval": "logger.log_interval", "load": "checkpoint.load"}


def _printed(fmt: LogFormat, settings: Mapping[str, object], name: str) -> object:
    """A start-up's printed value of the Megatron-LM argument ``name`` (its Bridge path for the Bridge formats)."""
    return settings.get(name if fmt == "megatron-lm" else _BRIDGE_PATHS[name])


@dataclass(frozen=True)
class _Piece:
    """One start-up as cut from the log: its text span, settings and iteration lines (first of each, by iteration)."""

    a: int
    b: int
    fmt: LogFormat
    settings: dict[str, object]
    line: int | None  # the settings print's line in the log
    yaml_text: str | None
    iterations: list[Iteration]
    incomplete: int


def _steps(its: Sequence[Iteration]) -> Counter[int]:
    return Counter(b.iteration - a.iteration for a, b in zip(its, its[1:]) if b.iteration > a.iteration)


def _intervals(pieces: Sequence[_Piece]) -> list[int]:
    """The logging interval of each start-up: its printed ``log_interval`` (training_log prints an iteration line
    when ``iteration % log_interval == 0``: Megatron-LM training.py, Bridge train_utils.py); else the most common
    step between the lines of the start-ups that printed the same settings (the smaller on a tie: a run logs at
    one interval, another run of the log may log at another); 1 when none of them logged two lines."""
    groups: list[tuple[LogFormat, dict[str, object], Counter[int]]] = []
    of_piece: list[Counter[int]] = []
    for p in pieces:
        group = next((g for g in groups if g[0] == p.fmt and g[1] == p.settings), None)
        if group is None:
            group = (p.fmt, p.settings, Counter())
            groups.append(group)
        group[2].update(_steps(p.iterations))
        of_piece.append(group[2])
    out = []
    for p, steps in zip(pieces, of_piece):
        printed = _printed(p.fmt, p.settings, "log_interval")
        if isinstance(printed, int) and not isinstance(printed, bool) and printed > 0:
            out.append(printed)
        else:
            out.append(min(steps, key=lambda k: (-steps[k], k)) if steps else 1)
    return out


def _start(k: int, piece: _Piece, interval: int) -> int:
    """The iteration start-up ``k`` of the log started after. Megatron-LM's setup_model_and_optimizer
    (training.py) starts at iteration 0 unless it loads a checkpoint (--load; Bridge checkpoint.load), whose
    iteration the numbering continues from; so from scratch the first line is at ``interval``, and a start-up
    whose first line is past it resumed after at least ``first - interval``. A later start-up (one ran before
    it in this log) that logs past the first interval resumed. The first start-up of the log is taken as
    resumed only when its settings also name a checkpoint to load: otherwise its earlier lines are just not in
    the log (a first line cut short, a log's tail) and it is taken as started from 0, long past its warm-up."""
    if not piece.iterations or piece.iterations[0].iteration <= interval:
        return 0
    if k == 0 and _printed(piece.fmt, piece.settings, "load") in (None, "", False):
        return 0
    return piece.iterations[0].iteration - interval


def _pieces(text: str) -> list[_Piece]:
    """The log's start-ups (:func:`_cuts`), its iteration lines scanned once and sliced by offset; a start-up that
    prints no settings (iteration numbers went back) has the settings printed before it."""
    lines, incomplete = scan_iterations(text)
    bounds = [0, *sorted(set(_cuts(text, lines)) - {0}), len(text)]  # two records glued on one line cut once
    offsets = [it.offset for it in lines]
    out: list[_Piece] = []
    for a, b in zip(bounds, bounds[1:]):
        its = first_of_each(lines[bisect_left(offsets, a):bisect_left(offsets, b)])
        cut = bisect_left(incomplete, b) - bisect_left(incomplete, a)
        fmt, settings, line, yaml_text = _settings_of(text[a:b])
        if fmt != "unknown" and line is not None:
            line += _line_no(text, a) - 1
        elif out:  # no settings of its own: the start-up before it printed them
            prev = out[-1]
            fmt, settings, line, yaml_text = prev.fmt, prev.settings, prev.line, prev.yaml_text
        out.append(_Piece(a, b, fmt, settings, line, yaml_text, its, cut))
    return out


def split_log(text: str, origin: str = "<log>") -> list[TrainingLog]:
    """One TrainingLog per start-up (see :func:`_cuts`), each with its own iterations, memory lines and line
    range, and the iteration it started after (:func:`_start`, at its logging interval :func:`_intervals`)."""
    pieces = _pieces(text)
    out: list[TrainingLog] = []
    for k, (p, interval) in enumerate(zip(pieces, _intervals(pieces))):
        start = _start(k, p, interval)
        lines = (_line_no(text, p.a), _line_no(text, max(p.a, p.b - 1)))
        out.append(TrainingLog(origin, p.fmt, tuple(p.iterations), tuple(parse_memory(text[p.a:p.b])), p.settings,
                               p.line, p.yaml_text, p.incomplete, start, (), lines))
    return out


def join_runs(parts: Sequence[TrainingLog]) -> TrainingLog:
    """Start-ups of one run (the job resumed with the same settings) as one TrainingLog: the first start-up's
    settings, every start-up's iteration and memory lines, a :class:`Restart` for each later start-up."""
    first, last = parts[0], parts[-1]
    restarts = tuple(Restart(p.lines[0] if p.lines else 0, min(i.offset for i in p.iterations), p.start)
                     for p in parts[1:] if p.iterations)
    return replace(first, iterations=tuple(i for p in parts for i in p.iterations),
                   memory=tuple(m for p in parts for m in p.memory),
                   incomplete_lines=sum(p.incomplete_lines for p in parts), restarts=first.restarts + restarts,
                   lines=(first.lines[0], last.lines[1]) if first.lines and last.lines else None,
                   notes=tuple(n for p in parts for n in p.notes))


def _differences(a: Mapping[str, object], b: Mapping[str, object], shown: int = 3) -> str:
    """``name old -> new`` for the first ``shown`` settings that differ between two start-ups."""
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
    text = ", ".join(f"{k} {a.get(k)} -> {b.get(k)}" for k in keys[:shown])
    return text + (f" and {len(keys) - shown} more" if len(keys) > shown else "")


Identity = Callable[[TrainingLog], Mapping[str, object]]  # a start-up -> the settings that make its run


def printed_settings(log: TrainingLog) -> dict[str, object]:
    """The default identity of a start-up (:func:`group_runs`): its format and every setting it printed. A job
    restarted with the same command prints the same settings: one run resumed. Any difference (train_iters or a
    path too) keeps start-ups apart, since nothing here knows which settings change what a run measures;
    :func:`moeplan.calibrate.fit.log_runs` passes the settings it reads."""
    return {"format": log.format, **log.settings}


def group_runs(parts: Sequence[TrainingLog], identity: Identity = printed_settings) -> list[TrainingLog]:
    """The runs of a log's start-ups: consecutive start-ups whose ``identity`` (the settings that make the run)
    is the same are one resumed run (:func:`join_runs`), unless the later one starts again from iteration 0 (a
    fresh launch: ``start`` 0, no checkpoint resumed); a change, or a fresh launch, starts another run, and then each
    run is named ``PATH#k`` with a note giving its lines and what changed. Start-ups without a complete iteration
    line (a crashed start) are left out with a note on the run after them (or before, at the end of the log)."""
    groups: list[tuple[dict[str, object], list[TrainingLog]]] = []
    pending: list[str] = []
    for p in parts:
        if not p.iterations:
            lines = f"lines {p.lines[0]}-{p.lines[1]}" if p.lines else "a start-up"
            pending.append(f"{p.path} {lines}: a start-up with no complete iteration line (it crashed or was "
                           "stopped before its first logged step) is not used")
            continue
        ident = dict(identity(p))
        if pending:
            p = replace(p, notes=(*pending, *p.notes))
            pending = []
        if groups and groups[-1][0] == ident and p.start > 0:  # the same run resumed (start 0: launched afresh)
            groups[-1][1].append(p)
        else:
            groups.append((ident, [p]))
    if not groups:
        return []
    runs = [join_runs(g) for _, g in groups]
    if pending:
        runs[-1] = replace(runs[-1], notes=(*runs[-1].notes, *pending))
    if len(runs) == 1:
        return runs
    out = []
    for k, (run, (ident, _)) in enumerate(zip(runs, groups), start=1):
        lines = f"lines {run.lines[0]}-{run.lines[1]}" if run.lines else "its lines"
        if k == 1:
            what = "the log holds several runs, each fitted as a run of its own"
        elif groups[k - 2][0] == ident:
            what = f"the same settings as run {k - 1}, launched again from iteration 1 (no checkpoint resumed)"
        else:
            what = f"its settings differ from run {k - 1}'s ({_differences(groups[k - 2][0], ident)})"
        out.append(replace(run, path=f"{run.path}#{k}",
                           notes=(f"run {k} of {len(runs)} in {run.path} ({lines}): {what}", *run.notes)))
    return out


# ---------------------------------------------------------------------------------------- reading


def _gunzip(data: bytes, origin: str) -> bytes:
    """Every gzip member (``cat a.gz b.gz`` is one valid archive); a cut-short archive keeps what it holds (its
    last line then is cut short, as a truncated log's is)."""
    out = []
    while data[:2] == GZIP_MAGIC:
        unzip = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            out.append(unzip.decompress(data))
        except zlib.error as exc:
            raise MoeplanError(f"{origin}: gzip-compressed log is corrupt ({exc}); decompress it (gunzip) to see "
                               "what it holds") from None
        if not unzip.eof:
            break
        data = unzip.unused_data
    return b"".join(out)


def read_text(path: str | Path) -> tuple[str, str]:
    """(text, name) of a log: a file, gzip-compressed or not (told by its first bytes, not its name), or
    standard input for ``-`` (named ``<stdin>``); MoeplanError (one line) when it cannot be read."""
    if str(path) == STDIN:
        origin = "<stdin>"
        try:
            stream = getattr(sys.stdin, "buffer", None)
            data = stream.read() if stream is not None else sys.stdin.read().encode("utf-8", errors="replace")
        except (OSError, ValueError) as exc:
            raise MoeplanError(f"{origin}: cannot read the log from standard input: {exc}") from None
    else:
        p = Path(path)
        origin = str(p)
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise MoeplanError(f"{p}: cannot read log: {exc.strerror or exc}") from None
    if data[:2] == GZIP_MAGIC:
        data = _gunzip(data, origin)
    return data.decode("utf-8", errors="replace"), origin


def no_iteration_error(log: TrainingLog) -> MoeplanError:
    """The one-line error of a log without a complete iteration line (a crashed run)."""
    cut = f" ({log.incomplete_lines} cut short)" if log.incomplete_lines else ""
    return MoeplanError(f"{log.path}: no complete iteration line{cut} (' iteration N/M | ... | elapsed time per "
                        "iteration (ms): ... |'); the run crashed or stopped before its first logged step")


def _several_runs_error(origin: str, runs: Sequence[TrainingLog], identity: Identity) -> MoeplanError:
    """The one-line error of :func:`parse_log` on a log that holds several runs."""
    where = f" from line {runs[1].lines[0]}" if runs[1].lines else ""
    return MoeplanError(f"{origin} holds {len(runs)} runs with different settings (run 2{where}: "
                        f"{_differences(identity(runs[0]), identity(runs[1]))}): read them apart with "
                        f"moeplan.logs.read_runs (moeplan calibrate fits each as {origin}#k)")


def parse_runs(text: str, origin: str = "<log>", identity: Identity = printed_settings) -> list[TrainingLog]:
    """Every run of ``text``: its start-ups (:func:`split_log`) grouped by ``identity`` (:func:`group_runs`);
    MoeplanError (one line) when no start-up logged a complete iteration line."""
    parts = split_log(text, origin)
    runs = group_runs(parts, identity)
    if not runs:
        raise no_iteration_error(join_runs(parts))  # counting the lines cut short in every start-up
    return runs


def read_runs(path: str | Path, identity: Identity = printed_settings) -> list[TrainingLog]:
    """Every run of a log file (:func:`read_text`, :func:`parse_runs`); MoeplanError (one line) when it cannot
    be read or holds no complete iteration line."""
    return parse_runs(*read_text(path), identity=identity)


def parse_log(text: str, origin: str = "<log>", identity: Identity = printed_settings) -> TrainingLog:
    """The one run of ``text``: its start-ups that logged an iteration, joined (:func:`group_runs`); MoeplanError
    (one line) when their ``identity`` differs (several runs: :func:`parse_runs`). A log without a complete
    iteration line gives a run without iterations."""
    parts = split_log(text, origin)
    runs = group_runs(parts, identity)
    if len(runs) > 1:
        raise _several_runs_error(origin, runs, identity)
    return runs[0] if runs else join_runs(parts)


def read_log(path: str | Path, identity: Identity = printed_settings) -> TrainingLog:
    """A log file's one run (:func:`parse_log`); MoeplanError (one line) when it cannot be read, holds several
    runs or no complete iteration line."""
    log = parse_log(*read_text(path), identity=identity)
    if not log.iterations:
        raise no_iteration_error(log)
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


@dataclass(frozen=True)
class _Rules:
    """What makes a logged line unsteady: the warm-up after each start (``warmup`` iterations, then
    ``graph_warmup`` more while CUDA graphs are captured), a profiler window, and a batch size other than the
    run's final ``global_batch_size`` (Megatron-LM ``--rampup-batch-size``, arguments.py: the iteration line
    prints ``get_current_global_batch_size()``, training.py ``training_log``, so a ramp-up line times a smaller
    step)."""

    warmup: int
    graph_warmup: int
    profile_window: tuple[int, int] | None
    global_batch_size: int | None


@dataclass(frozen=True)
class _Part:
    """One start-up of a run: the iteration it started after, its Restart (None for the first), its lines."""

    start: int
    restart: Restart | None
    lines: tuple[Iteration, ...]


def _parts(log: TrainingLog) -> list[_Part]:
    """The run's start-ups, each with the lines logged from its first iteration line on."""
    heads: list[tuple[int, Restart | None]] = [(log.start, None), *((r.after, r) for r in log.restarts)]
    lines: list[list[Iteration]] = [[] for _ in heads]
    for it in log.iterations:
        k = sum(1 for r in log.restarts if it.offset >= r.offset)
        lines[k].append(it)
    return [_Part(start, restart, tuple(its)) for (start, restart), its in zip(heads, lines)]


def _drop_reason(it: Iteration, first: int, part: _Part, redone: Restart | None,
                 rules: _Rules) -> tuple[str, str] | None:
    """(kind, reason) why the line ending at ``it`` (averaging iterations ``first``..) of ``part`` is not steady,
    or None; ``redone``: a later restart that logged this iteration again."""
    if redone is not None:
        return "redone", f"logged again after the restart at line {redone.line}"
    after = "" if part.restart is None else f" after the restart at line {part.restart.line}"
    if it.iteration <= part.start + rules.warmup:
        return "warm-up", f"warm-up{after} (first {rules.warmup} iterations)"
    if it.iteration <= part.start + rules.warmup + rules.graph_warmup:
        return "graph", f"CUDA-graph warm-up{after} (cuda_graph_warmup_steps {rules.graph_warmup})"
    if rules.global_batch_size and it.global_batch_size and it.global_batch_size != rules.global_batch_size:
        return "ramp-up", f"batch-size ramp-up (GBS {it.global_batch_size})"
    window = rules.profile_window
    if window and first <= window[1] and it.iteration >= window[0]:
        return "profiler", f"profiler window {window[0]}-{window[1]}"
    if it.nan and it.skipped:
        return "nan", "NaN and skipped iterations in the interval"
    if it.nan:
        return "nan", "NaN iterations in the interval"
    if it.skipped:
        return "skipped", "skipped iterations in the interval"
    return None


_Classified = tuple[Iteration, int, tuple[str, str] | None]  # a line, its start-up, why it is not steady (None)


def _classify(parts: list[_Part], rules: _Rules) -> list[_Classified]:
    """Every line with the index of its start-up and why it is not steady (None: steady)."""
    out = []
    for k, part in enumerate(parts):
        prev = part.start
        for it in part.lines:
            redone = next((later.restart for later in parts[k + 1:]
                           if later.restart is not None and later.start < it.iteration), None)
            out.append((it, k, _drop_reason(it, prev + 1, part, redone, rules)))
            prev = it.iteration
    return out


def _settle(kept: list[list[Iteration]]) -> list[tuple[int, str]]:
    """Drop (in place) the leading lines of each start-up still slower than the median of every other kept
    line by more than SETTLE_TOLERANCE, keeping at least two lines; what was dropped, with why."""
    dropped: list[tuple[int, str]] = []
    for lines in kept:
        while lines and sum(len(p) for p in kept) > 2:
            head = lines[0]
            rest = statistics.median(i.elapsed_s for p in kept for i in p if i is not head)
            if head.elapsed_s <= rest * (1 + SETTLE_TOLERANCE):
                break
            dropped.append((head.iteration, f"still settling ({head.elapsed_s / rest - 1:+.0%} vs the rest)"))
            lines.pop(0)
    return dropped


def _no_steady_message(log: TrainingLog, parts: list[_Part], classified: list[_Classified], kinds: dict[str, int],
                       rules: _Rules) -> str:
    """One line: how many lines each rule dropped (``classified``: :func:`_classify`'s answer, ``kinds`` its
    counts), and the remedy that can help (--warmup 0 only where the warm-up rule dropped lines that would be
    kept without it)."""
    warmup, graph, window, gbs = rules.warmup, rules.graph_warmup, rules.profile_window, rules.global_batch_size
    s0 = parts[0].start
    again = " and after each restart" if log.restarts else ""
    other_gbs = sorted({it.global_batch_size for it, _, why in classified if why and why[0] == "ramp-up"
                        and it.global_batch_size})
    labels = {"redone": "logged again after a restart",
              "warm-up": f"in warm-up (iterations {s0 + 1}-{s0 + warmup}){again}",
              "graph": f"in CUDA-graph warm-up (iterations {s0 + warmup + 1}-{s0 + warmup + graph}: "
                       f"cuda_graph_warmup_steps {graph}){again}",
              "ramp-up": f"at a ramp-up batch size (GBS {', '.join(map(str, other_gbs))}; the run's is {gbs})",
              "profiler": "in the profiler window ({}-{})".format(*(window or (0, 0))),
              "nan": "with NaN iterations", "skipped": "with skipped iterations"}
    parts_text = [f"{n} {labels[k]}" for k, n in kinds.items() if n]
    advice = []
    last_it, last_part, last_why = classified[-1]
    if warmup and any(why is None for _, _, why in _classify(parts, replace(rules, warmup=0))):
        advice.append("pass --warmup 0 (fewer warm-up iterations) or run longer")
    elif last_why is not None and last_why[0] == "ramp-up":
        advice.append(f"run past the batch-size ramp-up (the log stops at GBS {last_it.global_batch_size} of {gbs})")
    elif last_why is not None and last_why[0] in ("warm-up", "graph", "profiler"):
        # the log stops inside a window: later lines would be kept
        start = parts[last_part].start
        past = max(start + warmup + graph, window[1] if kinds["profiler"] and window else 0)
        why = (f" (warm-up {warmup} + cuda_graph_warmup_steps {graph})" if warmup and graph
               and past == start + warmup + graph else "")
        advice.append(f"run past iteration {past}{why}")
    if kinds["nan"] or kinds["skipped"]:
        advice.append("intervals with NaN or skipped iterations do not time normal steps: log a run without them")
    return (f"{log.path}: no steady iteration left: of {len(classified)} logged line(s) (last iteration "
            f"{last_it.iteration}), {', '.join(parts_text)}; {'; '.join(advice)}")


def steady_state(log: TrainingLog, *, warmup_iters: int | None = None, graph_warmup_iters: int = 0,
                 profile_window: tuple[int, int] | None = None, global_batch_size: int | None = None) -> SteadyState:
    """Drop warm-up (the first ``warmup_iters`` iterations after the run's start and after each restart, then
    ``graph_warmup_iters`` more when CUDA graphs are captured), lines a restart logged again, lines at another
    batch size than ``global_batch_size`` (a ramp-up), intervals that overlap a profiler window, intervals with
    skipped or NaN iterations, and leading intervals (of the run and of each restart) still slower than the
    rest by more than SETTLE_TOLERANCE; the median and spread of what is left. When nothing is left:
    MoeplanError (one line) counting the lines each rule dropped, suggesting ``--warmup 0`` only where the
    warm-up rule is what removed them."""
    rules = _Rules(DEFAULT_WARMUP_ITERS if warmup_iters is None else warmup_iters, graph_warmup_iters,
                   profile_window, global_batch_size)
    parts = _parts(log)
    dropped: list[tuple[int, str]] = []
    kept: list[list[Iteration]] = [[] for _ in parts]
    kinds = dict.fromkeys(("redone", "warm-up", "graph", "ramp-up", "profiler", "nan", "skipped"), 0)
    classified = _classify(parts, rules)
    for it, k, why in classified:
        if why is None:
            kept[k].append(it)
        else:
            kinds[why[0]] += 1
            dropped.append((it.iteration, why[1]))
    dropped += _settle(kept)
    used = [it for lines in kept for it in lines]
    if not used:  # settling keeps at least two lines: only the rules above can drop every line
        raise MoeplanError(_no_steady_message(log, parts, classified, kinds, rules))
    times = [i.elapsed_s for i in used]
    med = statistics.median(times)
    tflops = [i.tflops_per_gpu for i in used if i.tflops_per_gpu is not None]
    return SteadyState(tuple(used), tuple(sorted(dropped)), med, (max(times) - min(times)) / med,
                       statistics.median(tflops) if tflops else None)


__all__ = ["GIB", "STDIN", "Identity", "Iteration", "MemoryReport", "Restart", "SteadyState", "TrainingLog",
           "group_runs", "join_runs", "no_iteration_error", "parse_log", "parse_runs", "printed_settings", "read_log",
           "read_runs", "read_text", "split_log", "steady_state"]
