"""Argument checks at the Python API's boundary (moeplan.api, moeplan.lint.checker.check): a wrong type or value is a
one-line :class:`MoeplanError` naming the argument, not a TypeError from deep inside. The CLI's parsers already
refuse the same values (exit 2)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from moeplan.base.errors import MoeplanError
from moeplan.base.limits import run_problem

T = TypeVar("T")


def _int_problem(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int)


def token_count(text: str) -> int:
    """A token count as the CLI and the web page take it: '128k' -> 131072, '4096' -> 4096, '1m' -> 1048576 (powers
    of two, as sequence lengths are); a MoeplanError for anything else."""
    t = str(text).strip().lower()
    scale = 1
    if t.endswith("k"):
        scale, t = 1024, t[:-1]
    elif t.endswith("m"):
        scale, t = 1024 * 1024, t[:-1]
    try:
        value = int(float(t) * scale)
    except (ValueError, OverflowError):
        raise MoeplanError(f"not a token count: '{text}' (use e.g. 4096, 32k, 128k)") from None
    if value <= 0:
        raise MoeplanError(f"must be positive: '{text}'")
    return value


def count(name: str, value: Any, *, minimum: int = 1, bound: str | None = None) -> int:
    """``value`` as a count: an int (not a bool, not a float or a string) >= ``minimum`` and within the bound of the
    run size ``bound`` (default ``name``; moeplan.base.limits: far past any real run)."""
    if _int_problem(value):
        hint = " (e.g. 131072, not '128k')" if isinstance(value, str) and "seq" in name else ""
        raise MoeplanError(f"{name} must be an int{hint}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        what = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise MoeplanError(f"{name} must be {what}, got {value}")
    problem = run_problem(bound or name, value)
    if problem:
        raise MoeplanError(f"{name} {problem}")
    return value


def counts(**values: Any) -> None:
    """:func:`count` of each keyword."""
    for name, value in values.items():
        count(name, value)


def path_like(name: str, value: Any) -> None:
    """``value`` must be a str or an os.PathLike (a file or catalog name)."""
    if not isinstance(value, (str, os.PathLike)):
        raise MoeplanError(f"{name} must be a str or a path, got {value!r} ({type(value).__name__})")


def optional_path(name: str, value: Any) -> None:
    """:func:`path_like`, or None (not given)."""
    if value is not None:
        path_like(name, value)


def text(name: str, value: Any, *, hint: str = "") -> str:
    """``value`` must be a non-empty str (a name: a GPU, a strategy); ``hint`` says what else is taken."""
    if not isinstance(value, str) or not value.strip():
        raise MoeplanError(f"{name} must be a non-empty str{hint}, got {value!r} ({type(value).__name__})")
    return value


def optional_text(name: str, value: Any, *, hint: str = "") -> str | None:
    """``value`` must be None (not given) or a str."""
    if value is not None and not isinstance(value, str):
        raise MoeplanError(f"{name} must be a str or None{hint}, got {value!r} ({type(value).__name__})")
    return value


def _span(minimum: float | None, maximum: float | None, below: float | None) -> str:
    """The range a number must lie in, as a message says it: ' in [0, 1]', ' in [0, 1)', ' >= 1', or nothing."""
    top = f"{maximum:g}]" if maximum is not None else f"{below:g})" if below is not None else None
    if minimum is not None and top is not None:
        return f" in [{minimum:g}, {top}"
    if top is not None:
        return f" <= {maximum:g}" if maximum is not None else f" < {below:g}"
    return f" >= {minimum:g}" if minimum is not None else ""


def number(name: str, value: Any, *, minimum: float | None = None, maximum: float | None = None,
           below: float | None = None, hint: str = "") -> float:
    """``value`` as a finite real number (an int or a float, not a bool or a string) in [minimum, maximum], and
    under ``below``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MoeplanError(f"{name} must be a number{hint}, got {value!r} ({type(value).__name__})")
    inside = ((minimum is None or value >= minimum) and (maximum is None or value <= maximum)
              and (below is None or value < below))
    if not (math.isfinite(value) and inside):  # NaN fails every comparison: refused here too
        raise MoeplanError(f"{name} must be a finite number{_span(minimum, maximum, below)}, got {value!r}")
    return float(value)


def optional_number(name: str, value: Any, **limits: Any) -> float | None:
    """:func:`number`, or None (not given)."""
    return None if value is None else number(name, value, **limits)


