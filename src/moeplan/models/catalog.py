"""Built-in model catalog: Hugging Face config.json files shipped inside the package.

Each file under ``data/`` is a model's real config.json with ``_source`` naming where it was copied
from. ``MODEL`` anywhere in the CLI is a catalog name or a path to a config.json.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

from moeplan.base.errors import MoeplanError
from moeplan.models.hf import read_config, spec_from_dict
from moeplan.models.spec import ModelSpec

_PACKAGE = "moeplan.models.data"


def catalog_names() -> list[str]:
    """Names of the built-in models, sorted."""
    files = resources.files(_PACKAGE).iterdir()
    return sorted(f.name[: -len(".json")] for f in files if f.name.endswith(".json"))


@lru_cache(maxsize=None)
def _catalog_spec(name: str) -> ModelSpec:
    text = resources.files(_PACKAGE).joinpath(f"{name}.json").read_text(encoding="utf-8")
    return spec_from_dict(json.loads(text), name, f"catalog:{name}")


def load_model(model: str) -> ModelSpec:
    """A catalog name (case-insensitive) or a path to a config.json."""
    if not model.strip():
        raise MoeplanError("empty model name: give a catalog name (moeplan models) or a config.json path")
    if any(not c.isprintable() for c in model):  # a newline would split the one-line answers that name the model
        raise MoeplanError(f"model name {model!r} holds a newline or another control character")
    key = model.strip().lower()
    if key in catalog_names():
        return _catalog_spec(key)
    path = Path(model)
    if path.is_dir() and (path / "config.json").is_file():
        return read_config(path / "config.json")
    if path.suffix == ".json" or path.exists():
        return read_config(path)
    raise MoeplanError(
        f"unknown model '{model}': not a catalog name ({', '.join(catalog_names())}) nor a config.json path"
    )
