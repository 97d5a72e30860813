"""`moeplan serve` under Starlette's test client: every view with good and bad input, and the status codes.
The page's numbers are the API's (moeplan.api.plan / sweep, moeplan.checker.check, moeplan.explain)."""

from __future__ import annotations

import gzip
import logging
import json
import re
import shlex
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from moeplan import api
from moeplan.report import layout_label

from ..conftest import MODELS_DIR
from .conftest import need

Q = "model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=32k&gbs=64"
KW = dict(gpu="h100", gpus=64, seq_len=32768, gbs=64)
HX = {"HX-Request": "true"}


@pytest.fixture(scope="module")
def want() -> dict[str, Any]:
    return api.plan("qwen3-30b-a3b", **KW)


def _text(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", " ", html))


def _first_row(html: str, tid: str) -> list[str]:
    body = html[html.index(f'<table id="{tid}">'):]
    row = re.search(r"<tbody>\s*<tr[^>]*>(.*?)</tr>", body, re.S).group(1)
    return [unescape(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def test_home_redirects_to_an_example_plan(client: Any) -> None:
    r = client.get("/", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/plan?model=")
    assert client.get("/plan", follow_redirects=False).status_code == 303


def test_plan_page_shows_the_apis_plans(client: Any, want: dict[str, Any]) -> None:
    r = client.get("/plan?" + Q)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    assert '<script src="/static/htmx.min.js">' in html and "https://" not in html.split("<body>")[0]
    for i, p in enumerate(want["plans"]):
        assert f"{p['tokens_per_s_per_gpu']:,.0f}" in html
    row = _first_row(html, "plan-table")
    p1 = want["plans"][0]
    assert row[0] == f"1{'=' if p1['tie'] else ''}" and row[1] == layout_label(p1)
    assert f"{p1['tflops_per_gpu']:.1f}" in row
    assert unescape(re.search(r'<pre id="export-overrides"[^>]*>(.*?)</pre>', html, re.S).group(1)) == \
        "\n".join([p1["provenance"], *p1["overrides"]]) + "\n"
    for r_ in p1["rationale"]:
        assert unescape(r_["text"]).split(":")[0] in _text(html)
    # the table is the report's (one template, the same rows)
    from moeplan.report import plan_table

    assert str(plan_table(want["plans"], bands=True)) in html
    lo, hi = p1["tflops_range"]
    assert f"{lo:,.0f}-{hi:,.0f}" in row  # the band, as `moeplan plan` prints it
    # the form keeps the question; the lazy figures and downloads name it
    assert 'value="qwen3-30b-a3b"' in html and "/plan/figure/timeline?" in html and "/plan/download/trace?" in html


def test_plan_fragment_for_htmx(client: Any) -> None:
    r = client.get("/plan?" + Q, headers=HX)
    assert r.status_code == 200
    assert "<html" not in r.text and 'id="plan-table"' in r.text
    assert 'id="err-gpus" role="alert" hx-swap-oob="true"></span>' in r.text  # clears an old error


def test_plan_pins_and_selected_plan(client: Any) -> None:
    r = client.get("/plan?" + Q + "&tp=2&recompute=none&plan=2")
    assert r.status_code == 200
    want = api.plan("qwen3-30b-a3b", **KW, fixed={"tp": 2, "recompute": "none"})["plans"]
    assert all(p["parallel"]["tp"] == 2 for p in want)
    assert f"Plan 2: " in r.text and layout_label(want[1]) in r.text


@pytest.mark.parametrize("query, field, words", [
    ("model=nope&gpu=h100&gpus=64&seq_len=32k&gbs=64", "model", "unknown model 'nope'"),
    ("model=/etc/passwd&gpu=h100&gpus=64&seq_len=32k&gbs=64", "model", "not a catalog name"),
    ("model=qwen3-30b-a3b&gpu=h999&gpus=64&seq_len=32k&gbs=64", "gpu", "unknown GPU 'h999'"),
    ("model=qwen3-30b-a3b&gpu=h100&gpus=0&seq_len=32k&gbs=64", "gpus", "gpus must be a positive int, got 0"),
    ("model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=12q&gbs=64", "seq_len", "not a token count"),
    ("model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=32k", "gbs", "gbs is required"),
    ("model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=32k&gbs=64&precision=fp4", "precision", "precision 'fp4' unknown"),
    ("model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=32k&gbs=64&recompute=bogus", "recompute", "bogus unknown"),
    ("model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=32k&gbs=64&tp=3", "form", "no valid layout"),
    ("model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=32k&gbs=64&mcore_version=9.9", "mcore_version", "unknown"),
    ("model=upload:0123456789abcdef&gpu=h100&gpus=64&seq_len=32k&gbs=64", "model", "not on this server"),
    ("model=upload:../../etc&gpu=h100&gpus=64&seq_len=32k&gbs=64", "model", "not an uploaded file"),
    ("model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=32k&gbs=64&plan=9", "plan", "plan 9"),
])
def test_plan_bad_input_says_one_line_beside_its_field(client: Any, query: str, field: str, words: str) -> None:
    for headers in ({}, HX):
        r = client.get("/plan?" + query, headers=headers)
        assert r.status_code == 422, r.text[:300]
        span = re.search(rf'<span class="err" id="err-{field}"[^>]*>(.*?)</span>', r.text, re.S)
        assert span and words in unescape(span.group(1)), (field, r.text[:2000])
        assert "\n" not in unescape(span.group(1)).strip() and "Traceback" not in r.text


def test_plan_with_no_fit_answers_with_the_closest_run(client: Any) -> None:
    r = client.get("/plan?model=deepseek-v3&gpu=h100&gpus=8&seq_len=128k&gbs=8")
    assert r.status_code == 200
    want = api.plan("deepseek-v3", gpu="h100", gpus=8, seq_len=131072, gbs=8)
    assert not want["plans"]
    line = unescape(re.search(r'<p class="bad" id="no-fit">(.*?)</p>', r.text, re.S).group(1))
    assert line.startswith("moeplan: no layout fits in 8 x h100 memory at seq 131,072")
    assert f"{want['closest']['misses_by_gib']:.1f} GiB over the" in line


@pytest.mark.parametrize("name, fid", [("plans", "plans-memory-plot"), ("memory", "memory-plot"),
                                       ("time", "time-plot"), ("timeline", "timeline-plot")])
def test_plan_figures(client: Any, name: str, fid: str, want: dict[str, Any]) -> None:
    r = client.get(f"/plan/figure/{name}?{Q}&plan=1")
    assert r.status_code == 200 and f'id="{fid}"' in r.text and "<svg" in r.text
    if name == "memory":
        assert f"{want['plans'][0]['memory_gib']['total']:.2f}" in r.text


def test_figure_and_download_errors(client: Any) -> None:
    assert client.get(f"/plan/figure/nope?{Q}").status_code == 404
    assert client.get(f"/plan/download/nope?{Q}").status_code == 404
    r = client.get("/plan/figure/time?model=nope&gpus=1&seq_len=1k&gbs=1")
    assert r.status_code == 422 and r.text.startswith('<p class="error"')


def test_downloads_are_the_clis_exports(client: Any, want: dict[str, Any], tmp_path: Path) -> None:
    from moeplan.run.strategy import strategy_text

    p1 = want["plans"][0]
    r = client.get(f"/plan/download/overrides?{Q}")
    assert r.status_code == 200 and 'filename="overrides.txt"' in r.headers["content-disposition"]
    assert r.text == "\n".join([p1["provenance"], *p1["overrides"]]) + "\n"
    assert client.get(f"/plan/download/yaml?{Q}").text == p1["yaml"]
    mlm = client.get(f"/plan/download/megatron-lm?{Q}").text
    assert mlm == p1["provenance"] + "\n" + " ".join(shlex.quote(a) for a in p1["megatron_lm_args"]) + "\n"
    found = api.search_plans("qwen3-30b-a3b", **KW)
    assert client.get(f"/plan/download/strategy?{Q}").text == strategy_text(found.best.config)
    trace = json.loads(gzip.decompress(client.get(f"/plan/download/trace?{Q}").content))
    assert trace["traceEvents"]
    # the export checks clean with moeplan check (the same file the CLI writes)
    r = client.post("/check", data={"text": r.text})
    assert r.status_code == 200 and 'id="findings"' in r.text


def test_launch_downloads_are_the_clis_launch_commands(client: Any, capsys: Any) -> None:
    """With Megatron-Core 0.19 the page offers `plan --format bridge-launch|perf-launch` as downloads; with another
    version it offers neither and says why (the CLI's line)."""
    from moeplan.cli import main

    html = client.get(f"/plan?{Q}&mcore_version=0.19").text
    assert 'id="download-bridge-launch"' in html and 'id="download-perf-launch"' in html
    for kind in ("bridge-launch", "perf-launch"):
        r = client.get(f"/plan/download/{kind}?{Q}&mcore_version=0.19")
        assert r.status_code == 200 and f'filename="{kind}.sh"' in r.headers["content-disposition"]
        main(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--seq-len", "32k", "--gbs", "64",
              "--mcore-version", "0.19", "--format", kind])
        assert r.text == capsys.readouterr().out
    html = client.get(f"/plan?{Q}").text
    assert 'id="download-bridge-launch"' not in html and 'id="launch-why-not"' in html and "0.19" in html
    assert client.get(f"/plan/download/bridge-launch?{Q}").status_code == 422


def test_sweep_view(client: Any) -> None:
    r = client.get("/sweep?model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=16k,64k&gbs_tokens=4m")
    assert r.status_code == 200 and 'id="sweep-table"' in r.text and 'id="sweep-plot"' in r.text
    rows = api.sweep("qwen3-30b-a3b", gpu="h100", gpus=64, seq_lens=[16384, 65536], gbs_tokens=4 << 20)
    for row in rows:
        assert f"{row['tflops_per_gpu']:.1f}" in r.text
    assert client.get("/sweep", follow_redirects=False).status_code == 303
    bad = client.get("/sweep?model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=16k,16k&gbs_tokens=4m", headers=HX)
    assert bad.status_code == 422 and "a length appears twice" in unescape(bad.text)
    bad = client.get("/sweep?model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=16k,48k&gbs_tokens=1000000")
    assert bad.status_code == 422 and "not a whole number" in unescape(bad.text)


def test_check_view(client: Any, want: dict[str, Any], upload_dir: Path) -> None:
    from moeplan.lint import checker

    assert client.get("/check").status_code == 200
    text = "\n".join([want["plans"][0]["provenance"], *want["plans"][0]["overrides"]]).replace(
        "model.context_parallel_size=8", "model.context_parallel_size=3")
    r = client.post("/check", data={"text": text}, headers=HX)
    assert r.status_code == 200 and 'id="findings"' in r.text
    assert not list(upload_dir.glob("*.txt"))  # the pasted text's file is gone once checked
    # the same findings as moeplan check on the file
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write(text)
    result = checker.check(fh.name)
    Path(fh.name).unlink()
    for f in result.findings:
        assert f.rule in r.text
    # a memory error: its fix, as moeplan check prints it
    clean = "\n".join([want["plans"][0]["provenance"], *want["plans"][0]["overrides"]])
    mbs4 = re.sub(r"train.micro_batch_size=\d+", "train.micro_batch_size=4", clean)
    r4 = client.post("/check", data={"text": mbs4}, headers=HX)
    fixes = unescape(re.search(r'<pre id="fixes"[^>]*>(.*?)</pre>', r4.text, re.S).group(1))
    assert r4.status_code == 200 and fixes.startswith("# fix 1: memory") and "model.recompute_granularity=" in fixes
    # uploaded as a file: the same answer
    up = client.post("/check", files={"file": ("run.txt", text.encode(), "text/plain")}, headers=HX)
    assert up.status_code == 200 and all(f.rule in up.text for f in result.findings)


@pytest.mark.parametrize("data, words", [
    ({"text": ""}, "paste a Bridge YAML"),
    ({"text": "model.tensor_model_parallel_size=2\n"}, "which model it trains"),
    ({"text": "model.tensor_model_parallel_size=2\n", "model": "deepseek-v3"}, "GPU count"),
    ({"text": "# moeplan: model=/etc/passwd gpus=8\nmodel.tensor_model_parallel_size=2\n"}, "does not read"),
    ({"text": "# moeplan: model=deepseek-v3 gpus=8 hardware=/etc/x.yaml\nmodel.tensor_model_parallel_size=2\n"},
     "does not read"),
    ({"text": "x", "gpus": "-1"}, "gpus must be a positive int"),
])
def test_check_bad_input(client: Any, data: dict[str, str], words: str) -> None:
    r = client.post("/check", data=data, headers=HX)
    assert r.status_code == 422 and words in unescape(r.text), r.text[:1000]
    assert "/tmp" not in r.text  # no server path in the answer


def test_explain_views(client: Any) -> None:
    r = client.get("/explain?model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=16k,64k&gbs_tokens=4m")
    assert r.status_code == 200 and 'id="explain-table"' in r.text and 'id="reasons"' in r.text
    pts = api.sweep_points("qwen3-30b-a3b", gpu="h100", gpus=64, seq_lens=[16384, 65536], gbs_tokens=4 << 20)
    from moeplan.plan.explain import compare

    comp = compare(pts[0].estimate, pts[1].estimate)
    for reason in comp.reasons:
        assert unescape(reason.text) in unescape(r.text)
    bad = client.get("/explain?model=qwen3-30b-a3b&gpu=h100&gpus=64&seq_len=16k&gbs_tokens=4m", headers=HX)
    assert bad.status_code == 422 and "two lengths" in unescape(bad.text)
    a = client.get(f"/plan/download/overrides?{Q}").text
    b = a.replace("model.context_parallel_size=8", "model.context_parallel_size=4")
    r = client.post("/explain", data={"a_text": a, "b_text": b}, headers=HX)
    assert r.status_code == 200 and 'id="reasons"' in r.text
    r = client.post("/explain", data={"a_text": a}, headers=HX)
    assert r.status_code == 422 and "paste run B" in unescape(r.text)


def test_uploads(client: Any, upload_dir: Path) -> None:
    cfg = (MODELS_DIR / "mixtral-8x7b.json").read_bytes()
    r = client.post("/upload/model", files={"model_file": ("../../evil name.json", cfg, "application/json"),
                                            "hardware_file": ("", b"", "application/octet-stream")})
    assert r.status_code == 200 and r.headers.get("HX-Trigger-After-Settle") == "moeplan-replan"
    ref = re.search(r'value="(upload:[0-9a-f]{16})"', r.text).group(1)
    assert [p.name for p in upload_dir.iterdir() if p.suffix == ".json"] == [ref[7:] + ".json"]
    plan = client.get(f"/plan?model={ref}&gpu=h100&gpus=64&seq_len=4k&gbs=256")
    assert plan.status_code == 200 and 'id="plan-table"' in plan.text
    want = api.plan(str(upload_dir / (ref[7:] + ".json")), gpu="h100", gpus=64, seq_len=4096, gbs=256)["plans"][0]
    assert f"{want['tokens_per_s_per_gpu']:,.0f}" in plan.text
    bad = client.post("/upload/model", files={"file": ("config.json", b"{not json", "application/json")})
    assert bad.status_code == 422 and bad.text.startswith('<p class="error"') and str(upload_dir) not in bad.text
    assert len([p for p in upload_dir.iterdir() if p.suffix == ".json"]) == 1  # the bad one was not kept
    hw = b"gpus:\n  h100-200g:\n    base: h100\n    scaleout_bw_bytes_per_s: 25e9\n"
    r = client.post("/upload/hardware", files={"file": ("hw.yaml", hw, "application/yaml")})
    assert r.status_code == 200 and '<option value="h100-200g">' in r.text
    hw_ref = re.search(r'name="hardware" value="(upload:[0-9a-f]{16})"', r.text).group(1)
    plan = client.get(f"/plan?model=qwen3-30b-a3b&gpu=h100-200g&hardware={hw_ref}&gpus=64&seq_len=32k&gbs=64")
    want = api.plan("qwen3-30b-a3b", gpu="h100-200g", hardware_file=str(upload_dir / (hw_ref[7:] + ".yaml")),
                    gpus=64, seq_len=32768, gbs=64)["plans"][0]
    assert plan.status_code == 200 and f"{want['tokens_per_s_per_gpu']:,.0f}" in plan.text
    bad = client.post("/upload/hardware", files={"file": ("hw.yaml", b"gpus: [1, 2", "application/yaml")})
    assert bad.status_code == 422 and "hardware file" in bad.text and str(upload_dir) not in bad.text
    assert client.post("/upload/nope", files={"file": ("x", b"x")}).status_code == 404
    assert client.get("/upload/model").status_code == 405


def test_static_and_unknown_paths(client: Any) -> None:
    js = client.get("/static/htmx.min.js")
    assert js.status_code == 200 and "htmx" in js.text[:2000]
    assert client.get("/static/htmx-LICENSE.txt").status_code == 200
    for path in ("/nope", "/static/../app.py", "/static/%2e%2e/app.py", "/plan/figure/"):
        assert client.get(path).status_code == 404


def test_an_unexpected_error_is_logged_and_answered_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture,
                                                                tmp_path: Path) -> None:
    """The catch-all: a bug inside the app is logged with its traceback and answered 400 in one line, never
    500, and the server answers the next request."""
    need("starlette")
    from starlette.testclient import TestClient

    from moeplan.web import app as web_app

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    with TestClient(web_app.create_app(tmp_path), raise_server_exceptions=False) as c:
        from moeplan import report

        monkeypatch.setattr(report, "no_fit_sentence", broken)  # only the no-fit answer calls it
        with caplog.at_level(logging.ERROR, logger="moeplan.web"):
            r = c.get("/plan?model=deepseek-v3&gpu=h100&gpus=8&seq_len=128k&gbs=8")
        assert r.status_code == 400 and r.text.count("\n") == 1 and "RuntimeError" in r.text
        assert "a bug" not in r.text  # the detail is in the log, not on the page
        assert any(rec.exc_info and "a bug" in str(rec.exc_info[1]) for rec in caplog.records)
        assert c.get("/plan?" + Q).status_code == 200
