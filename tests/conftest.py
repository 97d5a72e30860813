"""Shared fixtures: the reference data in ../shared (located by tests/reference_runs.shared_dir)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .reference_runs import ROOT, shared_dir  # noqa: F401  (ROOT is imported from here by the tests)

SHARED = shared_dir()
MODELS_DIR = SHARED / "models"
REFERENCE_DIR = SHARED / "reference"


@pytest.fixture(scope="session")
def shared() -> Path:
    if not MODELS_DIR.is_dir():
        pytest.fail(f"reference data missing: {MODELS_DIR} (set MOEPLAN_SHARED to the shared/ folder)")
    return SHARED
