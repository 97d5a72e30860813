"""What the output layer and the loss hold beyond the bytes they keep for backward (moeplan.engine.memory's
output-layer term): the cross entropy's forward peak and the output layer's sequence-parallel gather buffer.

- Cross entropy (megatron/core/tensor_parallel/cross_entropy.py and fusions/fused_cross_entropy.py, core_v0.12.0
  on): the vocab-parallel logits leave the output layer in bf16 and the loss makes an fp32 copy of them
  (``calculate_logits_max``: ``vocab_parallel_logits.float()``), shifts, exponentiates and normalises it in place
  and keeps it as the softmax for backward (the kept fp32 term). While the copy is made and worked on, the bf16
  logits are still held by the caller (GPTModel.forward's ``logits``, released when forward returns): 2 bytes per
  logit element beyond the kept softmax, at the end of the forward, when every in-flight activation is held.
  The backward peak at the loss is no higher (the gradient is computed in place in the softmax and cast to a
  bf16 copy: the same 4 + 2 bytes). Releases before core_v0.8 (commit 9634c0e4a3, "Reduce logit memory pressure
  by using in-place operation") made the copy in the caller (``logits.float()``) and shifted it out of place, a
  second fp32 copy (4 bytes more per logit element); moeplan's releases (moeplan.base.fields) are all later.
  Transformer Engine's fused cross entropy (``cross_entropy_fusion_impl te``) works on the bf16 logits in place;
  moeplan models Megatron-Core's own.
- Output layer (megatron/core/tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication): with
  sequence parallelism the output layer all-gathers its input into Megatron-Core's global memory buffer
  (``get_global_memory_buffer().get_tensor(..., "mpu")``), which is kept for the run once allocated: the full
  sequence's bf16 hidden states of one micro-batch on a CP rank, on the ranks that hold the output layer.
"""

from __future__ import annotations

from moeplan.engine.activations import BF16_BYTES

BF16_LOGIT_BYTES = BF16_BYTES  # the output layer's logits, held while the loss makes its fp32 copy


def loss_forward_extra_bytes(vocab: int, tokens: float) -> float:
    """Bytes the cross entropy holds at its forward peak beyond the fp32 softmax it keeps, one micro-batch on one
    GPU: the bf16 logits, ``tokens`` (attention-layout tokens per GPU, mbs x seq / (CP x TP)) x TP sequence rows
    of vocab / TP logits each."""
    return BF16_LOGIT_BYTES * vocab * tokens


def output_gather_buffer_bytes(hidden: int, tokens: float, tp: int) -> float:
    """Megatron-Core's global all-gather buffer of the output layer's input under sequence parallelism (TP > 1):
    bf16 hidden states of the rank's whole sequence (``tokens`` x TP rows); none at TP 1."""
    return BF16_BYTES * hidden * tokens * tp if tp > 1 else 0.0


__all__ = ["BF16_LOGIT_BYTES", "loss_forward_extra_bytes", "output_gather_buffer_bytes"]
