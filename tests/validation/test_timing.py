"""Step-time model against published Megatron runs (../shared/reference/published_runs.csv)."""

from __future__ import annotations

import csv
import statistics

import pytest

from moeplan import api
from moeplan.models import load_model

from ..conftest import REFERENCE_DIR, ROOT
from ..reference_runs import bridge_runs, estimate_kwargs, label, published_runs

def _estimate(run: dict[str, str]) -> dict:
    """Estimate with the run's own settings (recipe-filled: tests/reference_runs.py)."""
    return api.estimate(run["model"], **estimate_kwargs(run))


ROWS = published_runs(REFERENCE_DIR)


# Rows held to a looser band than 20% (a named gap in docs/calibration.md): none at this fit. Qwen3-30B-A3B
# on 8 GB200 (EP8 HybridEP, MBS4, full-iteration graphs) was ~25% fast until the GEMM epilogue was costed
# per SM (timing.gemm_k_half: Blackwell MXFP8 tensor cores make hidden-2,048 GEMMs shallow); it is ~16% fast
# now, as the GB300 / B300 runs of the same recipe are ~10% (tests/data/bridge_perf_runs.csv). (The H100
# EP-overlap row is inside 20% since the overlap windows follow Megatron-Core's merged 1F1B schedule.)
# DeepSeek-V3 on 1,024 H100 (Bridge 25.09, read from the scripts that measured it: DeepEP EP64 over 8 nodes with EP
# A2A overlap, FP8 current scaling) is ~25% fast: moeplan values the overlap at +32% there and no cost it lacks was
# found (docs/calibration.md, known gaps: "The published group taken apart").
GAP_ROWS: dict[str, float] = {"deepseek-v3-H100-1024-4096": 0.30}


def _rows_at_20_percent():
    for row in ROWS:
        gap = label(row) in GAP_ROWS
        yield pytest.param(row, 0.20, id=label(row), marks=[pytest.mark.xfail(
            strict=True, reason="named gap, see GAP_ROWS and docs/calibration.md")] if gap else [])
        if gap:
            yield pytest.param(row, GAP_ROWS[label(row)], id=label(row) + "-held")


@pytest.mark.parametrize("row,rel", list(_rows_at_20_percent()))
def test_throughput_within_20_percent(row, rel):
    est = _estimate(row)
    assert est["tflops_per_gpu"] == pytest.approx(float(row["tflops_per_gpu"]), rel=rel)
    # and the breakdown adds up to the step time
    assert sum(est["time_breakdown_s"].values()) == pytest.approx(est["step_time_s"])


def test_median_throughput_error_within_12_percent():
    """Median over the published rows; the fit spreads its error over these and the variant groups
    (it was 10% when constants were set against these rows alone)."""
    errors = [abs(_estimate(r)["tflops_per_gpu"] / float(r["tflops_per_gpu"]) - 1) for r in ROWS]
    assert statistics.median(errors) <= 0.12


def test_tokens_per_s_consistent_with_flops_per_token():
    for row in ROWS:
        est = _estimate(row)
        assert est["tflops_per_gpu"] * 1e12 / est["tokens_per_s_per_gpu"] == pytest.approx(est["flops_per_token"])


def test_qwen3_235b_throughput_rises_from_16k_to_64k_and_the_breakdown_says_why():
    """Published: 295 TFLOP/s at 16K (CP1) and 368 at 64K (CP4). Attention FLOPs run at a higher
    rate per FLOP than the small expert GEMMs and EP dispatch, so their growing share lifts TFLOP/s."""
    rows = sorted((r for r in ROWS if r["model"] == "qwen3-235b-a22b" and "ModelZoo" in r["source"]), key=lambda r: int(r["seq_len"]))
    short, long = (_estimate(r) for r in (rows[0], rows[-1]))
    assert int(rows[0]["seq_len"]) == 16384 and int(rows[-1]["seq_len"]) == 65536
    assert long["tflops_per_gpu"] > short["tflops_per_gpu"]
    share = lambda e, k: e["time_breakdown_s"][k] / e["step_time_s"]  # noqa: E731
    assert share(long, "attention") > share(short, "attention")
    assert share(long, "ep_comm") < share(short, "ep_comm")


