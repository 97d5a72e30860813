"""Architecture spec: what one MoE model is, layer by layer.

Everything downstream (parameters, FLOPs, memory, time) reads these dataclasses and nothing else, so a
model read from a Hugging Face ``config.json`` and one from the built-in catalog behave the same.
Sizes are element counts (not bytes); widths are per layer.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Literal

from moeplan.base.errors import MoeplanError


class CachedHash:
    """Frozen dataclasses of the spec are dictionary keys on hot paths (caches); hashing them
    field by field, recursively, every time is the planner's main cost. Hash once."""

    @cached_property
    def _hash_value(self) -> int:
        return hash((type(self).__name__,) + tuple(getattr(self, f.name) for f in fields(self)))  # type: ignore[arg-type]

    def __hash__(self) -> int:
        return self._hash_value

AttentionKind = Literal["gqa", "mla"]


@dataclass(frozen=True)
class SparseAttention(CachedHash):
    """DeepSeek Sparse Attention (DSA; DeepSeek-V3.2, arXiv 2512.02556; GLM-5): a lightning indexer scores every
    causal key of each query (``index_heads`` ReLU'd dot products of width ``index_head_dim``, weighted per head)
    and the attention then reads only the ``topk`` best keys. ``runs_indexer`` False: the layer reuses the top-k
    of the previous layer that ran one (GLM-5.2 IndexShare: transformers GlmMoeDsaConfig indexer_types "shared";
    Megatron-Core dsa_indexer_topk_freq / dsa_indexer_skip_topk_offset) and has no indexer weights."""

    topk: int
    index_heads: int
    index_head_dim: int
    runs_indexer: bool = True


@dataclass(frozen=True)
class Attention(CachedHash):
    """Softmax attention: MHA/GQA (``num_kv_heads`` <= ``num_heads``) or DeepSeek MLA.

    For GQA, ``head_dim`` is explicit and may differ from hidden/heads (Qwen3: 128 x 64 heads on a
    4096 hidden). For MLA, ``head_dim`` is the query/key width ``qk_nope_head_dim + qk_rope_head_dim``
    and ``v_head_dim`` the value width; the HF ``head_dim`` key is never used for MLA.
    """

    kind: AttentionKind
    num_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3, GLM-4.5)
    output_gate: bool = False  # Qwen3-Next gated attention: q_proj also emits a sigmoid gate
    qkv_bias: bool = False
    o_bias: bool = False
    sink_logits: int = 0  # gpt-oss learned attention sinks, one per head
    sliding_window: int | None = None  # tokens a query attends to on a sliding-window layer
    # YaRN concentration (attention) factor that scales cos / sin (HF rope_scaling attention_factor, else
    # mscale / mscale_all_dim, else 0.1 ln(factor) + 1; Megatron-Core _yarn_get_concentration_factor); 1 = none
    rope_mscale: float = 1.0
    # MLA only
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    sparse: SparseAttention | None = None  # DSA (moeplan.engine.dsa); None = dense causal attention

    @property
    def is_mla(self) -> bool:
        return self.kind == "mla"

    @property
    def head_dims(self) -> tuple[int, int]:
        """(d_qk, d_v): the query/key and value head widths (MLA: ``head_dim`` and ``v_head_dim``; else both
        ``head_dim``), what backend selection and the attention FLOPs per score read."""
        return (self.head_dim, self.v_head_dim) if self.is_mla else (self.head_dim, self.head_dim)


@dataclass(frozen=True)
class GatedDeltaNet(CachedHash):
    """Qwen3-Next linear attention (Gated DeltaNet): state per head is key_dim x value_dim, constant
    in sequence length (Yang et al., "Gated Delta Networks", arXiv 2412.06464)."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels through the causal depthwise conv: q, k and v."""
        return 2 * self.key_dim + self.value_dim

    @property
    def in_proj_dim(self) -> int:
        """Output width of the fused input projection: q, k (key_dim each), v, the output gate z (value_dim
        each) and the per-value-head beta and alpha (transformers Qwen3NextGatedDeltaNet in_proj_qkvz +
        in_proj_ba; Megatron-Core gated_delta_net.py in_proj)."""
        return 2 * self.key_dim + 2 * self.value_dim + 2 * self.num_value_heads


