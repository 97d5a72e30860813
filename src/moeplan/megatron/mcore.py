"""Megatron-Core's own config objects from a plan: the architecture fields of a model
(:func:`architecture_kwargs`), with the run's settings (:func:`mcore_kwargs`), and the installed
Megatron-Core's ``TransformerConfig`` / ``MLATransformerConfig`` built from them (:func:`build_mcore_config`),
so its ``__post_init__`` checks run. torch and megatron-core are optional extras: loaded only when called
(moeplan.base.extras)."""

from __future__ import annotations

import traceback
import warnings

from moeplan.base import extras
from moeplan.base.errors import MoeplanError, one_line
from moeplan.base.fields import MegatronFields, fields_for, normalize_version, version_tuple
from moeplan.base.vocab import DEFAULT_MCORE_VERSION
from moeplan.megatron.export import bridge_value, to_settings
from moeplan.models.spec import Attention, DenseMLP, GatedDeltaNet, ModelSpec, MoE
from moeplan.run.config import RunConfig

_MCORE_OWNERS = ("TransformerConfig", "ModelParallelConfig")


def _attention_kwargs(attn: Attention, f: MegatronFields) -> dict[str, object]:
    kw: dict[str, object] = {"num_attention_heads": attn.num_heads}
    if attn.is_mla:
        # MLATransformerConfig (transformer_config.py, all versions)
        kw.update(q_lora_rank=attn.q_lora_rank, kv_lora_rank=attn.kv_lora_rank, qk_head_dim=attn.qk_nope_head_dim,
                  qk_pos_emb_head_dim=attn.qk_rope_head_dim, v_head_dim=attn.v_head_dim)
        return kw
    kw.update(num_query_groups=attn.num_kv_heads, kv_channels=attn.head_dim, qk_layernorm=attn.qk_norm,
              add_qkv_bias=attn.qkv_bias)
    if attn.output_gate:
        if version_tuple(f.version) < (0, 16):
            raise MoeplanError(f"gated attention (attention_output_gate) needs Megatron-Core >= 0.16, target is {f.version}")
        kw["attention_output_gate"] = True
    return kw


def _gdn_kwargs(spec: ModelSpec, f: MegatronFields) -> dict[str, object]:
    """Gated DeltaNet fields (transformer_config.py core_v0.16+: experimental_attention_variant, linear_*)."""
    gdn = next((layer.mixer for layer in spec.layers if isinstance(layer.mixer, GatedDeltaNet)), None)
    if gdn is None:
        return {}
    if version_tuple(f.version) < (0, 16):
        raise MoeplanError(f"Gated DeltaNet layers need Megatron-Core >= 0.16, target is {f.version}")
    return {"experimental_attention_variant": "gated_delta_net",
            "linear_attention_freq": [1 if layer.is_linear_attention else 0 for layer in spec.layers],
            "linear_conv_kernel_dim": gdn.conv_kernel, "linear_key_head_dim": gdn.key_head_dim,
            "linear_value_head_dim": gdn.value_head_dim, "linear_num_key_heads": gdn.num_key_heads,
            "linear_num_value_heads": gdn.num_value_heads}


def _moe_kwargs(spec: ModelSpec, moe: MoE, f: MegatronFields) -> dict[str, object]:
    kw: dict[str, object] = {
        "num_moe_experts": moe.num_experts, "moe_router_topk": moe.top_k, "moe_ffn_hidden_size": moe.expert_ffn_hidden,
        "moe_layer_freq": [1 if layer.is_moe else 0 for layer in spec.layers],
        "moe_grouped_gemm": True,
        "moe_permute_fusion": False,  # True imports Transformer Engine kernels inside __post_init__
    }
    if moe.has_shared:
        kw["moe_shared_expert_intermediate_size"] = moe.shared_ffn_hidden
        if moe.shared_gate and version_tuple(f.version) >= (0, 16):
            kw["moe_shared_expert_gate"] = True
    return kw


def architecture_kwargs(spec: ModelSpec, version: str = DEFAULT_MCORE_VERSION) -> dict[str, object]:
    """TransformerConfig architecture fields of a model (no torch needed)."""
    f = fields_for(version)
    attn, moe = spec.first_attention, spec.first_moe
    if attn is None:
        raise MoeplanError(f"model {spec.name} has no softmax attention layer; TransformerConfig needs one")
    dense = next((layer.mlp for layer in spec.layers if isinstance(layer.mlp, DenseMLP)), None)
    ffn = dense.ffn_hidden if dense else moe.expert_ffn_hidden if moe else 4 * spec.hidden
    mlp = dense or moe
    gated = mlp.gated if mlp is not None else True
    kw: dict[str, object] = {"num_layers": spec.num_layers, "hidden_size": spec.hidden, "ffn_hidden_size": ffn,
                             "add_bias_linear": False, "gated_linear_unit": gated}
    kw.update(_attention_kwargs(attn, f))
    kw.update(_gdn_kwargs(spec, f))
    if moe is not None:
        kw.update(_moe_kwargs(spec, moe, f))
    return kw


def mcore_config_class(cfg: RunConfig) -> str:
    """'MLATransformerConfig' for MLA models, else 'TransformerConfig'."""
    attn = cfg.model.first_attention
    return "MLATransformerConfig" if attn is not None and attn.is_mla else "TransformerConfig"


