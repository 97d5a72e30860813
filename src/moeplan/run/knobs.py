"""The knob table: every knob of a run, once, as the fields of :class:`RunKnobs` (the knob half of
:class:`moeplan.run.config.RunConfig`, which adds the model, the layout, the batch and the GPU), each with its
docstring and, in its field metadata (:func:`knob`), what the rest of moeplan derives from it:

* ``group``: the strategy file's section (moeplan.run.strategy); None keeps it out of the file;
* ``api``: the keyword of :func:`moeplan.api.build_config` and the strategy file's key (default: the field name);
  ``api_default`` where the API's default is a word the API resolves (``dispatcher="auto"``);
* ``words``: the words the API resolves beside the field's values (``auto``: the estimates' choice), which the CLI
  flag, the API, the MCP tools and the strategy file all take; the values themselves are read from the field's
  ``Literal`` type (moeplan.base.vocab), so a knob's allowed values (:attr:`Knob.choices`) are written once;
* ``flag``: the command-line flag, as Megatron-LM's ``argument_utils.ArgumentGroupFactory`` reads a field's
  ``argparse_meta``: the keyword arguments of ``add_argument`` (``names``, ``help``, ``type``, ``choices``,
  ``action``, ``default``, ``metavar``; the default is the field's unless given) and ``slot``, the argument group of
  moeplan.cli.args that places it (``gpu``: beside --gpu; ``cluster``: every estimating command; ``layout``: the
  commands that take one run's layout; ``fsdp``: the Megatron-FSDP flags); ``invert``: the flag sets the opposite.

The value kind (integer, number, flag, word, list; optional or not) is read from the field's type. A new knob is
a field here (and, where Megatron names it, a row of moeplan.base.fields, and the cost that uses it): the CLI flag,
the API keyword and the strategy key follow. This module imports only the foundation, so the command line reads
the table at start-up without the model catalog or the hardware files (``moeplan --help`` stays fast).
"""

from __future__ import annotations

import argparse
import functools
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, get_args, get_origin, get_type_hints

from moeplan.base.errors import MoeplanError
from moeplan.base.router_dtype import RouterDtype
from moeplan.base.te_release import (DEFAULT_TE_VERSION, GROUPED_TENSOR_ENV, GROUPED_TENSOR_FIRST_VERSION, TE_COMMIT,
                                     TE_RELEASES)
from moeplan.base.vocab import (DEFAULT_MCORE_VERSION, DEFAULT_RESERVE_GIB, RECOMPUTE_ALIASES, RECOMPUTE_METHODS,
                                RECOMPUTE_MODULES, CpCommType, Dispatcher, FsdpStrategy, MuonTpMode, Optimizer,
                                Precision, RecomputeGranularity, RecomputeMethod, TeQuantMap)
from moeplan.run.attention_backend import TE_WIDE_HEAD_FIX_VERSION


@dataclass(frozen=True)
class Recompute:
    """Activation recompute: none, selective (Megatron ``recompute_modules``) or full."""

    granularity: RecomputeGranularity = "none"
    modules: frozenset[str] = frozenset()
    method: RecomputeMethod = "uniform"
    num_layers: int = 1  # full: layers per checkpoint group (uniform) or recomputed layers per chunk (block)

    @classmethod
    def parse(cls, text: str) -> Recompute:
        """'none' | 'full' | 'full:block:4' | 'full:uniform:1' | 'selective:mla_up_proj,layernorm'
        (the guidance's shorthand up_proj/norm is accepted and mapped to Megatron's labels)."""
        t = text.strip().lower()
        if t in ("", "none", "off"):
            return cls()
        if t.startswith("full"):
            parts = t.split(":")
            method = parts[1] if len(parts) > 1 and parts[1] else "uniform"
            if method not in RECOMPUTE_METHODS:
                raise MoeplanError(f"recompute '{text}': method must be {' or '.join(RECOMPUTE_METHODS)}")
            try:
                n = int(parts[2]) if len(parts) > 2 else 1
            except ValueError:
                raise MoeplanError(f"recompute '{text}': layer count must be an integer") from None
            if n < 1:
                raise MoeplanError(f"recompute '{text}': layer count must be >= 1")
            return cls("full", frozenset(), method, n)  # type: ignore[arg-type]
        body = t[len("selective:"):] if t.startswith("selective:") else t
        mods = [RECOMPUTE_ALIASES.get(m.strip(), m.strip()) for m in body.replace("+", ",").split(",") if m.strip()]
        bad = [m for m in mods if m not in RECOMPUTE_MODULES]
        if bad:
            raise MoeplanError(f"recompute module(s) {', '.join(bad)} unknown; Megatron-Core labels: {', '.join(RECOMPUTE_MODULES)}")
        return cls("selective", frozenset(mods)) if mods else cls()

    def label(self) -> str:
        if self.granularity == "none":
            return "none"
        if self.granularity == "full":
            return f"full:{self.method}:{self.num_layers}"
        return "selective:" + ",".join(sorted(self.modules))


