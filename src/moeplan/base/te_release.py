"""What changes between the Transformer Engine releases moeplan knows: the ONE table of TE releases, keyed by
major.minor (``TE_RELEASES``), and the predicates that read it. Two facts per release so far: whether cuDNN fused
attention trains d_qk = d_v = 256 on sm10x (read by moeplan.run.attention_backend) and which grouped-tensor GEMM
path, if any, TE's GroupedLinear has for the routed experts (read by moeplan.engine.timing's per-expert launches)."""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.base.errors import MoeplanError

TE_COMMIT = "71bbefb"  # the Transformer Engine the recipes ran (Bridge PR #3168's container, 2026-03-24)
DEFAULT_TE_VERSION = "2.14"  # 71bbefb's line (build_tools/VERSION.txt 2.14.0, in tag v2.14): every calibrated number

# How a run selects TE GroupedLinear's grouped-tensor path with a released Megatron-Core (core_v0.13 .. core_v0.19
# pass no option for it): the environment variable GroupedLinear reads (default "0").
GROUPED_TENSOR_ENV = "NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM"
# Fine-grained activation offloading on TE >= 2.10 needs TE's v1 CPU-offload path, which the job selects by this
# variable; Megatron Bridge's ConfigContainer.validate() refuses the run without it ("NVTE_CPU_OFFLOAD_V1
# environment variable should be set to 1 to avoid offloading weights": training/config.py
# _validate_fine_grained_activation_offloading, v0.3.0 .. v0.6.0).
CPU_OFFLOAD_V1_ENV = "NVTE_CPU_OFFLOAD_V1"
CPU_OFFLOAD_V1_SINCE = (2, 10)


@dataclass(frozen=True)
class GroupedTensorPath:
    """TE ``GroupedLinear``'s grouped-tensor path in one release (transformer_engine/pytorch/module/
    grouped_linear.py, ``_GroupedLinear._is_grouped_tensor_path_supported`` in v2.17 / v2.18,
    ``is_module_grouped_tensor_path_supported`` on release_v2.19): the input (forward) and output gradient
    (backward) are quantized for all experts at once (``tex.group_quantize`` / ``bgrad_group_quantize``) and each
    GEMM (fprop, dgrad, wgrad) is ONE ``general_grouped_gemm_for_grouped_tensor`` call, nvte_grouped_gemm: a setup
    kernel writing the per-expert pointers and one cuBLASLt grouped matmul (common/gemm/cublaslt_grouped_gemm.cu),
    whatever the local expert count. The legacy path it replaces (every release) issues one cuBLASLt GEMM and one
    quantize per expert (moeplan.engine.timing.EXPERT_LAUNCHES). Weight quantization stays a per-expert loop on both
    paths (``_prepare_weights_for_grouped_tensor_gemm``), which moeplan counts on neither.

    ``precisions_hopper`` / ``precisions_blackwell``: moeplan precisions it takes on sm90 and on sm100 .. sm110
    (compute capability (9, 0) .. (11, 0); sm120 and older parts take the legacy path). It needs cuBLASLt 13.3+
    (13.4+ on Hopper, 13.5+ for FP8 current scaling on Hopper, 13.6+ for FP8 block scaling on Hopper from 2.19),
    i.e. a CUDA 13 container; moeplan assumes the container ships one. ``host_splits``: whether it runs with the
    per-expert token counts as a host list, what Megatron-Core's TEGroupedMLP passes in every release
    (megatron/core/transformer/moe/experts.py core_v0.19.0: ``tokens_per_expert.tolist()``).
    ``blackwell_block_raises``: FP8 block scaling on sm10x raises instead of falling back. ``row_align``: rows
    the grouped quantize needs in multiples of, per precision (MXFP8: the whole grouped tensor's rows, NVTE_CHECK
    "First logical dimension of a grouped tensor must be divisible by 128" in common/cast/mxfp8/
    group_quantize_mxfp8.cuh; FP8 block scaling: each expert's rows, a device error in common/cast/fp8_blockwise/
    group_quantize_fp8_blockwise.cuh), against the padding the experts get (EXPERT_PAD_ROWS)."""

    precisions_hopper: frozenset[str]
    precisions_blackwell: frozenset[str]
    host_splits: bool
    blackwell_block_raises: bool
    row_align: tuple[tuple[str, int], ...]
    pr: str  # the TE pull request(s) that brought this row's behaviour, for messages


