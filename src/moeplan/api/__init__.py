"""Python API: the functions the CLI calls. Typed results (:class:`Estimate`, :class:`PlanReport` of
:class:`~moeplan.plan.space.Plan`, :class:`SweepPoint`); ``estimate``, ``plan`` and ``sweep`` give the same as
JSON-ready dicts (their ``as_dict()``), the edge the CLI prints with ``--json``.

Each function takes a MODEL as a catalog name, a config.json path or a :class:`ModelSpec`.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from dataclasses import dataclass
from typing import Any

from moeplan.api.arguments import (check_choices, check_knobs, check_run_knobs, check_search_args, csv_set,
                                    knob_keywords)
from moeplan.base import argcheck
from moeplan.base.errors import GroupedTensorRefused, InvalidLayout, MoeplanError
from moeplan.base.fields import fields_for, normalize_version
from moeplan.base.limits import check_gbs_tokens, sweep_lengths_problem
from moeplan.base.routing import resolve_imbalance, routing_fields
from moeplan.base.te_release import grouped_tensor_refusal, te_label
from moeplan.base.vocab import DEFAULT_GPU
from moeplan.base.vocab import CUDA_GRAPH_SCOPES, DISPATCHERS, OFFLOAD_MODULES
from moeplan.engine.activations import first_unfused_attention, unfused_attention_bytes
from moeplan.engine.budget import budget_bytes
from moeplan.engine.estimate import Estimate, evaluate  # noqa: F401  (Estimate re-exported: the API returns it)
from moeplan.engine.estimate import estimate_dict, routing_answer, run_routing
from moeplan.engine.flops import flops_per_token
from moeplan.engine.knobs import knob_problem
from moeplan.engine.listing import list_models  # noqa: F401  (part of the API; its own module for start-up time)
from moeplan.engine.memory import GIB, offloaded_state_bytes
from moeplan.engine.params import count_params
from moeplan.engine.timeline import Timeline, build_timeline
from moeplan.engine.timing.attention import best_cp_comm_type
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration
from moeplan.engine.timing.step import estimate_time
from moeplan.hardware import GPUSpec, load_gpu
from moeplan.megatron.asserts import selective_recompute_problem
from moeplan.megatron.export import env_settings, provenance_comment, to_megatron_lm_args, to_overrides, to_yaml
from moeplan.models import ModelSpec, load_model
from moeplan.models.spec import with_mtp_layers
from moeplan.plan.advice import DEFAULT_HEADROOM, dispatcher_candidates
from moeplan.plan.hints import HINT_KNOBS, Hint, knob_hints
from moeplan.plan.planner import search
from moeplan.plan.space import Plan, PlanResult, SearchSpace
from moeplan.run.config import Recompute, RunConfig
from moeplan.run.knobs import FSDP_OFF, FSDP_SEARCH, command_knobs, fsdp_choices, knob_named, knob_table
from moeplan.run.parallel import Batch, Parallel, build_pipeline, validate, with_balanced_layout


def resolve_model(model: str | ModelSpec, mtp_layers: int | None = None) -> ModelSpec:
    """A model by catalog name, config.json path or spec; ``mtp_layers`` (Megatron-Core mtp_num_layers), when
    given, sets how many multi-token prediction modules it trains with (:func:`with_mtp_layers`)."""
    if not isinstance(model, ModelSpec):
        argcheck.path_like("model", model)
    if mtp_layers is not None:
        argcheck.count("mtp_layers", mtp_layers, minimum=0)
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    return spec if mtp_layers is None else with_mtp_layers(spec, mtp_layers)


def _resolve_gpu(gpu: str | GPUSpec, hardware_file: str | os.PathLike[str] | None = None) -> GPUSpec:
    """A GPU by name (the catalog, then ``hardware_file``) or as a :class:`GPUSpec`."""
    argcheck.optional_path("hardware_file", hardware_file)
    if isinstance(gpu, GPUSpec):
        return gpu
    argcheck.gpu_name(gpu, hint=" or a GPUSpec")
    return load_gpu(gpu, hardware_file)


def params_report(model: str | ModelSpec, seq_len: int = 4096, tp: int = 1) -> dict[str, Any]:
    """Parameters (total, active, by component) and training FLOPs per token at ``seq_len``.

    ``total_params`` and ``active_params`` are the main model's, without the multi-token prediction (MTP)
    modules, as the model cards state them (DeepSeek-V3: 671B, 37B) and as ``moeplan models`` lists them; active
    counts the embedding and output head. ``mtp_params`` is the MTP modules' own parameters (their embedding and
    head are the main model's) and ``total_params_with_mtp`` the sum of the two.
    """
    argcheck.counts(seq_len=seq_len, tp=tp)
    spec = resolve_model(model)
    total = count_params(spec)
    active = count_params(spec, active=True)
    f = flops_per_token(spec, seq_len, tp)
    return {
        "model": spec.name,
        "model_type": spec.model_type,
        "architecture": spec.architecture,
        "seq_len": seq_len,
        "total_params": total.main_total,  # main model, as `moeplan models` lists it
        "total_params_with_mtp": total.total,
        "mtp_params": total.mtp,
        "active_params": active.main_total,
        "breakdown": total.as_dict(),
        "active_breakdown": active.as_dict(),
        "flops_per_token": f.total_flops,
        "flops": {
            "gemm_flops": f.gemm_flops,
            "attention_flops": f.attention_flops,
            "linear_attention_flops": f.linear_attention_flops,
            "logits_flops": f.logits_flops,
            "attention_share": f.attention_share,
        },
        "flops_convention": "Megatron-Core num_floating_point_operations: 3x forward GEMM FLOPs "
        "(fwd+dgrad+wgrad), causal attention counted as half of s^2, router and element-wise ops excluded",
        "source": spec.source,
    }


# ----------------------------------------------------------------------------------- estimate


def recommended_dispatcher(cfg: RunConfig, gpu: GPUSpec, cal: Calibration = DEFAULT_CALIBRATION) -> str:
    """The guidance's dispatcher choice, decided by the estimates: the fastest of the candidates the
    hardware allows (HybridEP first on NVL72; DeepEP vs HybridEP on 8-GPU nodes); alltoall without EP. Only
    those the run's other knobs work with (moe_expert_rank_capacity_factor needs HybridEP: knobs.knob_problem)."""
    _check_built(cfg, gpu)
    argcheck.calibration(cal, Calibration)
    candidates = dispatcher_candidates(cfg, gpu)
    candidates = [d for d in candidates if knob_problem(cfg.with_(dispatcher=d), gpu) is None] or candidates
    if len(candidates) == 1:
        return candidates[0]
    times = {d: estimate_time(cfg.with_(dispatcher=d), gpu, cal).step_time_s for d in candidates}
    return min(candidates, key=lambda d: times[d])