def test_alltoall_point_and_dispatcher_ratio():
    """measured_variants.csv G11: Qwen3-30B-A3B, 16 H100, EP16, same graphs and no EP overlap:
    alltoall 132.9 TFLOP/s/GPU, HybridEP 244.0 (1.84x). moeplan: the alltoall point within 20% and
    the HybridEP / alltoall ratio within 15%."""
    from ..measured_variants import variants

    g11 = {v.label: v for v in variants() if v.group == "G11"}
    a2a, hyb = g11["alltoall overlap=no"], g11["hybridep overlap=no"]
    ea, eh = (api.estimate(v.model, **v.kwargs)["tflops_per_gpu"] for v in (a2a, hyb))
    assert ea == pytest.approx(a2a.tflops, rel=0.20)
    assert eh / ea == pytest.approx(hyb.tflops / a2a.tflops, rel=0.15)


def test_optimizer_offload_cost_and_memory_match_the_measured_curve():
    """measured_variants.csv G08: Qwen3-30B-A3B, TP2 PP2 EP4 on 16 H100 (GBS 8), 0-100% optimizer CPU
    offload. The seconds offload adds (step minus baseline: the baseline's own sequence length is not
    published) and the memory it saves follow the measurement within 25% / 10% at every fraction, and
    overlap_cpu_optimizer_d2h_h2d saves time."""
    from ..measured_variants import variants

    rows = [v for v in variants() if v.group == "G08"]
    base = next(v for v in rows if v.kwargs["optimizer_offload"] == 0)
    est = {v.label: api.estimate(v.model, **v.kwargs) for v in rows}
    e0 = est[base.label]
    for v in rows:
        if v is base:
            continue
        added = est[v.label]["step_time_s"] - e0["step_time_s"]
        assert added == pytest.approx(v.step_s - base.step_s, rel=0.25), v.label
        saved_gb = (e0["memory_gib"]["total"] - est[v.label]["memory_gib"]["total"]) * 2**30 / 1e9
        assert saved_gb == pytest.approx(base.memory_gb - v.memory_gb, rel=0.10), v.label
    assert est["optimizer_offload_100pct_overlap"]["step_time_s"] < est["optimizer_offload_100pct"]["step_time_s"]
    # Grace hosts: 3.3x the memory bandwidth per GPU of a DGX H100 host, and NVLink-C2C
    kw = dict(base.kwargs, optimizer_offload=1.0)
    h = api.estimate(base.model, **kw)["time_breakdown_s"]["offload"]
    gb = api.estimate(base.model, **(kw | {"gpu": "gb200"}))["time_breakdown_s"]["offload"]
    assert gb < h / 3


def test_recompute_costs_time_and_cp_comm_appears():
    spec = load_model("qwen3-235b-a22b")
    common = dict(gpu="h100", gpus=256, seq_len=65536, gbs=256, tp=4, pp=8, vpp=4, ep=8, dispatcher="deepep")
    a = api.estimate(spec, cp=4, **common)
    b = api.estimate(spec, cp=4, recompute="full", **common)
    assert b["step_time_s"] > a["step_time_s"] and b["time_breakdown_s"]["recompute"] > 0
    assert a["time_breakdown_s"]["cp_comm"] >= 0
    assert a["time_breakdown_s"]["pp_bubble"] > 0


def test_group_limited_routing_cuts_inter_node_dispatch():
    """DeepSeek-V3 routes each token within its best 4 of 8 expert groups (node-limited routing,
    DeepSeek-V3 report section 2.1.2): with the groups over 8 nodes, DeepEP reaches fewer nodes."""
    from dataclasses import replace

    from moeplan.models.spec import Layer

    spec = load_model("deepseek-v3")
    moe = spec.first_moe
    assert (moe.n_group, moe.topk_group) == (8, 4)
    free = replace(moe, n_group=1, topk_group=1)
    unlimited = replace(spec, name="dsv3-free", layers=tuple(Layer(la.mixer, free) if la.is_moe else la for la in spec.layers),
                        mtp_layer=Layer(spec.mtp_layer.mixer, free))
    common = dict(gpu="h100", gpus=1024, seq_len=4096, gbs=8192, tp=2, pp=8, vpp=4, ep=64, dispatcher="hybridep")
    limited_s = api.estimate(spec, **common)["time_breakdown_s"]["ep_comm"]
    free_s = api.estimate(unlimited, **common)["time_breakdown_s"]["ep_comm"]
    assert limited_s < 0.85 * free_s


