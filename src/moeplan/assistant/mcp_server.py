"""``moeplan mcp``: a Model Context Protocol server over stdio, built on the official Python SDK (``mcp`` 2.x,
``pip install 'moeplan[mcp]'``; its ``MCPServer``, not a hand-written protocol).

Read-only tools that mirror the CLI: each returns, as structured content, the dict the matching command prints
with ``--json`` (an object holding the list where the CLI prints a list), with an input schema from the
signature and an output schema below. Bad arguments come back as tool errors whose text is moeplan's one-line
message (what the CLI prints after ``moeplan: error:``); a schema violation is one line too. Nothing is written
to disk: texts (config.json, run config, log, hardware file) live in a temporary directory for the call
(:mod:`moeplan.assistant.tools`). ``plan``, ``export`` and ``sweep`` report progress while they search.
"""

from __future__ import annotations

import functools
import inspect
import json
import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field, ValidationError

from moeplan.assistant import tools
from moeplan.assistant.tools import knob_argument, knob_default
from moeplan.base.errors import MoeplanError, one_line
from moeplan.base.routing import CUSTOM_ROUTING, ROUTINGS
from moeplan.base.te_release import DEFAULT_TE_VERSION
from moeplan.base.vocab import DEFAULT_GPU, DEFAULT_HEADROOM, RECOMPUTE_METHODS, RECOMPUTE_MODULES
from moeplan.run.knobs import FSDP_SEARCH, Knob, command_knobs, fsdp_choices, knob_named, knob_table

SERVER_NAME = "moeplan"
INSTRUCTIONS = (
    "moeplan plans, checks and explains long-context Mixture-of-Experts training runs on Megatron Bridge / "
    "Megatron-Core: memory per GPU, step time, TFLOP/s per GPU with an error band, the fastest layouts (TP, PP, VPP, "
    "CP, EP, recompute, dispatcher, CUDA graphs, offload) and their overrides. Quote its numbers with their band "
    "(tflops_range, tokens_per_s_range); plans whose bands overlap are ties (tie: true). Never invent a number it "
    "did not return.")

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)

# --------------------------------------------------------------------------------------------- argument types
# Every list of allowed values is moeplan's own: a knob's, the knob table's choices (:func:`knob_choices`: its
# vocabulary and the API's words, which the CLI's flags and build_config take); the routings (moeplan.base.routing)
# and the export formats. A Literal over the tuple, so a value the CLI and the API take is one the tools' schemas take.


def knob_choices(k: Knob) -> Any:
    """The type of knob ``k``'s argument where it has a vocabulary: a Literal over its choices (``Knob.choices``)."""
    return Literal[k.choices]


Model = Annotated[str, Field(description="a catalog name (list_models: deepseek-v3, qwen3-235b-a22b, ...) or the "
                                         "text of a Hugging Face config.json (starts with '{')")]
ModelName = Annotated[str, Field(description="the name of a model given as config.json text (its file name)")]
Gpu = Annotated[str, Field(description="GPU name from list_hardware (h100, h200, b200, gb200, gb300, ...)")]
Gpus = Annotated[int, Field(description="total GPU count")]
SeqLen = Annotated[int, Field(description="sequence length in tokens (131072 for 128K)")]
Gbs = Annotated[int, Field(description="global batch size in sequences")]
Precision = Annotated[knob_choices(knob_named("precision")),
                      Field(description="GEMM precision: fp8 = blockwise (Hopper), fp8-cs current scaling, fp8-ds "
                                        "delayed scaling, mxfp8 (Blackwell), nvfp4 (Blackwell NVFP4 training)")]
Dispatcher = knob_choices(knob_named("dispatcher"))
CpComm = Annotated[knob_choices(knob_named("cp_comm_type")),
                   Field(description="context-parallel communication (Megatron-Core cp_comm_type; p2p = ring); auto = "
                                     "the planner's choice (least attention + exposed CP communication)")]
Fsdp = knob_choices(knob_named("fsdp"))  # a held layout's (fsdp_choices())
FsdpSearch = Literal[fsdp_choices(search=True)]  # a search's: auto searches it beside the distributed optimizer
Optimizer = knob_choices(knob_named("optimizer"))
ExportFormat = Literal[tools.EXPORT_FORMATS]
CudaGraphs = Annotated[str | None, Field(description="CUDA graph scopes, e.g. attn,moe_router,moe_preprocess or "
                                                     "full_iteration")]