# The layout sizes ``fixed`` may pin in search_plans (beside dispatcher and recompute): each a positive int.
FIXED_COUNTS = ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs")


# build_config's conversions of a knob's API value to its RunConfig value, where they differ (the rest pass as given)
_TO_FIELD = {
    "dispatcher": lambda v: "alltoall" if v == "auto" else v,  # 'auto' is resolved below, with the run built
    "cp_comm_type": lambda v: "p2p" if v == "auto" else v,
    "cuda_graphs": lambda v: csv_set(v, CUDA_GRAPH_SCOPES, "CUDA graph scope(s)"),
    "offload_modules": lambda v: csv_set(v, OFFLOAD_MODULES, "offload module(s)"),
    "fsdp": lambda v: None if v in (None, FSDP_OFF) else v,
}


def build_config(
    model: str | ModelSpec,
    *,
    gpu: str | GPUSpec = DEFAULT_GPU,
    gpus: int,
    seq_len: int,
    gbs: int,
    mbs: int = 1,
    tp: int = 1,
    pp: int = 1,
    vpp: int = 1,
    cp: int = 1,
    ep: int = 1,
    etp: int = 1,
    pipeline_layout: str | None = None,
    hardware_file: str | None = None,
    cal: Calibration = DEFAULT_CALIBRATION,
    mtp_layers: int | None = None,
    routing: str | None = None,
    **knobs: Any,
) -> tuple[RunConfig, GPUSpec]:
    """A :class:`RunConfig` and its GPU from plain arguments (what the CLI passes); ``cal`` (timing
    constants) only decides ``dispatcher="auto"``; ``mtp_layers`` overrides the model's MTP modules.

    ``knobs``: every knob of the run by its API keyword (moeplan.run.knobs, the knob table: ``recompute``,
    ``precision``, ``dispatcher``, ``cuda_graphs``, ``optimizer_offload``, ``ep_overlap``, ``fsdp``, ...; the
    signature lists them with their defaults); a word the API resolves: ``dispatcher="auto"`` (the fastest the
    hardware allows), ``cp_comm_type="auto"`` (the planner's choice), ``fsdp="off"``. ``routing`` (forced |
    natural, moeplan.base.routing) stands for ``moe_imbalance``: give one of the two (default: forced, 1.0)."""
    argcheck.calibration(cal, Calibration)
    kw = knob_keywords("build_config", knobs, RunConfig)
    kw["moe_imbalance"] = resolve_imbalance(routing, knobs.get("moe_imbalance"), cal.natural_routing_imbalance)
    recompute, precision, dispatcher, cp_comm_type = kw["recompute"], kw["precision"], kw["dispatcher"], kw["cp_comm_type"]
    argcheck.counts(gpus=gpus, seq_len=seq_len, gbs=gbs, mbs=mbs, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp)
    check_run_knobs(kw["cuda_graphs"], kw["offload_modules"], kw["optimizer_offload"], kw["moe_imbalance"],
                     kw["reserve_gib"])
    check_knobs(kw, RunConfig)
    _check_recompute_arg("recompute", recompute)
    argcheck.optional_text("pipeline_layout", pipeline_layout, hint=" (Megatron-Core's pipeline_model_parallel_layout)")
    check_choices(kw, RunConfig)  # each knob's vocabulary and the API's words ('auto', resolved below)
    spec = resolve_model(model, mtp_layers)
    gpu_spec = _resolve_gpu(gpu, hardware_file)
    gpu_spec.peak(precision)  # the GPU must support the precision
    kw["mcore_version"] = normalize_version(kw["mcore_version"])
    rc = recompute if isinstance(recompute, Recompute) else Recompute.parse(recompute)
    check_recompute(spec, rc, kw["mcore_version"])
    kw["recompute"] = rc
    cfg = RunConfig(
        model=spec,
        parallel=with_balanced_layout(spec, Parallel(gpus, tp, pp, vpp, cp, ep, etp, pipeline_layout)),
        batch=Batch(seq_len, gbs, mbs),
        gpu=gpu_spec,
        **{k.name: _TO_FIELD.get(k.api, _same)(kw[k.api]) for k in knob_table(RunConfig)},
    )
    validate(spec, cfg.parallel, cfg.batch, cfg.mcore_version, cfg.gpu, cfg.te_version)
    _check_dp_choice(cfg)
    if dispatcher == "auto":
        cfg = cfg.with_(dispatcher=recommended_dispatcher(cfg, gpu_spec, cal))
    if cp_comm_type == "auto":  # the planner's choice: least attention + exposed CP communication
        cfg = cfg.with_(cp_comm_type=best_cp_comm_type(cfg, gpu_spec, cal))
    problem = knob_problem(cfg, gpu_spec)
    if problem:
        raise MoeplanError(problem.message)
    # the job would set GROUPED_TENSOR_ENV=1 where TE raises at run time (RunConfig.grouped_tensor_raises; op-fused
    # experts never read it): an input error, which would otherwise cost the per-expert path the job never reaches
    # (plan drops such runs from its search instead: moeplan.plan.planner.search; ``moeplan check`` lints a file that
    # sets it: rule te-grouped-tensor)
    raises = cfg.grouped_tensor_raises
    if raises:
        raise MoeplanError(grouped_tensor_refusal(raises))
    return cfg, gpu_spec


