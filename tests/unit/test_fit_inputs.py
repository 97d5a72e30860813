"""Inputs the fit on groups N01-N41 needed: EFA catalog entries and DeepEP's host-proxy cost there, TP above the KV
heads (Megatron-Core 0.16+), the llama reader, and every shared N row either expressed or listed as not."""

from __future__ import annotations

import csv

import pytest

from moeplan import api
from moeplan.base.errors import MoeplanError
from moeplan.hardware import load_gpu
from moeplan.models.hf import spec_from_dict
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from tests.measured_variants import UNEXPRESSED, catalog_variants, layer_variants, n_variants
from tests.reference_runs import shared_dir

AWS = dict(gpus=64, seq_len=4096, gbs=256, mbs=4, tp=8, pp=2, ep=32, precision="bf16")


def test_efa_entries():
    p5, p6 = load_gpu("p5.48xlarge"), load_gpu("p6-b300")
    assert p5.name == "h100-efa" and p6.name == "b300-efa"
    assert p5.scaleout_gpu_rdma is False and p6.scaleout_gpu_rdma is False
    assert load_gpu("h100").scaleout_gpu_rdma is not False  # InfiniBand: GPU-initiated RDMA
    assert p5.peak_flops == load_gpu("h100").peak_flops and p6.scaleout_bw_bytes_per_s == 100e9


def _efa_step(gpu: str, cal, model: str = "qwen3-30b-a3b", **kw) -> float:
    return api.estimate(model, gpu=gpu, cal=cal, **(AWS | kw))["step_time_s"]


def test_deepep_over_efa_pays_a_proxy_round_trip_per_call():
    """Across nodes without GPU-initiated RDMA every DeepEP dispatch / combine adds ep_proxy_call_s: more
    micro-batches (MBS 1) pay it more often; InfiniBand (GPU-initiated RDMA) and EP inside one node do not pay it,
    and NCCL's all-to-all pays its own constant, not this one."""
    cal0 = DEFAULT_CALIBRATION.with_overrides({"ep_proxy_call_s": 1e-9})
    cal1 = DEFAULT_CALIBRATION.with_overrides({"ep_proxy_call_s": 1e-3})
    d4 = _efa_step("h100-efa", cal1, dispatcher="deepep") - _efa_step("h100-efa", cal0, dispatcher="deepep")
    d1 = (_efa_step("h100-efa", cal1, dispatcher="deepep", mbs=1)
          - _efa_step("h100-efa", cal0, dispatcher="deepep", mbs=1))
    assert d4 > 0 and d1 == pytest.approx(4 * d4, rel=0.05)
    assert _efa_step("h100", cal1, dispatcher="deepep") == _efa_step("h100", cal0, dispatcher="deepep")
    assert _efa_step("h100-efa", cal1, dispatcher="alltoall") == _efa_step("h100-efa", cal0, dispatcher="alltoall")
    inside = dict(gpus=8, gbs=64, tp=1, pp=1, ep=8, dispatcher="deepep")
    assert _efa_step("h100-efa", cal1, **inside) == _efa_step("h100-efa", cal0, **inside)


def test_nccl_all_to_all_over_efa_pays_a_host_call_per_call():
    """NCCL's all-to-all across EFA nodes is posted by NCCL's host proxy thread through aws-ofi-nccl, a fixed cost
    per call and NIC rail (a2a_host_call_s x 4 rails on p5): four calls per MoE layer and micro-batch (dispatch and
    combine, forward and backward), none on InfiniBand or inside one node. The fixed cost is what makes MBS 1 cost
    every dispatcher ~3x on the AWS groups (N31-N33: 0.27-0.49 of MBS 4's throughput)."""
    cal0 = DEFAULT_CALIBRATION.with_overrides({"a2a_host_call_s": 1e-9})
    cal1 = DEFAULT_CALIBRATION.with_overrides({"a2a_host_call_s": 1e-3})
    kw = dict(dispatcher="alltoall", pp=1, ep=32, gpus=32, gbs=128)  # 4 nodes, no pipeline bubble
    d4 = _efa_step("h100-efa", cal1, **kw) - _efa_step("h100-efa", cal0, **kw)
    d1 = _efa_step("h100-efa", cal1, **(kw | {"mbs": 1})) - _efa_step("h100-efa", cal0, **(kw | {"mbs": 1}))
    layers = 48  # qwen3-30b-a3b: every layer MoE
    microbatches = 128 // (32 // 8) // 4
    rails = load_gpu("h100-efa").scaleout_nics_per_gpu
    assert rails == 4 and d4 == pytest.approx(4 * layers * microbatches * rails * 1e-3, rel=0.02)
    assert d1 == pytest.approx(4 * d4, rel=0.02)
    assert _efa_step("h100", cal1, **kw) == _efa_step("h100", cal0, **kw)
    assert _efa_step("h100-efa", cal1, **(kw | {"dispatcher": "deepep"})) == _efa_step(
        "h100-efa", cal0, **(kw | {"dispatcher": "deepep"}))
    inside = dict(gpus=8, gbs=64, tp=1, pp=1, ep=8, dispatcher="alltoall")
    assert _efa_step("h100-efa", cal1, **inside) == _efa_step("h100-efa", cal0, **inside)


