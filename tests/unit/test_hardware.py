"""Hardware catalog: datasheet numbers, aliases, precisions, user files and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeplan.base.errors import MoeplanError
from moeplan.hardware import GPUSpec, hardware_names, hardware_table, load_gpu, load_user_hardware

CATALOG = ["h100", "h200", "b200", "b300", "gb200", "gb300", "h100-efa", "b300-efa"]
GiB = 2**30


def write(tmp_path: Path, text: str, name: str = "hw.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def one_line_error(excinfo: pytest.ExceptionInfo[MoeplanError], *parts: str) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    for part in parts:
        assert part in msg, f"{part!r} not in {msg!r}"
    return msg


# --------------------------------------------------------------------------------------- catalog


def test_catalog_names():
    assert hardware_names() == CATALOG


@pytest.mark.parametrize("name", CATALOG)
def test_every_entry_complete_and_sourced(name):
    g = load_gpu(name)
    assert isinstance(g, GPUSpec) and g.name == name
    assert len(g.sources) >= 3 and all(s.strip() for s in g.sources)
    assert g.hbm_bytes > 70 * GiB and g.host_mem_bytes > 100 * GiB
    assert g.nvlink_domain in (8, 72)
    assert g.peak("bf16") > 900e12 and g.peak("fp8") == pytest.approx(2 * g.peak("bf16"), rel=0.01)
    # measured figures, where present, sit below their peaks (NVLS may exceed the link rate)
    for measured, peak in [
        (g.gemm_bf16_achieved_flops, g.peak("bf16")),
        (g.gemm_fp8_achieved_flops, g.peak("fp8")),
        (g.nvlink_busbw_bytes_per_s, g.nvlink_bw_bytes_per_s),
        (g.scaleout_busbw_bytes_per_s, g.scaleout_bw_bytes_per_s),
        (g.host_link_achieved_bytes_per_s, g.host_link_bw_bytes_per_s),
    ]:
        assert measured is None or 0.5 * peak < measured <= peak


def test_h100_datasheet():
    g = load_gpu("h100")
    assert g.peak("bf16") == pytest.approx(989e12, rel=0.01)
    assert g.peak("fp8") == pytest.approx(1979e12, rel=0.01)
    assert g.hbm_bytes == 81559 * 2**20  # nvidia-smi memory.total
    assert g.hbm_bw_bytes_per_s == pytest.approx(3.35e12)
    assert g.nvlink_bw_bytes_per_s == pytest.approx(450e9)  # 900 GB/s bidirectional
    assert g.scaleout_bw_bytes_per_s == pytest.approx(50e9)  # 400 Gb/s
    assert (g.host_link, g.nvlink_domain, g.is_nvl72) == ("pcie5", 8, False)
    assert g.host_link_bw_bytes_per_s == pytest.approx(64e9, rel=0.02)


def test_h200_memory():
    g = load_gpu("h200")
    assert g.hbm_gib == pytest.approx(140.4, abs=0.05)  # marketed 141 GB
    assert 141e9 <= g.hbm_bytes <= 141 * GiB
    assert g.hbm_bw_bytes_per_s == pytest.approx(4.8e12)
    assert g.peak("bf16") == load_gpu("h100").peak("bf16")


def test_blackwell_datasheet():
    b200, b300 = load_gpu("b200"), load_gpu("b300")
    assert b200.nvlink_bw_bytes_per_s == pytest.approx(900e9)  # 1.8 TB/s bidirectional
    assert b200.peak("bf16") == pytest.approx(2250e12, rel=0.01)
    assert b200.peak("fp4") == pytest.approx(9000e12, rel=0.01)
    assert b200.hbm_gib == pytest.approx(179.06, abs=0.05)
    assert b300.scaleout_bw_bytes_per_s == pytest.approx(100e9)  # ConnectX-8 800 Gb/s
    assert b300.hbm_gib == pytest.approx(268.6, abs=0.1)


def test_nvl72():
    gb200, gb300 = load_gpu("gb200"), load_gpu("gb300")
    assert gb200.nvlink_domain == 72 and gb200.is_nvl72 and gb300.is_nvl72
    assert gb200.peak("bf16") == pytest.approx(2500e12, rel=0.01)
    assert gb300.peak("fp4") == pytest.approx(15000e12, rel=0.01)
    assert gb200.host_link == "c2c"
    assert gb200.host_link_bw_bytes_per_s == pytest.approx(225e9)  # 900 GB/s bidir per Grace / 2 GPUs
    assert gb300.hbm_gib == pytest.approx(277.55, abs=0.05)


@pytest.mark.parametrize(
    "alias, name",
    [("H100", "h100"), ("h100-sxm", "h100"), ("H100_SXM5", "h100"), (" dgx-h200 ", "h200"),
     ("GB200-NVL72", "gb200"), ("gb300-nvl72", "gb300"), ("B300-SXM6", "b300"), ("DGX-GB200", "gb200"),
     ("DGX-GB300", "gb300"), ("GB300 NVL72", "gb300")],
)
def test_aliases(alias, name):
    assert load_gpu(alias).name == name


def test_unknown_gpu_lists_known():
    with pytest.raises(MoeplanError) as ei:
        load_gpu("a100")
    one_line_error(ei, "a100", *CATALOG)


# ------------------------------------------------------------------------------------ precisions


def test_precisions():
    h100, b200 = load_gpu("h100"), load_gpu("b200")
    for p in ("fp8-cs", "fp8-bw", "fp8-ds", "FP8"):
        assert h100.peak(p) == h100.peak("fp8")
    assert h100.peak("fp16") == h100.peak("bf16")
    assert b200.peak("mxfp8") == b200.peak("fp8") and b200.peak("nvfp4") == b200.peak("fp4")
    assert not h100.supports("mxfp8") and b200.supports("mxfp8") and h100.supports("fp8-bw")


@pytest.mark.parametrize("precision", ["mxfp8", "fp4", "nvfp4"])
def test_hopper_lacks_blackwell_formats(precision):
    with pytest.raises(MoeplanError) as ei:
        load_gpu("h100").peak(precision)
    one_line_error(ei, "h100", precision)


def test_unknown_precision():
    with pytest.raises(MoeplanError) as ei:
        load_gpu("b200").peak("int4")
    one_line_error(ei, "int4", "mxfp8")


# ------------------------------------------------------------------------------------ user files


def test_user_base_override(tmp_path):
    f = write(tmp_path, """
