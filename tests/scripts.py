"""The repository's scripts (benchmarks/, scripts/) loaded as modules for the tests that check them: one loader."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from .reference_runs import ROOT


@contextmanager
def loaded_script(relpath: str, name: str) -> Iterator[ModuleType]:
    """``ROOT / relpath`` executed as module ``name``, registered in sys.modules while in use (dataclasses look their
    module up while the script is executed) and removed after."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relpath)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
