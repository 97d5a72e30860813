"""Shared fixtures: the reference data in ../shared (next to the project root)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    env = os.environ.get("MOEPLAN_SHARED")
    return Path(env) if env else ROOT.parent / "shared"


SHARED = shared_dir()
MODELS_DIR = SHARED / "models"
REFERENCE_DIR = SHARED / "reference"


@pytest.fixture(scope="session")
def shared() -> Path:
    if not MODELS_DIR.is_dir():
        pytest.fail(f"reference data missing: {MODELS_DIR} (set MOEPLAN_SHARED to the shared/ folder)")
    return SHARED