def _same(value: Any) -> Any:
    return value


def _with_knob_signature(function: Any) -> None:
    """``function``'s signature with its ``**knobs`` spelled out: each knob's API keyword and default (what
    ``help()`` and ``inspect.signature`` show, and the CLI's strategy merge reads)."""
    sig = inspect.signature(function)
    params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    params += [inspect.Parameter(k.api, inspect.Parameter.KEYWORD_ONLY, default=k.api_default, annotation=Any)
               for k in knob_table(RunConfig)]
    function.__signature__ = sig.replace(parameters=params)


_with_knob_signature(build_config)


def _check_recompute_arg(name: str, recompute: Any) -> None:
    if not isinstance(recompute, (str, Recompute)):
        raise MoeplanError(f"{name} must be a str (e.g. 'full', 'selective') or a Recompute, got {recompute!r}")


def check_recompute(spec: ModelSpec, rc: Recompute, mcore_version: str) -> None:
    """Refuse selective recompute modules that Megatron-Core ``mcore_version`` lacks or that the model does not
    have, for the reason ``moeplan check`` gives (moeplan.megatron.asserts.selective_recompute_problem)."""
    if rc.granularity == "selective":
        problem = selective_recompute_problem(spec, rc.modules, mcore_version)
        if problem:
            raise MoeplanError(f"recompute {rc.label()}: {problem}")


def _check_dp_choice(cfg: RunConfig) -> None:
    """Megatron-FSDP and Muon exist only from the Megatron-Core release the field table names."""
    f = fields_for(cfg.mcore_version)
    if cfg.fsdp is not None and cfg.fsdp not in f.fsdp_strategies:
        raise MoeplanError(f"Megatron-FSDP (use_megatron_fsdp) needs Megatron-Core >= 0.14; {f.version} has only the "
                           "deprecated use_custom_fsdp")
    if cfg.optimizer == "muon" and "muon" not in f.optimizers:
        raise MoeplanError(f"the Muon optimizer needs Megatron-Core >= 0.16 (optimizer 'muon'/'dist_muon', muon_* "
                           f"fields), target is {f.version}")


def estimate_run(model: str | ModelSpec, *, cal: Calibration = DEFAULT_CALIBRATION, **kwargs: Any) -> Estimate:
    """Memory and throughput of one layout (see :func:`build_config`); ``cal``: the timing constants
    (default: the fitted ones)."""
    cfg, gpu = build_config(model, cal=cal, **kwargs)
    return evaluate(cfg, gpu, cal)


def estimate_hints(est: Estimate, kwargs: dict[str, Any], cal: Calibration = DEFAULT_CALIBRATION) -> list[Hint]:
    """:func:`moeplan.plan.hints.knob_hints` of the knobs that ``kwargs`` (build_config's arguments the estimate was
    made with) leave at build_config's defaults."""
    import inspect

    defaults = {k: v.default for k, v in inspect.signature(build_config).parameters.items()}
    return knob_hints(est, [k for k in HINT_KNOBS if kwargs.get(k, defaults[k]) == defaults[k]], cal)


def estimate(model: str | ModelSpec, **kwargs: Any) -> dict[str, Any]:
    """:func:`estimate_run` as a JSON-ready dict (what ``moeplan estimate --json`` prints)."""
    return estimate_dict(estimate_run(model, **kwargs), kwargs.get("cal", DEFAULT_CALIBRATION))


def timeline(cfg: RunConfig, gpu: GPUSpec, cal: Calibration = DEFAULT_CALIBRATION) -> Timeline:
    """One iteration of a configuration laid out in time (see :mod:`moeplan.engine.timeline`); write it with
    :func:`moeplan.engine.timeline.chrome_trace_bytes` or draw it with :func:`moeplan.plots.timeline_figure`."""
    _check_built(cfg, gpu)
    return build_timeline(cfg, gpu, argcheck.calibration(cal, Calibration))


def _check_cfg(cfg: Any) -> None:
    """A configuration as :func:`build_config` returns it (not the keywords it takes)."""
    if not isinstance(cfg, RunConfig):
        raise MoeplanError(f"cfg must be a RunConfig (build one with moeplan.api.build_config), got {cfg!r} "
                           f"({type(cfg).__name__})")