OffloadFraction = Annotated[float, Field(description="fraction of optimizer state on the CPU, 0-1")]
OffloadModules = Annotated[str | None, Field(description="activation offload modules, e.g. core_attn")]
Recompute = Annotated[str | None, Field(description=f"none | full[:{'|'.join(RECOMPUTE_METHODS)}[:N]] | "
                                                    f"selective:MOD[,MOD] ({', '.join(RECOMPUTE_MODULES)})")]
HardwareYaml = Annotated[str | None, Field(description="text of a hardware YAML adding GPUs (docs/hardware.md)")]
CalibrationYaml = Annotated[str | None, Field(description="text of a calibration profile (calibrate's "
                                                          "profile_yaml): the timing constants fitted to a cluster")]
Size = Annotated[int | None, Field(description="pin this size instead of searching it")]
Routing = Annotated[Literal[ROUTINGS] | None,
                    Field(description="routing the estimate assumes: forced (force-balanced, the perf recipes'; the "
                                      "default, or a run config's '# moeplan:' comment's) or natural (the router's own "
                                      "choices: the calibration's natural_routing_imbalance); give routing or "
                                      "moe_imbalance, not both")]
MoeImbalance = Annotated[float | None, Field(description="tokens on the busiest expert rank / mean (1.0: force-balanced "
                                                         "routing); give routing or moe_imbalance, not both")]

# --------------------------------------------------------------------------------------------- knob arguments
# The knobs a tool takes beyond those its signature lists (with their own descriptions) are read from the knob table
# (moeplan.run.knobs): each an argument named as the CLI's flag (its destination: bf16_grads for grad_fp32) or, for a
# knob without a flag, its API keyword, typed by its kind, its allowed values the knob's choices, described by the
# flag's help. A new knob reaches the tools without an edit here. The knob arguments a signature lists itself take
# their defaults from the table too (moeplan.assistant.tools.knob_default), as the CLI's flags do; None where the
# tool resolves an unset value (te_version, moe_imbalance, reserve_gib: as the CLI's unset flags), a search's pins.

_PY_TYPES: dict[str, Any] = {"int": int, "float": float, "bool": bool, "str": str, "list": str}


def _knob_parameter(k: Knob) -> inspect.Parameter:
    """A keyword-only parameter for knob ``k`` (see above): lists (CUDA graph scopes, offload modules) are comma-
    separated names, as the CLI takes them."""
    base: Any = knob_choices(k) if k.choices else _PY_TYPES[k.kind.rstrip("?")]
    default: Any = knob_default(knob_argument(k))
    if k.flag is not None and k.flag.get("invert"):
        base = bool
    elif k.optional or k.kind == "list" or default is None:
        base = base | None
    text = (k.flag or {}).get("help") or (f"{k.api}: a knob of the strategy file's {k.group} section "
                                          f"(moeplan.run.knobs; default {default!r})")
    text = text.replace("%(choices)s", ", ".join(k.choices)).replace("%%", "%")
    return inspect.Parameter(knob_argument(k), inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[base, Field(description=text)])


def _knob_value(k: Knob, value: Any) -> Any:
    """The API keyword's value of a knob argument (an inverted flag's negation)."""
    return (not value) if k.flag is not None and k.flag.get("invert") else value


def with_knobs(every: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A tool that takes, beside its signature's arguments, every knob of the knob table (``every``: estimate, one
    layout) or every knob an estimating command takes (moeplan.run.knobs.command_knobs: the searches, whose layout
    knobs are searched): each knob its signature lacks becomes an argument (:func:`_knob_parameter`), the table read
    when the tool is defined (at import). The function's own ``knobs`` parameter (never published) gets the API keyword
    and value of each such argument given away from its default (so a run config's own settings are not overridden
    by defaults)."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "knobs"]
        names = {p.name for p in own}
        extra = [k for k in (knob_table() if every else command_knobs()) if knob_argument(k) not in names
                 and k.api not in names]
        params = {knob_argument(k): (k, _knob_parameter(k)) for k in extra}

        @functools.wraps(fn)
        async def tool(*args: Any, **kwargs: Any) -> Any:
            knobs = {}
            for name, (k, param) in params.items():
                value = kwargs.pop(name, param.default)
                if value != param.default:
                    knobs[k.api] = _knob_value(k, value)
            return await fn(*args, knobs=knobs, **kwargs)

        new = sig.replace(parameters=[*own, *(p for _, p in params.values())])
        tool.__signature__ = new  # type: ignore[attr-defined]
        del tool.__wrapped__  # the SDK reads the signature above, not fn's
        return tool

    return wrap


# --------------------------------------------------------------------------------------------- output schemas

_NUM = {"type": "number"}
_RANGE = {"type": "array", "items": _NUM, "minItems": 2, "maxItems": 2,
          "description": "the estimate's band: [low, high] (the calibration's cross-validated error)"}
