"""`moeplan calibrate`: fit the timing model's global constants to a cluster from its training logs.

Each log (moeplan.logs) gives a run's settings, its steady-state step time and throughput, and its peak
memory. The run is rebuilt as a :class:`~moeplan.run.config.RunConfig` from its real settings (the same reader
`moeplan check` uses), then:

- timing: least squares on log step time (= log throughput at the run's FLOPs) over every log at once, in
  the log of the :class:`~moeplan.engine.timing.Calibration` constants, by Gauss-Newton with a truncated SVD: only
  the directions the runs pin down move (at most one per distinct run configuration; one log of one
  layout moves one overall scale shared by the constants its time depends on); constants no run's time
  depends on, or that the runs cannot separate, keep their defaults and are listed as not moved;
- memory: the one memory constant a log measures, ``reserve_gib`` (what the allocator holds beyond the
  estimate: cache, fragmentation), least squares of (estimated allocated + reserve) on max reserved.

The profile (``--out profile.yaml``) holds the moved constants as overrides of the default calibration,
the runs they came from and moeplan's version; ``--calibration profile.yaml`` applies it elsewhere.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import yaml

from moeplan.base import safeyaml
from moeplan.base.errors import MoeplanError, yaml_problem
from moeplan.base.fields import KNOB_BY_FIELD, normalize_version
from moeplan.base.outfile import file_identity
from moeplan.base.vocab import DEFAULT_MCORE_VERSION
from moeplan.engine.estimate import Estimate, evaluate
from moeplan.engine.flops import flops_per_token
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, NON_TIMING_CONSTANTS, SHARE_CONSTANTS, Calibration
from moeplan.hardware import GPUSpec, load_gpu
from moeplan.logs import GIB, STDIN, SteadyState, TrainingLog, read_runs, steady_state
from moeplan.megatron.architecture import architecture_mismatch, infer_model, with_split_layout
from moeplan.megatron.export import format_override_value
from moeplan.megatron.read import parse_run_text
from moeplan.megatron.read.bridge import ARCHITECTURE_FIELDS
from moeplan.megatron.read.overrides import parse_override_value
from moeplan.megatron.to_run import run_config_from_settings
from moeplan.models import load_model
from moeplan.models.spec import MODEL_FEATURES, ModelSpec
from moeplan.plan.pitfalls import above_peak
from moeplan.run.config import RunConfig

def moeplan_version() -> str:
    try:
        return version("moeplan")
    except PackageNotFoundError:  # a source tree on sys.path, not installed
        return "unknown"


# --set keys that are not Megatron settings: what a log cannot say about the cluster or the model.
RUN_KEYS = ("model", "gpu", "gpus", "mcore_version", "moe_imbalance")
_SET_ALIASES = {"world_size": "gpus", "seq_len": "seq_length", "gbs": "global_batch_size", "mbs": "micro_batch_size",
                "tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
                "vpp": "virtual_pipeline_model_parallel_size", "cp": "context_parallel_size",
                "ep": "expert_model_parallel_size", "etp": "expert_tensor_parallel_size"}
STEP = math.log(1.05)  # finite-difference step in log(constant)
MIN_ELASTICITY = 0.01  # d log(step) / d log(constant) below this on every run: the logs cannot move it
RCOND = 0.05  # singular values below this share of the largest carry no information (noise-level directions)
MOVED = 0.005  # a constant that moved by less than 0.5% is reported as not moved
MAX_FACTOR = 4.0  # no constant moves further than this factor from its default
# A run's logged FLOPs over moeplan's count outside this band gets a note: moeplan counts as Megatron-Core's
# num_floating_point_operations does (moeplan.engine.flops; 1.000 on examples/qwen3_30b_a3b_16xh100_megatron_lm.log),
# so rounding and version differences (MTP, norms, vocabulary padding) stay within a few %, while a misread
# setting or model (GPU count, sequence length, batch, another model) is off by tens of % or a factor.
FLOPS_RATIO_BAND = (0.9, 1.1)
# RMS log step-time error left after the fit above which the result warns: the defaults are within ~15%
# (rms 0.14 on the example log) and a fit should close most of that; more means the runs disagree.
SUSPECT_RMS = 0.15


@dataclass(frozen=True)
class LoggedRun:
    """One log as a run: its configuration, the GPU and what it measured."""

    log: TrainingLog
    config: RunConfig
    gpu: GPUSpec
    steady: SteadyState
    measured_tflops_per_gpu: float
    tflops_source: str  # "log" or "derived" (moeplan's FLOPs / measured step time)
    peak_allocated_gib: float | None
    peak_reserved_gib: float | None
    notes: tuple[str, ...] = ()

    @property
    def step_time_s(self) -> float:
        return self.steady.step_time_s

    def key(self) -> tuple[Any, ...]:
        """What makes two runs the same configuration (the same run logged twice pins nothing new)."""
        c = self.config
        return (c.model.name, self.gpu.name, c.parallel, c.batch, c.recompute, c.precision, c.dispatcher,
                c.cuda_graph_scopes, c.optimizer_offload, c.ep_overlap, c.cp_comm_type, c.grad_fp32, c.bf16_moments)


# ---------------------------------------------------------------------------------------- log -> run


def _set_entry(key: str, value: object, given: str) -> tuple[str, object]:
    """One setting (``given``: how the caller gave it, for the error): its key through the aliases, checked."""
    key = _SET_ALIASES.get(key, key)
    if key not in RUN_KEYS and key not in KNOB_BY_FIELD and "." not in key:
        raise MoeplanError(f"{given}: not a Megatron-Core field moeplan reads nor one of {', '.join(RUN_KEYS)}")
    if key == "moe_imbalance" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise MoeplanError(f"{given}: expected a number >= 1.0 (the expert load imbalance factor, e.g. 1.2), "
                           f"got {value!r}")
    return key, value


def parse_sets(items: list[str] | None) -> dict[str, object]:
    """``--set key=value`` pairs: Megatron field names, Bridge paths (section.field) or run keys."""
    out: dict[str, object] = {}
    for item in items or ():
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise MoeplanError(f"--set {item!r}: expected key=value, e.g. --set seq_length=4096")
        key, value = _set_entry(key, parse_override_value(raw), f"--set {key}")
        out[key] = value
    return out


def normalize_sets(sets: object) -> dict[str, object]:
    """The settings of :func:`calibrate`'s ``sets``: None, a mapping ``{key: value}`` (a str value is read as
    ``--set key=value`` reads it) or a sequence of ``"key=value"`` strings (``--set``); anything else (one
    string, a number) is a one-line MoeplanError naming ``sets``, in the house style of moeplan.base.argcheck."""
    if sets is None:
        return {}
    if isinstance(sets, Mapping):
        out: dict[str, object] = {}
        for key, value in sets.items():
            if not isinstance(key, str) or not key.strip():
                raise MoeplanError(f"sets: each key must be a setting name (a str), got {key!r} ({type(key).__name__})")
            key, value = _set_entry(key.strip(), parse_override_value(value) if isinstance(value, str) else value,
                                    f"sets[{key!r}]")
            out[key] = value
        return out
    if isinstance(sets, (str, bytes)) or not isinstance(sets, Iterable):
        raise MoeplanError(f"sets must be a mapping {{key: value}} or a list of 'key=value' strings, got {sets!r} "
                           f"({type(sets).__name__})")
    items = list(sets)
    for item in items:
        if not isinstance(item, str):
            raise MoeplanError(f"each of sets must be a 'key=value' string, got {item!r} ({type(item).__name__})")
    return parse_sets(items)


def _settings(log: TrainingLog) -> tuple[dict[str, object], dict[str, object]]:
    """(Megatron settings keyed by field, architecture fields) of a log."""
    if log.format == "megatron-lm":
        raw = log.settings
        settings = {k: v for k, v in raw.items() if k in KNOB_BY_FIELD}
        return settings, {k: v for k, v in raw.items() if k in ARCHITECTURE_FIELDS}
    if log.format == "bridge-summary":
        text = "\n".join(f"{path}={format_override_value(v)}" for path, v in log.settings.items()
                         if isinstance(v, (str, int, float, bool, list, tuple)) or v is None)
        parsed = parse_run_text(text, log.path)
        return dict(parsed.settings), dict(parsed.architecture)
    if log.format == "bridge-yaml" and log.config_yaml:
        parsed = parse_run_text(log.config_yaml, log.path)
        return dict(parsed.settings), dict(parsed.architecture)
    return {}, {}


def _missing(log: TrainingLog, what: str, key: str, example: str) -> MoeplanError:
    where = {"megatron-lm": "its argument dump", "bridge-summary": "its configuration summary",
             "bridge-yaml": "its Task Configuration"}.get(log.format, "no argument dump or Bridge configuration")
    return MoeplanError(f"{log.path}: the log does not give {what} ({key}; {where}); pass --set {key}={example}")


def run_from_log(log: TrainingLog, *, model: str | None = None, gpu: str | None = None,
                 sets: dict[str, object] | None = None, hardware_file: str | None = None,
                 warmup_iters: int | None = None) -> LoggedRun:
    """The run a log measured, with its steady state (MoeplanError naming any setting it lacks)."""
    sets = dict(sets or {})
    settings, arch = _settings(log)
    if settings.get("global_batch_size") is None and log.iterations[-1].global_batch_size:
        settings["global_batch_size"] = log.iterations[-1].global_batch_size  # the iteration line prints it
    stated = {**arch, **settings}  # what the log itself says, before --set
    notes: list[str] = list(log.notes)
    for key, value in sets.items():
        if key in KNOB_BY_FIELD:
            notes += _overridden(f"{key}={format_override_value(value)}", {key: value}, stated)
            settings[key] = value
        elif "." in key:  # a Bridge path: read it the way `moeplan check` reads overrides
            parsed = parse_run_text(f"{key}={format_override_value(value)}", "--set")
            notes += _overridden(f"{key}={format_override_value(value)}", {**parsed.architecture, **parsed.settings},
                              stated)
            settings.update(parsed.settings)
            arch.update(parsed.architecture)
    for key, example in (("seq_length", "4096"), ("global_batch_size", "1024")):
        if settings.get(key) is None:
            raise _missing(log, "the sequence length" if key == "seq_length" else "the global batch size", key, example)
    model_ref = str(sets.get("model") or model or "")
    spec = load_model(model_ref) if model_ref else infer_model(arch, log.path)
    if model_ref:
        notes += _other_model("--set model" if sets.get("model") else "--model", spec, arch)
    gpu_name = str(sets.get("gpu") or gpu or "")
    if not gpu_name:
        raise MoeplanError(f"{log.path}: the log does not name the GPU type; pass --gpu NAME (see moeplan hardware)")
    gpu_spec = load_gpu(gpu_name, hardware_file)
    logged_world = log.settings.get("world_size") if log.format == "megatron-lm" else None
    world = sets.get("gpus", logged_world)
    if "gpus" in sets:
        notes += _overridden(f"gpus={sets['gpus']}", {"world_size": sets["gpus"]}, {"world_size": logged_world})
    if world is None:
        raise _missing(log, "the GPU count", "gpus", "16")
    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        raise MoeplanError(f"{log.path}: the GPU count must be a positive integer, got {world!r}")
    version = normalize_version(str(sets.get("mcore_version") or DEFAULT_MCORE_VERSION))
    cfg = with_split_layout(run_config_from_settings(settings, spec, world, gpu_spec, mcore_version=version), arch)
    if "moe_imbalance" in sets:
        _, imbalance = _set_entry("moe_imbalance", sets["moe_imbalance"], "--set moe_imbalance")  # a number
        cfg = cfg.with_(moe_imbalance=float(imbalance))  # type: ignore[arg-type]
    elif spec.first_moe is not None and _router_balanced(log) is False:
        notes.append("routing is not force-balanced (moe_router_force_load_balancing false): the measured time "
                     "includes expert load imbalance the estimate assumes away; --set moe_imbalance=F models it")
    logged_gbs = stated.get("global_batch_size")  # the run's (final) batch size: a --set does not change the log
    steady = steady_state(log, warmup_iters=warmup_iters, graph_warmup_iters=_graph_warmup(log, cfg),
                          profile_window=_profile_window(log),
                          global_batch_size=logged_gbs if isinstance(logged_gbs, int) else None)
    if steady.tflops_per_gpu is not None:
        tflops, source = steady.tflops_per_gpu, "log"
        impossible = above_peak(tflops, gpu_spec, cfg.precision)  # Megatron Bridge #2667's symptom
        if impossible:
            raise MoeplanError(f"{log.path}: the logged {impossible}; no constant can be fitted to it")
    else:
        b = cfg.batch
        tflops = flops_per_token(spec, b.seq_len, cfg.parallel.tp).total_flops * b.gbs * b.seq_len / (
            steady.step_time_s * world) / 1e12
        source = "derived"
        notes.append("the log has no throughput (log_throughput off): TFLOP/s derived from moeplan's FLOPs count")
    peak = log.peak
    return LoggedRun(log, cfg, gpu_spec, steady, tflops, source,
                     peak.max_allocated_bytes / GIB if peak and peak.max_allocated_bytes else None,
                     max((r.max_reserved_bytes or 0.0) for r in log.memory) / GIB if log.memory else None,
                     tuple(notes))


def _same(a: object, b: object) -> bool:
    """Equal as settings: a list and a tuple of the same items are; so are a value and its printed form."""
    def norm(v: object) -> object:
        return tuple(v) if isinstance(v, list) else v
    return norm(a) == norm(b) or str(a) == str(b)


def _overridden(given: str, values: dict[str, object], stated: dict[str, object]) -> list[str]:
    """A note for each field ``--set given`` changes from a value the log itself states (None: not stated)."""
    return [f"--set {given} overrides the log's {name} {format_override_value(stated[name])}: "
            "the estimate is not of the run the log measured"
            for name, new in values.items() if stated.get(name) is not None and not _same(new, stated[name])]


def _other_model(flag: str, spec: ModelSpec, arch: dict[str, object]) -> list[str]:
    """A note when the model given does not have the architecture the log states (its first two differences)."""
    diffs = [f"{k} {model} vs {logged} logged" for k, (logged, model) in architecture_mismatch(arch, spec).items()]
    if not diffs:
        return []
    return [f"{flag} {spec.name} differs from the log's architecture ({', '.join(diffs[:2])}): the estimate is not of "
            "the run the log measured"]


def _setting(log: TrainingLog, mlm: str, bridge: str) -> object:
    return log.settings.get(mlm if log.format == "megatron-lm" else bridge)


def _router_balanced(log: TrainingLog) -> bool | None:
    if log.format == "megatron-lm":
        v = log.settings.get("moe_router_force_load_balancing")
    elif log.format == "bridge-summary":
        v = log.settings.get("model.moe_router_force_load_balancing", False)  # absent = Megatron-Core default
    elif log.format == "bridge-yaml":
        v = log.settings.get("model.moe_router_force_load_balancing")
    else:
        return None
    return v if isinstance(v, bool) else None


def _graph_warmup(log: TrainingLog, cfg: RunConfig) -> int:
    """Iterations spent capturing CUDA graphs: Megatron-Core cuda_graph_warmup_steps (default 3,
    transformer_config.py) before capture, when graphs are on."""
    if not cfg.cuda_graph_scopes:
        return 0
    v = _setting(log, "cuda_graph_warmup_steps", "model.cuda_graph_warmup_steps")
    return v if isinstance(v, int) and not isinstance(v, bool) else 3


def _profile_window(log: TrainingLog) -> tuple[int, int] | None:
    """Megatron-LM --profile with --profile-step-start/end (arguments.py), or Bridge profiling.* (config.py
    ProfilingConfig: use_nsys_profiler / use_pytorch_profiler, profile_step_start/end)."""
    if log.format == "megatron-lm":
        on = log.settings.get("profile") is True
        start, end = log.settings.get("profile_step_start"), log.settings.get("profile_step_end")
    else:
        on = any(log.settings.get(f"profiling.{k}") is True for k in ("use_nsys_profiler", "use_pytorch_profiler"))
        start, end = log.settings.get("profiling.profile_step_start"), log.settings.get("profiling.profile_step_end")
    if on and isinstance(start, int) and isinstance(end, int):
        return start, end
    return None


def _run_identity(log: TrainingLog) -> dict[str, object]:
    """What this module reads from one start-up's settings (the run's configuration, world size, CUDA-graph
    warm-up, profiler window, routing): two start-ups that agree on it are one run resumed; the rest of the
    settings (train_iters, paths, seeds) may change on a resume without changing what was measured."""
    settings, arch = _settings(log)
    return {**arch, **settings,
            "world_size": log.settings.get("world_size") if log.format == "megatron-lm" else None,
            "cuda_graph_warmup_steps": _setting(log, "cuda_graph_warmup_steps", "model.cuda_graph_warmup_steps"),
            "profile_window": _profile_window(log), "moe_router_force_load_balancing": _router_balanced(log)}


def log_runs(path: str | Path) -> list[TrainingLog]:
    """The runs of one log file (``-``: standard input; gzip-compressed or not): its start-ups split at each
    settings print or iteration numbers going back, those that agree on what this module reads
    (:func:`_run_identity`) joined as one resumed run, the others named ``PATH#k`` (moeplan.logs.read_runs).
    MoeplanError (one line) when it cannot be read or holds no complete iteration line."""
    return read_runs(path, _run_identity)


def distinct_logs(paths: list[str]) -> None:
    """MoeplanError (one line) when one log is given twice (standard input, or the same file: moeplan.base.outfile
    file_identity, so a hard link or another spelling of the path too): its run would be fitted twice."""
    seen: dict[object, str] = {}
    for p in paths:
        key = STDIN if p == STDIN else file_identity(p)
        if key in seen:
            raise MoeplanError(f"{p} is the same log as {seen[key]}: give each log once (a log given twice would "
                               "weigh its run twice in the fit)")
        seen[key] = p


# ---------------------------------------------------------------------------------------- constants


def constant_names(cal: Calibration = DEFAULT_CALIBRATION) -> list[str]:
    """Every fittable constant: scalar fields by name, dict fields as ``field.key`` (not the error bands:
    timing.NON_TIMING_CONSTANTS)."""
    out = []
    for f in fields(cal):
        if f.name in NON_TIMING_CONSTANTS:
            continue
        value = getattr(cal, f.name)
        if isinstance(value, dict):
            out += [f"{f.name}.{k}" for k in value]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(f.name)
    return out


def get_constant(cal: Calibration, name: str) -> float:
    head, _, key = name.partition(".")
    value = getattr(cal, head)
    return float(value[key] if key else value)


def with_constants(cal: Calibration, values: dict[str, float]) -> Calibration:
    overrides: dict[str, Any] = {}
    for name, v in values.items():
        head, _, key = name.partition(".")
        if key:
            overrides.setdefault(head, {})[key] = v
        else:
            overrides[head] = v
    return cal.with_overrides(overrides, "calibrate")


def _bounds(name: str, default: float) -> tuple[float, float]:
    """The fit's range of log(constant): within MAX_FACTOR of the default, and <= 1 for a share."""
    hi = default * MAX_FACTOR
    if name.split(".")[0] in SHARE_CONSTANTS:
        hi = min(hi, 1.0)
    return math.log(default / MAX_FACTOR), math.log(max(hi, default))


