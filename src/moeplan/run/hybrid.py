"""Megatron-Core's hybrid layer pattern (Nemotron-H / Nemotron-3): pipeline splits of the pattern, the export of
the pattern and the Mamba / LatentMoE fields under Megatron-Core's own names, per release, and the releases and
TP / CP divisibility Megatron-Core asks of a Mamba layer (the layers' costs: moeplan.engine.mamba).

Sources (NVIDIA/Megatron-LM release tags):
- core_v0.13 .. core_v0.16: ``--hybrid-override-pattern`` (MambaModel ``hybrid_override_pattern``), split evenly
  over PP (megatron/core/ssm/mamba_block.py ``_select_layers_for_pipeline_parallel``: num_layers // PP, asserting
  no virtual pipeline); the MoE symbol 'E' from 0.16 (HYBRID_MOE_SINCE);
- core_v0.17+: the unified ``--hybrid-layer-pattern`` (megatron/core/models/hybrid/hybrid_layer_allocation.py):
  '|' separates pipeline segments (their count a multiple of PP; segment vp x PP + rank on that rank and virtual
  stage), '/' appends one MTP pattern per MTP depth, which runs on the last pipeline stage; without '|' the
  layers split evenly over PP and VPP is refused.
- TransformerConfig fields (all releases read): is_hybrid_model, mamba_num_heads, mamba_head_dim,
  mamba_state_dim, mamba_num_groups; moe_latent_size from core_v0.16.
"""

from __future__ import annotations

from moeplan.models.spec import Attention, DenseMLP, Layer, Mamba2, ModelSpec, MoE

# --- Megatron-Core release rules (read from the release tags of NVIDIA/Megatron-LM)
# megatron/core/ssm/mamba_context_parallel.py ("Add Mamba context parallel", MR !2276) first ships in core_r0.13.0:
# before it a Mamba layer has no context-parallel path.
MAMBA_CP_SINCE = (0, 13)
# The hybrid pattern's MoE symbol 'E' (mamba_hybrid_layer_allocation.Symbols.MOE) and TransformerConfig
# moe_latent_size first ship in core_v0.16.0; before, a hybrid stack has only M, * and -.
HYBRID_MOE_SINCE = (0, 16)
MOE_LATENT_SINCE = (0, 16)
# core_v0.17.0 renames --hybrid-override-pattern to the unified --hybrid-layer-pattern ("|" pipeline stage
# boundaries, "/" MTP depths; megatron/core/models/hybrid/hybrid_layer_allocation.py); 0.16 and older split the
# pattern evenly over PP (mamba_block.py _select_layers_for_pipeline_parallel: num_layers // pp, no VPP).
HYBRID_LAYER_PATTERN_SINCE = (0, 17)


def layer_symbol(layer: Layer) -> str:
    """The hybrid pattern symbol of a single-block layer (hybrid_layer_allocation.Symbols)."""
    if isinstance(layer.mixer, Mamba2):
        return "M"
    if isinstance(layer.mixer, Attention):
        return "*"
    if isinstance(layer.mlp, MoE):
        return "E"
    if isinstance(layer.mlp, DenseMLP):
        return "-"
    raise ValueError(f"no hybrid symbol for {layer!r}")


MTP_PATTERN = "*E"  # the MTP module of Nemotron-3 (HF mtp_hybrid_override_pattern; moeplan.models.hf)


def hybrid_pattern_value(spec: ModelSpec, stage_layers: list[int] | None, version: tuple[int, int]) -> str:
    """The pattern string a run exports: before 0.17 the main pattern (even PP split); from 0.17 the unified
    pattern with '|' between pipeline segments (``stage_layers``: decoder layers per virtual stage in stage order,
    None for one segment) and '/' + the MTP pattern per MTP depth."""
    main = spec.hybrid_pattern
    if version < HYBRID_LAYER_PATTERN_SINCE:
        return main
    if stage_layers and len(stage_layers) > 1:
        parts, start = [], 0
        for n in stage_layers:
            parts.append(main[start:start + n])
            start += n
        main = "|".join(parts)
    return main + "".join("/" + MTP_PATTERN for _ in range(spec.mtp_layers))


