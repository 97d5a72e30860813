"""What every answer of the API says beside its numbers: the routing it assumed (moeplan.base.routing)."""

from __future__ import annotations

from typing import Any

from moeplan.base.routing import routing_fields
from moeplan.engine.estimate import Estimate
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration
from moeplan.run.config import RunConfig


def run_routing(cfg: RunConfig, cal: Calibration = DEFAULT_CALIBRATION) -> dict[str, Any]:
    """The routing a run assumes, as every answer says it (moeplan.base.routing.routing_fields: ``routing`` and
    ``moe_imbalance``, both None for a model without experts); ``cal`` names the imbalance natural routing stands
    for."""
    return routing_fields(cfg.moe_imbalance if cfg.model.num_experts else None, cal.natural_routing_imbalance)


def estimate_dict(est: Estimate, cal: Calibration = DEFAULT_CALIBRATION) -> dict[str, Any]:
    """An estimate as JSON (what ``moeplan estimate --json`` prints): :meth:`Estimate.as_dict` and the routing it
    assumed (:func:`run_routing`)."""
    return est.as_dict() | run_routing(est.config, cal)