# ---------------------------------------------------------------------------------------- fitting


def _sym_eigen(a: list[list[float]]) -> tuple[list[float], list[list[float]]]:
    """Eigenvalues and eigenvectors (columns) of a small symmetric matrix (cyclic Jacobi rotations)."""
    n = len(a)
    m = [row[:] for row in a]
    v = [[1.0 if i == j else 0.0 for j in range(n)] for i in range(n)]
    for _ in range(100):
        off = sum(m[i][j] ** 2 for i in range(n) for j in range(n) if i != j)
        if off < 1e-22:
            break
        for p in range(n):
            for q in range(p + 1, n):
                if abs(m[p][q]) < 1e-30:
                    continue
                theta = (m[q][q] - m[p][p]) / (2 * m[p][q])
                t = math.copysign(1.0, theta) / (abs(theta) + math.sqrt(theta * theta + 1))
                c = 1 / math.sqrt(t * t + 1)
                s = t * c
                for k in range(n):
                    mkp, mkq = m[k][p], m[k][q]
                    m[k][p], m[k][q] = c * mkp - s * mkq, s * mkp + c * mkq
                for k in range(n):
                    mpk, mqk = m[p][k], m[q][k]
                    m[p][k], m[q][k] = c * mpk - s * mqk, s * mpk + c * mqk
                for k in range(n):
                    vkp, vkq = v[k][p], v[k][q]
                    v[k][p], v[k][q] = c * vkp - s * vkq, s * vkp + c * vkq
    return [m[i][i] for i in range(n)], v