_PARALLEL = {"type": "object", "properties": {k: {"type": "integer"} for k in ("tp", "pp", "vpp", "cp", "ep", "etp",
                                                                                "dp", "edp")},
             "required": ["tp", "pp", "vpp", "cp", "ep", "etp", "dp"]}
_MEMORY = {"type": "object", "properties": {"total": _NUM}, "required": ["total"],
           "additionalProperties": _NUM, "description": "GiB per GPU by item, on the most loaded pipeline rank"}
_RUN = {
    "parallel": _PARALLEL, "seq_len": {"type": "integer"}, "gbs": {"type": "integer"}, "mbs": {"type": "integer"},
    "precision": {"type": "string"}, "recompute": {"type": "string"}, "dispatcher": {"type": "string"},
    "memory_gib": _MEMORY, "capacity_gib": _NUM, "fits": {"type": "boolean"}, "step_time_s": _NUM,
    "tflops_per_gpu": _NUM, "tflops_range": _RANGE, "tokens_per_s_per_gpu": _NUM, "tokens_per_s_range": _RANGE,
    "mfu": {**_NUM, "description": "model FLOPs utilization against the dense BF16 peak at every precision"},
    "mfu_peak": {"type": "string", "description": "the peak mfu is taken against: bf16"},
    "time_breakdown_s": {"type": "object", "additionalProperties": _NUM},
    "outside_fit_note": {"type": ["string", "null"]},
    "routing": {"enum": [*ROUTINGS, CUSTOM_ROUTING, None],
                "description": "the routing assumed: forced, natural, or custom (moe_imbalance given as a number); null "
                               "for a model without experts"},
    "moe_imbalance": {"type": ["number", "null"], "description": "tokens on the busiest expert rank / mean assumed "
                                                                 "(null for a model without experts)"},
}
_RUN_REQUIRED = ["parallel", "seq_len", "gbs", "memory_gib", "fits", "step_time_s", "tflops_per_gpu", "tflops_range",
                 "tokens_per_s_per_gpu", "tokens_per_s_range"]
_ROUTING_REQUIRED = ["routing", "moe_imbalance"]  # every answer of estimate, plan, sweep and export says its routing
ESTIMATE = {"type": "object", "properties": {"model": {"type": "string"}, "gpu": {"type": "string"},
                                             "gpus": {"type": "integer"}, **_RUN,
                                             "error_band": {**_NUM, "description": "relative band above the estimate"},
                                             "headroom_gib": _NUM,
                                             "hints": {"type": "array", "items": {"type": "object"}, "description":
                                                       "knobs left at their defaults with a value >= 10% faster"}},
            "required": ["model", "gpu", "gpus", *_RUN_REQUIRED, *_ROUTING_REQUIRED, "mfu", "error_band"]}
_RATIONALE = {"type": "array", "items": {"type": "object", "properties": {"topic": {"type": "string"},
                                                                          "text": {"type": "string"}},
                                         "required": ["topic", "text"]}}
_STRINGS = {"type": "array", "items": {"type": "string"}}
PLAN_ITEM = {"type": "object",
             "properties": {"rank": {"type": "integer"}, **_RUN,
                            "tie": {"type": "boolean", "description": "its band overlaps the fastest plan's"},
                            "rationale": _RATIONALE, "overrides": _STRINGS, "yaml": {"type": "string"},
                            "megatron_lm_args": _STRINGS, "provenance": {"type": "string"}},
             "required": ["rank", *_RUN_REQUIRED, *_ROUTING_REQUIRED, "tie", "rationale", "overrides", "yaml",
                          "megatron_lm_args"]}
_CLOSEST = {"type": ["object", "null"], "description": "when nothing fits: the run that misses by least",
            "properties": {"short": {"type": "string"}, "memory_gib": _NUM, "misses_by_gib": _NUM,
                           "memory_gib_budget": _NUM}}
PLAN = {"type": "object",
        "properties": {"model": {"type": "string"}, "gpu": {"type": "string"}, "gpus": {"type": "integer"},
                       "seq_len": {"type": "integer"}, "requested_gbs": {"type": "integer"},
                       "gbs": {"type": "integer", "description": "the GBS planned (halved while nothing fits)"},
                       "headroom": _NUM, "layouts_considered": {"type": "integer"},
                       "routing": _RUN["routing"], "moe_imbalance": _RUN["moe_imbalance"],
                       "notes": _STRINGS, "closest": _CLOSEST,
                       "plans": {"type": "array", "items": PLAN_ITEM,
                                 "description": "what `moeplan plan --json` prints, fastest first (ties first)"}},
        "required": ["model", "gpu", "gpus", "seq_len", "gbs", "routing", "moe_imbalance", "plans", "closest", "notes"]}