def _check_built(cfg: Any, gpu: Any) -> None:
    """A configuration and its GPU as :func:`build_config` returns them."""
    _check_cfg(cfg)
    if not isinstance(gpu, GPUSpec):
        raise MoeplanError(f"gpu must be a GPUSpec (build_config returns it beside the RunConfig), got {gpu!r} "
                           f"({type(gpu).__name__})")


def estimate_with_timeline(model: str | ModelSpec, *, cal: Calibration = DEFAULT_CALIBRATION,
                           **kwargs: Any) -> tuple[dict[str, Any], Timeline]:
    """:func:`estimate` and the :func:`timeline` of the same configuration."""
    cfg, gpu = build_config(model, cal=cal, **kwargs)
    return evaluate(cfg, gpu, cal).as_dict(), build_timeline(cfg, gpu, cal)


# ----------------------------------------------------------------------------------- plan


def _exports(cfg: RunConfig) -> dict[str, Any]:
    """Megatron Bridge overrides, YAML and Megatron-LM flags of a configuration."""
    return {
        "overrides": to_overrides(cfg, cfg.mcore_version),
        "yaml": to_yaml(cfg, cfg.mcore_version),
        "megatron_lm_args": to_megatron_lm_args(cfg, cfg.mcore_version),
        "provenance": provenance_comment(cfg, cfg.mcore_version),  # first line of every exported file
        "env": env_settings(cfg),  # the job's environment (no Megatron-Core field selects these)
    }


def plan_dict(p: Plan, rank: int, cal: Calibration = DEFAULT_CALIBRATION) -> dict[str, Any]:
    """One plan as a JSON-ready dict (the keys `moeplan plan --json` promises); ``cal``: the constants it was
    planned with (they say which imbalance natural routing stands for)."""
    est = p.estimate.as_dict()
    cfg = p.config
    out = {
        "rank": rank,
        **p.estimate.run_dict(),
        **run_routing(cfg, cal),
        "memory_gib": est["memory_gib"],
        "host_memory_gib": est["host_memory_gib"],
        "host_peak_gib": est["host_peak_gib"],
        "host_capacity_gib": est["host_capacity_gib"],
        "capacity_gib": est["capacity_gib"],
        "fits": est["fits"],
        "step_time_s": est["step_time_s"],
        "tflops_per_gpu": est["tflops_per_gpu"],
        "mfu": est["mfu"],
        "mfu_peak": est["mfu_peak"],
        "tokens_per_s_per_gpu": est["tokens_per_s_per_gpu"],
        "tflops_range": est["tflops_range"],
        "tokens_per_s_range": est["tokens_per_s_range"],
        "outside_fit": est["outside_fit"],
        "outside_fit_note": est["outside_fit_note"],
        "tie": p.tie,
        "time_breakdown_s": est["time_breakdown_s"],
        "rationale": [r.as_dict() for r in p.rationale],
    }
    out.update(_exports(cfg))
    return out


