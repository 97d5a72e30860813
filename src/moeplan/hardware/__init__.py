"""Hardware catalog: per-GPU memory, compute and link figures for H100 ... GB300 NVL72.

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
:class:`~moeplan.errors.MoeplanError` with a one-line message naming the file, entry and key.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, fields
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from moeplan.errors import MoeplanError
from moeplan.hardware.spec import HOST_LINKS, PEAK_KEYS, PRECISIONS, GPUSpec, precision_class

__all__ = [
    "GPUSpec",
    "PRECISIONS",
    "hardware_names",
    "hardware_table",
    "load_gpu",
    "load_user_hardware",
    "precision_class",
]

_CATALOG_ORIGIN = "moeplan/hardware/catalog.yaml"

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
_OPTIONAL = _MEASURED_BW + _MEASURED_FLOPS + ("host_mem_bw_bytes_per_s", "sm_count")
_MIN_BYTES = 1e9  # 1 GB or 1 GB/s: anything smaller is a unit mistake for these GPUs
_MIN_FLOPS = 1e12

# measured field -> (peak it is a fraction of, whether measured may exceed it)
# NVLS all-reduce busbw can exceed the link rate (in-switch reduction), the others cannot.
_PAIRS: dict[str, tuple[str, bool]] = {
    "gemm_bf16_achieved_flops": ("peak_flops.bf16", False),
    "gemm_fp8_achieved_flops": ("peak_flops.fp8", False),
    "nvlink_busbw_bytes_per_s": ("nvlink_bw_bytes_per_s", False),
    "nvlink_nvls_busbw_bytes_per_s": ("nvlink_bw_bytes_per_s", True),
    "scaleout_busbw_bytes_per_s": ("scaleout_bw_bytes_per_s", False),
    "host_link_achieved_bytes_per_s": ("host_link_bw_bytes_per_s", False),
}

_SPEC_FIELDS = tuple(f.name for f in fields(GPUSpec))
_REQUIRED = tuple(n for n in _SPEC_FIELDS if n not in ("name", "sources") + _OPTIONAL)
_ENTRY_KEYS = frozenset(_SPEC_FIELDS) - {"name"} | {"base", "aliases"}

Values = tuple[tuple[str, Any], ...]  # validated field values; peak_flops as a tuple of pairs


@dataclass(frozen=True)
class _Entry:
    """One ``gpus:`` entry after per-key validation, before ``base`` is applied."""

    origin: str
    name: str
    base: str | None
    aliases: tuple[str, ...]
    values: Values


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def _fail(origin: str, entry: str, key: str, why: str) -> MoeplanError:
    return MoeplanError(f"{origin}: gpus.{entry}: key '{key}' {why}")


# ------------------------------------------------------------------------------------------- parsing


def _number(origin: str, entry: str, key: str, value: Any, minimum: float, integer: bool = False) -> float | int:
    """A positive finite number; YAML strings like "25e9" (which YAML does not read as floats) are accepted."""
    raw = value
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise _fail(origin, entry, key, f"must be a number, got {raw!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(origin, entry, key, f"must be a number, got {type(raw).__name__} {raw!r}")
    if not math.isfinite(value):
        raise _fail(origin, entry, key, f"must be a finite number, got {raw!r}")
    if value <= 0:
        raise _fail(origin, entry, key, f"must be positive, got {raw!r}")
    if value < minimum:
        unit = "FLOP/s" if minimum == _MIN_FLOPS else ("bytes/s" if "per_s" in key else "bytes")
        raise _fail(origin, entry, key, f"is {raw!r}, implausibly small: give {unit}, e.g. 50e9 not 50")
    if integer:
        if float(value) != int(value):
            raise _fail(origin, entry, key, f"must be a whole number, got {raw!r}")
        return int(value)
    return float(value)


def _check_value(origin: str, entry: str, key: str, value: Any) -> Any:
    if key in ("description", "base"):
        if not isinstance(value, str) or not value.strip():
            raise _fail(origin, entry, key, f"must be a non-empty string, got {value!r}")
        return value.strip()
    if key in ("aliases", "sources"):
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(s, str) and s.strip() for s in items):
            raise _fail(origin, entry, key, f"must be a list of non-empty strings, got {value!r}")
        return tuple(s.strip() for s in items)
    if key == "host_link":
        if not isinstance(value, str) or value.strip().lower() not in HOST_LINKS:
            raise _fail(origin, entry, key, f"must be one of {', '.join(HOST_LINKS)}, got {value!r}")
        return value.strip().lower()
    if key == "nvlink_domain":
        return _number(origin, entry, key, value, 1, integer=True)
    if key in _INT_BYTES:
        return _number(origin, entry, key, value, _MIN_BYTES, integer=True)
    if key in _BW:
        return _number(origin, entry, key, value, _MIN_BYTES)
    if key == "sm_count":
        return None if value is None else _number(origin, entry, key, value, 1, integer=True)
    if key in _OPTIONAL:
        if value is None:
            return None
        return _number(origin, entry, key, value, _MIN_FLOPS if key in _MEASURED_FLOPS else _MIN_BYTES)
    if key == "peak_flops":
        if not isinstance(value, dict) or not value:
            raise _fail(origin, entry, key, f"must be a mapping like {{bf16: 989e12, fp8: 1979e12}}, got {value!r}")
        out = []
        for k, v in value.items():
            if k not in PEAK_KEYS:
                raise _fail(origin, entry, f"{key}.{k}", f"is not a precision class; known: {', '.join(PEAK_KEYS)}")
            out.append((k, _number(origin, entry, f"{key}.{k}", v, _MIN_FLOPS)))
        return tuple(out)
    raise AssertionError(key)  # pragma: no cover - keys are filtered before


def _parse(text: str, origin: str, builtin: bool = False) -> tuple[_Entry, ...]:
    """Entries of a hardware YAML text. The built-in catalog is read with libyaml's parser where
    PyYAML has it (same resolver and constructors as safe_load, several times faster: start-up time);
    user files keep the pure-Python parser and its error marks."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader) if builtin else yaml.SafeLoader
    try:
        doc = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise MoeplanError(f"{origin}: malformed YAML{where}: {problem}") from None
    if not isinstance(doc, dict) or "gpus" not in doc:
        raise MoeplanError(f"{origin}: expected a top-level mapping with key 'gpus'")
    extra = sorted(str(k) for k in doc if k != "gpus")
    if extra:
        raise MoeplanError(f"{origin}: unknown top-level key '{extra[0]}' (only 'gpus' is allowed)")
    gpus = doc["gpus"]
    if not isinstance(gpus, dict) or not gpus:
        raise MoeplanError(f"{origin}: key 'gpus' must be a non-empty mapping of GPU name -> fields")
    entries: list[_Entry] = []
    seen: dict[str, str] = {}
    for raw_name, body in gpus.items():
        label = str(raw_name)
        name = _norm(label)
        if not name:
            raise MoeplanError(f"{origin}: gpus: empty GPU name")
        if not isinstance(body, dict):
            raise MoeplanError(f"{origin}: gpus.{label}: expected a mapping of fields, got {body!r}")
        vals: dict[str, Any] = {}
        for key, value in body.items():
            if key not in _ENTRY_KEYS:
                close = difflib.get_close_matches(str(key), sorted(_ENTRY_KEYS), n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(sorted(_ENTRY_KEYS))}"
                raise _fail(origin, label, str(key), f"is unknown; {hint}")
            vals[key] = _check_value(origin, label, key, value)
        base = vals.pop("base", None)
        aliases = tuple(_norm(a) for a in vals.pop("aliases", ()))
        for n in (name, *aliases):
            if n in seen:
                raise _fail(origin, label, "aliases" if n != name else "name", f"'{n}' already names gpus.{seen[n]}")
            seen[n] = label
        entries.append(_Entry(origin, name, _norm(base) if base else None, aliases, tuple(vals.items())))
    return tuple(entries)