def test_user_hardware_file_changes_the_estimate(tmp_path):
    """--hardware FILE.yaml: an H100 cluster with 200 Gb/s NICs pays more for inter-node EP dispatch."""
    path = tmp_path / "cluster.yaml"
    path.write_text("gpus:\n  h100-200g:\n    base: h100\n    description: H100 with 200 Gb/s NICs\n"
                    "    scaleout_bw_bytes_per_s: 25.0e+9\n")
    common = dict(gpus=64, seq_len=4096, gbs=256, ep=16, dispatcher="hybridep")
    slow = api.estimate("qwen3-30b-a3b", gpu="h100-200g", hardware_file=str(path), **common)
    fast = api.estimate("qwen3-30b-a3b", gpu="h100", **common)
    assert slow["gpu"] == "h100-200g"
    # the dispatch is the slower of its NVLink and RDMA legs: half the NIC rate makes the RDMA leg bind
    assert slow["time_breakdown_s"]["ep_comm"] > 1.05 * fast["time_breakdown_s"]["ep_comm"]
    assert slow["memory_gib"]["total"] == pytest.approx(fast["memory_gib"]["total"])


def _fa3_points():
    with open(ROOT / "tests" / "data" / "fa3_forward_h100.csv", newline="", encoding="utf-8") as fh:
        return [(int(r["seq_len"]), float(r["tflops"])) for r in csv.DictReader(line for line in fh if not line.startswith("#"))]


def test_attention_rate_follows_the_flashattention3_length_curve():
    """The short-block loss of non-causal blocks (ring CP's off-diagonal steps, and window-long blocks of a sliding
    window: timing.attention.attention_rate's non-causal ramp) reproduces FlashAttention-3's measured non-causal
    curve (relative to its 16K point) within 6% at every length from 512 to 16K tokens. The blocks are the engine's
    own: Qwen3-30B-A3B's attention with its window set to each length, in a 32K sequence (so every block is one
    non-causal window, causal share 0)."""
    import dataclasses

    from moeplan.engine.timing.attention import attention_block_tokens, attention_rate, causal_part
    from moeplan.hardware import load_gpu

    gpu = load_gpu("h100")
    model = load_model("qwen3-30b-a3b")
    cfg = api.build_config(model, gpu="h100", gpus=8, seq_len=32768, gbs=8, ep=8)[0]
    points = _fa3_points()
    ref_len, ref_tflops = points[-1]

    def rate(block: int) -> float:
        mixer = dataclasses.replace(model.distinct_mixers[0], sliding_window=block)
        assert causal_part(cfg, mixer, gpu.nvlink_domain) == (0.0, block)  # all of it non-causal blocks
        assert attention_block_tokens(cfg, mixer, gpu.nvlink_domain) == block
        return attention_rate(cfg, gpu, mixer)

    rates = [rate(seq) for seq, _ in points]
    assert rates == sorted(rates) and len(set(rates)) == len(rates)  # longer blocks run faster
    for (seq, tflops), r in zip(points, rates):
        assert r / rate(ref_len) == pytest.approx(tflops / ref_tflops, rel=0.06), seq


def test_causal_attention_rate_follows_cudnn_causal_length_curve():
    """A whole causal sequence (no CP) loses rate to its diagonal tiles: attention_rate reproduces cuDNN's causal
    forward + backward curve at head dim 128 on one H200 (tests/data/attention_headdim_h200.csv; time-weighted in
    flash-attn's count, backward 2.5 x forward), relative to 16K, within 6% from 1K to 16K tokens. FA3's
    non-causal ramp alone (the earlier single constant) puts 1K ~45% too fast."""
    from moeplan.hardware import load_gpu
    from moeplan.engine.timing.attention import attention_rate

    gpu = load_gpu("h100")
    model = load_model("qwen3-30b-a3b")
    mixer = model.distinct_mixers[0]
    with open(ROOT / "tests" / "data" / "attention_headdim_h200.csv", newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(line for line in fh if not line.startswith("#"))
                if r["backend"] == "cudnn" and r["head_dim"] == "128" and r["causal"] == "1"]
    tf = {(int(r["seq_len"]), r["pass"]): float(r["tflops"]) for r in rows}
    lengths = sorted({n for n, _ in tf})
    measured = {n: 3.5 / (1 / tf[(n, "fwd")] + 2.5 / tf[(n, "bwd")]) for n in lengths}

    def rate(seq):
        cfg = api.build_config(model, gpu="h100", gpus=8, seq_len=seq, gbs=8, ep=8)[0]
        return attention_rate(cfg, gpu, mixer)

    ref = lengths[-1]
    for n in lengths:
        assert rate(n) / rate(ref) == pytest.approx(measured[n] / measured[ref], rel=0.06), n


