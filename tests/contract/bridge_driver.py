"""Apply moeplan exports to real Megatron Bridge recipes: runs INSIDE a Bridge environment built by
scripts/bridge_envs.sh (its own interpreter: Bridge 0.6 needs Python 3.12), never imports moeplan.

Input (stdin, JSON): {"te_version": "2.14", "cases": [{"name", "recipe": "module:function",
"hf_id", "hf_config": "/path/config.json", "world_size", "overrides": [...] | null, "yaml": "/path" | null,
"env": {NAME: VALUE} (the job's environment the export names), "read": [paths]}]}.
Output (stdout, last line, JSON): [{"name", "ok", "stage", "error", "effective": {path: value after
validation, for each path in "read"}}] where stage is where it failed:
"recipe" (building the recipe), "override" (Bridge's process_config_with_overrides) or "validate"
(Bridge's runtime_config_update, which applies mixed precision and communication overlap and then
calls ConfigContainer.validate(); plain validate() where a release has no runtime_config_update).

What needs a GPU or the network is stood in for, and only that; each stand-in says why.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import io
import json
import logging
import os
import shutil
import sys
import tempfile
import traceback
import types
import warnings
from contextlib import redirect_stdout


# ------------------------------------------------------------------ stand-in: Transformer Engine
# Transformer Engine is a CUDA extension (it will not install or import without the CUDA toolkit and a
# GPU driver), while Bridge's recipe modules import it at module level (peft/lora_layers.py) and
# Megatron-Core asks its version. The stand-in is an importable package of that name whose attributes
# are inert classes, with the version the recipes' container ships (given by the caller). No check the
# tests rely on runs TE code: ConfigContainer.validate() only reads versions and field values.


class _Inert:
    """Any TE class or function: constructible, callable, subclassable, attribute-transparent."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __call__(self, *args: object, **kwargs: object) -> "_Inert":
        return _Inert()

    def __getattr__(self, name: str) -> "_Inert":
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert()

    def __bool__(self) -> bool:
        return False


class _InertMeta(type):
    def __getattr__(cls, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        return _InertMeta(name, (_InertClass,), {})


class _InertClass(_Inert, metaclass=_InertMeta):
    pass


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        known = _SIGNATURES.get(f"{self.__name__}.{name}")
        return known if known is not None else _InertMeta(name, (_InertClass,), {})


class _FusedAdam(_InertClass):
    """TE's FusedAdam as Megatron-Core's OptimizerConfig inspects it (--use-precision-aware-optimizer asks
    for these keywords; transformer_engine/pytorch/optimizers/fused_adam.py, TE 2.x)."""

    def __init__(self, params=None, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8,  # noqa: ANN001
                 weight_decay=0.0, amsgrad=False, *, master_weights=False, master_weight_dtype=None,
                 exp_avg_dtype=None, exp_avg_sq_dtype=None, use_decoupled_grad=False, **kwargs) -> None:
        pass


# Objects whose call signature a check reads (everything else is inert).
_SIGNATURES: dict[str, object] = {"transformer_engine.pytorch.optimizers.FusedAdam": _FusedAdam}


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, prefixes: tuple[str, ...], version: str) -> None:
        self.prefixes = prefixes
        self.version = version

    def find_spec(self, fullname, path, target=None):  # noqa: ANN001
        if fullname.split(".")[0] in self.prefixes:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):  # noqa: ANN001
        mod = _StubModule(spec.name)
        mod.__path__ = []  # a package: submodules resolve through this finder too
        mod.__version__ = self.version
        return mod

    def exec_module(self, module) -> None:  # noqa: ANN001
        return None


def install_te_stand_in(version: str) -> None:
    sys.meta_path.insert(0, _StandInFinder(("transformer_engine", "transformer_engine_torch"), version))
    # Triton compiles GPU kernels and comes with CUDA builds of torch only; Megatron-Core's inference and
    # Mamba modules import it at module level (Bridge imports those through its model registry). Stood in
    # the same way where the environment's torch has none (the CPU build).
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        sys.meta_path.insert(0, _StandInFinder(("triton",), "3.0.0"))
    # importlib.metadata.version("transformer-engine") is Megatron-Core's fallback; answer it the same way
    import importlib.metadata as md

    real = md.version

    def version_of(name: str) -> str:
        if name.replace("_", "-") in ("transformer-engine", "transformer-engine-torch"):
            return version
        return real(name)

    md.version = version_of


# ------------------------------------------------------------------ stand-in: Hugging Face Hub
# Recipes call AutoBridge.from_hf_pretrained("<org>/<model>"), which downloads config.json. The test
# machine has no network; the stand-in serves moeplan's own copy of that model's config.json (the
# same file moeplan plans from) from a local directory, and the Hub is set offline so nothing else is
# fetched.


