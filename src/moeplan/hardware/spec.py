"""What one GPU (plus its slice of the node/rack) offers: memory, compute, links.

Every quantity is per GPU and carries its unit in its name. Bandwidths are decimal bytes per second
(1 GB/s = 1e9 B/s) and per direction. FLOP/s are dense (no 2:4 sparsity). ``hbm_bytes`` is the usable
capacity as ``nvidia-smi --query-gpu=memory.total`` reports it (MiB x 2**20), which is also the total
that ``torch.cuda.mem_get_info`` sees -- not the marketed decimal GB label. The numbers and their
sources live in ``catalog.yaml``; this module only defines the shape.

The ``*_achieved_*`` / ``*_busbw_*`` fields are measured (benchmark) figures, ``None`` where no
measurement was found; a timing model divides them by the peak to get calibrated efficiencies.
"""

from __future__ import annotations

from functools import lru_cache
from dataclasses import dataclass

from moeplan.base.errors import MoeplanError

# Tensor-core rate classes a catalog entry may list in ``peak_flops``.
PEAK_KEYS: tuple[str, ...] = ("bf16", "fp8", "mxfp8", "fp4")

# Precision names accepted by :meth:`GPUSpec.peak`, mapped to the rate class that runs them.
# fp16 runs at the bf16 rate on every GPU here. All per-tensor / delayed / current / blockwise FP8
# recipes run on the plain FP8 tensor cores (Hopper has no hardware block scaling; blockwise scales are
# applied in software). MXFP8 needs Blackwell's hardware block scaling. NVFP4 and MXFP4 share the FP4 rate.
PRECISIONS: dict[str, str] = {
    "bf16": "bf16",
    "fp16": "bf16",
    "fp8": "fp8",
    "fp8-cs": "fp8",  # current (per-tensor) scaling
    "fp8-current": "fp8",
    "fp8-ds": "fp8",  # delayed scaling
    "fp8-delayed": "fp8",
    "fp8-tensorwise": "fp8",
    "fp8-bw": "fp8",  # blockwise (DeepSeek-V3 style 1x128 / 128x128)
    "fp8-blockwise": "fp8",
    "mxfp8": "mxfp8",
    "fp4": "fp4",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
}

HOST_LINKS: tuple[str, ...] = ("pcie4", "pcie5", "pcie6", "c2c")
# SMs assumed where a hardware file gives no sm_count: H100 SXM5's 132 (GH100 SXM5 configuration, NVIDIA H100
# Tensor Core GPU Architecture whitepaper), the smallest count in the catalog, so SM-bound terms err slow.
ASSUMED_SM_COUNT = 132


@lru_cache(maxsize=64)
def precision_class(precision: str) -> str:
    """The ``peak_flops`` key that runs ``precision`` (case-insensitive, ``_`` = ``-``)."""
    key = precision.strip().lower().replace("_", "-")
    try:
        return PRECISIONS[key]
    except KeyError:
        raise MoeplanError(
            f"unknown precision '{precision}'; known: {', '.join(PRECISIONS)}"
        ) from None