# v2.17 (2026-07-06; PR #3038 "Make modules.GroupedLinear graph-safe", 2026-05-29): opt-in through
# GROUPED_TENSOR_ENV=1; Hopper BF16/FP16 only, Blackwell BF16/FP16/MXFP8/NVFP4 with RHT; "FP8 delayed / current
# scaling, and FP8 block scaling are not supported because the corresponding grouped quantization kernels are
# missing" (they fall back to the legacy path). Host m_splits are copied to the GPU (``m_splits.to(device)``).
_GROUPED_217 = GroupedTensorPath(frozenset({"bf16"}), frozenset({"bf16", "mxfp8"}), True, False, (("mxfp8", 128),),
                                 "#3038")
# v2.18 (2026-08-04): + FP8 per-tensor current scaling (PR #3143, Hopper needs cuBLASLt 13.5+) and, on Hopper only,
# FP8 block scaling (PR #3171; on Blackwell that recipe raises RuntimeError with the env var set). Still opt-in.
_GROUPED_218 = GroupedTensorPath(frozenset({"bf16", "fp8-cs", "fp8"}), frozenset({"bf16", "fp8-cs", "mxfp8"}), True, True,
                                 (("mxfp8", 128), ("fp8", 128)), "#3038, #3143, #3171")
# release_v2.19 (VERSION 2.19.0 since 2026-08-17; PR #3224, 2026-08-12): GroupedLinear(use_grouped_tensor=None)
# falls back to the env var, now deprecated (FutureWarning), default still off; the path now REQUIRES CUDA m_splits
# ("The native grouped_tensor path requires CUDA m_splits": ValueError), which no released Megatron-Core passes.
# Megatron-LM main (0.20.0 dev, PR #6000, 2026-08-14) adds TransformerConfig.moe_use_grouped_tensor (default False;
# on with use_transformer_engine_op_fuser) that passes the counts on the GPU; it is in no core_v* tag.
_GROUPED_219 = GroupedTensorPath(_GROUPED_218.precisions_hopper, _GROUPED_218.precisions_blackwell, False, True,
                                 _GROUPED_218.row_align, "#3038, #3143, #3171, #3224")


# Rows each local expert is padded to under a quantized recipe, per precision (else 16): Megatron-Core's TEGroupedMLP
# (experts.py core_v0.16 .. core_v0.19.0) builds TE's Fp8Padding with align_size None (256 only on the op-fuser path),
# so TE's default applies, transformer_engine/pytorch/quantization.py get_align_size_for_quantization (v2.14 ..
# v2.18): MXFP8 32, NVFP4 128, other FP8 recipes 16. BF16 experts are not padded.
EXPERT_PAD_ROWS: dict[str, int] = {"mxfp8": 32}
EXPERT_PAD_ROWS_FP8 = 16


def expert_pad_rows(precision: str) -> int:
    """Rows Megatron-Core's TEGroupedMLP pads each local expert to under ``precision`` (1: no padding, BF16)."""
    return 1 if precision == "bf16" else EXPERT_PAD_ROWS.get(precision, EXPERT_PAD_ROWS_FP8)


@dataclass(frozen=True)
class OpFuserGrouped:
    """The op fuser's GroupedLinear (transformer_engine/pytorch/ops/basic/grouped_linear.py, what Megatron-Core's
    TEGroupedMLP runs under ``use_transformer_engine_op_fuser``, core_v0.18+, with the token counts on the GPU and
    experts padded to 256 rows): its graph-safe grouped-tensor flow (``_is_graph_safe_path_supported``; release_v2.19
    ``is_op_fuser_grouped_tensor_path_supported``) is the DEFAULT, no option, where it takes the precision; the same
    single grouped quantize and grouped GEMM per linear as GroupedTensorPath. Precisions on sm90 / sm100 .. sm110."""

    precisions_hopper: frozenset[str]
    precisions_blackwell: frozenset[str]


# v2.16 (PR #2923 "Graph Safe support for TE Grouped linear Op", 2026-05-05): sm100+ only, MXFP8 / BF16 (NVFP4 RHT).
_OPS_216 = OpFuserGrouped(frozenset(), frozenset({"bf16", "mxfp8"}))
# v2.17: + BF16 on Hopper. v2.18 (PR #3143 current scaling, #3171 block scaling) and release_v2.19: + FP8 current
# scaling (Hopper with cuBLASLt 13.5+), FP8 block scaling on Hopper only (2.19: cuBLASLt 13.6+).
_OPS_217 = OpFuserGrouped(frozenset({"bf16"}), frozenset({"bf16", "mxfp8"}))
_OPS_218 = OpFuserGrouped(frozenset({"bf16", "fp8-cs", "fp8"}), frozenset({"bf16", "fp8-cs", "mxfp8"}))


