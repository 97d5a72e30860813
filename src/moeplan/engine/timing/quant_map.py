"""The precision each weight GEMM of a quantized run runs in, where a recipe keeps some modules or layers out of
its low-precision format:

* a Transformer Engine quantization config (Megatron-Core ``TransformerConfig.quant_recipe``, read by
  ``megatron.core.quantization.utils.load_quantization_recipe``; Megatron-LM ``--te-precision-config-file``):
  glob patterns over module names, each mapped to a TE recipe (moeplan.base.vocab.TE_QUANT_MAPS, the knob
  ``te_quant_map``);
* the layers Megatron-Core keeps in BF16 at the start and end of the stack (``first_last_layers_bf16`` with
  ``num_layers_at_start_in_bf16`` / ``num_layers_at_end_in_bf16``: megatron/core/fp4_utils.py and fp8_utils.py
  ``get_fp4_context`` / ``get_fp8_context`` return a null context for ``layer_no < num_layers_at_start_in_bf16`` and
  ``layer_no >= num_layers - num_layers_at_end_in_bf16``, and the layer's TE modules then run in the BF16 autocast
  dtype; the knobs ``bf16_start_layers`` / ``bf16_end_layers``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from moeplan.base.vocab import TE_QUANT_MAPS
from moeplan.models.spec import Layer

if TYPE_CHECKING:
    from moeplan.engine.flops import Gemm
    from moeplan.run.config import RunConfig


def gemm_precision(cfg: RunConfig, g: Gemm) -> str:
    """The precision GEMM ``g`` runs in: the run's, unless its TE quantization config (``te_quant_map``) maps the
    module elsewhere (the MTP modules' ``mtp`` entry is applied to their whole layer: moeplan.engine.timing.step)."""
    return TE_QUANT_MAPS[cfg.te_quant_map].get(g.name, cfg.precision)


def bf16_layer_counts(cfg: RunConfig, first: bool = False, last: bool = True) -> dict[Layer, int]:
    """How many of each distinct layer an FP8 / FP4 run keeps in BF16 (Megatron-Core ``first_last_layers_bf16``): the
    first ``cfg.bf16_start_layers`` of the stack where ``first`` (the first pipeline rank's share) and the last
    ``cfg.bf16_end_layers`` where ``last`` (the last rank's); empty for BF16 runs, where there is nothing to keep."""
    if not cfg.fp8:
        return {}
    layers = cfg.model.layers
    start = (cfg.bf16_start_layers or 0) if first else 0
    end = (cfg.bf16_end_layers or 0) if last else 0
    picked = set(range(min(start, len(layers)))) | set(range(len(layers) - min(end, len(layers)), len(layers)))
    counts: dict[Layer, int] = {}
    for i in sorted(picked):
        counts[layers[i]] = counts.get(layers[i], 0) + 1
    return counts


def bf16_config(cfg: RunConfig) -> RunConfig:
    """The run as its BF16 layers run it: no FP8 / FP4 autocast, hence no module overrides and no FP8 attention
    either (TE runs fp8_dot_product_attention inside the FP8 autocast only, which these layers leave: a valid BF16
    run, as RunConfig's own check wants)."""
    return cfg.evolve(precision="bf16", te_quant_map="none", bf16_start_layers=None, bf16_end_layers=None,
                      fp8_attention=False)