def test_ring_context_parallel_shortens_attention_blocks_and_ulysses_does_not():
    from moeplan.hardware import load_gpu
    from moeplan.engine.timing.attention import attention_block_tokens, attention_rate

    gpu = load_gpu("h100")
    model = load_model("deepseek-v3")  # MLA: 128 heads, so Ulysses (a2a) can split them over CP 16
    mixer = model.distinct_mixers[0]
    common = dict(gpu="h100", gpus=256, seq_len=65536, gbs=64, tp=2, pp=8, ep=16)
    blocks = {}
    for kind in ("p2p", "a2a", "a2a+p2p"):
        cfg = api.build_config(model, cp=16, cp_comm_type=kind, **common)[0]
        blocks[kind] = attention_block_tokens(cfg, mixer, gpu.nvlink_domain)
    assert blocks["p2p"] == 65536 / 32  # 2 x CP load-balanced chunks
    assert blocks["a2a"] == 65536  # heads split, whole sequences
    assert blocks["p2p"] < blocks["a2a+p2p"] < blocks["a2a"]  # ring only across NVLink domains
    # shorter blocks run at a lower rate: 2K-token ring chunks (CP 16) < 8K (CP 4) < whole sequences (a2a)
    rates = [attention_rate(api.build_config(model, cp=cp, cp_comm_type=kind, **common)[0], gpu, mixer)
             for cp, kind in ((16, "p2p"), (4, "p2p"), (16, "a2a"))]
    assert rates[0] < rates[1] < rates[2]


def test_wgrad_accumulates_into_the_main_gradient_every_micro_batch():
    """Megatron-Core gradient_accumulation_fusion: each micro-batch's weight-gradient GEMM reads and
    writes the local main_grad. Qwen3-30B-A3B on 8 H100 with EP8 holds 1/8 of its routed expert weights per GPU
    (the engine's parameter count): fp32 instead of bf16 main grads adds 2 x 2 bytes per local expert weight per
    micro-batch of HBM traffic, at the HBM rate the model streams at."""
    from moeplan.engine.activations import BF16_BYTES
    from moeplan.engine.params import count_params
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
    from moeplan.engine.timing.step import estimate_time

    common = dict(gpu="h100", gpus=8, seq_len=4096, gbs=16, ep=8)  # DP 8: 2 micro-batches per step
    cfg, gpu = api.build_config("qwen3-30b-a3b", grad_fp32=True, **common)
    cfg16, _ = api.build_config("qwen3-30b-a3b", grad_fp32=False, **common)
    micro = estimate_time(cfg, gpu).microbatches
    assert micro == 2
    local_expert_weights = count_params(cfg.model).routed_experts / cfg.parallel.ep
    extra_bytes = micro * local_expert_weights * 2 * (4 - BF16_BYTES)  # read + write, fp32 instead of bf16
    # the read-modify-write is the wgrad GEMM's epilogue traffic, which costs what outlasts its compute
    # (timing.gemm.gemm_call_s): all of it at a slow HBM, at most all of it at the calibrated one
    for cal, exposed in ((DEFAULT_CALIBRATION.with_overrides({"hbm_eff": 0.02}), True), (DEFAULT_CALIBRATION, False)):
        expected_s = extra_bytes / (gpu.hbm_bw_bytes_per_s * cal.hbm_eff)
        delta = (estimate_time(cfg, gpu, cal).breakdown_s["grouped_gemm"]
                 - estimate_time(cfg16, gpu, cal).breakdown_s["grouped_gemm"])
        assert delta == pytest.approx(expected_s, rel=1e-6) if exposed else 0 <= delta <= expected_s * (1 + 1e-6)
    # per micro-batch, narrow EP (more local experts) pays more of it than wide EP at the same tokens (at the slow HBM,
    # where the read-modify-write shows: at the calibrated one the compute hides it here)
    slow = DEFAULT_CALIBRATION.with_overrides({"hbm_eff": 0.02})

    def fp32_extra(ep: int) -> float:
        kw = dict(gpu="h100", gpus=16, seq_len=4096, gbs=16, ep=ep)
        c32, g = api.build_config("qwen3-30b-a3b", grad_fp32=True, **kw)
        c16, _ = api.build_config("qwen3-30b-a3b", grad_fp32=False, **kw)
        return (estimate_time(c32, g, slow).breakdown_s["grouped_gemm"]
                - estimate_time(c16, g, slow).breakdown_s["grouped_gemm"])
    assert fp32_extra(4) > fp32_extra(16) > 0


