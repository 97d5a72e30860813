"""The MCP tools take moeplan's own vocabulary, all of it and nothing else: each argument's allowed values, as the
SDK's client lists the tools' input schemas, are the names in moeplan.base (precisions, dispatchers, CP
communication types, Megatron-FSDP strategies, optimizers, routings) and the export formats; the routing an
answer says (output schema) is the routing vocabulary's. A value the CLI and the API take is never refused by a
tool's schema (nvfp4 was, the one precision the MCP server had not copied)."""

from __future__ import annotations

from typing import Any

import pytest

from ..mcp_support import require_mcp

require_mcp()

import anyio  # noqa: E402  (the MCP SDK's dependency: after the skip where the extra is missing)

from mcp import Client  # noqa: E402

from moeplan.assistant.mcp_server import build_server  # noqa: E402
from moeplan.assistant.tools import EXPORT_FORMATS  # noqa: E402
from moeplan.base.routing import CUSTOM_ROUTING, ROUTINGS  # noqa: E402
from moeplan.base.vocab import (CP_COMM_TYPES, DISPATCHERS, FSDP_STRATEGIES, OPTIMIZERS,  # noqa: E402
                                PRECISIONS, RECOMPUTE_MODULES)

# argument -> the vocabulary its values come from (with the search's own words: auto = not pinned, off = no FSDP)
VOCABULARY: dict[str, set[str]] = {
    "precision": set(PRECISIONS), "dispatcher": {"auto", *DISPATCHERS}, "cp_comm_type": {"auto", *CP_COMM_TYPES},
    "optimizer": set(OPTIMIZERS), "routing": set(ROUTINGS), "format": set(EXPORT_FORMATS),
    "fsdp": {"auto", "off", *FSDP_STRATEGIES},
}
HELD_FSDP = {"off", *FSDP_STRATEGIES}  # estimate holds one layout: nothing to search


def _listed() -> dict[str, Any]:
    async def run() -> Any:
        async with Client(build_server()) as client:
            return (await client.list_tools()).tools

    return {t.name: t for t in anyio.run(run)}


@pytest.fixture(scope="module")
def listed() -> dict[str, Any]:
    return _listed()


def allowed(schema: Any) -> set[Any]:
    """Every value an argument's JSON schema enumerates (enum / const, under anyOf for an optional one)."""
    if isinstance(schema, list):
        return set().union(*(allowed(s) for s in schema))
    if not isinstance(schema, dict):
        return set()
    found = set(schema.get("enum", ())) | ({schema["const"]} if "const" in schema else set())
    return found.union(*(allowed(v) for k, v in schema.items() if k in ("anyOf", "oneOf", "allOf")))


def test_every_vocabulary_argument_allows_exactly_the_vocabulary(listed):
    seen = set()
    for tool in listed.values():
        for name, schema in tool.input_schema["properties"].items():
            if name not in VOCABULARY:
                continue
            want = HELD_FSDP if (tool.name, name) == ("estimate", "fsdp") else VOCABULARY[name]
            assert allowed(schema) - {None} == want, (tool.name, name)
            seen.add(name)
    assert seen == set(VOCABULARY)  # every vocabulary is some tool's argument


def test_the_routing_an_answer_says_is_the_routing_vocabulary(listed):
    for name in ("estimate", "plan"):
        assert allowed(listed[name].output_schema["properties"]["routing"]) == {*ROUTINGS, CUSTOM_ROUTING, None}


def test_recompute_says_every_module_it_takes(listed):
    text = listed["plan"].input_schema["properties"]["recompute"]["description"]
    assert all(m in text for m in RECOMPUTE_MODULES)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_precision_passes_the_estimate_tools_schema(precision):
    """A call with each precision gets past the tool's schema (the SDK's validation): an answer, or moeplan's own
    refusal of that precision on that GPU, never a schema violation."""

    async def run() -> Any:
        async with Client(build_server()) as client:
            return await client.call_tool("estimate", dict(model="qwen3-30b-a3b", gpu="b200", gpus=8, seq_len=4096,
                                                           gbs=64, ep=8, precision=precision))

    res = anyio.run(run)
    text = res.content[0].text
    assert not text.startswith("estimate: precision"), text
    assert not res.is_error, text
    assert res.structured_content["precision"] == precision