@lru_cache(maxsize=32)
def _parse_cached(text: str, origin: str) -> tuple[_Entry, ...]:
    """Parse once per distinct file content; entries are immutable, so sharing them is safe."""
    return _parse(text, origin)


@lru_cache(maxsize=1)
def _catalog() -> tuple[_Entry, ...]:
    text = resources.files(__name__).joinpath("catalog.yaml").read_text(encoding="utf-8")
    return _parse(text, _CATALOG_ORIGIN, builtin=True)


def _read_user(path: str | Path) -> tuple[_Entry, ...]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MoeplanError(f"{p}: hardware file not found") from None
    except UnicodeDecodeError:
        raise MoeplanError(f"{p}: not a UTF-8 text file") from None
    except OSError as exc:
        raise MoeplanError(f"{p}: cannot read ({exc.strerror or exc})") from None
    return _parse_cached(text, str(p))


# ---------------------------------------------------------------------------------------- resolving


def _find(entries: tuple[_Entry, ...], key: str, skip: _Entry | None = None) -> _Entry | None:
    for e in entries:
        if e is not skip and (e.name == key or key in e.aliases):
            return e
    return None


def _merged(entry: _Entry, user: tuple[_Entry, ...], chain: tuple[_Entry, ...] = ()) -> dict[str, Any]:
    """Field values of ``entry`` with its ``base`` chain applied.

    A user entry's base is looked up among the other entries of its file first, then in the catalog,
    so a user entry named ``h100`` may say ``base: h100``.
    """
    own = dict(entry.values)
    if entry.base is None:
        return own
    label, chain = entry.name, (*chain, entry)
    pool = user if entry.origin != _CATALOG_ORIGIN else ()
    parent = _find(pool, entry.base, skip=entry) or _find(_catalog(), entry.base, skip=entry)
    if parent is None:
        known = ", ".join(sorted({e.name for e in (*pool, *_catalog())} - {entry.name}))
        raise _fail(entry.origin, label, "base", f"'{entry.base}' is not a known GPU; known: {known}")
    if any(parent is c for c in chain):
        path = " -> ".join(c.name for c in (*chain[chain.index(parent):], parent))
        raise _fail(entry.origin, label, "base", f"'{entry.base}' makes a cycle ({path})")
    out = _merged(parent, user, chain)
    inherited = dict(out)
    if "peak_flops" in own:  # merge per precision
        own["peak_flops"] = tuple({**dict(out.get("peak_flops", ())), **dict(own["peak_flops"])}.items())
    out.update(own)
    # A new peak figure rescales the inherited measurement paired with it (same measured efficiency).
    for measured, (peak_key, _) in _PAIRS.items():
        if measured in own or inherited.get(measured) is None:
            continue
        old, new = _lookup(inherited, peak_key), _lookup(out, peak_key)
        if old is not None and new is not None and old != new:
            out[measured] = inherited[measured] * new / old
    srcs = tuple(inherited.get("sources", ()))
    out["sources"] = srcs + tuple(own.get("sources", ())) if "sources" in own else srcs
    return out


