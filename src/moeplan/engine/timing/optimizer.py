"""The optimizer step and its CPU offload: host Adam throughput and the PCIe / C2C traffic of offloaded state."""

from __future__ import annotations


from moeplan.engine.activations import BF16_BYTES, FP32_BYTES
from moeplan.engine.timing.calibration import Calibration
from moeplan.engine.timing.offload_act import host_link_bytes_per_s
from moeplan.hardware import GPUSpec
from moeplan.run.config import RunConfig


# Host memory bandwidth per GPU where a hardware entry gives none, by host link class: x86 DGX hosts
# (2 sockets x 8 channels DDR5-4800 = 614 GB/s over 8 GPUs) and Grace (512 GB/s LPDDR5X per Grace over
# its 2 GPUs); the catalog entries carry their own figures and sources.
HOST_MEM_BW_DEFAULT = {"pcie4": 76.8e9, "pcie5": 76.8e9, "pcie6": 76.8e9, "c2c": 256.0e9}


def cpu_adam_params_per_s(gpu: GPUSpec, cal: Calibration, bf16_moments: bool) -> float:
    """Parameters per second one GPU process updates with the CPU Adam of optimizer offload.

    The fused CPU AdamW streams each parameter's fp32 master (read + write), its gradient (read) and
    both moments (read + write) through host memory, with the host's memory bandwidth shared by the
    GPUs of the node (``host_mem_bw_bytes_per_s`` per GPU); ``cpu_adam_mem_eff`` is the share of that
    bandwidth it reaches (fitted to the offload curve, measured_variants.csv G08)."""
    moment_b = BF16_BYTES if bf16_moments else FP32_BYTES
    bytes_per_param = 2 * FP32_BYTES + FP32_BYTES + 2 * 2 * moment_b
    bw = gpu.host_mem_bw_bytes_per_s or HOST_MEM_BW_DEFAULT.get(gpu.host_link, HOST_MEM_BW_DEFAULT["pcie5"])
    return bw * cal.cpu_adam_mem_eff / bytes_per_param


def offload_s(cfg: RunConfig, gpu: GPUSpec, cal: Calibration, params: float) -> float:
    """Seconds per step of the CPU share (``params`` per GPU) of the optimizer step.

    Megatron's HybridDeviceOptimizer (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py)
    copies the offloaded gradients to the host (D2H), runs the CPU fused AdamW synchronously and copies
    the updated parameters back (H2D); nothing of it overlaps forward/backward. With
    ``overlap_cpu_optimizer_d2h_h2d`` the copies of one parameter group run while the CPU updates
    another, so the step costs the longer of the two (plus one group's copies, neglected)."""
    grad_b = FP32_BYTES if cfg.grad_fp32 else BF16_BYTES
    link = host_link_bytes_per_s(gpu)
    # params H2D: the GPU copy is the fp32 master without the precision-aware optimizer, else bf16
    param_b = BF16_BYTES if cfg.precision_aware else FP32_BYTES
    copy_s = params * (grad_b + param_b) / link
    cpu_s = params / cpu_adam_params_per_s(gpu, cal, cfg.bf16_moments)
    return max(cpu_s, copy_s) if cfg.offload_overlap else cpu_s + copy_s
