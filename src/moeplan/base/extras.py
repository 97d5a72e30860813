"""The optional extras (pyproject.toml ``[project.optional-dependencies]``): the one place moeplan imports a
package that may be absent, when a feature asks for it.

Every other import is a statement at the top of its module (tests/contract/test_imports.py holds it below the
API). An optional extra cannot be: torch and megatron-core take seconds to import where they are installed and
are missing where they are not, so ``moeplan check`` without ``--mcore`` must never load them. The modules that
need one (moeplan.megatron.mcore) name it here and load it when called; the contract test reads :data:`OPTIONAL`
to hold that list to the extras.
"""

from __future__ import annotations

import sys
from types import ModuleType

# module -> the extra (or the install step) that provides it
OPTIONAL: dict[str, str] = {
    "torch": "pip install torch (a CPU build will do)",
    "megatron.core": "pip install 'moeplan[mcore]'",
    "megatron.core.transformer.transformer_config": "pip install 'moeplan[mcore]'",
    "transformer_engine": "pip install transformer-engine",
}


def load(name: str) -> ModuleType:
    """The optional module ``name`` (one of :data:`OPTIONAL`), imported now; ImportError as ``import`` raises it
    where it is absent (its ``name`` says which package is missing)."""
    if name not in OPTIONAL:
        raise ValueError(f"{name} is not an optional extra of moeplan (moeplan.base.extras.OPTIONAL)")
    __import__(name)  # the import statement's own hook (builtins.__import__), so a test can stand in for it
    return sys.modules[name]


def present(name: str) -> bool:
    """Whether the optional module ``name`` imports here."""
    try:
        load(name)
    except ImportError:
        return False
    return True