@dataclass(frozen=True)
class Mamba2(CachedHash):
    """A Mamba-2 mixer (state-space duality, SSD: Dao & Gu, "Transformers are SSMs", arXiv 2405.21060), as
    Nemotron-H / Nemotron-3 stack it (HF NemotronHMamba2Mixer; Megatron-Core megatron/core/ssm/mamba_mixer.py).
    ``num_heads`` x ``head_dim`` is the inner width (d_inner); B and C come in ``num_groups`` groups of
    ``state_dim``; the SSM state per head is head_dim x state_dim, constant in sequence length."""

    num_heads: int
    head_dim: int
    state_dim: int
    num_groups: int
    conv_kernel: int
    chunk_size: int = 128  # SSD chunk length (HF chunk_size; Megatron-Core mamba_chunk_size)

    @property
    def d_inner(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels through the causal depthwise conv: x, B and C (mamba_mixer.py conv_dim)."""
        return self.d_inner + 2 * self.num_groups * self.state_dim

    @property
    def in_proj_dim(self) -> int:
        """Output width of in_proj: z, x (d_inner each), B, C (num_groups x state_dim each) and dt (one per
        head) (mamba_mixer.py in_proj "z x B C dt")."""
        return 2 * self.d_inner + 2 * self.num_groups * self.state_dim + self.num_heads


Mixer = Attention | GatedDeltaNet | Mamba2


@dataclass(frozen=True)
class DenseMLP(CachedHash):
    ffn_hidden: int
    gated: bool = True  # SwiGLU: gate and up projections


@dataclass(frozen=True)
class MoE(CachedHash):
    num_experts: int
    top_k: int
    expert_ffn_hidden: int
    shared_ffn_hidden: int = 0  # total width of the shared expert(s); 0 = none
    shared_gate: bool = False  # Qwen3-Next: sigmoid gate (hidden -> 1) on the shared expert
    router_bias: bool = False  # gpt-oss router has a bias (learned parameter)
    expert_bias: bool = False  # gpt-oss experts have biases
    # gpt-oss clamped GLU (HF ``swiglu_limit``; Megatron-Core ``activation_func_clamp_value``): the gate half
    # clamped from above and the linear half to +-limit before the activation; None = unclamped
    act_clamp: float | None = None
    gated: bool = True
    # Group-limited routing (DeepSeek-V3 "node-limited routing"): experts in n_group groups, each token
    # routed within its best topk_group groups (HF n_group / topk_group; Megatron moe_router_num_groups
    # / moe_router_group_topk). 1 / 1 = unrestricted.
    n_group: int = 1
    topk_group: int = 1
    # LatentMoE (Nemotron-3 Super): the routed experts run in a smaller latent width; fc1_latent_proj (hidden ->
    # latent) before dispatch and fc2_latent_proj (latent -> hidden) after combine (HF moe_latent_size; Megatron-Core
    # moe_latent_size, moe_layer.py). None: the experts take the hidden width.
    latent_size: int | None = None

    @property
    def has_shared(self) -> bool:
        return self.shared_ffn_hidden > 0

    @property
    def clamped_glu(self) -> bool:
        """A gated activation with a clamp (``act_clamp``), which Megatron-Core runs outside its fused kernel."""
        return self.gated and self.act_clamp is not None


MLP = DenseMLP | MoE


@dataclass(frozen=True)
class Layer(CachedHash):
    """One decoder layer: a token mixer and an MLP. A hybrid stack (Nemotron-H: Megatron-Core's hybrid layer
    pattern) has single-block layers, each one symbol of the pattern: a Mamba or attention layer has no MLP
    (``mlp`` None), an MoE or MLP layer no mixer (``mixer`` None)."""

    mixer: Mixer | None
    mlp: MLP | None

    @property
    def is_moe(self) -> bool:
        return isinstance(self.mlp, MoE)

    @property
    def is_linear_attention(self) -> bool:
        return isinstance(self.mixer, GatedDeltaNet)

    @property
    def is_mamba(self) -> bool:
        return isinstance(self.mixer, Mamba2)

    @property
    def blocks(self) -> int:
        """Pre-norm blocks of the layer (each with its own norm): mixer and MLP, or one of them."""
        return (self.mixer is not None) + (self.mlp is not None)


# Architectural features that change how a layer runs beyond its sizes, by name. An estimate of a model with one
# that no fitted run has, but measured runs of other models have, says so and widens its band below
# (moeplan/hardware/calibration.yaml ``out_of_fit_shortfall_log``, timing.estimate_time); benchmarks/calibrate.py
# warns of a feature neither fitted nor measured.
MODEL_FEATURES: dict[str, str] = {
    "gated_deltanet": "Gated DeltaNet (linear attention) layers",
    "gated_attention": "an attention output gate",
    "sliding_window": "sliding-window attention layers",
    "attention_sinks": "learned attention sinks",
    "clamped_glu": "a clamped gated activation",
    "sparse_attention": "DeepSeek sparse attention (indexer + top-k)",
    "mamba2": "Mamba-2 (SSD) layers",
    "latent_moe": "latent MoE experts",
}


@dataclass(frozen=True, eq=False)
class ModelSpec:
    """A decoder-only MoE language model. Compared and hashed by identity (it is large and is used
    as a cache key on hot paths); load each model once and share the object."""

    name: str
    model_type: str
    hidden: int
    vocab: int
    layers: tuple[Layer, ...]
    tie_embeddings: bool = False
    mtp_layers: int = 0  # DeepSeek-V3/GLM multi-token prediction modules after the main stack
    mtp_layer: Layer | None = None
    source: str = ""
    notes: tuple[str, ...] = field(default=())
    path: str = ""  # absolute path of the config.json it was read from; "" for a catalog model (exports record it)
    # Megatron-Core hybrid layer pattern of the main stack (one symbol per layer: M Mamba, * attention, E MoE,
    # - MLP; HF hybrid_override_pattern); "" for a model of (mixer + MLP) transformer layers
    hybrid_pattern: str = ""

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @cached_property
    def moe_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.is_moe)

    @property
    def dense_layers(self) -> int:
        return self.num_layers - self.moe_layers

    @cached_property
    def distinct_layers(self) -> tuple[Layer, ...]:
        """Distinct layer kinds in order of first appearance, then the MTP layer's kind."""
        kinds = dict.fromkeys(self.layers)
        if self.mtp_layer is not None:
            kinds[self.mtp_layer] = None
        return tuple(kinds)

    @cached_property
    def distinct_mixers(self) -> tuple[Mixer, ...]:
        return tuple(dict.fromkeys(layer.mixer for layer in self.layers if layer.mixer is not None))

    @property
    def attention_bias(self) -> bool:
        """Whether some attention layer has a QKV or output-projection bias (add_qkv_bias / add_bias_linear)."""
        return any(isinstance(m, Attention) and (m.qkv_bias or m.o_bias) for m in self.distinct_mixers)

    def layer_groups(self) -> list[tuple[Layer, int]]:
        """Distinct layers with their counts (cheap per-layer caching downstream)."""
        return list(Counter(self.layers).items())

    @cached_property
    def first_moe(self) -> MoE | None:
        for layer in self.layers:
            if isinstance(layer.mlp, MoE):
                return layer.mlp
        return None

    @cached_property
    def first_attention(self) -> Attention | None:
        for layer in self.layers:
            if isinstance(layer.mixer, Attention):
                return layer.mixer
        return None

    @property
    def num_experts(self) -> int:
        moe = self.first_moe
        return moe.num_experts if moe else 0

    @cached_property
    def features(self) -> frozenset[str]:
        """The :data:`MODEL_FEATURES` this model's layers (MTP included) have."""
        out: set[str] = set()
        for layer in self.distinct_layers:
            m, mlp = layer.mixer, layer.mlp
            if isinstance(m, GatedDeltaNet):
                out.add("gated_deltanet")
            elif isinstance(m, Mamba2):
                out.add("mamba2")
            elif isinstance(m, Attention):
                out.update(name for name, has in (("gated_attention", m.output_gate), ("attention_sinks", m.sink_logits > 0),
                                                  ("sliding_window", m.sliding_window is not None),
                                                  ("sparse_attention", m.sparse is not None)) if has)
            if isinstance(mlp, MoE) and mlp.clamped_glu:
                out.add("clamped_glu")
            if isinstance(mlp, MoE) and mlp.latent_size is not None:
                out.add("latent_moe")
        return frozenset(out)

    @property
    def architecture(self) -> str:
        """Family for layout and dispatcher advice: 'mla' (DeepSeek-V3 style), 'hybrid-gdn'
        (Qwen3-Next), 'hybrid-mamba' (Nemotron-H / Nemotron-3), 'gqa-moe' (Qwen3, Mixtral, gpt-oss, GLM)."""
        if any(layer.is_mamba for layer in self.layers):
            return "hybrid-mamba"
        if any(layer.is_linear_attention for layer in self.layers):
            return "hybrid-gdn"
        attn = self.first_attention
        if attn is not None and attn.is_mla:
            return "mla"
        return "gqa-moe"


# dataclass(frozen=True) writes a field-by-field __hash__ into each class; use the cached one.
for _cls in (SparseAttention, Attention, GatedDeltaNet, Mamba2, DenseMLP, MoE, Layer):
    _cls.__hash__ = CachedHash.__hash__  # type: ignore[method-assign]


_WITH_MTP: dict[tuple[int, int], tuple[ModelSpec, ModelSpec]] = {}


def with_mtp_layers(spec: ModelSpec, n: int) -> ModelSpec:
    """The model trained with ``n`` multi-token prediction modules (Megatron-Core ``mtp_num_layers``).

    A model whose config describes its MTP module keeps it; otherwise the module is built from the final
    decoder layer's spec, as Megatron-Core does (the MTP block spec comes from the decoder's last layer;
    Megatron Bridge flop_utils.py: "MTP construction reuses the final decoder layer spec"): Qwen3-Next's
    checkpoint holds such a module (gated attention + MoE) that its config.json does not describe, and
    Bridge's Qwen3-Next recipes train with mtp_num_layers 1. One object per (model, n), so caches keyed
    by the model stay warm."""
    if n < 0:
        raise MoeplanError(f"MTP layers must be >= 0, got {n}")
    if n == spec.mtp_layers:
        return spec
    hit = _WITH_MTP.get((id(spec), n))
    if hit is None or hit[0] is not spec:
        last = spec.layers[-1]
        if spec.hybrid_pattern:  # a hybrid stack's MTP block: attention + MoE ('*E', NemotronHConfig's default
            last = Layer(spec.first_attention, spec.first_moe)  # mtp_layers_block_type), not its last single block
        layer = (spec.mtp_layer or last) if n else None
        hit = _WITH_MTP[(id(spec), n)] = (spec, replace(spec, mtp_layers=n, mtp_layer=layer))
    return hit[1]