def _truncated_step(jac: list[list[float]], resid: list[float], rank: int) -> list[float]:
    """Least-squares step of J x = r on the ``rank`` strongest directions of J (pseudo-inverse through the
    eigen-decomposition of J^T J; directions weaker than RCOND x the strongest are left out)."""
    p = len(jac[0])
    jtj = [[sum(row[i] * row[j] for row in jac) for j in range(p)] for i in range(p)]
    jtr = [sum(row[i] * r for row, r in zip(jac, resid)) for i in range(p)]
    vals, vecs = _sym_eigen(jtj)
    order = sorted(range(p), key=lambda k: -vals[k])
    top = vals[order[0]] if order else 0.0
    step = [0.0] * p
    for k in order[:rank]:
        if vals[k] <= 0 or vals[k] < top * RCOND**2:
            break
        coef = sum(vecs[i][k] * jtr[i] for i in range(p)) / vals[k]
        for i in range(p):
            step[i] += coef * vecs[i][k]
    return step


@dataclass(frozen=True)
class Fit:
    calibration: Calibration
    moved: dict[str, tuple[float, float]]  # name -> (default, fitted)
    not_moved: dict[str, str]  # name -> why
    degrees_of_freedom: int
    distinct_runs: int
    rms_log_error_before: float
    rms_log_error_after: float
    reserve_gib: float | None
    reserve_gib_default: float
    message: str
    notes: list[str] = field(default_factory=list)  # warnings that the fit is suspect (calibrate's "warnings")