@dataclass(frozen=True)
class PlanReport:
    """The answer of a plan search: the ranked plans (each carries its config and estimate), the question
    asked, and what the search saw. The question has one owner, :attr:`question`; its model, GPU, GPU count,
    length, precision, headroom, routing imbalance and timing constants are read from it."""

    result: PlanResult
    question: dict[str, Any]  # every argument of the search as it read them (_search_question)

    @property
    def model(self) -> ModelSpec:
        return self.question["model"]

    @property
    def gpu(self) -> GPUSpec:
        return self.question["gpu"]

    @property
    def gpus(self) -> int:
        return self.question["gpus"]

    @property
    def seq_len(self) -> int:
        return self.question["seq_len"]

    @property
    def precision(self) -> str:
        return self.question["precision"]

    @property
    def headroom(self) -> float:
        return self.question["headroom"]

    @property
    def moe_imbalance(self) -> float:
        """The routing imbalance the question asked for (moeplan.base.routing: routing read into it)."""
        return self.question["moe_imbalance"]

    @property
    def cal(self) -> Calibration:
        """The timing constants it was searched with."""
        return self.question["cal"]

    @property
    def routing(self) -> dict[str, Any]:
        """The routing the plans assume (moeplan.engine.estimate.routing_answer; None for a model without experts)."""
        return routing_answer(self.model, self.moe_imbalance, self.cal)

    @property
    def plans(self) -> list[Plan]:
        return self.result.plans

    @property
    def best(self) -> Plan | None:
        return self.result.plans[0] if self.result.plans else None

    @property
    def memory_budget_bytes(self) -> float:
        """What the search let a plan use per GPU: HBM less the headroom (moeplan.engine.budget, the one rule)."""
        return budget_bytes(self.gpu.hbm_bytes, self.headroom)

    def closest_dict(self) -> dict[str, Any] | None:
        """The run that misses by least (only when nothing fits): its layout at its strongest memory option
        (the last recompute step, the largest optimizer offload, the sharding choice that needs least), the
        knobs that reproduce it with :func:`estimate_run` (``memory_gib`` is that estimate's total), and
        ``misses_by_gib`` = ``memory_gib`` - ``memory_gib_budget`` (HBM less the headroom)."""
        if self.result.closest is None or self.result.plans:
            return None
        cfg, miss = self.result.closest
        budget = self.memory_budget_bytes
        out: dict[str, Any] = {"parallel": cfg.parallel.as_dict(), "short": cfg.parallel.short(), "misses_by_gib": miss / GIB,
                               "memory_gib": (budget + miss) / GIB, "memory_gib_budget": budget / GIB,
                               "gbs": cfg.batch.gbs, "mbs": cfg.batch.mbs, "recompute": cfg.recompute.label(),
                               "optimizer_offload": cfg.optimizer_offload, "fsdp": cfg.fsdp, "dispatcher": cfg.dispatcher,
                               "ep_overlap": cfg.ep_overlap}
        asked = self.result.closest_offload_asked  # the planner's: the host held the offload below it
        if asked is not None:
            host = offloaded_state_bytes(cfg.evolve(optimizer_offload=asked), build_pipeline(cfg.model, cfg.parallel))
            out["offload_limited_by_host"] = {"optimizer_offload": cfg.optimizer_offload, "asked": asked,
                                              "host_capacity_gib": cfg.gpu.host_mem_bytes / GIB,
                                              "host_gib_at_asked": host / GIB}
        unfused = first_unfused_attention(cfg.model, cfg.gpu, cfg.te_version)
        if unfused is not None:  # the likely cause: TE's unfused attention's s x s scores, and no CP to split them
            par, batch = cfg.parallel, cfg.batch
            peak = unfused_attention_bytes(unfused, batch.mbs, batch.seq_len, par.tp, par.cp).peak_bytes
            out["unfused_attention"] = {"te": te_label(cfg.te_version), "head_dim": unfused.head_dim, "peak_gib_per_layer": peak / GIB}
        return out

    def as_dict(self) -> dict[str, Any]:
        r = self.result
        return {
            "model": self.model.name,
            "gpu": self.gpu.name,
            "gpus": self.gpus,
            "seq_len": self.seq_len,
            "requested_gbs": r.requested_gbs,
            "gbs": r.gbs,
            "precision": self.precision,
            "headroom": self.headroom,
            "layouts_considered": r.layouts_considered,
            "layouts_feasible": r.layouts_feasible,
            "layouts_evaluated": r.layouts_evaluated,
            # routing the plans assume (moeplan.base.routing): forced | natural | custom and the rows on the busiest
            # expert rank / mean (1.0 force-balanced); both None for a model without experts
            **self.routing,
            "notes": r.notes,
            "newer": None if r.newer is None else r.newer.as_dict(),
            "closest": self.closest_dict(),
            "plans": [plan_dict(p, i + 1, self.cal) for i, p in enumerate(r.plans)],
        }


def _api_default(name: str) -> Any:
    """The API default of the knob whose API keyword is ``name``, read from the knob table (moeplan.run.knobs:
    ``Knob.api_default``), as :func:`build_config`'s keywords, the CLI's flags and the MCP tools read it."""
    return knob_named(name).api_default


# search_plans' parameters that are knobs take the knob table's API default (_api_default; tests/unit/
# test_api_knob_defaults.py), but for: routing's imbalance (None: resolved from ``routing``), the fsdp word (auto:
# searched) and cuda_graphs / optimizer_offload, which here are the search's switches (bools), not the knobs.
def search_plans(
    model: str | ModelSpec,
    *,
    gpu: str | GPUSpec = DEFAULT_GPU,
    gpus: int,
    seq_len: int,
    gbs: int,
    precision: str = _api_default("precision"),
    top: int = 5,
    headroom: float = DEFAULT_HEADROOM,
    moe_imbalance: float | None = None,
    routing: str | None = None,
    reserve_gib: float = _api_default("reserve_gib"),
    mcore_version: str = _api_default("mcore_version"),
    te_version: str = _api_default("te_version"),
    te_grouped_tensor: bool = _api_default("te_grouped_tensor"),
    hardware_file: str | None = None,
    fixed: dict[str, Any] | None = None,
    cuda_graphs: bool = True,
    optimizer_offload: bool = True,
    allow_gbs_reduction: bool = True,
    progress: Any = None,
    grad_fp32: bool = _api_default("grad_fp32"),
    bf16_moments: bool = _api_default("bf16_moments"),
    cal: Calibration = DEFAULT_CALIBRATION,
    optimizer: str = _api_default("optimizer"),
    fsdp: str = FSDP_SEARCH,
    fsdp_double_buffer: bool = _api_default("fsdp_double_buffer"),
    mtp_layers: int | None = None,
    **knobs: Any,
) -> PlanReport:
    """Search layouts and knobs; the top plans with memory, throughput and rationale.

    ``fixed`` pins knobs: tp, pp, vpp, cp, ep, etp, mbs, dispatcher, recompute (a string). ``fsdp``:
    'auto' searches Megatron-FSDP (optim_grads_params) beside the distributed optimizer, 'off' never,
    a sharding strategy pins it. ``optimizer`` (adam | muon) is the user's choice, never searched. ``knobs``: the
    other knobs every estimating command takes (moeplan.run.knobs: a flag in the ``gpu`` or ``cluster`` slot), by
    their API keyword: the user's choice, never searched, carried by every run. ``routing`` (forced | natural) or
    ``moe_imbalance`` (a number), not both: the routing the plans assume (default forced, 1.0)."""
    q = _search_question(dict(locals()))  # every argument by name, checked and read as the search reads it
    space = SearchSpace(**q["fixed"], cuda_graphs=cuda_graphs, optimizer_offload=optimizer_offload, headroom=headroom,
                        fsdp=fsdp, fsdp_double_buffer=fsdp_double_buffer)
    result = search(q["model"], q["gpu"], gpus, seq_len, gbs, precision=precision, top=top, space=space,
                    moe_imbalance=q["moe_imbalance"], mcore_version=q["mcore_version"], reserve_gib=reserve_gib,
                    allow_gbs_reduction=allow_gbs_reduction, progress=progress,
                    grad_fp32=grad_fp32, bf16_moments=bf16_moments, cal=cal, optimizer=optimizer,
                    te_version=te_version, te_grouped_tensor=te_grouped_tensor, knobs=q["knobs"])
    return PlanReport(result, q)


