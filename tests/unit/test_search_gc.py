"""The plan search pauses Python's cyclic garbage collector while it runs (moeplan.engine.timeline.gc_paused, the one
helper that does) and leaves it as it found it: on after a search if it was on, off if the caller had turned it off."""

from __future__ import annotations

import gc

from moeplan.hardware import load_gpu
from moeplan.models import load_model
from moeplan.plan.planner import search


class _Watch:
    """A progress object: records whether the collector is on at each layout the search visits."""

    def __init__(self) -> None:
        self.seen: list[bool] = []

    def start(self, n: int) -> None:
        self.seen.clear()

    def advance(self) -> None:
        self.seen.append(gc.isenabled())


def test_search_pauses_gc_and_restores_it():
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    was = gc.isenabled()
    try:
        for state in (True, False):
            (gc.enable if state else gc.disable)()
            watch = _Watch()
            result = search(spec, gpu, 64, 32768, 128, progress=watch)
            assert result.plans and watch.seen
            assert not any(watch.seen)  # paused at every layout
            assert gc.isenabled() is state
    finally:
        (gc.enable if was else gc.disable)()


def test_search_that_raises_still_restores_gc():
    """A search that ends in an error (nothing valid on these GPUs) must not leave the caller's process with
    the collector off: API users catch MoeplanError and go on."""
    import pytest

    from moeplan.base.errors import MoeplanError

    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    was = gc.isenabled()
    gc.enable()
    try:
        with pytest.raises(MoeplanError):
            search(spec, gpu, 37, 32768, 128)  # 37 GPUs (a prime above PP 32): DP 37 does not divide GBS 128
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_one_helper_pauses_the_collector():
    """moeplan.engine.timeline.gc_paused is the only code that turns the collector off and back on: the planner had its own
    copy (_without_gc_pauses); the search, the timeline and the plots use the one helper."""
    import ast
    from pathlib import Path

    from moeplan.plan import planner
    from moeplan.engine import timeline

    src = Path(planner.__file__).resolve().parents[1]
    owners = sorted(str(p.relative_to(src)) for p in src.rglob("*.py")
                    if any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "gc"
                           and n.attr == "disable" for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))))
    assert owners == ["engine/timeline.py"]
    assert planner.gc_paused is timeline.gc_paused