def _log_times(runs: list[LoggedRun], cal: Calibration) -> list[float]:
    return [math.log(evaluate(r.config, r.gpu, cal).time.step_time_s) for r in runs]


def fit(runs: list[LoggedRun], base: Calibration = DEFAULT_CALIBRATION, iterations: int = 6) -> Fit:
    """Least squares on log step time over all runs, in log(constant), moving only what the runs pin."""
    names = constant_names(base)
    defaults = {n: get_constant(base, n) for n in names}
    measured = [math.log(r.step_time_s) for r in runs]
    distinct = len({r.key() for r in runs})

    def jacobian(theta: dict[str, float], active: list[str]) -> tuple[list[float], list[list[float]]]:
        cal = with_constants(base, {n: math.exp(theta[n]) for n in names})
        t0 = _log_times(runs, cal)
        cols = []
        for n in active:
            lo, hi = _bounds(n, defaults[n])
            h = STEP if theta[n] + STEP <= hi else -STEP
            moved = dict(theta)
            moved[n] += h
            t1 = _log_times(runs, with_constants(base, {k: math.exp(moved[k]) for k in names}))
            cols.append([(b - a) / h for a, b in zip(t0, t1)])
        return t0, [[cols[j][i] for j in range(len(active))] for i in range(len(runs))]

    theta = {n: math.log(defaults[n]) for n in names}
    t0, jac = jacobian(theta, names)
    sensitive = [n for j, n in enumerate(names) if max(abs(row[j]) for row in jac) >= MIN_ELASTICITY]
    not_moved = {n: "no run's step time depends on it" for n in names if n not in sensitive}
    before = math.sqrt(statistics.fmean((m - e) ** 2 for m, e in zip(measured, t0)))
    dof = min(distinct, len(sensitive))
    after = before
    if dof and sensitive:
        jac = [[row[names.index(n)] for n in sensitive] for row in jac]
        for _ in range(iterations):
            resid = [m - e for m, e in zip(measured, t0)]
            step = _truncated_step(jac, resid, dof)
            cap = math.log(2.0)
            for j, n in enumerate(sensitive):
                lo, hi = _bounds(n, defaults[n])
                theta[n] = min(hi, max(lo, theta[n] + max(-cap, min(cap, step[j]))))
            t_new, jac = jacobian(theta, sensitive)
            gain = math.sqrt(statistics.fmean((m - e) ** 2 for m, e in zip(measured, t_new)))
            done = abs(gain - after) < 1e-5
            t0, after = t_new, gain
            if done:
                break
    moved: dict[str, tuple[float, float]] = {}
    for n in sensitive:
        value = math.exp(theta[n])
        if abs(value / defaults[n] - 1) < MOVED:
            not_moved[n] = "the runs cannot separate it from the constants that moved"
            theta[n] = math.log(defaults[n])
        else:
            moved[n] = (defaults[n], value)
    cal = with_constants(base, {n: math.exp(theta[n]) for n in names})
    after = math.sqrt(statistics.fmean((m - e) ** 2 for m, e in zip(measured, _log_times(runs, cal))))
    if distinct == 1:
        message = (f"{len(runs)} log(s) of one run configuration pin ONE overall scale: the {len(moved)} constant(s) "
                   "its step time depends on moved together along one direction; more layouts or knobs separate them")
    else:
        message = (f"{distinct} distinct run configurations pin at most {dof} direction(s) in the {len(sensitive)} "
                   "constant(s) their step times depend on")
    reserve, reserve_default = _fit_reserve(runs, cal)
    return Fit(cal, moved, dict(sorted(not_moved.items())), dof, distinct, before, after, reserve, reserve_default,
               message, _suspect(theta, moved, defaults, after))


