"""moeplan: plan, check and explain long-context MoE training runs on Megatron Bridge / Megatron-Core."""

__version__ = "0.1.0"