def install_hf_stand_in(hf_configs: dict[str, str]) -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from megatron.bridge import AutoBridge

    root = tempfile.mkdtemp(prefix="moeplan-hf-")
    local: dict[str, str] = {}
    for hf_id, path in hf_configs.items():
        d = os.path.join(root, hf_id.replace("/", "--"))
        os.makedirs(d, exist_ok=True)
        shutil.copyfile(path, os.path.join(d, "config.json"))
        local[hf_id] = d
    original = AutoBridge.from_hf_pretrained.__func__  # classmethod

    def from_hf_pretrained(cls, path, *args, **kwargs):  # noqa: ANN001
        return original(cls, local.get(str(path), path), *args, **kwargs)

    AutoBridge.from_hf_pretrained = classmethod(from_hf_pretrained)


# ------------------------------------------------------------------ stand-in: the GPU's properties
# Recipes choose the flex dispatcher backend by the GPU's compute capability and name
# (training/flex_dispatcher_backend.py: torch.cuda.get_device_properties(0)); there is no GPU here, so
# the properties of the GPU the export was planned for (the caller's "gpu") answer.

_GPU = {"name": "NVIDIA H100 80GB HBM3", "major": 9, "minor": 0, "total_memory": 80 * 2**30,
        "multi_processor_count": 132}


def install_device_stand_in() -> None:
    import torch

    def properties(device: object = None) -> types.SimpleNamespace:
        return types.SimpleNamespace(**_GPU)

    torch.cuda.get_device_properties = properties
    torch.cuda.get_device_capability = lambda device=None: (_GPU["major"], _GPU["minor"])
    torch.cuda.get_device_name = lambda device=None: _GPU["name"]


def set_gpu(gpu: dict | None) -> None:
    if gpu:
        _GPU.update(gpu)


# ------------------------------------------------------------------ stand-in: the launcher's world
# ConfigContainer.validate() derives the data-parallel size from the world size the launcher
# (torchrun / Slurm) exports; no process group exists here, so WORLD_SIZE says the job's GPU count.


def set_world(world_size: int) -> None:
    os.environ["WORLD_SIZE"] = str(world_size)
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")


# ------------------------------------------------------------------ one case


def _recipe(spec: str):  # noqa: ANN202
    module, _, func = spec.partition(":")
    return getattr(importlib.import_module(module), func)


_JOB_ENV: set[str] = set()


def _set_job_env(env: dict[str, str]) -> None:
    """The job's environment an export asks for (its '# moeplan:' NAME=VALUE items); the previous case's unset."""
    for name in _JOB_ENV - set(env):
        os.environ.pop(name, None)
    os.environ.update(env)
    _JOB_ENV.clear()
    _JOB_ENV.update(env)


def _plain(value: object) -> object:
    """A config value as JSON: torch dtypes by name ('bfloat16'), enums by value, containers item by item."""
    import enum

    import torch

    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, enum.Enum):  # Megatron-Core's CudaGraphScope / CudaGraphModule: the member name
        return value.value if isinstance(value.value, str) else value.name
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _read(cfg: object, path: str) -> object:
    obj = cfg
    for part in path.split("."):
        if not hasattr(obj, part):
            return {"missing": path}
        obj = getattr(obj, part)
    return _plain(obj)


def run_case(case: dict) -> dict:
    out = {"name": case["name"], "ok": False, "stage": "recipe", "error": None}
    try:
        set_world(int(case["world_size"]))
        _set_job_env(case.get("env") or {})
        set_gpu(case.get("gpu"))
        cfg = _recipe(case["recipe"])()
        out["stage"] = "override"
        from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

        cfg = process_config_with_overrides(cfg, config_filepath=case.get("yaml"),
                                            cli_overrides=case.get("overrides") or None)
        out["stage"] = "validate"
        import megatron.bridge.training.config as bridge_config

        update = getattr(bridge_config, "runtime_config_update", None)
        if update is not None:
            update(cfg)
        else:
            cfg.validate()
        out["ok"] = True
        out["stage"] = "done"
        out["effective"] = {p: _read(cfg, p) for p in case.get("read", [])}
    except BaseException as exc:  # noqa: BLE001 - every failure is a result, reported to the test
        if isinstance(exc, KeyboardInterrupt):
            raise
        cause = exc.__cause__ or exc
        out["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        if cause is not exc:
            out["error"] += f" (caused by {type(cause).__name__}: {cause})"[:1000]
        out["traceback"] = traceback.format_exc(limit=-4)[-3000:]
    return out


def main() -> int:
    request = json.load(sys.stdin)
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    install_te_stand_in(request["te_version"])
    install_device_stand_in()
    results = []
    noise = io.StringIO()
    with redirect_stdout(noise):  # recipes and Bridge print; the last stdout line is the answer
        install_hf_stand_in({c["hf_id"]: c["hf_config"] for c in request["cases"]})
        for case in request["cases"]:
            results.append(run_case(case))
    sys.stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