def _suspect(theta: dict[str, float], moved: dict[str, tuple[float, float]], defaults: dict[str, float],
             after: float) -> list[str]:
    """One-line warnings that the fitted profile is suspect: constants clamped at their bounds (the logs ask
    for more than MAX_FACTOR from a default, or a share above 1), or a large RMS error left after the fit."""
    out = []
    at_bound = [n for n in moved if any(math.isclose(theta[n], b, abs_tol=1e-9) for b in _bounds(n, defaults[n]))]
    if at_bound:
        shown = ", ".join(f"{n} {math.exp(theta[n]):.3g}" for n in at_bound[:4])
        more = f" and {len(at_bound) - 4} more" if len(at_bound) > 4 else ""
        out.append(f"{len(at_bound)} constant(s) stopped at the fit's bounds (a factor {MAX_FACTOR:g} from the "
                   f"default, or a share of 1): {shown}{more}; the profile is suspect: check the runs' settings and notes")
    if after > SUSPECT_RMS:
        out.append(f"RMS log step-time error after the fit {after:.3f} > {SUSPECT_RMS}: the constants cannot match "
                   "these runs together; the profile is suspect: check the runs' settings and notes")
    return out


def _fit_reserve(runs: list[LoggedRun], cal: Calibration) -> tuple[float | None, float]:
    """Least squares of estimated allocated + reserve on the logs' max reserved: the mean gap (>= 0)."""
    default = runs[0].config.reserve_gib if runs else 2.0
    gaps = [r.peak_reserved_gib - evaluate(r.config, r.gpu, cal).memory.peak.allocated_bytes / GIB
            for r in runs if r.peak_reserved_gib]
    return (max(0.0, statistics.fmean(gaps)) if gaps else None), default