def _lookup(values: dict[str, Any], key: str) -> float | None:
    if key.startswith("peak_flops."):
        return dict(values.get("peak_flops", ())).get(key.split(".", 1)[1])
    return values.get(key)


def _build(entry: _Entry, user: tuple[_Entry, ...]) -> GPUSpec:
    vals = _merged(entry, user)
    label = entry.name
    for key in _REQUIRED:
        if key not in vals:
            hint = "" if entry.base else " (or set 'base: <gpu>' to inherit it)"
            raise _fail(entry.origin, label, key, f"is missing{hint}")
    peaks = dict(vals["peak_flops"])
    if "bf16" not in peaks:
        raise _fail(entry.origin, label, "peak_flops.bf16", "is missing (every GPU needs a bf16 rate)")
    for measured, (peak_key, may_exceed) in _PAIRS.items():
        got, peak = vals.get(measured), _lookup(vals, peak_key)
        if got is None:
            continue
        if peak is None:
            raise _fail(entry.origin, label, measured, f"is set but {peak_key} is not")
        if not may_exceed and got > peak * 1.0001:
            raise _fail(entry.origin, label, measured, f"= {got:.4g} exceeds the peak {peak_key} = {peak:.4g}")
    if entry.origin == _CATALOG_ORIGIN:
        sources = tuple(vals.get("sources", ()))
    else:
        sources = tuple(vals.get("sources", ())) + (f"user hardware file {entry.origin}",)
    kwargs = {k: vals.get(k) for k in _SPEC_FIELDS if k not in ("name", "sources", "peak_flops")}
    return GPUSpec(name=entry.name, sources=sources, peak_flops=peaks, **kwargs)


# ------------------------------------------------------------------------------------------- public


def hardware_names(user_file: str | Path | None = None) -> list[str]:
    """Catalog GPU names in catalog order (H100 ... GB300), then the new names in ``user_file``."""
    names = [e.name for e in _catalog()]
    if user_file is not None:
        names += [e.name for e in _read_user(user_file) if e.name not in names]
    return names


def load_user_hardware(path: str | Path) -> dict[str, GPUSpec]:
    """All GPUs defined in a user hardware YAML file, by (lower-case) name."""
    user = _read_user(path)
    return {e.name: _build(e, user) for e in user}


def load_gpu(name: str, user_file: str | Path | None = None) -> GPUSpec:
    """A GPU by catalog name or alias (case-insensitive); entries in ``user_file`` take precedence."""
    key = _norm(name)
    user = _read_user(user_file) if user_file is not None else ()
    entry = _find(user, key) if key else None
    if entry is not None:
        return _build(entry, user)
    entry = _find(_catalog(), key) if key else None
    if entry is not None:
        return _build(entry, ())
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
                "host_link": g.host_link,
                "host_link_gb_s": round(g.host_link_bw_bytes_per_s / 1e9, 1),
                "host_mem_gib": round(g.host_mem_bytes / 2**30, 1),
            }
        )
    return rows
