"""Muon (momentum + Newton-Schulz orthogonalization) as Megatron-Core runs it: state and step cost.

Sources (NVIDIA/Megatron-LM):
- megatron/core/optimizer/muon.py, core_v0.16.1 (core_v0.17: same split; core_v0.18+:
  emerging_optimizers.py ``_is_nonlinear_or_embedding``): every 2-D weight that is not an embedding or
  output parameter goes to Muon (attention and MLP projections, each expert's fc1/fc2, MLA down
  projections, the router, MTP eh_proj); embeddings, the output layer and every non-2-D parameter (norms,
  biases, Gated DeltaNet conv and decay) stay on Adam. The router is a 2-D weight, so it is on Muon in
  every release. ``linear_qkv`` is split into its q, k and v blocks before orthogonalization
  (``muon_split_qkv``, default True).
- State: ``muon_init_state_fn`` allocates one ``momentum_buffer`` like the fp32 main parameter
  (``Float16OptimizerWithFloat16Params`` keeps the fp32 master): 4 + 4 bytes per Muon parameter, against
  Adam's master + exp_avg + exp_avg_sq (12).
- Distribution: layer-wise distributed optimizer (``LayerWiseDistributedOptimizer``, optimizer='dist_muon'
  in core_v0.16/0.17, use_layer_wise_distributed_optimizer from core_v0.18): whole parameters are dealt
  to DP x CP ranks (experts to expert-DP ranks) sorted by size in ping-pong order; each rank updates and
  orthogonalizes its own, gradients are all-reduced by DDP (no distributed optimizer), updated weights are
  all-gathered after the step.
- Newton-Schulz (emerging_optimizers ``newton_schulz``, quintic): per step on an m x n matrix (m <= n)
  A = X X^T (2 m^2 n), B = bA + cA^2 (2 m^3), X = aX + BX (2 m^2 n): 4 m^2 n + 2 m^3 FLOPs, in bf16
  matmuls at muon_fp32_matmul_prec 'medium'. muon_tp_mode 'blockwise' orthogonalizes each TP shard on its
  own; 'duplicated' all-gathers the matrix over TP and every TP rank runs the whole iteration.
No code is taken from those files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from moeplan.engine.activations import FP32_BYTES
from moeplan.engine.flops import Gemm, layer_gemms, mtp_eh_proj_gemm
from moeplan.models.spec import Attention, Layer, ModelSpec, MoE

MUON_STATE_BYTES = 8  # fp32 master weight + fp32 momentum_buffer per Muon parameter
MOMENT_TRAFFIC_BYTES = 8  # one fp32 moment read and written: what Muon's update saves over Adam's
# HBM traffic of one Newton-Schulz iteration beyond its matmul operands: X read, A, B written and read
# (fp32 accumulation), elements of (m x n + 2 m x m), 4 bytes each
NS_TRAFFIC_TERMS = 3


@dataclass(frozen=True)
class Matrix:
    """One Muon-managed weight as one GPU holds it."""

    rows: float
    cols: float
    count: float  # matrices of this shape on the GPU (local experts)
    expert: bool
    tp_split: bool  # split over TP/ETP (only these differ between blockwise and duplicated)
    full_rows: float  # before the TP split
    full_cols: float

    @property
    def params(self) -> float:
        return self.rows * self.cols * self.count


def _local(g: Gemm, tp: int, etp: int, ep: int) -> list[Matrix]:
    div = etp if g.kind == "expert" else tp
    count = g.weights / ep if g.per_row else 1.0
    k = g.k / div if g.split == "k" else g.k
    n = g.n / div if g.split == "n" else g.n
    return [Matrix(k, n, count, g.kind == "expert", bool(g.split) and div > 1, g.k, g.n)]


def _qkv_blocks(layer: Layer, g: Gemm, tp: int) -> list[Matrix]:
    """muon_split_qkv: q (with the output gate), k and v are orthogonalized separately."""
    a = layer.mixer
    assert isinstance(a, Attention)
    q = a.num_heads * a.head_dim * (2 if a.output_gate else 1)
    kv = a.num_kv_heads * a.head_dim
    return [Matrix(g.k, width / tp, 1.0, False, tp > 1, g.k, width) for width in (q, kv, kv)]


@lru_cache(maxsize=1024)
def layer_matrices(layer: Layer, hidden: int, tp: int, ep: int, etp: int) -> tuple[Matrix, ...]:
    """Muon matrices of one decoder layer on one GPU."""
    out: list[Matrix] = []
    for g in layer_gemms(layer, hidden):
        if g.name == "qkv":
            out += _qkv_blocks(layer, g, tp)
        else:
            out += _local(g, tp, etp, ep)
    if isinstance(layer.mlp, MoE):  # router weight (num_experts x hidden), replicated over TP
        out.append(Matrix(layer.mlp.num_experts, hidden, 1.0, False, False, layer.mlp.num_experts, hidden))
    return tuple(out)


def rank_matrices(spec: ModelSpec, groups: Iterable[tuple[Layer, int]], mtp: int, tp: int, ep: int,
                  etp: int) -> list[tuple[Matrix, float]]:
    """(matrix, how many) of a pipeline rank: its layers and its MTP modules (layer + eh_proj)."""
    out: list[tuple[Matrix, float]] = []
    for layer, n in groups:
        out += [(mx, n) for mx in layer_matrices(layer, spec.hidden, tp, ep, etp)]
    if mtp and spec.mtp_layer is not None:
        out += [(mx, mtp) for mx in layer_matrices(spec.mtp_layer, spec.hidden, tp, ep, etp)]
        out += [(mx, mtp) for mx in _local(mtp_eh_proj_gemm(spec), tp, etp, ep)]
    return out


def matrix_params(matrices: Iterable[tuple[Matrix, float]]) -> tuple[float, float]:
    """(dense, expert) Muon parameters per GPU."""
    dense = expert = 0.0
    for mx, n in matrices:
        if mx.expert:
            expert += n * mx.params
        else:
            dense += n * mx.params
    return dense, expert


def ns_flops(rows: float, cols: float, steps: int) -> float:
    """Quintic Newton-Schulz FLOPs on one rows x cols matrix: steps x (4 m^2 n + 2 m^3), m <= n."""
    m, n = min(rows, cols), max(rows, cols)
    return steps * (4 * m * m * n + 2 * m ** 3)


def ns_traffic_bytes(rows: float, cols: float, steps: int) -> float:
    m, n = min(rows, cols), max(rows, cols)
    return steps * NS_TRAFFIC_TERMS * (m * n + 2 * m * m) * FP32_BYTES


@dataclass(frozen=True)
class NewtonSchulz:
    """Newton-Schulz work of one GPU per optimizer step, before the layer-wise split over DP."""

    dense_flops: float
    expert_flops: float
    dense_bytes: float  # HBM traffic
    expert_bytes: float
    tp_gather_bytes: float  # duplicated mode: fp32 momentum all-gathered over TP (per GPU, before DP split)


def newton_schulz(matrices: Iterable[tuple[Matrix, float]], steps: int, mode: str) -> NewtonSchulz:
    """FLOPs and bytes of orthogonalizing every Muon matrix a GPU holds (blockwise: its shard;
    duplicated: the gathered whole, on every TP rank)."""
    df = ef = db = eb = gather = 0.0
    for mx, n in matrices:
        rows, cols = (mx.full_rows, mx.full_cols) if mode == "duplicated" and mx.tp_split else (mx.rows, mx.cols)
        f = n * mx.count * ns_flops(rows, cols, steps)
        b = n * mx.count * ns_traffic_bytes(rows, cols, steps)
        if mode == "duplicated" and mx.tp_split:
            gather += n * mx.count * (rows * cols - mx.rows * mx.cols) * FP32_BYTES
        if mx.expert:
            ef, eb = ef + f, eb + b
        else:
            df, db = df + f, db + b
    return NewtonSchulz(df, ef, db, eb, gather)


__all__ = ["MOMENT_TRAFFIC_BYTES", "MUON_STATE_BYTES", "Matrix", "NewtonSchulz", "layer_matrices",
           "matrix_params", "newton_schulz", "ns_flops", "rank_matrices"]
