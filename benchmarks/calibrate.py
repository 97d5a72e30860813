"""Fit moeplan's global timing constants to every shared measurement; write them and the report.

Least squares on log throughput: each observation is log(estimate / measured) for a measured run,
estimated with that run's own settings (its recipe's layout, knobs and numerics). Observations:
- ../shared/reference/published_runs.csv, with the recipe settings of tests/data/published_runs_recipes.csv;
- ../shared/reference/measured_variants.csv (tests/measured_variants.py), where a group's absolute level
  is confounded by software the observation is a ratio inside the group instead: G05 (adjacent knob steps
  of the cumulative ladder), G08 (seconds that offload adds: the baseline's sequence length is not
  published), G09 (graphs on / off), MB01 (the layout change between adjacent releases); G11 and G14 are
  absolute. G15 (Qwen3-Next, layouts not published) and MB13 (other recipe changes with the MBS change)
  are ranking tests only. tests/data/bridge_perf_runs.csv stays out of the fit (out-of-sample check).
- groups N01-N41 (tests/measured_variants.n_variants): absolute where the group is a tuned recipe on one software
  stack (N01-N03 the Megatron-LM MoE recipe index, each run of a repeated configuration on its own: the index's median and Bridge's re-measure; N30; N37), ratios to the sub-group's first row where software or the level
  is confounded (N25 the 14-layer DeepSeek-V3 proxy; N27 MXFP8 over BF16 before / after Bridge PR #1869); N38 / N39
  (one MoE layer on 8 H100) as that layer's speed (tests/measured_variants.moe_layer_s) over its alltoall BF16 row's,
  the absolute layer times reported. The dense CP
  sweeps as tokens/s (NeMo's own FLOP count): N41 absolute (its rows run their TE 1.3), N40 over its shortest point
  (its level, NeMo 25.04.rc2 on B200, is confounded: see the known gaps); their 'without CP' rows (layout not
  published: "the most performant" one that fits) as the fastest of the candidate CP-1 layouts the planner's search
  finds for each (tests/nocp_rows.py; nocp_observations). N31 / N32 (AWS EFA on p6-b300) and N33
  (p5.48xlarge; its DeepEP-over-UCCL-EP rows reported, not fitted) as ratios inside each campaign sub-group (dispatcher x
  MBS, overlap rows among themselves); rows no estimate expresses are listed with the missing feature (UNEXPRESSED).
  A row stays out of the fit for one reason, the one field every row carries (``extra["why"]``, Obs.why; the reasons
  written by hand in tests/fit_exclusions.py): estimated and reported with it, not fitted.
- the catalogued models' rows (tests/measured_variants.catalog_variants, catalog_observations): Nemotron-3 (N13-N15,
  N20) and DeepSeek-V4-Flash (N12) performance rows as tokens/s per GPU from their published step times, DeepSeek-V4
  (N06, Megatron-LM's recipe index) as TFLOP/s, G06 (Moonlight) as ratios to its first row, N20's same-layout NVFP4
  rows as ratios to their MXFP8 rows. The tuned ones are
  observations (CATALOG_ROWS_IN_FIT; known gaps say what holding them out once showed); the rest miss by an effect moeplan lacks (TP 2 on the hybrid stack,
  software drift, G06's host-bound GBS 4 step). All are estimated and reported. A model whose rows
  enter the fit has its features fitted (fit_features).
A ratio observation carries its sub-group (Obs.level): the sub-group's level is free (a fixed effect), so its n rows
enter as n - 1 orthonormal contrasts of their log residuals (level_contrasts), each measured run weighed once.
Constants are fitted in logit space (efficiencies stay in (0, 1)) with a weak prior at their source
value (docs/calibration.md says which ones the data pin: posterior / prior spread). Leave-one-group-out
cross-validation refits without each group and predicts it; the RMS of those held-out residuals is the
error band every estimate carries (``error_band_log`` in the data file).

    python benchmarks/calibrate.py            # fit, CV, write src/moeplan/hardware/calibration.yaml and docs/calibration.md
    python benchmarks/calibrate.py --check    # report only, write nothing
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from moeplan import api  # noqa: E402
from moeplan.models import load_model  # noqa: E402
from moeplan.models.spec import MODEL_FEATURES  # noqa: E402
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, NON_TIMING_CONSTANTS, Calibration  # noqa: E402
from moeplan.engine.timing.step import estimate_time  # noqa: E402
from moeplan.engine.timing.moe import ep_host_proxied  # noqa: E402
from tests.measured_variants import (CATALOG_ROWS_IN_FIT, G15_GBS_TOKENS, G15_PLAN_KWARGS, UNEXPRESSED, Variant, catalog_variants,  # noqa: E402
                                     g15_points, layer_variants, moe_layer_s, n_variants, reference_row, routing_pair,
                                     source_tokens, variants)
from tests.reference_runs import (bridge_runs, estimate_kwargs, label, out_of_fit_runs, published_runs,  # noqa: E402
                                  shared_dir)
from tests.fit_exclusions import OUT_OF_FIT, why_out_of_fit  # noqa: E402
from tests.fit_prior import prior_calibration  # noqa: E402
from tests.nocp_rows import layout_text, nocp_rows  # noqa: E402

DATA_FILE = ROOT / "src" / "moeplan" / "hardware" / "calibration.yaml"
DOC = ROOT / "docs" / "calibration.md"

# (constant, key) fitted; efficiencies in logit space, seconds in log space. allgather follows alltoall.
# The flex dispatchers' NVLink kernels are not fitted: their rates come from the kernels' benchmarks
# (ep_link_share / ep_sm_bw_bytes_per_s / ep_sms in the data file). Across NVLink domains HybridEP follows DeepEP
# (both send once per remote domain over RDMA; no measured row separates them there).
FITTED: tuple[tuple[str, str | None], ...] = (
    ("attn_bwd_eff", "cudnn_mla"), ("attn_bwd_eff", "flash"), ("attn_bwd_eff", "flash_sm90"),
    ("a2a_eff", "alltoall"),
    ("a2a_scaleout_eff", "alltoall"), ("a2a_scaleout_eff", "deepep"),
    ("ep_overlap_eff", None), ("ep_overlap_layer_s", None), ("grouped_gemm_eff", None), ("gemm_epilogue_s", None), ("launch_overhead_per_layer_s", None),
    ("expert_launch_host_s", None), ("cpu_adam_mem_eff", None),
    ("ep_proxy_call_s", None), ("a2a_host_call_s", None),  # EP calls over EFA (host-posted messages): N31 / N32
    ("host_layer_pass_s", None),  # one eager host pass over a MoE layer: max(host, GPU), N31-N33 MBS 1 vs 4
    ("ep_proxy_message_s", None),  # DeepEP's proxy work per RDMA message across EFA nodes: N31-N33 (EP16 against EP32)
)
PRIOR_SD = 3.0  # prior spread in logit / log units around the source value (weak: the data decide where they can)


def _is_eff(name: str) -> bool:
    return not name.endswith("_s")


def _get(cal: Calibration, name: str, key: str | None) -> float:
    v = getattr(cal, name)
    return float(v[key] if key else v)


def to_z(cal: Calibration) -> np.ndarray:
    out = []
    for name, key in FITTED:
        v = _get(cal, name, key)
        out.append(math.log(v / (1 - v)) if _is_eff(name) else math.log(v))
    return np.array(out)


def from_z(z: np.ndarray, base: Calibration = DEFAULT_CALIBRATION) -> Calibration:
    over: dict[str, Any] = {}
    for (name, key), zi in zip(FITTED, z):
        v = 1 / (1 + math.exp(-zi)) if _is_eff(name) else math.exp(zi)
        if key:
            over.setdefault(name, {})[key] = v
            if name in ("a2a_eff", "a2a_scaleout_eff") and key == "alltoall":
                over[name]["allgather"] = v
            if name == "a2a_scaleout_eff" and key == "deepep":
                over[name]["hybridep"] = v
        else:
            over[name] = v
    return base.with_overrides(over)


@dataclass(frozen=True)
class Obs:
    group: str
    label: str
    measured: float  # the measured quantity (see ``predict``)
    predict: Callable[[Calibration], float]  # the same quantity from the estimates
    model: str  # the model the runs train (the fit's coverage: out_of_fit_bands)
    # A ratio observation's sub-group: the rows measured over one reference row, whose level is free (residuals:
    # level_contrasts). None: an absolute observation (or G08's seconds).
    level: str | None = None
    why: str = ""  # the row's reason to be out of the fit (its ``extra["why"]``; "" where it is in)


def _built(model: str, kw: dict[str, Any]):
    cfg, gpu = api.build_config(model, **kw)
    return lambda cal: estimate_time(cfg, gpu, cal)


def published_observations(include_out_of_fit: bool = False) -> list[Obs]:
    """The published runs (absolute TFLOP/s, each with its recipe's settings); those with a reason to be out of the
    fit (tests/fit_exclusions.py) only with ``include_out_of_fit`` (the report's rows outside the fit)."""
    out: list[Obs] = []
    for run in published_runs(shared_dir() / "reference"):
        t = _built(run["model"], estimate_kwargs(run))
        out.append(Obs("published", label(run), float(run["tflops_per_gpu"]), lambda c, t=t: t(c).tflops_per_gpu,
                       run["model"], why=why_out_of_fit("published", label(run))))
    return _in_fit(out, include_out_of_fit)


def observations() -> list[Obs]:
    out: list[Obs] = published_observations()
    vs = variants()
    by: dict[str, list[Variant]] = {}
    for v in vs:
        by.setdefault(v.group, []).append(v)
    # G05: adjacent knob steps (ratio), the kernel steps between them are drift
    g05 = by["G05"]
    for a, b in zip(g05, g05[1:]):
        if b.knob_step:
            ta, tb = _built(a.model, a.kwargs), _built(b.model, b.kwargs)
            out.append(Obs("G05", b.label, b.measured() / a.measured(),
                           lambda c, ta=ta, tb=tb: tb(c).tflops_per_gpu / ta(c).tflops_per_gpu, b.model,
                           f"G05:{b.label}", b.extra["why"]))
    # G08: the seconds offload adds over the baseline
    g08 = by["G08"]
    base = g08[0]
    t0 = _built(base.model, base.kwargs)
    for v in g08[1:]:
        tv = _built(v.model, v.kwargs)
        out.append(Obs("G08", v.label, float(v.step_s) - float(base.step_s),  # type: ignore[arg-type]
                       lambda c, tv=tv: tv(c).step_time_s - t0(c).step_time_s, v.model, why=v.extra["why"]))
    # G09: graphs on over off
    a, b = by["G09"]
    ta, tb = _built(a.model, a.kwargs), _built(b.model, b.kwargs)
    out.append(Obs("G09", b.label, b.measured() / a.measured(),
                   lambda c, ta=ta, tb=tb: tb(c).tflops_per_gpu / ta(c).tflops_per_gpu, b.model, "G09", b.extra["why"]))
    # G11 and G14: absolute (each run of G11's repeated configuration enters: _runs; the tuned row adds kernel tuning)
    for v in by["G11"]:
        t = _built(v.model, v.kwargs)
        out += [Obs("G11", lab, tflops, lambda c, t=t: t(c).tflops_per_gpu, v.model, why=v.extra["why"])
                for lab, tflops in _runs(v)]
    for v in by["G14"]:
        t = _built(v.model, v.kwargs)
        out.append(Obs("G14", v.label, v.measured(), lambda c, t=t: t(c).tflops_per_gpu, v.model, why=v.extra["why"]))
    # MB01: the layout change between adjacent releases 26.04 -> 26.04.01
    mb = by["MB01"]
    a, b = mb[-2], mb[-1]
    ta, tb = _built(a.model, a.kwargs), _built(b.model, b.kwargs)
    out.append(Obs("MB01", f"{a.label} -> {b.label}", b.measured() / a.measured(),
                   lambda c, ta=ta, tb=tb: tb(c).tflops_per_gpu / ta(c).tflops_per_gpu, b.model, "MB01",
                   b.extra["why"]))
    out = _in_fit(out, include_out_of_fit=False)  # the measured variants' rows with a reason to be out (G11's tuned)
    out += n_observations()
    out += nocp_observations()
    out += catalog_observations()
    return out


def catalog_observations(include_out_of_fit: bool = False, vs: list[Variant] | None = None) -> list[Obs]:
    """The rows of the catalogued models (tests/measured_variants.catalog_variants): absolute tokens/s per GPU from the
    published step time (N12-N20), or the source's TFLOP/s (N06); G06 as each row over its first row (1 / step time);
    N20's NVFP4 rows as their tokens/s over the MXFP8 row of the same system, release and layout ("pair").
    Rows with a reason to be out of the fit (an effect moeplan lacks: ``extra["why"]``) only with ``include_out_of_fit``.
    ``vs``: the rows, where the caller has built them (catalog_variants())."""
    out: list[Obs] = []
    refs: dict[str, Callable[[Calibration], Any]] = {}
    ref_rows: dict[str, Variant] = {}
    vs = catalog_variants() if vs is None else vs
    by_label = {v.label: v for v in vs}
    for v in vs:
        t = _built(v.model, v.kwargs)
        why = v.extra["why"]
        if v.extra["obs"] == "pair":  # NVFP4 over the MXFP8 row of its layout: tokens/s ratio, shared gaps cancel
            rv = by_label[v.extra["ref"]]
            rt = _built(rv.model, rv.kwargs)
            out.append(Obs(v.group, f"{v.label} / {rv.label}", float(v.extra["tokens"]) / float(rv.extra["tokens"]),
                           lambda c, t=t, rt=rt: t(c).tokens_per_s_per_gpu / rt(c).tokens_per_s_per_gpu, v.model,
                           f"{v.group}:{rv.label}", why))
            continue
        if v.extra["obs"] == "ratio":
            if v.group not in refs:
                refs[v.group], ref_rows[v.group] = t, v
                continue
            rv, rt = ref_rows[v.group], refs[v.group]
            out.append(Obs(v.group, f"{v.label} / {rv.label}", float(rv.step_s) / float(v.step_s),  # type: ignore[arg-type]
                           lambda c, t=t, rt=rt: rt(c).step_time_s / t(c).step_time_s, v.model, v.group, why))
        elif v.extra["unit"] == "tokens":
            out.append(Obs(v.group, v.label, float(v.extra["tokens"]), lambda c, t=t: t(c).tokens_per_s_per_gpu, v.model,
                           why=why))
        else:
            out.append(Obs(v.group, v.label, float(v.tflops), lambda c, t=t: t(c).tflops_per_gpu, v.model,  # type: ignore[arg-type]
                           why=why))
    return _in_fit(out, include_out_of_fit)


def _in_fit(obs: list[Obs], include_out_of_fit: bool) -> list[Obs]:
    """``obs`` less those with a reason to be out of the fit (Obs.why), unless ``include_out_of_fit``."""
    return [o for o in obs if include_out_of_fit or not o.why]


def _model_name(model: Any) -> str:
    return model if isinstance(model, str) else model.name


def _runs(v: Variant) -> list[tuple[str, float]]:
    """(label, measured TFLOP/s) of each measured run of a row (tests/measured_variants.add_run): a repeated
    configuration (the recipe index's median and Bridge's re-measure, N01-N03; N26's repeat of N25's row; G11's
    validation repeat) enters once per run, each labelled with which run it is, as every measured row enters the fit."""
    runs = v.extra.get("runs", ())
    if len(runs) <= 1:
        return [(v.label, float(v.tflops))]  # type: ignore[arg-type]
    return [(f"{v.label} [{tag}]", value) for tag, value in runs]


def n_observations(include_out_of_fit: bool = False) -> list[Obs]:
    """Groups N01-N41 (tests/measured_variants.n_variants): absolute levels ("abs") or ratios to the sub-group's
    first row ("ratio"); "tokens" rows compare tokens/s, the source's TFLOP/s turned into tokens/s with its own
    FLOP count (N40 / N41: NeMo's full-square attention count)."""
    out: list[Obs] = []
    refs: dict[str, tuple[Variant, Callable[[Calibration], Any]]] = {}
    vs = n_variants()
    first: dict[str, Variant] = {}  # each ratio sub-group's reference row (tests/measured_variants.reference_row)
    for v in vs:
        if v.extra["obs"] == "ratio":
            first.setdefault(v.extra["sub"], v)
    for v in vs:
        t = _built(v.model, v.kwargs)
        why = v.extra["why"]
        base = v.model if isinstance(v.model, str) else v.model.name.rsplit("-", 1)[0]
        if v.extra["obs"] == "ratio":
            sub = v.extra["sub"]
            rv = first[sub]
            if v.label == rv.label:
                continue  # the sub-group's reference: its level is the sub-group's (free)
            if sub not in refs:
                refs[sub] = (rv, _built(rv.model, rv.kwargs))
            rv, rt = refs[sub]
            if v.extra["unit"] == "tokens":  # the source's own FLOP count per token differs by row (N40 / N41)
                tok = source_tokens(v) / source_tokens(rv)
                out.append(Obs(v.group, f"{v.label} / {rv.label}", tok,
                               lambda c, t=t, rt=rt: t(c).tokens_per_s_per_gpu / rt(c).tokens_per_s_per_gpu, base,
                               f"{v.group}:{sub}", why))
                continue
            for lab, tflops in _runs(v):
                out.append(Obs(v.group, f"{lab} / {rv.label}", tflops / float(rv.tflops),
                               lambda c, t=t, rt=rt: t(c).tflops_per_gpu / rt(c).tflops_per_gpu, base, f"{v.group}:{sub}",
                               why))
        elif v.extra["unit"] == "tokens":
            out.append(Obs(v.group, v.label, source_tokens(v), lambda c, t=t: t(c).tokens_per_s_per_gpu, base,
                           why=why))
        else:
            for lab, tflops in _runs(v):
                out.append(Obs(v.group, lab, tflops, lambda c, t=t: t(c).tflops_per_gpu, base, why=why))
    # N38 / N39: one MoE layer's forward + backward (tests/measured_variants.moe_layer_s: what the benchmark times), as
    # ratios of speed to the proxy's alltoall BF16 row (LAYER_REF): dispatcher x precision inside one software stack.
    # Not absolute: an isolated layer runs its GEMMs at H100's best-shape rate (8,192 rows per expert: the BF16 layers
    # take ~MAMF's time), while grouped_gemm_eff / gemm_epilogue_s are fitted to training steps, whose GEMMs run
    # beside the step's other work; at the runs' constants the layers come out slower than measured (_layer_level).
    layers = layer_variants()
    layer_refs = {v.group: v for v in layers if (v.kwargs["dispatcher"], v.kwargs["precision"]) == LAYER_REF}
    for v in layers:
        rv = layer_refs.get(v.group)
        if rv is None or v is rv:
            continue
        d, p = v.kwargs["dispatcher"], v.kwargs["precision"]
        out.append(Obs(v.group, f"MoE layer {v.label} / {rv.label}", float(rv.step_s) / float(v.step_s),
                       lambda c, g=v.group, d=d, p=p: moe_layer_s(g, *LAYER_REF, c) / moe_layer_s(g, d, p, c), v.model,
                       f"{v.group}:layer", v.extra["why"]))
    return _in_fit(out, include_out_of_fit)


# The N38 / N39 reference row of each proxy (dispatcher, precision): the benchmark's plainest case
LAYER_REF = ("alltoall", "bf16")


def nocp_observations(include_out_of_fit: bool = False) -> list[Obs]:
    """N40 / N41's 'without CP' rows (tests/nocp_rows.py): the fastest of each row's candidate CP-1 layouts (found
    once by the planner's search; memory does not depend on the constants) at the constants being fitted, in tokens/s
    of NeMo's FLOP count as the CP rows; N40 over its sweep's shortest point (as its CP rows), N41 absolute. Rows with
    a reason to be out of the fit (``extra["why"]``) only with ``include_out_of_fit``."""
    out: list[Obs] = []
    ref = reference_row("N40")  # the CP rows' reference (n_observations' sub-group "N40")
    ref_t = _built(ref.model, ref.kwargs)
    ref_tokens = source_tokens(ref)
    for row in nocp_rows():
        if not row.candidates:
            continue
        ts = tuple(_built(row.model, kw) for kw in row.candidates)

        def best(c: Calibration, ts: tuple[Callable[[Calibration], Any], ...] = ts) -> float:
            return max(t(c).tokens_per_s_per_gpu for t in ts)

        if row.group == "N40":
            out.append(Obs(row.group, f"{row.label} / {ref.label}", row.measured_tokens / ref_tokens,
                           lambda c, best=best: best(c) / ref_t(c).tokens_per_s_per_gpu, row.model,
                           f"N40:{ref.extra['sub']}", row.extra["why"]))  # the CP rows' sub-group: the same reference row
        else:
            out.append(Obs(row.group, row.label, row.measured_tokens, best, row.model, why=row.extra["why"]))
    return _in_fit(out, include_out_of_fit)


# Observation weights (all 1: halving the rounded G14 series was tried and fits every group worse).
WEIGHTS: dict[str, float] = {}


def ratio_residuals(obs: list[Obs], cal: Calibration) -> np.ndarray:
    """log(estimate / measured) per observation; for a ratio observation, its row's residual less its sub-group's
    reference row's."""
    out = []
    for o in obs:
        p = o.predict(cal)
        out.append(math.log(max(p, 1e-9) / o.measured))
    return np.array(out)


def _levels(obs: list[Obs]) -> dict[str, list[int]]:
    by: dict[str, list[int]] = {}
    for i, o in enumerate(obs):
        if o.level is not None:
            by.setdefault(o.level, []).append(i)
    return by


def level_contrasts(obs: list[Obs], r: np.ndarray) -> np.ndarray:
    """The fit's residuals: absolute observations as they are; the ratio observations of a sub-group with the
    sub-group's level free (fixed effects). A sub-group of n rows (its reference and n - 1 ratios) gives n - 1
    orthonormal (Helmert) contrasts of its rows' log residuals x_0 = 0 (the reference), x_1 .. x_(n-1) (the
    ratios' residuals): h_j = (x_j - mean(x_0 .. x_(j-1))) sqrt(j / (j + 1)), whose squares sum to the rows' spread
    about their mean, sum (x_i - mean x)^2. So the fit weighs, and the error reports, each measured run once, as
    absolute rows are weighed, where a ratio to one reference row carries that run's error into every ratio of its
    sub-group (a pair's ratio holds two runs' errors: sqrt 2 times the per-run error when they are independent). One
    exception: G05's ladder gives each knob step its own pair level (the kernel steps between them are drift), so a run
    between two adjacent knob steps (steps 4 and 5) is in two pairs."""
    out = r.copy()
    for idx in _levels(obs).values():
        x = [0.0]
        for j, i in enumerate(idx, start=1):
            out[i] = (r[i] - sum(x) / j) * math.sqrt(j / (j + 1))
            x.append(float(r[i]))
    return out


def level_centered(obs: list[Obs], r: np.ndarray) -> np.ndarray:
    """For the report: each ratio row's log residual less its sub-group's mean (the reference row's 0 included);
    absolute observations as they are."""
    out = r.copy()
    for idx in _levels(obs).values():
        mean = float(sum(r[i] for i in idx)) / (len(idx) + 1)
        for i in idx:
            out[i] = r[i] - mean
    return out


def level_ratios(obs: list[Obs], h: np.ndarray) -> np.ndarray:
    """The inverse of level_contrasts: each ratio observation's own residual (its row over its reference row)."""
    out = h.copy()
    for idx in _levels(obs).values():
        x = [0.0]
        for j, i in enumerate(idx, start=1):
            out[i] = h[i] * math.sqrt((j + 1) / j) + sum(x) / j
            x.append(float(out[i]))
    return out


def residuals(obs: list[Obs], cal: Calibration) -> np.ndarray:
    """The residual vector the fit minimizes and the error reports (level_contrasts of ratio_residuals)."""
    return level_contrasts(obs, ratio_residuals(obs, cal))


def _weights(obs: list[Obs]) -> np.ndarray:
    return np.array([WEIGHTS.get(o.group, 1.0) for o in obs])


def fit(obs: list[Obs], z0: np.ndarray, prior: np.ndarray, iters: int = 8) -> np.ndarray:
    """Levenberg-Marquardt on residuals + prior terms, finite-difference Jacobian."""
    z = z0.copy()
    lam = 1e-2

    w = _weights(obs)

    def full(zz: np.ndarray) -> np.ndarray:
        return np.concatenate([w * residuals(obs, from_z(zz)), (zz - prior) / PRIOR_SD])

    r = full(z)
    cost = float(r @ r)
    for _ in range(iters):
        J = np.empty((len(r), len(z)))
        for j in range(len(z)):
            dz = np.zeros_like(z)
            dz[j] = 1e-3
            J[:, j] = (full(z + dz) - r) / 1e-3
        A = J.T @ J
        g = J.T @ r
        improved = False
        for _ in range(6):
            step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-9), -g)
            zn = z + step
            rn = full(zn)
            cn = float(rn @ rn)
            if cn < cost:
                z, r, cost, lam = zn, rn, cn, lam / 3
                improved = True
                break
            lam *= 4
        if not improved or float(np.abs(step).max()) < 1e-3:
            break
    return z