def test_bridge_rows_run_with_bf16_main_grads():
    """Every Megatron Bridge perf recipe reduces gradients in bf16 (``cfg.ddp.grad_reduce_in_fp32 = False``:
    v0.4.2 / v0.5.0 scripts/performance/configs/*/*_llm_pretrain.py, v0.6.0 perf_recipes/_common.py
    _benchmark_common), so Megatron's main_grad buffers are bf16: the rows say so and the runs are built so."""
    from ..reference_runs import plan_kwargs

    rows = bridge_runs()
    assert rows and all(r["grad_fp32"] == "0" for r in rows)
    assert not any(plan_kwargs(r)["grad_fp32"] for r in rows)


def test_out_of_sample_bridge_runs():
    """Newest Megatron Bridge perf-summary rows (not used to set any constant): every row whose model
    features moeplan covers is within 30% of its published tokens/s (time: no FLOP convention enters it; Bridge
    26.04.01 counted gpt-oss differently, test_flops.py), median within 20%; rows with a named gap are
    estimated (they must not fail) but not held to the bound. See docs/calibration.md."""
    errors = {}
    for r in bridge_runs():
        est = _estimate(r)
        assert est["memory_gib"]["total"] <= est["capacity_gib"]  # every published run ran
        if not r["gap"]:
            errors[(r["model"], r["system"])] = est["tokens_per_s_per_gpu"] / float(r["tokens_per_s_per_gpu"]) - 1
    assert len(errors) >= 10
    assert all(abs(e) <= 0.30 for e in errors.values()), errors
    assert statistics.median(abs(e) for e in errors.values()) <= 0.20


def _fla_gdn_rows(gpu: str = "gb200"):
    with open(ROOT / "tests" / "data" / f"fla_gdn_{gpu}.csv", encoding="utf-8") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def _gdn_ids(r):
    return f"B{r['B']}-T{r['T']}-H{r['H']}-D{r['D']}"


@pytest.mark.parametrize("row", _fla_gdn_rows(), ids=_gdn_ids)
def test_gated_deltanet_kernels_match_fla_gb200_benchmark(row):
    """fla's own GB200 benchmark of chunk_gated_delta_rule (README "Benchmarks"): forward and forward +
    backward, each within 15% with the GPU time of timing.gdn_chunk_kernels_s (chunk-parallel FLOPs at
    Blackwell's gdn_eff plus the state recurrence's chunk steps in waves over 148 SMs) plus the Grace host's
    launch time gdn_launch_s (a standalone call, not graph-captured)."""
    _check_gdn_row(row, "gb200", 0.15)


@pytest.mark.parametrize("row", _fla_gdn_rows("h200"), ids=_gdn_ids)
def test_gated_deltanet_kernels_match_the_h200_measurement(row):
    """The same kernels measured on one H200 (tests/data/fla_gdn_h200.csv, benchmarks/gpu/gdn_chunk.sh) with
    Hopper's rates and the x86 host's launch time: Qwen3-Next's head-parallel CP shapes (what the planner
    costs) within 15%, fla's table shapes within 30% (the small B4 T2048 H16 call runs 28% under the model on
    H200 where it fits on GB200)."""
    _check_gdn_row(row, "h200", 0.15 if row["source"] == "qwen3-next-cp" else 0.30)


