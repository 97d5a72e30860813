"""The order of plans: fastest first, with plans inside each other's error band ranked as ties."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from moeplan.hardware import GPUSpec
from moeplan.plan.advice import cp_start, guidance_key, recipe_closeness, recipe_distance
from moeplan.plan.space import Candidate


def listed_plans(ordered: list[Candidate], twin_of: Mapping[int, Candidate]) -> list[Candidate]:
    """The plans a ranked list shows, one run per layout: the first run, then the layouts' own runs (not their
    dispatcher twins, ``twin_of``: a twin's id -> its layout's run) in rank order. A twin that is plan 1 is followed
    by its layout's own run; a layout's own run that is plan 1 has none of its twins listed."""
    return ordered[:1] + [c for c in ordered[1:] if id(c) not in twin_of]


def rank_candidates(cands: list[Candidate], gpu: GPUSpec, band_log: float, outside_fit: bool = False,
                    twin_of: Mapping[int, Candidate] | None = None) -> tuple[list[Candidate], dict[int, str]]:
    """Order plans: fastest first, except that plans whose error bands overlap the fastest plan's
    (tokens/s x exp(+band) >= fastest x exp(-band)) are ties, ordered by (i) closeness to a layout measured for
    this model and system at a sequence length within 2x (moeplan/hardware/measured_layouts.yaml,
    advice.recipe_distance), (ii) the guidance (advice.guidance_key: DP >= 2 before DP 1, CP nearest seq / 4096,
    the dispatcher order), (iii) the estimate: that order picks the first; the other ties follow it by speed.
    Returns the order and, per tied candidate (by id), the reason it sits where it does: the rule that decided,
    in one sentence, then the band arithmetic. ``outside_fit``: the model is outside the fit (its displayed range
    reaches lower, timing.TimeEstimate.band_low_log); ties still use the fit's band, and the reason says so.
    ``twin_of``: the dispatcher twins among ``cands`` (a twin's id -> its layout's own run), which the list leaves
    out (:func:`listed_plans`): where the fastest estimate is one, the reasons name it as the dispatcher
    alternative of its layout's plan."""
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
    unlisted = _unlisted_fastest(from_fast[0], tied + rest, twin_of or {})
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
                    f"({lead:,.0f}, {tps / lead - 1:+.0%}{unlisted(c)}): its band ({tps * down:,.0f}-{tps * up:,.0f}) "
                    f"overlaps the fastest estimate's band ({lead * down:,.0f}-{lead * up:,.0f}), {rule}")
        why[id(c)] = f"{lead_sentence} {band}."
    return tied + rest, why


def _unlisted_fastest(fastest: Candidate, ordered: list[Candidate],
                      twin_of: Mapping[int, Candidate]) -> Callable[[Candidate], str]:
    """Per plan, what the fastest estimate is where it is a dispatcher twin the list leaves out: its layout's plan
    (this plan, or the other by number in :func:`listed_plans` and layout) with the twin's dispatcher; empty where
    the fastest estimate is listed."""
    listed = listed_plans(ordered, twin_of)
    if any(c is fastest for c in listed):
        return lambda c: ""
    own = twin_of[id(fastest)]
    n = next(i for i, c in enumerate(listed, 1) if c is own)
    swap = f"with {fastest.cfg.dispatcher} for its {own.cfg.dispatcher}, its dispatcher alternative"
    return lambda c: (f"; not a listed plan: this plan {swap}" if c is own
                      else f"; not a listed plan: plan {n}'s layout ({own.cfg.parallel.short()}) {swap}")


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


__all__ = ["listed_plans", "rank_candidates"]
