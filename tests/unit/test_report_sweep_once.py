"""`moeplan report --sweep` plans its own length once: the report's search is that length's sweep row (it was
searched a second time inside the sweep, with the same settings)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from moeplan import api
from moeplan.cli import main


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Plan searches by sequence length (every search the CLI and the API make goes through api.search_plans)."""
    seen: Counter = Counter()
    real = api.search_plans

    def counted(model: Any, **kwargs: Any) -> Any:
        seen[kwargs["seq_len"]] += 1
        return real(model, **kwargs)

    monkeypatch.setattr(api, "search_plans", counted)
    return seen


@pytest.mark.parametrize("flags", [[], ["--precision", "fp8-cs", "--fsdp", "off", "--reserve-gib", "4"]])
def test_report_sweep_plans_each_length_once(flags: list[str], searches: Counter, tmp_path: Path, capsys: Any) -> None:
    """The report's own question (its knobs too) is the sweep's at that length: one search, not two."""
    html = tmp_path / "r.html"
    argv = ["report", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4k", "--gbs", "64",
            "--sweep", "4k,8k", "--html", str(html), "--json", *flags]
    assert main(argv) == 0
    assert searches == Counter({4096: 1, 8192: 1})
    out = json.loads(capsys.readouterr().out)
    row = next(r for r in out["sweep"] if r["seq_len"] == 4096)
    assert row["plan"] == {**out["plans"][0], "rank": 1}  # the report's plan 1, as the sweep row shows it
    assert all(r["routing"] == "forced" for r in out["sweep"])
    assert "force-balanced routing" in html.read_text()  # the page says the routing it assumed


def test_a_sweep_without_the_reports_length_searches_every_length(searches: Counter, tmp_path: Path) -> None:
    argv = ["report", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4k", "--gbs", "64",
            "--sweep", "8k", "--html", str(tmp_path / "r.html")]
    assert main(argv) == 0
    assert searches == Counter({4096: 1, 8192: 1})


def test_sweep_points_reuse_only_a_search_of_the_same_question() -> None:
    """A search made at another GBS (the same length) is no row of this sweep: that length is searched."""
    kw = dict(gpu="h100", gpus=16)
    found = api.search_plans("qwen3-30b-a3b", seq_len=4096, gbs=32, top=1, **kw)
    points = api.sweep_points("qwen3-30b-a3b", seq_lens=[4096], gbs_tokens=64 * 4096, planned=found, **kw)
    assert points[0].gbs == 64 and points[0].plan is not found.best
    same = api.search_plans("qwen3-30b-a3b", seq_len=4096, gbs=64, top=1, **kw)
    points = api.sweep_points("qwen3-30b-a3b", seq_lens=[4096], gbs_tokens=64 * 4096, planned=same, **kw)
    assert points[0].plan is same.best


@pytest.mark.parametrize("other", [
    dict(gpus=32), dict(precision="fp8-cs"), dict(routing="natural"), dict(reserve_gib=4.0),
    dict(mcore_version="0.13"), dict(fsdp="off"), dict(cuda_graphs=False), dict(fixed={"tp": 2}),
    dict(gpu="b200"), dict(optimizer="muon"),
])
def test_sweep_points_reuse_no_search_of_another_question(other: dict[str, Any]) -> None:
    """Same length and GBS is not the same question: a search whose model, system or any knob differs from the
    sweep's (one setting changed at a time) is not taken for that length's row; the length is searched."""
    kw = dict(gpu="h100", gpus=16)
    found = api.search_plans("qwen3-30b-a3b", seq_len=4096, gbs=64, top=1, **(kw | other))
    points = api.sweep_points("qwen3-30b-a3b", seq_lens=[4096], gbs_tokens=64 * 4096, planned=found, **kw)
    assert points[0].plan is not found.best
    alone = api.sweep_points("qwen3-30b-a3b", seq_lens=[4096], gbs_tokens=64 * 4096, **kw)[0]
    assert points[0].plan is not None and points[0].plan.config == alone.plan.config