def test_gated_deltanet_kernel_fit_is_tight_on_both_gpus():
    """benchmarks/fit_gdn.py's joint fit: RMS of log time <= 6% on fla's GB200 table and <= 12% on the H200
    table with the constants calibration.yaml holds; from Hopper to Blackwell the chunk-parallel forward rate
    grows about as the peak (2.8x vs 2.5x) but the backward's does not (0.95x): one peak-scaled set cannot
    hold both GPUs; the calibration's keys are the GPU families and hosts times the two directions."""
    import math
    from moeplan.hardware import load_gpu
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as cal
    from moeplan.engine.timing.gdn import GDN_DIRECTIONS, GDN_HOSTS, GDN_KERNEL_FAMILIES

    for gpu_name, bound in (("gb200", 0.06), ("h200", 0.12)):
        errs = [math.log(m / t) for row in _fla_gdn_rows(gpu_name) for m, t in _gdn_model_and_measured(row, gpu_name)]
        assert math.sqrt(sum(e * e for e in errs) / len(errs)) <= bound, gpu_name
    h200, gb200 = load_gpu("h200"), load_gpu("gb200")
    rate = {d: cal.gdn_eff[f"blackwell_{d}"] * gb200.peak("bf16") / (cal.gdn_eff[f"hopper_{d}"] * h200.peak("bf16"))
            for d in GDN_DIRECTIONS}
    peak = gb200.peak("bf16") / h200.peak("bf16")
    assert rate["fwd"] > 0.9 * peak and rate["bwd"] < 0.5 * peak
    assert set(cal.gdn_eff) == {f"{f}_{d}" for f in GDN_KERNEL_FAMILIES for d in GDN_DIRECTIONS}
    assert set(cal.gdn_launch_s) == {f"{h}_{d}" for h in GDN_HOSTS for d in GDN_DIRECTIONS}


def test_gated_deltanet_on_a_gpu_of_unknown_family_errs_slow():
    """A GPU file without compute_capability: the fla kernels at the smaller share of each direction, never faster
    than either family's (a B200-class peak must not get Hopper's backward share, 2.7x Blackwell's)."""
    from dataclasses import replace
    from moeplan.hardware import load_gpu
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as cal
    from moeplan.engine.timing.gdn import gdn_chunk_kernels_s

    for name in ("b200", "h200"):
        gpu = load_gpu(name)
        known = gdn_chunk_kernels_s(1, 8192, 32, 128, 1e12, gpu, cal)
        unknown = gdn_chunk_kernels_s(1, 8192, 32, 128, 1e12, replace(gpu, compute_capability=None), cal)
        assert all(u >= k for u, k in zip(unknown, known)) and any(u > 1.05 * k for u, k in zip(unknown, known)), name


def _gdn_model_and_measured(row, gpu_name: str) -> list[tuple[float, float]]:
    """[(model, measured) forward, (model, measured) forward + backward] seconds for one table row."""
    from moeplan.hardware import load_gpu
    from moeplan.engine.flops import delta_rule_fwd_flops
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as cal
    from moeplan.engine.timing.context import TRAIN
    from moeplan.engine.timing.gdn import gdn_chunk_kernels_s, gdn_launch_s

    gpu = load_gpu(gpu_name)
    b, t, h, d = (int(row[k]) for k in ("B", "T", "H", "D"))
    flops = TRAIN * delta_rule_fwd_flops(h, d, d) * b * t  # Megatron's count, the kernel alone (no conv)
    fwd, bwd = gdn_chunk_kernels_s(b, t, h, d, flops, gpu, cal)
    host_fwd, host_bwd = gdn_launch_s(gpu, cal)
    return [(fwd + host_fwd, float(row["fwd_ms"]) * 1e-3),
            (fwd + bwd + host_fwd + host_bwd, float(row["fwdbwd_ms"]) * 1e-3)]


def _check_gdn_row(row, gpu_name: str, rel: float) -> None:
    for model, measured in _gdn_model_and_measured(row, gpu_name):
        assert model == pytest.approx(measured, rel=rel)