# ---------------------------------------------------------------------------------------- report


def _estimate(run: LoggedRun, cal: Calibration, reserve_gib: float | None = None) -> Estimate:
    cfg = run.config if reserve_gib is None else run.config.with_(reserve_gib=reserve_gib)
    return evaluate(cfg, run.gpu, cal)


def run_rows(runs: list[LoggedRun], result: Fit) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        d, c = _estimate(r, DEFAULT_CALIBRATION), _estimate(r, result.calibration, result.reserve_gib)
        cfg = r.config
        logged_flops = r.measured_tflops_per_gpu * 1e12 * r.step_time_s * cfg.parallel.gpus
        flops_ratio = logged_flops / (d.time.tflops_per_gpu * 1e12 * d.time.step_time_s * cfg.parallel.gpus) \
            if r.tflops_source == "log" else None
        notes = list(r.notes)
        if flops_ratio is not None and not FLOPS_RATIO_BAND[0] <= flops_ratio <= FLOPS_RATIO_BAND[1]:
            notes.append(f"the log's FLOPs are {flops_ratio:.2f}x moeplan's count for this run (outside "
                         f"{FLOPS_RATIO_BAND[0]}-{FLOPS_RATIO_BAND[1]}): its model or settings were read or --set "
                         "wrong, or its Megatron counts FLOPs another way")
        alloc = d.memory.peak.allocated_bytes / GIB
        rows.append({
            "log": r.log.path,
            "format": r.log.format,
            "model": cfg.model.name,
            "gpu": r.gpu.name,
            "gpus": cfg.parallel.gpus,
            "layout": cfg.parallel.short(),
            "seq_len": cfg.batch.seq_len,
            "gbs": cfg.batch.gbs,
            "mbs": cfg.batch.mbs,
            "precision": cfg.precision,
            "recompute": cfg.recompute.label(),
            "dispatcher": cfg.dispatcher,
            "ep_overlap": cfg.ep_overlap,
            "cuda_graphs": sorted(cfg.cuda_graph_scopes),
            "optimizer_offload": cfg.optimizer_offload,
            "steady_state": r.steady.as_dict(),
            "measured_step_time_s": r.step_time_s,
            "measured_tflops_per_gpu": r.measured_tflops_per_gpu,
            "measured_tflops_source": r.tflops_source,
            "measured_peak_allocated_gib": r.peak_allocated_gib,
            "measured_peak_reserved_gib": r.peak_reserved_gib,
            "default_step_time_s": d.time.step_time_s,
            "default_tflops_per_gpu": d.time.tflops_per_gpu,
            "calibrated_step_time_s": c.time.step_time_s,
            "calibrated_tflops_per_gpu": c.time.tflops_per_gpu,
            "default_error": d.time.step_time_s and r.step_time_s / d.time.step_time_s - 1,
            "calibrated_error": c.time.step_time_s and r.step_time_s / c.time.step_time_s - 1,
            # the same on the TFLOP/s the table shows (measured / estimate - 1: - = the estimate is too fast); the
            # step-time errors above have the opposite sign for the same miss
            "default_tflops_error": _ratio_error(r.measured_tflops_per_gpu, d.time.tflops_per_gpu),
            "calibrated_tflops_error": _ratio_error(r.measured_tflops_per_gpu, c.time.tflops_per_gpu),
            "estimated_peak_allocated_gib": alloc,
            # measured / estimate - 1, as the step-time errors and the table's "err": + = the estimate is low
            "allocated_error": (r.peak_allocated_gib / alloc - 1) if r.peak_allocated_gib and alloc else None,
            # the log's FLOPs per step / moeplan's; outside FLOPS_RATIO_BAND a note says the run was misread
            "flops_ratio_log_vs_moeplan": flops_ratio,
            "notes": notes,
        })
    return rows


