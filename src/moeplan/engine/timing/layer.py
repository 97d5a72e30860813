"""One layer's forward and backward time, item by item: the GEMMs, attention or Gated DeltaNet, element-wise
work, TP / CP / EP communication and recompute."""

from __future__ import annotations


from moeplan.base.deepep_configs import tp_ep_group_ranks
from moeplan.base.fields import gdn_backward_dw
from moeplan.base.vocab import FLEX_DISPATCHERS, MIXER_GRAPH_SCOPES
from moeplan.engine.hyper_connections import coeff_gemm_shape as hc_coeff_gemm_shape, fwd_traffic_elems as hc_fwd_traffic_elems, saved_elems as hc_saved_elems
from moeplan.engine.activations import BF16_BYTES, expert_probs_bytes, gdn_saved_bytes, layer_activation
from moeplan.engine.flops import layer_flops, layer_gemms
from moeplan.engine.mamba import cp_alltoall_elems, mamba_layer_parts_s
from moeplan.engine.timing.attention import attention_s, cp_comm, rope_glue_bytes
from moeplan.engine.timing.context import (FLEX_PREPROCESS_FUSED, GRAPH_LAUNCH_SHARE, TRAIN, Ctx, LayerTime, busbw,
                                           ring_time)
from moeplan.engine.timing.gdn import gdn_eff, gdn_glue_s, gdn_graph_captured, gdn_kernel_parts_s, gdn_launch_s
from moeplan.engine.timing.gemm import gemm_time
from moeplan.engine.timing.host import host_bound_s
from moeplan.engine.timing.offload_act import activation_offload_s
from moeplan.engine.timing.moe import (EP_CHUNK_EDGE, dispatch_before_host_sync, ep_comm_sms, ep_kernels,
                                       ep_overlap_exposed_s, ep_totals, expert_glue_bytes, expert_glue_clamp_fwd_bytes,
                                       expert_host_s, expert_launch_exposed_s, expert_quant_padded,
                                       expert_quant_padding_bytes, experts_recomputed,
                                       fused_grouped_mlp_removed_bytes, routing_map_allgather_s)
from moeplan.models.spec import Attention, DenseMLP, GatedDeltaNet, Layer, Mamba2, MoE
from moeplan.run.config import RunConfig
from moeplan.run.parallel import cp_ranks_per_domain


def layer_time(ctx: Ctx, layer: Layer) -> LayerTime:
    """One layer, one micro-batch (memoised in ``ctx.cache``: per run, or per shape in a search)."""
    hit = ctx.cache.get(layer)
    if hit is None:
        hit = ctx.cache[layer] = _layer_time_uncached(ctx, layer)
    return hit


def layer_graph_scopes(layer: Layer, cfg: RunConfig) -> frozenset[str]:
    """The run's CUDA graph scopes that ``layer`` has blocks for: a layer without a mixer has no mixer scope."""
    scopes = frozenset(cfg.cuda_graph_scopes)
    return scopes - MIXER_GRAPH_SCOPES if layer.mixer is None else scopes


def captured_launch_share(layer: Layer, cfg: RunConfig) -> float:
    """Share of a transformer layer's host launches (GRAPH_LAUNCH_SHARE) that the CUDA graphs of ``layer``'s own
    scopes capture (:func:`layer_graph_scopes`)."""
    return sum(GRAPH_LAUNCH_SHARE.get(s, 0.0) for s in sorted(layer_graph_scopes(layer, cfg)))


def launch_share(layer: Layer, cfg: RunConfig) -> float:
    """Share of ``launch_overhead_per_layer_s`` (the host launches of one transformer layer, attention block and
    MoE block, per micro-batch) that ``layer`` pays: the GRAPH_LAUNCH_SHARE of the blocks it has, less the scopes a
    CUDA graph captures (graph-captured scopes launch as one graph: Megatron-Core CUDA graph docs). Dropless MoE syncs
    the host every layer (tokens per expert, D2H), which drains the launch queue, so the launches after it show in
    the step rather than hiding behind GPU work; fitted (the G09 graphs on/off pair).

    A layer without a mixer launches none of the mixer block's kernels: Megatron-Core's hybrid MoE layer
    (megatron/core/models/mamba/mamba_layer_specs.py ``moe_layer``) is a TransformerLayer with ``pre_mlp_layernorm``,
    ``mlp`` and ``mlp_bda`` only, its input_layernorm, self_attention and self_attn_bda left IdentityOp; a graph
    of the mixer scopes removes nothing from it. The flex dispatchers compute the dispatch layout in one fused
    kernel: router + EP preprocess launch 17 kernels instead of 31 (Megatron-LM docs/discussions/
    deepseek-v3-gb200-optimization, 2.2.1), i.e. 14/31 of those scopes' share, where they are not graph-captured."""
    scopes = layer_graph_scopes(layer, cfg)
    # launch_overhead_per_layer_s is a transformer layer's (attention block + MoE block): without a mixer, the
    # attention block's share is absent
    present = 1.0 - GRAPH_LAUNCH_SHARE["attn"] if layer.mixer is None else 1.0
    share = present - captured_launch_share(layer, cfg)
    if isinstance(layer.mlp, MoE) and cfg.dispatcher in FLEX_DISPATCHERS and tp_ep_group_ranks(cfg.parallel) > 1:
        uncaptured = sum(GRAPH_LAUNCH_SHARE[s] for s in ("moe_router", "moe_preprocess") if s not in scopes)
        share -= FLEX_PREPROCESS_FUSED * uncaptured
    return max(0.0, share)