def mcore_kwargs(cfg: RunConfig, version: str | None = None) -> dict[str, object]:
    """Keyword arguments for Megatron-Core's (MLA)TransformerConfig: architecture + run settings.
    Needs torch (dtypes)."""
    try:
        torch = extras.load("torch")
    except ImportError:
        raise MoeplanError("mcore_kwargs needs torch (pip install torch) for the dtype fields") from None
    f = fields_for(version or cfg.mcore_version)
    kw = architecture_kwargs(cfg.model, f.version)
    kw.update(bf16=True, params_dtype=torch.bfloat16)
    if cfg.parallel.pp > 1:
        kw["pipeline_dtype"] = torch.bfloat16
    for key, value in to_settings(cfg, f.version).items():
        knob = f.knobs[key]
        if knob.owner in _MCORE_OWNERS:
            kw[key] = bridge_value(knob, value, f)  # version-native type (scope string before 0.16)
    return kw


class McoreNotRun(MoeplanError):
    """Megatron-Core's checks could not run faithfully here: the installed release is not the one the run targets,
    or Transformer Engine is missing where the checks probe it. Says nothing about the config."""


def require_mcore() -> str:
    """The installed megatron-core's release string. A missing optional extra is bad input for the option that asks
    for it (as ``--plot`` without matplotlib): MoeplanError, one line with the install hint, which ``moeplan check
    --mcore`` raises up front (exit 2), before it reads the file, not a finding about the config."""
    try:
        with warnings.catch_warnings():  # import-time notices about this machine (no TE / Apex), not about a config
            warnings.simplefilter("ignore")
            package_info = extras.load("megatron.core").package_info
    except ImportError as exc:
        hint = ("pip install torch (a CPU build will do), then pip install 'moeplan[mcore]'"
                if (exc.name or "").split(".")[0] == "torch" else "pip install 'moeplan[mcore]'")
        raise MoeplanError(f"Megatron-Core's checks need megatron-core, which cannot be imported here "
                           f"({one_line(exc)}); {hint}") from None
    return str(package_info.__version__)


def installed_mcore_version() -> str:
    """major.minor of the installed megatron-core (MoeplanError when it is not installed)."""
    return normalize_version(require_mcore())


def build_mcore_config(cfg: RunConfig) -> object:
    """Construct the installed Megatron-Core's (MLA)TransformerConfig for the plan, so its __post_init__ checks
    run; any rejection becomes a one-line MoeplanError. :class:`McoreNotRun` when they cannot run faithfully: the
    installed release is not ``cfg.mcore_version`` (fields and checks change between releases), or a check probes
    Transformer Engine's version and TE is not installed."""
    release = require_mcore()
    target = normalize_version(cfg.mcore_version)
    try:
        version = normalize_version(release)
    except MoeplanError:  # a release moeplan's field table does not know
        version = None
    if version != target:
        raise McoreNotRun(f"Megatron-Core's TransformerConfig checks not run: the run targets Megatron-Core {target}, "
                          f"the installed one is {release} (fields and checks change between releases); install "
                          f"megatron-core {target} to run them")
    tc = extras.load("megatron.core.transformer.transformer_config")
    cls = getattr(tc, mcore_config_class(cfg))
    kwargs = mcore_kwargs(cfg, version)
    try:
        return cls(**kwargs)
    except Exception as exc:  # noqa: BLE001 - Megatron-Core rejects with ValueError, AssertionError, TypeError, ...
        if _te_missing(exc):
            raise McoreNotRun(f"Megatron-Core {version} {cls.__name__} checks not completed: the one at "
                              f"{_mcore_site(exc)} probes Transformer Engine's version and Transformer Engine is not "
                              "installed here (install transformer-engine to run them)") from None
        raise MoeplanError(f"Megatron-Core {version} {cls.__name__} rejects the plan: "
                           f"{type(exc).__name__}: {one_line(exc)[:300]}") from None


_CONFIG_FILES = ("transformer_config.py", "model_parallel_config.py")


def _mcore_site(exc: BaseException) -> str:
    """'transformer_config.py:1917': the innermost Megatron-Core config line the exception passed through."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(_CONFIG_FILES)]
    return f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else "__post_init__"


# megatron/core/utils.py: its Transformer Engine version probes (get_te_version() is None without TE)
_TE_PROBES = frozenset({"get_te_version", "is_te_min_version"})


def _te_missing(exc: BaseException) -> bool:
    """Whether the exception comes from Transformer Engine being absent (a version probe or an import of it),
    not from the config: some checks (FP8 with MoE, moe_act/layernorm recompute, delay_wgrad_compute with
    TE-scoped CUDA graphs, fused permutation) probe TE."""
    if extras.present("transformer_engine"):
        return False
    if isinstance(exc, ImportError) and (exc.name or "").split(".")[0] == "transformer_engine":
        return True
    return any(frame.name in _TE_PROBES for frame in traceback.extract_tb(exc.__traceback__))


def default_config_warnings() -> set[str]:
    """Warnings the installed Megatron-Core gives for its own defaults (e.g. 0.16's default cuda_graph_scope
    'full'): true of every config, so not findings about one (moeplan.lint.checker leaves them out)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            extras.load("megatron.core.transformer.transformer_config").TransformerConfig(
                num_layers=1, hidden_size=64, num_attention_heads=1)
        except Exception:  # noqa: BLE001 - only the warnings matter here
            pass
    return {" ".join(str(w.message).split()) for w in caught}