gpus:
  h100-200g:
    base: H100-SXM
    description: H100 with 200 Gb/s NICs
    scaleout_bw_bytes_per_s: 25e9       # a YAML string, read as a number
    host_mem_bytes: 128e9
    peak_flops: {fp8: 1.5e+15}
    aliases: [slow-h100]
    sources: [our cluster runbook]
""")
    h100 = load_gpu("h100")
    g = load_gpu("slow-h100", user_file=f)
    assert g.name == "h100-200g" and g.description == "H100 with 200 Gb/s NICs"
    assert g.scaleout_bw_bytes_per_s == 25e9 and g.host_mem_bytes == 128_000_000_000
    assert g.peak("fp8") == 1.5e15 and g.peak("bf16") == h100.peak("bf16")  # peak_flops merges
    assert g.hbm_bytes == h100.hbm_bytes and g.nvlink_domain == 8
    # inherited measurements keep their efficiency against the overridden peak
    assert g.scaleout_busbw_bytes_per_s / 25e9 == pytest.approx(h100.scaleout_busbw_bytes_per_s / 50e9)
    assert g.gemm_fp8_achieved_flops / 1.5e15 == pytest.approx(h100.gemm_fp8_achieved_flops / h100.peak("fp8"))
    assert g.gemm_bf16_achieved_flops == h100.gemm_bf16_achieved_flops
    assert g.sources[: len(h100.sources)] == h100.sources
    assert "our cluster runbook" in g.sources and str(f) in g.sources[-1]
    assert set(load_user_hardware(f)) == {"h100-200g"}
    assert load_gpu("h100", user_file=f) == h100  # catalog still reachable
    assert hardware_names(f) == [*CATALOG, "h100-200g"]
    assert hardware_table(f)[-1]["scaleout_gb_s"] == 25.0


def test_user_entry_shadows_catalog_and_chains(tmp_path):
    f = write(tmp_path, """
gpus:
  h100:
    base: h100
    nvlink_domain: 4
  h100-small:
    base: h100
    hbm_bytes: 40000000000
""")
    specs = load_user_hardware(f)
    assert specs["h100"].nvlink_domain == 4
    assert specs["h100-small"].nvlink_domain == 4  # base resolves within the file first
    assert specs["h100-small"].hbm_bytes == 40_000_000_000
    assert load_gpu("H100", f).nvlink_domain == 4


# a whole entry without ``base`` (every required field), indented under its name
LAB_CARD = """    description: lab card
    hbm_bytes: 48e9
    hbm_bw_bytes_per_s: 1.0e+12
    peak_flops: {bf16: 300e12}
    nvlink_bw_bytes_per_s: 50e9
    nvlink_domain: 1
    scaleout_bw_bytes_per_s: 12.5e9
    host_link: PCIe4
    host_link_bw_bytes_per_s: 32e9
    host_mem_bytes: 64e9
