"""Megatron-Core / Megatron Bridge / Megatron-LM names for every moeplan knob, per Megatron-Core version.

One field table drives both directions (:mod:`moeplan.base.fields`: the knob table -- Megatron-Core field,
Bridge paths, Megatron-LM flag, the release it appeared in -- and the version rules; it lives in the foundation
because the engine asks it version questions). Each job is its own module:

* :mod:`moeplan.megatron.export` -- a run as settings, Bridge overrides, Bridge YAML, Megatron-LM flags.
* :mod:`moeplan.megatron.read` -- a Bridge YAML, a file of Bridge overrides or a Megatron-LM argument list
  back into settings (one module per input format).
* :mod:`moeplan.megatron.to_run` -- settings -> :class:`~moeplan.run.config.RunConfig`.
* :mod:`moeplan.megatron.mcore` -- Megatron-Core's own ``TransformerConfig`` built from a plan.

Facts (field names, flags, allowed values, the version each appeared) were read from the public
NVIDIA/Megatron-LM tags core_v0.13.1 ... core_v0.19.0 and NVIDIA-NeMo/Megatron-Bridge tags
v0.2.0 ... v0.6.0; see ``research/config_fields.md``. No code is taken from those repositories.

This package stands beside the engine (:mod:`moeplan.engine`): both build on :mod:`moeplan.run`, neither
imports the other.
"""