# The environment variable that turns on the op fuser's CuTe DSL fused grouped MLP (TE reads it in
# ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8.is_supported, default "0"); the recipes that run it set it with
# moe_mlp_glu_interleave_size 32 (Megatron-LM examples/moe_recipes *_paged_stash*.yaml at 9c5258f).
FUSED_GROUPED_MLP_ENV = "NVTE_CUTEDSL_FUSED_GROUPED_MLP"
# The GLU interleave the fused kernels need (TE ops/_common.py validate_grouped_mlp_dims: glu_interleave_size 32)
FUSED_GROUPED_MLP_GLU_INTERLEAVE = 32
@dataclass(frozen=True)
class FusedGroupedMLP:
    """The op fuser's CuTe DSL fused grouped MLP (transformer_engine/pytorch/ops/fused/forward_grouped_mlp.py and
    backward_grouped_mlp.py, v2.14 .. v2.16; ops/fused/grouped_mlp.py from v2.17), which replaces the op fuser's
    GroupedLinear + scaled activation + GroupedLinear window (Megatron-Core TEGroupedMLP._make_fused_ops) where
    FUSED_GROUPED_MLP_ENV is set, the GPU is compute capability 10.x (``get_device_compute_capability()[0] != 10``
    refuses sm90 and sm11x / sm12x), cuDNN front-end's CuTe DSL wrappers import, the recipe is one of
    ``precisions``, the activation one of ``activations`` and every fc1 / fc2 feature dimension a ``dim_align``
    multiple (validate_grouped_mlp_dims / fuse_grouped_mlp_ops: in_features and out_features), without expert biases
    (moeplan: gpt-oss's fuse only where the cuDNN front-end wrapper takes ``bias_tensor``, a package version it does
    not know).
    Forward: one grouped quantize of fc1's input (tex.group_quantize), one kernel for fc1's grouped GEMM + the scaled
    activation + the MXFP8 quantize of its output (grouped_gemm_glu_wrapper_sm100: writes the BF16 pre-activation it
    saves for backward and fc2's row- and column-wise MXFP8 input) and one for fc2's grouped GEMM
    (grouped_gemm_quant_wrapper_sm100, BF16 out). Backward: one grouped quantize of fc2's output gradient, one kernel
    for fc2's dgrad + the activation's backward (reading the saved pre-activation in its epilogue) + the prob gradient
    + the MXFP8 quantize of fc1's output gradient (grouped_gemm_dglu_wrapper_sm100), one for fc1's dgrad and one
    grouped-tensor GEMM per wgrad. What it removes against the unfused path is
    moeplan.engine.timing.moe.fused_grouped_mlp_removed_bytes. BF16 never takes it (``recipe.mxfp8()``); NVFP4 does
    from v2.17 with its own RHT quantize after a BF16 fc1 output, which moeplan does not model (not listed)."""

    precisions: frozenset[str]
    activations: frozenset[str]
    """``swiglu`` (ScaledSwiGLU, a gated MoE without a clamp). Not listed: ScaledClampedQGeGLU (v2.15+, gpt-oss,
    whose experts have biases) and ScaledSReLU (v2.17+: its backward may recompute fc2's input in the dSReLU kernel)."""
    dim_align: int
    """The multiple every fc1 / fc2 in / out feature count must be (v2.14: 256; v2.15+: 64)."""


# v2.14 (the recipes' TE_TAG release_v2.14; tag v2.14 and the branch head have the same ops/fused files): MXFP8 +
# ScaledSwiGLU only, dimensions % 256 (_common.py fuse_grouped_mlp_ops). v2.15 / v2.16: + ScaledClampedQGeGLU,
# dimensions % 64. v2.17 .. release_v2.19 (grouped_mlp.py): + NVFP4 and ScaledSReLU (not modelled, see
# FusedGroupedMLP), the MXFP8 GLU path the same three forward / four backward kernels.
_FUSED_MLP_214 = FusedGroupedMLP(frozenset({"mxfp8"}), frozenset({"swiglu"}), 256)
_FUSED_MLP_215 = FusedGroupedMLP(frozenset({"mxfp8"}), frozenset({"swiglu"}), 64)


