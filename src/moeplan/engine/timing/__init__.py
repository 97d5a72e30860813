"""Step time, TFLOP/s per GPU, MFU and tokens/s, with the time broken down by item.

The model costs one micro-batch on each pipeline rank (forward + backward, layer by layer), takes the
slowest rank, multiplies by the micro-batches, and adds the pipeline bubble, the exposed data-parallel
communication and the optimizer step:

    step = M x t_mb + (PP - 1) / VPP x t_mb + exposed DP comm + optimizer (+ offload)

(interleaved 1F1B bubble: Narayanan et al. 2021, arXiv 2104.04473, section 2.2). Per layer:
- GEMMs at the GPU's measured achievable matmul rate (hardware catalog ``gemm_*_achieved_flops``)
  times a shape factor d / (d + d0) per small dimension (tile quantisation and launch tails);
- fused attention (the kernel family Transformer Engine picks for the head shape and GPU) and Gated
  DeltaNet kernels at fractions of the dense BF16 peak;
- element-wise work (norms, activations, permutation, RoPE) as HBM traffic proportional to the
  bytes the layer saves for backward (moeplan.engine.activations); the Gated DeltaNet mixer's op by op;
- TP all-gather / reduce-scatter with sequence parallel, CP ring KV exchange overlapped with
  attention, EP dispatch/combine (4 all-to-alls per MoE layer) split into NVLink and scale-out
  parts, PP send/recv; recompute adds the forward cost of what it recomputes.
FLOPs are Megatron-Core's (moeplan.engine.flops) so TFLOP/s/GPU is comparable with Megatron's log line.
The calibration constants (class Calibration) are few and global (not per model or per run); their
values are data (moeplan/hardware/calibration.yaml), each with what it stands for and its source.

One module per job, bottom up: :mod:`.calibration` (the fitted constants), :mod:`.context` (the run context,
the GEMM rate and bus bandwidths), :mod:`.gemm`, :mod:`.attention` (and CP communication), :mod:`.gdn`
(Gated DeltaNet), :mod:`.moe` (EP dispatch and overlap), :mod:`.optimizer` (and offload), :mod:`.layer`,
:mod:`.pipeline` (PP and DP communication) and :mod:`.step` (:func:`~.step.estimate_time`).
"""