def test_gated_deltanet_recurrence_binds_when_cp_leaves_few_heads():
    """Head-parallel CP gives each rank the whole sequence for heads / CP heads: at 64K and CP 16,
    Qwen3-Next's 32 value heads leave 2 per rank (8 programs on 132 SMs) walking 1,024 chunks, so the
    kernels cost far more than a quarter of CP 4's per rank although each rank holds a quarter of the tokens:
    measured on the H200 (tests/data/fla_gdn_h200.csv: T 64K with 2 heads 5.77 ms forward + backward, with 8
    heads 8.00, 0.72), the model within 0.12 of that ratio, the recurrence most of the CP 16 time."""
    from moeplan.hardware import load_gpu
    from moeplan.models.spec import GatedDeltaNet
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as cal
    from moeplan.engine.timing.gdn import GDN_CHUNK_TOKENS, GDN_SEQUENTIAL_PASSES, gdn_kernel_parts_s

    gpu = load_gpu("h200")
    times = {}
    for cp in (4, 16):
        cfg, _ = api.build_config("qwen3-next-80b-a3b", gpu="h200", gpus=32, seq_len=65536, gbs=32, cp=cp, ep=32,
                                  mcore_version="0.19")
        mixer = next(l.mixer for l in cfg.model.layers if isinstance(l.mixer, GatedDeltaNet))
        tokens = 65536 / cp
        flops = 3 * 2 * 4 * mixer.num_value_heads * mixer.key_head_dim * mixer.value_head_dim * tokens
        fwd, bwd = gdn_kernel_parts_s(cfg, mixer, flops, gpu, cal)
        times[cp] = fwd + bwd
    recurrence = sum(GDN_SEQUENTIAL_PASSES.values()) * 65536 / GDN_CHUNK_TOKENS * cal.gdn_chunk_step_s
    assert recurrence > 0.5 * times[16]
    assert times[16] / times[4] == pytest.approx(5.767 / 8.004, abs=0.12)


def _hybridep_rows() -> list[dict[str, str]]:
    with open(ROOT / "tests" / "data" / "hybridep_gb200.csv", encoding="utf-8") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


@pytest.mark.parametrize("seq,cp,mbs", [(4096, 1, 2), (65536, 16, 1)])
def test_hybridep_fixed_call_cost_is_not_qwen3_next_gap(seq, cp, mbs):
    """Checked and rejected (docs/calibration.md, Qwen3-Next known gap (m)): HybridEP's per-call cost that
    does not scale with the hidden size. moeplan charges HybridEP at its Torch-API bandwidth (DeepEP
    hybrid-ep README, GB200 table), i.e. the call's fixed part (metadata preprocessing, allocation: the
    Torch-API minus kernel-only time at the benchmark's 4,096 tokens x 7,168 hidden) is scaled with the
    bytes. At Qwen3-Next's hidden 2,048 a call moves fewer bytes, so that part is under-charged; costed
    as kernel-only bytes plus the benchmark's fixed time per call (~0.21 ms, which also holds the routing-map
    all-gather moeplan adds on its own, so this is an upper bound) a call costs at most 1.5x moeplan's time,
    and the layer gains ~0.27 ms per micro-batch at PR #3168's MBS 2 x 4K (8,192 tokens per GPU) and
    ~0.56 ms at 64K / CP 16 (4,096): < 0.6 ms of the ~8 / 22 ms gap per layer and micro-batch."""
    from moeplan.hardware import load_gpu
    from moeplan.models.spec import MoE
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as cal
    from moeplan.engine.timing.moe import ep_kernel_bw_bytes_per_s, expected_ranks_hit

    gpu = load_gpu("gb200")
    cfg, _ = api.build_config("qwen3-next-80b-a3b", gpu="gb200", gpus=32, seq_len=seq, gbs=64, mbs=mbs, cp=cp, ep=32,
                              dispatcher="hybridep", mcore_version="0.19")
    moe = next(l.mlp for l in cfg.model.layers if isinstance(l.mlp, MoE))
    bench = MoE(num_experts=256, top_k=8, expert_ffn_hidden=2048)  # the README's router: top-8 of 8 x 32 experts
    bench_bytes = 4096 * expected_ranks_hit(bench, 32) * 7168 * 2
    qn_bytes = mbs * seq / cp * expected_ranks_hit(moe, 32) * cfg.model.hidden * 2
    rows = {(r["kernel"]): r for r in _hybridep_rows() if r["ranks"] == "32" and r["sms"] == "32"}
    extra = 0.0
    for kernel in ("dispatch", "combine"):
        torch_bw, kernel_bw = (float(rows[kernel][k]) * 1e9 for k in ("torch_gbps", "kernel_gbps"))
        fixed_s = bench_bytes / torch_bw - bench_bytes / kernel_bw
        assert 0.1e-3 < fixed_s < 0.3e-3  # ~0.2 ms per call at the benchmark's size
        modelled = qn_bytes / ep_kernel_bw_bytes_per_s(gpu, cal, "hybridep", kernel, 32)
        split = qn_bytes / kernel_bw + fixed_s
        assert modelled < split < 1.5 * modelled
        extra += 2 * (split - modelled)  # forward and backward
    assert 0.0 < extra < 0.6e-3


