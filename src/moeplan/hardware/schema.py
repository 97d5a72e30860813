"""The hardware file schema: field kinds, per-key validation and parsing of one YAML text into
entries (before ``base`` is applied). Every bad input is a one-line :class:`MoeplanError` naming the
file, entry and key."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, fields
from typing import Any

import yaml

from moeplan.base import safeyaml
from moeplan.base.errors import MoeplanError, yaml_problem
from moeplan.hardware.spec import HOST_LINKS, PEAK_KEYS, GPUSpec

# Field kinds, used for type checks. Minimums catch unit slips (TB/s given where B/s is expected).
_INT_BYTES = ("hbm_bytes", "host_mem_bytes")
_BW = ("hbm_bw_bytes_per_s", "nvlink_bw_bytes_per_s", "scaleout_bw_bytes_per_s", "host_link_bw_bytes_per_s")
_MEASURED_BW = (
    "nvlink_busbw_bytes_per_s",
    "nvlink_nvls_busbw_bytes_per_s",
    "scaleout_busbw_bytes_per_s",
    "host_link_achieved_bytes_per_s",
)
_MEASURED_FLOPS = ("gemm_bf16_achieved_flops", "gemm_fp8_achieved_flops")
PER_CLOCK = ("mma_bf16_flops_per_clk_sm", "sfu_exp_per_clk_sm")  # per clock per SM: small whole numbers
_OPTIONAL = _MEASURED_BW + _MEASURED_FLOPS + PER_CLOCK + ("host_mem_bw_bytes_per_s", "sm_count", "compute_capability",
                                                           "scaleout_gpu_rdma", "scaleout_nics_per_gpu")
_MIN_BYTES = 1e9  # 1 GB or 1 GB/s: anything smaller is a unit mistake for these GPUs
_MIN_FLOPS = 1e12
# Compute capabilities a catalog GPU may carry: from 5.0 (Maxwell, the oldest architecture CUDA 12's toolkit
# builds for; CUDA Programming Guide, "Compute Capabilities") up to, not including, 20.0 (a bound on typos such
# as 90 for 9.0; Blackwell is 10.x / 12.x), with one decimal digit as nvidia-smi's compute_cap prints it.
_CC_MIN, _CC_END = 5.0, 20.0

# measured field -> (peak it is a fraction of, whether measured may exceed it)
# NVLS all-reduce busbw can exceed the link rate (in-switch reduction), the others cannot.
PAIRS: dict[str, tuple[str, bool]] = {
    "gemm_bf16_achieved_flops": ("peak_flops.bf16", False),
    "gemm_fp8_achieved_flops": ("peak_flops.fp8", False),
    "nvlink_busbw_bytes_per_s": ("nvlink_bw_bytes_per_s", False),
    "nvlink_nvls_busbw_bytes_per_s": ("nvlink_bw_bytes_per_s", True),
    "scaleout_busbw_bytes_per_s": ("scaleout_bw_bytes_per_s", False),
    "host_link_achieved_bytes_per_s": ("host_link_bw_bytes_per_s", False),
}

SPEC_FIELDS = tuple(f.name for f in fields(GPUSpec) if f.name != "hardware_file")  # where it came from, set by the loader
REQUIRED = tuple(n for n in SPEC_FIELDS if n not in ("name", "sources") + _OPTIONAL)
_ENTRY_KEYS = frozenset(SPEC_FIELDS) - {"name"} | {"base", "aliases"}

Values = tuple[tuple[str, Any], ...]  # validated field values; peak_flops as a tuple of pairs


@dataclass(frozen=True)
class Entry:
    """One ``gpus:`` entry after per-key validation, before ``base`` is applied."""

    origin: str
    name: str
    base: str | None
    aliases: tuple[str, ...]
    values: Values


def norm_name(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def field_error(origin: str, entry: str, key: str, why: str) -> MoeplanError:
    return MoeplanError(f"{origin}: gpus.{entry}: key '{key}' {why}")


# ------------------------------------------------------------------------------------------- parsing


def _number(origin: str, entry: str, key: str, value: Any, minimum: float, integer: bool = False) -> float | int:
    """A positive finite number; YAML strings like "25e9" (which YAML does not read as floats) are accepted."""
    raw = value
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise field_error(origin, entry, key, f"must be a number, got {raw!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise field_error(origin, entry, key, f"must be a number, got {type(raw).__name__} {raw!r}")
    if not math.isfinite(value):
        raise field_error(origin, entry, key, f"must be a finite number, got {raw!r}")
    if value <= 0:
        raise field_error(origin, entry, key, f"must be positive, got {raw!r}")
    if value < minimum:
        unit = "FLOP/s" if minimum == _MIN_FLOPS else ("bytes/s" if "per_s" in key else "bytes")
        raise field_error(origin, entry, key, f"is {raw!r}, implausibly small: give {unit}, e.g. 50e9 not 50")
    if integer:
        if float(value) != int(value):
            raise field_error(origin, entry, key, f"must be a whole number, got {raw!r}")
        return int(value)
    return float(value)


def _check_value(origin: str, entry: str, key: str, value: Any) -> Any:
    if key in ("description", "base"):
        if not isinstance(value, str) or not value.strip():
            raise field_error(origin, entry, key, f"must be a non-empty string, got {value!r}")
        return value.strip()
    if key in ("aliases", "sources"):
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(s, str) and s.strip() for s in items):
            raise field_error(origin, entry, key, f"must be a list of non-empty strings, got {value!r}")
        return tuple(s.strip() for s in items)
    if key == "host_link":
        if not isinstance(value, str) or value.strip().lower() not in HOST_LINKS:
            raise field_error(origin, entry, key, f"must be one of {', '.join(HOST_LINKS)}, got {value!r}")
        return value.strip().lower()
    if key == "nvlink_domain":
        return _number(origin, entry, key, value, 1, integer=True)
    if key in _INT_BYTES:
        return _number(origin, entry, key, value, _MIN_BYTES, integer=True)
    if key in _BW:
        return _number(origin, entry, key, value, _MIN_BYTES)
    if key in ("sm_count", "scaleout_nics_per_gpu", *PER_CLOCK):
        return None if value is None else _number(origin, entry, key, value, 1, integer=True)
    if key == "scaleout_gpu_rdma":
        if not isinstance(value, bool):
            raise field_error(origin, entry, key, f"must be true or false, got {value!r}")
        return value
    if key == "compute_capability":
        if value is None:
            return None
        cc = _number(origin, entry, key, value, 1)
        if not _CC_MIN <= cc < _CC_END or round(cc * 10) != cc * 10:
            raise field_error(origin, entry, key, f"must be a CUDA compute capability like 9.0 or 10.3, got {value!r}")
        return float(cc)
    if key in _OPTIONAL:
        if value is None:
            return None
        return _number(origin, entry, key, value, _MIN_FLOPS if key in _MEASURED_FLOPS else _MIN_BYTES)
    if key == "peak_flops":
        if not isinstance(value, dict) or not value:
            raise field_error(origin, entry, key, f"must be a mapping like {{bf16: 989e12, fp8: 1979e12}}, got {value!r}")
        out = []
        for k, v in value.items():
            if k not in PEAK_KEYS:
                raise field_error(origin, entry, f"{key}.{k}", f"is not a precision class; known: {', '.join(PEAK_KEYS)}")
            out.append((k, _number(origin, entry, f"{key}.{k}", v, _MIN_FLOPS)))
        return tuple(out)
    raise AssertionError(key)  # pragma: no cover - keys are filtered before


def parse_entries(text: str, origin: str, builtin: bool = False) -> tuple[Entry, ...]:
    """Entries of a hardware YAML text. The built-in catalog is read with libyaml's parser where
    PyYAML has it (same resolver and constructors as safe_load, several times faster: start-up time);
    user files keep the pure-Python parser and its error marks."""
    try:  # user files: the bounded loader (alias bombs, depth, a key given twice refused)
        doc = (yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
               if builtin else safeyaml.load(text))
    except yaml.YAMLError as exc:
        raise MoeplanError(f"{origin}: malformed YAML{yaml_problem(exc)}") from None
    if not isinstance(doc, dict) or "gpus" not in doc:
        raise MoeplanError(f"{origin}: expected a top-level mapping with key 'gpus'")
    extra = sorted(str(k) for k in doc if k != "gpus")
    if extra:
        raise MoeplanError(f"{origin}: unknown top-level key '{extra[0]}' (only 'gpus' is allowed)")
    gpus = doc["gpus"]
    if not isinstance(gpus, dict) or not gpus:
        raise MoeplanError(f"{origin}: key 'gpus' must be a non-empty mapping of GPU name -> fields")
    entries: list[Entry] = []
    seen: dict[str, str] = {}
    for raw_name, body in gpus.items():
        label = str(raw_name)
        name = norm_name(label)
        if not name:
            raise MoeplanError(f"{origin}: gpus: empty GPU name")
        if not isinstance(body, dict):
            raise MoeplanError(f"{origin}: gpus.{label}: expected a mapping of fields, got {body!r}")
        vals: dict[str, Any] = {}
        for key, value in body.items():
            if key not in _ENTRY_KEYS:
                close = difflib.get_close_matches(str(key), sorted(_ENTRY_KEYS), n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(sorted(_ENTRY_KEYS))}"
                raise field_error(origin, label, str(key), f"is unknown; {hint}")
            vals[key] = _check_value(origin, label, key, value)
        base = vals.pop("base", None)
        aliases = tuple(norm_name(a) for a in vals.pop("aliases", ()))
        for n in (name, *aliases):
            if n in seen:
                raise field_error(origin, label, "aliases" if n != name else "name", f"'{n}' already names gpus.{seen[n]}")
            seen[n] = label
        entries.append(Entry(origin, name, norm_name(base) if base else None, aliases, tuple(vals.items())))
    return tuple(entries)