def _layer_time_uncached(ctx: Ctx, layer: Layer) -> LayerTime:
    cfg, gpu, cal = ctx.cfg, ctx.gpu, ctx.cal
    par = cfg.parallel
    h = cfg.model.hidden
    f = layer_flops(layer, h, cfg.batch.seq_len)
    t = ctx.tokens
    out: dict[str, float] = {}
    mixer = layer.mixer
    # --- GEMMs (weight matmuls), attention and Gated DeltaNet kernels
    mlp = layer.mlp
    imb = cfg.rows_factor
    rows = t * mlp.top_k * imb * par.etp if isinstance(mlp, MoE) else 0.0
    gemm = grouped = cast = 0.0
    # weight-gradient seconds that delay_wgrad_compute moves out of the backward nodes (merged_layer_s): the
    # routed experts' (TEGroupedMLP.backward_dw) and the attention block's TE linears with the shared
    # experts' (_BackwardDWWrapper), which is Gated DeltaNet's in_proj / out_proj from 0.17 (its backward_dw,
    # megatron.fields.gdn_backward_dw; before, EP overlap does not run with it); the router is not a TE linear
    wgrad_attn = wgrad_experts = 0.0
    gdn_dw = gdn_backward_dw(cfg.mcore_version)
    for g in layer_gemms(layer, h):
        g_time, g_cast, g_wgrad = gemm_time(ctx, g, rows, mlp.num_experts / par.ep if isinstance(mlp, MoE) else 1)
        if g.kind == "expert":
            grouped += g_time
            wgrad_experts += g_wgrad
        else:
            gemm += g_time
            if g.kind in ("attn", "shared") or (g.kind == "gdn" and gdn_dw):
                wgrad_attn += g_wgrad
        cast += g_cast
    out["gemm"], out["grouped_gemm"] = gemm, grouped
    mixer_norm = f.attn_proj_flops - sum(g.fwd_flops for g in layer_gemms(layer, h) if g.kind == "attn")
    out["gemm"] += TRAIN * mixer_norm * t / ctx.gemm_rate  # MLA low-rank norms (Megatron counts them)
    gdn_fwd = 0.0
    if isinstance(mixer, GatedDeltaNet):
        gdn_fwd, gdn_bwd = gdn_kernel_parts_s(cfg, mixer, TRAIN * f.gdn_core_flops * t, gpu, cal)
        out["linear_attention"] = gdn_fwd + gdn_bwd
    elif isinstance(mixer, Mamba2):  # the SSD kernels (moeplan.engine.mamba), per TP x CP head shard
        peak = gpu.peak("bf16")
        gdn_fwd, gdn_bwd = mamba_layer_parts_s(mixer, t, peak * gdn_eff(gpu, cal, "fwd"), peak * gdn_eff(gpu, cal, "bwd"),
                                               gpu.hbm_bw_bytes_per_s * cal.hbm_eff)
        out["linear_attention"] = gdn_fwd + gdn_bwd
    elif mixer is not None:
        out["attention"] = attention_s(ctx, mixer)
    # --- element-wise work: proportional to what the layer saves for backward
    la = layer_activation(layer, h, frozenset(), frozenset(), None)
    saved = la.token_bytes * t + la.row_bytes * rows / par.etp
    hbm = gpu.hbm_bw_bytes_per_s * cal.hbm_eff
    glue = glue_s = 0.0
    if isinstance(mixer, Mamba2):  # the SSD kernels' input and output are their own traffic (mamba_layer_parts_s)
        saved -= (mixer.in_proj_dim + mixer.d_inner) * BF16_BYTES * t
    if isinstance(mixer, GatedDeltaNet):  # the GDN mixer's traffic op by op (gdn_glue_s), not per saved byte
        saved -= gdn_saved_bytes(layer, h) * t
        glue_s = sum(gdn_glue_s(mixer, cfg.batch.mbs, t, gpu, cal))
    glue_fwd_bytes = glue_bwd_bytes = 0.0
    if isinstance(mixer, Attention):  # eager RoPE under a YaRN concentration factor (gpt-oss)
        glue += sum(rope_glue_bytes(mixer)) * t
    if layer.hc_mult > 1:  # mHC: the streams' traffic (fwd + 2x bwd) and the coefficient GEMM per block
        glue += 3 * layer.blocks * hc_fwd_traffic_elems(layer.hc_mult, h) * BF16_BYTES * t
        k_hc, n_hc = hc_coeff_gemm_shape(layer.hc_mult, h)
        glue_s += TRAIN * layer.blocks * 2.0 * k_hc * n_hc * t / ctx.gemm_rate
        saved -= layer.blocks * sum(e * nb for _, e, nb, _ in hc_saved_elems(layer.hc_mult, h)) * t  # counted above
    if isinstance(mlp, MoE) and not cfg.experts_op_fused:  # clamped GLU / expert bias glue (gpt-oss)
        glue_fwd_bytes, glue_bwd_bytes = (b * rows for b in expert_glue_bytes(mlp, h, par.etp, expert_probs_bytes(cfg.dispatcher)))
        glue += glue_fwd_bytes + glue_bwd_bytes
    if isinstance(mlp, MoE) and expert_quant_padded(cfg, ctx.router_pads_experts):  # the experts' padding copies
        pad_fwd_bytes, pad_bwd_bytes = (b * rows for b in expert_quant_padding_bytes(mlp, h))
        glue_fwd_bytes += pad_fwd_bytes
        glue += pad_fwd_bytes + pad_bwd_bytes
    out["elementwise"] = (cal.elementwise_traffic * saved + glue) / hbm + glue_s + cast
    fused_mlp = isinstance(mlp, MoE) and cfg.experts_fused_mlp(mlp)
    if fused_mlp:  # TE's CuTe DSL fused grouped MLP: the passes its GEMM epilogues absorb, where moeplan counts them
        removed = fused_grouped_mlp_removed_bytes(mlp)
        out["elementwise"] -= (sum(removed["activation"]) + sum(removed["cast"])) * rows / hbm
        # removed["gemm"] (fc2's dgrad output) is that GEMM's epilogue traffic, charged only beyond its compute
        # (timing.gemm.gemm_call_s): where the compute hides it, as on every measured shape, nothing is left to remove
    # --- TP collectives (sequence parallel): AG + RS forward, RS + AG backward, per TP block
    if par.tp > 1:
        msg = t * h * BF16_BYTES
        bw = busbw(gpu, par.tp, 1, cal)
        # the mixer block (absent from a hybrid stack's MLP-only layer) and a dense or shared-expert MLP block
        blocks = (mixer is not None) + (1 if isinstance(mlp, DenseMLP) or (isinstance(mlp, MoE) and mlp.has_shared) else 0)
        out["tp_comm"] = 4 * blocks * ring_time(msg, par.tp, bw) * (1 - (cal.tp_hidden if cfg.tp_comm_overlap else 0.0))
        if isinstance(mixer, Attention) and not mixer.is_mla and par.tp > mixer.num_kv_heads:
            # TP above the KV heads (Megatron-Core 0.16+, attention.py get_query_key_value_tensors): each rank
            # all-gathers the whole QKV projection output (gate included) over TP and keeps its group's slice, on the
            # critical path between the QKV GEMM and attention; the backward reduce-scatters its gradient
            qkv = (mixer.num_heads * (2 if mixer.output_gate else 1) + 2 * mixer.num_kv_heads) * mixer.head_dim
            out["tp_comm"] += 2 * ring_time(ctx.seq_tokens * qkv / par.tp * BF16_BYTES, par.tp, bw)
    # --- CP (context parallel): exposed communication of the attention layer
    cp_fwd = 0.0
    if par.cp > 1 and isinstance(mixer, Attention):
        out["cp_comm"], cp_fwd = cp_comm(ctx, mixer, out["attention"])
    elif par.cp > 1 and isinstance(mixer, GatedDeltaNet):
        # Megatron-Core runs Gated DeltaNet head-parallel inside the CP group: an all-to-all of the
        # projected q, k, v, z, b, a (in_proj_dim) before the recurrence and of the output after it (the
        # "HP-to-CP all-to-all" of recompute label gdn_norm_out), forward and backward.
        vol = (mixer.in_proj_dim + mixer.value_dim) * t * BF16_BYTES
        vol *= (par.cp - 1) / par.cp
        remote = max(0.0, 1.0 - cp_ranks_per_domain(par.tp, par.cp, gpu.nvlink_domain) / par.cp)
        one = max(vol * (1 - remote) / (gpu.nvlink_bw_bytes_per_s * cal.nvlink_eff),
                  vol * remote / (gpu.scaleout_bw_bytes_per_s * cal.scaleout_eff))
        out["cp_comm"], cp_fwd = 2 * one, one
    elif par.cp > 1 and isinstance(mixer, Mamba2):
        # Megatron-Core's Mamba CP is the same head-parallel all-to-all (mamba_context_parallel.py pre_conv_ssm /
        # post_conv_ssm: zxBCdt in, the d_inner output back; moeplan.engine.mamba.cp_alltoall_elems), forward and backward
        vol = cp_alltoall_elems(mixer) * t * BF16_BYTES * (par.cp - 1) / par.cp
        remote = max(0.0, 1.0 - cp_ranks_per_domain(par.tp, par.cp, gpu.nvlink_domain) / par.cp)
        one = max(vol * (1 - remote) / (gpu.nvlink_bw_bytes_per_s * cal.nvlink_eff),
                  vol * remote / (gpu.scaleout_bw_bytes_per_s * cal.scaleout_eff))
        out["cp_comm"], cp_fwd = 2 * one, one
    # --- EP dispatch / combine
    ep_fwd_s = ep_dispatch_fwd_s = ep_once_s = 0.0
    ep_exposed_share = 1.0  # of the layer's EP calls' time, what its items hold (EP overlap hides the rest)
    if isinstance(mlp, MoE):
        d, c, perm = ep_kernels(ctx, mlp)
        ep_dispatch_fwd_s = d
        rmap = routing_map_allgather_s(ctx, mlp)  # exposed: the host syncs on the dispatch metadata after it
        ep_raw, ep_fwd_s, ep_once_s = ep_totals(d, c, perm, rmap)
        if cfg.ep_overlap and cfg.ep_overlap_allowed:
            # the merged forward/backward schedule splits each layer into sub-modules on two streams,
            # scheduled from the host with events per sub-module (Megatron-Core combined 1F1B for EP
            # A2A overlap): a fixed host cost per layer and micro-batch, which small layers cannot
            # amortise and which a CUDA graph of the captured scopes removes
            share = min(1.0, captured_launch_share(layer, cfg))
            stolen = ep_comm_sms(cfg, gpu, cal) / gpu.sms
            attn_block = sum(out.get(k, 0.0) for k in ("gemm", "attention", "linear_attention"))
            overlap = (d, c, perm, attn_block, out.get("grouped_gemm", 0.0), stolen, cal.ep_overlap_eff,
                       *((wgrad_attn, wgrad_experts) if cfg.delay_wgrad_on else (0.0, 0.0)))
            steady = ep_overlap_exposed_s(*overlap)
            # what a model chunk's first layer exposes beyond the steady state (step_parts adds it per chunk)
            ctx.cache[(EP_CHUNK_EDGE, layer)] = max(0.0, ep_overlap_exposed_s(*overlap, carry=False) - steady)
            out["ep_comm"] = (steady
                              + rmap + cal.ep_overlap_layer_s * (1 - share))
            ep_exposed_share = min(1.0, steady / ep_raw) if ep_raw > 0 else 0.0
        else:
            out["ep_comm"] = ep_raw
    # --- recompute: forward cost of what is rebuilt
    rc = cfg.recompute
    fwd = 1 / TRAIN
    if rc.granularity == "full":
        compute = sum(out.get(k, 0.0) for k in ("gemm", "grouped_gemm", "attention", "linear_attention", "elementwise"))
        # the GDN kernels' forward share is their own (gdn_kernel_parts_s), not a third
        compute += gdn_fwd / fwd - out.get("linear_attention", 0.0) if gdn_fwd else 0.0
        out["recompute"] = compute * fwd + ep_fwd_s + cp_fwd + out.get("tp_comm", 0.0) / 2
    elif rc.granularity == "selective":
        r = 0.0
        mods = rc.modules
        if "core_attn" in mods:
            r += out.get("attention", 0.0) * fwd
        if "mla_up_proj" in mods and isinstance(mixer, Attention) and mixer.is_mla:
            r += sum(gemm_time(ctx, g, 0.0, 1)[0] for g in layer_gemms(layer, h) if g.name in ("q_up", "kv_up")) * fwd
        if "layernorm" in mods:  # the norms the label rebuilds: not a Mamba layer's (fused into its in_proj)
            norms = (mixer is not None and not isinstance(mixer, Mamba2)) + (mlp is not None)
            r += norms * 2 * h * BF16_BYTES * t / hbm
        if isinstance(mlp, MoE):
            if "moe" in mods:
                r += out.get("grouped_gemm", 0.0) * fwd + ep_fwd_s + glue_fwd_bytes / hbm
                if mlp.has_shared:
                    r += TRAIN * f.shared_expert_flops * t * fwd / ctx.gemm_rate
            else:
                if "moe_act" in mods:
                    r += 3 * mlp.expert_ffn_hidden / par.etp * rows * BF16_BYTES / hbm
                    if not cfg.experts_op_fused:
                        r += expert_glue_clamp_fwd_bytes(mlp, par.etp) * rows / hbm
                if "shared_experts" in mods and mlp.has_shared:
                    r += f.shared_expert_flops * t / ctx.gemm_rate
        if "mlp" in mods and isinstance(mlp, DenseMLP):
            r += f.dense_mlp_flops * t / ctx.gemm_rate
        if "gdn_norm_out" in mods and isinstance(mixer, GatedDeltaNet):
            r += 2 * mixer.value_dim * BF16_BYTES * t / hbm
        out["recompute"] = r
    # --- host launch overhead, reduced by CUDA graphs (launch_share). Only a MoE layer pays it: a layer without
    # the dropless host sync (dense MLP, a mixer-only layer) launches while the GPU still runs the kernels queued
    # before it, so its launches hide behind them (the same docs: the launch cost shows where the host waits on
    # the device).
    out["launch_overhead"] = cal.launch_overhead_per_layer_s * launch_share(layer, cfg) if isinstance(mlp, MoE) else 0.0
    if isinstance(mlp, MoE):
        # per-expert launches of the routed experts (expert_host_s), after the same host sync: forward they
        # can run ahead of the experts' forward GEMMs and of the dispatch where it follows the sync
        # (dispatch_before_host_sync), backward of the layer's whole backward
        host_fwd_s, host_bwd_s = expert_host_s(mlp.num_experts / par.ep, rows, cfg.precision, cfg.cuda_graph_scopes, cal,
                                       cfg.experts_grouped_tensor or fused_mlp)  # the fused MLP: one call per linear
        compute = sum(out.get(k, 0.0) for k in ("gemm", "grouped_gemm", "attention", "elementwise"))
        # the forward window after the host sync: the dispatch where it follows the sync, and the experts' GEMMs
        window_dispatch_s = 0.0 if dispatch_before_host_sync(cfg.dispatcher) else ep_dispatch_fwd_s
        gpu_fwd_s = window_dispatch_s + out["grouped_gemm"] / TRAIN
        gpu_bwd_s = compute * (TRAIN - 1) / TRAIN + out.get("linear_attention", 0.0) - gdn_fwd + ep_once_s
        if experts_recomputed(rc):
            # the recomputed forward (moe or full recompute: megatron/core/transformer/moe/moe_layer.py
            # checkpoints the whole MoE block, dispatch included) syncs the host again and launches the
            # experts' forward again, with the same window as the first forward; the layer's backward
            # launches follow it, so the recompute is not GPU work they can run ahead of
            out["launch_overhead"] += expert_launch_exposed_s(host_fwd_s, 0.0, gpu_fwd_s, 0.0)
        else:
            gpu_bwd_s += out.get("recompute", 0.0)
        out["launch_overhead"] += expert_launch_exposed_s(host_fwd_s, host_bwd_s, gpu_fwd_s, gpu_bwd_s)
    if isinstance(mixer, GatedDeltaNet) and not gdn_graph_captured(cfg.cuda_graph_scopes):
        # the fla chunk kernels are ~20 Triton launches from Python per call (fwd + bwd), after the
        # same host sync: gdn_launch_s, the fixed part of fla's benchmarks (Grace or x86 host)
        out["launch_overhead"] += sum(gdn_launch_s(gpu, cal))
    # the host issuing the layer eagerly: its launches bound the layer where they outlast its GPU work (host.py)
    out["launch_overhead"] += host_bound_s(ctx, layer, out, launch_share(layer, cfg), ep_exposed_share)
    if cfg.offload_modules:
        # fine-grained activation offload: D2H / H2D copies beyond the compute they overlap (offload_act); the
        # backward window: two thirds of the layer's work besides its recompute, plus the recompute
        layer_s = sum(out.values())
        rec = out.get("recompute", 0.0)
        out["act_offload"] = activation_offload_s(ctx, layer, layer_s, (layer_s - rec) * (TRAIN - 1) / TRAIN + rec)
    return LayerTime(**out)