def flag(name: str, value: Any, *, optional: bool = False, hint: str = "") -> bool | None:
    """``value`` must be a bool (True or False; None too where ``optional``: the default decides)."""
    if optional and value is None:
        return None
    if not isinstance(value, bool):
        what = "True, False or None" if optional else "True or False"
        raise MoeplanError(f"{name} must be {what}{hint}, got {value!r} ({type(value).__name__})")
    return value


def flags(optional: bool = False, **values: Any) -> None:
    """:func:`flag` of each keyword: a string such as 'false' would otherwise read as True."""
    for name, value in values.items():
        flag(name, value, optional=optional)


def headroom(value: Any) -> float:
    """The share of GPU memory a plan or a check leaves free: a number in [0, 1) (1 would leave nothing to use)."""
    return number("headroom", value, minimum=0, below=1, hint=" (the share of GPU memory left free, in [0, 1))")


def imbalance_and_reserve(moe_imbalance: Any, reserve_gib: Any, *, optional: bool = False) -> None:
    """The routing imbalance and memory reserve that estimate, plan and check all take, as numbers (None too where
    ``optional``: RunConfig's defaults); RunConfig checks their ranges."""
    for name, value, hint in (("moe_imbalance", moe_imbalance, " (the busiest expert's load over the mean, >= 1)"),
                              ("reserve_gib", reserve_gib, " (GiB per GPU, >= 0)")):
        if not (optional and value is None):
            number(name, value, hint=hint)


def calibration(value: Any, kind: type[T]) -> T:
    """``value`` must be timing constants, an instance of ``kind`` (moeplan.engine.timing.Calibration, passed in: this module
    sits below the engine, tests/contract/test_imports.py). A profile file is not read here: the CLI's --calibration
    loads it with moeplan.calibrate.fit.load_profile (its constants, reserve and GPU check together)."""
    if isinstance(value, kind):
        return value
    if isinstance(value, (str, os.PathLike)):
        raise MoeplanError(f"cal must be a {kind.__name__}, not a path ({os.fspath(value)!r}): load a profile with "
                           "moeplan.calibrate.fit.load_profile(path).calibration")
    raise MoeplanError(f"cal must be a {kind.__name__} (e.g. moeplan.calibrate.fit.load_profile(path).calibration), got "
                       f"{value!r} ({type(value).__name__})")


def gpu_name(value: Any, *, optional: bool = False, hint: str = "") -> str | None:
    """``value`` must name a GPU (a non-empty str; None too where ``optional``: a file or the default says which)."""
    if optional and value is None:
        return None
    return text("gpu", value, hint=f" (a name from `moeplan hardware`, e.g. 'h100'){hint}")


def words(name: str, value: Any, *, hint: str = "") -> None:
    """``value`` must be None, a str ('a,b') or a list (tuple, set) of strs: a set of labels, e.g. CUDA graph
    scopes."""
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, (list, tuple, set, frozenset)) or not all(isinstance(v, str) for v in value):
        raise MoeplanError(f"{name} must be a str or a list of str{hint}, got {value!r} ({type(value).__name__})")


def mapping(name: str, value: Any, *, hint: str = "") -> Mapping[str, Any]:
    """``value`` must be a mapping with str keys (None: empty), e.g. ``{'tp': 2}``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise MoeplanError(f"{name} must be a mapping of names to values{hint}, got {value!r} "
                           f"({type(value).__name__})")
    return value


def count_list(name: str, values: Any, *, nonempty: bool = False, bound: str | None = None) -> list[int]:
    """An iterable of positive ints (not a string, not a single int) as a list; with ``nonempty``, at least one."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise MoeplanError(f"{name} must be a list of ints, got {values!r} ({type(values).__name__})")
    out = list(values)
    if nonempty and not out:
        raise MoeplanError(f"{name} must hold at least one int, got {values!r}")
    for v in out:
        count(f"each of {name}", v, bound=bound)
    return out


def choice(name: str, value: Any, allowed: Iterable[str]) -> str:
    """``value`` must be one of ``allowed`` (the API's own words, e.g. 'auto' beside what a RunConfig takes)."""
    allowed = tuple(allowed)
    if not isinstance(value, str) or value not in allowed:
        raise MoeplanError(f"{name} {value!r} unknown; choose one of {', '.join(allowed)}")
    return value


__all__ = ["calibration", "choice", "count", "count_list", "counts", "flag", "flags", "gpu_name", "headroom",
           "imbalance_and_reserve", "mapping", "number", "optional_number", "optional_path", "optional_text",
           "path_like", "text", "words"]
