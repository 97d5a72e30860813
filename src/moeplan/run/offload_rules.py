"""Fine-grained activation offload rules that Megatron-Core asserts (transformer_config.py ``__post_init__``), as one
line each: shared by the cost model's refusal (moeplan.engine.knobs) and the run-file checks (moeplan.megatron.asserts).
"""

from __future__ import annotations

from collections.abc import Iterable


def fused_group_mlp_problem(offload: Iterable[str], op_fuser: bool) -> str | None:
    """Why Megatron-Core 0.19 refuses the ``fused_group_mlp`` offload label with these labels (core_v0.19.0
    transformer_config.py __post_init__), or None: it needs ``use_transformer_engine_op_fuser`` (the grouped MLP is
    one TE op; moeplan runs it so with the sync-free MoE bundle, RunConfig.experts_op_fused) and offloads the whole
    grouped MLP, so not with expert_fc1 or moe_act."""
    partial = sorted({"expert_fc1", "moe_act"} & set(offload))
    if partial:
        return (f"offload module fused_group_mlp offloads the whole fused grouped MLP: not with {', '.join(partial)} "
                "(Megatron-Core 0.19 raises)")
    if not op_fuser:
        return ("offload module fused_group_mlp needs use_transformer_engine_op_fuser (the experts as one TE op; "
                "moeplan exports it with --rank-capacity-factor at expert TP 1)")
    return None