@dataclass(frozen=True)
class TERelease:
    """One Transformer Engine release line (major.minor) as moeplan models it."""

    wide_head_cudnn: bool
    """Whether cuDNN fused attention trains d_qk = d_v = 256 on sm100 .. sm10x (PR #3056)."""
    grouped_tensor: GroupedTensorPath | None
    """GroupedLinear's grouped-tensor GEMM path, None where the release has none (v2.14 .. v2.16 grouped_linear.py
    calls only general_grouped_gemm, one cuBLASLt GEMM per expert)."""
    op_fuser_grouped: OpFuserGrouped | None = None
    """The op fuser's default grouped-tensor flow, None where its GroupedLinear splits per expert (v2.14, v2.15:
    tex.split_quantize + general_grouped_gemm)."""
    fused_grouped_mlp: FusedGroupedMLP | None = None
    """The op fuser's CuTe DSL fused grouped MLP (FusedGroupedMLP), None where the release has none (before v2.14)."""
    hopper_attention: str = "flash"
    """The kernel class that trains causal attention with equal head dims <= 128 on Hopper (sm90) in the container
    this release line shipped in, as moeplan.run.attention_backend.attention_kernel names families: ``flash`` (the
    FlashAttention-3 / cuDNN 9 Hopper-native class) or ``flash2`` (FlashAttention-2's mma.sync class, costed at its
    measured Hopper rates: HOPPER_FA2_NOTE)."""


# The ONE table of Transformer Engine releases (TransformerEngine git, tags v2.14 .. v2.18, branch release_v2.19;
# snapshot of 2026-08-22). Wide heads: PR #3056 (commit bffde8f, merged 2026-07-31 on main at VERSION 2.19.0.dev0)
# adds to fused_attn.cpp nvte_get_fused_attn_backend "d_qk = d_v = 256 + SM10x (cuDNN BE 9.23+) + bprop +
# non-paged"; tags v2.15 .. v2.18 do not contain it, release_v2.19 does (no v2.19 tag in the snapshot, so "2.19" is
# the first release line whose VERSION file postdates the merge). Grouped tensor: _GROUPED_217 .. _GROUPED_219.
# Later releases are not listed because none could be cited.
#
# Two TE 1.x lines, for the shared rows that ran them (issue #31: the dense CP sweep N41), by the Hopper attention
# kernel class (TERelease.hopper_attention):
# - 1.3: what the NeMo 24.03 / 24.03.01 container ships (NVIDIA's NeMo Framework component table for 24.03, as a
#   public guide to the 24.03.01 container quotes it: TE 1.3, Megatron Core 0.5.0, NeMo 1.23.0, PyTorch 2.2.0). Its
#   DotProductAttention (transformer_engine/pytorch/attention.py, tag v1.3) already prefers cuDNN fused attention
#   (F16_arbitrary_seqlen) over flash-attn 2 on sm90 ("Select FusedAttention on sm90 and FlashAttention on others
#   for performance", since PR #497, 2023-12-07, first in v1.2); before v1.2 flash-attn 2 trained it. The cuDNN of
#   that early-2024 container (TE 1.3's release notes: 2024-02-14) predates cuDNN's later Hopper SDPA speed-ups
#   (cuDNN 9.4 release notes: "Improved performance for scaled dot product attention on Hopper", 5-30%; NVIDIA's
#   cuDNN 9 post, 2024-04: "improving its performance release-over-release") and no public measurement of that
#   kernel exists: moeplan costs it at the FlashAttention-2 class (HOPPER_FA2_NOTE), which N41's attention-bound
#   1M point measures (~0.27 of H100's peak over fwd + bwd). An assumption the sweep tests, not a cited rate.
# - 1.11: the first release with FlashAttention-3 (tag v1.11 attention.py: flash-attn v3, ``_use_flash_attn_3``),
#   from which both Hopper paths are the FA3 / cuDNN 9 Hopper-native class moeplan's ``flash`` rates describe.
# Releases 1.4 .. 1.10 and 2.0 .. 2.13 are not listed: no shared row ran them.
HOPPER_FA2_NOTE = ("FlashAttention-2's rates on Hopper: attn_fwd_eff / attn_bwd_eff 'flash2_sm90', measured on one "
                   "H200 (tests/data/attention_headdim_h200.csv)")