"""


def test_user_full_entry_without_base(tmp_path):
    f = write(tmp_path, "gpus:\n  mygpu:\n" + LAB_CARD)
    g = load_gpu("MyGPU", f)
    assert g.host_link == "pcie4" and g.hbm_bytes == 48 * 10**9 and not g.supports("fp8")
    assert g.gemm_bf16_achieved_flops is None and g.sources == (f"user hardware file {f}",)


def test_specs_are_fresh_objects():
    a, b = load_gpu("h100"), load_gpu("h100")
    a.peak_flops["bf16"] = 1.0
    assert b.peak("bf16") == pytest.approx(989e12, rel=0.01)
    assert load_gpu("h100").peak("bf16") == pytest.approx(989e12, rel=0.01)
    assert hash(b) == hash(load_gpu("h100"))


def test_row_keys_json_ready():
    rows = hardware_table()
    assert [r["name"] for r in rows] == CATALOG
    assert json.loads(json.dumps(rows)) == rows
    h100 = rows[0]
    assert h100["mxfp8_tflops"] is None and h100["bf16_tflops"] == pytest.approx(989, rel=0.01)
    assert h100["hbm_gib"] == 79.65 and h100["nvlink_gb_s"] == 450 and h100["host_mem_gib"] == 256
    assert {"hbm_tb_s", "fp8_tflops", "nvlink_domain", "scaleout_gb_s", "host_link", "host_link_gb_s"} <= h100.keys()
    # the fabric facts the EP-call cost reads (engine.timing.moe.ep_proxy_call_s) reach the JSON too
    efa = next(r for r in rows if r["name"] == "h100-efa")
    assert h100["scaleout_gpu_rdma"] is True and h100["scaleout_nics_per_gpu"] is None
    assert efa["scaleout_gpu_rdma"] is False and efa["scaleout_nics_per_gpu"] == 4


# ---------------------------------------------------------------------------------------- errors

BAD = [
    # (yaml text, fragments the one-line message must contain besides the file name)
    ("gpus:\n  x:\n    base: h100\n    hbm_bytes: [1\n", ["malformed YAML at line 5"]),
    ("gpus:\n  x:\n    base: h100\n    hbm_byte: 80e9\n", ["gpus.x", "'hbm_byte'", "unknown"]),
    ("gpus:\n  x:\n    base: h100\n    scaleout_bw_bytes_per_s: -25e9\n", ["gpus.x", "'scaleout_bw_bytes_per_s'", "positive"]),
    ("gpus:\n  x:\n    base: h100\n    nvlink_domain: eight\n", ["gpus.x", "'nvlink_domain'", "number"]),
    ("gpus:\n  x:\n    base: h100\n    nvlink_domain: 7.5\n", ["gpus.x", "'nvlink_domain'", "whole"]),
    ("gpus:\n  x:\n    base: h100\n    hbm_bw_bytes_per_s: 3.35\n", ["gpus.x", "'hbm_bw_bytes_per_s'", "small"]),
    ("gpus:\n  x:\n    base: h100\n    nvlink_domain: true\n", ["gpus.x", "'nvlink_domain'", "number"]),
    ("gpus:\n  x:\n    base: h100\n    host_link: nvlink\n", ["gpus.x", "'host_link'", "c2c"]),
    ("gpus:\n  x:\n    base: h100\n    description: 5\n", ["gpus.x", "'description'", "string"]),
    ("gpus:\n  x:\n    base: h100\n    peak_flops: {int8: 2e15}\n", ["gpus.x", "'peak_flops.int8'"]),
    ("gpus:\n  x:\n    base: h100\n    peak_flops: {fp8: -1}\n", ["gpus.x", "'peak_flops.fp8'", "positive"]),
    ("gpus:\n  x:\n    base: a100\n", ["gpus.x", "'base'", "'a100'", "h100"]),
    ("gpus:\n  x:\n    base: y\n  y:\n    base: x\n", ["'base'", "cycle"]),
    ("gpus:\n  x:\n    description: no base\n    hbm_bytes: 80e9\n", ["gpus.x", "'hbm_bw_bytes_per_s'", "missing"]),
    ("gpus:\n  x:\n    base: h100\n    scaleout_busbw_bytes_per_s: 60e9\n", ["gpus.x", "'scaleout_busbw_bytes_per_s'", "exceeds"]),
    ("gpus:\n  x:\n    base: h100\n    aliases: [h100-200g]\n  h100-200g:\n    base: h100\n", ["h100-200g", "already"]),
    ("gpu:\n  x:\n    base: h100\n", ["'gpus'"]),
    ("gpus:\n  x: 5\n", ["gpus.x", "mapping"]),
    ("- just\n- a list\n", ["'gpus'"]),
]


@pytest.mark.parametrize("text, parts", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_user_file(tmp_path, text, parts):
    f = write(tmp_path, text)
    with pytest.raises(MoeplanError) as ei:
        load_user_hardware(f)
    one_line_error(ei, str(f), *parts)


def test_malformed_yaml_line_number(tmp_path):
    f = write(tmp_path, "gpus:\n  x:\n    base: h100\n  y: [1, 2\n  z: 3\n")
    with pytest.raises(MoeplanError) as ei:
        load_gpu("x", f)
    msg = one_line_error(ei, str(f), "malformed YAML")
    assert "at line 5 column 4" in msg, msg  # the ":" after z, inside the unclosed [


def test_missing_file(tmp_path):
    with pytest.raises(MoeplanError) as ei:
        load_gpu("h100", tmp_path / "nope.yaml")
    one_line_error(ei, "nope.yaml", "not found")


def test_edited_user_file_is_reread(tmp_path):
    f = write(tmp_path, "gpus:\n  x:\n    base: h100\n    nvlink_domain: 4\n")
    assert load_gpu("x", f).nvlink_domain == 4
    write(tmp_path, "gpus:\n  x:\n    base: h100\n    nvlink_domain: 2\n")
    assert load_gpu("x", f).nvlink_domain == 2


def test_missing_sm_count_is_one_rule_for_every_sm_term(tmp_path):
    """A hardware file without sm_count costs every SM-dependent term (Gated DeltaNet recurrence waves,
    the SMs DeepEP and NCCL take from overlapped compute) with ASSUMED_SM_COUNT, the H100's 132, so such a
    file's H100 estimates equal the catalog H100's (which gives 132)."""
    from moeplan import api
    from moeplan.hardware import ASSUMED_SM_COUNT, load_gpu

    assert load_gpu("h100").sm_count == ASSUMED_SM_COUNT == 132
    path = tmp_path / "hw.yaml"
    path.write_text("gpus:\n  h100-nosm:\n    base: h100\n    sm_count: null\n")
    nosm = load_gpu("h100-nosm", path)
    assert nosm.sm_count is None and nosm.sms == ASSUMED_SM_COUNT
    for model, extra in (("qwen3-next-80b-a3b", dict(cp=4, ep=8, pp=2, vpp=2, mcore_version="0.18")),
                         ("deepseek-v3", dict(ep=32, pp=8, vpp=4))):
        kw = dict(gpus=64 if model != "deepseek-v3" else 256, seq_len=32768, gbs=512, dispatcher="deepep",
                  ep_overlap=True, **extra)
        a = api.estimate(model, gpu=load_gpu("h100"), **kw)
        b = api.estimate(model, gpu=nosm, **kw)
        assert a["tokens_per_s_per_gpu"] == b["tokens_per_s_per_gpu"], model


def test_compute_capability_is_read_checked_and_inherited(tmp_path):
    """compute_capability (CUDA major.minor) picks the attention kernels TE can train a head shape with
    (timing.attention_kernel); a user file inherits it from its base, may clear it, and a bad value is a
    one-line error naming the key."""
    assert [load_gpu(g).compute_capability for g in ("h100", "b200", "gb200", "b300", "gb300")] == \
        [9.0, 10.0, 10.0, 10.3, 10.3]
    assert load_gpu("gb300").sm_arch == 103 and load_gpu("h200").sm_arch == 90
    path = tmp_path / "hw.yaml"
    path.write_text("gpus:\n  a:\n    base: gb200\n  b:\n    base: gb200\n    compute_capability: null\n")
    assert load_gpu("a", path).sm_arch == 100 and load_gpu("b", path).sm_arch is None
    for bad in ("10.25", "100", "abc", "-1"):
        path.write_text(f"gpus:\n  c:\n    base: gb200\n    compute_capability: {bad}\n")
        with pytest.raises(MoeplanError, match="compute_capability"):
            load_gpu("c", path)


def test_a_user_alias_that_names_a_catalog_gpu_is_refused(tmp_path, capsys):
    """aliases: [b200] on an H100-based entry hid the catalog B200 (`--gpu b200` costed the user's entry and the
    table listed it twice); an entry replaces a catalog GPU only under that GPU's own name."""
    from moeplan.cli import main

    bad = tmp_path / "hw.yaml"
    bad.write_text("gpus:\n  x:\n    base: h100\n    aliases: [b200]\n")
    assert main(["hardware", "--hardware", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "'b200' names the catalog GPU b200" in err and err.count("\n") == 1
    ok = tmp_path / "ok.yaml"
    ok.write_text("gpus:\n  h100:\n    base: h100\n    aliases: [h100-sxm, mine]\n")  # its own name's aliases: fine
    assert main(["hardware", "--hardware", str(ok), "--json"]) == 0
    names = [row["name"] for row in json.loads(capsys.readouterr().out)]
    assert len(names) == len(set(names))


def test_softmax_per_clock_rates_are_catalog_data(tmp_path):
    """The tensor-core and SFU rates per clock per SM are hardware facts in the catalog (with sources), inherited
    through ``base``; a user entry may give its own; one without them reads its compute capability's (the SM
    architecture's, from the catalog), and one with neither keeps Hopper's exponential cost."""
    from moeplan.engine.timing.attention import softmax_exp_share

    for name in CATALOG:
        g = load_gpu(name)
        assert g.mma_bf16_flops_per_clk_sm in (4096, 8192) and g.sfu_exp_per_clk_sm in (16, 32), name
    assert load_gpu("h100-efa").sfu_exp_per_clk_sm == 16 and load_gpu("b300-efa").sfu_exp_per_clk_sm == 32
    assert any("CUDA-TPUT" in s for s in load_gpu("b200").sources)
    assert any("BWU-SOFTMAX" in s for s in load_gpu("gb300").sources)
    f = write(tmp_path, """
gpus:
  mygpu:
    base: h100
    sfu_exp_per_clk_sm: 8
  bare:
""" + LAB_CARD + """  blackwell_lab:
    description: lab Blackwell card, no base
    compute_capability: 10.0
    hbm_bytes: 180e9
    hbm_bw_bytes_per_s: 8.0e+12
    peak_flops: {bf16: 2.25e15}
    nvlink_bw_bytes_per_s: 900e9
    nvlink_domain: 8
    scaleout_bw_bytes_per_s: 50e9
    host_link: pcie5
    host_link_bw_bytes_per_s: 64e9
    host_mem_bytes: 1e12
""")
    assert softmax_exp_share(load_gpu("blackwell_lab", f)) == softmax_exp_share(load_gpu("b200")) == 2.0
    # a base of another architecture lends its HBM and links, not its SM: the entry's compute capability decides
    arch = write(tmp_path, "gpus:\n  myb:\n    base: h100\n    compute_capability: 10.0\n"
                           "  myu:\n    base: b200\n    compute_capability: 10.3\n"
                           "  myown:\n    base: h100\n    compute_capability: 10.0\n    sfu_exp_per_clk_sm: 32\n",
                 "arch.yaml")
    assert softmax_exp_share(load_gpu("myb", arch)) == 2.0 and softmax_exp_share(load_gpu("myu", arch)) == 1.0
    assert softmax_exp_share(load_gpu("myown", arch)) == 1.0  # Blackwell's tensor cores, its own SFU rate
    # the rates are an SM architecture's: every catalogued GPU of one compute capability states the same
    by_cc: dict = {}
    for name in CATALOG:
        g = load_gpu(name)
        by_cc.setdefault(g.compute_capability, set()).add((g.mma_bf16_flops_per_clk_sm, g.sfu_exp_per_clk_sm))
    assert all(len(rates) == 1 for rates in by_cc.values()), by_cc
    assert softmax_exp_share(load_gpu("mygpu", f)) == 2.0  # half Hopper's SFU rate, same tensor cores
    assert softmax_exp_share(load_gpu("bare", f)) == 1.0
    bad = write(tmp_path, "gpus:\n  x:\n    base: h100\n    sfu_exp_per_clk_sm: 1.5\n", "bad.yaml")
    with pytest.raises(MoeplanError) as e:
        load_gpu("x", bad)
    one_line_error(e, "sfu_exp_per_clk_sm", "whole number")
