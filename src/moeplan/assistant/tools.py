"""The MCP tools' work, without the SDK: each function takes plain arguments (texts where the CLI takes files)
and returns the dict that the matching CLI command prints with ``--json`` (or, where the CLI prints a list, an
object holding it: MCP structured content is a JSON object). :mod:`moeplan.assistant.mcp_server` wraps them.

Texts (a config.json, a run config, a training log, a hardware file) are written to files in one temporary
directory that is removed before the function returns; that directory's path is taken out of every string of the
answer and of error messages, so an answer names a file by the name it was given (nothing is left on disk).
"""

from __future__ import annotations

import os
import shlex
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from moeplan.base.errors import MoeplanError, one_line
from moeplan.base.vocab import DEFAULT_GPU, DEFAULT_HEADROOM, LAUNCH_FORMATS
from moeplan.run.knobs import FSDP_SEARCH, Knob, flag_dest, knob_table

# The formats `moeplan plan --format` prints (besides its table): export's choices.
EXPORT_FORMATS = ("overrides", "yaml", "megatron-lm", *LAUNCH_FORMATS)


def knob_argument(k: Knob) -> str:
    """The tool argument of knob ``k``: the CLI flag's destination where the flag inverts the knob, else its API
    keyword (which is the flag's destination for every other flagged knob)."""
    return flag_dest(k) if k.flag is not None and k.flag.get("invert") else k.api


def knob_default(argument: str) -> Any:
    """The default of the tool argument ``argument`` (:func:`knob_argument`), read from the knob table as the CLI's
    flags read it: the knob's API default (``Knob.api_default``), negated for an inverted flag's argument
    (bf16_grads: grad_fp32's)."""
    k = next(k for k in knob_table() if knob_argument(k) == argument)
    return (not k.api_default) if k.flag is not None and k.flag.get("invert") else k.api_default


