"""Routing the estimate assumes: force-balanced (Megatron-Core ``moe_router_force_load_balancing``, what the
published perf recipes benchmark with) or natural (the router's own choices under its load-balancing loss, what a
real training run sees). Natural routing leaves the busiest expert rank with more rows than the mean every layer,
and dropless MoE waits for it: moeplan costs that as the routing imbalance (rows on the busiest rank / mean,
``RunConfig.moe_imbalance``), one global value for natural routing (calibration ``natural_routing_imbalance``, set
from the shared forced-vs-natural pair benchmarks/calibrate.py can express; docs/calibration.md).

One place turns a question's (routing, moe_imbalance) into the imbalance (:func:`resolve_imbalance`, what the CLI,
the API, the MCP tools and the page all call; :func:`resolve_file_imbalance` where run files may say it) and says it back in every answer (:func:`routing_fields`,
:func:`routing_words`)."""

from __future__ import annotations

from typing import Any

from moeplan.base.errors import MoeplanError

ROUTINGS = ("forced", "natural")
DEFAULT_ROUTING = "forced"
CUSTOM_ROUTING = "custom"  # an answer's routing where the question gave moe_imbalance as a number of its own


def routing_imbalance(routing: str, natural_imbalance: float) -> float:
    """The routing imbalance an estimate takes for ``routing`` (forced: 1.0; natural: ``natural_imbalance``,
    the calibration's ``natural_routing_imbalance``)."""
    if routing not in ROUTINGS:
        raise MoeplanError(f"routing must be one of {', '.join(ROUTINGS)}, got {routing!r}")
    return 1.0 if routing == "forced" else float(natural_imbalance)


def resolve_imbalance(routing: Any, moe_imbalance: Any, natural_imbalance: float, *,
                      names: tuple[str, str] = ("routing", "moe_imbalance")) -> Any:
    """The routing imbalance a question asks for: ``moe_imbalance`` where given (its range is RunConfig's check),
    else ``routing``'s (None: :data:`DEFAULT_ROUTING`). Both given is refused in one line: natural routing stands
    for an imbalance. ``names`` spell the two as the caller takes them (the CLI: its flags)."""
    if routing is not None and moe_imbalance is not None:
        flag, number = names
        raise MoeplanError(f"give {flag} or {number}, not both ({flag} natural stands for an imbalance)")
    if moe_imbalance is not None:
        return moe_imbalance
    return routing_imbalance(DEFAULT_ROUTING if routing is None else routing, natural_imbalance)


def resolve_file_imbalance(routing: Any, moe_imbalance: Any, natural_imbalance: float, *,
                           names: tuple[str, str] = ("routing", "moe_imbalance")) -> Any:
    """:func:`resolve_imbalance` of a question about run files (check, explain of configs): None where neither is
    given, so each file's '# moeplan:' comment (else force-balanced routing) decides, as it does for
    ``moe_imbalance`` alone."""
    if routing is None and moe_imbalance is None:
        return None
    return resolve_imbalance(routing, moe_imbalance, natural_imbalance, names=names)


def routing_of(imbalance: float, natural_imbalance: float) -> str:
    """The routing an imbalance stands for: forced (1.0), natural (the calibration's natural_routing_imbalance),
    else :data:`CUSTOM_ROUTING` (a number the question gave)."""
    if imbalance == 1.0:
        return "forced"
    return "natural" if imbalance == float(natural_imbalance) else CUSTOM_ROUTING


def routing_fields(imbalance: float | None, natural_imbalance: float) -> dict[str, Any]:
    """What an answer (JSON) says of its routing: ``routing`` (forced, natural or custom) and ``moe_imbalance``
    (rows on the busiest expert rank / mean); both None for a model without experts (``imbalance`` None)."""
    if imbalance is None:
        return {"routing": None, "moe_imbalance": None}
    return {"routing": routing_of(imbalance, natural_imbalance), "moe_imbalance": float(imbalance)}


def routing_words(fields: dict[str, Any]) -> str:
    """:func:`routing_fields` in words, for tables and the page ('' for a model without experts)."""
    routing, imbalance = fields.get("routing"), fields.get("moe_imbalance")
    if routing is None or imbalance is None:
        return ""
    if routing == "forced":
        return "force-balanced routing"
    said = f"routing imbalance {imbalance:.4g} (busiest expert rank / mean)"
    return f"natural routing, {said}" if routing == "natural" else said


__all__ = ["CUSTOM_ROUTING", "DEFAULT_ROUTING", "ROUTINGS", "resolve_file_imbalance", "resolve_imbalance", "routing_fields", "routing_imbalance",
           "routing_of", "routing_words"]
