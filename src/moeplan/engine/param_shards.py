"""Parameters per GPU: each layer's split (TP-split, replicated, routed experts), a pipeline rank's share,
the layout's average, and a rank's Megatron-FSDP units and Muon matrices."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from moeplan.engine import fsdp, muon
from moeplan.engine.params import count_params, ffn_params, mixer_params, moe_params, mtp_module_params
from moeplan.models.spec import Attention, DenseMLP, Layer, ModelSpec, MoE
from moeplan.run.parallel import Parallel, Stage, stage_groups


# ------------------------------------------------------------------------------------ parameters


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one layer by how they are split: over TP, replicated, or over EP x ETP."""

    tp_split: int
    replicated: int
    expert: int
    gemm: int  # parameters in GEMM weights (get an FP8 copy when training in FP8)


@lru_cache(maxsize=1024)
def layer_params(layer: Layer, hidden: int) -> LayerParams:
    norms = layer.blocks * hidden  # one pre-norm per block (a hybrid stack's layers have one block)
    mixer = layer.mixer
    total_mixer = mixer_params(mixer, hidden)
    replicated = norms
    if isinstance(mixer, Attention) and mixer.is_mla:
        # MLA down projections are duplicated across TP ranks (megatron/core/transformer/
        # multi_latent_attention.py: linear_q_down_proj / linear_kv_down_proj, parallel_mode duplicated).
        down = hidden * (mixer.q_lora_rank or 0) + hidden * (mixer.kv_lora_rank + mixer.qk_rope_head_dim)
        replicated += down
        tp_split = total_mixer - down
    else:
        tp_split = total_mixer
    expert = 0
    if isinstance(layer.mlp, DenseMLP):
        tp_split += ffn_params(hidden, layer.mlp.ffn_hidden, layer.mlp.gated)
    elif isinstance(layer.mlp, MoE):
        mp = moe_params(layer.mlp, hidden)
        tp_split += mp.shared_experts
        replicated += mp.router + mp.latent_proj  # LatentMoE projections are "duplicated" over TP (moe_layer.py)
        expert = mp.routed_experts
    return LayerParams(tp_split, replicated, expert, tp_split + expert)


def average_params_per_gpu(spec: ModelSpec, par: Parallel) -> tuple[float, float]:
    """(dense, expert) parameters per GPU averaged over pipeline ranks: dense over TP x PP, routed
    experts over EP x ETP x PP."""
    p = count_params(spec)
    return (p.total - p.routed_experts) / (par.tp * par.pp), p.routed_experts / (par.ep * par.etp * par.pp)


@lru_cache(maxsize=8192)
def rank_params(spec: ModelSpec, stages: tuple[Stage, ...], tp: int, ep_etp: int) -> tuple[float, float, float]:
    """(dense params per GPU, expert params per GPU, GEMM params per GPU) on one pipeline rank."""
    dense = expert = gemm = 0.0
    h = spec.hidden
    vocab_params = spec.vocab * h
    has_embedding = any(s.embedding for s in stages)
    for st in stages:
        for layer, n in stage_groups(spec, st):
            p = layer_params(layer, h)
            dense += n * (p.tp_split / tp + p.replicated)
            expert += n * p.expert / ep_etp
            gemm += n * (p.tp_split / tp + p.expert / ep_etp)
        if st.embedding:
            dense += vocab_params / tp
        if st.loss and (not spec.tie_embeddings or not has_embedding):
            dense += vocab_params / tp
            gemm += vocab_params / tp
        if st.mtp and spec.mtp_layer is not None:
            p = layer_params(spec.mtp_layer, h)
            extra = mtp_module_params(spec) - (p.tp_split + p.replicated + p.expert)  # eh_proj + norms
            dense += st.mtp * (p.tp_split / tp + p.replicated + extra / tp)
            expert += st.mtp * p.expert / ep_etp
            gemm += st.mtp * (p.tp_split / tp + p.expert / ep_etp + extra / tp)
            if not has_embedding:  # MTP embeds its input with a copy of the word embeddings
                dense += vocab_params / tp
    return dense, expert, gemm


@lru_cache(maxsize=4096)
def rank_units(spec: ModelSpec, stages: tuple[Stage, ...], tp: int, ep_etp: int) -> tuple[float, ...]:
    """Per-GPU parameter elements of each Megatron-FSDP unit on a rank (layers, MTP, embedding, output)."""
    h = spec.hidden
    vocab = spec.vocab * h / tp
    has_embedding = any(st.embedding for st in stages)
    layers: list[float] = []
    embedding = output = 0.0
    for st in stages:
        for i in st.layers:
            p = layer_params(spec.layers[i], h)
            layers.append(p.tp_split / tp + p.replicated + p.expert / ep_etp)
        if st.mtp and spec.mtp_layer is not None:
            p = layer_params(spec.mtp_layer, h)
            layers += [p.tp_split / tp + p.replicated + p.expert / ep_etp] * st.mtp
        embedding += vocab if st.embedding else 0.0
        output += vocab if st.loss and (not spec.tie_embeddings or not has_embedding) else 0.0
    return fsdp.unit_elements(layers, embedding, output)


@lru_cache(maxsize=4096)
def rank_muon_params(spec: ModelSpec, stages: tuple[Stage, ...], tp: int, ep: int, etp: int) -> tuple[float, float]:
    """(dense, expert) Muon-managed parameters per GPU of a rank (moeplan.engine.muon)."""
    groups = tuple(g for st in stages for g in stage_groups(spec, st))
    return muon.matrix_params(muon.rank_matrices(spec, groups, sum(st.mtp for st in stages), tp, ep, etp))