TE_RELEASES: dict[str, TERelease] = {
    "1.3": TERelease(False, None, hopper_attention="flash2"),
    "1.11": TERelease(False, None),
    "2.14": TERelease(False, None, fused_grouped_mlp=_FUSED_MLP_214),
    "2.15": TERelease(False, None, fused_grouped_mlp=_FUSED_MLP_215),
    "2.16": TERelease(False, None, _OPS_216, fused_grouped_mlp=_FUSED_MLP_215),
    "2.17": TERelease(False, _GROUPED_217, _OPS_217, fused_grouped_mlp=_FUSED_MLP_215),
    "2.18": TERelease(False, _GROUPED_218, _OPS_218, fused_grouped_mlp=_FUSED_MLP_215),
    "2.19": TERelease(True, _GROUPED_219, _OPS_218, fused_grouped_mlp=_FUSED_MLP_215),
}
GROUPED_TENSOR_FIRST_VERSION = next(v for v, r in TE_RELEASES.items() if r.grouped_tensor is not None)


def te_version_key(text: str) -> str:
    """A TE version as the table keys it (``2.19``, ``2.19.0``, ``v2.19.1`` -> ``2.19``); unknown -> MoeplanError."""
    t = str(text).strip().lstrip("vV")
    key = ".".join(t.split(".")[:2])
    if key not in TE_RELEASES:
        raise MoeplanError(f"Transformer Engine version '{text}' unknown; known: {', '.join(TE_RELEASES)} "
                           f"(default {DEFAULT_TE_VERSION}, the recipes' TE {TE_COMMIT})")
    return key


def te_version_tuple(text: str) -> tuple[int, int]:
    """(major, minor) of a TE version string ('2.14', '2.14.0', 'v2.14')."""
    major, minor = te_version_key(text).split(".")
    return int(major), int(minor)


def te_release(te_version: str | None = None) -> TERelease:
    """The table row of ``te_version`` (None: DEFAULT_TE_VERSION)."""
    return TE_RELEASES[te_version_key(te_version or DEFAULT_TE_VERSION)]


def hopper_attention(te_version: str | None = None) -> str:
    """The kernel class (``flash`` / ``flash2``) TE ``te_version`` trains equal-head attention with on sm90."""
    return te_release(te_version).hopper_attention


def te_label(te_version: str | None = None) -> str:
    """How messages name a TE release: ``2.14 (71bbefb)`` for the recipes' TE, else the version."""
    v = te_version or DEFAULT_TE_VERSION
    return f"{v} ({TE_COMMIT})" if v == DEFAULT_TE_VERSION else v


def grouped_tensor_precisions(te_version: str | None, sm_arch: int | None) -> frozenset[str]:
    """The precisions TE ``te_version``'s grouped-tensor path takes on compute capability ``sm_arch`` (90, 100,
    103, ...); empty where the release has no path or the GPU is outside sm90 .. sm110 (or unknown)."""
    path = te_release(te_version).grouped_tensor
    if path is None or sm_arch is None:
        return frozenset()
    if sm_arch == 90:
        return path.precisions_hopper
    if 100 <= sm_arch <= 110:
        return path.precisions_blackwell
    return frozenset()


def op_fuser_grouped(te_version: str | None, sm_arch: int | None, precision: str) -> bool:
    """Whether TE ``te_version``'s op-fuser GroupedLinear runs ``precision`` on its grouped-tensor flow on ``sm_arch``
    (OpFuserGrouped; outside sm90 .. sm110 or unknown: no)."""
    ops = te_release(te_version).op_fuser_grouped
    if ops is None or sm_arch is None:
        return False
    if sm_arch == 90:
        return precision in ops.precisions_hopper
    return 100 <= sm_arch <= 110 and precision in ops.precisions_blackwell


def fused_grouped_mlp(te_version: str | None, sm_arch: int | None, precision: str, activation: str,
                      dims: tuple[int, ...] = ()) -> bool:
    """Whether TE ``te_version``'s op fuser runs the routed experts as its CuTe DSL fused grouped MLP
    (FusedGroupedMLP) for ``precision``, ``activation`` and fc1 / fc2 feature counts ``dims`` on compute capability
    ``sm_arch`` (10.x only; unknown: no), with FUSED_GROUPED_MLP_ENV set (RunConfig.experts_fused_mlp asks)."""
    fused = te_release(te_version).fused_grouped_mlp
    if fused is None or sm_arch is None or not 100 <= sm_arch < 110:
        return False
    return (precision in fused.precisions and activation in fused.activations
            and all(d % fused.dim_align == 0 for d in dims))


RAISES_PREFIX = "error: "  # how grouped_tensor_problem marks a reason where TE raises rather than falls back


