"""mHC, manifold-constrained hyper-connections (DeepSeek-V4), costed.

The architecture (Xie et al., "mHC: Manifold-Constrained Hyper-Connections", arXiv 2512.24880; DeepSeek-V4
report section 2.2; transformers ``DeepseekV4HyperConnection`` in modeling_deepseek_v4.py; Megatron-Core
``enable_mhc_connections``, megatron/core/transformer/hyper_connection.py): the residual stream is ``n``
(hc_mult) streams of the hidden width. Around each block (attention, MoE) a small linear ``fn`` maps the
RMS-normalised n x hidden streams to (2 + n) x n mixing coefficients (plus ``base`` and 3 ``scale`` scalars):
n pre-weights mix the streams into the block's input, n post-weights spread its output back, and an n x n
residual matrix (Sinkhorn-Knopp projected to doubly stochastic) mixes the streams. The model's head collapses
the n streams with its own ``fn`` (n x n x hidden), ``base`` (n) and one ``scale``.

FLOPs: Megatron Bridge's model TFLOP/s for DeepSeek-V4 (flop_utils.py, dsv4_hybrid) count none of this, so the
model FLOPs do not either; the time counts it: the coefficient GEMM (n x hidden -> (2 + n) n) and the
element-wise traffic of reading and writing the n streams (:func:`fwd_traffic_elems`).
"""

from __future__ import annotations

SCALE_SCALARS = 3  # hc_*_scale: pre, post and residual scales (transformers DeepseekV4HyperConnection)


def mix_width(n: int) -> int:
    """Coefficients per token and block: n pre, n post, n x n residual."""
    return (2 + n) * n


def block_params(n: int, hidden: int) -> int:
    """One block's hyper-connection weights: fn ((2 + n) n x n hidden), base ((2 + n) n), scale (3); 0 for the
    plain residual (n = 1)."""
    if n <= 1:
        return 0
    m = mix_width(n)
    return m * n * hidden + m + SCALE_SCALARS


def head_params(n: int, hidden: int) -> int:
    """The head's stream collapse: hc_head_fn (n x n hidden), hc_head_base (n), hc_head_scale (1)."""
    return n * n * hidden + n + 1 if n > 1 else 0


def coeff_gemm_shape(n: int, hidden: int) -> tuple[int, int]:
    """(k, n_out) of the coefficient GEMM of one block (not counted in the model FLOPs: Bridge's formula)."""
    return n * hidden, mix_width(n)


def fwd_traffic_elems(n: int, hidden: int) -> float:
    """Elements read + written per token by one block's hyper-connection in the forward pass: the streams read
    for the norm / coefficients and for the pre-mix (2 n h), the block input written (h); the block output and
    the streams read and the new streams written by the post / residual mix (h + 2 n h). The backward reads and
    writes about twice that (the gradient of every stream and of the coefficients)."""
    return (4 * n + 2) * hidden if n > 1 else 0.0


def saved_elems(n: int, hidden: int) -> list[tuple[str, float, float, str]]:
    """(name, elements per token, bytes per element, the recompute label that drops it) one block keeps for
    backward beyond the plain residual's norm input: the n streams it read (n h, bf16; the checkpoint of a
    recomputed block, so kept under 'mhc' too) and its fp32 coefficients, which the 'mhc' recompute rebuilds
    (Megatron-Core recompute_modules 'mhc')."""
    if n <= 1:
        return []
    return [("mhc_streams", float(n * hidden), 2.0, ""), ("mhc_coeffs", float(mix_width(n)), 4.0, "mhc")]