def _ratio_error(measured: float | None, estimate: float) -> float | None:
    """measured / estimate - 1 (None without a measurement or an estimate)."""
    return measured / estimate - 1 if measured and estimate else None


def calibrate(paths: list[str], *, model: str | None = None, gpu: str | None = None,
              sets: Mapping[str, object] | Iterable[str] | None = None, hardware_file: str | None = None,
              warmup_iters: int | None = None) -> dict[str, Any]:
    """Read the logs (``-``: standard input; a log holding several runs gives each, :func:`log_runs`), fit, and
    return the JSON-ready result (``runs``, ``constants``, ``not_moved``, ...). ``sets``: a mapping
    ``{key: value}`` or ``"key=value"`` strings (:func:`normalize_sets`)."""
    if not paths:
        raise MoeplanError("give at least one log")
    set_values = normalize_sets(sets)
    distinct_logs([str(p) for p in paths])
    runs = [run_from_log(log, model=model, gpu=gpu, sets=set_values, hardware_file=hardware_file,
                         warmup_iters=warmup_iters) for p in paths for log in log_runs(p)]
    gpus = sorted({r.gpu.name for r in runs})
    if len(gpus) > 1:
        raise MoeplanError(f"the logs ran on different GPU types ({', '.join(gpus)}); calibrate one cluster at a time")
    result = fit(runs)
    features = frozenset().union(*(r.config.model.features for r in runs))
    return {
        "moeplan_version": moeplan_version(),
        "gpu": gpus[0],
        # the logged models' features: a profile's estimates of models with them are no longer outside its fit
        "covered_features": [f for f in MODEL_FEATURES if f in features],
        "runs": run_rows(runs, result),
        "constants": {n: v for n, (_, v) in result.moved.items()},
        "defaults": {n: d for n, (d, _) in result.moved.items()},
        "not_moved": list(result.not_moved),
        "not_moved_reasons": result.not_moved,
        "memory": {"reserve_gib": result.reserve_gib, "reserve_gib_default": result.reserve_gib_default},
        # one line each: the fit is suspect (constants at their bounds, a large error left); also in the profile
        "warnings": list(result.notes),
        "fit": {"distinct_runs": result.distinct_runs, "degrees_of_freedom": result.degrees_of_freedom,
                "rms_log_error_before": result.rms_log_error_before,
                "rms_log_error_after": result.rms_log_error_after, "message": result.message,
                "target": "log step time (= log throughput at the run's FLOPs), every run at once"},
    }


# ---------------------------------------------------------------------------------------- profile


def _profile_constants(result: dict[str, Any]) -> dict[str, Any]:
    """The fitted constants, ``field.key`` names nested under their field, at 6 significant digits."""
    nested: dict[str, Any] = {}
    for name, value in result["constants"].items():
        head, _, key = name.partition(".")
        if key:
            nested.setdefault(head, {})[key] = float(f"{value:.6g}")
        else:
            nested[head] = float(f"{value:.6g}")
    return nested


