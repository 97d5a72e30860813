"""Hardware catalog (public API; the schema is in ``schema.py``, reading and ``base`` resolution in
``loader.py``): per-GPU memory, compute and link figures for H100 ... GB300 NVL72.

The built-in entries live in ``catalog.yaml`` (package data) with a source for every figure. A user
file has the same schema::

    gpus:
      h100-200g:                      # name used on the command line (case-insensitive)
        base: h100                    # optional: start from a catalog (or same-file) entry
        description: H100 with 200 Gb/s NICs
        scaleout_bw_bytes_per_s: 25e9 # numbers may be YAML numbers or strings like "25e9"
        aliases: [myh100]             # optional extra names

Without ``base`` every :class:`GPUSpec` field except ``sources`` and the measured ones is required.
With ``base``, ``peak_flops`` merges key by key, and overriding a peak figure rescales the inherited
measured figure paired with it (e.g. ``scaleout_busbw`` follows ``scaleout_bw``), keeping the measured
efficiency; set the measured field too to choose it directly. Every bad input raises
:class:`~moeplan.base.errors.MoeplanError` with a one-line message naming the file, entry and key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from moeplan.base.errors import MoeplanError
from moeplan.hardware.loader import build_spec, catalog_entries, find_entry, read_user_file
from moeplan.hardware.schema import norm_name
from moeplan.hardware.spec import ASSUMED_SM_COUNT, PEAK_KEYS, PRECISIONS, GPUSpec, precision_class

__all__ = [
    "ASSUMED_SM_COUNT",
    "GPUSpec",
    "PRECISIONS",
    "hardware_names",
    "hardware_table",
    "load_gpu",
    "load_user_hardware",
    "precision_class",
]

def hardware_names(user_file: str | Path | None = None) -> list[str]:
    """Catalog GPU names in catalog order (H100 ... GB300), then the new names in ``user_file``."""
    names = [e.name for e in catalog_entries()]
    if user_file is not None:
        names += [e.name for e in read_user_file(user_file) if e.name not in names]
    return names


def load_user_hardware(path: str | Path) -> dict[str, GPUSpec]:
    """All GPUs defined in a user hardware YAML file, by (lower-case) name."""
    user = read_user_file(path)
    return {e.name: build_spec(e, user) for e in user}


def load_gpu(name: str, user_file: str | Path | None = None) -> GPUSpec:
    """A GPU by catalog name or alias (case-insensitive); entries in ``user_file`` take precedence."""
    key = norm_name(name)
    user = read_user_file(user_file) if user_file is not None else ()
    entry = find_entry(user, key) if key else None
    if entry is not None:
        return build_spec(entry, user)
    entry = find_entry(catalog_entries(), key) if key else None
    if entry is not None:
        return build_spec(entry, ())
    known = ", ".join(hardware_names(user_file))
    raise MoeplanError(f"unknown GPU '{name}'; known: {known}")


def hardware_table(user_file: str | Path | None = None) -> list[dict[str, Any]]:
    """One JSON-ready row per GPU, in display units (GiB, TB/s, TFLOP/s, GB/s per direction)."""
    rows = []
    for n in hardware_names(user_file):
        g = load_gpu(n, user_file)
        tf = {k: (round(g.peak_flops[k] / 1e12, 1) if k in g.peak_flops else None) for k in PEAK_KEYS}
        rows.append(
            {
                "name": g.name,
                "description": g.description,
                "hbm_gib": round(g.hbm_bytes / 2**30, 2),
                "hbm_tb_s": round(g.hbm_bw_bytes_per_s / 1e12, 2),
                "bf16_tflops": tf["bf16"],
                "fp8_tflops": tf["fp8"],
                "mxfp8_tflops": tf["mxfp8"],
                "fp4_tflops": tf["fp4"],
                "nvlink_gb_s": round(g.nvlink_bw_bytes_per_s / 1e9, 1),
                "nvlink_domain": g.nvlink_domain,
                "scaleout_gb_s": round(g.scaleout_bw_bytes_per_s / 1e9, 1),
                "scaleout_gpu_rdma": g.scaleout_gpu_rdma is not False,  # absent: GPU-initiated RDMA (spec.py)
                "scaleout_nics_per_gpu": g.scaleout_nics_per_gpu,
                "host_link": g.host_link,
                "host_link_gb_s": round(g.host_link_bw_bytes_per_s / 1e9, 1),
                "host_mem_gib": round(g.host_mem_bytes / 2**30, 1),
            }
        )
    return rows