def _csv_rows(name: str) -> list[dict[str, str]]:
    with open(ROOT / "tests" / "data" / name, encoding="utf-8") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


@pytest.mark.parametrize("row", _csv_rows("gdn_layer_h200.csv"), ids=lambda r: f"B{r['B']}-T{r['T']}")
def test_gated_deltanet_glue_matches_the_h200_mixer(row):
    """Qwen3-Next's Gated DeltaNet mixer between its projections, measured on one H200 op by op as Megatron-Core
    runs it (tests/data/gdn_layer_h200.csv): the glue (whole mixer less fla's kernel) is what timing.gdn_glue_s
    charges, the forward (clean, where transpose_copy_eff was fitted) within 8%, forward + backward (the backward
    not fitted) within 12%. The model before the transposes had their own rate charged ~half of it."""
    from moeplan.hardware import load_gpu
    from moeplan.models import load_model
    from moeplan.models.spec import GatedDeltaNet
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as cal
    from moeplan.engine.timing.gdn import gdn_glue_bytes, gdn_glue_s

    gpu = load_gpu("h200")
    mixer = next(l.mixer for l in load_model("qwen3-next-80b-a3b").layers if isinstance(l.mixer, GatedDeltaNet))
    b, t = int(row["B"]), int(row["T"])
    fwd, bwd = gdn_glue_s(mixer, b, b * t, gpu, cal)
    glue_fwd = (float(row["fwd_ms"]) - float(row["kernel_fwd_ms"])) * 1e-3
    glue = (float(row["fwdbwd_ms"]) - float(row["kernel_fwdbwd_ms"])) * 1e-3
    assert fwd == pytest.approx(glue_fwd, rel=0.08)
    assert fwd + bwd == pytest.approx(glue, rel=0.12)
    at_hbm_eff = sum(gdn_glue_bytes(mixer, b)) * b * t / (gpu.hbm_bw_bytes_per_s * cal.hbm_eff)
    assert at_hbm_eff < 0.6 * glue


def test_gated_deltanet_transposes_are_the_profiled_strided_copies():
    """The profile of that mixer (tests/data/gdn_layer_profile_h200.csv, B 2 T 4K): the non-vectorized strided
    kernels (direct_copy's .contiguous() copies, the transposed-gradient SiLU backward that stands in for the conv's
    contiguous gradient, the strided in_proj-gradient add) take 1.0-1.5x what timing.gdn_transpose_bytes charges at
    transpose_copy_eff (they also hold the row-contiguous gate / beta / alpha / output copies), and far more than
    those bytes at hbm_eff."""
    from moeplan.hardware import load_gpu
    from moeplan.models import load_model
    from moeplan.models.spec import GatedDeltaNet
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as cal
    from moeplan.engine.timing.gdn import gdn_transpose_bytes

    gpu = load_gpu("h200")
    mixer = next(l.mixer for l in load_model("qwen3-next-80b-a3b").layers if isinstance(l.mixer, GatedDeltaNet))
    strided_s = sum(float(r["us_per_mixer"]) for r in _csv_rows("gdn_layer_profile_h200.csv")
                    if r["kernel"].startswith("void at::native::elementwise_kernel<128, 4")) * 1e-6
    transposed = sum(gdn_transpose_bytes(mixer)) * 2 * 4096
    model_s = transposed / (gpu.hbm_bw_bytes_per_s * cal.transpose_copy_eff)
    assert 1.0 <= strided_s / model_s <= 1.5
    assert strided_s > 4 * transposed / (gpu.hbm_bw_bytes_per_s * cal.hbm_eff)
