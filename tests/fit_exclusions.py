"""Why a shared measured row stays out of the fit: one table (OUT_OF_FIT), read into one field of every row.

Every row benchmarks/calibrate.py turns into an observation (tests/measured_variants.Variant, tests/nocp_rows.NoCPRow)
carries its reason to be out of the fit in ``extra["why"]`` ("" where it is in the fit); calibrate keeps an
observation out exactly where that field is set, and reports it with that reason (docs/calibration.md). The reasons
written by hand live here, keyed by (group, a fragment of the row's label); the others come from the row's own data
(tests/data/out_of_fit_runs.csv's ``gap`` column) or a rule that names its cause where it is applied
(measured_variants: an NVFP4 row without a same-layout MXFP8 row; CATALOG_ROWS_IN_FIT)."""

from __future__ import annotations

# DeepEP over UCCL-EP on p5.48xlarge (N33)
_UCCL_P5 = ("DeepEP over UCCL-EP on p5.48xlarge: DeepEP's host-proxy backend is not a knob (UCCL-EP and "
            "NVSHMEM's libfabric transport are both 'deepep'), and on p5 UCCL-EP costs ~2.3 us per token "
            "sent across nodes, at EP16 and EP32 alike (~12.5 ms per layer and sample at EP32), where on "
            "p6-b300 (N31 / N32) it costs no more per token than NCCL; UCCL-EP's README (uccl-project/uccl "
            "ep/) lists p5en / p6-b200 as tested, not p5's 32 x 100 Gb/s EFA, and a public p5 / p5en "
            "comparison of EP kernels measures its dispatch ~15x slower on p5")
# N40 / N41's 'without CP' rows (tests/nocp_rows.py)
PIPELINE_ONLY = ("at the row's GPU count and GBS every CP-1 layout is a pipeline with fewer micro-batches per data-"
                 "parallel rank than stages (TP at most 8 inside the node, DP at most GBS; one micro-batch at "
                 "moeplan's fastest, whose bubble is (PP - 1) / PP of the step); measured runs faster than moeplan's "
                 "fastest such layout by more than the CP row's attention rate can give (by how much: docs/calibration.md"
                 " known gaps), so the run did not train on that GPU count; on fewer GPUs (the source gives the CP run's count only) moeplan's fastest "
                 "layouts need less or no pipeline and run faster than measured at 512K and 1M: the layout is not "
                 "known")
RECOMPUTED = ("moeplan's fastest CP-1 layout trains without recompute near the budget (the loss's forward peak and the "
              "output layer's gather buffer counted) and runs over measured by more than the sweep's point bound, while "
              "its fastest full-recompute layout meets the measurement (the figures: docs/calibration.md known gaps): "
              "the run recomputed where moeplan's memory estimate says it need not, and the source gives no peak memory "
              "to tell whether the estimate or the run's choice is the cause")
# G11's tuned row (its HybridEP kernel tuning beside the overlap)
G11_TUNED = ("HybridEP tuned to 32 SMs, combine chunks of 64 tokens and permute fusion beside the EP overlap: kernel "
             "tuning moeplan does not model (the overlap rows without it are fitted); measured 4.4% faster than the "
             "same run untuned (its overlap row, two runs), where moeplan gives both one estimate, so the row reads "
             "that much slower against measured than its fitted twin (tests/validation/test_g11_tuned.py)")
# The catalogued models' rows (tests/measured_variants.catalog_variants)
N06_DRIFT = ("software drift: the same recipe and layout measured 646.4 TFLOP/s/GPU on the pytorch 26.04 container "
             "and 710.4 on 26.06 (TE 3bca9385 -> 6377ca16); the 26.06 row is the tuned one")
G06_HOST_BOUND = ("a host-bound step: GBS 4 (one micro-batch per rank, 20 steps) runs several times moeplan's estimate, "
                  "and each recompute set adds more measured time than recomputing its modules' work costs in moeplan "
                  "(the figures: the note under the table); as ratios to the no-recompute row they would sit close only "
                  "because the unexplained host time dilutes them, so they stay out")

# The published DeepSeek-V3 1,024 H100 run (Bridge 25.09) as its scripts ran it
DSV3_H100_OVERLAP = ("DeepSeek-V3 on 1,024 H100 (Bridge 25.09) as its scripts ran it (DeepEP EP64 over 8 nodes with EP "
                     "A2A overlap, FP8 current scaling, Megatron-Core 0.14) reads fast by more than the fit's band: "
                     "moeplan values the overlap at about a third of the step there and the measured step is close to "
                     "moeplan's without overlap; no missing cost was found (known gaps: the published group taken "
                     "apart: DeepEP's host wait for its counts, its SMs, the launch queues, the merged schedule's "
                     "chunk edges), and N33's pairs with the overlap across nodes gain more than moeplan says, so the "
                     "row is reported, not fitted, rather than bend the overlap and attention constants the other "
                     "rows pin")

# (group, label fragment) -> why; a fragment "" names every row of the group
OUT_OF_FIT: dict[tuple[str, str], str] = {
    ("N33", "UCCL"): _UCCL_P5,
    ("N40", "256K without CP"): RECOMPUTED,
    ("N41", "128K without CP"): RECOMPUTED,
    ("N41", "256K without CP"): PIPELINE_ONLY,
    ("N41", "512K without CP"): PIPELINE_ONLY,
    ("N41", "1024K without CP"): PIPELINE_ONLY,
    ("N06", "26.04"): N06_DRIFT,
    ("G06", ""): G06_HOST_BOUND,
    ("G11", "tuned"): G11_TUNED,
    ("published", "deepseek-v3-H100-1024-4096"): DSV3_H100_OVERLAP,
}


def why_out_of_fit(group: str, label: str) -> str:
    """Why the row ``label`` of ``group`` stays out of the fit (OUT_OF_FIT), or "" where it is in."""
    return next((why for (g, frag), why in OUT_OF_FIT.items() if g == group and frag in label), "")


__all__ = ["OUT_OF_FIT", "PIPELINE_ONLY", "RECOMPUTED", "why_out_of_fit"]
