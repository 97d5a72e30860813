"""A training run as moeplan sees it: model, GPU, layout, batch and every memory/time knob.

Knob names mirror Megatron-Core's ``TransformerConfig`` / optimizer config; ``moeplan.megatron``
maps them to Megatron Bridge overrides and Megatron-LM flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from moeplan.errors import MoeplanError
from moeplan.models.spec import ModelSpec
from moeplan.parallel import Batch, Parallel

# Megatron-Core ``recompute_modules`` labels (transformer_config.py, core_r0.14-r0.18; r0.19 adds
# gdn_norm_out). The version table in moeplan.megatron says which a release accepts.
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts", "gdn_norm_out")
# The guidance's shorthand and its Megatron-Core label.
RECOMPUTE_ALIASES = {"up_proj": "mla_up_proj", "norm": "layernorm", "act": "moe_act", "attn": "core_attn"}
# Megatron-Core ``offload_modules`` (fine-grained activation offloading, core_r0.16+).
OFFLOAD_MODULES = ("core_attn", "attn_proj", "expert_fc1", "moe_act", "attn_norm", "mlp_norm", "qkv_linear")

Precision = Literal["bf16", "fp8", "fp8-cs", "fp8-ds", "mxfp8"]
PRECISIONS: tuple[str, ...] = ("bf16", "fp8", "fp8-cs", "fp8-ds", "mxfp8")
# fp8 = blockwise scaling (DeepSeek-V3 recipe), fp8-cs = current scaling, fp8-ds = delayed scaling.

Dispatcher = Literal["alltoall", "allgather", "deepep", "hybridep"]
DISPATCHERS: tuple[str, ...] = ("alltoall", "allgather", "deepep", "hybridep")

# CUDA graph scopes (Megatron-Core ``cuda_graph_scope``; partial graphs that work with dropless MoE).
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration")

# Megatron-FSDP ``data_parallel_sharding_strategy`` values (distributed_data_parallel_config.py and
# megatron/training/arguments.py --data-parallel-sharding-strategy, core_v0.14.0 .. core_v0.19.0), in
# order of what they shard: optimizer state, + gradients, + parameters.
FSDP_STRATEGIES = ("no_shard", "optim", "optim_grads", "optim_grads_params")
# Optimizers moeplan models: Adam (AdamW) and Muon (megatron/core/optimizer/muon.py, core_v0.16.0+).
OPTIMIZERS = ("adam", "muon")
# Muon tensor-parallel modes moeplan costs (OptimizerConfig.muon_tp_mode; "distributed" is not modelled).
MUON_TP_MODES = ("blockwise", "duplicated")


@dataclass(frozen=True)
class Recompute:
    """Activation recompute: none, selective (Megatron ``recompute_modules``) or full."""

    granularity: Literal["none", "selective", "full"] = "none"
    modules: frozenset[str] = frozenset()
    method: Literal["uniform", "block"] = "uniform"
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
            if method not in ("uniform", "block"):
                raise MoeplanError(f"recompute '{text}': method must be uniform or block")
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


@dataclass(frozen=True)
class RunConfig:
    model: ModelSpec
    parallel: Parallel
    batch: Batch
    gpu: str = "h100"
    recompute: Recompute = field(default_factory=Recompute)
    precision: str = "bf16"
    dispatcher: str = "alltoall"
    cuda_graph_scopes: frozenset[str] = frozenset()  # empty = CUDA graphs off
    optimizer_offload: float = 0.0  # Megatron optimizer_offload_fraction with optimizer_cpu_offload
    offload_modules: frozenset[str] = frozenset()  # fine-grained activation offloading
    moe_imbalance: float = 1.0  # tokens on the busiest expert rank / mean; 1.0 = force-balanced routing
    capacity_factor: float | None = None  # moe_expert_capacity_factor (token dropping) when set
    # moe_expert_rank_capacity_factor (Megatron-Core >= 0.18, HybridEP): fixed per-rank token buffers that
    # make dropless MoE sync-free, so a full-iteration CUDA graph can capture it (with moe_paged_stash)
    rank_capacity_factor: float | None = None
    grad_fp32: bool = True  # main grads in fp32 (Megatron-LM forces fp32 accumulation with --bf16)
    bf16_moments: bool = False  # precision-aware optimizer with bf16 exp_avg / exp_avg_sq
    ep_overlap: bool = False  # overlap_moe_expert_parallel_comm: hide dispatch/combine behind another micro-batch
    tp_comm_overlap: bool = True  # tp_comm_overlap (TE userbuffers): TP collectives overlap GEMMs; exported on
    dp_overlap: bool = True  # ddp overlap_grad_reduce + overlap_param_gather; exported on
    cp_comm_type: str = "p2p"  # p2p (ring), a2a, allgather, a2a+p2p
    reserve_gib: float = 2.0  # CUDA context, NCCL buffers and allocator fragmentation outside the estimate
    mcore_version: str = "0.16"
    # Megatron-FSDP (ddp use_megatron_fsdp) with this data_parallel_sharding_strategy; None = Megatron
    # DDP with the distributed optimizer (use_distributed_optimizer)
    fsdp: str | None = None
    fsdp_double_buffer: bool = False  # ddp fsdp_double_buffer: two persistent buffers per FSDP unit size
    optimizer: str = "adam"  # adam | muon (Muon on 2-D weights, Adam on embeddings, output layer, norms)
    muon_ns_steps: int = 5  # OptimizerConfig.muon_num_ns_steps (Megatron-Core default 5)
    muon_tp_mode: str = "blockwise"  # OptimizerConfig.muon_tp_mode (Megatron-Core default blockwise)
    # Muon with the layer-wise distributed optimizer (optimizer 'dist_muon'): state dealt over DP; False =
    # plain 'muon', every DP rank keeps and updates the whole state
    muon_layer_wise: bool = True

    def __post_init__(self) -> None:
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
        if self.muon_tp_mode not in MUON_TP_MODES:
            raise MoeplanError(f"muon_tp_mode '{self.muon_tp_mode}' is not modelled; choose one of "
                               f"{', '.join(MUON_TP_MODES)}")
        if not (isinstance(self.muon_ns_steps, int) and self.muon_ns_steps >= 1):
            raise MoeplanError(f"muon_num_ns_steps must be an integer >= 1, got {self.muon_ns_steps}")
        if self.precision not in PRECISIONS:
            raise MoeplanError(f"precision '{self.precision}' unknown; choose one of {', '.join(PRECISIONS)}")
        if self.dispatcher not in DISPATCHERS:
            raise MoeplanError(f"dispatcher '{self.dispatcher}' unknown; choose one of {', '.join(DISPATCHERS)}")
        if not 0.0 <= self.optimizer_offload <= 1.0:  # also rejects NaN
            raise MoeplanError(f"optimizer offload fraction must be in [0, 1], got {self.optimizer_offload}")
        if not (math.isfinite(self.moe_imbalance) and self.moe_imbalance >= 1.0):
            raise MoeplanError(f"MoE imbalance factor must be a finite number >= 1.0, got {self.moe_imbalance}")
        if self.capacity_factor is not None and not (math.isfinite(self.capacity_factor) and self.capacity_factor > 0):
            raise MoeplanError(f"capacity factor must be a finite number > 0, got {self.capacity_factor}")
        if self.rank_capacity_factor is not None and not (math.isfinite(self.rank_capacity_factor)
                                                          and self.rank_capacity_factor >= 1.0):
            raise MoeplanError(f"rank capacity factor must be a finite number >= 1.0, got {self.rank_capacity_factor}")
        if not (math.isfinite(self.reserve_gib) and self.reserve_gib >= 0):
            raise MoeplanError(f"reserve must be a finite number of GiB >= 0, got {self.reserve_gib}")
        bad = [m for m in self.offload_modules if m not in OFFLOAD_MODULES]
        if bad:
            raise MoeplanError(f"offload module(s) {', '.join(bad)} unknown; Megatron-Core labels: {', '.join(OFFLOAD_MODULES)}")
        bad = [s for s in self.cuda_graph_scopes if s not in CUDA_GRAPH_SCOPES]
        if bad:
            raise MoeplanError(f"CUDA graph scope(s) {', '.join(bad)} unknown; choose from {', '.join(CUDA_GRAPH_SCOPES)}")

    @property
    def ep_overlap_allowed(self) -> bool:
        """Megatron-Core's EP A2A overlap merges the forward of one micro-batch with the backward of
        another: it needs EP > 1, several micro-batches, and PP = 1 or an interleaved schedule
        (transformer_config.py checks for overlap_moe_expert_parallel_comm), and no full recompute; with
        MTP in core_v0.16/0.17 also a single MTP layer and PP > 1."""
        from moeplan.megatron import fields_for, version_key

        par = self.parallel
        if self.model.mtp_layers and fields_for(self.mcore_version).ep_overlap_mtp_needs_pp:
            # core_v0.16/0.17 transformer_config.py: with MTP, one MTP layer and PP > 1
            if self.model.mtp_layers > 1 or par.pp == 1:
                return False
        return (par.ep > 1 and self.batch.microbatches(par.dp) > 1 and (par.pp == 1 or par.vpp > 1)
                and self.recompute.granularity != "full" and version_key(self.mcore_version) >= (0, 14))

    @property
    def rows_factor(self) -> float:
        """Routed rows per token on the busiest expert rank relative to top-k: the capacity factor when
        token dropping pads/caps each expert (moe_expert_capacity_factor), else the imbalance factor."""
        return self.capacity_factor if self.capacity_factor is not None else self.moe_imbalance

    @property
    def fp8(self) -> bool:
        return self.precision != "bf16"

    def with_(self, **changes: object) -> RunConfig:
        return replace(self, **changes)  # type: ignore[arg-type]

    def evolve(self, **changes: object) -> RunConfig:
        """:meth:`with_` without re-validation, for the planner's inner loop (values it already checked)."""
        new = object.__new__(RunConfig)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new
