"""Routing the estimate assumes: force-balanced (Megatron-Core ``moe_router_force_load_balancing``, what the
published perf recipes benchmark with) or natural (the router's own choices under its load-balancing loss, what a
real training run sees). Natural routing leaves the busiest expert rank with more rows than the mean every layer,
and dropless MoE waits for it: moeplan costs that as the routing imbalance (rows on the busiest rank / mean,
``RunConfig.moe_imbalance``), one global value for natural routing (calibration ``natural_routing_imbalance``, set
from the shared forced-vs-natural pair benchmarks/calibrate.py can express; docs/calibration.md)."""

from __future__ import annotations

from moeplan.base.errors import MoeplanError

ROUTINGS = ("forced", "natural")
DEFAULT_ROUTING = "forced"


def routing_imbalance(routing: str, natural_imbalance: float) -> float:
    """The routing imbalance an estimate takes for ``routing`` (forced: 1.0; natural: ``natural_imbalance``,
    the calibration's ``natural_routing_imbalance``)."""
    if routing not in ROUTINGS:
        raise MoeplanError(f"routing must be one of {', '.join(ROUTINGS)}, got {routing!r}")
    return 1.0 if routing == "forced" else float(natural_imbalance)


__all__ = ["DEFAULT_ROUTING", "ROUTINGS", "routing_imbalance"]
