"""The order of plans: fastest first, with plans inside each other's error band ranked as ties."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from moeplan.hardware import GPUSpec
from moeplan.plan.advice import cp_start, guidance_key, recipe_closeness, recipe_distance
from moeplan.plan.space import Candidate


def rank_candidates(cands: list[Candidate], gpu: GPUSpec, band_log: float,
                    outside_fit: bool = False) -> tuple[list[Candidate], dict[int, str]]:
    """Order plans: fastest first, except that plans whose error bands overlap the fastest plan's
    (tokens/s x exp(+band) >= fastest x exp(-band)) are ties, ordered by (i) closeness to a layout measured for
    this model and system at a sequence length within 2x (moeplan/hardware/measured_layouts.yaml,
    advice.recipe_distance), (ii) the guidance (advice.guidance_key: DP >= 2 before DP 1, CP nearest seq / 4096,
    the dispatcher order), (iii) the estimate: that order picks the first; the other ties follow it by speed.
    Returns the order and, per tied candidate (by id), the reason it sits where it does: the rule that decided,
    in one sentence, then the band arithmetic. ``outside_fit``: the model is outside the fit (its displayed range
    reaches lower, timing.TimeEstimate.band_low_log); ties still use the fit's band, and the reason says so."""
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

    def key(c: Candidate) -> tuple[float, bool, float, int, float]:
        return (recipe_closeness(near[id(c)]), *guidance_key(c.cfg, gpu), -c.tokens_per_s_per_gpu)

    tied.sort(key=key)
    # the preference picks plan 1; the other ties follow by speed, so the fastest estimate is never buried behind
    # slower plans that only share plan 1's reason to be first (DeepSeek-V3 32K on 128 H100: 21 CP 8 ties ahead of it)
    tied[1:] = sorted(tied[1:], key=lambda c: -c.tokens_per_s_per_gpu)
    first = _deciding_rule(tied[0], from_fast[0], key, near[id(tied[0])])
    down, up = math.exp(-band_log), math.exp(band_log)
    rule = (f"so the estimates do not order these plans (each band is the estimate {down - 1:+.0%}/{up - 1:+.0%}, "
            f"x exp(+-{band_log:.3f}), the cross-validated error"
            + (" of the fit, not the wider range below that this model, outside the fit, shows: a shortfall of the "
               "model's own shifts every plan alike" if outside_fit else "")
            + f": bands overlap the fastest's down to {floor:,.0f} tokens/s/GPU, {1 - floor / lead:.0%} below it)")
    why: dict[int, str] = {}
    for c in tied:
        tps = c.tokens_per_s_per_gpu
        if c is tied[0]:
            lead_sentence = first
        else:
            lead_sentence = "Tie after plan 1: the tie the preference puts first leads, and the other ties follow by speed."
        if c is from_fast[0]:
            band = (f"Tie: {tps:,.0f} tokens/s/GPU is the fastest estimate, but slower plans are within the model's "
                    f"error of it: their bands overlap its band ({tps * down:,.0f}-{tps * up:,.0f}), {rule}")
        else:
            band = (f"Tie: {tps:,.0f} tokens/s/GPU is within the model's error of the fastest estimate "
                    f"({lead:,.0f}, {tps / lead - 1:+.0%}): its band ({tps * down:,.0f}-{tps * up:,.0f}) overlaps the "
                    f"fastest estimate's band ({lead * down:,.0f}-{lead * up:,.0f}), {rule}")
        why[id(c)] = f"{lead_sentence} {band}."
    return tied + rest, why


def _deciding_rule(best: Candidate, fastest: Candidate, key: Callable[[Candidate], tuple[Any, ...]],
                   recipe: tuple[float, dict[str, Any]] | None) -> str:
    """One sentence: which rule put ``best`` (plan 1) ahead of the fastest estimate ``fastest``: the first part of
    the tie key where it is ahead; the estimate itself where plan 1 is the fastest."""
    par = best.cfg.parallel
    match = recipe is not None and recipe[0] <= 1e-9
    if best is fastest:
        return ("Plan 1 because it is the fastest estimate (rule 3)"
                + (f" and matches the measured recipe ({recipe[1]['source']}) at {recipe[1]['seq_len']:,} tokens."
                   if match and recipe is not None else "."))
    mine, theirs = key(best), key(fastest)
    part = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), len(mine))
    if part == 0 and recipe is not None:
        r = recipe[1]
        if match:
            return (f"Plan 1 because it matches the measured recipe ({r['source']}) at {r['seq_len']:,} tokens "
                    "(rule 1: a recipe of this model and system within 2x of the length).")
        return (f"Plan 1 because it is closest to the measured recipe TP{r['tp']} PP{r['pp']} VPP{r['vpp']} CP{r['cp']} "
                f"EP{r['ep']} at {r['seq_len']:,} tokens on {r['gpus']} GPUs ({r['source']}) (rule 1: a recipe of this "
                "model and system within 2x of the length).")
    head = "no measured recipe of this model and system within 2x of the length, so " if recipe is None else ""
    if part == 1:
        return f"Plan 1 because it keeps DP {par.dp} ({head}rule 2, the guidance: DP >= 2 before DP 1)."
    if part == 2:
        return (f"Plan 1 because its CP {par.cp} is nearest seq/4096 = {cp_start(best.cfg.batch.seq_len)} ({head}rule 2, "
                "the guidance's CP start).")
    return (f"Plan 1 because of its dispatcher, {best.cfg.dispatcher} ({head}rule 2, the guidance's dispatcher "
            "order).")


__all__ = ["rank_candidates"]