def posterior_sd(obs: list[Obs], z: np.ndarray, prior: np.ndarray) -> np.ndarray:
    r = residuals(obs, from_z(z))
    J = np.empty((len(r), len(z)))
    for j in range(len(z)):
        dz = np.zeros_like(z)
        dz[j] = 1e-3
        J[:, j] = (residuals(obs, from_z(z + dz)) - r) / 1e-3
    sigma2 = max(float(r @ r) / max(1, len(r)), 1e-4)
    A = J.T @ J / sigma2 + np.eye(len(z)) / PRIOR_SD**2
    return np.sqrt(np.diag(np.linalg.inv(A)))


def _fmt(v: float) -> str:
    return f"{v:.4g}" if abs(v) >= 1e-3 else f"{v:.3e}"


def natural_imbalance(cal: Calibration) -> float:
    """The routing imbalance that reproduces the measured natural / forced throughput of the one shared pair moeplan
    expresses (N37, tests/measured_variants.routing_pair) at the fitted constants: bisection on moe_imbalance."""
    forced, natural = routing_pair()
    target = float(natural.tflops) / float(forced.tflops)
    base = api.estimate(forced.model, cal=cal, **forced.kwargs)["tflops_per_gpu"]
    lo, hi = 1.0, 2.0
    for _ in range(30):
        mid = (lo + hi) / 2
        ratio = api.estimate(natural.model, cal=cal, moe_imbalance=mid, **natural.kwargs)["tflops_per_gpu"] / base
        lo, hi = (mid, hi) if ratio > target else (lo, mid)
    return round((lo + hi) / 2, 3)


def proxied_ep_shortfall(cal: Calibration) -> float:
    """The largest shortfall (log of measured / estimated step time, i.e. of estimated / measured TFLOP/s) of the fitted
    AWS EFA rows (N31-N33, whose EP crosses nodes over host-proxied EFA: timing.moe.ep_host_proxied) at ``cal``: the
    fit takes them as ratios inside each campaign, so their absolute level is not pinned and the band below such
    estimates covers it (calibration.yaml ``proxied_ep_shortfall_log``), rounded up as out_of_fit_bands rounds."""
    worst = 1e-4
    for v in n_variants():
        if v.group not in ("N31", "N32", "N33") or v.extra["why"]:
            continue
        cfg, gpu = api.build_config(v.model, **v.kwargs)
        assert ep_host_proxied(cfg, gpu), v.label
        worst = max(worst, math.log(estimate_time(cfg, gpu, cal).tflops_per_gpu / float(v.tflops)))
    return math.ceil((worst + ROUNDING_MARGIN_LOG) * 1e4) / 1e4