_SEARCH_SIGNATURE = inspect.signature(search_plans)  # its parameters are the question; its defaults complete a sweep's
# search_plans' parameters its question leaves out: read into others (routing into moe_imbalance, hardware_file into
# gpu, mtp_layers into model), or how it answers, not what it asks (top, progress)
_NOT_ASKED = frozenset({"top", "progress", "routing", "hardware_file", "mtp_layers"})


def _search_question(arguments: dict[str, Any]) -> dict[str, Any]:
    """:func:`search_plans`' arguments by name (its parameters, as it binds them: a parameter it gains is in the
    question without an edit here) checked (bad input: one line) and read as the search reads them (the model with
    its MTP layers, the GPU, the routing's imbalance, ...), less :data:`_NOT_ASKED`. Two searches asked the same
    find the same plan 1 (what :func:`sweep_points` compares)."""
    a = arguments
    given = _given_knobs(a["knobs"])
    argcheck.counts(gpus=a["gpus"], seq_len=a["seq_len"], gbs=a["gbs"], top=a["top"])
    fx = _check_fixed(a["fixed"])
    cal = argcheck.calibration(a["cal"], Calibration)
    moe_imbalance = resolve_imbalance(a["routing"], a["moe_imbalance"], cal.natural_routing_imbalance)
    check_search_args(a["cuda_graphs"], a["optimizer_offload"], a["headroom"], moe_imbalance, a["reserve_gib"])
    # its knobs' values (precision, optimizer, those in ``knobs``) by build_config's rule; fsdp takes the search's word
    check_choices({k: v for k, v in a.items() if k != "fsdp"} | a["knobs"], RunConfig)
    argcheck.flags(**{k: a[k] for k in ("te_grouped_tensor", "allow_gbs_reduction", "grad_fp32", "bf16_moments",
                                        "fsdp_double_buffer")})
    mcore_version = normalize_version(a["mcore_version"])
    spec = resolve_model(a["model"], a["mtp_layers"])
    gpu_spec = _resolve_gpu(a["gpu"], a["hardware_file"])
    if "recompute" in fx and isinstance(fx["recompute"], str):
        fx["recompute"] = Recompute.parse(fx["recompute"])
    if "recompute" in fx:
        check_recompute(spec, fx["recompute"], mcore_version)
    unknown = set(fx) - {*FIXED_COUNTS, "dispatcher", "recompute"}
    if unknown:
        raise MoeplanError(f"cannot fix {', '.join(sorted(unknown))}")
    argcheck.choice("fsdp", a["fsdp"], fsdp_choices(search=True))
    return {k: v for k, v in a.items() if k not in _NOT_ASKED} | dict(
        model=spec, gpu=gpu_spec, moe_imbalance=moe_imbalance, mcore_version=mcore_version, fixed=fx, knobs=given)


def _given_knobs(knobs: dict[str, Any]) -> dict[str, Any]:
    """:func:`search_plans`' ``**knobs`` as RunConfig fields: only the knobs every estimating command takes (a flag
    in the knob table's ``gpu`` or ``cluster`` slot) that are not its own parameters (TypeError otherwise, as Python
    refuses a keyword), each checked by its kind."""
    table = {k.api: k for k in command_knobs(RunConfig) if k.api not in _SEARCH_SIGNATURE.parameters}
    for name in knobs:
        if name not in table:
            raise TypeError(f"search_plans() got an unexpected keyword argument '{name}'")
    check_knobs(knobs, RunConfig)
    return {table[name].name: value for name, value in knobs.items()}


def _check_fixed(fixed: Any) -> dict[str, Any]:
    """``fixed`` as a dict: a mapping whose layout sizes are counts, dispatcher one of DISPATCHERS ('auto': not
    pinned, as the CLI's --dispatcher auto) and recompute a str or a Recompute; other keys are refused later."""
    fx = dict(argcheck.mapping("fixed", fixed, hint=" (e.g. {'tp': 2, 'recompute': 'full'})"))
    argcheck.counts(**{k: v for k, v in fx.items() if k in FIXED_COUNTS})
    if fx.get("dispatcher") == "auto":
        del fx["dispatcher"]
    if "dispatcher" in fx:
        argcheck.choice("fixed dispatcher", fx["dispatcher"], DISPATCHERS)
    if "recompute" in fx:
        _check_recompute_arg("fixed recompute", fx["recompute"])
    return fx


