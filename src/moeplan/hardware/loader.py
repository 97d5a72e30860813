"""Reading the built-in catalog and user files, and resolving entries (``base`` chains, measured
figures rescaled with their peaks) into :class:`GPUSpec` records."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from moeplan.base.errors import MoeplanError
from moeplan.hardware.schema import PAIRS, PER_CLOCK, REQUIRED, SPEC_FIELDS, Entry, field_error, parse_entries
from moeplan.hardware.spec import GPUSpec

_CATALOG_ORIGIN = "moeplan/hardware/catalog.yaml"


@lru_cache(maxsize=32)
def _parse_cached(text: str, origin: str) -> tuple[Entry, ...]:
    """Parse once per distinct file content; entries are immutable, so sharing them is safe."""
    return parse_entries(text, origin)


@lru_cache(maxsize=1)
def catalog_entries() -> tuple[Entry, ...]:
    text = resources.files("moeplan.hardware").joinpath("catalog.yaml").read_text(encoding="utf-8")
    return parse_entries(text, _CATALOG_ORIGIN, builtin=True)


def read_user_file(path: str | Path) -> tuple[Entry, ...]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MoeplanError(f"{p}: hardware file not found") from None
    except UnicodeDecodeError:
        raise MoeplanError(f"{p}: not a UTF-8 text file") from None
    except OSError as exc:
        raise MoeplanError(f"{p}: cannot read ({exc.strerror or exc})") from None
    entries = _parse_cached(text, str(p))
    _no_catalog_aliases(entries)
    return entries


def _no_catalog_aliases(user: tuple[Entry, ...]) -> None:
    """A user entry replaces a catalog GPU only under that GPU's own name (``gpus.h100: {base: h100, ...}``): an
    alias naming another catalog GPU would hide it (``--gpu b200`` silently costing the user's entry, and the
    catalog's row gone from ``moeplan hardware``), so it is refused, as two entries of one file naming one GPU are."""
    for entry in user:
        for alias in entry.aliases:
            hit = find_entry(catalog_entries(), alias)
            if hit is not None and hit.name != entry.name:
                raise field_error(entry.origin, entry.name, "aliases",
                                  f"'{alias}' names the catalog GPU {hit.name}; an entry replaces a catalog GPU only "
                                  f"under its name (gpus.{hit.name})")


# ---------------------------------------------------------------------------------------- resolving


def find_entry(entries: tuple[Entry, ...], key: str, skip: Entry | None = None) -> Entry | None:
    for e in entries:
        if e is not skip and (e.name == key or key in e.aliases):
            return e
    return None


def _merged(entry: Entry, user: tuple[Entry, ...], chain: tuple[Entry, ...] = ()) -> dict[str, Any]:
    """Field values of ``entry`` with its ``base`` chain applied.

    A user entry's base is looked up among the other entries of its file first, then in the catalog,
    so a user entry named ``h100`` may say ``base: h100``.
    """
    own = dict(entry.values)
    if entry.base is None:
        return own
    label, chain = entry.name, (*chain, entry)
    pool = user if entry.origin != _CATALOG_ORIGIN else ()
    parent = find_entry(pool, entry.base, skip=entry) or find_entry(catalog_entries(), entry.base, skip=entry)
    if parent is None:
        known = ", ".join(sorted({e.name for e in (*pool, *catalog_entries())} - {entry.name}))
        raise field_error(entry.origin, label, "base", f"'{entry.base}' is not a known GPU; known: {known}")
    if any(parent is c for c in chain):
        path = " -> ".join(c.name for c in (*chain[chain.index(parent):], parent))
        raise field_error(entry.origin, label, "base", f"'{entry.base}' makes a cycle ({path})")
    out = _merged(parent, user, chain)
    inherited = dict(out)
    if "peak_flops" in own:  # merge per precision
        own["peak_flops"] = tuple({**dict(out.get("peak_flops", ())), **dict(own["peak_flops"])}.items())
    out.update(own)
    # A new peak figure rescales the inherited measurement paired with it (same measured efficiency).
    for measured, (peak_key, _) in PAIRS.items():
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


def _architecture_per_clock(compute_capability: float) -> dict[str, Any]:
    """The per-clock-per-SM rates (PER_CLOCK) of the catalogued GPU with this compute capability: they belong to the
    SM architecture, not the product (every catalogued GPU of one compute capability states the same), so an entry
    that gives its compute capability and not the rates reads its architecture's. Empty where none is catalogued."""
    for cat in catalog_entries():
        vals = _merged(cat, ())
        if vals.get("compute_capability") == compute_capability and all(k in vals for k in PER_CLOCK):
            return {k: vals[k] for k in PER_CLOCK}
    return {}


def build_spec(entry: Entry, user: tuple[Entry, ...]) -> GPUSpec:
    vals = _merged(entry, user)
    own = dict(entry.values)
    if "compute_capability" in vals and not all(k in own for k in PER_CLOCK) and (
            "compute_capability" in own or not all(k in vals for k in PER_CLOCK)):
        # the architecture's rates where the entry states its own compute capability (a base of another
        # architecture does not lend its SM) or inherits none; rates the entry itself gives win
        vals = {**vals, **_architecture_per_clock(vals["compute_capability"]),
                **{k: own[k] for k in PER_CLOCK if k in own}}
    label = entry.name
    for key in REQUIRED:
        if key not in vals:
            hint = "" if entry.base else " (or set 'base: <gpu>' to inherit it)"
            raise field_error(entry.origin, label, key, f"is missing{hint}")
    peaks = dict(vals["peak_flops"])
    if "bf16" not in peaks:
        raise field_error(entry.origin, label, "peak_flops.bf16", "is missing (every GPU needs a bf16 rate)")
    for measured, (peak_key, may_exceed) in PAIRS.items():
        got, peak = vals.get(measured), _lookup(vals, peak_key)
        if got is None:
            continue
        if peak is None:
            raise field_error(entry.origin, label, measured, f"is set but {peak_key} is not")
        if not may_exceed and got > peak * 1.0001:
            raise field_error(entry.origin, label, measured, f"= {got:.4g} exceeds the peak {peak_key} = {peak:.4g}")
    if entry.origin == _CATALOG_ORIGIN:
        sources = tuple(vals.get("sources", ()))
    else:
        sources = tuple(vals.get("sources", ())) + (f"user hardware file {entry.origin}",)
    kwargs = {k: vals.get(k) for k in SPEC_FIELDS if k not in ("name", "sources", "peak_flops")}
    user_file = None if entry.origin == _CATALOG_ORIGIN else str(Path(entry.origin).resolve())
    return GPUSpec(name=entry.name, sources=sources, peak_flops=peaks, hardware_file=user_file, **kwargs)
