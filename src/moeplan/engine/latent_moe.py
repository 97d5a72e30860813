"""LatentMoE (Nemotron-3 Super): routed experts computed in a smaller latent width.

Megatron-Core megatron/core/transformer/moe/moe_layer.py: with ``moe_latent_size`` the layer projects the hidden
state down (fc1_latent_proj, hidden -> latent, a TELinear with parallel_mode "duplicated": replicated, not split by
TP) before the token dispatcher, so the dispatch and combine move latent-wide tokens (token_dispatcher.py
hidden_dim = moe_latent_size or hidden_size); the experts' fc1 / fc2 take and give the latent width (experts.py);
after the combine fc2_latent_proj projects back (latent -> hidden). The shared expert and the router see the full
hidden state. HF NemotronHMoE names the same weights fc1_latent_proj / fc2_latent_proj.
FLOPs as Megatron counts them (training.py ``moe_layer_flops``): routed 4 x latent x ffn x top-k (x 3/2 gated)
plus 4 x hidden x latent for the two projections.
"""

from __future__ import annotations

from moeplan.models.spec import MoE


def expert_width(m: MoE, hidden: int) -> int:
    """The width of the tokens the routed experts and the EP dispatch see: the latent width, else the hidden."""
    return m.latent_size if m.latent_size is not None else hidden


def latent_proj_params(m: MoE, hidden: int) -> int:
    """fc1_latent_proj and fc2_latent_proj weights (no bias: add_bias_linear False in the Nemotron recipes)."""
    return 2 * hidden * m.latent_size if m.latent_size is not None else 0


def latent_proj_fwd_flops(m: MoE, hidden: int) -> float:
    """Forward FLOPs per token of the two latent projections (2 GEMMs of hidden x latent)."""
    return 4.0 * hidden * m.latent_size if m.latent_size is not None else 0.0


def dispatch_width_ratio(m: MoE, hidden: int) -> float:
    """How much narrower the EP dispatch / combine payload is than a hidden-wide token (1.0 without a latent)."""
    return expert_width(m, hidden) / hidden