# A name a text may be saved under: a plain file name (no directory part), so a caller cannot point it elsewhere.
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class _Scratch:
    """A temporary directory for the texts one call gives (removed by :func:`scratch`)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def write(self, name: str, text: str, what: str) -> str:
        if not isinstance(text, str) or not text.strip():
            raise MoeplanError(f"{what} is empty: give the file's text")
        if not name or set(name) - _NAME_CHARS or name.startswith("."):
            raise MoeplanError(f"{what} name '{name}' must be a plain file name (letters, digits, '.', '_', '-')")
        path = os.path.join(self.root, name)
        if os.path.exists(path):
            raise MoeplanError(f"{what} name '{name}' is used twice in one call; give each text its own name")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return path

    def clean(self, obj: Any) -> Any:
        """``obj`` with this directory's path taken out of every string (file names stay)."""
        prefix = self.root + os.sep
        real = os.path.realpath(self.root) + os.sep
        if isinstance(obj, str):
            return obj.replace(prefix, "").replace(real, "")
        if isinstance(obj, dict):
            return {k: self.clean(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.clean(v) for v in obj]
        return obj


@contextmanager
def scratch() -> Iterator[_Scratch]:
    """A :class:`_Scratch` whose directory is gone afterwards; a MoeplanError raised inside has the directory's path
    taken out of its message (one line, as the CLI prints it)."""
    with tempfile.TemporaryDirectory(prefix="moeplan-mcp-") as root:
        s = _Scratch(root)
        try:
            yield s
        except MoeplanError as exc:
            raise MoeplanError(s.clean(one_line(exc))) from None


def _model(s: _Scratch, model: str, model_name: str) -> str:
    """A catalog name as given; a config.json's text (it starts with '{') saved as ``model_name``.json, whose
    stem is the model's name in the answer."""
    if not isinstance(model, str):
        raise MoeplanError(f"model must be a catalog name or a config.json text, got {model!r}")
    if model.lstrip().startswith("{"):
        return s.write(f"{model_name}.json", model, "model config.json")
    return model


def _hardware(s: _Scratch, hardware_yaml: str | None) -> str | None:
    return None if hardware_yaml is None else s.write("hardware.yaml", hardware_yaml, "hardware_yaml")


def _calibration(s: _Scratch, calibration_yaml: str | None, hardware_file: str | None) -> Any:
    """The timing constants and reserve of a calibration profile's text (``moeplan calibrate``'s ``profile_yaml``),
    or None (the fitted defaults)."""
    if calibration_yaml is None:
        return None
    from moeplan.calibrate.fit import load_profile

    return load_profile(s.write("calibration.yaml", calibration_yaml, "calibration_yaml"), hardware_file)


def _run_settings(s: _Scratch, *, gpu: str, hardware_yaml: str | None, calibration_yaml: str | None,
                  precision: str, mcore_version: str, te_version: str | None, te_grouped_tensor: bool,
                  moe_imbalance: float | None, reserve_gib: float | None, bf16_grads: bool, bf16_moments: bool,
                  optimizer: str, mtp_layers: int | None, routing: str | None = None) -> dict[str, Any]:
    """The cluster and numerics keywords every estimating command passes (the CLI's run / sweep keywords), with a
    profile's constants and reserve where given, as ``--calibration`` applies them; ``routing`` or
    ``moe_imbalance`` (not both) resolved as the CLI resolves them (moeplan.base.routing.resolve_imbalance)."""
    from moeplan.base.routing import resolve_imbalance
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION

    hardware_file = _hardware(s, hardware_yaml)
    profile = _calibration(s, calibration_yaml, hardware_file)
    if reserve_gib is None and profile is not None:
        reserve_gib = profile.reserve_gib
    cal = DEFAULT_CALIBRATION if profile is None else profile.calibration
    return dict(gpu=gpu, precision=precision, hardware_file=hardware_file,
                moe_imbalance=resolve_imbalance(routing, moe_imbalance, cal.natural_routing_imbalance),
                reserve_gib=knob_default("reserve_gib") if reserve_gib is None else reserve_gib,
                mcore_version=mcore_version, cal=cal,
                grad_fp32=not bf16_grads, bf16_moments=bf16_moments, optimizer=optimizer, mtp_layers=mtp_layers,
                te_version=te_version or knob_default("te_version"), te_grouped_tensor=te_grouped_tensor)


def _named(out: Any, calibration_yaml: str | None) -> Any:
    """As the CLI's ``--calibration`` output names its profile: every dict row gets ``calibration``."""
    if calibration_yaml is None:
        return out
    if isinstance(out, dict):
        return {**out, "calibration": "calibration.yaml"}
    return [{**r, "calibration": "calibration.yaml"} if isinstance(r, dict) else r for r in out]


# ------------------------------------------------------------------------------------------------ listings


def list_models() -> dict[str, Any]:
    """``moeplan models --json`` as ``{"models": [...]}``."""
    from moeplan.engine.listing import list_models as rows

    return {"models": rows()}


def list_hardware(hardware_yaml: str | None = None) -> dict[str, Any]:
    """``moeplan hardware [--hardware FILE] --json`` as ``{"gpus": [...]}``."""
    from moeplan.hardware import hardware_table

    with scratch() as s:
        return s.clean({"gpus": hardware_table(_hardware(s, hardware_yaml))})


def params(model: str, seq_len: int = 4096, tp: int = 1, model_name: str = "custom-model") -> dict[str, Any]:
    """``moeplan params MODEL --seq-len S --tp T --json``."""
    from moeplan import api

    with scratch() as s:
        return s.clean(api.params_report(_model(s, model, model_name), seq_len=seq_len, tp=tp))


# ------------------------------------------------------------------------------------------------ estimate


def estimate(model: str, *, gpus: int, seq_len: int, gbs: int, gpu: str = DEFAULT_GPU, mbs: int = 1, tp: int = 1,
             pp: int = 1, vpp: int = 1, cp: int = 1, ep: int = 1, etp: int = 1, pipeline_layout: str | None = None,
             recompute: str = knob_default("recompute"), dispatcher: str = knob_default("dispatcher"),
             ep_overlap: bool = knob_default("ep_overlap"), delay_wgrad: bool | None = knob_default("delay_wgrad"),
             cuda_graphs: str | None = knob_default("cuda_graphs"),
             optimizer_offload: float = knob_default("optimizer_offload"),
             offload_modules: str | None = knob_default("offload_modules"),
             cp_comm_type: str = knob_default("cp_comm_type"),
             capacity_factor: float | None = knob_default("capacity_factor"),
             rank_capacity_factor: float | None = knob_default("rank_capacity_factor"),
             fsdp: str | None = knob_default("fsdp"), fsdp_double_buffer: bool = knob_default("fsdp_double_buffer"),
             precision: str = knob_default("precision"), mcore_version: str = knob_default("mcore_version"),
             te_version: str | None = None, te_grouped_tensor: bool = knob_default("te_grouped_tensor"),
             moe_imbalance: float | None = None, reserve_gib: float | None = None,
             bf16_grads: bool = knob_default("bf16_grads"), bf16_moments: bool = knob_default("bf16_moments"),
             optimizer: str = knob_default("optimizer"), mtp_layers: int | None = None,
             hardware_yaml: str | None = None, calibration_yaml: str | None = None, model_name: str = "custom-model",
             routing: str | None = None, **knobs: Any) -> dict[str, Any]:
    """``moeplan estimate MODEL ... --json`` (the same keywords the CLI passes to moeplan.api.estimate_run);
    ``knobs``: any other knob of the knob table by its API keyword (moeplan.run.knobs)."""
    from moeplan import api

    with scratch() as s:
        kw = _run_settings(s, gpu=gpu, hardware_yaml=hardware_yaml, calibration_yaml=calibration_yaml,
                           precision=precision, mcore_version=mcore_version, te_version=te_version,
                           te_grouped_tensor=te_grouped_tensor, moe_imbalance=moe_imbalance, reserve_gib=reserve_gib,
                           bf16_grads=bf16_grads, bf16_moments=bf16_moments, optimizer=optimizer, mtp_layers=mtp_layers,
                           routing=routing)
        run = dict(gpus=gpus, seq_len=seq_len, gbs=gbs, mbs=mbs, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp,
                   pipeline_layout=pipeline_layout, recompute=recompute, dispatcher=dispatcher, ep_overlap=ep_overlap,
                   delay_wgrad=delay_wgrad, cuda_graphs=cuda_graphs, optimizer_offload=optimizer_offload,
                   offload_modules=offload_modules, cp_comm_type=cp_comm_type, capacity_factor=capacity_factor,
                   rank_capacity_factor=rank_capacity_factor, fsdp=fsdp, fsdp_double_buffer=fsdp_double_buffer, **kw,
                   **knobs)
        est = api.estimate_run(_model(s, model, model_name), **run)
        out = api.estimate_dict(est, kw["cal"])  # with its routing, and the knobs left at their defaults worth
        # changing, as `estimate --json` gives them
        out["hints"] = [h.as_dict() for h in api.estimate_hints(est, run, kw["cal"])]
        return s.clean(_named(out, calibration_yaml))


# ------------------------------------------------------------------------------------------------ plan


class Progress:
    """The planner's progress protocol (``start(total)``, ``advance()``, as moeplan.planner.search calls it) turned
    into calls of ``report(done, total)``: cumulative over every search a call runs (a halved GBS, a second CP
    range, each sweep length), so ``done`` only grows, at most every ``step`` of the work (and at each start)."""

    def __init__(self, report: Callable[[int, int], None], step: float = 0.05) -> None:
        self.report = report
        self.step = step
        self.done = 0
        self.total = 0
        self._next = 0

    def start(self, total: int) -> None:
        self.total += int(total)
        self._next = self.done + max(1, int(total * self.step))
        self.report(self.done, self.total)

    def advance(self) -> None:
        self.done += 1
        if self.done >= self._next or self.done == self.total:
            self._next = self.done + max(1, int(self.total * self.step))
            self.report(self.done, self.total)


def _fixed(tp: int | None, pp: int | None, vpp: int | None, cp: int | None, ep: int | None, etp: int | None,
           mbs: int | None, dispatcher: str | None, recompute: str | None) -> dict[str, Any]:
    """The pinned knobs, as the CLI's ``plan --tp ... --recompute`` pass them (``fixed``)."""
    out: dict[str, Any] = {k: v for k, v in (("tp", tp), ("pp", pp), ("vpp", vpp), ("cp", cp), ("ep", ep),
                                             ("etp", etp), ("mbs", mbs)) if v is not None}
    if dispatcher not in (None, "auto"):
        out["dispatcher"] = dispatcher
    if recompute:
        out["recompute"] = recompute
    return out


def _search(s: _Scratch, model: str, *, gpus: int, seq_len: int, gbs: int, gpu: str, top: int, headroom: float,
            tp: int | None, pp: int | None, vpp: int | None, cp: int | None, ep: int | None, etp: int | None,
            mbs: int | None, dispatcher: str | None, recompute: str | None, no_cuda_graphs: bool, no_offload: bool,
            keep_gbs: bool, fsdp: str, fsdp_double_buffer: bool, precision: str, mcore_version: str,
            te_version: str | None, te_grouped_tensor: bool, moe_imbalance: float | None, reserve_gib: float | None,
            bf16_grads: bool, bf16_moments: bool, optimizer: str, mtp_layers: int | None, hardware_yaml: str | None,
            calibration_yaml: str | None, model_name: str, progress: Progress | None, routing: str | None,
            **knobs: Any) -> Any:
    """moeplan.api.search_plans with the keywords ``moeplan plan`` passes; ``knobs``: the other knobs every
    estimating command takes (moeplan.run.knobs.command_knobs), by their API keyword."""
    from moeplan import api

    kw = _run_settings(s, gpu=gpu, hardware_yaml=hardware_yaml, calibration_yaml=calibration_yaml, precision=precision,
                       mcore_version=mcore_version, te_version=te_version, te_grouped_tensor=te_grouped_tensor,
                       moe_imbalance=moe_imbalance, reserve_gib=reserve_gib, bf16_grads=bf16_grads,
                       bf16_moments=bf16_moments, optimizer=optimizer, mtp_layers=mtp_layers, routing=routing)
    return api.search_plans(_model(s, model, model_name), gpus=gpus, seq_len=seq_len, gbs=gbs, top=top,
                            headroom=headroom, fixed=_fixed(tp, pp, vpp, cp, ep, etp, mbs, dispatcher, recompute),
                            cuda_graphs=not no_cuda_graphs, optimizer_offload=not no_offload,
                            allow_gbs_reduction=not keep_gbs, progress=progress, fsdp=fsdp,
                            fsdp_double_buffer=fsdp_double_buffer, **kw, **knobs)


def _plan_defaults() -> dict[str, Any]:
    """plan's and export's defaults: the knobs' from the knob table (:func:`knob_default`); te_version, routing,
    moe_imbalance and reserve_gib unset (None: :func:`_run_settings` resolves them), dispatcher and recompute not
    pinned (searched), fsdp the search's word."""
    return dict(gpu=DEFAULT_GPU, top=5, headroom=DEFAULT_HEADROOM, tp=None, pp=None, vpp=None, cp=None, ep=None,
                etp=None, mbs=None, dispatcher=None, recompute=None, no_cuda_graphs=False, no_offload=False,
                keep_gbs=False, fsdp=FSDP_SEARCH, te_version=None, routing=None, moe_imbalance=None, reserve_gib=None,
                mtp_layers=None, hardware_yaml=None, calibration_yaml=None, model_name="custom-model",
                **{name: knob_default(name) for name in ("fsdp_double_buffer", "precision", "mcore_version",
                                                         "te_grouped_tensor", "bf16_grads", "bf16_moments",
                                                         "optimizer")})


def plan(model: str, *, gpus: int, seq_len: int, gbs: int, progress: Progress | None = None,
         **options: Any) -> dict[str, Any]:
    """``moeplan plan ... --json``'s search as its whole answer (moeplan.api.PlanReport.as_dict): ``plans`` is the
    list the CLI prints ([] when nothing fits), ``closest`` the run that misses by least (the CLI's stderr line),
    ``notes`` and ``newer`` what the table adds."""
    kw = _plan_defaults() | options
    with scratch() as s:
        found = _search(s, model, gpus=gpus, seq_len=seq_len, gbs=gbs, progress=progress, **kw)
        out = found.as_dict()
        out["plans"] = _named(out["plans"], kw["calibration_yaml"])
        return s.clean(out)


def export(model: str, *, gpus: int, seq_len: int, gbs: int, format: str = "overrides",
           progress: Progress | None = None, **options: Any) -> dict[str, Any]:
    """Plan 1 of :func:`plan`'s search in one format, with ``text`` exactly what ``moeplan plan --format FORMAT``
    prints: Megatron Bridge overrides, a Bridge YAML or Megatron-LM flags, each headed by the provenance comment
    that ``moeplan check`` reads back, or a Megatron Bridge v0.6 launch command (bridge-launch: train.sh;
    perf-launch: the performance setup_experiment.py; Megatron-Core 0.19 only, refused before the search)."""
    if format not in EXPORT_FORMATS:
        raise MoeplanError(f"format '{format}' unknown; choose one of {', '.join(EXPORT_FORMATS)}")
    kw = _plan_defaults() | options
    if format in LAUNCH_FORMATS:
        from moeplan.megatron.launch import check_version  # imported at the call: the server starts without it

        check_version(kw["mcore_version"])
    with scratch() as s:
        found = _search(s, model, gpus=gpus, seq_len=seq_len, gbs=gbs, progress=progress, **kw)
        result = found.as_dict()
        if not result["plans"]:
            from moeplan.report import no_fit_sentence  # the CLI's and the page's wording

            raise MoeplanError(no_fit_sentence(result) + "; nothing to export")
        best = result["plans"][0]
        if format == "overrides":
            text = "\n".join([best["provenance"], *best["overrides"]]) + "\n"
        elif format == "yaml":
            text = best["yaml"]
        elif format in LAUNCH_FORMATS:
            from moeplan.megatron.launch import launch_command

            assert found.best is not None
            text = launch_command(found.best.config, format)
        else:
            text = best["provenance"] + "\n" + " ".join(shlex.quote(a) for a in best["megatron_lm_args"]) + "\n"
        return s.clean({"format": format, "text": text, "provenance": best["provenance"],
                        "overrides": best["overrides"], "yaml": best["yaml"],
                        "megatron_lm_args": best["megatron_lm_args"], "env": best["env"],
                        "plan": {k: best[k] for k in ("rank", "parallel", "mbs", "gbs", "seq_len", "recompute",
                                                      "dispatcher", "tflops_per_gpu", "tflops_range",
                                                      "tokens_per_s_per_gpu", "memory_gib", "capacity_gib",
                                                      "routing", "moe_imbalance")}})


# ------------------------------------------------------------------------------------------------ sweep


def sweep(model: str, *, gpus: int, seq_lens: list[int], gbs_tokens: int, gpu: str = DEFAULT_GPU,
          hold: bool = False, tp: int | None = None, pp: int | None = None, vpp: int | None = None,
          cp: int | None = None, ep: int | None = None, etp: int | None = None, mbs: int | None = None,
          recompute: str | None = None, dispatcher: str | None = None,
          optimizer_offload: float = knob_default("optimizer_offload"),
          cp_comm_type: str = knob_default("cp_comm_type"),
          fsdp: str = FSDP_SEARCH, fsdp_double_buffer: bool = knob_default("fsdp_double_buffer"),
          precision: str = knob_default("precision"), mcore_version: str = knob_default("mcore_version"),
          te_version: str | None = None, te_grouped_tensor: bool = knob_default("te_grouped_tensor"),
          moe_imbalance: float | None = None, reserve_gib: float | None = None,
          bf16_grads: bool = knob_default("bf16_grads"), bf16_moments: bool = knob_default("bf16_moments"),
          optimizer: str = knob_default("optimizer"), mtp_layers: int | None = None,
          hardware_yaml: str | None = None, calibration_yaml: str | None = None, model_name: str = "custom-model",
          progress: Progress | None = None, routing: str | None = None, **knobs: Any) -> dict[str, Any]:
    """``moeplan sweep ... --json`` as ``{"rows": [...]}``: each length planned, or the layout held (``hold``, or
    any layout size given) with the CLI's defaults for the held knobs; ``knobs``: the other knobs every estimating
    command takes (moeplan.run.knobs.command_knobs), by their API keyword."""
    from moeplan import api

    held: dict[str, Any] | None = {k: v for k, v in (("tp", tp), ("pp", pp), ("vpp", vpp), ("cp", cp), ("ep", ep),
                                                    ("etp", etp), ("mbs", mbs)) if v is not None}
    if not held and not hold:
        held = None
    else:
        held = dict(held or {}, recompute=recompute or knob_default("recompute"),
                    dispatcher=dispatcher or knob_default("dispatcher"), optimizer_offload=optimizer_offload,
                    cp_comm_type=cp_comm_type)
    with scratch() as s:
        kw = _run_settings(s, gpu=gpu, hardware_yaml=hardware_yaml, calibration_yaml=calibration_yaml,
                           precision=precision, mcore_version=mcore_version, te_version=te_version,
                           te_grouped_tensor=te_grouped_tensor, moe_imbalance=moe_imbalance, reserve_gib=reserve_gib,
                           bf16_grads=bf16_grads, bf16_moments=bf16_moments, optimizer=optimizer, mtp_layers=mtp_layers,
                           routing=routing)
        rows = api.sweep(_model(s, model, model_name), gpus=gpus, seq_lens=seq_lens, gbs_tokens=gbs_tokens, hold=held,
                         progress=progress, fsdp=fsdp, fsdp_double_buffer=fsdp_double_buffer, **kw, **knobs)
        return s.clean({"rows": _named(rows, calibration_yaml)})


# ------------------------------------------------------------------------------------------------ explain


def explain(model: str | None = None, *, config_a: str | None = None, config_b: str | None = None,
            seq_lens: list[int] | None = None, gpus: int | None = None, gbs_tokens: int | None = None,
            gpu: str | None = None, precision: str = knob_default("precision"), mcore_version: str | None = None,
            te_version: str | None = None, moe_imbalance: float | None = None, reserve_gib: float | None = None,
            hardware_yaml: str | None = None, model_name: str = "custom-model", no_fix: bool = False,
            routing: str | None = None, **knobs: Any) -> dict[str, Any]:
    """``moeplan explain ... --json``: why run B differs from run A, and the planner's remedy for B.

    Either ``model`` at two lengths (``seq_lens`` [A, B], ``gpus``, ``gbs_tokens``: each length planned), or two
    run configs' texts (``config_a``, ``config_b``; ``model`` then names their model where the files' '# moeplan:'
    comment does not), or one config's text and ``seq_lens`` [B] (run B: the same file at length B). ``routing`` or
    ``moe_imbalance`` (not both), as estimate and plan take them; for configs, neither keeps each file's comment's.
    ``knobs``: the other knobs every estimating command takes (moeplan.run.knobs.command_knobs) by their API keyword,
    for a model's two lengths (run configs say their own)."""
    from moeplan import api
    from moeplan.base.routing import resolve_file_imbalance, resolve_imbalance
    from moeplan.lint import checker
    from moeplan.plan.explain import compare, remedy
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION

    cal = DEFAULT_CALIBRATION
    with scratch() as s:
        hardware_file = _hardware(s, hardware_yaml)
        if config_a is None:
            if config_b is not None:
                raise MoeplanError("config_b needs config_a (run A's text)")
            if model is None:
                raise MoeplanError("explain needs a model (with seq_lens [A, B], gpus and gbs_tokens) or config_a")
            if not seq_lens or len(seq_lens) != 2:
                raise MoeplanError("explain of a model needs seq_lens [A, B] (two lengths); for more lengths use sweep")
            if not gpus or not gbs_tokens:
                raise MoeplanError("explain of a model needs gpus and gbs_tokens")
            points = api.sweep_points(_model(s, model, model_name), seq_lens=seq_lens, gbs_tokens=gbs_tokens,
                                      first_invalid_raises=True, gpu=gpu or DEFAULT_GPU, gpus=gpus,
                                      precision=precision, hardware_file=hardware_file,
                                      moe_imbalance=resolve_imbalance(routing, moe_imbalance,
                                                                      cal.natural_routing_imbalance),
                                      reserve_gib=knob_default("reserve_gib") if reserve_gib is None else reserve_gib,
                                      mcore_version=mcore_version or knob_default("mcore_version"), cal=cal,
                                      fsdp=FSDP_SEARCH, te_version=te_version or knob_default("te_version"), **knobs)
            missing = next((p for p in points if p.estimate is None), None)
            if missing is not None:
                return {"a": None, "b": None, "reasons": [],
                        "no_answer": f"no layout fits at seq {missing.seq_len:,}; nothing to compare"}
            a, b = points[0].estimate, points[1].estimate
        else:
            grouped = knobs.pop("te_grouped_tensor", False)  # as the CLI's explain of files takes it
            if knobs:
                raise MoeplanError(f"{', '.join(sorted(knobs))}: run configs say their own settings; give these with "
                                   "a model at two lengths")
            files = dict(model=None if model is None else _model(s, model, model_name), gpu=gpu, gpus=gpus,
                         hardware_file=hardware_file, cal=cal, te_version=te_version, mcore_version=mcore_version,
                         moe_imbalance=resolve_file_imbalance(routing, moe_imbalance, cal.natural_routing_imbalance),
                         reserve_gib=reserve_gib, te_grouped_tensor=grouped)
            path_a = s.write("run_a.yaml" if config_b is not None else "run.yaml", config_a, "config_a")
            a = checker.estimate_file(path_a, **files)
            if config_b is not None:
                if seq_lens:
                    raise MoeplanError("seq_lens with two configs: the files say their lengths")
                b = checker.estimate_file(s.write("run_b.yaml", config_b, "config_b"), **files)
            elif seq_lens and len(seq_lens) == 1:
                b = checker.estimate_file(path_a, seq_len=seq_lens[0], **files)
            else:
                raise MoeplanError("explain of one config needs config_b or seq_lens [B] (run B's length)")
        assert a is not None and b is not None
        out = compare(a, b).as_dict() | {"no_answer": None}
        if not no_fix:
            found = api.search_like(b.config, top=1, cal=cal)
            out["reasons"].append(remedy(b, found.best, found.result.newer, a).as_dict())
        return s.clean(out)


# ------------------------------------------------------------------------------------------------ check


def check_config(config: str, *, model: str | None = None, gpu: str | None = None, gpus: int | None = None,
                 mcore_version: str | None = None, te_version: str | None = None,
                 te_grouped_tensor: bool = knob_default("te_grouped_tensor"),
                 headroom: float = DEFAULT_HEADROOM, moe_imbalance: float | None = None, reserve_gib: float | None = None,
                 hardware_yaml: str | None = None, name: str = "run.yaml",
                 model_name: str = "custom-model", routing: str | None = None) -> dict[str, Any]:
    """``moeplan check CONFIG ... --json`` of a run config's text (a Megatron Bridge YAML, overrides, or a
    Megatron-LM argument list or launch script); ``name`` is the file name its findings are read under (its
    suffix tells a YAML from a script: run.yaml, run.sh, overrides.txt). A config with errors is an answer, not a
    tool error: ``errors`` counts them. ``routing`` or ``moe_imbalance`` (not both): neither keeps the file's
    '# moeplan:' comment's."""
    from moeplan.base.routing import resolve_file_imbalance
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
    from moeplan.lint import checker

    with scratch() as s:
        path = s.write(name, config, "config")
        result = checker.check(path, model=None if model is None else _model(s, model, model_name), gpu=gpu,
                               gpus=gpus, hardware_file=_hardware(s, hardware_yaml), mcore_version=mcore_version,
                               headroom=headroom, te_version=te_version, te_grouped_tensor=te_grouped_tensor,
                               moe_imbalance=resolve_file_imbalance(routing, moe_imbalance,
                                                                    DEFAULT_CALIBRATION.natural_routing_imbalance),
                               reserve_gib=reserve_gib)
        return s.clean(result.as_dict())


# ------------------------------------------------------------------------------------------------ calibrate


def calibrate(log: str, *, name: str = "training.log", model: str | None = None, gpu: str | None = None,
              sets: list[str] | None = None, warmup: int | None = None, hardware_yaml: str | None = None,
              model_name: str = "custom-model") -> dict[str, Any]:
    """``moeplan calibrate LOG ... --json`` of a training log's text, with ``profile_yaml``: the profile
    ``--out`` would write (give it back as ``calibration_yaml`` to estimate, plan or sweep)."""
    from moeplan import api
    from moeplan.calibrate.fit import profile_yaml

    with scratch() as s:
        path = s.write(name, log, "log")
        result = api.calibrate([path], model=None if model is None else _model(s, model, model_name), gpu=gpu,
                               sets=sets, hardware_file=_hardware(s, hardware_yaml), warmup_iters=warmup)
        return s.clean(result | {"profile_yaml": profile_yaml(result)})