def test_full_recompute_pays_the_efa_calls_again():
    """Full recompute runs each MoE layer's forward again in the backward, dispatch and combine included
    (moe_layer.py checkpoints the whole block): six host-posted calls per layer and micro-batch instead of four
    (N32, full recompute: its fixed cost per micro-batch ~1.45x N31's selective-recompute runs at EP16)."""
    cal0 = DEFAULT_CALIBRATION.with_overrides({"a2a_host_call_s": 1e-9})
    cal1 = DEFAULT_CALIBRATION.with_overrides({"a2a_host_call_s": 1e-3})
    kw = dict(dispatcher="alltoall", pp=1, ep=32, gpus=32, gbs=128)

    def extra(recompute: str) -> float:
        return (_efa_step("b300-efa", cal1, "qwen3-235b-a22b", recompute=recompute, **kw)
                - _efa_step("b300-efa", cal0, "qwen3-235b-a22b", recompute=recompute, **kw))

    assert extra("full") == pytest.approx(1.5 * extra("none"), rel=0.02)


def test_tp_above_kv_heads_from_mcore_016():
    """Megatron-LM f7dfb99795 (core_v0.16.0): TP may exceed the query groups when it is a multiple of them."""
    kw = dict(gpu="h100", gpus=16, seq_len=4096, gbs=64, tp=8, ep=8)
    assert api.estimate("qwen3-30b-a3b", mcore_version="0.16", **kw)["step_time_s"] > 0
    with pytest.raises(MoeplanError, match="query groups"):
        api.estimate("qwen3-30b-a3b", mcore_version="0.15", **kw)


def test_llama_reader_defaults_and_refusals():
    base = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
            "num_attention_heads": 4, "vocab_size": 1000}
    spec = spec_from_dict(base, "tiny", "tiny")
    assert spec.first_attention.num_kv_heads == 4 and spec.first_attention.head_dim == 64  # LlamaConfig defaults
    assert spec.moe_layers == 0 and not spec.tie_embeddings
    with pytest.raises(MoeplanError, match="mlp_bias"):
        spec_from_dict(base | {"mlp_bias": True}, "tiny", "tiny")


def test_every_new_shared_row_is_expressed_or_listed():
    """Each N-group row is a Variant (the catalogued models' rows: catalog_variants), or its group is named in
    UNEXPRESSED with what moeplan lacks."""
    with open(shared_dir() / "reference" / "measured_variants.csv", newline="", encoding="utf-8") as fh:
        groups = {r["group_id"] for r in csv.DictReader(fh) if r["group_id"].startswith("N")}
    expressed = {v.group for v in n_variants() + layer_variants() + catalog_variants()}
    listed = {g.strip().split(" ")[0] for u in UNEXPRESSED for g in u.group.split(",")}
    assert groups <= expressed | listed, sorted(groups - expressed - listed)
    assert len([v for v in n_variants()]) >= 70


def test_tp_above_kv_heads_pays_the_qkv_all_gather():
    """Replicated KV heads: each rank all-gathers the QKV projection output over TP (and reduce-scatters its
    gradient), which the same layer with as many KV heads as TP ranks does not."""
    from dataclasses import replace

    from moeplan.models import load_model

    spec = load_model("qwen3-30b-a3b")
    attn8 = replace(spec.first_attention, num_kv_heads=8)
    spec8 = replace(spec, name="qwen3-30b-a3b-kv8", layers=tuple(replace(layer, mixer=attn8) for layer in spec.layers))
    kw = dict(gpu="h100", gpus=16, seq_len=4096, gbs=64, tp=8, ep=8)
    tp4 = api.estimate(spec, **kw)["time_breakdown_s"]["tp_comm"]
    tp8 = api.estimate(spec8, **kw)["time_breakdown_s"]["tp_comm"]
    assert tp4 > tp8 > 0
