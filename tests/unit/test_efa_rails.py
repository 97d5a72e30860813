"""The fixed cost of an EP call across EFA nodes is paid per NIC rail of the GPU (engine.timing.moe.ep_proxy_call_s):
aws-ofi-nccl stripes each network chunk over the GPU's rails, NVSHMEM's libfabric transport polls one domain per NIC.
p5.48xlarge gives each H100 4 x 100 Gb/s EFA rails (32 / 8), p6-b300 each B300 2 x 400 Gb/s (16 / 8): the p5 campaign
(N33) measures ~2-2.4x p6-b300's fixed cost per NCCL call, which one constant per rail now carries."""

from __future__ import annotations

import pytest

from moeplan.base.errors import MoeplanError
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.moe import ep_proxy_call_s
from moeplan.hardware import load_gpu, load_user_hardware


def test_catalog_rails_per_gpu():
    """AWS: P5 supports 32 network cards (3,200 Gbps), one EFA interface per card; the p6-b300 campaign's launcher
    requests the node's 16 EFA devices (6,400 Gbps / 16 = 400 Gbps each). GPUs without the field have one rail."""
    p5, p6 = load_gpu("p5.48xlarge"), load_gpu("p6-b300")
    assert p5.scaleout_nics_per_gpu == 4 and p6.scaleout_nics_per_gpu == 2
    # per-rail rate = per-GPU rate / rails: 100 Gb/s on p5, 400 Gb/s on p6-b300
    assert p5.scaleout_bw_bytes_per_s / p5.scaleout_nics_per_gpu == pytest.approx(100e9 / 8)
    assert p6.scaleout_bw_bytes_per_s / p6.scaleout_nics_per_gpu == pytest.approx(400e9 / 8)
    assert load_gpu("h100").scaleout_nics_per_gpu is None


@pytest.mark.parametrize("dispatcher", ["alltoall", "deepep"])
def test_call_cost_scales_with_rails(dispatcher):
    """Same constants, same node count: a p5 EP call costs twice a p6-b300 one (4 rails against 2); one node, or a
    fabric with GPU-initiated RDMA, costs nothing."""
    p5, p6 = load_gpu("h100-efa"), load_gpu("b300-efa")
    cal = DEFAULT_CALIBRATION
    c5, c6 = ep_proxy_call_s(p5, cal, 4, dispatcher), ep_proxy_call_s(p6, cal, 4, dispatcher)
    per_rail = cal.ep_proxy_call_s if dispatcher == "deepep" else cal.a2a_host_call_s
    assert c5 == pytest.approx(4 * per_rail) and c6 == pytest.approx(2 * per_rail)
    assert ep_proxy_call_s(p5, cal, 1, dispatcher) == 0.0
    assert ep_proxy_call_s(load_gpu("h100"), cal, 4, dispatcher) == 0.0


def _user_gpu(tmp_path, rails):
    f = tmp_path / "hw.yaml"
    f.write_text("gpus:\n  my-efa:\n    base: h100\n    scaleout_gpu_rdma: false\n"
                 f"    scaleout_nics_per_gpu: {rails}\n")
    return f


def test_user_file_rails(tmp_path):
    gpu = load_user_hardware(_user_gpu(tmp_path, 3))["my-efa"]
    assert gpu.scaleout_nics_per_gpu == 3
    assert ep_proxy_call_s(gpu, DEFAULT_CALIBRATION, 2, "alltoall") == pytest.approx(3 * DEFAULT_CALIBRATION.a2a_host_call_s)


@pytest.mark.parametrize("bad", [0, 2.5, "two"])
def test_user_file_rails_refused(tmp_path, bad):
    with pytest.raises(MoeplanError, match="scaleout_nics_per_gpu"):
        load_user_hardware(_user_gpu(tmp_path, bad))
