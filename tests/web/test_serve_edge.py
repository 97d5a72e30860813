"""The page at the edges the CLI and the API share: the no-fit line (one function words it), the run-size bounds
(moeplan.base.limits, the CLI's and the API's messages) and the routing select (moeplan.base.routing)."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest

from moeplan.cli import main

NO_FIT = "model=deepseek-v3&gpu=h100&gpus=8&seq_len=128k&gbs=8"
NO_FIT_ARGV = ["plan", "deepseek-v3", "--gpu", "h100", "--gpus", "8", "--seq-len", "128k", "--gbs", "8"]


def _no_fit_line(html: str) -> str:
    return unescape(re.search(r'<p class="bad" id="no-fit">(.*?)</p>', html, re.S).group(1))


def test_the_no_fit_line_is_the_clis(client: Any, capsys: Any) -> None:
    """The page worded its no-fit line apart from the CLI and left out what the CLI adds (here: the host memory
    that held the optimizer offload down); one function words both."""
    r = client.get("/plan?" + NO_FIT)
    assert r.status_code == 200
    assert main(NO_FIT_ARGV) == 1
    cli_line = capsys.readouterr().err.strip()
    assert "held to" in cli_line and _no_fit_line(r.text) == cli_line


def _field_error(html: str, field: str) -> str:
    span = re.search(rf'<span class="err" id="err-{field}"[^>]*>(.*?)</span>', html, re.S)
    return unescape(span.group(1)).strip() if span else ""


def test_counts_are_bounded_as_the_cli_bounds_them(client: Any, capsys: Any) -> None:
    """The page capped counts at 2^40 (a form's gpus 2,000,000 went to the planner, which the CLI refuses as a
    typo) and sweeps at 12 lengths: it now takes moeplan.base.limits' bounds, with the CLI's words."""
    from moeplan.base.limits import run_problem, sweep_lengths_problem

    r = client.get("/plan?model=qwen3-30b-a3b&gpu=h100&gpus=2000000&seq_len=32k&gbs=64")
    assert r.status_code == 422
    said = run_problem("gpus", 2_000_000)
    assert said and _field_error(r.text, "gpus") == f"gpus {said}"
    with pytest.raises(SystemExit) as exc:
        main(["plan", "qwen3-30b-a3b", "--gpus", "2000000", "--seq-len", "32k", "--gbs", "64"])
    assert exc.value.code == 2
    assert said in capsys.readouterr().err  # the CLI's words
    r = client.get("/plan?model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=256m&gbs=64")
    assert r.status_code == 422 and _field_error(r.text, "seq_len") == f"seq_len {run_problem('seq_len', 2**28)}"
    r = client.get("/plan?model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=32k&gbs=300000")
    assert r.status_code == 422 and _field_error(r.text, "gbs") == f"gbs {run_problem('gbs', 300000)}"
    many = ",".join(str(k) for k in range(1, 66))  # 65 lengths within the 200 characters of a field
    r = client.get(f"/sweep?model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len={many}&gbs_tokens=4m")
    assert r.status_code == 422 and _field_error(r.text, "seq_len") == f"seq_len: {sweep_lengths_problem(65)}"
    r = client.get("/sweep?model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=32k&gbs_tokens=2000m")
    assert r.status_code == 422
    assert _field_error(r.text, "gbs_tokens") == f"gbs_tokens {run_problem('gbs_tokens', 2000 * 2**20)}"


Q = "model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=32k&gbs=64"
SWEEP_Q = "model=qwen3-30b-a3b&gpu=h100&gpus=16&seq_len=16k,32k&gbs_tokens=2m"


def test_the_forms_have_a_routing_select(client: Any) -> None:
    for view, q in (("plan", Q), ("sweep", SWEEP_Q)):
        html = client.get(f"/{view}?{q}").text
        select = re.search(r'<select id="f-routing" name="routing">(.*?)</select>', html, re.S)
        assert select, view
        assert re.findall(r'<option value="(\w+)"', select.group(1)) == ["forced", "natural"]
        assert '<option value="forced" selected>' in select.group(1)  # the default, as the CLI's


def test_the_plan_page_plans_and_says_the_routing_asked(client: Any) -> None:
    from moeplan import api
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION as CAL

    r = client.get("/plan?" + Q + "&routing=natural")
    assert r.status_code == 200
    want = api.plan("qwen3-30b-a3b", gpu="h100", gpus=64, seq_len=32768, gbs=64, routing="natural")
    headline = unescape(re.search(r'<p id="headline">(.*?)</p>', r.text, re.S).group(1))
    assert f"natural routing, routing imbalance {CAL.natural_routing_imbalance:.4g}" in re.sub(r"<[^>]+>", "", headline)
    assert f"{want['plans'][0]['tokens_per_s_per_gpu']:,.0f}" in r.text
    assert '<option value="natural" selected>' in r.text
    forced = client.get("/plan?" + Q)
    assert "force-balanced routing" in forced.text and "natural routing, " not in forced.text


def test_the_sweep_page_says_the_routing(client: Any) -> None:
    r = client.get("/sweep?" + SWEEP_Q + "&routing=natural")
    assert r.status_code == 200
    assert re.search(r'<p class="note" id="routing">Assumes natural routing, routing imbalance [0-9.]+ ', r.text)


def test_an_unknown_routing_is_refused_beside_its_field(client: Any) -> None:
    r = client.get("/plan?" + Q + "&routing=balanced")
    assert r.status_code == 422
    assert _field_error(r.text, "routing") == "routing 'balanced' unknown; choose one of forced, natural"


def test_the_check_page_says_the_routing_of_its_file(client: Any, capsys: Any) -> None:
    assert main(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4k", "--gbs", "64",
                 "--routing", "natural", "--format", "yaml"]) == 0
    r = client.post("/check", data={"text": capsys.readouterr().out})
    assert r.status_code == 200
    assert re.search(r'<p class="note" id="routing">Assumes natural routing, routing imbalance [0-9.]+ ', r.text)