def search_like(cfg: RunConfig, *, top: int = 1, cal: Calibration = DEFAULT_CALIBRATION, progress: Any = None,
                headroom: float = DEFAULT_HEADROOM) -> PlanReport:
    """:func:`search_plans` for the run ``cfg`` describes, with everything the run says that is not a layout
    or knob the planner chooses: its model as trained (MTP layers included), its GPU as deployed (a user
    hardware file's entry too), GPU count, sequence length and GBS, precision, gradient and moment dtypes,
    optimizer, routing imbalance, reserved memory, and the Megatron-Core and Transformer Engine releases.
    ``moeplan explain`` asks it for the remedy of its second run. A run that sets GROUPED_TENSOR_ENV is searched with
    it, as ``plan --te-grouped-tensor`` searches: where TE raises, the search keeps only runs whose experts are
    op-fused (moeplan.plan.planner.search); where it refuses the flag (no such run is left), the run is searched
    without it (the remedy is to drop it, as the refusal says)."""
    _check_cfg(cfg)

    def run(grouped: bool) -> PlanReport:
        return search_plans(cfg.model, gpu=cfg.gpu, gpus=cfg.parallel.gpus, seq_len=cfg.batch.seq_len,
                            gbs=cfg.batch.gbs, precision=cfg.precision, top=top, headroom=headroom,
                            moe_imbalance=cfg.moe_imbalance, reserve_gib=cfg.reserve_gib,
                            mcore_version=cfg.mcore_version, te_version=cfg.te_version,
                            te_grouped_tensor=grouped, progress=progress,
                            grad_fp32=cfg.grad_fp32, bf16_moments=cfg.bf16_moments, cal=cal, optimizer=cfg.optimizer)

    try:
        return run(cfg.te_grouped_tensor)
    except GroupedTensorRefused:  # the planner's refusal of the flag (moeplan.plan.planner.search), by type
        return run(False)


def plan(model: str | ModelSpec, **kwargs: Any) -> dict[str, Any]:
    """:func:`search_plans` as a JSON-ready dict (``plans`` is what ``moeplan plan --json`` prints)."""
    return search_plans(model, **kwargs).as_dict()


# ----------------------------------------------------------------------------------- sweep / explain


@dataclass(frozen=True)
class SweepPoint:
    """One sequence length of a sweep: the held layout's or the best plan's estimate, or nothing that fits
    (``closest``: the run that misses by least), or no valid layout at this length (``invalid``: why)."""

    seq_len: int
    gbs: int
    label: str  # "held layout" or "planned"
    estimate: Estimate | None
    plan: Plan | None = None
    closest: dict[str, Any] | None = None
    invalid: str | None = None
    cal: Calibration = DEFAULT_CALIBRATION  # the timing constants of the sweep (natural routing's imbalance)
    routing: dict[str, Any] | None = None  # the sweep's routing (moeplan.base.routing.routing_fields)

    def as_dict(self) -> dict[str, Any]:
        routing = self.routing or routing_fields(None, self.cal.natural_routing_imbalance)
        if self.estimate is None:
            return {"seq_len": self.seq_len, "gbs": self.gbs, "fits": False, **routing, "label": self.label,
                    "plan": None, "closest": self.closest, "invalid": self.invalid}
        return {**estimate_dict(self.estimate, self.cal), "label": self.label,
                "plan": plan_dict(self.plan, 1, self.cal) if self.plan is not None else None, "closest": None,
                "invalid": None}


_PLAN_KEYS = ("gpu", "gpus", "precision", "hardware_file", "moe_imbalance", "reserve_gib", "mcore_version", "te_version",
              "te_grouped_tensor", "headroom",
              "grad_fp32", "bf16_moments", "cal", "optimizer", "mtp_layers", "fsdp", "fsdp_double_buffer")


