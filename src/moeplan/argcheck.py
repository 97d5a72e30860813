"""Argument checks at the Python API's boundary (moeplan.api, moeplan.checker.check): a wrong type or value is a
one-line :class:`MoeplanError` naming the argument, not a TypeError from deep inside. The CLI's parsers already
refuse the same values (exit 2)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from moeplan.errors import MoeplanError


def _int_problem(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int)


def count(name: str, value: Any, *, minimum: int = 1) -> int:
    """``value`` as a count: an int (not a bool, not a float or a string) >= ``minimum``."""
    if _int_problem(value):
        hint = " (e.g. 131072, not '128k')" if isinstance(value, str) and "seq" in name else ""
        raise MoeplanError(f"{name} must be an int{hint}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        what = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise MoeplanError(f"{name} must be {what}, got {value}")
    return value


def counts(**values: Any) -> None:
    """:func:`count` of each keyword."""
    for name, value in values.items():
        count(name, value)


def path_like(name: str, value: Any) -> None:
    """``value`` must be a str or an os.PathLike (a file or catalog name)."""
    if not isinstance(value, (str, os.PathLike)):
        raise MoeplanError(f"{name} must be a str or a path, got {value!r} ({type(value).__name__})")


def count_list(name: str, values: Any) -> list[int]:
    """An iterable of positive ints (not a string, not a single int) as a list."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise MoeplanError(f"{name} must be a list of ints, got {values!r} ({type(values).__name__})")
    out = list(values)
    for v in out:
        count(f"each of {name}", v)
    return out


def choice(name: str, value: Any, allowed: Iterable[str]) -> str:
    """``value`` must be one of ``allowed`` (the API's own words, e.g. 'auto' beside what a RunConfig takes)."""
    allowed = tuple(allowed)
    if not isinstance(value, str) or value not in allowed:
        raise MoeplanError(f"{name} {value!r} unknown; choose one of {', '.join(allowed)}")
    return value


__all__ = ["choice", "count", "count_list", "counts", "path_like"]