TE_VERSION_HELP = (f"Transformer Engine release the run trains with, one of {', '.join(TE_RELEASES)} (default "
                   f"{DEFAULT_TE_VERSION}, the recipes' TE {TE_COMMIT}: every calibrated number was measured on it). It "
                   f"decides the attention kernel per head shape: from {TE_WIDE_HEAD_FIX_VERSION} (TE PR #3056, cuDNN 9.23) "
                   "cuDNN trains head dim 256 on B200/GB200/B300/GB300, so Qwen3-Next gets the cuDNN rate instead of "
                   "FlashAttention-2 (sm100) or the unfused path (sm103), whose s x s scores and no-CP rule disappear")
TE_GROUPED_TENSOR_HELP = (
    f"run the routed experts on TE GroupedLinear's grouped-tensor path ({GROUPED_TENSOR_ENV}=1, TE "
    f"{GROUPED_TENSOR_FIRST_VERSION}+, opt-in in every release; no released Megatron-Core has an option for it): one "
    "grouped quantize and one cuBLASLt grouped GEMM per linear instead of one per local expert, which removes the "
    "per-expert host launches of quantized experts. With Megatron-Core <= 0.19 it runs BF16 (TE 2.17, 2.18) and FP8 "
    "current scaling (TE 2.18) on H100/H200/B200/GB200/B300/GB300 in a CUDA 13 container (cuBLASLt 13.3+); MXFP8 "
    "and FP8 block scaling quantize 128-row blocks Megatron-Core does not pad to, and TE 2.19 needs the token "
    "counts on the GPU, so those raise: estimate refuses the flag there, plan keeps only runs whose experts TE's op "
    "fuser runs (it does not read the variable) and refuses it where none is left, check reports it as an error)")


@dataclass(frozen=True)
class Knob:
    """One row of the knob table: a :class:`RunKnobs` field and what its metadata says (see the module)."""

    name: str
    """The field's name (RunConfig's attribute)."""
    api: str
    """The API keyword and the strategy file's key."""
    group: str | None
    """The strategy file's section; None: not in the file."""
    kind: str
    """The value kind read from the field's type: int, float, bool, str or list, with '?' where None is allowed."""
    default: Any
    """The field's default (RunConfig's)."""
    api_default: Any
    """The API keyword's default: the field's, or the word the API resolves (``api_default``)."""
    flag: dict[str, Any] | None
    """The command-line flag's ``add_argument`` keywords with ``names`` and ``slot`` (None: no flag)."""
    values: tuple[str, ...] = ()
    """The field's vocabulary, read from its ``Literal`` type (moeplan.base.vocab); () where the type is no Literal."""
    words: tuple[str, ...] = ()
    """The words the API resolves beside :attr:`values` (``auto``)."""

    @property
    def optional(self) -> bool:
        return self.kind.endswith("?")

    @property
    def choices(self) -> tuple[str, ...]:
        """Every value the knob's edges take (CLI flag, API keyword, MCP argument, strategy key): the API's words,
        then the field's vocabulary; () for a knob without one."""
        return (*self.words, *self.values)

    def plain(self, value: Any) -> Any:
        """The value as the strategy file writes it (a recompute's label, a sorted list of names)."""
        if isinstance(value, Recompute):
            return value.label()
        if isinstance(value, frozenset):
            return sorted(value)
        return value


