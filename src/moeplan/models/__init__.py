"""Model architectures: spec dataclasses, Hugging Face config readers and the built-in catalog."""

from moeplan.models.catalog import catalog_names, load_model
from moeplan.models.hf import read_config, spec_from_dict
from moeplan.models.spec import Attention, DenseMLP, GatedDeltaNet, Layer, MoE, ModelSpec

__all__ = [
    "Attention",
    "DenseMLP",
    "GatedDeltaNet",
    "Layer",
    "MoE",
    "ModelSpec",
    "catalog_names",
    "load_model",
    "read_config",
    "spec_from_dict",
]