def _plan_keywords(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The sweep's keywords its searches take: :func:`search_plans`' own and the API keywords of the knobs every
    estimating command takes (a flag in the ``gpu`` or ``cluster`` slot)."""
    every = {k.api for k in command_knobs(RunConfig)}
    return {k: v for k, v in kwargs.items() if k in _PLAN_KEYS or k in every}


def sweep_points(model: str | ModelSpec, *, seq_lens: list[int], gbs_tokens: int, hold: dict[str, Any] | None = None,
                 progress: Any = None, all_invalid_raises: bool = True, first_invalid_raises: bool = False,
                 planned: PlanReport | None = None, **kwargs: Any) -> list[SweepPoint]:
    """Plan (or, with ``hold`` layout arguments, estimate one layout) at each sequence length. ``fsdp`` is
    :func:`search_plans`'s (auto: searched beside the distributed optimizer); a held layout runs the strategy
    it names, and the distributed optimizer for auto or off. A length at which no layout is valid (the held
    one, or every one the planner tries: GBS too small for the data-parallel size, CP not dividing the
    length, ...) is a point with ``invalid`` set and the sweep goes on; when that is so at every length the
    first length's :class:`InvalidLayout` is raised (the question is bad input, as it is to ``plan``), unless
    ``all_invalid_raises`` is False (a report's sweep beside plans that answer its own question). With
    ``first_invalid_raises`` (explain's two lengths: a comparison needs every run) the first invalid length's
    :class:`InvalidLayout` is raised at once and no later length is planned. ``planned``: a search already made
    (a report's plans); the length whose whole question it answered (model, system, every knob, the length and
    its GBS) takes its plan 1 instead of searching again, every other length is searched. ``routing`` (forced | natural) or ``moe_imbalance``, not both, as
    :func:`search_plans` takes them: every row says the routing it assumed."""
    seq_lens = argcheck.count_list("seq_lens", seq_lens, nonempty=True, bound="seq_len")
    if sweep_lengths_problem(len(seq_lens)):
        raise MoeplanError(f"seq_lens: {sweep_lengths_problem(len(seq_lens))}")
    argcheck.count("gbs_tokens", gbs_tokens)
    if hold is not None:
        argcheck.mapping("hold", hold, hint=" (the layout keywords to hold, e.g. {'tp': 2, 'ep': 8})")
    spec = resolve_model(model)
    check_gbs_tokens(seq_lens, gbs_tokens)  # every length checked before any work
    cal = argcheck.calibration(kwargs.get("cal", DEFAULT_CALIBRATION), Calibration)
    imbalance = resolve_imbalance(kwargs.pop("routing", None), kwargs.get("moe_imbalance"), cal.natural_routing_imbalance)
    argcheck.imbalance_and_reserve(imbalance, kwargs.get("reserve_gib", _api_default("reserve_gib")))
    kwargs["moe_imbalance"] = imbalance
    routing = routing_answer(spec, imbalance, cal)
    points = []
    errors: list[InvalidLayout] = []
    if progress is not None and hasattr(progress, "start") and hold is not None:
        progress.start(len(seq_lens))
    for s in seq_lens:
        gbs = gbs_tokens // s  # whole sequences: check_gbs_tokens above
        reuse = hold is None and planned is not None and _same_question(planned, spec, s, gbs, kwargs)
        try:
            point = _planned_point(planned, s, gbs) if reuse else _sweep_point(spec, s, gbs, hold, progress, kwargs)
        except InvalidLayout as exc:
            if first_invalid_raises:
                raise
            errors.append(exc)
            point = SweepPoint(s, gbs, "planned" if hold is None else "held layout", None, invalid=str(exc))
        points.append(dataclasses.replace(point, cal=cal, routing=routing))
    if all_invalid_raises and errors and len(errors) == len(points):
        raise errors[0]
    return points


def _same_question(found: PlanReport, spec: ModelSpec, s: int, gbs: int, kwargs: dict[str, Any]) -> bool:
    """Whether ``found`` was asked the whole question (:func:`_search_question`) :func:`_sweep_point` asks at ``s``."""
    if found.question["seq_len"] != s or found.question["gbs"] != gbs:
        return False  # another length or GBS: no need to read the rest of the question
    asked = _SEARCH_SIGNATURE.bind(spec, seq_len=s, gbs=gbs, **_plan_keywords(kwargs))
    asked.apply_defaults()
    return found.question == _search_question(dict(asked.arguments))


def _planned_point(found: PlanReport, s: int, gbs: int) -> SweepPoint:
    """A planned length of :func:`sweep_points` from a search already made at it."""
    best = found.best
    if best is None:
        return SweepPoint(s, gbs, "planned", None, closest=found.closest_dict())
    return SweepPoint(s, gbs, "planned", best.estimate, best)


def _sweep_point(spec: ModelSpec, s: int, gbs: int, hold: dict[str, Any] | None, progress: Any,
                 kwargs: dict[str, Any]) -> SweepPoint:
    """One length of :func:`sweep_points`."""
    if hold is not None:
        held_kw = kwargs | {"fsdp": None if kwargs.get("fsdp") == FSDP_SEARCH else kwargs.get("fsdp")}
        try:
            est = estimate_run(spec, seq_len=s, gbs=gbs, **held_kw, **hold)
        finally:
            if progress is not None and hasattr(progress, "advance"):
                progress.advance()
        return SweepPoint(s, gbs, "held layout", est)
    return _planned_point(search_plans(spec, seq_len=s, gbs=gbs, top=1, progress=progress, **_plan_keywords(kwargs)),
                          s, gbs)


def sweep(model: str | ModelSpec, **kwargs: Any) -> list[dict[str, Any]]:
    """:func:`sweep_points` as JSON-ready rows (what ``moeplan sweep --json`` prints)."""
    return [p.as_dict() for p in sweep_points(model, **kwargs)]


# ----------------------------------------------------------------------------------- calibrate


def _check_calibrate_args(kwargs: dict[str, Any]) -> None:
    """:func:`calibrate`'s model, gpu, hardware_file and warmup_iters, as the CLI's parsers refuse them (--warmup
    takes an int >= 0); each may be left out (None): the log says it, or the default applies."""
    argcheck.optional_path("model", kwargs.get("model"))  # a catalog name or a config.json path (str()-ed there)
    argcheck.gpu_name(kwargs.get("gpu"), optional=True)
    argcheck.optional_path("hardware_file", kwargs.get("hardware_file"))
    if kwargs.get("warmup_iters") is not None:
        argcheck.count("warmup_iters", kwargs["warmup_iters"], minimum=0)


def calibrate(logs: list[str] | str | os.PathLike[str], **kwargs: Any) -> dict[str, Any]:
    """Fit the timing constants to training logs (see :func:`moeplan.calibrate.fit.calibrate`): JSON-ready
    ``runs`` (measured, default and calibrated estimates), ``constants``, ``not_moved``, ``memory``, ``fit``.
    One log may be given alone (a str or path) instead of a list."""
    from moeplan.calibrate import fit as _calibrate

    _check_calibrate_args(kwargs)
    if isinstance(logs, (str, os.PathLike)):
        logs = [logs]
    return _calibrate.calibrate([os.fspath(p) if isinstance(p, os.PathLike) else p for p in logs], **kwargs)