def knob(default: Any = MISSING, *, group: str | None, api: str | None = None, api_default: Any = MISSING,
         flag: dict[str, Any] | None = None, words: tuple[str, ...] = (), default_factory: Any = MISSING) -> Any:
    """A :class:`RunKnobs` field with its knob metadata (see the module)."""
    meta = {"group": group, "api": api, "api_default": api_default, "flag": flag, "words": words}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata={"knob": meta})
    return field(default=default, metadata={"knob": meta})


_KINDS = {"int": "int", "float": "float", "bool": "bool"}


def _kind(annotation: Any) -> str:
    """The value kind of a field's type (a string under ``from __future__ import annotations``)."""
    text = str(annotation).replace(" ", "")
    optional = text.endswith("|None")
    base = text.removesuffix("|None")
    kind = "list" if base.startswith("frozenset") else _KINDS.get(base, "str")
    return kind + ("?" if optional else "")


@functools.cache
def _hints() -> dict[str, Any]:
    return get_type_hints(RunKnobs)


def _values(name: str) -> tuple[str, ...]:
    """The vocabulary of :class:`RunKnobs` field ``name``: its ``Literal`` type's values (moeplan.base.vocab; an
    optional one's, ``Literal[...] | None``), else ()."""
    hint = _hints().get(name)
    if get_origin(hint) is not Literal:  # X | None: the Literal beside None
        hint = next((a for a in get_args(hint) if get_origin(a) is Literal), None)
    return tuple(get_args(hint)) if hint is not None else ()


def knob_table(record: type | None = None) -> tuple[Knob, ...]:
    """The knobs of ``record`` (default :class:`RunKnobs`; RunConfig or a subclass gives the same knobs, and any it
    adds), in field order: every field with knob metadata."""
    out = []
    for f in fields(record or RunKnobs):
        meta = f.metadata.get("knob")
        if meta is None:
            continue
        default = f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]
        api_default = default if meta["api_default"] is MISSING else meta["api_default"]
        out.append(Knob(f.name, meta["api"] or f.name, meta["group"], _kind(f.type), default, api_default,
                        meta["flag"], _values(f.name), tuple(meta["words"])))
    return tuple(out)


# Megatron-FSDP's words beside its strategies (the knob ``fsdp``): 'off' = the distributed optimizer (None in the run);
# a search's 'auto' = search Megatron-FSDP beside the distributed optimizer. 'none' and '' are no words of it: every
# edge (CLI flag, API, MCP tool, strategy file) takes exactly these, so a value one edge takes, all take.
FSDP_OFF = "off"
FSDP_SEARCH = "auto"


def fsdp_choices(search: bool = False) -> tuple[str, ...]:
    """The words ``fsdp`` takes: one run's ('off' and the strategies, the knob's choices), or a search's ('auto'
    first, then those)."""
    held = knob_named("fsdp").choices
    return (FSDP_SEARCH, *held) if search else held


def command_knobs(record: type | None = None) -> tuple[Knob, ...]:
    """The knobs every estimating command takes: a flag in the ``gpu`` or ``cluster`` slot."""
    return tuple(k for k in knob_table(record) if k.flag is not None and k.flag["slot"] in ("gpu", "cluster"))


def knob_named(api: str) -> Knob:
    """The knob whose API keyword is ``api``."""
    return next(k for k in knob_table() if k.api == api)


def flag_names(k: Knob) -> list[str]:
    """The option strings of a knob's flag (default ``--`` and the API name with ``-`` for ``_``)."""
    assert k.flag is not None
    return list(k.flag.get("names") or ["--" + k.api.replace("_", "-")])


def flag_dest(k: Knob) -> str:
    """The argparse destination of a knob's flag."""
    return flag_names(k)[0].removeprefix("--").replace("-", "_")


