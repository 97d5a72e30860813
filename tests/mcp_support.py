"""The MCP SDK for the tests of `moeplan mcp`: skipped where the optional extra is missing, unless MOEPLAN_STRICT=1
(what .ci/run sets: scripts/test.sh installs the extra, so its absence there is an error, as for megatron-core)."""

from __future__ import annotations

import importlib.util
import os

import pytest


def require_mcp() -> None:
    """Call at module level in a test module that needs the SDK."""
    if importlib.util.find_spec("mcp") is not None:
        return
    if os.environ.get("MOEPLAN_STRICT") == "1":
        raise RuntimeError("MOEPLAN_STRICT=1 but the MCP SDK is missing: pip install -e '.[mcp]'")
    pytest.skip("the MCP server tests need the MCP SDK: pip install -e '.[mcp]'", allow_module_level=True)