MODELS = {"type": "object", "properties": {"models": {"type": "array", "items": {
    "type": "object", "properties": {"name": {"type": "string"}, "architecture": {"type": "string"},
                                     "layers": {"type": "integer"}, "experts": {"type": "integer"},
                                     "top_k": {"type": "integer"}, "total_params": {"type": "integer"},
                                     "active_params": {"type": "integer"}},
    "required": ["name", "total_params", "active_params"]}}}, "required": ["models"]}
HARDWARE = {"type": "object", "properties": {"gpus": {"type": "array", "items": {
    "type": "object", "properties": {"name": {"type": "string"}, "hbm_gib": _NUM, "bf16_tflops": _NUM},
    "required": ["name", "hbm_gib"]}}}, "required": ["gpus"]}
PARAMS = {"type": "object", "properties": {"model": {"type": "string"}, "total_params": {"type": "integer"},
                                           "active_params": {"type": "integer"}, "flops_per_token": _NUM,
                                           "breakdown": {"type": "object"}},
          "required": ["model", "total_params", "active_params", "flops_per_token"]}
SWEEP = {"type": "object", "properties": {"rows": {"type": "array", "items": {
    "type": "object", "properties": {"seq_len": {"type": "integer"}, "gbs": {"type": "integer"},
                                     "fits": {"type": "boolean"}, "tflops_per_gpu": _NUM, "tflops_range": _RANGE,
                                     "closest": {"type": ["object", "null"]}, "invalid": {"type": ["string", "null"]},
                                     "routing": _RUN["routing"], "moe_imbalance": _RUN["moe_imbalance"]},
    "required": ["seq_len", "gbs", "fits", "closest", "invalid", "routing", "moe_imbalance"]},
    "description": "what `moeplan sweep --json` prints: one row per length"}}, "required": ["rows"]}
_SUMMARY = {"type": ["object", "null"], "properties": {"tflops_per_gpu": _NUM, "tokens_per_s_per_gpu": _NUM}}
EXPLAIN = {"type": "object", "properties": {"a": _SUMMARY, "b": _SUMMARY, "reasons": _RATIONALE,
                                            "no_answer": {"type": ["string", "null"]}},
           "required": ["a", "b", "reasons", "no_answer"]}
CHECK = {"type": "object", "properties": {
    "kind": {"type": "string"}, "model": {"type": "string"}, "gpu": {"type": "string"}, "gpus": {"type": "integer"},
    "errors": {"type": "integer"}, "warnings": {"type": "integer"}, "infos": {"type": "integer"},
    "findings": {"type": "array", "items": {"type": "object", "properties": {
        "severity": {"enum": ["error", "warning", "info"]}, "rule": {"type": "string"},
        "message": {"type": "string"}, "fix": _STRINGS}, "required": ["severity", "rule", "message"]}},
    "estimate": {"anyOf": [ESTIMATE, {"type": "null"}]}},
    "required": ["kind", "model", "gpu", "gpus", "errors", "warnings", "findings", "estimate"]}
EXPORT = {"type": "object", "properties": {
    "format": {"enum": list(tools.EXPORT_FORMATS)},
    "text": {"type": "string", "description": "what `moeplan plan --format FORMAT` prints"},
    "provenance": {"type": "string"}, "overrides": _STRINGS, "yaml": {"type": "string"},
    "megatron_lm_args": _STRINGS, "env": {"type": "object"}, "plan": {"type": "object"}},
    "required": ["format", "text", "overrides", "yaml", "megatron_lm_args", "plan"]}
CALIBRATE = {"type": "object", "properties": {
    "gpu": {"type": "string"}, "runs": {"type": "array", "items": {"type": "object"}},
    "constants": {"type": "object", "additionalProperties": _NUM}, "not_moved": _STRINGS,
    "fit": {"type": "object"}, "profile_yaml": {"type": "string", "description": "the profile `--out` writes"}},
    "required": ["gpu", "runs", "constants", "fit", "profile_yaml"]}


# --------------------------------------------------------------------------------------------- plumbing


def _result(out: dict[str, Any]) -> CallToolResult:
    """Structured content (the dict) and the same JSON as text, for clients that read only text."""
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(out, allow_nan=False))],
                          structured_content=out)


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


# One tool call at a time runs the engine (its caches are shared module state; the GIL would serialise the work
# anyway): a client's concurrent calls queue here while the event loop keeps serving.
_ENGINE = threading.Lock()