def flag_kwargs(k: Knob) -> dict[str, Any]:
    """``add_argument`` keywords of a knob's flag: its metadata less names and slot, the default the field's."""
    assert k.flag is not None
    kw = {key: value for key, value in k.flag.items() if key not in ("names", "slot", "invert")}
    if kw.get("action") in ("store_true", "store_false"):
        return kw
    if k.choices:  # the knob's vocabulary (its Literal type) and the API's words
        kw.setdefault("choices", list(k.choices))
    kw.setdefault("default", k.api_default)
    return kw


def flag_value(k: Knob, value: Any) -> Any:
    """The API keyword's value from the parsed flag: inverted where the flag says the opposite; an unset flag
    (None, or an empty word where unset is the flag's default) of a knob that is never None takes the API's
    default."""
    assert k.flag is not None
    if k.flag.get("invert"):
        return not value
    unset = value is None or (value == "" and k.flag.get("default", k.api_default) is None)
    if unset and not k.optional:
        return k.api_default
    return value


@dataclass(frozen=True, kw_only=True)
class RunKnobs:
    """Every knob of a run (the strategy but its layout and batch), grouped by concern as Megatron-Core groups its
    ``ModelParallelConfig`` / ``TransformerConfig`` fields, each with its docstring and its knob metadata
    (:func:`knob`). :class:`moeplan.run.config.RunConfig` is these and the model, layout, batch and GPU."""

    # ---- numerics
    precision: Precision = knob("bf16", group="numerics", flag={
        "slot": "gpu",
        "help": "GEMM precision: fp8 = blockwise (Hopper), fp8-cs current scaling, mxfp8 (Blackwell)"})
    """GEMM precision (moeplan.base.vocab.PRECISIONS; FP8 recipes map to Megatron-Core ``fp8_recipe``)."""
    bf16_start_layers: int | None = knob(None, group="numerics")
    """Layers at the start of the stack an FP8 / FP4 run keeps in BF16 (Megatron-Core ``first_last_layers_bf16`` with
    ``num_layers_at_start_in_bf16``; Bridge's FP8 current-scaling preset: 1); None = none."""
    bf16_end_layers: int | None = knob(None, group="numerics")
    """Layers at the end of the stack an FP8 / FP4 run keeps in BF16 (Megatron-Core ``first_last_layers_bf16`` with
    ``num_layers_at_end_in_bf16``; Bridge's Nemotron-3 Super NVFP4 preset ``nemotron_3_super_bf16_with_nvfp4_mixed``:
    14); None = none (moeplan.engine.timing.quant_map)."""
    te_quant_map: TeQuantMap = knob("none", group="numerics")
    """A Transformer Engine quantization config that moves modules out of the run's recipe (Megatron-Core
    ``quant_recipe``, Megatron-LM ``--te-precision-config-file``; moeplan.base.vocab.TE_QUANT_MAP_NAMES): 'none', or
    'nemotron3' (Megatron Bridge perf_recipes/nemotronh/te_quant.cfg, NVFP4 runs only)."""
    grad_fp32: bool = knob(True, group="numerics", flag={
        "slot": "cluster", "names": ["--bf16-grads"], "invert": True, "action": "store_true",
        "help": "main grads reduced and accumulated in bf16 (grad_reduce_in_fp32=False, as Megatron Bridge perf "
                "recipes do); default fp32"})
    """Main grads in fp32 (``grad_reduce_in_fp32``; Megatron-LM forces fp32 accumulation with --bf16)."""
    bf16_moments: bool = knob(False, group="numerics", flag={
        "slot": "cluster", "action": "store_true",
        "help": "precision-aware optimizer with bf16 Adam moments (exp_avg/exp_avg_sq, as the DeepSeek-V3 recipes "
                "do); default fp32"})
    """Precision-aware optimizer with bf16 ``exp_avg`` / ``exp_avg_sq``."""
    fp8_attention: bool = knob(False, group="numerics", flag={
        "slot": "gpu", "action": "store_true",
        "help": "FP8 attention (fp8_dot_product_attention: cuDNN's FP8 fused attention, as Megatron Bridge's MXFP8 "
                "full-iteration recipes set it); needs an FP8 precision"})
    """``fp8_dot_product_attention`` (Megatron-Core / Bridge ``mixed_precision``): Transformer Engine runs the core
    attention as cuDNN's FP8 fused-attention kernels, QK^T and PV (and the backward's matmuls) on the FP8 tensor
    cores, the softmax in fp32 as before (moeplan.engine.timing.attention.fused_attention_efficiency). Needs an FP8
    recipe (``precision`` one of base.fields.PRECISION_TO_FP8_RECIPE, not bf16 or nvfp4)."""
    # ---- MoE and its communication
    dispatcher: Dispatcher = knob("alltoall", group="moe", api_default="auto", words=("auto",), flag={
        "slot": "layout", "metavar": "NAME",
        "help": "MoE token dispatcher: %(choices)s; auto = HybridEP on NVL72, the faster of DeepEP/HybridEP on NVL8 "
                "(ncclep: NCCL EP, Megatron-Core 0.19+, with --rank-capacity-factor)"})
    """MoE token dispatcher: alltoall, allgather, or the flex backends deepep / hybridep."""
    moe_router_dtype: RouterDtype = knob("auto", group="moe", flag={
        "slot": "layout",
        "help": "moe_router_dtype: the router logits' dtype; auto = what the model's Megatron Bridge provider sets "
                "(fp32 for DeepSeek, Kimi, GLM, Nemotron-H, Qwen3-Next, Qwen3.5; unset for Qwen3 MoE, gpt-oss, "
                "Mixtral), none = unset (bf16)"})
    """``moe_router_dtype`` (TransformerConfig, every release): the router GEMM's output dtype; 'auto' follows the
    model's Megatron Bridge provider (moeplan.base.router_dtype), 'none' leaves it unset (the bf16 input's dtype).
    Its cost is small: the logits (one value per expert and token) in fp32 instead of bf16."""
    ep_overlap: bool = knob(False, group="moe", flag={
        "slot": "layout", "action": "store_true",
        "help": "overlap EP all-to-all with compute (moe_a2a_overlap)"})
    """``overlap_moe_expert_parallel_comm``: hide dispatch/combine behind another micro-batch."""
    delay_wgrad: bool | None = knob(None, group="moe", flag={
        "slot": "layout", "action": argparse.BooleanOptionalAction,
        "help": "delay_wgrad_compute: with --ep-overlap, run the weight-gradient GEMMs as separate nodes beside "
                "dispatch_bwd / the next combine_bwd (default: on with --ep-overlap, as Bridge's moe_a2a_overlap "
                "sets it)"})
    """``delay_wgrad_compute`` (ModelParallelConfig; Bridge ``comm_overlap.delay_wgrad_compute``, Megatron-LM
    ``--delay-wgrad-compute``): under EP A2A overlap the Transformer Engine linears keep their weight-gradient GEMMs
    out of the backward node and the merged schedule runs them as ``backward_dw`` calls on the compute stream
    (megatron/core/models/common/model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run): the routed
    experts' after mlp's dgrad, beside dispatch_bwd; attention's and the shared experts' after attention's dgrad,
    beside the next layer's combine_bwd. None = on exactly where EP overlap runs and Megatron accepts it, as Bridge
    pairs them (scripts/performance/utils/overrides.py ``_set_moe_a2a_overlap_overrides``, the perf recipes);
    True without EP overlap is rejected (transformer_config.py core_v0.14+: "overlap_moe_expert_parallel_comm must
    be enabled when enabling delay_wgrad_compute"); False keeps the weight gradients inside each backward node."""
    moe_imbalance: float = knob(1.0, group="moe")  # its flag: moeplan.cli.args.unsaid_arguments
    """Tokens on the busiest expert rank / mean; 1.0 = force-balanced routing."""
    capacity_factor: float | None = knob(None, group="moe", flag={
        "slot": "layout", "type": float, "help": "moe_expert_capacity_factor (token dropping)"})
    """``moe_expert_capacity_factor`` (token dropping) when set."""
    rank_capacity_factor: float | None = knob(None, group="moe", flag={
        "slot": "layout", "type": float, "metavar": "F",
        "help": "moe_expert_rank_capacity_factor: sync-free dropless MoE for full-iteration CUDA graphs "
                "(Megatron-Core 0.18+, HybridEP; Bridge perf recipes use 1.5)"})
    """``moe_expert_rank_capacity_factor`` (Megatron-Core 0.18+, HybridEP): fixed per-rank token buffers that make
    dropless MoE sync-free, so a full-iteration CUDA graph can capture it (with ``moe_paged_stash``)."""
    precision_aware_optimizer: bool | None = knob(None, group="numerics")
    """``use_precision_aware_optimizer``; None = moeplan's export: on with optimizer offload or bf16 moments
    (Megatron-LM validate_args requires it with --optimizer-cpu-offload; Megatron Bridge does not)."""
    # ---- communication overlap
    cp_comm_type: CpCommType = knob("p2p", group="communication", words=("auto",), flag={
        "slot": "layout",
        "help": "context-parallel communication (Megatron-Core cp_comm_type; p2p = ring; default p2p): "
                "%(choices)s; auto = the planner's choice (least attention + exposed CP communication)"})
    """Context-parallel communication: p2p (ring), a2a, allgather, a2a+p2p (hierarchical); the API's ``auto`` is the
    planner's choice (moeplan.engine.timing.attention.best_cp_comm_type)."""
    tp_comm_overlap: bool = knob(True, group="communication")
    """``tp_comm_overlap`` (TE userbuffers): TP collectives overlap GEMMs; exported on."""
    dp_overlap: bool = knob(True, group="communication")
    """DDP ``overlap_grad_reduce`` + ``overlap_param_gather``; exported on."""
    # ---- memory knobs
    recompute: Recompute = knob(group="memory", default_factory=Recompute, api_default="none", flag={
        "slot": "layout",
        "help": f"none | full[:{'|'.join(RECOMPUTE_METHODS)}[:N]] | selective:MOD[,MOD] with Megatron-Core labels "
                f"{', '.join(RECOMPUTE_MODULES)}"})
    """Activation recompute: none, selective (Megatron ``recompute_modules``) or full."""
    optimizer_offload: float = knob(0.0, group="memory", flag={
        "slot": "layout", "type": float, "metavar": "F",
        "help": "fraction of optimizer state on the CPU (optimizer_offload_fraction; default 0)"})
    """Share of the optimizer state on the CPU (``optimizer_offload_fraction`` with ``optimizer_cpu_offload``)."""
    offload_overlap: bool = knob(True, group="memory")
    """``overlap_cpu_optimizer_d2h_h2d``: pipeline the offloaded grads' D2H and params' H2D with the CPU Adam steps
    (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py); exported with offload."""
    offload_modules: frozenset[str] = knob(frozenset(), group="memory", api_default=None, flag={
        "slot": "layout", "help": "fine-grained activation offload, e.g. core_attn,attn_proj"})
    """Fine-grained activation offloading (``offload_modules``, Megatron-Core 0.16+)."""
    activation_offload_fraction: float = knob(1.0, group="memory", flag={
        "slot": "layout", "type": float, "metavar": "F",
        "help": "activation_offload_fraction: share of the fine-grained offload groups (--offload-modules) that "
                "are offloaded (Megatron-Core 0.19+; default 1)"})
    """``activation_offload_fraction`` (TransformerConfig, Megatron-Core 0.19+; Megatron-LM
    ``--activation-offload-fraction``): the share of the eligible ``offload_modules`` groups that are moved to the
    host; the rest stay on the GPU. Megatron-Core counts groups, not bytes (megatron/core/pipeline_parallel/
    fine_grained_activation_offload.py keeps the earliest groups offloaded and disables the last
    ``int(groups x (1 - fraction))``); moeplan scales the offloaded bytes linearly. 1.0 (the default) is every
    release's behaviour; another value needs 0.19."""
    cuda_graph_scopes: frozenset[str] = knob(frozenset(), group="memory", api="cuda_graphs", api_default=None, flag={
        "slot": "layout", "help": "CUDA graph scopes, e.g. attn,moe_router,moe_preprocess or full_iteration"})
    """CUDA graph scopes captured (``cuda_graph_scope`` / ``cuda_graph_modules``); empty = graphs off."""
    reserve_gib: float = knob(DEFAULT_RESERVE_GIB, group="memory")  # its flag: moeplan.cli.args.unsaid_arguments
    """GiB per GPU outside the estimate: CUDA context, NCCL buffers and allocator fragmentation."""
    # ---- target
    mcore_version: str = knob(DEFAULT_MCORE_VERSION, group="megatron", flag={
        "slot": "cluster",
        "help": f"Megatron-Core version targeted: field names, allowed values, rules (default {DEFAULT_MCORE_VERSION})"})
    """Megatron-Core release the exports and checks target (field names and allowed values)."""
    te_version: str = knob(DEFAULT_TE_VERSION, group="megatron", flag={
        "slot": "cluster", "default": None, "help": TE_VERSION_HELP})
    """Transformer Engine release the run trains with (moeplan.base.te_release.TE_RELEASES): which attention kernel a
    head shape gets on the GPU, hence its rate, its score memory and whether CP runs; which expert GEMM path exists."""
    te_grouped_tensor: bool = knob(False, group="megatron", flag={
        "slot": "cluster", "action": "store_true", "help": TE_GROUPED_TENSOR_HELP})
    """TE GroupedLinear's grouped-tensor path for the routed experts (``NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM=1``,
    TE 2.17+; no released Megatron-Core has an option for it): one grouped quantize and one cuBLASLt grouped GEMM
    per linear instead of one per local expert, where the release, GPU and precision allow it
    (:attr:`experts_grouped_tensor`, moeplan.base.te_release.grouped_tensor_problem)."""
    # ---- optimizer and data-parallel sharding (moeplan.engine.muon, moeplan.engine.fsdp)
    optimizer: Optimizer = knob("adam", group="optimizer", flag={
        "slot": "cluster",
        "help": "adam (distributed optimizer or Megatron-FSDP) or muon (Megatron-Core 0.16+ dist_muon: one fp32 "
                "momentum per 2-D weight, Newton-Schulz each step; embeddings, output layer and norms stay on "
                "Adam; no CPU offload or bf16 moments); default adam"})
    """adam | muon (Muon on 2-D weights; Adam on embeddings, output layer, norms)."""
    fsdp: FsdpStrategy | None = knob(None, group="optimizer", words=(FSDP_OFF,), flag={
        "slot": "layout", "metavar": "MODE",  # None: off, or a --strategy file's
        "help": "Megatron-FSDP data_parallel_sharding_strategy (use_megatron_fsdp, Megatron-Core 0.14+): "
                "%(choices)s; off = distributed optimizer (default, or the --strategy file's)"})
    """Megatron-FSDP (ddp ``use_megatron_fsdp``) with this ``data_parallel_sharding_strategy``; None = Megatron
    DDP with the distributed optimizer (``use_distributed_optimizer``), which every edge spells 'off' (the API's
    word, :data:`FSDP_OFF`; a search adds 'auto', :func:`fsdp_choices`)."""
    fsdp_double_buffer: bool = knob(False, group="optimizer", flag={
        "slot": "fsdp", "action": "store_true",
        "help": "Megatron-FSDP fsdp_double_buffer: two persistent buffers per unit size (needed for NCCL user "
                "buffers); caps the gather prefetch and the reduce-scatter queue at two layers"})
    """ddp ``fsdp_double_buffer``: two persistent buffers per FSDP unit size."""
    muon_ns_steps: int = knob(5, group="optimizer")
    """``muon_num_ns_steps`` (Megatron-Core default 5)."""
    muon_tp_mode: MuonTpMode = knob("blockwise", group="optimizer")
    """``muon_tp_mode`` (Megatron-Core default blockwise)."""
    muon_layer_wise: bool = knob(True, group="optimizer")
    """Muon with the layer-wise distributed optimizer (optimizer 'dist_muon'): state dealt over DP; False = plain
    'muon', every DP rank keeps and updates the whole state."""