def write_data_file(cal: Calibration, band: float, out_of_fit: dict[str, float], proxied_ep: float) -> None:
    text = DATA_FILE.read_text(encoding="utf-8")
    for name in {n for n, _ in FITTED}:
        v = getattr(cal, name)
        if isinstance(v, dict):
            val = "{" + ", ".join(f"{k}: {_fmt(x)}" for k, x in v.items()) + "}"
        else:
            val = _fmt(v)
        text, n = re.subn(rf"(?m)^  {name}: .*$", f"  {name}: {val}", text)
        assert n == 1, name
    text, n = re.subn(r"(?m)^  natural_routing_imbalance: .*$",
                      f"  natural_routing_imbalance: {cal.natural_routing_imbalance:.3f}", text)
    assert n == 1
    text, n = re.subn(r"(?m)^  error_band_log: .*$", f"  error_band_log: {band:.4f}", text)
    assert n == 1
    bands = "{" + ", ".join(f"{k}: {v:.4f}" for k, v in out_of_fit.items()) + "}"
    text, n = re.subn(r"(?m)^  out_of_fit_shortfall_log: .*$", f"  out_of_fit_shortfall_log: {bands}", text)
    assert n == 1
    text, n = re.subn(r"(?m)^  proxied_ep_shortfall_log: .*$", f"  proxied_ep_shortfall_log: {proxied_ep:.4f}", text)
    assert n == 1
    DATA_FILE.write_text(text, encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="report only; write nothing")
    ap.add_argument("--iters", type=int, default=8)
    args = ap.parse_args()
    obs = observations()
    prior = to_z(PRIOR)
    z0 = prior  # from the priors, not the last written file: the fit does not depend on its own output
    r_before = residuals(obs, from_z(prior))
    z = fit(obs, z0, prior, args.iters)
    cal = from_z(z)
    cal = cal.with_overrides({"natural_routing_imbalance": natural_imbalance(cal)})
    r_fit = residuals(obs, cal)
    sd_post = posterior_sd(obs, z, prior)
    groups = sorted({o.group for o in obs})
    cv: dict[str, np.ndarray] = {}
    for g in groups:
        keep = [o for o in obs if o.group != g]
        held = [o for o in obs if o.group == g]
        zg = fit(keep, z, prior, max(3, args.iters // 2))
        cv[g] = residuals(held, from_z(zg))
        print(f"CV without {g}: RMS {math.sqrt(float(np.mean(cv[g] ** 2))):.3f}", file=sys.stderr)
    all_cv = np.concatenate(list(cv.values()))
    band = math.sqrt(float(np.mean(all_cv**2)))
    fitted = fit_features(obs)
    evidence = out_of_fit_evidence(replace(cal, error_band_log=band), fitted)
    bands = out_of_fit_bands(evidence)
    for f in unmeasured_features(evidence, fitted):
        print(f"warning: no fitted or measured run has {MODEL_FEATURES[f]} ({f}): estimates of such models are not "
              "flagged as outside the fit; add a measured run to tests/data/out_of_fit_runs.csv", file=sys.stderr)
    report = render(obs, r_before, r_fit, cv, band, cal, z, prior, sd_post, evidence, bands, fitted)
    print(report)
    if not args.check:
        write_data_file(cal, band, bands, proxied_ep_shortfall(cal))
        DOC.write_text(report, encoding="utf-8")
    return 0


# Source values (the prior): what each constant was set to from its source before any fit (tests/fit_prior.py).
# Constants not listed there start at calibration.yaml's value, whose comment names its source.
PRIOR = prior_calibration()


def fit_features(obs: list[Obs]) -> frozenset[str]:
    """The architectural features (models.spec.MODEL_FEATURES) of the models the fitted runs train."""
    return frozenset().union(*(load_model(m).features for m in sorted({o.model for o in obs})))


@dataclass(frozen=True)
class Evidence:
    """A measured run of a model with features no fitted run has, against its estimate."""

    label: str
    source: str
    features: tuple[str, ...]  # those features
    measured: float  # the published figure: seconds per step or tokens/s per GPU (``unit``)
    estimated: float
    unit: str
    shortfall_log: float  # log(measured step time / estimated): > 0 where the run was slower than estimated


def out_of_fit_evidence(cal: Calibration, fitted: frozenset[str]) -> list[Evidence]:
    """Every shared measured run whose model has a feature outside ``fitted``: tests/data/out_of_fit_runs.csv
    (published step times) and tests/data/bridge_perf_runs.csv (published tokens/s), each estimated with its
    recipe's settings at ``cal``, and G15's points (TFLOP/s; layouts not published) against the planner's best."""
    out = []
    for r, unit in [(r, "s/step") for r in out_of_fit_runs()] + [(r, "tokens/s/GPU") for r in bridge_runs()]:
        outside = tuple(f for f in MODEL_FEATURES if f in load_model(r["model"]).features and f not in fitted)
        if not outside:
            continue
        cfg, gpu = api.build_config(r["model"], **estimate_kwargs(r))
        est = estimate_time(cfg, gpu, cal)
        if unit == "s/step":
            measured, estimated = float(r["measured_step_time_s"]), est.step_time_s
            shortfall = math.log(measured / estimated)
        else:
            measured, estimated = float(r["tokens_per_s_per_gpu"]), est.tokens_per_s_per_gpu
            shortfall = math.log(estimated / measured)
        out.append(Evidence(label(r), r.get("release") or r.get("recipe", ""), outside, measured, estimated, unit,
                            shortfall))
    # G15, Qwen3-Next on 32 GB200 at three lengths with their CP sizes (other sizes not published): against the
    # planner's fastest plan at that CP, what a user planning the card's run is shown (G15_PLAN_KWARGS: assumed)
    model = "qwen3-next-80b-a3b"
    outside = tuple(f for f in MODEL_FEATURES if f in load_model(model).features and f not in fitted)
    for pt in g15_points() if outside else []:
        plans = api.plan(model, seq_len=pt.seq_len, gbs=G15_GBS_TOKENS // pt.seq_len, top=3, fixed={"cp": pt.cp},
                         cal=cal, **G15_PLAN_KWARGS)["plans"]
        estimated = max(q["tflops_per_gpu"] for q in plans)
        out.append(Evidence(f"{model}-gb200-32-{pt.seq_len} CP{pt.cp}", "G15 card; the planner's fastest plan at its CP",
                            outside, pt.tflops, estimated, "TFLOP/s/GPU", math.log(estimated / pt.tflops)))
    return out


ROUNDING_MARGIN_LOG = 1e-3


def out_of_fit_bands(evidence: list[Evidence]) -> dict[str, float]:
    """Per feature outside the fit with measured runs: their largest shortfall (log of measured / estimated step
    time; a run faster than its estimate counts as none), rounded up, at least 1e-4 (calibration.yaml
    ``out_of_fit_shortfall_log``). An estimate of a model with the feature reaches that far below, or the fit's
    band where that is wider (timing.estimate_time)."""
    # + ROUNDING_MARGIN_LOG: the data file keeps the fitted constants to 4 significant digits, which moves an
    # estimate by up to ~1e-4 in log; the band must still reach the run with the constants as written
    return {f: math.ceil((max(1e-4, max(e.shortfall_log for e in evidence if f in e.features)) + ROUNDING_MARGIN_LOG)
                         * 1e4) / 1e4
            for f in MODEL_FEATURES if any(f in e.features for e in evidence)}


def unmeasured_features(evidence: list[Evidence], fitted: frozenset[str]) -> list[str]:
    """MODEL_FEATURES that neither a fitted run nor a measured run has: estimates of such models are not flagged."""
    return [f for f in MODEL_FEATURES if f not in fitted and not any(f in e.features for e in evidence)]


def _outside_fit(evidence: list[Evidence], bands: dict[str, float], fitted: frozenset[str], band: float) -> list[str]:
    have = ", ".join(f"`{f}`" for f in sorted(fitted)) or "none of them"
    out = ["## Outside the fit", "",
           f"Features no fitted run has (`moeplan.models.spec.MODEL_FEATURES`; the fitted runs' models have {have}).",
           "The fit's error says nothing about them, so an estimate of a model with one lists it (`outside_fit` in",
           "JSON, a note under the table) and its band reaches down to the largest shortfall of the measured runs",
           "of such models, where that is below the fit's band (none of them is in the fit; `calibration.yaml`",
           "`out_of_fit_shortfall_log`). The band above the estimate, and the tie rule, stay the fit's:", "",
           "| run | outside the fit | measured | moeplan | measured / moeplan (time) |", "|---|---|---|---|---|"]
    fmt = {"s/step": lambda x: f"{x:.2f} s/step", "tokens/s/GPU": lambda x: f"{x:,.0f} tokens/s/GPU",
           "TFLOP/s/GPU": lambda x: f"{x:,.0f} TFLOP/s/GPU"}
    for e in evidence:
        out.append(f"| {e.label} ({e.source}) | {', '.join(e.features)} | {fmt[e.unit](e.measured)} | "
                   f"{fmt[e.unit](e.estimated)} | {math.exp(e.shortfall_log):.2f}x |")
    out += ["", "| feature | largest shortfall | band below the estimate |", "|---|---|---|"]
    out += [f"| {MODEL_FEATURES[f]} (`{f}`) | {math.exp(v):.2f}x (log {v:.3f}) | "
            f"-{-math.expm1(-max(v, band)):.0%} |" for f, v in bands.items()]
    missing = unmeasured_features(evidence, fitted)
    out += ["", "Neither fitted nor measured (not flagged): " + (", ".join(f"`{f}`" for f in missing) or "none") + "."]
    out += ["", "Each band is set by the runs above (their largest shortfall): no run is held out to test it, and",
            "the G15 points' layouts are the planner's, at the card's CP sizes (the card gives no other size).", ""]
    return out


def _new_models(cal: Calibration) -> list[str]:
    """The measured rows of the models issue 34 adds (tests/data/new_model_rows.csv): moeplan against each, and the
    effect it names where it is not within 25% (tests/validation/test_new_model_rows.py)."""
    from tests.new_model_rows import TOLERANCE, ratio, rows

    out = ["## New models", "",
           "The shared measured rows of DeepSeek-V4, Qwen3.6 and GLM-5.2 (measured_variants.csv N06, N12, N16, N18;",
           "`tests/data/new_model_rows.csv`). Each is within "
           f"{TOLERANCE:.0%} of its measured tokens/s per GPU or names what moeplan misses",
           "(`tests/validation/test_new_model_rows.py`); the tuned ones are fitted as the catalogued models' rows (below, which",
           "says which and why the rest stay out).",
           "A row with TFLOP/s alone (N06) compares",
           "model TFLOP/s per GPU (moeplan counts DeepSeek-V4's FLOPs as Bridge does).", "",
           "| group | run | measured tokens/s/GPU | moeplan / measured | missing effect |", "|---|---|---|---|---|"]
    for r in rows():
        x = ratio(r, cal)
        meas = f"{float(r['measured_tokens_per_s_per_gpu']):,.0f}" if r["measured_tokens_per_s_per_gpu"] else \
            f"({r['measured_tflops_per_gpu']} TFLOP/s)"
        out.append(f"| {r['group']} | {r['label']} | {meas} | {f'{x:.2f}x' if x is not None else '-'} | "
                   f"{r['missing_effect'] or 'none'} |")
    return out + [""]


def _catalog(cal: Calibration) -> list[str]:
    """Every row of the catalogued models' groups that moeplan expresses (tests/measured_variants.catalog_variants) at
    the fitted constants: in the fit, or the effect that keeps it out."""
    out = ["## Catalogued models' rows", "",
           "Rows of the models catalogued by issues 34 and 31 (Nemotron-3, DeepSeek-V4, Moonlight-16B-A3B) that moeplan",
           "expresses with their recipes' settings (`tests/measured_variants.catalog_variants`), at the fitted constants.",
           "The tuned performance rows with a published layout are the fit's absolute levels once",
           "`CATALOG_ROWS_IN_FIT` is set: tokens/s per GPU from the published step time (N12-N20), the source's model",
           "TFLOP/s per GPU (N06, Megatron-LM's recipe index). " + ("They are in the fit (the column below); " if
           CATALOG_ROWS_IN_FIT else "They are held out (known gaps, 'The catalogued models' tuned rows'); ") +
           "the others miss by the effect named; the functional runs are in the table of rows no",
           "estimate expresses. N20's NVFP4 rows enter as ratios to the MXFP8 row of the same system, release and",
           "layout (the pairs' shared gaps cancel: GB200's TP 2), each estimated with the NVFP4 recipe's settings:",
           "Bridge's Nemotron-3 Super preset keeps the last 14 of the 88 layers in BF16 (`bf16_end_layers`), its",
           "te_quant.cfg runs the attention and latent projections and MTP in BF16 and Mamba-2's out_proj in MXFP8",
           "(`te_quant_map nemotron3`), and TE's NVFP4 quantize reads each BF16 input three times (amax with the",
           "Hadamard transform's, row-wise cast, fused RHT column-wise cast; the experts' grouped quantize twice).", "",
           "| group | row | measured | moeplan / measured | in the fit |", "|---|---|---|---|---|"]
    vs = catalog_variants()
    obs = catalog_observations(include_out_of_fit=True, vs=vs)
    for o in obs:
        ratio = o.predict(cal) / o.measured
        shown = {"N06": f"{o.measured:,.1f} TFLOP/s/GPU", "G06": f"{o.measured:.4f} (step-time ratio)"}.get(
            o.group, f"{o.measured:.3f} (tokens/s ratio)" if " / " in o.label else f"{o.measured:,.0f} tokens/s/GPU")
        out.append(f"| {o.group} | {o.label} | {shown} | {ratio:.2f}x | "
                   f"{'no: ' + o.why if o.why else 'yes'} |")
    return out + ["", _g06_note(cal, vs), ""]


def _g06_note(cal: Calibration, vs: list[Variant] | None = None) -> str:
    """G06's host-bound step at ``cal``: the no-recompute row's measured and estimated step time, and what each
    recompute set adds measured and in moeplan (the figures behind its reason, tests/fit_exclusions.py). ``vs``: the
    catalogued rows, where the caller has built them (catalog_variants())."""
    rows = [v for v in (catalog_variants() if vs is None else vs) if v.group == "G06"]
    est = [float(api.estimate(v.model, cal=cal, **v.kwargs)["step_time_s"]) for v in rows]
    meas = [float(v.step_s) for v in rows]  # type: ignore[arg-type]
    added_m = [(m - meas[0]) * 1e3 for m in meas[1:]]
    added_e = [(e - est[0]) * 1e3 for e in est[1:]]
    return (f"G06 ({rows[0].label}): measured {meas[0]:.3f} s per step, moeplan {est[0]:.3f} s; the recompute sets add "
            f"{min(added_m):.0f}-{max(added_m):.0f} ms measured, {min(added_e):.1f}-{max(added_e):.1f} ms in moeplan.")


def _card_peak_alloc_gib(group: str, system: str) -> float:
    """A Nemotron-3 card's 'peak alloc X GiB' (torch.cuda.max_memory_allocated) of its measured row on ``system``."""
    import csv

    with open(shared_dir() / "reference" / "measured_variants.csv", newline="", encoding="utf-8") as fh:
        row = next(r for r in csv.DictReader(fh) if r["group_id"] == group and r["system"] == system
                   and r["status"] == "measured")
    return float(re.search(r"peak alloc ([0-9.]+) GiB", row["other_knobs"]).group(1))


def _nemotron(cal: Calibration) -> list[str]:
    """The Nemotron-3 rows of tests/data/out_of_fit_runs.csv against moeplan, with the effect each names where it is
    more than 25% off (the check of tests/validation/test_nemotron.py), and the peak memory against the cards."""
    runs = [r for r in out_of_fit_runs() if "mamba2" in load_model(r["model"]).features]
    out = ["## Nemotron-3 (hybrid Mamba-2 / attention / MoE, LatentMoE)", "",
           "`tests/validation/test_nemotron.py` holds the shared Nemotron-3 rows (../shared/reference/measured_variants.csv",
           f"N13, N14, N15, N20; the {len(runs)} with a published layout, in `tests/data/out_of_fit_runs.csv`) to the calibration",
           "check: each estimate within 25% of the measured tokens/s per GPU, or the row names the effect moeplan misses",
           "(the `gap` column; a named row that comes inside 25% fails until its name is removed). The FLOPs per token of",
           "every row (TFLOP/s over tokens/s) is Megatron's hybrid count (`moeplan.engine.mamba`,",
           "`moeplan.engine.latent_moe`) to within the published rounding; one row (N13 H100 functional) is a strict",
           "xfail: its derived length (4096) disagrees with its own FLOPs per token (the 8192 count). Each row against",
           "moeplan, and the effect it names, is in the table of the catalogued models' rows (below), its one table."]
    mem = []
    for group, model, system, card_system in (("N13", "nemotron-3-super-120b", "h100", "H100"),
                                              ("N14", "nemotron-3.5-lightning", "gb200", "GB200 NVL72")):
        run = next(r for r in runs if r["model"] == model and r["system"] == system)
        m = api.estimate(model, **estimate_kwargs(run))["memory_gib"]
        mem.append((model, system, m["total"] - m["reserve"], _card_peak_alloc_gib(group, card_system)))
    (s_model, s_sys, s_est, s_meas), (l_model, l_sys, l_est, l_meas) = mem
    out += ["", "Peak memory (less the reserve) against the cards' `torch.cuda.max_memory_allocated`: "
            f"{s_model} on {s_sys} (its recipe's precision-aware",
            f"optimizer: bf16 gradients and moments) {s_est:.1f} GiB estimated for {s_meas:.1f} GiB measured; "
            f"{l_model} on {l_sys} {l_est:.0f} GiB",
            f"for {l_meas:.2f} GiB, a named gap (the CUDA graphs' static buffers of the attn / mamba / moe_router /",
            "moe_preprocess scopes; the recipe's gradient and optimizer dtypes are not stated).", "",
            "Not in the check: the NVFP4 rows (estimated with their recipe's settings in the next section, the "
            "same-layout", "pairs as ratios to their MXFP8 rows), natural-routing and Megatron-FSDP rows (the "
            "estimate's forced", "balance and plain distributed optimizer), and rows whose layout the card does not "
            "state (Lightning on", "H100). " + ("The tuned rows are in the fit (Catalogued models' rows, below), so Mamba-2 "
            "and LatentMoE are fitted features." if CATALOG_ROWS_IN_FIT else "Mamba-2 and LatentMoE stay outside the "
            "fit (Catalogued models' rows, below, says why): the features' band below the estimate (Outside the fit, "
            "above) comes from these rows; no constant was fitted to them."), ""]
    return out


def render(obs: list[Obs], r0: np.ndarray, r1: np.ndarray, cv: dict[str, np.ndarray], band: float,
           cal: Calibration, z: np.ndarray, prior: np.ndarray, sd_post: np.ndarray, evidence: list[Evidence],
           bands: dict[str, float], fitted: frozenset[str]) -> str:
    pct = lambda x: f"{math.expm1(x):+.0%}"  # noqa: E731
    first_row = math.sqrt(float(np.mean(np.concatenate(
        [level_ratios([o for o in obs if o.group == g], v) for g, v in cv.items()]) ** 2)))
    lines = [
        "# Timing-model calibration",
        "",
        "Generated by `python benchmarks/calibrate.py` (do not edit by hand). The timing model",
        "(`src/moeplan/engine/timing/calibration.py`, class `Calibration`) has few global constants; none is set per model, per run",
        "or per system. Their values live in `src/moeplan/hardware/calibration.yaml` (with what each stands for",
        "and its source); hardware figures are catalog data (`src/moeplan/hardware/catalog.yaml`).",
        "",
        "## Method",
        "",
        "Least squares on log throughput over every shared measurement, each estimated with its recipe's own",
        "settings (see the script's docstring for which groups enter as absolute values and which as ratios",
        "inside the group, because software drift confounds their level). Constants are fitted in logit space",
        f"with a weak prior (sd {PRIOR_SD} in logit units) at their source value. Leave-one-group-out",
        "cross-validation refits without each group and predicts it.",
        "",
        "A ratio inside a group (rows of a sub-group over its reference row, which shares their software) enters",
        "with the sub-group's level free, as a fixed effect: a sub-group of n measured rows gives n - 1 observations,",
        "the orthonormal (Helmert) contrasts of its rows' log residuals, whose squares sum to the rows' spread about",
        "their mean (`level_contrasts`). Each measured run is then weighed once (but a run between two of G05's adjacent knob steps), as an absolute row is; a ratio to",
        "one reference row would carry that run's own error into every ratio of its sub-group (and a pair's ratio",
        "holds two runs' errors). The rows below show each ratio row against its sub-group's mean.",
        f"Scored instead as each ratio row over its sub-group's first row, the same held-out fits read {first_row:.3f}.",
        "",
        f"**Cross-validated error (RMS of held-out log residuals): {band:.3f}**, i.e. about",
        f"{math.expm1(band):.0%}. Every estimate carries this band (`tflops_range`, `tokens_per_s_range`);",
        "plans whose bands overlap plan 1's are ties.",
        "",
        "## Fitted constants",
        "",
        "| constant | source value | fitted | pinned by the data? |",
        "|---|---|---|---|",
    ]
    for i, (name, key) in enumerate(FITTED):
        src = _get(PRIOR, name, key)
        val = _get(cal, name, key)
        pinned = sd_post[i] / PRIOR_SD
        verdict = "yes" if pinned < 0.5 else ("partly" if pinned < 0.85 else "no: stays near its source value")
        lines.append(f"| `{name}{'.' + key if key else ''}` | {_fmt(src)} | {_fmt(val)} | {verdict} "
                     f"(posterior/prior sd {pinned:.2f}) |")
    kernel_fit = ("gdn_eff", "gdn_chunk_step_s", "gdn_launch_s")  # benchmarks/fit_gdn.py, on the GB200 and H200 tables
    h200 = ("attn_wide_fwd_share", "attn_wide_bwd_share", "attn_noncausal_bwd_share",
            "transpose_copy_eff")  # benchmarks/gpu/, tests/data/*_h200.csv
    lines += ["", "Not fitted here (set from their source, see the data file): "
              + ", ".join(f"`{f}`" for f in cal.as_dict()
                          if f not in {n for n, _ in FITTED} | set(NON_TIMING_CONSTANTS) | set(kernel_fit) | set(h200))
              + ". Fitted by least squares to a kernel benchmark instead of the runs (`benchmarks/fit_gdn.py`, "
              "fla's own GB200 table and one H200's, tests/data/fla_gdn_gb200.csv, fla_gdn_h200.csv): " + ", ".join(f"`{f}`" for f in kernel_fit)
              + ". Set from kernels measured on one H200 (benchmarks/gpu/, tests/data/*_h200.csv): "
              + ", ".join(f"`{f}`" for f in ("attn_fwd_eff.cudnn_mla", *h200)) + ". "
              + f"`natural_routing_imbalance` ({cal.natural_routing_imbalance:.3f}, what `--routing natural` assumes) "
              "reproduces the one natural / forced pair moeplan expresses (N37, Mixtral-8x22B: ~445 / ~465 TFLOP/s, "
              "rounded) at the fitted constants. `ep_proxy_call_s` (DeepEP) and `a2a_host_call_s` (NCCL all-to-all), "
              "the fixed cost of one EP call across EFA nodes per NIC rail of the GPU, and `ep_proxy_message_s`, DeepEP's "
              "proxy work per RDMA message to a remote node and rail, are pinned by the AWS groups "
              "N31 / N32 (p6-b300, 2 rails) and N33 (p5, 4 rails) alone (no other fitted run crosses a fabric "
              "without GPU-initiated RDMA).", "",
              "## Residuals per group", "",
              "| group | observation | measured | before fit | fitted | held out (CV) |", "|---|---|---|---|---|---|"]
    held = {g: [o for o in obs if o.group == g] for g in cv}
    cv_shown = {g: iter(level_centered(held[g], level_ratios(held[g], v))) for g, v in cv.items()}
    for o, a, b in zip(obs, level_centered(obs, level_ratios(obs, r0)), level_centered(obs, level_ratios(obs, r1))):
        c = next(cv_shown[o.group])
        lines.append(f"| {o.group} | {o.label} | {o.measured:.4g} | {pct(a)} | {pct(b)} | {pct(c)} |")
    lines += ["", "| group | observations | fitted RMS | CV RMS |", "|---|---|---|---|"]
    for g in sorted(cv):
        idx = [i for i, o in enumerate(obs) if o.group == g]
        fr = math.sqrt(float(np.mean(r1[idx] ** 2)))
        lines.append(f"| {g} | {len(idx)} | {fr:.3f} | {math.sqrt(float(np.mean(cv[g] ** 2))):.3f} |")
    lines += ["", "Measured quantities: TFLOP/s per GPU (published, G11, G14, N01-N03, N30, N37), a ratio inside the",
              "group (G05, G09, MB01, N25, N27, N31-N33: the row over its sub-group's first row; N40: tokens/s over",
              "its 8K point; N38 / N39: one MoE layer's speed over its proxy's alltoall BF16 row), tokens/s per GPU",
              "(N41), or seconds offload adds (G08).",
              f"{len(obs)} observations.", ""]
    lines += _n_outside(cal)
    lines += _layer_level(cal)
    lines += _ranking(cal)
    lines += _out_of_sample(cal)
    lines += _outside_fit(evidence, bands, fitted, band)
    lines += _new_models(cal)
    lines += _nemotron(cal)
    lines += _catalog(cal)
    published, ratios = _published(cal)
    lines += published
    ok = sum(1 for v in ratios.values() if v >= 0.9)
    gaps = KNOWN_GAPS.replace("{published_ok}", f"{ok} of {len(ratios)}")
    for name, (measured, estimated) in _overlap_pairs(cal).items():
        gaps = gaps.replace(f"{{{name}_measured}}", f"{measured:.3f}").replace(f"{{{name}_moeplan}}", f"{estimated:.3f}")
    for name, text in _nocp_figures(cal).items():
        gaps = gaps.replace(f"{{{name}}}", text)
    lines += re.sub(r"\{ratio:([^}]+)\}", lambda m: f"{ratios[m[1]]:.3f}", gaps).splitlines()
    return "\n".join(lines) + "\n"


def _n_outside(cal: Calibration) -> list[str]:
    """The N groups' rows kept out of the fit (their ``why``) with each row's miss, and the rows no estimate expresses."""
    out = ["## Shared groups outside the fit", "",
           "Estimated with their recipes' settings but not fitted (why, per group), each row against the fitted",
           "constants (ratios: the row over its sub-group's first row):", ""]
    obs = published_observations(include_out_of_fit=True) + n_observations(include_out_of_fit=True)
    for (g, frag), why in OUT_OF_FIT.items():  # the reasons of the N groups' and published rows (tests/fit_exclusions.py)
        if any(o.group == g and o.why == why for o in obs):
            rest = "every row of " + g if not frag else f"rows with '{frag}' (the rest of {g} is fitted)"
            out.append(f"- **{g}** {rest}: {why}.")
    out += ["", "| group | observation | measured | moeplan |", "|---|---|---|---|"]
    for o in obs:
        if o.why:
            p = o.predict(cal)
            out.append(f"| {o.group} | {o.label} | {o.measured:.4g} | {p / o.measured - 1:+.0%} |")
    out += _nocp_outside(cal)
    out += ["", "Rows no estimate expresses, and the feature moeplan lacks:", "",
            "| group | rows | missing |", "|---|---|---|"]
    out += [f"| {u.group} | {u.rows} | {u.missing} |" for u in UNEXPRESSED]
    return out + [""]


def _nocp_outside(cal: Calibration) -> list[str]:
    """N40 / N41's 'without CP' rows (tests/nocp_rows.py): the layouts moeplan picks for each, and the rows kept out of
    the fit with why (their ``extra["why"]``)."""
    out = ["", "The dense sweeps' 'without CP' rows (tests/nocp_rows.py): moeplan's fastest CP-1 layout from the "
           "planner's search on the CP row's GPUs, GBS and numerics (recompute none or full), the prediction the "
           "fastest candidate at the constants (N40 over its 8K point); rows outside the fit:", ""]
    whys: dict[str, list[str]] = {}
    for row in nocp_rows():
        if row.extra["why"]:
            whys.setdefault(row.extra["why"], []).append(f"{row.group} {row.seq_len // 1024}K")
    out += [f"- **{', '.join(keys)}**: {why}." for why, keys in whys.items()]
    out += ["", "| group | row | moeplan's layout (fastest first) | measured | moeplan | in the fit |", "|---|---|---|---|---|---|"]
    by = {(o.group, o.label.split(" / ")[0]): o for o in nocp_observations(include_out_of_fit=True)}
    for row in nocp_rows():
        o = by.get((row.group, row.label))
        miss = "-" if o is None else f"{o.predict(cal) / o.measured - 1:+.0%}"
        shown = sorted(row.candidates, key=lambda kw: -api.estimate(row.model, cal=cal, **kw)["tokens_per_s_per_gpu"])
        out.append(f"| {row.group} | {row.label} | {'; '.join(layout_text(kw) for kw in shown)} | "
                   f"{row.tflops:g} TFLOP/s | {miss} | {'no' if row.extra['why'] else 'yes'} |")
    return out


def _span(xs: list[float], fmt: str) -> str:
    """'a-b' of the smallest and largest of ``xs`` in ``fmt`` (one figure where they read the same; "-" where none)."""
    if not xs:
        return "-"
    lo, hi = format(min(xs), fmt), format(max(xs), fmt)
    return lo if lo == hi else f"{lo.rstrip('%x')}-{hi}"


def _nocp_figures(cal: Calibration) -> dict[str, str]:
    """The figures the known gaps quote for the 'without CP' rows out of the fit (tests/fit_exclusions.py), at ``cal``:
    the recomputed rows' fastest layout's share of the budget, its miss, and the fastest full-recompute candidate's
    miss; the pipeline-only rows' measured over moeplan."""
    from tests.fit_exclusions import PIPELINE_ONLY, RECOMPUTED

    obs = {(o.group, o.label.split(" / ")[0]): o for o in nocp_observations(include_out_of_fit=True)}
    share, over, full, times = [], [], [], []
    for row in nocp_rows():
        o = obs.get((row.group, row.label))
        if o is None:
            continue
        ratio = o.predict(cal) / o.measured
        if row.extra["why"] == RECOMPUTED:
            est = [api.estimate(row.model, cal=cal, **kw) for kw in row.candidates]
            fast = max(est, key=lambda e: e["tokens_per_s_per_gpu"])  # the fastest at ``cal``, not at the prior
            best = fast["tokens_per_s_per_gpu"]
            share.append(fast["memory_gib"]["total"] / fast["budget_gib"])
            over.append(ratio - 1)
            fulls = [e["tokens_per_s_per_gpu"] for kw, e in zip(row.candidates, est) if kw["recompute"] == "full"]
            if fulls:
                full.append(abs(ratio * max(fulls) / best - 1))
        elif row.extra["why"] == PIPELINE_ONLY:
            times.append(1 / ratio)
    return {"nocp_recomputed_share": _span(share, ".0%"), "nocp_recomputed_over": _span(over, ".0%"),
            "nocp_recomputed_full": f"{max(full):.1%}" if full else "-",
            "nocp_pipeline_x": _span(times, ".2f") + ("x" if times else "")}


def _layer_level(cal: Calibration) -> list[str]:
    """N38 / N39's absolute layer times (the fit takes only their ratios to each proxy's alltoall BF16 row)."""
    out = ["## One MoE layer's absolute time (N38 / N39)", "",
           "The fit takes each layer's speed over its proxy's alltoall BF16 row; the absolute forward + backward",
           "time of the bare MoELayer (tests/measured_variants.moe_layer_s) at the fitted constants, reported:", "",
           "| group | dispatcher, precision | measured ms | moeplan ms | moeplan / measured |", "|---|---|---|---|---|"]
    for v in layer_variants():
        est = moe_layer_s(v.group, v.kwargs["dispatcher"], v.kwargs["precision"], cal)
        out.append(f"| {v.group} | {v.label} | {float(v.step_s) * 1e3:.2f} | {est * 1e3:.2f} | "
                   f"{est / float(v.step_s):.2f} |")
    return out + ["", "The isolated layer runs its expert GEMMs (8,192 rows per expert) at about H100's best-shape "
                  "matmul rate (MAMF); moeplan's grouped-GEMM efficiency, depth factor and additive HBM traffic are "
                  "fitted to training steps, which run those GEMMs beside the step's other work, so the layers come "
                  "out slower than measured by about the same factor for every dispatcher and precision.", ""]


def _published(cal: Calibration) -> tuple[list[str], dict[str, float]]:
    """benchmarks/published_ranks.py with the fitted constants: the table, and pinned/best per run."""
    from benchmarks.published_ranks import rank_row, runs

    top = 100  # the script's default
    out = ["## Published layouts", "",
           "Each published run's layout with the planner's best knobs over the fastest plan the planner finds for",
           "its model, system, GPU count, sequence length, GBS and numerics (`python benchmarks/published_ranks.py`;",
           f"rank among the first {top} plans, which the tie-breaker orders; plan 1 is the tie-breaker's first, which",
           "prefers a measured recipe's layout within the error band; pinned/best is against the fastest estimate):", "",
           "| run | rank | pinned/best | plan 1 | fastest estimate |", "|---|---|---|---|---|"]
    ratios: dict[str, float] = {}
    for r in runs():
        row = rank_row(r, top, cal)
        ratio = row["pinned_over_best"]
        ratios[str(row["run"])] = float(ratio) if ratio is not None else 0.0
        rank = str(row["rank"]) if row["rank"] else f">{top}"
        shown = f"{ratio:.2f}" if ratio is not None else "-"
        out.append(f"| {row['run']} | {rank} | {shown} | {row['plan1']} | {row['fastest']} |")
    return out + [""], ratios


def _overlap_pairs(cal: Calibration) -> dict[str, tuple[float, float]]:
    """(measured, moeplan) throughput ratio of the pairs that toggle EP overlap and interleaving with wider
    EP (tests/validation/test_ep_overlap.py): G11 HybridEP overlap off -> on (its repeat averaged, the tuned
    row left out), MB01 PP16 VPP1 EP8 -> PP8 VPP2 EP32 with overlap."""
    by: dict[str, list[Variant]] = {}
    for v in variants():
        by.setdefault(v.group, []).append(v)

    def tflops(v: Variant) -> float:
        return float(api.estimate(v.model, cal=cal, **v.kwargs)["tflops_per_gpu"])

    g11 = [v for v in by["G11"] if v.kwargs["dispatcher"] == "hybridep" and not v.extra["why"]]
    off = next(v for v in g11 if not v.kwargs["ep_overlap"])
    on = next(v for v in g11 if v.kwargs["ep_overlap"])  # its two runs' mean (measured_variants.add_run)
    a, b = by["MB01"][-2], by["MB01"][-1]
    return {"g11": (on.measured() / off.measured(), tflops(on) / tflops(off)),
            "mb01": (b.measured() / a.measured(), tflops(b) / tflops(a))}


def _ranking(cal: Calibration) -> list[str]:
    """The measured pairs (tests/validation/test_ranking.py) with the fitted constants."""
    from tests.measured_variants import ranked_pairs

    pairs = ranked_pairs(variants())
    est: dict[int, float] = {}
    wrong = []
    for lo, hi in pairs:
        for v in (lo, hi):
            if id(v) not in est:
                est[id(v)] = api.estimate(v.model, cal=cal, **v.kwargs)["tokens_per_s_per_gpu"]
        if not est[id(hi)] > est[id(lo)]:
            wrong.append(f"- {lo.group}: {lo.label} < {hi.label} (measured {lo.measured():.4g} < {hi.measured():.4g})")
    from tests.measured_variants import n_ranked_pairs

    def thr(v: Variant) -> float:
        if v.extra.get("obs") == "layer":
            return 1.0 / moe_layer_s(v.group, v.kwargs["dispatcher"], v.kwargs["precision"], cal)
        return float(api.estimate(v.model, cal=cal, **v.kwargs)["tokens_per_s_per_gpu"])

    n_pairs = n_ranked_pairs()
    n_est: dict[int, float] = {}
    n_wrong = []
    for lo, hi in n_pairs:
        for v in (lo, hi):
            if id(v) not in n_est:
                n_est[id(v)] = thr(v)
        if not n_est[id(hi)] > n_est[id(lo)]:
            n_wrong.append(f"- {lo.group}: {lo.label} < {hi.label} (measured {lo.measured():.4g} < {hi.measured():.4g})")
    total, right = len(pairs) + len(n_pairs), len(pairs) - len(wrong) + len(n_pairs) - len(n_wrong)
    return ["## Ranking", "",
            "Pairs inside a measured group that differ in a knob or layout moeplan models and differ by >= 10%",
            f"in measured throughput: **{len(pairs) - len(wrong)} of {len(pairs)}** in the measured order "
            "(`tests/validation/test_ranking.py`). Wrong:", ""] + (wrong or ["- none"]) + [
            "", "Groups N01-N41 (same group, sub-group, model, system, GPU count and length; "
            f"`tests/validation/test_ranking_shared_groups.py`): **{len(n_pairs) - len(n_wrong)} of {len(n_pairs)}**; "
            f"all shared pairs together **{right} of {total}** ({right / max(1, total):.0%}). Wrong:", ""] + (
            n_wrong or ["- none"]) + [""]


KNOWN_GAPS = """## Known gaps (what the fit could not reconcile, and why)

- **Host launch time on dense layers and N41's 4K point** (issue 31): the exposed launch time per layer
  (`launch_overhead_per_layer_s`) is what dropless MoE's host sync leaves showing, so only MoE layers pay it; a dense
  layer's launches run ahead of the GPU. N41's GEMM-bound 4K point (Llama-2-7B, TE 1.3, FP8 delayed scaling, TP1)
  still runs ~7% slower than moeplan's and, fitted absolute, pulls `gemm_epilogue_s` from 1.27e-10 to 1.55e-10,
  which deepens the K at half rate on Blackwell: Bridge PR #4458's DeepSeek-V3 B300 recipe reads -11% (10% bound)
  and MB01's interleaving gain +1.6% over measured (strict xfails in tests/validation/test_bridge_pr_runs.py and
  test_ep_overlap.py). N41 as ratios within its sweep keeps both inside their bounds but puts the 4K point's
  shortfall into the sweep's shape (N41 held out 0.03 -> 0.08, the fit 0.136 -> 0.141). Candidates not modelled:
  TE 1.x's per-module FP8 delayed-scaling work on the host (amax history and scale updates each step), 2024
  cuBLAS FP8 GEMMs. N40's 32K CP2 point (8K blocks on B200) read +13% against the 12% bound (+12% since the
  'without CP' rows entered the fit, inside it, the closest of the sweep); scaling the block
  ramps with the per-SM matmul rate (as a GEMM's depth at half rate scales) was tried and moves the fit's error
  0.136 -> 0.142, so it is not adopted.
- **Dense long-context CP sweeps** (N40, N41; `tests/validation/test_dense_cp_sweeps.py`). FLOP convention first:
  both tables predate NeMo 6251117f4c (2025-08-09, "Discount FLOPs in dot-product att"), so their TFLOP/s count the
  full s x s score square (nemo/utils/flops_formulas.py llama2 / llama3: 12 s / h), twice Megatron-Core's causal
  count; compared as tokens/s with that count. The B200 table's '# of GPUs' is 4x TP x PP x DP x CP in every row
  (an earlier revision, NeMo 14d427f575, lists 2 .. 256 GPUs = TP x CP x DP): moeplan takes the product. N40
  (Llama3-8B, FP8, B200, NeMo 25.04.rc2) and N41 (Llama2-7B, FP8, H100, NeMo 24.03.01) are in the fit and tested
  absolute: every point within 12%, each sweep's max / min within 10%. N41 enters absolute: one tuned table on one
  stack whose modelled difference from today's, the Hopper attention class, its rows carry (`--te-version 1.3`:
  TE 1.3 prefers cuDNN fused attention on sm90 from 1.2, an early-2024 cuDNN costed at FlashAttention-2's measured
  Hopper rates, `attn_*_eff.flash2_sm90`; `moeplan.base.te_release` says why). At the FA3 / cuDNN 9 class of
  today's TE it ran -4% at 4K to +35% at 1M; with its release's class every point is within 10%. That class is an
  assumption the sweep tests (no public measurement of that cuDNN's kernel), not a cited rate. N40 enters as
  tokens/s over its 8K point: its level runs +8% to +12% over, most at the GEMM-bound short points, which no global
  constant but attention can absorb (fitted absolute it pulled the flash backward share below cuDNN MLA's, against
  the kernels' measured order: the level is its stack's, not attention's). Block length: its 8K-block points
  (32K CP2, 64K CP4) run ~3% above its 16K-block point and ~6% above its 32K-block points, and N41's 8K-block point
  ~1-2% above its 16K-block ones, beyond the causal / non-causal ramps (`attn_causal_half_tokens`,
  `attn_half_tokens`) that cuDNN's H200 rows pin; no Blackwell attention length sweep is at hand to say whether
  B200's kernels ramp slower. CP exposure: the p2p ring's sends take at most ~0.4 of the attention they overlap
  (N41's cross-node rings from 128K; N40 <= 0.16), so nothing is exposed, and the residuals do not grow with CP.
- **The dense sweeps' 'without CP' rows** (N40 32K-512K, N41 32K-1M; `tests/nocp_rows.py`,
  `tests/validation/test_nocp_rows.py`). The source gives no layout ("the most performant model- and data-parallel
  configurations without CP given the memory capacity constraint"; its footnote names TP up to the query groups and
  full recompute as the levers), so each row is moeplan's fastest CP-1 layout from the planner's search on the CP
  row's GPUs, GBS and numerics, recompute none or full, the prediction the fastest of the candidates at the
  constants being fitted. Six enter (N40 32K-128K over its 8K point and its 512K point, whose fastest fitting layout
  is TP8 PP4 without recompute once the loss's forward peak and the output layer's gather buffer are counted,
  moeplan.engine.loss_memory; N41 32K / 64K). Five are reported, not fitted: N40 256K and N41 128K, where moeplan's
  fastest layout trains without recompute at {nocp_recomputed_share} of the budget and runs {nocp_recomputed_over}
  over, while its fastest full-recompute layout is within {nocp_recomputed_full} (the runs recomputed; no peak memory
  is published to tell a memory-model shortfall from the run's choice); and N41 256K-1M, where on the
  row's GPUs at its GBS every CP-1 layout is a pipeline with one micro-batch per data-parallel rank at its fastest
  (PP 2 / 8 / 32) and measured runs {nocp_pipeline_x} faster than moeplan, more than the CP rows' attention rate allows:
  those runs did not use the CP run's GPU count, and on fewer GPUs moeplan's layouts run faster than measured at
  512K / 1M, so the layout is not known. moeplan orders CP before without CP at every length, as measured. N40's
  1M point has no without-CP run (the source: impossible even with full recompute at TP 8); moeplan fits one there
  with PP (TP8 PP16 DP2 without recompute, 135 GiB of B200's 161 GiB budget): the source did not try pipeline stages.
- **Partial vs full-iteration CUDA graphs** (N01, N03: the same recipe with TE-scoped graphs of attn / moe_router /
  moe_preprocess, or full-iteration graphs with the paged stash): +25% measured on both (Qwen3-30B-A3B, 16 GB200,
  MBS 4; Qwen3-235B-A22B, 128 GB200, MBS 1), ~4-7% in moeplan (strict xfail,
  `tests/validation/test_cuda_graph_scopes.py`). The paged-stash recipes (Megatron-LM 9c5258f, Megatron-Core 0.19
  dev) change three things at once: the graph scope; sync-free dropless MoE (moe_expert_rank_capacity_factor 1.5 /
  1.2 with the TE op fuser: no host sync for the received-token count, which the rows now carry); and the experts'
  kernels (NVTE_CUTEDSL_FUSED_GROUPED_MLP=1, moe_mlp_glu_interleave_size 32: TE's CuTe DSL grouped GEMM + GLU +
  MXFP8 quantize of fc1 and grouped GEMM + quantize of fc2, one launch each for all local experts, against TE 2.14's
  per-expert quantize and cuBLASLt calls). At the measured step times the gap is ~3.2 ms (N01) and ~1.4 ms (N03)
  per MoE layer and micro-batch: the same per routed hidden element (11.8 / 10.3 ps) while the per-expert MXFP8
  launches moeplan counts differ 4x (8 against 2 local experts; 3.4 / 0.85 ms of host time, of which the model
  exposes ~0.4 ms beyond N01's expert GEMMs, HybridEP's host sync following its dispatch, and hides N03's behind
  EP overlap), so the per-expert launch count alone is not the cause. Within N01 moeplan has the full-iteration row 1.15x its BF16 row (no graphs; measured 1.21x) but the
  TE-scoped MXFP8 row 1.14x (measured 0.96x): what is missing belongs to the eager MXFP8 expert path, not to graphs
  in general. N30 (the same TE-scoped recipe family on x86 B200 hosts, 16 local experts) loses less of it (MXFP8
  1.02x BF16 measured, 1.11x in moeplan: ~1.7 ms per MoE layer and micro-batch against N01's ~3.2).
  Megatron-LM's DeepSeek-V3 GB200 notes
  (docs/discussions/deepseek-v3-gb200-optimization, 2.3, 2.4 and the roadmap) say the same in words: after
  TE-scoped graphs "only the routed experts part still has some CPU overhead", removing the MoE host sync for
  full graphs was estimated at "at least 10%", and the A2A overlap's stage syncs aggravate the CPU overhead on GB200.
  Checked against the code that runs (2026-12-05, not adopted): (1) Grace's host speed: the same torch.nn.Linear
  forward costs 37.08 us of CPU on GB200's Grace against 13.48 us on an H100 DGX's Xeon 8480C (2.75x; GH200 2.46x:
  TransformerEngine issue #2053). Every host-time constant scaled by it on Grace hosts (launch_overhead_per_layer_s,
  expert_launch_host_s, the split quantize launches, ep_overlap_layer_s) and refitted: N01's TE-scoped rows
  +21% / +30% -> +12% / +20%, held out N01 0.160 -> 0.116, N03 0.116 -> 0.102, published 0.095 -> 0.079, but N30
  0.113 -> 0.138, N20 0.083 -> 0.139, N12 0.046 -> 0.128, and the whole CV 0.1038 -> 0.1044 (held-out sum of squares
  1.367 -> 1.385). Exposed in full (no post-sync window) at the fitted 41 us, N01 / N03's TE rows would read +7% /
  +4%, but N30 -15% and N27's MXFP8 estimates 70-80% low (x86 B200 hosts, 16-32 local experts): the window holds there.
  (2) HybridEP's host sync: in the hybrid-ep the recipes pin (deepseek-ai/DeepEP 7febc6e, and from 83e0d15,
  2025-12, to the branch head) dispatch_with_permute waits for the permute preprocessing's tokens_per_expert in
  Executor::dispatch_preprocess, before dispatch_core, so the dispatch kernel is GPU work the expert launches run
  ahead of (timing.moe.dispatch_before_host_sync follows the older f4f2c10 order, permute in dispatch_postprocess);
  modelled so, the CV moves 0.1038 -> 0.1042 (0.1089 with (1)): the wrong way for these rows. (3) Ruled out by the
  code: the experts' MXFP8 weights are quantized once a step (Megatron-Core set_is_first_microbatch, TE
  GroupedLinear's weight workspace cache); HybridEP pads each expert's rows for MXFP8 itself (pad_multiple), so no
  Fp8Padding copies; TE 2.14 swizzles the scales once per grouped GEMM call (multi_tensor_swizzle_scales_for_gemm,
  ~1/32 of the operands' bytes: ~20 us a layer here). (4) The host / GPU race after the host sync, with the host's
  speed (issue #31's host angle, 2026-12-05, not adopted): Grace's 2.75x on the per-expert launches alone, inside the
  existing max() over the forward window (so only a host-bound segment pays it): held out N01 0.160 -> 0.124, but
  N03 0.116 -> 0.129, N30 0.113 -> 0.119 and N20 0.083 -> 0.149 (without N20 the refit puts expert_launch_host_s at
  64 us and N20's B300 EP8 row, 64 local experts on x86, at -29%), CV 0.1037 -> 0.1046 (held-out sum of squares
  1.366 -> 1.390). The MoE block's uncaptured per-call launches (GRAPH_LAUNCH_SHARE moe x
  launch_overhead_per_layer_s) moved from the additive term into the same race (a third of it forward): CV 0.1049 at
  x86 speed, 0.1063 at Grace's. The bound (`test_partial_graph_gap_exceeds_the_graces_forward_host_work`):
  everything moeplan counts as eager forward host work on the TE-scoped rows, at Grace's speed and with no GPU work
  to hide behind, is ~2.4 ms (N01) and ~0.9 ms (N03) per MoE layer and micro-batch, under the measured ~3.2 / ~1.4
  ms; the backward has no host sync and ~8 / ~4 ms of GPU work to run ahead of. Launch-count shares for
  GRAPH_LAUNCH_SHARE were not derived: the source counts the router alone (72 -> 31 kernels with router fusion) and
  router + preprocess with DeepEP's fused layout (17), none for attention or the experts, and BF16's 32 local experts
  of G09 would make the experts most of an H100 layer's kernels, against G09's measured +28% from graphs that leave
  them eager. What would decide it: one row that changes the graph scope
  alone on GB200, or the eager MXFP8 expert block's host time measured on Grace. No constant is bent for it.
  (5) Modelled (2026-12-05): the fused grouped MLP's GPU traffic. TE 2.14's op fuser (the recipes' TE_TAG
  release_v2.14, ops/fused/forward_grouped_mlp.py / backward_grouped_mlp.py; compute capability 10.x, MXFP8,
  ScaledSwiGLU, widths % 256) runs fc1's grouped GEMM with the scaled SwiGLU and the MXFP8 quantize of fc2's input
  in its epilogue, and fc2's dgrad with dSwiGLU, the prob gradient and the quantize of fc1's output gradient in
  its, so the activation's own passes, the two quantizes' BF16 reads and fc2's BF16 dgrad output are gone: 8F
  forward + 12F backward bytes per routed row (F = expert FFN width; `timing.moe.fused_grouped_mlp_removed_bytes`,
  keyed by `te_release.FusedGroupedMLP`, charged where `RunConfig.experts_fused_mlp`). Its launches (one kernel per
  GEMM for all local experts) change nothing under full-iteration graphs. Before the refit it speeds the N01 / N03
  full-iteration rows by 3.0% / 3.2% (0.12 s of N01's 0.61 s element-wise time a step, 1.0 s of N03's 4.4 s);
  refitted, the whole CV moves 0.1037 -> 0.1027 (held-out sum of squares 1.366 -> 1.339), held out N01 0.160 ->
  0.157, N03 0.116 -> 0.106, N30 0.113 -> 0.106, published 0.095 -> 0.091; G14 0.127 -> 0.128. The refit raises
  gemm_epilogue_s 2.25e-10 -> 2.35e-10, which takes N41's CP sweep max / min from 1.2897 to 1.2861 against its
  bound of 1.2896 (`tests/validation/test_dense_cp_sweeps.py`; the 4K point's GEMMs). A few percent of GPU time,
  not the 25%: the graph scope and the host sync stay the open part of this gap.
- **FP8 against BF16 on H100 by expert size**: N37 (Mixtral-8x22B, expert ffn 16,384) measures FP8 blockwise 1.20x
  BF16; N02 (Qwen3-30B-A3B, hidden 2,048, ffn 768) 1.00x; the one-layer benchmarks N38 / N39 0.99-1.18x. moeplan
  had 1.42x, 0.88x and 1.3-1.45x; it now charges what the FP8 recipes run beside the GEMM: blockwise-scaled GEMMs on
  Hopper at 0.81 of the per-tensor FP8 rate (`timing.context.BLOCKWISE_FP8_GEMM_SHARE`, from Transformer Engine's
  GEMM profiling guide on H200), each GEMM input's quantize bytes by recipe (`timing.gemm.QUANTIZE_BYTES_PER_ELEM`:
  current scaling's extra amax read) and the routed experts' quantization padding copies (`timing.moe.
  expert_quant_padded`: Fp8Padding / Fp8Unpadding before Megatron-Core 0.18, and from 0.18 where the dispatcher does
  not pad), which N39 (32,768 routed rows of 7,168 per GPU) pays most. The layers' FP8 / BF16 speed-up is still
  ~10% above measured for alltoall and DeepEP (1.09-1.26x against 0.99-1.15x;
  `tests/validation/test_moe_layer_bench.py` prints each); no measured blockwise grouped GEMM on H100 pins it.
  The blockwise share costs the DeepSeek-V3 FP8 rows on H100 (G14, the published 1,024-GPU run) ~10% at the
  previous constants, and the refit answers by raising `attn_bwd_eff.cudnn_mla` above `attn_bwd_eff.flash` (against
  the kernels' measured order, `tests/validation/test_attention_kernels.py`): without the share the fit keeps that
  order but loses N39's two FP8 pairs and N37's FP8 / BF16 ratio (CV 0.145 against 0.141). The share is derived
  assuming block scaling's one-pass quantize costs what delayed scaling's does; a slower block quantize would put
  more of the 22.9 ms into quantizing and less into the GEMMs (a share nearer 0.9).
- **AWS EFA campaigns** (N31-N33 fitted, N33's DeepEP-over-UCCL-EP rows reported only): MBS 1 runs at 0.3-0.5x of MBS 4 for every dispatcher, NCCL
  included; the step times imply a fixed cost per micro-batch of ~8-10 ms per layer on p6-b300 (NCCL; ~12 ms with
  DeepEP over UCCL-EP) and ~15-17 ms on p5, ~1.45x more with full recompute (N32: six EP calls per layer instead of
  four). Modelled as a fixed cost per EP dispatch / combine call across EFA nodes (`engine.timing.moe.ep_proxy_call_s`:
  every message is posted by a host thread, NCCL's proxy through aws-ofi-nccl or DeepEP's UCCL-EP / NVSHMEM proxies,
  and DeepEP's dispatch busy-waits on the host for notify_dispatch's counts), one constant for NCCL
  (`a2a_host_call_s`) and one for DeepEP (`ep_proxy_call_s`), each per NIC rail of the GPU (catalog
  `scaleout_nics_per_gpu`: aws-ofi-nccl stripes every 512 KiB network chunk over the GPU's rails, one write and one
  completion per rail; NVSHMEM's libfabric transport is multi-rail, one domain per NIC), so p5's 4 x 100 Gb/s rails pay twice
  p6-b300's 2 x 400 Gb/s per call. DeepEP over the proxies also loses to NCCL with the number of nodes the EP group
  spans, far more than its bytes say: 0.94-1.06x NCCL's speed at EP16 (2 nodes) and 0.77-0.85x at EP32 (4 nodes) on
  p6-b300 (N31, MBS 4), 0.94x and 0.56x over NVSHMEM on p5 (N33). Its internode kernels write each remote node's
  tokens in RDMA messages of at most `num_max_rdma_chunked_send_tokens` (one put and one tail update each,
  deepseek-ai/DeepEP csrc/kernels/internode.cu), and DeepEP's default configs, which Megatron-Core's fused_a2a.py
  uses, set that chunk by EP size: 20 (dispatch) / 12 (combine) tokens at EP16, 8 / 8 at EP24-EP64
  (`base.deepep_configs.DEEPEP_CONFIGS`, deep_ep get_dispatch_config / get_combine_config, DeepEP e02e4d2 to
  dd758ca; the same table sizes DeepEP's buffers). Without IBGDA a host proxy posts and completes every message, so at EP32 (~2.7 remote nodes per token,
  top-8, in chunks of 8) the proxies handle ~5x the messages per token of EP16 (~1.0 remote node, chunks of 20 / 12).
  Modelled as DeepEP's proxy cost per RDMA message, per rail (`ep_proxy_message_s`,
  `engine.timing.moe.ep_proxy_messages_s`); fitted on N31-N33 with the per-call constants it lands at its source
  value, 0.93 us a message and rail (1 us: a libfabric post and completion from a CPU proxy), with 0.86 ms a call and
  rail for NCCL and 1.07 ms for DeepEP. Held out, N31 goes 0.177 -> 0.133, N33 0.240 -> 0.152, N32 0.182 -> 0.236,
  the whole fit 0.136 -> 0.128; moeplan now keeps the measured EP32-below-EP16 order of DeepEP / NCCL
  (`tests/validation/test_efa_groups.py`). Tried and not adopted: the same cost per token instead of per message (no
  chunk sizes: CV 0.129, N32 0.225, N31 0.143, N33 0.170), a fixed cost per remote node and call (fits to ~0: MBS 1
  costs the same per layer at EP16 and EP32), a cost per remote row or per remote peer for NCCL (fits to 0), each
  call costing the larger of its fixed part and its transfer (host-bound calls; no gain), the proxy cost per rail
  squared (N33 better, no source). What stays: N32's EP32 PP1 (full recompute) is the one EP32 sub-group where
  DeepEP does not lose to NCCL (1.07x over UCCL-EP, 0.94x over NVSHMEM measured, ~0.75x moeplan; strict xfail), against
  N31's EP32 PP2 (0.85x / 0.77x) with the same 4-node EP group: PP1 and full recompute change how many calls run, not
  how many messages the proxies post per call, so no cause is located (the two proxies' one-run-per-cell spread in a
  cell is itself up to 9-15%; UCCL-EP's own buffer sets EP32's dispatch chunk to 32, not 8, which the campaigns'
  UCCL-EP rows may use: the backend is not a knob). MBS 1 against MBS 4 at EP16 is still 18-31% too fast in all three
  groups and for every dispatcher but N33's NVSHMEM (+3%), at EP32 within -15..+12%: per layer and micro-batch the measured MBS 1 step is
  the same at EP16 and EP32 (11 ms on N31, 15 ms on N32), while MBS 4 costs 1.33x (N31) / 1.55x (N32) more at EP32
  than at EP16 with NCCL too, more than NCCL's remote bytes (6 against 4 copies per token) give. Taken apart per EP
  call (`benchmarks/efa_call_split.py`: the measured step less moeplan's rest, over the calls): NCCL's call at EP16
  takes 0.86-0.97x as long at MBS 4 as at MBS 1 with 4x the bytes, at EP32 1.12-1.74x; only the remote half of EP16's
  rows crosses EFA in moeplan (the node's own half goes over NVLink), and compute, TP, recompute and the pipeline
  bubble together differ by under 0.7 s of N31's 14 s step between EP16 PP4 and EP32 PP2 (PP4's larger bubble, 8
  local experts' shallower GEMMs: both make EP16 slower), against EP16's 2.2 s miss: the miss is the EFA transfer
  hiding in a 2-node call; DeepEP's EP16
  MBS 4 call leaves 0.85-1.46 ms, under its own fixed part (2.1 ms; `tests/validation/test_efa_call_split.py`). Tried
  and not adopted: NCCL's NVLink and network legs of one all-to-all at once (the larger, not the sum: one grouped
  ncclSend / ncclRecv kernel) moves EP16's call by 0.09 ms only, CV 0.1038 -> 0.1043 (G11 0.083 -> 0.095). DeepEP under EP
  overlap at EP32 is still 13-16% too fast (N31, N33). On p5 (N33) DeepEP over UCCL-EP costs ~2.3 us per token sent
  across nodes at EP16 and EP32 alike (those rows stay out of the fit: the proxy backend is not a knob, and UCCL-EP
  lists p5en / p6-b200, not p5, as tested; with the message cost they are +33..+98% off, from +15..+144%). EP overlap
  across the
  regimes (overlap + VPP2 + 96 layers + no recompute over the selective-recompute rows, which the campaigns say to
  compare only within a regime, so not fitted): EP32 PP2 with NCCL gains more than moeplan has (1.48x measured, ~1.25x
  estimated; DeepEP 1.10-1.26x against ~1.21x), EP16 PP4 on p6-b300 less (1.01-1.18x against 1.26-1.31x), so the warm-up / cool-down chunks without a
  pair (which would lower PP4's gain more than PP2's) find support in one direction only: not adopted. The
  campaigns' TP8 layouts (4 KV heads) run through Megatron-Core 0.16's KV-head replication (a valid layout).
- **Host-bound micro-batch 1 (AWS EFA; adopted 2026-12-05, `engine.timing.host`)**: per layer and micro-batch the
  measured MBS 1 step is the same whatever EP (16 / 32), PP (1 / 2 / 4) and nodes spanned (N31 11.1-11.4 ms, N32 with
  full recompute 15.1-15.6 ms, N33 on p5 17.7-18.2 ms, NCCL), while MBS 4 grows with the bytes: the host issuing a
  TP8 MoE layer eagerly is slower than its kernels at 512 tokens a rank, and dropless MoE's host sync per layer keeps
  it from running ahead. Probe (moeplan's layer time without its host terms and EFA per-call constants, one host time
  per campaign, max(host, GPU) + the per-call waits at half today's constants): 6.8 ms (N31), 9.8 ms (N32: 1.44x, a
  third host pass of full recompute gives 1.5x), 6.0 ms (N33: p5's host no slower than p6-b300's, so no host-CPU
  factor is taken), N31-N33's in-sample spread 0.442 -> 0.252 (max(host, GPU) alone with no per-call constant 0.310);
  G09's known gap (Qwen3-30B-A3B on H100, graphs on / off) wanted ~5.5 ms. Modelled as `host_layer_pass_s` per
  eager pass over a MoE layer (forward, backward's autograd replay, a recomputed forward), x the launches no CUDA
  graph captures (`launch_share`), the EP calls' host-proxy waits (`ep_proxy_call_s`, `a2a_host_call_s`) outside
  the max. Fitted 3.63 ms a pass (source value 3 ms): CV 0.1037 -> 0.0925 over 127 (held-out sum of squares 1.366 ->
  1.085), N31 0.128 -> 0.101, N32 0.177 -> 0.124, N33 0.108 -> 0.076, G09 0.135 -> 0.126, published 0.095 -> 0.105
  (`launch_overhead_per_layer_s` 0.46 -> 0.37 ms, no longer held up by G09), N37 0.104 -> 0.108; MBS 1 over MBS 4 at
  EP16 with NCCL +3% / +2% / -1% (was -18% / -23% / -16%; `tests/validation/test_efa_host_bound.py`). The floor binds
  on N31-N33's MBS 1 rows and G09's pair only. What stays: the per-call constants fall to 0.26 ms (NCCL) /
  0.43 ms (DeepEP) a call and rail (0.90 / 1.05 before), and as the campaigns enter as ratios (their level free),
  moeplan's absolute EFA steps now read 1.17x / 1.31x / 1.45x fast on average (N32 / N31 / N33; 0.91-0.97x before);
  held at their earlier values instead, the fit gives the same CV (0.0926), host 3.05 ms a pass, G09 0.006, and the
  EFA levels 0.84-0.92x. At EP32 the MBS 4 step still costs more than NCCL's bytes give, so MBS 1 over MBS 4 reads
  +25% / +43% (N31 / N32, strict xfail). DeepEP's MBS 1 cost beyond NCCL's (+35% on N31 EP32) is not a host-launch
  effect (DeepEP launches fewer router kernels): it stays in its per-call and per-message constants.
- **The absolute level of the AWS EFA runs** (N31-N33 enter as ratios inside each sub-group, their level free):
  since the host timeline refitted the EFA per-call constants (a2a_host_call_s 0.90 -> 0.26 ms, ep_proxy_call_s 1.05
  -> 0.44 ms a call and rail: the host floor now carries the MBS 1 cost they stood for), moeplan's absolute estimates
  of those runs are fast: per campaign (geometric mean of estimate / measured) N31 1.30, N32 1.16, N33 1.63 (NCCL
  MBS 4 rows 1.1-1.5x, EP32 the most), where the fit before read 0.91-0.97. Entered as absolute rows instead, the
  fit reads CV 0.107 over 139 (N31-N33 0.13-0.16 held out): their levels scatter across sub-groups more than the
  ratios inside them. Not the fabric's bandwidth (tests/data/efa_alltoall_aws.csv, tests/validation/
  test_efa_alltoall_bench.py): the catalog's line rate at a2a_scaleout_eff reproduces nccl-tests' alltoall busbw on
  p5 and p6-b300 at 2-8 nodes within 2-17% at these runs' ~64 MiB per rank, and a measured fixed cost per call
  (~0.13-0.35 ms) moves the level further from the runs (N33 1.94); matching N33's EP16 MBS 4 step takes ~4 ms an
  all-to-all call, ~4x the isolated benchmark's: the time is spent inside the training step (the calls' waits on the
  other ranks' progress, the proxies sharing the host with the launches), which no shared row separates. An
  estimate whose EP crosses EFA nodes says so (`outside_fit_note`) and its band reaches the campaigns' largest
  shortfall below it (`calibration.yaml` `proxied_ep_shortfall_log`, written by this script;
  `timing.moe.ep_host_proxied`).
- **Routing** (`--routing natural`): one imbalance (1.065) from N37's EP8 pair; G11's natural row (real data,
  functional run, EP overlap not stated) is 0.82x its forced layout against ~0.97x (strict xfail,
  `tests/validation/test_routing.py`); N13's pair (0.95x) is Nemotron-3, not in the catalog.
- **NVFP4 against MXFP8** (N20's same-layout pairs, `tests/validation/test_nvfp4_pairs.py`): with the recipe's BF16 end
  layers and te_quant.cfg, TE's three quantize passes (two for the experts' grouped quantize, which launches once)
  GB300's and GB200's estimated ratios sit 4% above the measured +4% / +2% (fitted); before them moeplan gave +16% /
  +7%. B300's pair (EP 8, 64 local experts) is fitted since its MXFP8 row's split quantizes are costed as TE's
  bulk split_quantize runs them (below; the ratio +7.5%). Still not modelled: the output layer runs in BF16 at every precision (Megatron-Core's
  own ColumnParallelLinear, outside TE's autocast); costing it so takes the pairs to +2% / +3% but two published
  layouts below 0.9 of plan 1 (DeepSeek-V3 H100 1024: 0.897, Qwen3-235B-A22B GB200 256: 0.885), not adopted.
- **Not located by an expressible shared group**: EP overlap under interleaved PP (warm-up / cool-down chunks with no
  pair; tested on MB01 below, not adopted). Modelled from the code at source values, not fitted (no shared row
  separates them): a fixed cost per pipeline hand-off (`pp_handoff_s`, 20 us: NCCL send / receive latency and, at
  VPP 1, batch_p2p_sync's device synchronize after every batched send / receive, Megatron-Core
  p2p_communication.py; `tests/unit/test_pp_handoff.py`) and fine-grained activation offload time (time item
  `act_offload`: the offloaded bytes D2H and H2D over the catalog's host link, exposed beyond the layer's compute
  and beyond the one group's backward each reload is issued ahead of, fine_grained_activation_offload.py;
  `tests/unit/test_activation_offload_time.py`; N06 / N14 rows that offload are not expressed). Megatron-FSDP's
  parameter all-gather prefetch checked against megatron_fsdp.py and left as it is: the pre-forward / pre-backward
  hooks prefetch the next units in pass order, which for uniform units is the per-pass window `engine.fsdp.dp_comm_s`
  already charges; the hooks read prefetch within a pass (FORWARD_PASS_ORDER / BACKWARD_PASS_ORDER), so the first
  unit of each pass gathers on demand, as charged; N14 (Nemotron-3.5) is the only FSDP row, and no row pins a
  cross-micro-batch overlap.

- **DeepSeek-V3 on GB300 against GB200** (Bridge 26.08, MXFP8, 256 GPUs: 6,288 / 4,912 tokens/s, 1.28x; moeplan
  ~1.06x until 2026-12-05, the GB300 row -17%, held out -19%). Taken apart: the two recipes differ in layout (GB300 PP2
  VPP8 EP32 without recompute, GB200 PP4 VPP4 EP64 with mla_up_proj; moeplan ~4% for that), not in the catalog's
  tensor-core peaks (both 2.5 / 5 PFLOP/s dense BF16 / FP8) or HBM (8 TB/s); EP stays inside the NVLink domain in
  both. Two causes found in the code that ran and the hardware: (1) the GB300 recipe trains FP8 attention and the
  GB200 one does not (Bridge v0.6.0 perf_recipes/deepseek/gb300/deepseek_v3.py passes fp8_dot_product_attention=True
  to _enable_deepseek_full_iteration_mxfp8, gb200's leaves the default False; TE runs it as cuDNN's FP8 fused
  attention); (2) Blackwell Ultra doubles the SFU's exponential rate at the same tensor-core rate (NVIDIA technical
  blog "Making Softmax More Efficient with NVIDIA Blackwell Ultra"), while Blackwell doubled Hopper's tensor cores
  per SM and clock but not its SFU (16 exponentials per clock per SM, CUDA programming guide), so one exponential
  costs 2x Hopper's FLOP-equivalents on sm100 and 1x on sm103 (`timing.attention.softmax_exp_share`; the calibrated
  215 is Hopper's). Together they reproduce the blog's ~35% FP8 MLA forward gain of GB300 over GB200 (1.36x,
  `tests/unit/test_fp8_attention.py`). Effect at the refit: the GB300 row -17% -> -11% (held out -19% -> -12%), GB200
  +1% -> -2%, the pair 1.06x -> 1.16x; CV 0.136 -> 0.133 over the same 108 observations; N40's 32K CP2 point and
  DeepSeek-V3 on B200's published layout (0.91 of the fastest plan) leave their strict xfails. The Qwen3 and
  gpt-oss MXFP8 rows that run FP8 attention on both GB200 and GB300 move up 4-10% (Qwen3-235B GB200 +5% -> +10%,
  Qwen3-30B GB200 +0% -> +8%; out of sample); the FP8 backward is assumed at the BF16 kernels' share of the FP8
  peak, which no shared kernel measurement checks; the refit takes part of it back through gemm_epilogue_s (1.55e-10 ->
  1.73e-10: k_half ~520 on H100 BF16, past `tests/unit/test_gemm_shape.py`'s few K-steps, a strict xfail). Left: GB300 still ~3-10% faster than moeplan relative to GB200
  on all four models (DeepSeek-V3 0.90, Qwen3-235B 0.93, Qwen3-30B 0.97, gpt-oss 0.90); GB300 has no measured
  matmul rate in the catalog (0.75 of peak assumed) and runs at 1,400 W against GB200's 1,200 W, which no shared
  source quantifies.
- **DeepEP vs NCCL all-to-all on NVL72** (G05 step 4, +5% measured, moeplan -23%): the source
  (Megatron-LM docs/discussions/deepseek-v3-gb200-optimization, 2 and 2.2.1) calls the early ladder
  host-bound ("the CPU kernel launch speed cannot keep up with the kernel execution speed on GPU") and
  attributes DeepEP's gain to fewer router / preprocess kernels (31 -> 17, modelled:
  `timing.FLEX_PREPROCESS_FUSED`) and memory, its EP32 kernels (~400 / ~190 GB/s on MNNVL) bringing no
  communication gain. moeplan adds host time to GPU time, so DeepEP's slower kernels show. Tested: a
  host/GPU max() per layer (the GPU waits only where a layer's launches outlast its kernels). With ~25-30 ms
  of host time per DeepSeek-V3 layer and micro-batch it reproduces the ladder's level (539 vs 540 TFLOP/s
  for alltoall) and DeepEP's step (+8-11%), but G09 (Qwen3-30B-A3B on H100, graphs +28%) needs ~5.5 ms per
  layer: one global host time per layer cannot be both, and the fit, which cannot move through the max()
  from the current value, made the cross-validated error worse (0.146 vs 0.141). Not adopted. What would
  settle it: the host time per layer as launches x per-launch cost from each layer's kernel count (MXFP8
  quantize / swizzle and multi-stream cuBLAS grouped GEMMs per local expert in the early ladder) and the
  host CPU, which no shared row separates. Rechecked 2026-12-05 (item by item, steps 3 -> 4 at the refit): only
  two items move, ep_comm 1.56 -> 3.38 s per step (NCCL all-to-all sends top-8 copies at `a2a_eff` of NVLink, ~650
  GB/s; DeepEP ~6.5 copies per token, group-limited, at the source's EP32 rates for 20 SMs, ~330 / ~160 GB/s
  dispatch / combine) and the exposed launches 0.22 -> 0.19 s; moeplan's step 3 is 1.7x the measured rate (925 vs
  540 TFLOP/s), i.e. ~6.5 s per step the model has no part for. The source's own account (2.2.1: no communication
  gain, the gain is host and memory) fits either an all-to-all slower on MNNVL at EP32 than the fitted `a2a_eff`
  (pinned by NVL8 and cross-node rows; no MNNVL all-to-all measurement was found) or DeepEP's extra GPU time
  landing in host-bound gaps; steps 5 and 6 (-6% / -7%: removing up_proj recompute, which the source says had
  "serious CPU overhead", and TE-scoped graphs) and G09 (-16%) are the same host-bound regime. Not modelled: no
  global constant separates them without the per-layer kernel counts above.
- **EP A2A overlap's host cost on x86 Blackwell** (out of the fit; `tests/validation/test_bridge_pr_runs.py`,
  strict xfails): Bridge PR #1760 (a6e92de5f, 2026-01-09) turned moe_a2a_overlap off on Qwen3-235B-A22B's 64-B200
  recipe (PP8 VPP4 EP8, alltoall, no recompute, no CUDA graphs) "due to CPU overhead": BF16 17.2 -> 16.0 s per
  step, MXFP8 (VPP off too) 20.1 -> 16.9 s; Bridge issue #3399 says the same of B300 ("moe_a2a_overlap and VP
  degraded perf"). moeplan orders both pairs the other way (overlap and VPP ~14% / ~22% faster: it hides the EP
  all-to-all) and puts the runs without overlap 13% / 21% under their step times. Its overlap cost per layer and
  micro-batch (`ep_overlap_layer_s`) is fitted on rows where the overlap gains (G11: H100 HybridEP; MB01: B200
  DeepEP at EP32), so a fixed cost cannot be both; the 1.1-1.7 ms per layer and micro-batch the B200 pair needs
  would erase G11's measured gain. A plausible mechanism, not costed: the merged 1F1B schedule issues each layer's
  backward between the forward's kernels, after the forward's host sync for the received-token counts
  (alltoall's cuda_sync_point), so the backward's launches can no longer run ahead of the GPU as they do without
  overlap; whether that binds depends on host time per launch against GPU time per layer, which no shared row
  measures.
- **Narrow in-node EP vs EP across NVL8 nodes** (MB01, B200): the flex dispatchers send BF16 (Megatron-Core
  dispatches bf16 with every backend) once per rank and once per remote node; with 50 GB/s NICs the
  EP32 RDMA leg (~2.4 remote nodes per DeepSeek-V3 token) fills the overlap windows. moeplan orders MB01
  right only since PP send/recv overlaps compute with VPP > 1 (Bridge's overlap_p2p_comm), and still
  estimates the EP8 layout ~35% above its measurement. Tested and not adopted: the merged 1F1B of EP
  overlap pairs a forward with a backward only in its steady phase; the warm-up forwards
  ((PP - rank - 1) x 2 + (VPP - 1) x PP + 1 chunk steps, schedules.py get_pp_rank_microbatches) and the
  cool-down backwards run alone with their dispatch / combine exposed (9% of the chunk steps at PP8 VPP2
  with 128 micro-batches). Costing them flips MB01 (measured +18% for PP8 VPP2 EP32) to -18% and raises
  the cross-validated error to 0.144 from 0.141 (at the fit before the per-precision GEMM epilogue): with
  the EP8 layout already over-estimated, the narrow-EP error is elsewhere and has to be found first.
- **`gemm_epilogue_s` against the kernels, and what pulls it up** (2026-12-05; `benchmarks/gemm_depth_tables.py`,
  `benchmarks/epilogue_pull.py`). XLA's measured cuBLAS tables (M = N = 4,096, K 256-4,096;
  tests/data/xla_matmul_depth.csv) imply 8.1e-11 s (H100 BF16), 1.06e-10 (B200 BF16) and 8.4e-11 (B200 FP8) for
  single GEMMs, one value across per-SM matmul rates 3.9x apart (the scaling `timing.gemm.gemm_k_half` assumes), and
  4.7e-11 for back-to-back H100 GEMMs, the source value (4.25e-11) within 10%; the fit has 2.245e-10 (strict xfails:
  `tests/unit/test_gemm_shape.py`, `tests/unit/test_gemm_depth_tables.py`). Pinned at the source value and the rest
  refitted (fitted sum of squares 1.03 -> 1.49), the rows whose residuals pull it up are 95% HybridEP rows (GB200 49%,
  GB300 26%, B200 19%, H100 5%; MXFP8 / NVFP4 78%): the knob stands in for a HybridEP cost. A cause found in the code
  that runs: Megatron-Core calls HybridEP's dispatch_with_permute / combine_with_unpermute (fused_a2a.py), whose
  permute and unpermute kernels scan the routing map per received token copy and local expert, a time the hidden
  size does not shrink, and the README's buffer.dispatch / combine rates moeplan reads leave them out. Measured on 8
  B200 at hidden 512 (a "hybrid-ep-sparse-opt Performance Comparison" report, DeepEP hybrid-ep 1b8f467: permute
  154-394 us, unpermute 104-267 us for 8,192 tokens a rank): 0.197 ns per copy and local expert (within 10%), 1.84
  ns per copy + 0.50 ns per expert row (within 12%). Costed so (commit e3b2315, reverted in 13d97eb) the refit takes
  the CV 0.104 -> 0.0997 over the same 128 observations and `gemm_epilogue_s` to 1.636e-10 (k_half ~490 on H100
  BF16, inside test_gemm_shape's bound), N01 BF16 +3% / +8% -> +2% / +6%, N30 +15% / +5% -> +11% / +3%, N01 MXFP8
  TE graphs +21% / +30% -> +19% / +27%, N03's TE-scoped Bridge re-measure +22% -> +25%, MB01 -1% -> -4%, shared pairs
  122 / 122. Not adopted yet: at that fit the planner's plan 1 for the published Qwen3-30B-A3B GB200 row (HybridEP EP4,
  37.8K tokens/s, first by the tie rule) is slower than its published layout (38.5K) while plan 2 (alltoall) runs
  40.9K; DeepSeek-V3's B200 256-GPU recipe (DeepEP EP32) falls to 0.80 of the fastest plan (HybridEP EP16; bound
  0.9); Nemotron-3 Super's B200 NVFP4 TP2 row, kept out for its TP 2 gap, misses by 24.5% (the 25% the exclusion
  needs); the DeepSeek-V3 32K vs 128K explain eval's 128K side falls 1.5% outside its band. Each needs its own
  look (the tie rule against an 8% gap, the exclusion) before the costing lands. Looked at (bwsmall3, 2026-12-05;
  the candidate stays reverted): (1) the free search drops TP1 CP1 EP8 HybridEP MBS4 (38.5K when pinned, inside the
  90% memory budget) for the same layout with alltoall (40.9K), so the dispatcher rule can only lift the next HybridEP
  plan, EP4 (32 local experts scanned per copy against 16 at EP8: the scan grows with experts per rank, so EP4 pays
  1.4x EP8's): a planner gap (keep each layout's best plan per dispatcher when the dispatcher rule decides), not
  physics. (2) Megatron-Core's DeepEP path permutes too (token_dispatcher.py _DeepepManager: the received top-k
  indices to a [received tokens x local experts] multihot map, then TE's moe_permute_with_probs, whose Triton
  make_row_id_map scans that map) and the alltoall path scans [local tokens x all experts] before its all-to-all;
  but TE's scan (a block cumsum, a global prefix and a per-token sort into a [tokens, 2 x experts + 1] int32 map)
  moves some 17 bytes an entry, ~2-3 ps an entry at B200's HBM rate (an estimate; no measured rate), next to the
  routed rows' HBM passes moeplan already charges (alltoall two a direction, DeepEP one): HybridEP's 0.197 ns an
  entry is its own kernel before the ballot+ffs rewrite, not a rate for TE's. Charged to DeepEP at that rate it would
  only lower the DeepEP EP32 recipe further, so one rule for every dispatcher does not restore the 0.9. What moves
  that ratio (0.92 -> 0.80) is the refit more than the scan (the scan alone: the recipe pinned with HybridEP 3,398 ->
  3,358 tokens/s): the smaller depth penalty speeds the fastest plan (TP2 EP16 HybridEP) 3,694 -> 3,857, while EP32
  over four NVL8 domains gains nothing, its exposed EP time growing 4.6 -> 5.1 s a step as the GEMMs that hide it
  shrink (pinned with HybridEP 3,402, with DeepEP 3,368: 0.88 at best); and the pinned search with a free dispatcher
  returns DeepEP at 3,092 (1.8 s of exposed dp_comm), below either dispatcher pinned: a second planner gap.
  Both planner gaps are one: the refinement kept each run's fastest dispatcher only, so the tie rule could lift
  only another run of the dispatcher it prefers (in (2) the layout's Megatron-FSDP run, whose DeepEP stayed within
  1% of HybridEP, over the distributed-optimizer run whose DeepEP twin was dropped; its dp_comm is FSDP's). The
  planner now ranks every run's best per dispatcher (plan.planner._rank_with_twins; tests/unit/test_plan_twins.py):
  with the scan and gemm_epilogue_s 1.636e-10, plan 1 for the Qwen3-30B-A3B GB200 row is its published EP8
  HybridEP layout, 38,316 tokens/s as pinned (rule 1), and at the shipped constants DeepSeek-V3 B200's is its
  TP1 EP32 DeepEP recipe (3,331, was TP2 EP32 DeepEP at 3,300; tests/validation/test_seed_layouts.py).
  (3) The NVFP4 TP2 row's exclusion (no same-layout pair; TP 2 not isolated on the Nemotron-3 stack) still holds,
  as no dispatcher cost makes the pair: the scan moves it from above 25% to 24.5%; entered, it adds at least
  log(1.245)^2 = 0.048 to the held-out sum of squares (1.272 -> 1.320 over 129: CV 0.1012, above the 0.10 target).
  (4) The explain eval's band is the
  estimate x exp(+-CV), its ground truth measured (G14, ~300 TFLOP/s at 128K on H100, no HybridEP): the refit's
  global constants (MLA backward 0.491 -> 0.476, the depth penalty) move that H100 estimate; the miss is real.
  Pinned at the source value, a
  further trial time per received HybridEP copy of 8 ns would take the fitted sum of squares 1.49 -> 0.91 (shipped
  1.03), and the depth penalty multiplied on Blackwell alone (x6) fits as the shipped constant does; neither has a
  source.
- **Nemotron-3 Super at EP64: HybridEP's work per copy** (2026-12-05, helper ep64). N13 / N20's EP64 rows on NVL72
  read fast (GB300 MXFP8 +13% / +14%, NVFP4 +16% / +18%) where the EP8 row fits (B300 -0% / -2%): at EP64 a token
  reaches ~19 ranks (8 local experts of 512, top-22), at EP8 ~8, and LatentMoE sends 2,048-byte rows where HybridEP's
  benchmark sends 14,336. The per-copy cause above has a source in the code that runs (deepseek-ai/DeepEP hybrid-ep
  csrc/hybrid_ep/backend/hybrid_ep_backend.cuh, config.cuh): the dispatch's S2G warps issue one TMA bulk store per
  (token, destination rank) from one elected thread each, plus the token's probs in the forward, after scanning the
  token's sparse_to_dense row over every rank of the domain; the combine's G2S issues one load per source rank; the
  pipelines hold a fixed count of token entries (10 stages, 8 S2G in flight) whatever the hidden width. The README's
  FP8 (7,392 B) against BF16 (14,336 B) kernel-only dispatch (GB200, 32 SMs) read as fixed + bytes / rate gives the
  fixed part: EP8 1.4 ns, EP16 1.9, EP24 3.5, EP32 4.6, EP36 7.1 a copy. Costed as that fixed part x (1 - row bytes /
  14,336) on each copy of HybridEP's NVLink kernels (rows as wide as the benchmark's pay nothing: DeepSeek-V3 none,
  4,096-wide rows 0.43 of it, LatentMoE 0.86), EP8 at 1.4 ns and NVL72 fitted (5.5e-9; source 4.3e-9; fitting EP8
  too moves the sum of squares by 0.002): CV 0.1038 -> 0.0997 over the same 127 observations, `gemm_epilogue_s`
  2.25e-10 -> 1.62e-10; N20 GB300 MXFP8 +13% / +14% -> +2% / +2%, N13 GB300 NVFP4 +16% / +18% -> +4% / +4%, N12
  -4% / -5% and -4% / -4% -> -3% / -3% and -1% / -1%, B300 EP8 -0% / -2% -> -0% / -3%; the EP64 rows bound by the
  scale-out leg gain nothing from it and lose to the refit (B200 EP64 over eight NVL8 domains +13% / +15% -> +18% /
  +19%, N13 H100 EP32 +8% / +9% -> +11% / +11%; N14 +1% / +1% -> +4% / +5%, N15 +9% / +9% -> +12% / +13%). The GB200
  TP2 EP64 rows move 1.27x -> 1.18x (BF16: inside 25%, so it loses its TP 2 name and enters the fit: 128
  observations, CV 0.10003, written 0.1000) and 1.44x -> 1.32x (MXFP8); PR 3168's Qwen3-Next GB200 step (EP32, 4 KB
  rows) comes within 35%. Shared pairs 120 / 120. Not adopted: the same two checks the permute trial moved fail, by
  the refit's depth penalty, not the copy cost (DeepSeek-V3's rows pay none): DeepSeek-V3's B200 recipe (DeepEP EP32)
  at 0.86 of the fastest plan (0.903 at the shipped constants; plan 1, TP2 PP8 VPP2 EP16 HybridEP MBS 2, 3,687 -> 3,909 tokens/s,
  the recipe pinned 3,331 -> 3,362), and the DeepSeek-V3 32K vs 128K explain eval's 128K side (300 TFLOP/s measured,
  band 242-295). Commits 2c41c76..94793f2 (reverted in 1c9c6d6..4864756) hold the costing, its tests and the refit.
  The other EP64 candidates, against the code: HybridEP's routing-map all-gather is costed (512 bytes a token from
  each of 63 ranks: 0.37 ms a layer's forward on GB300); the permute scan grows with local experts (EP8's 64 pay 8x
  EP64's 8); the router and the optimizer state per rank do not change with EP, and EP64 reduces no expert gradients
  (EDP 1 against EP8's 8); EP64's experts get 22,528 rows each against EP8's 2,816. B200's EP64 row is bound by the
  scale-out leg, where HybridEP posts one RDMA write a token and remote node (and one for its probs in the forward:
  N2N_warp_group_device_function) and Bridge keeps HybridEP at EP 8 on NVL8 systems as not performant beyond
  (Megatron-Bridge issue #2883); `a2a_scaleout_eff.hybridep` fitted apart from DeepEP's stays at 0.894 (sum of
  squares unchanged): no figure separates a per-message cost there yet.
- **HybridEP's per-copy cost against the two checks it breaks** (2026-12-05, helper copy2; the ep64 commits above
  cherry-picked onto the expert-TP x EP group, refitted: 128 observations, CV 0.1000, `gemm_epilogue_s` 2.25e-10 ->
  1.65e-10, `attn_bwd_eff.cudnn_mla` 0.489 -> 0.476, `.flash` 0.449 -> 0.489). (1) DeepSeek-V3's B200 recipe (TP1
  PP8 VPP2 EP32 DeepEP MBS 1, measured 864 TFLOP/s, estimated 874 when pinned) against the fastest plan, TP2 PP8 VPP2
  EP16 HybridEP MBS 2 with TE-scoped graphs: 3,331 / 3,687 = 0.903 -> 3,360 / 3,894 = 0.863. The refit takes 0.94 s
  from that plan's step (GEMMs -0.30, expert GEMMs -0.65) with its exposed EP unchanged (1.26 -> 1.27 s), but only
  0.17 s from the recipe's: its GEMMs lose 0.77 s and its exposed EP grows 4.71 -> 5.23 s, as EP32's RDMA leg (2.4
  remote NVL8 nodes a token) loses the compute that hid it. Against the recipe the plan saves 3.96 s of exposed EP and
  pays 0.97 s of expert GEMMs (16 local experts), 0.35 s of TP2 collectives and 0.31 s of recompute. Neither TP2 nor
  its sequence parallelism is the gap: DeepEP at TP1 or TP2 EP16 estimates 3,673 / 3,665 (0.915); it is HybridEP's
  RDMA leg across two NVL8 nodes, which moeplan times at DeepEP's fitted share of the NIC (0.894) while DeepEP
  itself is held by its internode NVLink leg (~111 GB/s with 20 SMs: 2.29 s exposed). Tried: HybridEP's own
  multi-node rate (hybrid-ep docs/README_Hybrid-EP.md, H100, CX7 400G, 16 SMs, Torch API; its test counts the local
  node's tokens as RDMA bytes, tests/utils.py count_rdma_send_from_routing_map, so with them out the NIC carries
  0.71 / 0.79 of line rate at EP32 and 0.72 / 0.81 at EP64, 0.756 harmonic): with the copy cost, CV 0.1000 ->
  0.0994 (N20 0.075 -> 0.050, N13 0.117 -> 0.113) but the B200 ratio only 0.863 -> 0.870; alone on main, CV 0.1037 ->
  0.1031, but the eval deepseek-v3-4k-1024-h100-bridge (HybridEP EP64 over eight nodes, 338 measured) falls 307 ->
  292 TFLOP/s, out of its band (263-323): the one measured HybridEP run across H100 nodes wants the RDMA leg faster
  than the README's. The README's EP16 reads 0.545 / 0.533, which would put the B200 ratio at 0.903 (unrefitted),
  but no cause separates two nodes from four or eight, so it is not a rate to use. (2) The DeepSeek-V3 32K vs 128K
  explain eval (H100, TP1 PP8 VPP4 CP32 EP32 DeepEP, a2a+p2p, 300 TFLOP/s measured at 128K): 271.3 -> 267.3
  TFLOP/s, attention 894.5 -> 914.5 s of a 1,112 -> 1,128 s step (the refit lowers the MLA backward share to hold G14
  and the published H100 rows, which the lower epilogue speeds; the GEMMs give back 3.7 s). It binds at any fit
  that meets issue 31's target: the band is the estimate x exp(+-CV), so at CV <= 0.10 the eval needs at least
  300 x exp(-0.10) = 271.45, above the shipped 271.27 (which passes only by its CV 0.1037: 300.9). No HybridEP cost
  reaches it (DeepEP rows); it needs the 128K a2a+p2p estimate up, where the fit reads G14 as a2a (its 128K row +9%
  fitted on main): the open "which CP type G14 ran" gap under MLA attention above. So the copy cost lands only with
  that gap closed and a cause, with a source, that slows HybridEP across NVL8 nodes at EP16 but not the 1,024-H100
  EP64 run.
- **Qwen3-30B-A3B on Blackwell** (BF16: N01 +16%, N30 +17%; MXFP8: N30 +13%, N01 +14% / +34% with full-iteration /
  TE-scoped graphs; the published GB200 row +5%, held out), taken apart per layer in
  `tests/validation/test_blackwell_small_experts.py`. N01 BF16, one layer and micro-batch (16,384 tokens): 12.6 ms
  modelled (expert GEMMs 4.1, HybridEP 3.8, attention 2.1, dense GEMMs 1.4, element-wise 0.7, launches 0.5) where the
  measured step implies ~14.6; N30 BF16 (B200, EP8, TE-scoped graphs, x86 host) is short by the same 2.06 ms. No
  modelled kernel is faster than its benchmark: the expert GEMMs run at ~50% of MAMF (the same shapes reach 77-93% of
  the H200's MAMF at 4,096 rows per expert, tests/data/expert_gemms_h200.csv), HybridEP at the README's GB200
  Torch-API rates; the small GEMMs' epilogue, which does not speed up with the tensor cores, is modelled
  (`timing.gemm_k_half`, k_half ~520 on GB200 BF16 against ~250 on H100). Checked and not the cause: tile
  quantisation (768 / 1,536 / 2,048 are multiples of Blackwell's 256-wide tiles); the LM head at vocabulary 151,936 (~27 ms a micro-batch, 4% of the step); the recipe's
  log_params_norm / log_num_zeros_in_grad passes and its un-overlapped dense-gradient reduce-scatter (a few ms and
  ~13 ms a step); HybridEP's permute variant, which replaces the benchmark's D2D copy (hybrid-ep
  `Executor::dispatch_postprocess`; DeepEP PR #588: dispatch+permute 1.09x dispatch at hidden 7,168, the extra
  expanded rows: ~0.1 ms a layer here); a fixed cost per HybridEP call (tests/validation/test_timing.py, Qwen3-Next's
  check); Blackwell's softmax exponent rate (MUFU 16 / clock / SM against twice Hopper's MMA rate: charging it
  would put attention below the kernels' measured forward rates). What the data locate: 13 of the 14 HybridEP
  observations are over (N01-N03, N30, G05 step 11, G11, both published Qwen3-30B-A3B rows; N02 FP8, -6%, is the
  FP8 quantize over-charge's). At the shipped constants a cost per received token copy in HybridEP's dispatch and
  combine (~6 ns: its pipelines hold a fixed 10-12 tokens per SM whatever the hidden size, hybrid-ep
  NUM_OF_STAGES_DISPATCH_API, so the bytes in flight shrink with the row) takes the fitted RMS 0.125 -> 0.116 and
  N01 / N30 BF16 to -4% / -0%; fitted jointly with the other constants (tried as `hybridep_token_copy_s`) it settles
  at 1.4 ns, gemm_epilogue_s gives back 13%, and the CV error moves 0.154 -> 0.151 with N01 BF16 still +12% (the
  H100 HybridEP rows do not want it). The README's 16-SM rows bound that pipeline's token latency (<= ~3 us) to ~1 ns
  a copy and no HybridEP benchmark below hidden 7,168 pins more, so it is not modelled. A cost per token in every MoE
  layer fits about as well (0.118); that GB200 and B200 miss by the same time (same HBM rate, 11% apart in peak,
  Grace without graphs against x86 with TE-scoped graphs) points at latency- or memory-bound work rather than the
  matmul rate or host launches. A measurement of one Qwen3-30B-A3B layer's HybridEP calls at hidden 2,048 on
  Blackwell would decide it. At the bulk split-quantize refit (2026-12-05, per-local-expert launches below) N01 /
  N30 BF16 read +6% / +5% (0.8 / 0.7 ms per layer and micro-batch short), inside the 8% of
  `test_blackwell_bf16_rows_within_8_percent` (a strict xfail until then): the refit's larger gemm_epilogue_s
  (2.08e-10 -> 2.24e-10), not a cause found.
- **Qwen3-Next-80B-A3B on GB200** (G15): the planner's best plans (with the MTP layer Bridge's recipe trains)
  estimate ~510 / 395 / 330 TFLOP/s (~685 / 625 / 570 before (i), (j), (n), (t) and (u) below) where the card measured
  ~270 / 230 / 100 at 8K / 32K / 64K. What was checked, in order:
  (a) FLOP convention: the card's count is Megatron Bridge's Gated DeltaNet branch (flop_utils.py, since
  2026-03; GDN context parallel reached Megatron-LM main on 2026-04-13, after it), which moeplan's
  flops.py reproduces exactly (`tests/validation/test_flops.py`); Bridge's older count, all 48 layers as
  full attention, would inflate the card 1.13x / 1.79x / 2.31x and widen the gap. Not the cause.
  (b) GDN under CP runs head-parallel over the full sequence (`timing.gdn_kernel_parts_s`: forward and
  backward, the chunk-parallel kernels then the recurrence passes in waves over the SMs); Blackwell's rates and
  Grace's host launch time come from fla's own GB200 benchmark (`tests/data/fla_gdn_gb200.csv`, 5% RMS), the
  chunk-step latency (1.16 us) from the H200's long few-head rows ((t)). At CP 16 it binds (2 heads per rank:
  on the H200 a 64K call with 2 heads takes 0.72 of one with 8), which moves the planner to CP 4 at 64K, but
  it is ~10-25% of a step.
  (c) Grouped GEMMs at EP 32 see ~5,000 rows per local expert (top-10 of 512 over 32 ranks): not small.
  (d) MTP: Bridge's Qwen3-Next recipes train mtp_num_layers 1 (recipes/qwen/qwen3_next.py, since 2025-10),
  which config.json does not describe; Megatron-Core builds the module from the final decoder layer
  (gated attention + MoE), which gives the checkpoint's 1,650,471,424 MTP parameters exactly. Modelled
  (`api` / CLI `mtp_layers`, `models.spec.with_mtp_layers`); Bridge counts its FLOPs too, so it moves
  TFLOP/s by -2% to -6% and PR #3168's step (whose pp_layout `Et*4|(t*7|)*5t*8|tmL` balances it) by +3%.
  (e) HybridEP gathers every EP rank's boolean routing map before each dispatch (DeepEP hybrid-ep
  `metadata_preprocessing` -> `allgather_routing_map`), 31 x 512 bytes per token at EP 32, then the host
  waits for the received-token count (fused_a2a.py `non_blocking = num_permuted_tokens is not None`).
  Modelled (`timing.routing_map_allgather_s`, exposed): ~0.2 ms per layer and micro-batch, +3%.
  (f) Router, permutes and element-wise traffic per routed row: the router GEMM runs bf16 into fp32 logits
  and its fp32 backward on TF32 tensor cores (moe_utils.py RouterGatingLinearFunction through TE
  general_gemm; cublaslt_gemm.cu uses TF32 for pure FP32), ~1% at 512 experts; the weighted SwiGLU and its
  backward move ~16 x ffn bytes per routed row (8 KB at ffn 512) where engine/timing/moe.py charges 2 x the 7.2 KB a
  row saves. Not the cause. (The GDN glue, first put at ~240 KB per token, is costed op by op in (j).)
  With moe_router_fusion on (Bridge's perf configs, set_qwen3_common_configs) the softmax / top-10 / aux-loss
  score kernels over the [tokens, 512] fp32 logits are TE's fused router kernels, a few 2 KB passes per
  token against the 8 KB the saved scores are charged; moe_permute_fusion is on in the base recipe; the
  shared expert's sigmoid gate (a 2,048 -> 1 projection, sigmoid and scale of its output) moves ~30 KB per
  token, <1%. Not the cause.
  (g) Host sync per MoE layer: every dropless dispatcher waits once per layer forward for the received
  counts (HybridEP above; DeepEP's dispatch; alltoall's `cuda_sync_point`), so the launches after it cannot
  run ahead (`launch_overhead_per_layer_s`, fitted on G09). A host/GPU max() over the post-sync window would
  not raise Qwen3-Next: the recipe's eager part (dispatch, 16-expert TE GroupedLinear, which launches one
  cuBLASLt GEMM and one quantize per local expert unless moe_use_grouped_tensor, combine, shared expert) is
  ~100-200 launches, ~0.5-1 ms of host time per layer and micro-batch against ~3 ms of GPU work. Tried as
  a refit (host time exposed only beyond the layer's forward dispatch + combine + expert GEMMs): the
  launch constant is then hidden everywhere and no longer pinned, CV error 0.138 -> 0.143, 25 of 26
  ranking pairs, and Qwen3-Next 2-3% faster. Not the cause; the additive fitted term stays. The ~5 us per
  launch was too low for the quantized per-expert launches (~30 us each, TE PR #3134): those are now costed
  on their own (per-local-expert launches, below), which exposes ~1 ms per layer and micro-batch here.
  (h) Bridge's GB200 recipe (PR #3168: 64 GB200, 4K, PP2 VP4 EP32, MBS 2, graphs attn / moe_router /
  moe_preprocess, which capture the GDN mixer, MTP 1 and its layout) measured 6.68 s/iter where moeplan
  estimated 2.8 s (3.3 s with the per-expert launches below, 3.64 s with (i) and (j)): the same ~2.4x at 4K, without CP and with the GDN launches in graphs
  (`test_qwen3_next_bridge_4k_recipe`). The same PR's GB300 run (MBS 4, 5.80 s; same layout) splits that
  gap into ~0.11 s per micro-batch and pipeline rank that does not scale with tokens (~4 ms per layer) and
  GPU work per token ~2x moeplan's only if a GB300 runs a token as fast as a GB200 (moeplan: within 1%);
  were GB300 10% faster per token (Blackwell Ultra's doubled softmax exponential rate, its attention
  kernels), the fixed part would shrink to ~0.03 s and the per-token part grow to ~2.5x. No shared row
  separates the rest. Strict xfails in `tests/validation/test_ranking.py`.
  (i) Head-dim-256 gated attention on Blackwell (modelled, `timing.attention_kernel`). The recipe's TE
  (71bbefb, 2026-03-24, pinned by Bridge's pyproject at PR #3168; Megatron-LM 17a67b9 as its submodule,
  attention_backend auto) has no cuDNN kernel that trains head dim 256 on sm100+ (fused_attn.cpp
  nvte_get_fused_attn_backend: Blackwell backward only for d <= 128 or MLA's 192/128; d = 256 backward
  arrived with TE PR #3056 on 2026-07-31, cuDNN 9.23), FlashAttention-3 is sm90-only and that TE has no
  FlashAttention-4, so GB200 (sm100) trains the 12 gated-attention layers (and MTP's) with FlashAttention-2,
  whose mma.sync kernels do not speed up with Blackwell's tensor cores: ~360 TFLOP/s forward and ~330
  backward on B200 (flash-attn issue #1589, tritonbench PR #171; `tests/data/fa2_b200.csv`, constants
  `attn_*_eff.flash2` from those benchmarks, not fitted), ~3x slower than the FA3-class rate moeplan used.
  GB300 / B300 (sm103) may not run FlashAttention-2 above head dim 192 (utils.py get_attention_backend), so
  TE falls back to UnfusedDotProductAttention (full-square bf16 bmm plus 22 bytes per score element through
  HBM with TE's fused softmax below 16,384 keys, 72 with the fp32 torch softmax from there, plus its masks; its materialised scores are in the memory model, `activations.unfused_attention_bytes`: fp32 and bf16
  probabilities and a bool mask kept per layer, ~12 bytes per score element at its working peak; and TE's
  unfused path does not run context parallel, utils.py "Disabling UnfusedDotProductAttention as it does not
  support context parallelism", so a GB300 layout with CP > 1 has no backend: the layout rule
  `unfused-attention-cp`, which the planner and `moeplan check` apply). The output gate and q/k RMSNorm are ~0.1 MB per
  token of element-wise traffic per attention layer, ~1% of a step. Effect: the G15 best plans ~685 / 625 /
  570 -> ~600 / 445 / 365 TFLOP/s, PR #3168's GB200 step 3.26 -> 3.46 s, GB300 2.78 -> 3.06 s. No fitted row
  has wide heads on Blackwell: the fit and its cross-validated error (0.1418) do not change.
  (j) The Gated DeltaNet layer as it runs there (megatron/core/ssm/gated_delta_net.py at 17a67b9: no CP yet,
  "TODO: support CP"), op by op outside in_proj / out_proj and fla's chunk_gated_delta_rule
  (`timing.gdn_glue_bytes`): the qkv transpose-contiguous for causal_conv1d_fn, the conv, q / k contiguous
  and fla l2norm, repeat_interleave of q and k from 16 key heads to 32 value heads, value / gate contiguous,
  the jit-fused gated RMSNorm with silu(gate) in fp32, the fp32 g / beta gating, the output transpose (a copy
  only at MBS > 1), and backward each op's gradient plus the two split-concatenations and the conv's
  contiguous gradient: 213 + 345 KB per token at MBS 2 (197 + 279 at MBS 1) where the generic term charged
  2 x the 74 KB the mixer saves. Effect: G15 ~600 / 445 / 365 -> ~565 / 435 / 355, PR #3168's GB200 step
  3.46 -> 3.64 s (of 6.68), GB300 3.06 -> 3.24 s (of 5.80); CV unchanged (no GDN row in the fit). (All at
  hbm_eff then; (u) measured the mixer and found its transposes far slower.) Left:
  ~1.8x at 4K and the 32K -> 64K drop (-18% against -57% measured); the G15 card's software and layouts
  are not published; the card entered NVIDIA/skills on 2026-05-29 (7d99fda), before TE's d = 256 Blackwell
  backward (2026-07-31), and ran CP 4 / 16, which needs a fused backend (TE's unfused path does not run
  context parallel), so its attention ran FlashAttention-2: inferred from those dates, not read. Its
  SKILL.md says "pipeline layout and grouped-GEMM improvements matter almost as much as CP": it ran PP,
  which the planner's best plans (PP 1) do not. At the card's CP sizes (CP 1 / 4 / 16, EP 32,
  no recompute, the planner's other defaults) moeplan now gives ~400 / 340 / 240 TFLOP/s: 1.5x / 1.5x /
  2.4x the measurement, i.e. the measured-minus-estimated time per layer and micro-batch is ~5 / 8 / 22 ms
  and grows with length, not a fixed host cost.
  (k) Checked, not adopted: Gated DeltaNet's CP all-to-alls as Megatron-Core 0.18 runs them (gated_delta_net.py
  at 20ba03f, 2026-04-13: `tensor_a2a_cp2hp` splits qkvzba into six sections, one NCCL all-to-all and one
  torch.cat each, then a concatenation and `_undo_attention_load_balancing`, and the output back; fused
  into one all-to-all only by Megatron-LM 48032d7, 2026-06-09, in 0.19): ~360 KB per token of extra copies
  and 14 small all-to-alls per GDN layer and micro-batch, at 64K / CP 16 ~1.5% + ~2% of the step. Too small
  for the drop. Nor TE's ring attention bookkeeping at CP 16 (context_parallel.py at 71bbefb: the forward
  corrects the fp32 output and softmax LSE after each of the 16 steps, the backward accumulates dq per
  step): ~5 GB per attention layer and micro-batch, ~1 ms, ~2% of the 64K step.
  (l) Checked, not adopted: fla's recurrence at few heads and long sequences. Megatron-LM pins
  flash-linear-attention ~= 0.4.0 until 0c1fc4c (2026-08-11); there the state recurrence
  (chunk_gated_delta_rule_fwd_h, run again in the backward, and bwd_dhu; fla/ops/common/chunk_delta_h.py at
  v0.4.0) has V / BV x B x H programs (BV autotuned over 32 / 64, 2-4 warps) walking T / 64 chunks, while the
  chunk-parallel kernels (cumsum, kkt, solve_tril, w / u, output, dq / dk / dw, WY backward) have T / 64 x B x H
  programs and stay full at 2 heads (2,048 at 64K / CP 16). (Superseded by (t), which measured these shapes on
  an H200: the recurrence costs 1.16 us per chunk step and pass, the backward's two passes included.) fla's GB200
  benchmark pinned the forward's chunk step (1.9 us, then) but not the backward's: in its four D = 128 rows the backward's FLOPs and its chunk-step
  waves are proportional (2,048-2,341 token-heads per step-wave; the D = 64 row is mostly host time, the
  D = 256 row has 4x the FLOPs per token-head and 4 state blocks per program), so the fit's FLOP-bound
  backward is one reading of them; the other extreme, the whole backward in its two recurrence passes (6.0 us per step-wave, from the
  B 1 / T 8K / H 96 row less its host time), adds +1 / +41 / +81 ms per micro-batch at 8K / 32K (CP 4) /
  64K (CP 16) against the ~265 / 390 / 1,070 ms the card's CP sizes leave: 0 / 10 / 8%. Not the cause.
  (m) Checked, not adopted: HybridEP's per-call cost at hidden 2,048. moeplan charges HybridEP at its
  Torch-API bandwidth, so the part of a call that does not scale with its bytes (metadata preprocessing,
  allocation: Torch-API minus kernel-only time in DeepEP hybrid-ep docs/README_Hybrid-EP.md's GB200 EP 32
  rows, ~0.21 ms per dispatch or combine at 4,096 tokens x 7,168) shrinks with Qwen3-Next's 4 KB rows. Costed
  as kernel-only bytes plus that fixed time per call (an upper bound: it also holds the routing-map
  all-gather of (e)), a layer gains 0.27 ms per micro-batch at 8,192 tokens per GPU and 0.56 ms at 64K /
  CP 16: ~4% / ~3% of the gap (`test_hybridep_fixed_call_cost_is_not_qwen3_next_gap`,
  tests/data/hybridep_gb200.csv). Bridge's perf overrides (scripts/performance/utils/overrides.py at PR
  #3168) set moe_hybridep_num_sms 32 over the recipe's 16 (the rate moeplan uses) and
  cross_entropy_fusion_impl "te" over its "native" (TE's one-pass fused loss, what the 3 fp32 passes over
  the vocabulary shard stand for): neither is a cost missing here.
  (n) Modelled, measured (2026-12-04): the head-dim-256 kernels' own rates. Where an SM has >= 192 KB of shared
  memory (H100 / H200 and B200 alike) FA2 runs d = 256 forward on 64 x 64 tiles (flash-attn
  flash_fwd_launch_template.h run_mha_fwd_hdim256) and backward on 64 x 64 tiles with 8 warps
  (run_mha_bwd_hdim256), where d = 128 uses 128-wide key blocks: per FLOP its fp32 dQ atomics double. Measured
  on one H200 (benchmarks/gpu/fa2_headdim.py, tests/data/attention_headdim_h200.csv: PyTorch SDPA's FA2 and
  cuDNN backends, d = 64 / 128 / 256, seq 1K-16K, causal and not), d = 256 keeps 0.83 / 0.82 of FA2's d = 128
  forward / backward tensor-core efficiency and 0.63 of cuDNN's backward (what TE trains d = 256 with on
  Hopper); cuDNN's d = 256 forward is the 740 TFLOP/s the flash family's forward already gives it
  (`attn_wide_fwd_share` / `attn_wide_bwd_share`; FA2's tiles follow shared memory, so its shares carry to B200 /
  GB200). Not the half-rate bound this item once allowed: G15's best plans 566 / 432 / 362 -> 547 / 399 / 322
  TFLOP/s, PR #3168's GB200 step 3.73 -> 3.79 s (GB300 runs the unfused path: unchanged).
  (o) The 64K point and memory: the card gives ~160 GB at 64K, where moeplan has 94 / 108 / 135 GB at CP 16
  with EP 32 / 16 / 8 (PP 1; less with PP 2), 126 at EP 4 PP 2 and 182 at EP 2 PP 2 (EP 4 PP 1, 190, does not
  fit the 185 GiB); the card's SKILL.md ties the drop to memory ("64K is possible, but the
  throughput drop is noticeable and memory becomes much tighter"), and Bridge set expandable_segments for a
  Qwen3-Next perf config to fix an OOM (55bc72009, 2026-04-08, H100). Near the limit the caching allocator's
  fragmentation (retries that free the cache and synchronize, empty_cache) costs time that depends on the
  allocation history, not on the layout: moeplan cannot cost it. If the 64K run sat there, its -57% is not a
  layout cost. Software era: CP > 1 for Gated DeltaNet needs Megatron-LM 20ba03f (2026-04-13; not in
  core_v0.17.0, released in core_v0.18.0 on 2026-06-22), and the card (entered NVIDIA/skills on 2026-05-29)
  says `validated_on: "2026-04-01"` (skills/nemo-mbridge-perf-moe-long-context/card.yaml at 7d99fda), before
  that commit reached main: its CP 4 / 16 points ran Megatron-LM's dev branch, where Gated DeltaNet context
  parallel arrived in a935008a5f (PR #2614, 2025-12-19, "follows Mamba context parallelization scheme"), not a
  main build (Bridge issue #4327: the nemo:26.04 container still refused GDN with CP in June); the planner's best
  plans at mcore 0.19 (what the G15 tests ask for) use full-iteration graphs at 8K / 32K, so part of their
  566 / 433 against the card's-CP ~400 / 340 is software the card did not have. Bridge PR #3767 (2026-05-10)
  set expandable_segments for the GB300 MBS 4 Qwen3-Next recipe, which went out of memory at its first forward
  ("the allocator suffers fragmentation when the captured-graph and HybridEP buffer scratch interleave") where
  moeplan puts it at 197 of 278 GiB: fragmentation of that size, or memory moeplan does not count, at 4K
  already.
  (p) Out of sample, on Hopper: Megatron-MoE-ModelZoo best_practice/Qwen3/readme.md (dev bbc762d5, "not well
  tuned") ran Qwen3-Next-80B-A3B on 128 H100: TP1 PP4 VPP3 EP32, DeepEP, MBS 1, GBS 256, recompute norm /
  act / shared_expert, 2.2 s per step (89 TFLOP/s). moeplan (no MTP, force-balanced) gives 1.48 s: 1.5x,
  with attention 2% of its estimate (cuDNN / FA3 train d = 256 on sm90). The row does not say its routing
  (the README's default is dropless; forced balance is an added flag), so part of it may be imbalance, and it
  crosses 4 nodes over InfiniBand (DeepEP, ~30% of the estimate). Even so the level gap is not (only)
  Blackwell's attention backend,
  and its size per layer and micro-batch (~7.5 ms at 4,096 tokens) matches PR #3168's GB200 run (~7.8 ms at
  8,192): with the GB200 / GB300 pair (h), a cost per layer and micro-batch that does not scale with
  tokens. What both runs share is 16 local experts per GPU (512 / EP 32) and the eager MoE block around
  them; the host time per launch there (Grace vs x86) is not in any stored source.
  (q) PR #3168's figures are steady state: Bridge's perf tooling logs every iteration (run_recipe.py
  log_interval 1) and times the run after skipping its first 70% (argument_parser.py
  --skip_first_percent_time 0.70), so the 6.68 / 5.80 s are not inflated by the first iteration's
  torch.compile / Triton autotune / graph capture unless the 20-iteration smoke test averaged them in (not
  stated). The GB200 / GB300 pair fits three readings equally: ~0.11 s per micro-batch and pipeline rank
  (h), ~1.8x the GPU work per token (GB200 6.68 / 3.64, GB300 5.80 / 3.25), or ~2.5-3 s per step; the
  recipe's per-step work (the 1.2e9 expert parameters' local Adam at EDP 1, ~7 ms; the dense bf16
  reduce-scatter / all-gather over DP 32, ~25 ms) is two orders smaller, so the third is not physical.
  (r) Checked, not adopted: MXFP8 padding of the experts' rows. The recipe keeps moe_router_padding_for_fp8
  False, so TEGroupedMLP pads each local expert's rows to the quantization block and unpads the output
  (Fp8Padding / Fp8Unpadding, moe/experts.py at 17a67b9; their gradients in the backward): ~16 KB per routed
  row, ~0.2 ms per layer and micro-batch at 8,192 tokens (~2.5% of the gap); the G15 card ran BF16, which
  does not pad.
  (s) Checked, not adopted: the short convolution at long length. Under CP (gated_delta_net.py since 20ba03f)
  it is fla's Triton causal_conv1d (fla/modules/convolution.py at v0.4.0): forward and backward grids D / BD x
  T / 64 x B, every program one 64-token block, and the weight gradient as fp32 partials per block ([T / 64,
  D, 4], 8 MB at 64K / CP 16, then one sum), so it stays bandwidth-bound at any length: the 2C + 3C bytes
  per token (j) charges. Without CP (17a67b9) Dao-AILab's causal_conv1d_fn runs channel-first, one CTA per
  (sequence, channel), 16,384 CTAs at MBS 2. Not the cause.
  (t) fla's chunk kernels on one H200 (benchmarks/gpu/gdn_chunk.sh, tests/data/fla_gdn_h200.csv, 2026-12-04):
  fla's six GB200 table shapes point by point, and Qwen3-Next's head-parallel CP shapes (T 16K-128K with 2 or 8
  heads per rank, B 2 T 8K with 32). fla's Triton kernels do not follow the BF16 peak from Hopper to Blackwell as
  one factor: GB200 runs the large shapes' forward 1.3-1.5x and their backward 1.0-1.2x faster than the H200, for
  2.5x the peak (in the fit, the chunk-parallel forward rate grows 2.8x, the backward's 0.95x; the recurrence
  and the host launches take the rest), so the GB200-fitted rates, scaled by the peak, charged Hopper's backward
  37% too much. And the kernels run one
  after another, so their times add (the chunk-parallel kernels, then the recurrence), where the model took the
  larger. Now `timing.gdn_chunk_kernels_s` sums them, with rates per GPU family (`gdn_eff` hopper / blackwell,
  ~139 / 136 TFLOP/s forward / backward on Hopper, ~390 / 129 on GB200), one chunk-step latency (1.16 us, which
  the H200's long few-head rows pin and fla's GB200 table does not) and launch times per host (x86 / Grace):
  joint fit 5% RMS on GB200, 12% on H200 (the CP rows within 15%; `benchmarks/fit_gdn.py`); a GPU file without a
  compute capability takes the slower family per direction. The fitted launch times are x86 0.46 / 1.61 ms and
  Grace 0.61 / 1.11 ms forward / backward. The asymmetry is in the data, not only in the fit: the tables' tiny
  row (B 8, T 1K, 8 heads, D 64: ~15 us of GPU work) takes 0.55 / 2.19 ms forward / forward + backward on the H200
  and 0.63 / 1.97 on GB200, so this H200 host (a VM's x86 cores, Triton 3.6, torch 2.11) launches fla's backward
  ~1.6 ms slower than fla's GB200 host (Grace, torch 2.9) and its forward no slower. Which host and software a
  training run had is in no row: the constants stand for those two machines. Effect: Qwen3-Next
  at long context gets faster (G15 best plans 547 / 399 / 322 -> ~545 / 410 / 340 TFLOP/s: the 64K gap widens),
  PR #3168's GB200 step 3.79 -> 3.81 s, the ModelZoo H100 row of (p) 1.58 -> 1.56 s. Not the cause of the gap.
  (u) The Gated DeltaNet mixer of (j) measured whole on one H200 (benchmarks/gpu/gdn_layer.py,
  tests/data/gdn_layer_h200.csv and its profile gdn_layer_profile_h200.csv, 2026-12-04): Qwen3-Next's mixer
  between in_proj and out_proj at TP 1, op by op as gated_delta_net.py runs it (the conv as a SiLU over the same
  channel-first tensor, the same bytes; the gated norm under torch.compile, as jit_fuser), at B 2 / 1 / 4 / 1 and
  T 4K / 8K / 4K / 16K, against fla's kernel alone. The glue took 1.9-2.1x what (j) charged, per token at every
  shape (~160 ns forward, ~115-150 backward per token on the H200). The profile names the cause: the
  .contiguous() copies that transpose the last dimension (causal_conv1d_fn takes channel-first [b, C, s], so
  the qkv copy into it, q / k / value out of its output, and the conv's gradient back) run in aten's
  non-vectorized elementwise_kernel (direct_copy_kernel_cuda through TensorIterator, one side of each access
  strided) at ~0.55 TB/s, 0.115 of the H200's HBM bandwidth, where the row-contiguous copies (gate, the [b, s]
  <-> [s, b] moves, the split concatenations: CatArrayBatchedCopy at ~4 TB/s) run at the STREAM-like rate. Now
  `timing.gdn_glue_s` charges `timing.gdn_transpose_bytes` (96 KB per token: 64 forward, 32 backward) at
  `transpose_copy_eff` 0.115 (least squares on the four forwards, 0.111-0.119) and the rest at hbm_eff: the
  forwards within 3%, the backwards (not fitted) within 4% at three shapes and 16% at T 16K
  (`test_gated_deltanet_glue_matches_the_h200_mixer`). The same copies run with CP since 20ba03f
  (gated_delta_net.py keeps causal_conv1d_fn's channel-first input). On Blackwell the rate is assumed the same
  share of HBM bandwidth (unmeasured). Effect: G15 best plans ~545 / 410 / 340 -> ~510 / 395 / 330 TFLOP/s,
  PR #3168's GB200 step 3.81 -> 4.04 s (of 6.68), GB300 3.32 -> 3.55 s (of 5.80), the ModelZoo H100 row of (p)
  1.56 -> 1.63 s (of 2.2). The level gap narrows to ~1.65x on the 4K recipe; CV unchanged (no GDN row in the fit).
  (v) Checked, not adopted (2026-12-04): a slower host on Grace. TE issue #2053 ("High CPU overhead on Grace
  systems") times a torch Linear's host side at 37.1 us on GB200 against 13.5 us on an H100 DGX's Xeon (2.75x);
  fla's own benchmarks give the Gated DeltaNet call's launch time as 0.61 / 1.11 ms (forward / backward) on
  Grace against 0.46 / 1.61 ms on x86 (`gdn_launch_s`), no slower overall. Charging Grace hosts 2.75x the
  fitted per-layer launch and per-expert launch times improves the refit (CV 0.138 -> 0.134, 26 of 26 pairs;
  G05's held-out RMS 0.146 -> 0.121) but takes PR #3168's GB200 step from 4.04 to 8.09 s (measured 6.68) and GB300's to
  4.58 s (5.80): the GB200 / GB300 pair (MBS 2 against 4, same layout) measured 1.15x apart, and a host cost
  per micro-batch that large makes it 1.77x. 1.5x moves the CV only to 0.137. The two measurements of Grace's
  host cost disagree, so neither is adopted. New rows at PR #3168's layout, from NVIDIA but unpublished or
  rounded (not in the data): Bridge PR #3818's draft 26.04 summary (867af0079, removed in 84ff628e5 before its
  merge) lists Qwen3-Next at 241 TFLOP/s on GB200 MXFP8 (PR #3168's 6.68 s), 277 on GB300 and 119 on B200
  (x86, PP1 EP64 MBS1, 13.5 s per step; moeplan 10.0 s, 1.35x, against 1.65x on Grace), and NVIDIA/skills'
  hardware card (7d99fda) gives ~330 for a BF16 run of the same layout with "cutlass grouped gemm", a kernel
  public TE has on Hopper only (cublaslt_gemm.cu at 71bbefb; TE PR #3069 adds Blackwell's for 2,048 x 512
  experts): moeplan is 1.31x over that row. The x86 row's smaller gap and the BF16 row's kernel both point
  at the expert GEMMs and host work of the 16 local experts, which no shared row separates.
- **gpt-oss-120b** (Bridge perf rows, out of sample, in tokens/s: GB300 +33%, GB200 +49%, B300 +40%, H100
  +20%, still marked: unmarked it would join the published-layout ranking, where the planner's fastest plan
  (TP2 EP32 DeepEP) beats its PP4 EP8 alltoall layout by 1.33x; before (b) and (e) +39% / +57% / +78% / +38%). What runs, read from the recipes (Bridge v0.4.2 / v0.5.0 scripts/performance/configs/gpt_oss, v0.6.0
  perf_recipes/gpt_oss) and gpt_oss_bridge (softmax_type learnable, window (127, 0) on every other layer,
  quick-GELU GLU with glu_linear_offset 1 and clamp 7, add_bias_linear, bias_activation_fusion), each costed
  from the model's config:
  (a) FLOP convention: Bridge 26.04.01 counts the quick-GELU experts as two matrices (flop_utils.py
  gated_linear_multiplier is 3/2 only for F.silu) and every layer as full attention (the window term came in
  v0.5.0), 0.83x moeplan's count, so the H100 row's TFLOP/s is not comparable: in time it is +20% (+44% in
  TFLOP/s); the 26.06 / 26.08 rows use moeplan's count (`tests/validation/test_flops.py`).
  (b) B300 and H100 run Megatron-Core's unfused TEGroupedMLP (no op fuser in their recipes): the clamp and
  torch.cat of the fc1 output outside the fused quick-GEGLU kernel and fc2's per-expert p x bias
  (TEGroupedMLP._apply_bias) in eager torch, ~81 KB forward and ~121 KB backward per routed row at F = H = 2,880
  with bf16 probabilities (H100's alltoall), ~127 / 190 KB with the fp32 ones DeepEP / HybridEP hand the
  experts (B300; token_dispatcher.py "HybridEP only supports float32 probs": p x b, the add and the cat run in
  fp32) (`timing.expert_glue_bytes`; moe_act recompute reruns the clamp's 46 KB), ~3.7 TB per B300 step: B300
  +78% -> +44%, H100 +66% -> +47% in TFLOP/s.
  (c) GB200 / GB300 (full-iteration bundle: use_transformer_engine_op_fuser, NVTE_CUTEDSL_FUSED_GROUPED_MLP=1)
  run TE's grouped MLP ops: the biases packed into the cuDNN grouped GEMMs and ScaledClampedQGeGLU in its
  kernel (TE ops/fused/grouped_mlp.py, from 2.17; fc2's dbias and probability gradient one Triton pass over
  its 6 KB dy per row): no eager glue, not the gap.
  (d) Attention: sinks rule FlashAttention out (TE utils.py get_attention_backend, "Filter: Softmax type");
  cuDNN F16_arbitrary_seqlen trains learnable softmax with the (127, 0) window from cuDNN 9.13.1 (fused_attn.cpp;
  every container ships >= 9.18), head dim 64, on sm90 / sm100 / sm103, FP8 (the GB200 / GB300 recipes'
  fp8_dot_product_attention) on sm100+ with cuDNN >= 9.21 (TE >= 2.16), so the layers stay on cuDNN
  (`attention_backend.attention_kernel`, sinks-aware). Its window bounds the key loop: moeplan charges the
  ~126 counted keys per query at the 128-token block rate (0.39 of the long-block rate: 2.6x per counted FLOP,
  above the 2x of two 128-key tiles per query tile). Attention is ~0.19 s of the ~1.8 s Blackwell steps;
  costing the sliding layers as full causal squares would add ~0.15 s, not the gap.
  (e) RoPE: gpt-oss's YaRN (factor 32, no mscale keys) has concentration factor 0.1 ln 32 + 1 = 1.35, which
  Megatron-Core's apply_rotary_pos_emb does not pass to TE's fused RoPE ("mscale ... is not supported by TE's
  fused RoPE. Using unfused implementation.", rope_utils.py 0.17 .. 0.19): the eager rotate-half path moves
  ~166 KB per token and layer more than the fused kernel over q and k (`timing.rope_glue_bytes`), ~0.09 s per
  Blackwell step: GB300 +39% -> +33%.
  Not found: the ~3.4 / 5.3 / 7.1 ms per layer and micro-batch (GB300 / GB200 / B300; ~0.6 / 1.0 / 1.3 s per
  step) the estimate still lacks. Not checked against a source: the rate of cuDNN's sink + sliding-window (and
  FP8) kernel at head dim 64, and the CuTe DSL grouped MLP's rate with biases at K = N = 2,880 (no benchmark of
  either was found). At head dim 64 the softmax exponentials bind; they are now costed per architecture
  (`timing.attention.softmax_exp_share`, below: DeepSeek-V3 on GB300), which slows GB200's head-dim-64 attention
  more than GB300's, and the recipes' FP8 attention (`fp8_attention`) runs the matmuls at the FP8 rate.
- **MLA attention**: the forward share is set from cuDNN's own kernels on one H200 (MLA's 192 / 128 heads keep
  0.917 of head dim 128's forward efficiency per FLOP, tests/data/mla_attention_h200.csv; with it the
  cross-validated error went 0.140 -> 0.138, G14's 0.190 -> 0.182). The backward is pinned almost only by the
  G14 CP series. Ring CP's off-diagonal steps are non-causal kernel calls (TE's AttnFuncWithCPAndKVP2P), and
  cuDNN's MLA-shaped backward runs those at 0.56 of its causal rate (~305 against ~500 TFLOP/s on one H200,
  tests/data/mla_attention_h200.csv; equal heads 128 show no gap): `attn_noncausal_bwd_share`, measured, not
  fitted (G14's held-out error 0.185 -> 0.128; `tests/unit/test_ring_noncausal_attention.py`). With it the
  planner's cp_comm_type choice for DeepSeek-V3 at 64K-256K on H100 moves from a2a+p2p to a2a (whole sequences,
  one causal call); which one the G14 runs used is not published. The flash family's Hopper backward is fitted
  apart from Blackwell's (`attn_bwd_eff.flash_sm90`, as FlashAttention-2's rates are split): with one share the
  Blackwell runs held the H100 rows 7-16% slow (Qwen3-235B 64K held out -16% -> -6%). The fitted Hopper shares
  are ~0.77 (MLA) and ~0.81 (head dim 128) of the isolated causal cuDNN kernels' at 8K-16K, their ratio the
  kernels' within 2% (`tests/validation/test_attention_kernels.py`). Not located: G14 at 128K / 256K still
  reads 7-12% fast fitted (18-27% held out) at the measured causal rate the fit leaves (the MLA share at the
  isolated kernel's 0.58 gives the same whole-fit CV with 128K / 256K +21% / +30%).
  Taken apart (`python benchmarks/g14_cp_series.py`, 2026-12-05 fit; `tests/validation/test_g14_cp_series.py`):
  every row holds 4,096 tokens per GPU, so the rest of the step per token is the same at 4K and 256K (within 4%)
  and attention with its CP communication carries the shape (9% of the 4K step, 86% of the 256K one). Under the
  planner's a2a (Ulysses: whole sequences, one causal cuDNN call at ~410 TFLOP/s on 64K-256K blocks, the CP
  all-to-all across 2 / 4 / 8 nodes not overlapped) the estimate rises 306 -> 326 -> 349 TFLOP/s from 64K to 256K;
  under a2a+p2p (a2a inside the node, a ring of CP / 8 across nodes on 16K-token blocks, TE's
  AttnFuncWithCPAndKVP2P, whose off-diagonal steps run the MLA backward non-causal) it falls 286 -> 271 -> 259, as
  the causal calls' share goes 1/2 -> 1/4 -> 1/8; the measured ~310 / 300 / 300 lies between the two at every
  point, and the source does not say which type ran. p2p over all CP ranks (2K-token blocks, each ring step's
  335 MB of MLA K/V, ~9 ms over the NIC against ~3 ms of forward attention) estimates 81-100: not what ran. Tried
  and not adopted: the G14 rows read as a2a+p2p where CP spans nodes give whole-fit CV 0.101 (from 0.106) and
  G14 held out 0.042 (-0% / -0% / -3% at 64K-256K), but the fit then puts `attn_bwd_eff.cudnn_mla` at 0.581, 1.00
  of the isolated causal kernel's share while head dim 128's stays at 0.81, an MLA / head-dim-128 ratio 23% off the
  kernels' (the bound `tests/validation/test_attention_kernels.py` holds); with the ring's non-causal share at
  0.75 instead of the measured 0.56 as well, CV 0.103 and G14 held out +7% / +14% / +14%. No cost in the a2a path
  that grows with length at fixed tokens per GPU was found in TE's AttnFuncWithCPAndQKVOA2A (the all-to-all of
  q, k, v and o and the chunk reordering are per token; the kernel is one causal call); the rounded
  series does not pin which CP type the runs used.
  Tried with HybridEP's per-copy work costed (2026-12-05; the ep64 copy-cost trial: `hybridep_copy_s`, Nemotron-3
  Super GB200 BF16 TP2 in the fit) and G14 read as a2a+p2p, the published DeepSeek-V3 128K H100 recipe's type (TP1 PP8
  VPP4 CP32 EP32; the card's tracker setting is not public), at CP 16-64 (CP 4 / 8 lie in one NVL8 domain: no p2p
  level, a2a): CV 0.1037 over 127 -> 0.0961 over 128, G14 held out 0.127 -> 0.043 (4K-256K -6 / -6 / +2 / -1 / -2 /
  -5%), pairs 120 of 120, but the fit puts `attn_bwd_eff.cudnn_mla` at 0.573 (flash_sm90 0.525): an MLA /
  head-dim-128 ratio 1.09 against the kernels' 0.87 (bound 15%, `tests/validation/test_attention_kernels.py`);
  DeepSeek-V3 B200 256 at 4K 0.857 of the fastest plan (< 0.9, `tests/validation/test_published_ranks.py`); the
  tuned DeepSeek-V3 256K layout on 512 H100 173.1 against 0.95 x 182.4 (`tests/validation/test_ranking.py`); the
  eval guidance-deepseek-v3-128k-h100 (300 measured) out of its band 321.5-389.7 (`tests/unit/test_skill_evals.py`;
  explain-deepseek-v3-32k-vs-128k passes). Read at CP 32 / 64 only: CV 0.0961, G14 held out 0.046, cudnn_mla 0.568
  (ratio 1.08), the same four fail (B200 0.857, band 320.2-388.1, 256K 172.2 against 0.95 x 181.5). Not adopted: the
  a2a+p2p reading needs an MLA backward share the kernels do not show.
- **The published group taken apart** (2026-12-05; `tests/unit/test_published_recipes.py`). (1) DeepSeek-V3 on
  1,024 H100 (Bridge 25.09, 338 TFLOP/s) was read from a later release's recipe (v0.6.0 perf_recipes: HybridEP, no
  EP overlap) with 'fp8' taken as blockwise, and sat 10% slow. The scripts that measured it (Bridge v0.1.0rc3
  scripts/performance/run_script.py, Megatron-Core 0.14) set on H100 enable_deepep and A2A_1F1B
  (overlap_moe_expert_parallel_comm + delay_wgrad_compute), recompute mla_up_proj + mlp and overlap_grad_reduce off,
  and the summary's 338 is FP8 current scaling (in parentheses, 330, the 1x128 / 128x128 blockwise run; 25.11 labels
  the same columns FP8-CS (...)). As it ran, moeplan is +25% (`tests/validation/test_timing.py` GAP_ROWS); fitted,
  it would take the group's held-out sum of squares 0.065 -> 0.10 and the whole fit's CV 0.1038 -> 0.1043 by
  moving the attention and GEMM constants the other rows pin, so it is reported, not fitted (tests/fit_exclusions.py:
  127 observations, CV 0.1037).
  Taken apart at the fitted constants: 422 TFLOP/s with the overlap, 316 without (+33%: 8.6 s of DeepEP EP64
  dispatch / combine over 8 nodes, 1.9 s left exposed); the measured step (25.3 s) is 6% shorter than moeplan's
  without overlap, 25% longer than with it. Checked and not the cause: Megatron-Core 0.14 runs the merged
  schedule under interleaved PP with the MTP layer (pipeline_parallel/schedules.py
  combined_1f1b_schedule_for_interleaved_pipelining; model_chunk_schedule_plan.py schedules the MTP layer as a
  layer), the data-parallel reduce without overlap (0.1 s), the last stage (MTP + loss, the slowest rank by 7%).
  Checked since (2026-12-05, at the fitted constants; per MoE layer and micro-batch moeplan has 2.30 ms a DeepEP
  dispatch or combine, RDMA-bound at 0.895 of the 50 GB/s NIC, four calls and 0.4 ms of permutes, beside a
  6.5 ms attention block and 5.9 ms of experts; the merged layer runs 11.2 ms, 11.5 from idle streams; the
  measured step needs ~5 ms more per layer and micro-batch), none of them the cause:
  (a) DeepEP's host wait: Buffer::internode_dispatch (deepseek-ai/DeepEP v1.2.1 csrc/deep_ep.cpp) launches
  notify_dispatch on its comm stream and spins on the host-mapped moe_recv_counter / moe_recv_rdma_counter /
  moe_recv_expert_counter before it allocates the output; Megatron-Core 0.14 fused_a2a.py FusedDispatch.forward
  calls it without a handle, while the backward's dispatch (FusedCombine.backward) passes the handle (cached_notify:
  no host wait). In TransformerLayerSchedulePlan.run the forward dispatch is issued after attn_fwd and mlp_bwd, so
  the host waits until combine_bwd and attn_fwd are done while the compute stream runs the queued mlp_bwd, and is
  back before mlp_bwd ends: the merged layer's nodes replayed with a host that cannot issue past the forward
  dispatch before it starts (plus up to 1 ms for the counts) take the same 11.2 / 11.5 ms. The wait costs only
  where the host's issue time per merged layer nears the GPU's (~9 ms of 11.2); the measured step needs ~15 ms,
  and no shared row times a host's issue time per layer (moeplan fits only its exposed part, 0.46 ms a layer).
  (b) SM use: Megatron-Core 0.14 moe_deepep_num_sms 20 (Bridge v0.1.0rc3 leaves it), moeplan's ep_sms; to expose
  what the step does, the hidden traffic would cost ~0.75 of the GPU while it runs, not 20 / 132 = 0.15. DeepEP
  launches its kernels cooperatively (csrc/kernels/launch.cuh), so a dispatch waits for 20 SMs to free behind a
  running GEMM wave: a delay of a wave's tail, not milliseconds. Bridge's PerfEnvPlugin with DeepEP sets only
  NVTE_FWD / BWD_LAYERNORM_SM_MARGIN 20 (layernorm only). (c) One launch queue: the PerfEnvPlugin sets
  CUDA_DEVICE_MAX_CONNECTIONS=1 on H100 with TP > 1 (recipes/run_plugins.py), which serialises the two streams (N25
  measures +3.7% instead of +7.8% of overlap gain with it), but comm_overlap.py _set_num_cuda_device_max_connections
  unsets it on Hopper with overlap_moe_expert_parallel_comm, in runtime_config_update before initialize_megatron
  sets the device: the run had the default queues. (d) NVSHMEM / IBGDA on InfiniBand: moeplan's 2.30 ms is at
  0.895 x 50 GB/s, below DeepEP's own internode EP64 rate on CX7 400 Gb/s (51 / 50 GB/s RDMA, its README): not
  slower than measured. (e) The 0.14 merged schedule: the layout Et|(tt|)*30mL gives chunks of two layers, and
  every chunk's first merged layer starts from idle streams (model chunk run ends waiting on both events), which
  moeplan charges (EP_CHUNK_EDGE: 11.5 against 11.2 ms); forward and backward of different chunks merge
  (combined_1f1b_schedule_for_interleaved_pipelining); the forward chunk's PP send / receive runs on the comm stream
  too (TransformerModelChunkSchedulePlan.run: post_forward under the comm stream), 29 MB a hand-off over the NIC,
  ~3 ms a micro-batch (four chunks) beside ~68 ms of EP calls, where the step lacks ~40 ms a micro-batch. What
  overlap is worth in the pairs that toggle it: G11 (HybridEP EP16 in one node) measured 1.175, moeplan 1.166; N33 (p5
  H100, EP across 2 / 4 nodes, VPP 1 -> 2 with the overlap) measured 1.25 / 1.47 (NCCL all-to-all EP16 / EP32) and
  1.29 / 1.61 (DeepEP over NVSHMEM), moeplan 1.14 / 1.11 / 1.13 / 1.09; the N31 overlap rows (p6-b300) sit -14% to
  +4%. Where DeepEP crosses nodes with the overlap, the runs gain more than moeplan says, and this row gains less
  (moeplan 1.33 where the measured step is ~0.94 of moeplan's without): a global cost that hid less of DeepEP's
  traffic across nodes would move N33 the wrong way, so the row stays out.
  The blockwise run's ratio (338 / 330 = 1.024 measured, moeplan 1.06) is one summary
  cell in parentheses, not a row of the shared CSV: not in the fit. (2) Qwen3-235B-A22B on 256 H100 (Bridge 25.11,
  v0.2.0 scripts: alltoall EP32 with overlap, FP8-CS, no recompute; as the recipe table reads it) is -6%: 17.3 s of
  NCCL all-to-all (no de-duplication: top-8 copies) of which the overlap hides 5.6 s, 12 s of compute; its 16K / 64K
  ModelZoo rows (-6%) run without overlap, so the three H100 Qwen3 rows share no EP-overlap item with the DeepSeek-V3
  row, and with that row fast the H100 tuned recipes are not uniformly slow. (3) The output layer in BF16 tried again,
  now with Megatron-Core 0.18's fp8_output_proj (TE's LM head under MXFP8, set by Bridge's DeepSeek-V3 and gpt-oss
  MXFP8 recipes on GB200 / GB300: v0.6.0 perf_recipes/deepseek _enable_deepseek_full_iteration_mxfp8,
  gpt_oss/common.py; the first try, BF16 at every precision, also slowed those): CV 0.1043 -> 0.1032, DeepSeek-V3
  1,024 H100 +25% -> +16%, GB300 -17% -> -16%, G14 4K -8% -> -11% (with the row fitted), but the published layouts of DeepSeek-V3 on
  1,024 H100 and Qwen3-235B-A22B on 256 GB200 fall to 0.89 / 0.87 of the fastest plan (their last pipeline rank
  carries the BF16 heads: +15% / +13% over the others), so not adopted. DeepSeek-V3 on GB300 (-17%) was not taken
  apart in this pass.
- **Published layouts the planner does not reach** (`python benchmarks/published_ranks.py`: the published
  layout with the planner's best knobs over the fastest plan; {published_ok} rows >= 0.9 at this fit). For each
  row below, what the recipe runs was read from the code that ran it; no physical cost was found missing,
  and none of the four layouts was chosen against a measured run of the layout the planner prefers (the one
  measured alternative, Qwen3-235B on B300 with VPP4 and overlap, ran at less than half of what any
  modelled cost gives, below):
  - EP overlap and interleaving with wider EP, which the four fastest plans lean on, against the pairs that
    measured them (`tests/validation/test_ep_overlap.py`): G11 (HybridEP EP16 on 16 H100, overlap off -> on)
    gained {g11_measured}x measured and {g11_moeplan}x in moeplan; MB01 (DeepSeek-V3 on 256 B200, PP16 VPP1 EP8 -> PP8 VPP2
    EP32 with overlap) {mb01_measured}x measured and {mb01_moeplan}x in moeplan: moeplan values neither more than the runs
    did. What overlap is worth in each gap (2026-12-03 fit): with EP overlap off for every plan the rows would
    read 0.87 (Qwen3 16K H100), 0.94 / 0.93 (DeepSeek-V3 / Qwen3 on B300) and 0.69 (DeepSeek-V3 B200, whose
    published layout overlaps), so on B300 the gap is the overlap's value on the fastest plans (estimated
    +17% / +25% there, against G11's measured +17.5%). Checked and not the cause: (a) the order in which
    Megatron-Core runs a merged layer (model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run: two
    streams and one CUDA event per model chunk, pipeline_parallel/utils.py ScheduleNode, so mlp_fwd waits for
    dispatch_fwd, dispatch_bwd for mlp_bwd, combine_fwd for mlp_fwd and the next layer for both chains) is the
    overlap model, node by node (`timing.merged_layer_s`, `test_overlap_model_is_the_merged_schedule`), with
    delay_wgrad_compute where the run sets it (Bridge pairs it with every overlap,
    scripts/performance/utils/overrides.py `_set_moe_a2a_overlap_overrides`; G11's recipe turns it off): the
    experts' weight-gradient GEMMs run beside dispatch_bwd, attention's and the shared experts' beside the next
    layer's combine_bwd inside a model chunk (not in its first layer), so it hides more, not less. Against the
    three windows it replaced (2026-12-03): cross-validated error 0.140 and 26 of 26 pairs either way, these
    rows 0.91 -> 0.92 (Qwen3-235B H100 4K, twice) and 0.95 -> 0.94 (DeepSeek-V3 on 1,024 H100), the four not
    at all: the fastest plans hide all of their dispatch / combine either way. (b) The merged pipeline (one
    extra warm-up micro-batch, schedules.py get_pp_rank_microbatches; each steady step a forward and a
    backward that start together, so both inputs must be there): simulated with equal chunks its bubble is
    (PP - 1) / VPP micro-batches at each of these layouts, as costed
    (`test_merged_pipeline_keeps_the_interleaved_bubble`). (c) SM contention: the hidden part is
    charged the SM share the dispatch / combine kernels hold (DeepEP 20, HybridEP 32), and TE's GEMMs
    reserve none for them (gemm.cpp: NVTE_EXT_MARGIN_SM unset, all SMs); G11, the one pair that measures it,
    leaves room for ~1% of its step more, so a larger share is not pinned; doubling it (each held SM costing
    two, as a persistent GEMM's late second wave would) takes G11's gain to 1.11 against 1.175 measured and
    the four rows only to 0.81 / 0.84 / 0.81 / 0.79 (tripling: G11 1.04; 0.82 / 0.87 / 0.81 / 0.78). Nor
    memory: the extra warm-up micro-batch is in the memory model (memory._extra_warmup), and a merged step
    frees the backward chunk's activations layer by layer as the forward builds its own. (d) Host launches: under overlap
    each merged layer holds the forward dispatch's host sync, so the backward's per-expert launches can no
    longer run ahead; on the fastest plans' shapes a layer pair's launches (<= 5.3 ms) stay below its GPU
    work (7-19 ms): no change.
  - Qwen3-235B-A22B 16K and 64K on 256 H100 ({ratio:qwen3-235b-a22b-H100-256-16384}, {ratio:qwen3-235b-a22b-H100-256-65536}; the 64K
    row fell below 0.9 when the search came to refine 48 layouts whatever --top asks, and found EP32 CP8 VPP8 with
    `layernorm` recompute and EP overlap): each row is one point of a CP series at one fixed layout
    (Megatron-MoE-ModelZoo best_practice/qwen3: 16K-128K all at TP4 PP8 VPP4 EP8, `A2A_OVERLAP=0`,
    recompute `layernorm moe`, CP 1-8), not a tuned choice. Its `moe` recompute is needed for memory, in
    moeplan too (65 GiB with `layernorm,moe`, 114 GiB with `layernorm,moe_act`, on 80 GB H100s; the
    README's note on a TE sequence-parallel memory fix says it ran close). moeplan estimates that run
    within 2% of its measurement (290 vs 295 TFLOP/s): the layout is not over-charged (its TP4 sequence-parallel
    collectives are 2% of the step). The faster plans (EP32 with TP2 CP4 or TP4 CP2; the fastest estimate is in
    the table above) split the sequence 8 ways (TP x CP) instead of 4 and fit without `moe` recompute (15% of
    the pinned layout's step); their DeepEP legs across 4 nodes reproduce DeepEP's own benchmark (below) and
    their CP ring stays inside the node. From
    core_v0.17.0 Megatron-Core forbids EP overlap with `moe` recompute (Megatron-LM 45b8eac): lower there.
  - DeepSeek-V3 and Qwen3-235B-A22B on 256 B300 ({ratio:deepseek-v3-b300-256-4096}, {ratio:qwen3-235b-a22b-b300-256-4096}). The recipes (Bridge v0.5.0 / v0.4.2) run
    HybridEP inside the node only (NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=8, USE_MNNVL=0; no RDMA leg)
    at PP8 VPP1 MBS2, where EP overlap is impossible (TransformerConfig asserts VPP when PP > 1) and the
    PP sends are batched; the gap is that overlap (19% of the Qwen3 step exposed) and the VPP1 bubble,
    not cross-node EP (Qwen3's PP4 VPP4 EP8 plan with overlap is within 1% of the fastest). Checked and not the
    cause: B300's scale-out (8x ConnectX-8 800G = 100 GB/s per GPU; the GPU attaches to the CX-8's PCIe
    Gen6 switch at Gen6 x16, NVIDIA Hot Chips 2025), HybridEP across nodes being unavailable (both
    releases' containers build its RDMA path: HYBRID_EP_MULTINODE=1 in Bridge v0.4.2
    docker/Dockerfile.fw_base and v0.5.0 docker/Dockerfile.ci), and the recipes' bf16 main grads
    (grad_reduce_in_fp32 False, now read from the recipe; both layouts gain). Why the recipes stay at EP8 and
    VPP1, in Bridge's own words: "HybridEP for NVL8 with EP>8 is currently [not] performant, so we are
    limiting the EP size to 8" (issue #2883, 2026-03-18, "Revisit 26.06"); PP8 VP2 "shows performance
    fluctuations across iterations" (PR #2627, which set VPP1). History: DeepSeek-V3's B300 recipe started
    as B200's PP16 EP8 (Bridge 5ccbfdf); its next one, PP8 VPP2 EP8 MBS1 with EP overlap and full-iteration
    graphs (PR #4458, 2026-06-25; ecfcd84 in v0.6.0), measured 894.1 -> 1161.4 TFLOP/s on its author's runs
    (+30%, with FP8 attention, which moeplan does not model), toward the planner's choice; moeplan estimates
    it at 1191 and orders the pair as measured (`tests/validation/test_bridge_pr_runs.py`, out of the fit);
    pinned, that layout is 0.895 of the fastest plan (EP16 across two nodes, the HybridEP leg Bridge's issue
    calls slow: below, HybridEP across two nodes). Qwen3-235B's initial B300 recipe
    did run the planner's direction in part: Bridge's docs/performance-summary.md at c0b9a0003 (26.02)
    lists it at PP8 VP4 EP8 MBS1, 399 TFLOP/s, with moe_a2a_overlap and no flex backend in its preset, so the
    Qwen provider's alltoall (qwen_provider.py moe_token_dispatcher_type), without CUDA graphs; 592711a
    ("to match Qwen3 B200 Configs", whose PR #1760 had disabled moe_a2a_overlap "due to CPU overhead")
    then set VPP1 without overlap (26.04: MBS2, alltoall, 720; 26.04.01: HybridEP, 878; Bridge issue #3399:
    "moe_a2a_overlap and VP degraded perf" on B300). It is the only B300 run with VPP > 1, and it does not
    rank the alternatives: in the same release Qwen3-235B on B200 at PP8 VPP1 EP8 MBS1 measured 563, and
    DeepSeek-V3 at one layout measured 776 on B300 against 699 on B200; moeplan puts the VPP4 run at 898
    with alltoall (777 without its overlap), 2.25x its measurement. The host cost Bridge names for EP overlap
    ("CPU overhead" on x86 hosts) is not in moeplan's schedule model, and no shared row measures it, so the
    run stays out of the fit and the ranking tests as an outlier of its release's software. No B300 run with
    EP > 8 is published.
  - DeepSeek-V3 on B200 ({ratio:deepseek-v3-b200-256-4096}): EP32 over 4 nodes against EP16 over 2, whose RDMA leg is 2.4x smaller
    (group-limited routing: 2.36 against 0.99 remote nodes per token); with 400G NICs the EP32 leg
    outlasts its overlap windows (6.0 s exposed against 1.3 s, both with HybridEP). The DeepEP internode
    model reproduces DeepEP's own H800 benchmark when routed as the benchmark routes (EP16 / EP32 / EP64
    within 10%: `test_deepep_internode_benchmark_is_reproduced`; the earlier 35% EP16 gap was mostly the
    test's routing). EP16 was 12% fast until its NVLink leg, which binds at two nodes (1.0 remote node but
    6.5 ranks per token; the NIC carries ~21 GB/s), got the internode kernel's own rate: one NVLink-sender
    warp per peer per channel (internode.cu) holds it at ~145 GB/s with 24 SMs on H800 and H200 alike
    (DeepEP issues #285, #493; `timing.ep_kernel_bw_bytes_per_s`), not the intranode kernel's 158 GB/s.
    That made this row's EP16 DeepEP plans slower (the row's estimate +11% -> +5%), and the fastest plan is
    now EP16 with HybridEP, whose two-node NVLink leg keeps the intranode link share (below, HybridEP across
    two nodes); costed at HybridEP's own H100 two-node rate the row stays at 0.79 (EP32's HybridEP leg, 4
    nodes, is RDMA-bound either way), so that is not this gap either.
    Bridge's only B200 EP16 recipe (PP16 VPP1 without overlap) was replaced by EP8 (Bridge 039143a),
    and moeplan orders that pair the same way (EP8 14% above EP16 there); EP16 with VPP and EP overlap
    was never published. The recipes' bf16 main grads cost the row 0.02. Since Blackwell's softmax exponentials
    are costed at its own tensor-core-to-SFU ratio (twice Hopper's, `timing.attention.softmax_exp_share`), the row
    sits at the bound and passes it (0.91 at that refit; no longer a strict xfail).
- **HybridEP across two nodes** (`test_hybridep_internode_benchmark_is_reproduced[16-gap]`, strict xfail):
  DeepEP's docs/README_Hybrid-EP.md H100 table (4096 tokens, hidden 7168, top-8 uniform over 8 local experts
  per rank, counted as its tests/test_hybrid_ep.py counts: tokens x nodes reached, own node included) gives
  EP16 BF16 dispatch / combine 54.47 / 53.35 GB/s with 16 SMs (57.74 / 56.96 with 8 SMs), i.e. ~180 / 177
  GB/s on the NVLink leg (6.6 ranks per 2.0 nodes reached), 0.40 / 0.39 of H100's 450, against the 0.61 /
  0.63 intranode link share moeplan uses there (83 / 86 GB/s); EP32 / EP64 are RDMA-bound (moeplan 11-27%
  above the table at DeepEP's NIC share). Tried as a link share of HybridEP's own across NVL8 nodes: the
  table reproduces, the cross-validated error falls 0.140 -> 0.134, G11's overlap-off row +20% -> +6% and
  the Qwen3-30B-A3B H100 HybridEP row's gap +53% -> +40%, but G11's overlap gain becomes 1.28 against 1.175
  measured (`test_g11_overlap_gain_is_the_measured_one`: the overlap-on row stays +16%, the model hides 5.2 of
  the 7.7 s of EP traffic where the measurement leaves room for ~3.5). Not adopted: what limits the overlap of
  a larger two-node HybridEP leg (its SM budget under overlap, 32 by default against the benchmark's 8-16;
  the windows' compute) has to be found first. The code-level cause of the 0.4 link share inside hybrid-ep's
  internode path was not read.
- **Launch overhead** (G09): the measured graphs gain (+28%) is ~6x moeplan's (+5%); a larger per-layer
  host cost would make the no-graph Qwen3-235B H100 rows slower than measured. Until 2026-12-03 the fit's
  G09 observation evaluated the MB01 pair instead (a closure over loop variables in `observations()`), so
  G09 entered twice as MB01 and the reported cross-validated error was 0.1382; with G09 itself, and no
  model change, it is 0.1416.
- **GEMMs against kernel measurements** (`tests/validation/test_expert_gemms.py`, strict xfail;
  `python benchmarks/fit_gemm.py`): the six routed-expert GEMMs of DeepSeek-V3, Qwen3-30B-A3B and Qwen3-Next
  shapes at 256-5,120 rows per expert, one cuBLASLt call per local expert over 4 streams as TE GroupedLinear
  issues them, measured on one H200 in CUDA graphs (benchmarks/gpu/expert_gemms.py, 2026-12-04; BF16, FP8, and
  BF16 weight gradients into an fp32 main_grad: tests/data/expert_gemms_h200.csv). The kernels take the longer
  of their FLOPs and their bytes: fitted to them alone, that form reproduces all 196 within 10% RMS at 0.92 of
  the matmul rate (the measured row counts are tile multiples: no padding), ~2.7 us per expert call and little
  depth penalty (gemm_epilogue_s 1.2e-11); the additive form the tool runs cannot get below 20%, and with the
  calibrated constants it charges them +32% (BF16), +19% (FP8), +39% (fp32 main_grad) on average. Tried in the
  run fit (2026-12-04, against the 0.140 fit; the kernel constants then read 0.95 / 5.8e-12 / 2.7 us, the padding
  wrongly taken off the aligned rows), not adopted: (a) GEMMs as the kernels measure: cross-validated error
  0.140 -> 0.188, the Qwen3-30B-A3B rows and G11 +27-33% fitted, DeepSeek-V3 on 1,024 H100 +15%; every Qwen3-30B-A3B row then
  misses 1.4-2.0 ms per layer and micro-batch (alltoall or HybridEP, overlap on or off, H100 or GB200, MBS 1 or
  4: 120-450 ns per token), a cost fixed per layer, not per token; (b) plus a fitted per-layer GPU time that
  CUDA graphs do not remove (1.4 ms): CV 0.165, PR #3168's Qwen3-Next GB200 step within 35% (the strict xfail
  passes), but the DeepSeek-V3 128K tuned layout and three published layouts (Qwen3-235B H100 4K, DeepSeek-V3
  H100 1,024, Qwen3-235B GB200) fall below their bounds; (c) the overlapped form with grouped_gemm_eff and
  gemm_epilogue_s left to the runs: CV 0.164 (they fit to 0.71 and 7.6e-11); (d) GEMMs as the kernels measure,
  the per-layer launch time exposed only beyond the layer's GPU work (a host / GPU max, fitted from 4 ms) and a
  fitted GPU floor per layer: CV 0.156 (published 0.099, G11 0.122, but G14 0.224, MB01 0.237, G09 0.247), the
  floor 2.1 ms and the host time hidden everywhere (not pinned); (e) GEMMs as the kernels measure times one
  fitted share of the kernel rate that runs reach: CV 0.142 (a tie), the share 0.59 where the fitted attention
  backward sits at ~0.75 of its kernels (no one factor), the DeepSeek-V3 128K tuned layout at 0.947 of the
  fastest plan (bound 0.95). So the additive GEMM charge
  stands in for a cost of the hidden-2,048 models that is fixed per layer and micro-batch, the shape of
  Qwen3-Next's ~4 ms ((h) above) and of G09's graphs gain: GPU-side (a layer's few hundred small kernels each
  with a minimum time, as the 2.7 us per expert call measured here) or host-side. The small kernels' own floor,
  measured the same way (benchmarks/gpu/small_kernels.py, tests/data/small_kernels_h200.csv: chains of add,
  scale, cast, RMSNorm, softmax and top-k in one CUDA graph), is ~1.3-2.5 us per kernel on H200, so 1.4 ms per
  layer and micro-batch on the GPU would take ~600-1,000 kernels: the count per layer has to be established
  (forward and backward, eager and graph-captured) before the floor can be charged per kernel; what is not GPU
  floor is host time. (The same chains put torch.topk over 128 / 512 experts at ~70 GB/s, 33 / 114 us at 4,096
  tokens: where moe_router_fusion is off that is ~0.1-0.2 ms per MoE layer and micro-batch.) Next: count a
  layer's kernels by kind and refit with the GEMMs pinned to this table.
  Adopted 2026-12-05, between the two forms: a GEMM's operands stay additive, its output's traffic (the
  epilogue's D store, the fp32 main_grad read-modify-write of a weight gradient) costs only what outlasts its
  compute (`timing.gemm.gemm_call_s` epilogue_bytes: persistent warp-specialized kernels, CUTLASS sm90 pingpong
  and sm100's double-buffered accumulators, run one tile's epilogue beside the next tile's main loop). Found at
  N41's 4K point (Llama2-7B on 4 H100, TP 1, 256 micro-batches of 4,096 tokens a step: its 6.7B fp32 main grads
  read and written every micro-batch were ~6 s of a 63 s step, additive), which ran -10% with the 8K point -4%
  and put the sweep's max / min at its bound (1.29 against 1.433 x 0.9): 4K -3%, the sweep inside it; the whole
  fit (with the host timeline) 0.093 -> 0.089 over 127, gemm_epilogue_s 2.3e-10 -> 3.1e-10 (more of the shallow
  GEMMs' cost now in the depth term). Moves: MB01's EP32 layout over EP8 +2.6% past the measurement (EP8's 32
  local experts keep shallow, exposed weight-gradient epilogues; strict xfail in tests/validation/
  test_ep_overlap.py), PR #3168's Qwen3-Next GB200 step within 35% (a plain test), Nemotron-3 Super's GB200 BF16
  TP 2 and B200 NVFP4 TP 2 rows inside the 25% check (+21-22%), so in the fit: 129 observations, CV 0.091. Their
  TP 2 gap narrowed, not closed: the GB200 MXFP8 TP 2 row still runs +36% and stays out with it. The traffic
  hides under the main loop alone (flops / rate, without the depth term's fixed per-tile work: a pingpong warp
  group's epilogue runs beside the other group's main loop, not beside its own epilogue; review, same CV 0.091).
- **Per-local-expert launches of TE GroupedLinear** (narrow in-node EP8, Qwen3-Next on GB200; modelled,
  `timing.expert_host_s`). What runs: Megatron-Core's TEGroupedMLP calls Transformer Engine GroupedLinear for
  fc1 and fc2; through TE 2.16 (every shared run's container; the single-launch grouped-tensor path arrived
  in TE 2.17, 2026-07) `general_grouped_gemm` -> `nvte_multi_tensor_gemm` -> `multi_stream_cublas_gemm`
  issues one cuBLASLt matmul per local expert over 4 streams (common/gemm/cublaslt_gemm.cu; its CUTLASS
  grouped kernel is Hopper + BF16 behind NVTE_USE_CUTLASS_GROUPED_GEMM only), each with its own layout,
  scale and heuristic set-up, and under MXFP8, current or block scaling `tex.split_quantize` runs one
  quantize kernel per split (extensions/cast.cpp: only FP8 delayed scaling has a fused multi-tensor cast);
  the MXFP8 scale swizzle is one multi-tensor kernel per operand list. Quantized, that is 10 host launches
  per local expert and MoE layer (forward 2 GEMMs + 2 quantizes, backward 4 + 2), ~30 us each (TE PR #3134:
  8 experts' multi-stream cuBLASLt GEMMs in 0.267 ms on SM100 against 0.069 ms for one kernel) for a GEMM;
  a quantize's host side depends on the recipe (read from the code, `timing.moe.split_quantize_host_s`): for
  MXFP8 and FP8 block scaling `split_quantize` is one call that bulk-allocates every split's data and scales
  (BULK_MXFP8, TE PR #1934, v2.6+; BULK_FP8_BLOCKWISE, PR #1793) and loops over the splits in C++, one
  nvte_quantize_v2 launch each (`SPLIT_QUANTIZE_LAUNCH_S`, 5 us, not fitted); current scaling allocates and
  quantizes each split on its own (a round trip each); delayed scaling and NVFP4 cast every split at once.
  This brings Nemotron-3 Super on 64 B300 (N20: EP8, 64 local MXFP8 experts of ~350 rows) from 0.75x its
  measured 7,867 tokens/s per GPU (the quantizes as round trips: a third of its step in launches) into the fit
  at 1.00x (held out -2%), and with it the B300 NVFP4 / MXFP8 pair (the ratio +7.5%, a strict xfail of
  test_nvfp4_pairs: the launches NVFP4 drops show in full in a host-bound step), held out while that row missed.
  Refit (2026-12-05, against 126 observations at CV 0.1059): 128 observations, CV 0.1038 (held-out sum of
  squares 1.414 -> 1.380); N02 0.139 -> 0.085 (its FP8 blockwise rows held out -14% / -18% -> +12% / +7%),
  MB01 0.033 -> 0.015, N20 0.110 -> 0.084; but N27's EP8 MXFP8 / BF16 ratio +5% -> +9% and N30's MXFP8 row
  +7% -> +16% (Qwen3-30B-A3B's 16 local experts of hidden 2,048 and FFN 768, whose quantize round trips had
  stood in for a small-expert FP8 cost moeplan lacks: those rows' MXFP8 gains little over BF16), and
  gemm_epilogue_s 2.08e-10 -> 2.24e-10 (already past `tests/unit/test_gemm_shape.py`'s bound, a strict
  xfail); PR #3168's GB200 Qwen3-Next step 1.46x -> 1.55x its estimate (outside test_ranking's 35%, a strict
  xfail: the round trips had covered part of its per-layer gap, below). (First tried 2026-12-05 against 108 observations: B300 in at 1.00x, N02 / N27 / N30 +9-14%, MB01
  -10%, gemm_epilogue_s 1.55e-10 -> 1.83e-10 past its bound, so backed out then.) They are
  exposed beyond the GPU work they can run ahead of: forward, after the dropless host sync, only the
  layer's dispatch and expert forward GEMMs; backward (no host sync: m_splits and the dispatch handle are
  saved) the layer's whole backward. The fit pins the launch at 33 us (posterior/prior sd 0.24), next to
  its source value: MB01 goes from -12% to -5% (held out -13% to -7%: the PP16 EP8 layout's 32 local MXFP8
  experts expose ~1.2 s of its step), PR #3168's GB200 step from 2.8 s to 3.3 s (of 6.68; GB300's MBS 4
  hides it). BF16 experts are left in the per-layer constant: costed at the same rate, the launches take
  G09 (Qwen3-30B-A3B, H100 BF16, 32 local experts, graphs +28%) from -17% to -19%, since an uncapturable
  host cost dilutes the graphs gain, and at G09's ~3 ms per layer and micro-batch (its measured step) 192
  launches cannot cost ~30 us each; that fit scored 0.1431. Separate GEMM and quantize constants are not
  pinned (0.143). Cross-validated error 0.1416 without the term, 0.1418 with it (26 of 26 pairs either
  way): the fit does not get better, MB01 does. Outside the fit, MB13 (Qwen3-30B-A3B, 8 B200 MXFP8, 16
  local experts; 26.02 -> 26.02.01 moved MBS 1 -> 4, alltoall -> HybridEP and graphs to attn / moe_router /
  moe_preprocess, Bridge 0ec1df783) measured 223 -> 614 TFLOP/s (2.75x): with those knobs moeplan gives
  311 -> 764 (2.46x) with the launches and 645 -> 816 (1.27x) without, the MBS 1 row going from +189% to
  +40%. It stays out of the fit: the pair splits into ~7.7 ms per layer and micro-batch that does not scale
  with tokens and ~1.1 ms per sequence, and its 25.11 row (214, MBS 1) ran token drop with full-iteration
  graphs (Bridge 455483003 scripts/performance/configs/qwen3), which capture the experts, at the same level,
  so that fixed cost is not host launches alone. Not settled: that fixed cost, the per-launch
  host time per host CPU (Grace vs x86 Xeon: no shared source), and the ~4-5 ms per layer and micro-batch
  the GB200 / GB300 pair leaves for Qwen3-Next (the forward windows expose ~1 ms of its 16 local experts'
  launches). The forward window no longer holds HybridEP's dispatch (`timing.moe.dispatch_before_host_sync`:
  HybridEP copies tokens_per_expert to the host after its dispatch kernel, DeepEP/executor.cu), which takes PR
  #3168's GB200 / GB300 steps from 1.54x / 1.55x to 1.46x / 1.45x of their estimates (both then within the 35% of
  `test_qwen3_next_bridge_4k_recipe`), N30's MXFP8 / BF16 ratio to 1.00 (measured 1.02) and N02's FP8 row lower
  (the FP8 small-expert over-charge above); the fit's error is unchanged (0.1509 -> 0.1512).
- **The catalogued models' tuned rows** (issue 31; `tests/measured_variants.catalog_variants`, "Catalogued models'
  rows" above; `CATALOG_ROWS_IN_FIT`). Nine rows are tuned recipes with a published layout: Nemotron-3 Super on H100
  (N13), GB300 and B200 (N20, MXFP8), 3.5 Lightning on GB200 (N14), Nano on GB300 (N15), DeepSeek-V4-Flash on GB200
  and GB300 (N12 cards) and in Megatron-LM's recipe index (N06, with V4-Pro on GB300). At the fitted constants they
  are +3% to +20% fast (V4-Pro -3%), as the fitted Qwen3 Blackwell rows are (N01 +11-37%, N30 +13-19%, N03 +20%).
  Fitted with the rest (tried 2026-12-05, before the FP8 costs below): 51 observations, cross-validated error 0.151 -> 0.124 (held out:
  published 0.164 -> 0.128, N01 0.247 -> 0.202, N03 0.189 -> 0.139; MB01 0.007 -> 0.046, N37 0.097 -> 0.103), the
  new rows +3% to +14%, PR #3168's GB300 Qwen3-Next step inside 35% and the Qwen3-235B 64K H100 eval inside its
  band. But the fit gets there by raising gemm_epilogue_s 1.23e-10 -> 1.95e-10 (the depth at half rate on H100
  BF16 586, past `tests/unit/test_gemm_shape.py`'s few 64-deep K-steps; the kernels measured 1.2e-11) and
  attn_bwd_eff.flash 0.41 -> 0.47 with it, which moves DeepSeek-V3 on 256 GB300 from -15% to -21%, Bridge PR
  #4458's B300 recipe to -16% (10% bound), MB01's interleaving gain to 1.23 (1.18 measured) and N40's points to
  +12-15% (held out; its max / min holds). Fitting only the DeepSeek-V4 rows gives CV 0.134 with N40 at +12.6%,
  only Nemotron-3's 0.134. So the rows share a cost the model lacks rather than a GEMM depth: all of them are
  small-hidden stacks (hidden 2,048-4,096, experts of 768-2,048 or latent 1,024), most in MXFP8, where the quantize
  passes per GEMM input (one `split_quantize` kernel per expert split under MXFP8) and the per-layer host time
  (G09) are the candidates; the Mamba-2 SSD kernels, timed at fla's Gated DeltaNet rates with no SSD measurement
  shared, are another for Nemotron-3. With the FP8 costs beside the GEMM modelled (quantize bytes per recipe, the
  experts' padding copies, blockwise GEMMs on Hopper: issue 31's "layer" work) they enter the fit at
  gemm_epilogue_s ~1.3e-10 (its range) and move no other check out of its bound: 100 observations, CV 0.145 against
  0.150 without them.
- **Freeing the weakly-sourced global constants** (2026-12-05, helper freefit; `benchmarks/free_constant_probe.py`,
  the same fit and leave-one-group-out loop as here with one constant more in FITTED, its source value as prior;
  127 observations, shipped CV 0.1037, held-out sum of squares 1.366). Freed one at a time (fitted value from the
  source value, posterior sd in log / logit units, CV): `nvlink_eff` 0.80 -> 0.81 (sd 2.8), `scaleout_eff` 0.75 ->
  0.74 (2.3), `tp_hidden` 0.50 -> 0.51 (1.8), `pp_handoff_s` 20 -> 20 us (3.0, the prior's), `optimizer_bytes_per_param`
  30 -> 30.5 (2.9): no row pins them, CV 0.1037 each. `hbm_eff` 0.70 -> 0.46 (sd 0.29): CV 0.1064, and below a
  STREAM-like kernel's 0.6-0.9 of datasheet bandwidth. `elementwise_traffic` 2.0 -> 6.9 (sd 0.31): CV 0.1029 (sum of
  squares 1.345), not adopted: counted kernel by kernel an unfused norm moves ~2.5 HBM bytes per byte the layer
  saves (forward reads x and writes y, backward reads x and dy and writes dx, against x and the next GEMM's y saved)
  and SwiGLU ~2.7, so 6.9 is no traffic ratio; it takes over what `gemm_epilogue_s` stands in for (2.25e-10 ->
  6.4e-11, its posterior sd 0.17 -> 1.2: the two are one degree of freedom the rows do not split). Both
  (`elementwise_traffic` 4.6, `hbm_eff` 0.56) CV 0.1031. The optimiser is converged: from the source values the cost
  reaches 1.692461 by LM iteration 8 and is the same to 7 digits at 12, 16, 24, 30 and 45 iterations and from four
  random starts (sd 1 around the prior); the CV refits give held-out sum of squares 1.3657 at 4 iterations (the
  default), 1.3665 at 8 and 12, and 1.3665 with a 16-iteration full fit: CV 0.1037 at each
  (`tests/unit/test_fit_convergence.py`).
"""


def _out_of_sample(cal: Calibration) -> list[str]:
    rows = [r for r in bridge_runs()]
    out = ["## Out-of-sample check", "",
           "`tests/data/bridge_perf_runs.csv` (newest Megatron Bridge perf-summary row per MoE model and system,",
           "with each recipe's settings) is not in the fit. The error is moeplan's tokens/s against the published",
           "tokens/s, which no FLOP convention enters (Bridge 26.04.01 counts gpt-oss's quick-GELU experts as two",
           "matrices and its sliding-window layers as full attention, 0.83x moeplan's count: `tests/validation/",
           "test_flops.py`; every other row's published TFLOP/s / tokens/s is moeplan's FLOPs per token within 1%):", "",
           "| run | published TFLOP/s | moeplan |", "|---|---|---|"]
    errs = []
    for r in rows:
        try:
            cfg, gpu = api.build_config(r["model"], **estimate_kwargs(r))
        except Exception as exc:  # noqa: BLE001 - report, not fail
            out.append(f"| {label(r)} | {r['tflops_per_gpu']} | error: {exc} |")
            continue
        est = estimate_time(cfg, gpu, cal).tokens_per_s_per_gpu
        e = est / float(r["tokens_per_s_per_gpu"]) - 1
        tag = "gap: " if r["gap"] else ""
        if not r["gap"]:
            errs.append(abs(e))
        out.append(f"| {tag}{label(r)} | {float(r['tflops_per_gpu']):,.0f} | {e:+.0%} |")
    if errs:
        out += ["", f"Median absolute error {statistics.median(errs):.0%}, worst {max(errs):.0%} over the "
                f"{len(errs)} rows without a named modelling gap.", ""]
    return out


if __name__ == "__main__":
    sys.exit(main())