def _locked(fn: Callable[..., dict[str, Any]], kwargs: dict[str, Any]) -> dict[str, Any]:
    with _ENGINE:
        return fn(**kwargs)


async def _run(fn: Callable[..., dict[str, Any]], /, **kwargs: Any) -> CallToolResult:
    """``fn(**kwargs)`` on a worker thread (the event loop stays free for progress and cancellation): its dict,
    or its MoeplanError's one line as a tool error."""
    try:
        out = await anyio.to_thread.run_sync(functools.partial(_locked, fn, kwargs))
    except MoeplanError as exc:
        return _error(one_line(exc))
    try:
        return _result(out)
    except ValueError:  # not finite: what the CLI's _print_json refuses
        return _error("the result is not finite (an input beyond what the model covers); no JSON returned")


def _progress(ctx: Context, what: str) -> tools.Progress:
    """A planner progress object that sends MCP progress notifications from the worker thread (where the
    client asked for them: a progress token on the request)."""

    def report(done: int, total: int) -> None:
        anyio.from_thread.run(functools.partial(ctx.report_progress, done, total, f"{what}: {done} of {total} layouts"))

    return tools.Progress(report)


class MoeplanMCP(MCPServer):
    """The SDK's server, with arguments that fail the input schema reported in one line as well, and arguments
    no tool takes refused (as the CLI refuses an unknown flag) instead of ignored."""

    def __init__(self, *args: Any, tools: list[Tool], **kwargs: Any) -> None:
        super().__init__(*args, tools=tools, **kwargs)
        self._arguments = {t.name: set(t.parameters.get("properties", {})) for t in tools}

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        unknown = sorted(set(arguments or {}) - self._arguments.get(name, set(arguments or {})))
        if unknown:
            takes = ", ".join(sorted(self._arguments[name])) or "no arguments"
            raise ToolError(f"{name}: unknown argument(s) {', '.join(unknown)}; it takes {takes}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                parts = []
                for err in cause.errors():
                    loc = ".".join(str(p) for p in err["loc"]) or "arguments"
                    got = f" (got {err['input']!r})" if err["type"] != "missing" else ""
                    parts.append(f"{loc}: {err['msg']}{got}")
                raise ToolError(f"{name}: " + one_line("; ".join(parts))) from None
            raise


def _tool(fn: Callable[..., Any], schema: dict[str, Any], title: str) -> Tool:
    """The SDK's tool of ``fn`` (an async function returning a CallToolResult) with ``schema`` as its output schema:
    published to clients, which check the structured content against it; the dict itself is returned as it is
    (MCPServer.add_tool derives an output schema only from a return annotation, which would re-validate, and so
    could change, the CLI's dicts)."""
    tool = Tool.from_function(fn, title=title, annotations=READ_ONLY, structured_output=False)
    tool.fn_metadata.output_schema = schema
    return tool


# --------------------------------------------------------------------------------------------- tools


async def list_models() -> CallToolResult:
    """The built-in model catalog: architecture, layers, routed experts, top-k, total and active parameters (what
    `moeplan models --json` prints, as {"models": [...]}). Any tool's model is one of these names or a config.json
    text."""
    return await _run(tools.list_models)


async def list_hardware(hardware_yaml: HardwareYaml = None) -> CallToolResult:
    """The GPU catalog: HBM, peak FLOP/s by precision, NVLink and scale-out bandwidth, host link and memory (what
    `moeplan hardware --json` prints, as {"gpus": [...]}); hardware_yaml adds a cluster's own entries."""
    return await _run(tools.list_hardware, hardware_yaml=hardware_yaml)


async def params(model: Model, seq_len: SeqLen = 4096, tp: Annotated[int, Field(description="TP (pads the "
                 "vocabulary)")] = 1, model_name: ModelName = "custom-model") -> CallToolResult:
    """Total and active parameters with their breakdown, and the training FLOPs per token Megatron-Core counts for
    its TFLOP/s (what `moeplan params MODEL --json` prints)."""
    return await _run(tools.params, model=model, seq_len=seq_len, tp=tp, model_name=model_name)


@with_knobs(every=True)
async def estimate(
    model: Model, gpus: Gpus, seq_len: SeqLen, gbs: Gbs, gpu: Gpu = DEFAULT_GPU, mbs: int = 1, tp: int = 1,
    pp: int = 1, vpp: int = 1, cp: int = 1, ep: int = 1, etp: int = 1,
    pipeline_layout: Annotated[str | None, Field(description="Megatron pipeline_model_parallel_layout")] = None,
    recompute: Recompute = knob_default("recompute"), dispatcher: Dispatcher = knob_default("dispatcher"),
    ep_overlap: bool = knob_default("ep_overlap"), delay_wgrad: bool | None = knob_default("delay_wgrad"),
    cuda_graphs: CudaGraphs = knob_default("cuda_graphs"),
    optimizer_offload: OffloadFraction = knob_default("optimizer_offload"),
    offload_modules: OffloadModules = knob_default("offload_modules"),
    cp_comm_type: CpComm = knob_default("cp_comm_type"),
    capacity_factor: float | None = knob_default("capacity_factor"),
    rank_capacity_factor: float | None = knob_default("rank_capacity_factor"), fsdp: Fsdp | None = knob_default("fsdp"),
    fsdp_double_buffer: bool = knob_default("fsdp_double_buffer"), precision: Precision = knob_default("precision"),
    mcore_version: str = knob_default("mcore_version"),
    te_version: Annotated[str | None, Field(description=f"Transformer Engine release (default {DEFAULT_TE_VERSION})")] = None,
    te_grouped_tensor: bool = knob_default("te_grouped_tensor"), routing: Routing = None,
    moe_imbalance: MoeImbalance = None,
    reserve_gib: Annotated[float | None, Field(description="GiB per GPU kept for CUDA context and NCCL")] = None,
    bf16_grads: bool = knob_default("bf16_grads"), bf16_moments: bool = knob_default("bf16_moments"),
    optimizer: Optimizer = knob_default("optimizer"), mtp_layers: int | None = None, hardware_yaml: HardwareYaml = None,
    calibration_yaml: CalibrationYaml = None,
    model_name: ModelName = "custom-model", knobs: dict[str, Any] | None = None,
) -> CallToolResult:
    """Memory per GPU item by item (most loaded pipeline rank), step time, TFLOP/s per GPU with its band
    (tflops_range), MFU, tokens/s per GPU and where the time goes, for one layout and set of knobs (what
    `moeplan estimate ... --json` prints; every knob of moeplan's knob table is an argument)."""
    kwargs = {k: v for k, v in locals().items() if k != "knobs"}
    return await _run(tools.estimate, **kwargs, **(knobs or {}))


async def _plan_like(fn: Callable[..., dict[str, Any]], ctx: Context, what: str, **kwargs: Any) -> CallToolResult:
    return await _run(fn, progress=_progress(ctx, what), **kwargs)


@with_knobs(every=False)
async def plan(
    model: Model, gpus: Gpus, seq_len: SeqLen, gbs: Gbs, ctx: Context, gpu: Gpu = DEFAULT_GPU,
    top: Annotated[int, Field(description="plans to return")] = 5,
    headroom: Annotated[float, Field(description="share of HBM left free")] = DEFAULT_HEADROOM,
    tp: Size = None, pp: Size = None, vpp: Size = None, cp: Size = None, ep: Size = None, etp: Size = None,
    mbs: Size = None, dispatcher: Dispatcher | None = None, recompute: Recompute = None,
    no_cuda_graphs: bool = False, no_offload: bool = False,
    keep_gbs: Annotated[bool, Field(description="never lower GBS when nothing fits")] = False,
    fsdp: FsdpSearch = FSDP_SEARCH, fsdp_double_buffer: bool = knob_default("fsdp_double_buffer"),
    precision: Precision = knob_default("precision"), mcore_version: str = knob_default("mcore_version"),
    te_version: str | None = None, te_grouped_tensor: bool = knob_default("te_grouped_tensor"),
    routing: Routing = None, moe_imbalance: MoeImbalance = None, reserve_gib: float | None = None,
    bf16_grads: bool = knob_default("bf16_grads"), bf16_moments: bool = knob_default("bf16_moments"),
    optimizer: Optimizer = knob_default("optimizer"), mtp_layers: int | None = None,
    hardware_yaml: HardwareYaml = None, calibration_yaml: CalibrationYaml = None, model_name: ModelName = "custom-model",
    knobs: dict[str, Any] | None = None,
) -> CallToolResult:
    """Search TP, PP, VPP, CP, EP, MBS, recompute, dispatcher, CP communication, EP overlap, CUDA graphs and
    optimizer offload; keep what fits with headroom; rank by tokens/s per GPU, ties (overlapping bands) first. Each
    plan has memory, speed with its band, a rationale with numbers and the Megatron Bridge overrides, YAML and
    Megatron-LM flags. plans is what `moeplan plan --json` prints ([] when nothing fits; closest then names the run
    that misses by least). Sends progress notifications while it searches."""
    kwargs = {k: v for k, v in locals().items() if k not in ("ctx", "knobs")}
    return await _plan_like(tools.plan, ctx, "plan", **kwargs, **(knobs or {}))


@with_knobs(every=False)
async def export(
    model: Model, gpus: Gpus, seq_len: SeqLen, gbs: Gbs, ctx: Context,
    format: Annotated[ExportFormat,
                      Field(description="Megatron Bridge overrides, a Bridge YAML, Megatron-LM flags, or a Megatron "
                            "Bridge v0.6 launch command (train.sh / performance setup_experiment.py; needs "
                            "mcore_version 0.19)")] = "overrides",
    gpu: Gpu = DEFAULT_GPU, headroom: float = DEFAULT_HEADROOM, tp: Size = None, pp: Size = None, vpp: Size = None,
    cp: Size = None, ep: Size = None, etp: Size = None, mbs: Size = None, dispatcher: Dispatcher | None = None,
    recompute: Recompute = None, no_cuda_graphs: bool = False, no_offload: bool = False, keep_gbs: bool = False,
    fsdp: FsdpSearch = FSDP_SEARCH, precision: Precision = knob_default("precision"),
    mcore_version: str = knob_default("mcore_version"), te_version: str | None = None, routing: Routing = None,
    moe_imbalance: MoeImbalance = None, reserve_gib: float | None = None, bf16_grads: bool = knob_default("bf16_grads"),
    bf16_moments: bool = knob_default("bf16_moments"), optimizer: Optimizer = knob_default("optimizer"),
    mtp_layers: int | None = None, hardware_yaml: HardwareYaml = None, model_name: ModelName = "custom-model",
    knobs: dict[str, Any] | None = None,
) -> CallToolResult:
    """The best plan (pin sizes to export a layout of your own) as ready-to-use configuration: text is exactly what
    `moeplan plan --format FORMAT` prints (overrides, yaml, megatron-lm, headed by the provenance comment that
    check_config reads back; or bridge-launch / perf-launch, a Megatron Bridge v0.6 launch command, which needs
    mcore_version 0.19); overrides, yaml and megatron_lm_args are all given. Nothing is written to disk."""
    kwargs = {k: v for k, v in locals().items() if k not in ("ctx", "knobs")}
    return await _plan_like(tools.export, ctx, "export", **kwargs, **(knobs or {}))


@with_knobs(every=False)
async def sweep(
    model: Model, gpus: Gpus, seq_lens: Annotated[list[int], Field(description="lengths in tokens")],
    gbs_tokens: Annotated[int, Field(description="tokens per global batch, constant across lengths")],
    ctx: Context, gpu: Gpu = DEFAULT_GPU,
    hold: Annotated[bool, Field(description="hold the layout given by the sizes below at every length")] = False,
    tp: int | None = None, pp: int | None = None, vpp: int | None = None, cp: int | None = None,
    ep: int | None = None, etp: int | None = None, mbs: int | None = None, recompute: Recompute = None,
    dispatcher: Dispatcher | None = None, optimizer_offload: float = knob_default("optimizer_offload"),
    cp_comm_type: CpComm = knob_default("cp_comm_type"), fsdp: FsdpSearch = FSDP_SEARCH,
    precision: Precision = knob_default("precision"), mcore_version: str = knob_default("mcore_version"),
    te_version: str | None = None, routing: Routing = None, moe_imbalance: MoeImbalance = None,
    reserve_gib: float | None = None, bf16_grads: bool = knob_default("bf16_grads"),
    bf16_moments: bool = knob_default("bf16_moments"), optimizer: Optimizer = knob_default("optimizer"),
    mtp_layers: int | None = None, hardware_yaml: HardwareYaml = None,
    calibration_yaml: CalibrationYaml = None, model_name: ModelName = "custom-model",
    knobs: dict[str, Any] | None = None,
) -> CallToolResult:
    """Plan each sequence length (or hold one layout) with a constant number of tokens per global batch (rows:
    what `moeplan sweep --json` prints; a length with no plan says why in closest / invalid)."""
    kwargs = {k: v for k, v in locals().items() if k not in ("ctx", "knobs")}
    return await _plan_like(tools.sweep, ctx, "sweep", **kwargs, **(knobs or {}))


@with_knobs(every=False)
async def explain(
    model: Annotated[str | None, Field(description="the model compared at two lengths, or the run configs' model")] = None,
    config_a: Annotated[str | None, Field(description="text of run A's config (Bridge YAML, overrides or "
                                                      "Megatron-LM arguments)")] = None,
    config_b: Annotated[str | None, Field(description="text of run B's config")] = None,
    seq_lens: Annotated[list[int] | None, Field(description="with model: [A, B]; with config_a alone: [B]")] = None,
    gpus: int | None = None, gbs_tokens: int | None = None, gpu: str | None = None,
    precision: Precision = knob_default("precision"),
    mcore_version: str | None = None, te_version: str | None = None, routing: Routing = None,
    moe_imbalance: MoeImbalance = None, reserve_gib: float | None = None, hardware_yaml: HardwareYaml = None,
    model_name: ModelName = "custom-model",
    no_fix: Annotated[bool, Field(description="skip the planner's remedy")] = False,
    knobs: dict[str, Any] | None = None,
) -> CallToolResult:
    """Why run B is slower (or faster) than run A: every setting that differs and the change in throughput
    attributed to attention FLOPs, exposed CP/EP/PP/DP communication, recompute, bubble and memory, then the
    planner's remedy for B (what `moeplan explain ... --json` prints). The knob arguments beyond these apply to a
    model's two lengths; run configs say their own."""
    kwargs = {k: v for k, v in locals().items() if k != "knobs"}
    return await _run(tools.explain, **kwargs, **(knobs or {}))


async def check_config(
    config: Annotated[str, Field(description="the run config's text: a Megatron Bridge YAML, Hydra-style "
                                             "overrides, or a Megatron-LM argument list / launch script")],
    model: Annotated[str | None, Field(description="catalog name or config.json text; default: the file's "
                                                   "'# moeplan:' comment, else inferred from its architecture")] = None,
    gpu: str | None = None, gpus: int | None = None, mcore_version: str | None = None,
    te_version: str | None = None, te_grouped_tensor: bool = knob_default("te_grouped_tensor"),
    headroom: Annotated[float, Field(description="share of HBM the run must leave free")] = DEFAULT_HEADROOM,
    routing: Routing = None, moe_imbalance: MoeImbalance = None, reserve_gib: float | None = None,
    hardware_yaml: HardwareYaml = None,
    name: Annotated[str, Field(description="file name the text is read as (its suffix: run.yaml, run.sh, "
                                           "overrides.txt)")] = "run.yaml",
    model_name: ModelName = "custom-model",
) -> CallToolResult:
    """Lint a run config: its estimate, and findings (severity, rule, numbers, the override that fixes each), errors
    first (what `moeplan check CONFIG --json` prints; a config with errors is an answer, errors counts them)."""
    return await _run(tools.check_config, **{k: v for k, v in locals().items()})


async def calibrate(
    log: Annotated[str, Field(description="text of a Megatron-LM or Megatron Bridge training log")],
    name: Annotated[str, Field(description="the log's file name in the answer")] = "training.log",
    model: str | None = None, gpu: Annotated[str | None, Field(description="GPU the log ran on")] = None,
    sets: Annotated[list[str] | None, Field(description="KEY=VALUE settings the log lacks (gpus=16, ...)")] = None,
    warmup: Annotated[int | None, Field(description="iterations dropped as warm-up")] = None,
    hardware_yaml: HardwareYaml = None, model_name: ModelName = "custom-model",
) -> CallToolResult:
    """Fit the timing model to a cluster from a training log: measured vs default vs calibrated estimates per run,
    the fitted constants (what `moeplan calibrate LOG --json` prints) and profile_yaml, the profile to give back as
    calibration_yaml to estimate, plan or sweep."""
    return await _run(tools.calibrate, **{k: v for k, v in locals().items()})


TOOLS: tuple[tuple[Callable[..., Any], dict[str, Any], str], ...] = (
    (list_models, MODELS, "Model catalog"),
    (list_hardware, HARDWARE, "GPU catalog"),
    (params, PARAMS, "Parameters and FLOPs per token"),
    (estimate, ESTIMATE, "Memory and speed of one layout"),
    (plan, PLAN, "Fastest layouts that fit"),
    (sweep, SWEEP, "Plans across sequence lengths"),
    (explain, EXPLAIN, "Why one run differs from another"),
    (check_config, CHECK, "Lint a run config"),
    (export, EXPORT, "Best plan as overrides, YAML or flags"),
    (calibrate, CALIBRATE, "Calibrate from a training log"),
)


def build_server() -> MCPServer:
    """The server with every tool (:data:`TOOLS`)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("moeplan")
    except PackageNotFoundError:  # a source tree on sys.path, not installed
        release = "unknown"
    return MoeplanMCP(SERVER_NAME, instructions=INSTRUCTIONS, version=release, log_level="WARNING",
                      tools=[_tool(fn, schema, title) for fn, schema, title in TOOLS])


def serve() -> None:
    """Run the server over stdio until the client closes it."""
    build_server().run("stdio")
