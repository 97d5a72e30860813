"""moeplan.lint.rules.fastest_fit: the one "fastest alternative that fits" choice every fix-proposing check asks."""

from __future__ import annotations

from types import SimpleNamespace

from moeplan.lint.rules import fastest_fit


class _Ev:
    """An evaluator over named options: (tokens/s/GPU, fits) or None for an invalid layout."""

    def __init__(self, table):
        self.table = table
        self.asked = []

    def __call__(self, name):
        self.asked.append(name)
        row = self.table[name]
        return None if row is None else SimpleNamespace(time=SimpleNamespace(tokens_per_s_per_gpu=row[0]), fits=row[1])

    def fits(self, est):
        return est is not None and est.fits


def test_the_fastest_that_fits_wins_and_the_first_wins_a_tie():
    ev = _Ev({"a": (100, True), "b": (300, False), "c": (200, True), "d": None, "e": (200, True)})
    best = fastest_fit(ev, iter("abcde"))
    assert best is not None and best[0] == "c" and best[1].time.tokens_per_s_per_gpu == 200
    assert ev.asked == list("abcde")  # every option estimated once, in order (a generator is fine)


def test_none_fits():
    assert fastest_fit(_Ev({"a": (100, False), "b": None}), ["a", "b"]) is None
    assert fastest_fit(_Ev({}), []) is None