@dataclass(frozen=True)
class GPUSpec:
    """One GPU as deployed (HGX/DGX 8-GPU node or NVL72 rack). See ``catalog.yaml`` for sources."""

    name: str  # catalog key, e.g. "h100"
    description: str  # e.g. "NVIDIA H100 SXM5 80GB (HGX/DGX H100)"
    hbm_bytes: int  # usable HBM: nvidia-smi memory.total MiB * 2**20
    hbm_bw_bytes_per_s: float
    peak_flops: dict[str, float]  # dense tensor-core FLOP/s, keys from PEAK_KEYS the GPU supports
    nvlink_bw_bytes_per_s: float  # per GPU, per direction (half the marketed bidirectional figure)
    nvlink_domain: int  # GPUs in one NVLink domain: 8 for HGX/DGX, 72 for NVL72
    scaleout_bw_bytes_per_s: float  # NIC line rate per GPU, per direction (400 Gb/s = 50e9)
    host_link: str  # one of HOST_LINKS
    host_link_bw_bytes_per_s: float  # GPU<->CPU per GPU per direction
    host_mem_bytes: int  # CPU memory per GPU available for offload
    sources: tuple[str, ...]  # where the numbers came from
    # Measured figures (None = not measured). Units as above.
    gemm_bf16_achieved_flops: float | None = None  # best-shape BF16 matmul (MAMF)
    gemm_fp8_achieved_flops: float | None = None  # best-shape FP8 e4m3 matmul (MAMF)
    nvlink_busbw_bytes_per_s: float | None = None  # NCCL ring busbw, large messages, full domain
    nvlink_nvls_busbw_bytes_per_s: float | None = None  # NCCL NVLS (SHARP) all-reduce busbw
    scaleout_busbw_bytes_per_s: float | None = None  # inter-node all-reduce, as per-GPU NIC bytes/s
    host_link_achieved_bytes_per_s: float | None = None  # nvbandwidth H2D/D2H, one direction
    # CPU memory bandwidth per GPU (host sockets' peak / GPUs sharing them): the CPU Adam step of
    # optimizer offload streams the offloaded state through it. None: the host-link class default.
    host_mem_bw_bytes_per_s: float | None = None
    # Streaming multiprocessors per GPU (datasheet / architecture brief): the share of the SMs NCCL and
    # DeepEP kernels take from overlapped compute (moeplan.engine.fsdp, moeplan.engine.timing) and the waves of the Gated
    # DeltaNet recurrence. None: not given; every such term uses ``sms`` (ASSUMED_SM_COUNT).
    sm_count: int | None = None
    # CUDA compute capability as major.minor (NVIDIA CUDA GPUs list: H100/H200 9.0, B200/GB200 10.0, B300/GB300
    # 10.3): which fused-attention kernels Transformer Engine can run for a head shape (attention_backend.attention_kernel).
    # None: not given; attention is then costed with the kernels that serve every head shape on Hopper.
    compute_capability: float | None = None
    # Dense BF16 tensor-core FLOPs and softmax exponentials (SFU MUFU.EX2 results) per clock per SM (architecture
    # whitepapers, the CUDA C++ Programming Guide's throughput table): how much tensor-core time one exponential of
    # the attention softmax stands for (timing.attention.softmax_exp_share). None: not given; Hopper's ratio.
    mma_bf16_flops_per_clk_sm: int | None = None
    sfu_exp_per_clk_sm: int | None = None
    # Whether GPU kernels can drive the scale-out NIC themselves (InfiniBand / RoCE with GPUDirect RDMA and
    # IBGDA, what DeepEP's internode kernels use through NVSHMEM). False for AWS EFA (SRD over libfabric, no
    # GPU-initiated RDMA): DeepEP's internode dispatch / combine then run through host proxy threads (UCCL-EP,
    # NVSHMEM's libfabric transport), each call paying a host round trip (calibration ``ep_proxy_call_s``) and the
    # proxies' work per RDMA message to a remote node (``ep_proxy_message_s``), and NCCL's
    # all-to-all posts through its host proxy thread and aws-ofi-nccl (``a2a_host_call_s`` a call).
    scaleout_gpu_rdma: bool = True
    # Scale-out NICs (rails) serving each GPU: AWS p5.48xlarge 32 EFA devices / 8 GPUs = 4 x 100 Gb/s, p6-b300.48xlarge
    # 16 / 8 = 2 x 400 Gb/s. aws-ofi-nccl stripes each message over the rails (nccl_ofi_scheduler.cpp
    # get_num_stripes: min(ceil(size / min_stripe_size), rails)), so a host-posted message costs one write and one
    # completion per rail (engine.timing.moe.ep_proxy_call_s). None: not given, one rail.
    scaleout_nics_per_gpu: int | None = None
    # Not a hardware-file key: the absolute path of the user hardware file that defined this GPU (None: the
    # catalog's). Exports' '# moeplan:' comment records it so `moeplan check` finds the GPU again.
    hardware_file: str | None = None

    def __hash__(self) -> int:  # peak_flops is a dict; hash on the identity fields only
        cached = self.__dict__.get("_hash_value")  # once per object: the planner's caches are keyed by runs
        if cached is None:
            cached = hash((self.name, self.description, self.hbm_bytes, tuple(sorted(self.peak_flops.items()))))
            object.__setattr__(self, "_hash_value", cached)
        return cached  # type: ignore[no-any-return]

    @property
    def sms(self) -> int:
        """The SM count every SM-dependent term uses: ``sm_count``, else ASSUMED_SM_COUNT (one rule for all)."""
        return self.sm_count or ASSUMED_SM_COUNT

    def supports(self, precision: str) -> bool:
        """True if the GPU has tensor cores for ``precision`` (unknown names raise MoeplanError)."""
        return precision_class(precision) in self.peak_flops

    def peak(self, precision: str) -> float:
        """Dense peak FLOP/s for ``precision``; MoeplanError if the GPU lacks it (mxfp8 on H100)."""
        cls = precision_class(precision)
        if cls not in self.peak_flops:
            have = ", ".join(k for k in PEAK_KEYS if k in self.peak_flops)
            raise MoeplanError(
                f"GPU '{self.name}' has no {cls} tensor cores (precision '{precision}'); it supports: {have}"
            )
        return self.peak_flops[cls]

    @property
    def sm_arch(self) -> int | None:
        """Compute capability as Transformer Engine compares it (``sm_arch_``: 90, 100, 103), or None."""
        cc = self.compute_capability
        return None if cc is None else round(cc * 10)

    @property
    def is_nvl72(self) -> bool:
        """Rack-scale NVLink domain (GB200/GB300 NVL72): 72 GPUs or more share one NVLink fabric."""
        return self.nvlink_domain >= 72

    @property
    def hbm_gib(self) -> float:
        return self.hbm_bytes / 2**30