def _profile_runs(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per fitted run: its log, model, layout and measured / estimated throughput, rounded."""
    return [{"log": r["log"], "model": r["model"], "gpus": r["gpus"], "layout": r["layout"],
             "seq_len": r["seq_len"], "gbs": r["gbs"],
             "measured_step_time_s": round(r["measured_step_time_s"], 4),
             "measured_tflops_per_gpu": round(r["measured_tflops_per_gpu"], 2),
             "measured_peak_allocated_gib": None if r["measured_peak_allocated_gib"] is None
             else round(r["measured_peak_allocated_gib"], 3),
             "default_tflops_per_gpu": round(r["default_tflops_per_gpu"], 2),
             "calibrated_tflops_per_gpu": round(r["calibrated_tflops_per_gpu"], 2)} for r in result["runs"]]


# The top-level keys of a profile, in the order profile_yaml writes them, each with what builds its value
# from a calibrate() result; load_profile refuses any other key.
_PROFILE_BUILDERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "moeplan_version": lambda result: result["moeplan_version"],
    "gpu": lambda result: result["gpu"],
    "constants": _profile_constants,
    "memory": lambda result: {k: round(v, 3) for k, v in result["memory"].items()
                              if k == "reserve_gib" and v is not None},
    "not_moved": lambda result: result["not_moved"],
    "covered_features": lambda result: result["covered_features"],
    "fit": lambda result: {**{k: (round(v, 5) if isinstance(v, float) else v) for k, v in result["fit"].items()},
                           **({"warnings": result["warnings"]} if result.get("warnings") else {})},
    "runs": _profile_runs,
}
PROFILE_KEYS = tuple(_PROFILE_BUILDERS)


def profile_yaml(result: dict[str, Any]) -> str:
    """The profile file: fitted constants (overrides of moeplan.engine.timing.Calibration), memory, provenance."""
    doc = {key: build(result) for key, build in _PROFILE_BUILDERS.items()}
    head = ("# moeplan calibration profile, written by `moeplan calibrate`.\n"
            "# constants: overrides of moeplan.engine.timing.Calibration (defaults: moeplan/hardware/calibration.yaml);\n"
            "# memory.reserve_gib: the per-GPU reserve the planner adds. Use: moeplan plan ... --calibration FILE\n")
    return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


@dataclass(frozen=True)
class Profile:
    path: str
    calibration: Calibration
    reserve_gib: float | None
    gpu: str | None
    runs: int

    def describe(self) -> str:
        return f"calibration {self.path} ({self.runs} run(s){', ' + self.gpu if self.gpu else ''})"

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "gpu": self.gpu, "runs": self.runs, "reserve_gib": self.reserve_gib,
                "constants": self.calibration.as_dict()}

    def other_gpu(self, gpu: str | None, hardware_file: str | None = None) -> str | None:
        """A one-line warning when the profile was fitted on another GPU than the run's ``gpu`` (names resolved
        through the catalog and ``hardware_file``), else None (same GPU, or either not named or unknown)."""
        if not self.gpu or not gpu:
            return None
        try:
            run = load_gpu(gpu, hardware_file).name
        except MoeplanError:  # the command reports an unknown GPU itself
            return None
        try:
            fitted = load_gpu(str(self.gpu), hardware_file).name
        except MoeplanError:
            fitted = str(self.gpu)
        if fitted.lower() == run.lower():
            return None
        return (f"{self.path} was fitted on {fitted} but this run is on {run}; its constants may not hold there "
                f"(fit one from {run} logs with moeplan calibrate)")


def load_profile(path: str | Path, hardware_file: str | Path | None = None) -> Profile:
    """A profile written by `moeplan calibrate` (MoeplanError, one line, for a bad file). A reserve not below
    the memory of the profile's GPU (resolved through the catalog and ``hardware_file``) is refused; for a GPU
    that does not resolve, the planner's memory check is left to judge it."""
    p = Path(path)
    try:
        doc = safeyaml.load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MoeplanError(f"{p}: cannot read calibration profile: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise MoeplanError(f"{p}: calibration profile is malformed YAML{yaml_problem(exc)}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("constants", {}), dict):
        raise MoeplanError(f"{p}: not a moeplan calibration profile (a mapping with 'constants')")
    unknown = sorted(str(k) for k in doc if k not in PROFILE_KEYS)
    if unknown:  # a constant put at the top level, or a typo, would otherwise change nothing without a word
        raise MoeplanError(f"{p}: unknown key(s) {', '.join(repr(k) for k in unknown)} in a calibration profile "
                           f"(known: {', '.join(PROFILE_KEYS)}; constants go under 'constants')")
    cal = DEFAULT_CALIBRATION.with_overrides(doc.get("constants") or {}, str(p))  # positive; shares in (0, 1]
    covered = doc.get("covered_features") or []
    if not isinstance(covered, list) or any(f not in MODEL_FEATURES for f in covered):
        raise MoeplanError(f"{p}: covered_features must be a list of {', '.join(MODEL_FEATURES)}, got {covered!r}")
    cal = replace(cal, out_of_fit_shortfall_log={k: v for k, v in cal.out_of_fit_shortfall_log.items()
                                                 if k not in covered})  # its runs had them: inside its fit
    memory = doc.get("memory") or {}
    reserve = memory.get("reserve_gib") if isinstance(memory, dict) else None
    if reserve is not None and (isinstance(reserve, bool) or not isinstance(reserve, (int, float))
                                or not math.isfinite(reserve) or reserve < 0):
        raise MoeplanError(f"{p}: memory.reserve_gib must be a number of GiB >= 0, got {reserve!r}")
    if reserve is not None and doc.get("gpu"):
        try:
            gpu = load_gpu(str(doc["gpu"]), hardware_file)
        except MoeplanError:
            gpu = None
        if gpu is not None and reserve >= gpu.hbm_bytes / GIB:
            raise MoeplanError(f"{p}: memory.reserve_gib {reserve:g} is not below the {gpu.hbm_bytes / GIB:.2f} GiB of "
                               f"its GPU ({gpu.name}): no run would fit; lower it or refit with moeplan calibrate")
    runs = doc.get("runs") or []
    return Profile(str(p), cal, None if reserve is None else float(reserve), doc.get("gpu"),
                   len(runs) if isinstance(runs, list) else 0)


__all__ = ["Fit", "LoggedRun", "Profile", "calibrate", "distinct_logs", "fit", "load_profile",
           "log_runs", "normalize_sets", "parse_sets", "profile_yaml", "run_from_log", "run_rows"]
