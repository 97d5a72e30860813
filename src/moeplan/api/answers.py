"""What every answer of the API says beside its numbers: the routing it assumed (moeplan.base.routing)."""

from __future__ import annotations

from typing import Any

from moeplan.engine.estimate import Estimate, run_routing
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration


def estimate_dict(est: Estimate, cal: Calibration = DEFAULT_CALIBRATION) -> dict[str, Any]:
    """An estimate as JSON (what ``moeplan estimate --json`` prints): :meth:`Estimate.as_dict` and the routing it
    assumed (:func:`run_routing`)."""
    return est.as_dict() | run_routing(est.config, cal)
