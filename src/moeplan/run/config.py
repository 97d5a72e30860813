"""A training run as moeplan sees it: model, GPU, layout, batch and every memory/time knob (the knobs themselves,
with their docstrings and what the CLI, the API and the strategy file derive from them: :mod:`moeplan.run.knobs`).

Knob names mirror Megatron-Core's ``TransformerConfig`` / optimizer config; ``moeplan.megatron.export``
maps them to Megatron Bridge overrides and Megatron-LM flags.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace

from moeplan.base.errors import MoeplanError
from moeplan.base.fields import PRECISION_TO_FP8_RECIPE, ep_overlap_mtp_needs_pp, gdn_backward_dw, version_key
from moeplan.base.router_dtype import ROUTER_DTYPES, router_dtype_value
from moeplan.base.te_release import (fused_grouped_mlp, grouped_tensor_problem, grouped_tensor_raises, op_fuser_grouped,
                                     te_version_key)
from moeplan.base.vocab import DEFAULT_GPU
from moeplan.base.vocab import (CP_COMM_TYPES, CUDA_GRAPH_SCOPES, DISPATCHERS, FSDP_STRATEGIES, MUON_TP_MODES,
                                OFFLOAD_MODULES, OPTIMIZERS, PRECISIONS, TE_QUANT_MAP_NAMES)
from moeplan.hardware import GPUSpec, load_gpu
from moeplan.models.spec import GatedDeltaNet, ModelSpec, MoE
from moeplan.run.knobs import Recompute, RunKnobs
from moeplan.run.parallel import Batch, LayoutCheck, Parallel, check_layout


# Megatron-LM arguments.py and Bridge comm_overlap.py (Megatron-Core 0.17+): the one wording, also the file
# linter's (megatron.asserts delay-wgrad-graph-attn-bias)
DELAY_WGRAD_GRAPH_BIAS = "CUDA graph scope attn with delay_wgrad_compute does not support attention bias"

# What keeps EP A2A overlap off (RunConfig.ep_overlap_blockers): each a short cause with its Megatron source.
EP_OVERLAP_BLOCKERS = {
    "release": "Megatron-Core 0.14+ (overlap_moe_expert_parallel_comm first in core_v0.14.0 transformer_config.py)",
    "ep": "EP > 1 (transformer_config.py asserts expert_model_parallel_size > 1 with it)",
    "dispatcher": ("the alltoall or flex token dispatcher (transformer_config.py asserts moe_token_dispatcher_type "
                   "alltoall or flex with it; the allgather dispatcher has no split dispatch / combine to overlap)"),
    "microbatches": ("several micro-batches per DP rank (the merged 1F1B schedule, pipeline_parallel/combined_1f1b.py, "
                     "overlaps one micro-batch's forward with another's backward)"),
    "pp": ("PP 1 or VPP > 1 (transformer_config.py asserts virtual_pipeline_model_parallel_size with PP > 1: the "
           "interleaved schedule)"),
    "full_recompute": "no full recompute (transformer_config.py asserts recompute_granularity != full with it)",
    "moe_recompute": ("no moe in recompute_modules (asserted from core_r0.17.0, Megatron-LM #3917; accepted but "
                      "unsupported before)"),
    "mtp_layers": ("at most one MTP layer (transformer_config.py asserts mtp_num_layers 1 with it, in every "
                   "release)"),
    "mtp_pp": ("PP > 1 with an MTP layer on Megatron-Core 0.16/0.17 (transformer_config.py core_v0.16/0.17 asserts "
               "it; lifted in 0.18)"),
    "gdn": ("Megatron-Core 0.17+ with Gated DeltaNet layers (GatedDeltaNet.backward_dw, Megatron-LM #2997, which "
            "the overlap's callables read for every layer)"),
    "hybrid": ("a GPT model: the merged schedule is GPTModel.build_schedule_plan, which a hybrid (Mamba) model's "
               "HybridModel / MambaModel does not have through core_v0.19"),
}
# The blockers Megatron-Core's overlap_moe_expert_parallel_comm assertion tests as moeplan.megatron.asserts (rule
# ep-a2a-overlap) reads a file; the others (micro-batches, moe recompute: its own rule, Gated DeltaNet, the
# release) it does not (asserts.McoreAssert.shares_knob of ep-a2a-overlap reads which).
EP_OVERLAP_ASSERTED = frozenset(EP_OVERLAP_BLOCKERS[k]
                                for k in ("ep", "dispatcher", "pp", "full_recompute", "mtp_layers", "mtp_pp"))


@dataclass(frozen=True)
class RunConfig(RunKnobs):
    """One training run: the model, the cluster's GPU, and the strategy: the layout and batch here, every other knob
    in :class:`~moeplan.run.knobs.RunKnobs` (the knob table, grouped by concern as Megatron-Core groups its
    ``ModelParallelConfig`` / ``TransformerConfig`` fields; keyword-only). :mod:`moeplan.run.strategy` saves the
    strategy groups to a file a user can edit and feed back; ``__post_init__`` checks each value."""

    # ---- the model; layout and batch (ModelParallelConfig sizes; Megatron-LM --global-batch-size,
    # --micro-batch-size, --seq-length)
    model: ModelSpec
    """The architecture (a catalog entry or a Hugging Face config.json)."""
    parallel: Parallel
    """TP, PP, VPP, CP, EP, ETP over the GPU count, and the pipeline layout (ModelParallelConfig)."""
    batch: Batch
    """Sequence length, global and micro-batch size in sequences."""
    # ---- GPU
    gpu: GPUSpec = DEFAULT_GPU  # type: ignore[assignment]  # a catalog name is looked up in __post_init__
    """The GPU as deployed (HBM, peak rates, NVLink domain): a :class:`GPUSpec`, or a catalog name."""

    def __post_init__(self) -> None:
        if isinstance(self.gpu, str):
            object.__setattr__(self, "gpu", load_gpu(self.gpu))
        object.__setattr__(self, "te_version", te_version_key(self.te_version))
        if self.fsdp is not None and self.fsdp not in FSDP_STRATEGIES:
            raise MoeplanError(f"Megatron-FSDP sharding strategy '{self.fsdp}' unknown; choose one of "
                               f"{', '.join(FSDP_STRATEGIES)}")
        if self.optimizer not in OPTIMIZERS:
            raise MoeplanError(f"optimizer '{self.optimizer}' unknown; choose one of {', '.join(OPTIMIZERS)}")
        if self.optimizer == "muon" and self.fsdp is not None:
            # megatron/training/arguments.py (core_v0.16.0 .. core_v0.19.0):
            # "Muon optimizer does not support Megatron-FSDP for now."
            raise MoeplanError("Muon does not run with Megatron-FSDP (Megatron-LM arguments.py asserts "
                               "not use_megatron_fsdp for Muon); use the distributed optimizer or Adam")
        if self.optimizer == "muon" and (self.optimizer_offload > 0 or self.bf16_moments):
            # optimizer_config.py (core_v0.16.1) __post_init__: use_precision_aware_optimizer "only supported
            # with adam" and "with distributed optimizer"; Megatron-LM requires it for optimizer_cpu_offload
            raise MoeplanError("Muon runs without the precision-aware optimizer (Megatron-Core OptimizerConfig: "
                               "adam and the distributed optimizer only), so neither optimizer CPU offload nor bf16 "
                               "moments; its fp32 master weights and momentum stay on the GPU")
        if self.muon_tp_mode not in MUON_TP_MODES:
            raise MoeplanError(f"muon_tp_mode '{self.muon_tp_mode}' is not modelled; choose one of "
                               f"{', '.join(MUON_TP_MODES)}")
        if not (isinstance(self.muon_ns_steps, int) and self.muon_ns_steps >= 1):
            raise MoeplanError(f"muon_num_ns_steps must be an integer >= 1, got {self.muon_ns_steps}")
        if self.precision not in PRECISIONS:
            raise MoeplanError(f"precision '{self.precision}' unknown; choose one of {', '.join(PRECISIONS)}")
        if self.fp8_attention and self.precision not in PRECISION_TO_FP8_RECIPE:  # TE's FP8 attention: under an FP8 recipe only
            raise MoeplanError(f"FP8 attention (fp8_dot_product_attention) needs an FP8 precision; got {self.precision}")
        if self.te_quant_map not in TE_QUANT_MAP_NAMES:
            raise MoeplanError(f"te_quant_map '{self.te_quant_map}' unknown; choose one of {', '.join(TE_QUANT_MAP_NAMES)}")
        if self.te_quant_map != "none" and self.precision != "nvfp4":
            raise MoeplanError(f"te_quant_map '{self.te_quant_map}' maps modules of an NVFP4 run (Megatron Bridge "
                               f"uses it with NVFP4 only), not of a {self.precision} run")
        for name in ("bf16_start_layers", "bf16_end_layers"):
            n = getattr(self, name)
            if n is not None and not (isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= len(self.model.layers)):
                raise MoeplanError(f"{name} must be an integer from 1 to the model's {len(self.model.layers)} layers, "
                                   f"got {n!r}")
        if self.dispatcher not in DISPATCHERS:
            raise MoeplanError(f"dispatcher '{self.dispatcher}' unknown; choose one of {', '.join(DISPATCHERS)}")
        if self.cp_comm_type not in CP_COMM_TYPES:
            raise MoeplanError(f"cp_comm_type '{self.cp_comm_type}' unknown; choose one of {', '.join(CP_COMM_TYPES)}")
        if not 0.0 <= self.optimizer_offload <= 1.0:  # also rejects NaN
            raise MoeplanError(f"optimizer offload fraction must be in [0, 1], got {self.optimizer_offload}")
        if self.moe_router_dtype not in ROUTER_DTYPES:
            raise MoeplanError(f"moe_router_dtype '{self.moe_router_dtype}' unknown; choose from {', '.join(ROUTER_DTYPES)}")
        if not 0.0 <= self.activation_offload_fraction <= 1.0:  # also rejects NaN
            raise MoeplanError(f"activation offload fraction must be in [0, 1], got {self.activation_offload_fraction}")
        if not (math.isfinite(self.moe_imbalance) and self.moe_imbalance >= 1.0):
            raise MoeplanError(f"MoE imbalance factor must be a finite number >= 1.0, got {self.moe_imbalance}")
        if self.capacity_factor is not None and not (math.isfinite(self.capacity_factor) and self.capacity_factor > 0):
            raise MoeplanError(f"capacity factor must be a finite number > 0, got {self.capacity_factor}")
        if self.rank_capacity_factor is not None and not (math.isfinite(self.rank_capacity_factor)
                                                          and self.rank_capacity_factor >= 1.0):
            raise MoeplanError(f"rank capacity factor must be a finite number >= 1.0, got {self.rank_capacity_factor}")
        if not (math.isfinite(self.reserve_gib) and self.reserve_gib >= 0):
            raise MoeplanError(f"reserve must be a finite number of GiB >= 0, got {self.reserve_gib}")
        hbm_gib = self.gpu.hbm_bytes / 2**30
        if self.reserve_gib >= hbm_gib:  # every layout would miss by it, and the answer would blame the layouts
            raise MoeplanError(f"reserve {self.reserve_gib:g} GiB per GPU is not less than the {self.gpu.name}'s "
                               f"{hbm_gib:.1f} GiB: nothing is left for the run")
        bad = [m for m in self.offload_modules if m not in OFFLOAD_MODULES]
        if bad:
            raise MoeplanError(f"offload module(s) {', '.join(bad)} unknown; Megatron-Core labels: {', '.join(OFFLOAD_MODULES)}")
        bad = [s for s in self.cuda_graph_scopes if s not in CUDA_GRAPH_SCOPES]
        if bad:
            raise MoeplanError(f"CUDA graph scope(s) {', '.join(bad)} unknown; choose from {', '.join(CUDA_GRAPH_SCOPES)}")

    @property
    def mcore_router_dtype(self) -> str | None:
        """Megatron-Core ``moe_router_dtype`` of this run (the ``moe_router_dtype`` knob with 'auto' resolved by the model's
        Megatron Bridge provider, moeplan.base.router_dtype)."""
        return router_dtype_value(self.moe_router_dtype, self.model.model_type)

    @property
    def precision_aware(self) -> bool:
        """Whether the precision-aware optimizer runs (see ``precision_aware_optimizer``)."""
        if self.precision_aware_optimizer is not None:
            return self.precision_aware_optimizer
        return self.optimizer_offload > 0 or self.bf16_moments

    @property
    def experts_op_fused(self) -> bool:
        """Whether the routed experts run as Transformer Engine's op-fuser grouped MLP (Megatron-Core
        megatron/core/transformer/moe/experts.py, TEGroupedMLP._is_fused_impl_supported / _make_fused_ops:
        GroupedLinear with its bias, ScaledSwiGLU or ScaledClampedQGeGLU, GroupedLinear with ``scale_bias``, each
        one TE op) rather than the eager bias and activation glue between two TE GroupedLinear modules. It needs
        ``use_transformer_engine_op_fuser``, which moeplan exports only with the sync-free MoE bundle
        (``rank_capacity_factor``, moeplan.megatron.export: Bridge's full-iteration recipes set both), and
        expert TP 1 ("Tensor parallelism is not supported")."""
        return self.rank_capacity_factor is not None and self.parallel.etp == 1

    def experts_fused_mlp(self, moe: MoE) -> bool:
        """Whether ``moe``'s routed experts run as TE's CuTe DSL fused grouped MLP (moeplan.base.te_release.
        FusedGroupedMLP): op-fused experts (:attr:`experts_op_fused`: the TE op fuser, ETP 1) whose TE release, GPU,
        precision, activation and widths its kernels take (fc1: expert width -> 2F, fc2: F -> expert width; the expert
        width is the latent one under LatentMoE, as moeplan.engine.latent_moe.expert_width). A gated MoE without a
        clamp is SwiGLU in every model moeplan loads (Megatron-Core ``swiglu``: ScaledSwiGLU in
        TEGroupedMLP._make_fused_ops). moeplan exports the variable that turns it on with such a run
        (:attr:`fused_mlp_env`), as the paged-stash recipes set it (Megatron-LM examples/moe_recipes, 9c5258f)."""
        if not self.experts_op_fused or not moe.gated or moe.clamped_glu or moe.expert_bias:
            return False
        f = moe.expert_ffn_hidden
        width = moe.latent_size if moe.latent_size is not None else self.model.hidden
        return fused_grouped_mlp(self.te_version, self.gpu.sm_arch, self.precision, "swiglu", (width, 2 * f, f))

    @property
    def fused_mlp_env(self) -> bool:
        """Whether the job needs FUSED_GROUPED_MLP_ENV=1: some MoE layer's experts are charged as the fused grouped MLP
        (:meth:`experts_fused_mlp`)."""
        return any(isinstance(lay.mlp, MoE) and self.experts_fused_mlp(lay.mlp) for lay in self.model.layers)

    @property
    def experts_grouped_tensor(self) -> bool:
        """Whether TE runs the routed experts' GroupedLinear on a grouped-tensor path (one quantize and GEMM per linear
        for all local experts). Under the op fuser (:attr:`experts_op_fused`) the op's GroupedLinear does it by default
        where moeplan.base.te_release.op_fuser_grouped says so (TE 2.16+); otherwise ``te_grouped_tensor`` must be set and
        moeplan.base.te_release.grouped_tensor_problem find nothing against this TE release, GPU and precision."""
        if self.experts_op_fused:
            return op_fuser_grouped(self.te_version, self.gpu.sm_arch, self.precision)
        return self.te_grouped_tensor and grouped_tensor_problem(self.te_version, self.gpu.sm_arch, self.precision) is None

    @property
    def grouped_tensor_raises(self) -> str | None:
        """Why TE raises at run time for this run with GROUPED_TENSOR_ENV=1 (``te_grouped_tensor``), or None where it
        runs, falls back or is not read. Only the GroupedLinear module TEGroupedMLP builds reads the variable
        (moeplan.base.te_release.grouped_tensor_raises); op-fused experts (:attr:`experts_op_fused`) run the op fuser's
        GroupedLinear instead (transformer_engine/pytorch/ops/basic/grouped_linear.py), which never reads it, so a
        run with them trains with the variable set (and exports it) as it would without."""
        if not self.te_grouped_tensor or self.experts_op_fused:
            return None
        return grouped_tensor_raises(self.te_version, self.gpu.sm_arch, self.precision)

    @property
    def ep_overlap_blockers(self) -> tuple[str, ...]:
        """Why Megatron-Core's EP A2A overlap (``overlap_moe_expert_parallel_comm``) cannot run here, each cause
        with its Megatron source (:data:`EP_OVERLAP_BLOCKERS`); empty where it can. The one owner of the rule:
        :attr:`ep_overlap_allowed`, knobs.knob_problem and the ep-a2a-overlap check (moeplan.megatron.asserts) read it.

        The merged schedule overlaps one micro-batch's forward with another's backward: it needs EP > 1, several
        micro-batches, and PP = 1 or an interleaved schedule (transformer_config.py checks for
        overlap_moe_expert_parallel_comm), no full recompute and no ``moe`` in recompute_modules, in every release:
        the merged schedule runs the MoE layer as dispatch / experts / combine sub-modules, which a checkpointed MoE
        forward does not have; Megatron-LM #3917 ("Missing Assertion for moe layer recompute in A2A Overlap")
        asserts it from core_r0.17.0, and before that the pair was accepted but unsupported. With MTP, at most one
        MTP layer in every release (transformer_config.py: "MTP layernum only supports 1"), and in core_v0.16/0.17
        also PP > 1 (lifted from 0.18). Gated DeltaNet layers need Megatron-Core 0.17+ (its
        GatedDeltaNet.backward_dw, which the overlap's callables read for every layer: megatron.fields.gdn_backward_dw)."""
        return tuple(self._ep_overlap_blockers())

    @property
    def ep_overlap_allowed(self) -> bool:
        """Whether EP A2A overlap can run here: no :attr:`ep_overlap_blockers` (the first found is enough: the
        planner asks for every candidate)."""
        return next(self._ep_overlap_blockers(), None) is None

    def _ep_overlap_blockers(self) -> Iterator[str]:
        par = self.parallel
        if version_key(self.mcore_version) < (0, 14):
            yield EP_OVERLAP_BLOCKERS["release"]
        if par.ep <= 1:
            yield EP_OVERLAP_BLOCKERS["ep"]
        if self.dispatcher == "allgather":
            yield EP_OVERLAP_BLOCKERS["dispatcher"]
        if self.batch.microbatches(par.dp) <= 1:
            yield EP_OVERLAP_BLOCKERS["microbatches"]
        if par.pp > 1 and par.vpp <= 1:
            yield EP_OVERLAP_BLOCKERS["pp"]
        if self.recompute.granularity == "full":
            yield EP_OVERLAP_BLOCKERS["full_recompute"]
        if "moe" in self.recompute.modules:
            yield EP_OVERLAP_BLOCKERS["moe_recompute"]
        mtp = self.model.mtp_layers
        if mtp > 1:
            yield EP_OVERLAP_BLOCKERS["mtp_layers"]
        elif mtp == 1 and par.pp == 1 and ep_overlap_mtp_needs_pp(self.mcore_version):
            yield EP_OVERLAP_BLOCKERS["mtp_pp"]
        if not gdn_backward_dw(self.mcore_version) and any(
                isinstance(m, GatedDeltaNet) for m in self.model.distinct_mixers):
            yield EP_OVERLAP_BLOCKERS["gdn"]
        if self.model.hybrid_pattern:
            yield EP_OVERLAP_BLOCKERS["hybrid"]

    @property
    def delay_wgrad_blocked(self) -> str | None:
        """Why Megatron rejects ``delay_wgrad_compute`` for this run (None when it accepts it): from core_v0.17
        (Megatron-LM arguments.py with overlap_grad_reduce; Bridge comm_overlap.py from v0.4.0, which pins 0.17)
        a TE-scoped CUDA graph of attention with delayed weight gradients "does not support attention bias"."""
        if "attn" in self.cuda_graph_scopes and version_key(self.mcore_version) >= (0, 17) and self.model.attention_bias:
            return (f"{DELAY_WGRAD_GRAPH_BIAS} (Megatron-LM arguments.py and Bridge comm_overlap.py, "
                    "Megatron-Core 0.17+)")
        return None

    @property
    def delay_wgrad_on(self) -> bool:
        """Whether the weight-gradient GEMMs run delayed (``delay_wgrad``): only with EP overlap; None follows
        Bridge (on with overlap) unless Megatron rejects it for this run (:attr:`delay_wgrad_blocked`)."""
        if not self.ep_overlap or self.delay_wgrad is False:
            return False
        return self.delay_wgrad is True or self.delay_wgrad_blocked is None

    @property
    def rows_factor(self) -> float:
        """Routed rows per token on the busiest expert rank relative to top-k: the capacity factor when
        token dropping pads/caps each expert (moe_expert_capacity_factor), else the imbalance factor,
        capped where the busiest rank gets every token at each of its local experts (a token routes to
        top-k distinct experts: at most min(top-k, local experts) copies per rank, against top-k / EP on
        the mean rank), so an imbalance beyond what EP allows cannot cost more rows than exist."""
        if self.capacity_factor is not None:
            return self.capacity_factor
        moe = self.model.first_moe
        if moe is None:
            return self.moe_imbalance
        ep = self.parallel.ep
        return min(self.moe_imbalance, ep * min(moe.top_k, moe.num_experts / ep) / moe.top_k)

    @property
    def fp8(self) -> bool:
        return self.precision != "bf16"

    def with_(self, **changes: object) -> RunConfig:
        return replace(self, **changes)  # type: ignore[arg-type]

    def layout_checks(self, parallel: Parallel | None = None) -> list[LayoutCheck]:
        """Every layout rule the run breaks (empty = valid): :func:`moeplan.run.parallel.check_layout` with the
        run's model, batch, Megatron-Core release, GPU and Transformer Engine release; ``parallel`` checks
        another layout under the same run (what a finding proposes)."""
        return check_layout(self.model, self.parallel if parallel is None else parallel, self.batch,
                            self.mcore_version, self.gpu, self.te_version)

    def evolve(self, **changes: object) -> RunConfig:
        """:meth:`with_` without re-validation, for the planner's inner loop (values it already checked)."""
        new = object.__new__(type(self))
        fields_ = self.__dict__.copy()  # one sized copy: ~half the instructions of filling an empty dict
        fields_.update(changes)
        object.__setattr__(new, "__dict__", fields_)
        return new


def other_fields(*excluded: str) -> Callable[[RunConfig], tuple[object, ...]]:
    """A function giving a run's field values in field order less those named ``excluded``: every field
    present or added later. Caches keyed by "every other field" (moeplan.engine.memory.LayoutMemory.shared_keys,
    moeplan.plan.bounds.ThroughputBound) build their key with it: one item lookup in C per run, the same tuple
    as copying the run's fields and deleting the excluded ones."""
    names = [f.name for f in fields(RunConfig)]
    unknown = [n for n in excluded if n not in names]
    if unknown:
        raise ValueError(f"not RunConfig fields: {', '.join(unknown)}")
    get = operator.itemgetter(*[n for n in names if n not in excluded])
    return lambda cfg: get(cfg.__dict__)  # type: ignore[no-any-return]
