"""The page at the edges the CLI and the API share: the no-fit line (one function words it), the run-size bounds
(moeplan.base.limits, the CLI's and the API's messages) and the routing select (moeplan.base.routing)."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

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