def grouped_tensor_problem(te_version: str | None, sm_arch: int | None, precision: str) -> str | None:
    """Why TE ``te_version`` with GROUPED_TENSOR_ENV=1 does not run the routed experts on the grouped-tensor path
    under Megatron-Core's TEGroupedMLP, or None where it does. The reason starts with ``error:`` where TE raises
    instead of falling back to the per-expert path."""
    v = te_version or DEFAULT_TE_VERSION
    path = te_release(v).grouped_tensor
    if path is None:
        return (f"TE {te_label(v)} has no grouped-tensor GroupedLinear path (it came with TE "
                f"{GROUPED_TENSOR_FIRST_VERSION}, PR #3038); {GROUPED_TENSOR_ENV} is ignored")
    if precision == "fp8" and path.blackwell_block_raises and sm_arch is not None and 100 <= sm_arch <= 110:
        return (f"{RAISES_PREFIX}TE {v} raises for FP8 block scaling with {GROUPED_TENSOR_ENV}=1 on Blackwell (the fused "
                "block-scaling path is Hopper-only)")
    if precision not in grouped_tensor_precisions(v, sm_arch):
        where = f"sm{sm_arch}" if sm_arch is not None else "a GPU of unknown compute capability"
        return (f"TE {v}'s grouped-tensor path does not take {precision} on {where} (it falls back to one GEMM and "
                "quantize per expert)")
    align = dict(path.row_align).get(precision)
    if align is not None and expert_pad_rows(precision) % align:
        return (f"{RAISES_PREFIX}TE {v}'s grouped {precision} quantize needs rows in multiples of {align}, and Megatron-Core's "
                f"TEGroupedMLP (core_v0.19.0 and older) pads each expert to {expert_pad_rows(precision)} (TE Fp8Padding's "
                "default), so it raises on the steps whose routed rows miss that multiple (dropless: most of them); "
                "Megatron-LM main's moe_use_grouped_tensor (unreleased) pads to 256")
    if not path.host_splits:
        return (f"{RAISES_PREFIX}TE {v}'s grouped-tensor path needs the per-expert token counts on the GPU (ValueError "
                "'requires CUDA m_splits'), and Megatron-Core's TEGroupedMLP (core_v0.19.0 and older) passes a host "
                "list; only Megatron-LM main's moe_use_grouped_tensor (unreleased) does")
    return None


def raising_reason(problem: str | None) -> str | None:
    """A :func:`grouped_tensor_problem` reason where TE raises (marked RAISES_PREFIX), without the mark; None for a
    reason where TE ignores the variable or falls back, and for no problem."""
    return problem[len(RAISES_PREFIX):] if problem is not None and problem.startswith(RAISES_PREFIX) else None


def grouped_tensor_raises(te_version: str | None, sm_arch: int | None, precision: str) -> str | None:
    """Why TE ``te_version`` raises at run time with GROUPED_TENSOR_ENV=1 under Megatron-Core's TEGroupedMLP, or None
    where it runs or falls back (:func:`raising_reason` of :func:`grouped_tensor_problem`)."""
    return raising_reason(grouped_tensor_problem(te_version, sm_arch, precision))


def grouped_tensor_refusal(raises: str, where: str = "") -> str:
    """The one-line input error estimate and plan give for ``--te-grouped-tensor`` where TE raises (``raises``: a
    :func:`grouped_tensor_raises` reason; ``where``: what of the run or search it covers)."""
    return f"--te-grouped-tensor ({GROUPED_TENSOR_ENV}=1): {raises}; drop it{where}"


__all__ = ["DEFAULT_TE_VERSION", "HOPPER_FA2_NOTE", "hopper_attention", "RAISES_PREFIX", "grouped_tensor_raises", "grouped_tensor_refusal", "raising_reason", "EXPERT_PAD_ROWS", "EXPERT_PAD_ROWS_FP8", "GROUPED_TENSOR_ENV", "GROUPED_TENSOR_FIRST_VERSION", "GroupedTensorPath", "TERelease",
           "OpFuserGrouped", "FusedGroupedMLP", "FUSED_GROUPED_MLP_ENV", "FUSED_GROUPED_MLP_GLU_INTERLEAVE",
           "fused_grouped_mlp", "TE_COMMIT", "TE_RELEASES", "expert_pad_rows", "grouped_tensor_precisions", "op_fuser_grouped", "grouped_tensor_problem", "te_label", "te_release",
           "te_version_key"]