def pipeline_problems(spec: ModelSpec, pp: int, vpp: int, stage_layers: list[int], mtp_stages: list[int],
                      version: tuple[int, int] | None) -> list[tuple[str, str]]:
    """(rule, reason) for each way a hybrid model's pipeline split breaks Megatron-Core's rules (empty: it runs).
    ``stage_layers``: decoder layers per virtual stage; ``mtp_stages``: the stages holding MTP modules."""
    out: list[tuple[str, str]] = []
    n = pp * vpp
    if version is not None and version < HYBRID_MOE_SINCE and "E" in spec.hybrid_pattern:
        out.append(("hybrid-moe-version", f"the hybrid pattern's MoE layers ('E') need Megatron-Core 0.16 or newer"))
    if version is not None and version < MOE_LATENT_SINCE and "latent_moe" in spec.features:
        out.append(("moe-latent-version", "moe_latent_size (LatentMoE) needs Megatron-Core 0.16 or newer"))
    if version is not None and version < HYBRID_LAYER_PATTERN_SINCE and spec.mtp_layers:
        out.append(("hybrid-mtp-version", "MTP in a hybrid model needs Megatron-Core 0.17 or newer (the unified "
                    "hybrid_layer_pattern's '/' depths; core_v0.16 MambaModel has no MTP)"))
    if n == 1:
        return out
    even = len(set(stage_layers)) == 1
    if any(s != n - 1 for s in mtp_stages):
        out.append(("hybrid-mtp-stage", "a hybrid model's MTP modules run on the last pipeline stage "
                    "(hybrid_layer_allocation.py: the '/' patterns follow the main decoder)"))
    if version is not None and version < HYBRID_LAYER_PATTERN_SINCE:
        if vpp > 1:
            out.append(("hybrid-vpp-version", "a hybrid model splits its pattern evenly over PP with no virtual "
                        "pipeline before Megatron-Core 0.17 (mamba_block.py); 0.17+ takes '|' segments"))
        elif not even:
            out.append(("hybrid-pp-version", "a hybrid model splits its pattern evenly over PP before Megatron-Core "
                        "0.17 (num_layers // PP, mamba_block.py); an uneven split needs 0.17+ ('|' segments)"))
    return out


def hybrid_fields(spec: ModelSpec) -> dict[str, object]:
    """The TransformerConfig architecture fields of a hybrid model under Megatron-Core's names (no pattern)."""
    out: dict[str, object] = {"is_hybrid_model": True}
    mamba = next((m for m in spec.distinct_mixers if isinstance(m, Mamba2)), None)
    if mamba is not None:
        out.update(mamba_num_heads=mamba.num_heads, mamba_head_dim=mamba.head_dim, mamba_state_dim=mamba.state_dim,
                   mamba_num_groups=mamba.num_groups)
    moe = spec.first_moe
    if moe is not None and moe.latent_size is not None:
        out["moe_latent_size"] = moe.latent_size
    return out


def tp_cp_problems(m: Mamba2, tp: int, cp: int) -> list[tuple[str, str]]:
    """(rule, reason) for each Megatron-Core assert a TP x CP layout breaks (mamba_mixer.py: nheads % tp,
    ngroups % tp; mamba_context_parallel.py: nheads/tp % cp, and ngroups/tp % cp or cp % (ngroups/tp))."""
    out: list[tuple[str, str]] = []
    if m.num_heads % tp:
        out.append(("mamba-heads-tp", f"{m.num_heads} Mamba heads are not divisible by TP {tp}"))
    if m.num_groups % tp:
        out.append(("mamba-groups-tp", f"{m.num_groups} Mamba groups are not divisible by TP {tp}"))
    if out or cp == 1:
        return out
    heads, groups = m.num_heads // tp, m.num_groups // tp
    if heads % cp:
        out.append(("mamba-heads-cp", f"Mamba runs head-parallel inside the CP group: {m.num_heads} heads over TP {tp} "
                    f"are not divisible by CP {cp}"))
    elif (groups < cp and cp % groups) or (groups >= cp and groups % cp):
        out.append(("mamba-groups-cp", f"{m.num_groups} Mamba groups over TP {tp} and CP {cp} do not split evenly "
                    "(mamba_context_parallel.py)"))
    return out
