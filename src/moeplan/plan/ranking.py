"""The order of plans: fastest first, with plans inside each other's error band ranked as ties."""

from __future__ import annotations

import math

from moeplan.hardware import GPUSpec
from moeplan.plan.advice import guidance_distance, recipe_distance
from moeplan.plan.space import Candidate


def rank_candidates(cands: list[Candidate], gpu: GPUSpec, band_log: float,
                    outside_fit: bool = False) -> tuple[list[Candidate], dict[int, str]]:
    """Order plans: fastest first, except that plans whose error bands overlap the fastest plan's
    (tokens/s x exp(+band) >= fastest x exp(-band)) are ties, ordered by closeness to a layout
    measured for this model and system (moeplan/hardware/measured_layouts.yaml), then by the
    guidance's defaults (CP = seq / 4096, the dispatcher order), then by speed: that order picks the first; the
    other ties follow it by speed. Returns the order and,
    per tied candidate (by id), the reason it sits where it does. ``outside_fit``: the model is outside the
    fit (its displayed range reaches lower, timing.TimeEstimate.band_low_log); ties still use the fit's band,
    and the reason says so."""
    from_fast = sorted(cands, key=lambda c: -c.tokens_per_s_per_gpu)
    if not from_fast:
        return [], {}
    lead = from_fast[0].tokens_per_s_per_gpu
    floor = lead * math.exp(-2 * band_log)
    tied = [c for c in from_fast if c.tokens_per_s_per_gpu >= floor]
    rest = [c for c in from_fast if c.tokens_per_s_per_gpu < floor]
    if len(tied) == 1:
        return from_fast, {}
    near = {id(c): recipe_distance(c.cfg, gpu) for c in tied}

    def key(c: Candidate) -> tuple[float, float, float]:
        r = near[id(c)]
        return (round(r[0], 6) if r else math.inf, guidance_distance(c.cfg, gpu), -c.tokens_per_s_per_gpu)

    tied.sort(key=key)
    # the preference picks plan 1; the other ties follow by speed, so the fastest estimate is never buried behind
    # slower plans that only share plan 1's reason to be first (DeepSeek-V3 32K on 128 H100: 21 CP 8 ties ahead of it)
    tied[1:] = sorted(tied[1:], key=lambda c: -c.tokens_per_s_per_gpu)
    down, up = math.exp(-band_log), math.exp(band_log)
    rule = (f"so the estimates do not order these plans (each band is the estimate {down - 1:+.0%}/{up - 1:+.0%}, "
            f"x exp(+-{band_log:.3f}), the cross-validated error"
            + (" of the fit, not the wider range below that this model, outside the fit, shows: a shortfall of the "
               "model's own shifts every plan alike" if outside_fit else "")
            + f": bands overlap the fastest's down to {floor:,.0f} tokens/s/GPU, {1 - floor / lead:.0%} below it)")
    why: dict[int, str] = {}
    for c in tied:
        tps = c.tokens_per_s_per_gpu
        if c is from_fast[0]:
            text = (f"Tie: {tps:,.0f} tokens/s/GPU is the fastest estimate, but slower plans are within the model's "
                    f"error of it: their bands overlap its band ({tps * down:,.0f}-{tps * up:,.0f}), {rule}")
        else:
            text = (f"Tie: {tps:,.0f} tokens/s/GPU is within the model's error of the fastest estimate "
                    f"({lead:,.0f}, {tps / lead - 1:+.0%}): its band ({tps * down:,.0f}-{tps * up:,.0f}) overlaps the "
                    f"fastest estimate's band ({lead * down:,.0f}-{lead * up:,.0f}), {rule}")
        r = near[id(c)]
        many = f"the {len(tied)} plans the estimates cannot order"
        if c is not tied[0]:  # the decision first, then the band arithmetic behind it
            lead_in = (f"Fastest estimate, ranked after plan 1: among {many}, the preference puts plan 1 first"
                       if c is from_fast[0] else f"Ranked by speed after plan 1, among {many}")
        elif r is not None and r[0] <= 1e-9:
            lead_in = f"First among {many}: it matches the measured recipe ({r[1]['source']})"
        elif r is not None:
            lead_in = (f"First among {many}: the closest to the measured recipe TP{r[1]['tp']} PP{r[1]['pp']} "
                       f"VPP{r[1]['vpp']} CP{r[1]['cp']} EP{r[1]['ep']} at {r[1]['seq_len']:,} tokens on "
                       f"{r[1]['gpus']} GPUs ({r[1]['source']})")
        else:
            lead_in = (f"First among {many}: no measured recipe for this model and system, so the guidance's "
                       "defaults (CP = seq/4096, dispatcher order) pick it")
        text = f"{lead_in}. {text}"
        why[id(c)] = text + "."
    return tied + rest, why


__all__ = ["rank_candidates"]
