"""The README (issue 32): what moeplan does, the two set-up commands first, three examples, a table of links and a
short layout; one page per command under docs/commands/, every link to a file that exists (docs/serve.md comes
from another branch)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = ("plan", "estimate", "check", "sweep", "explain", "report", "params", "calibrate", "models-hardware", "common")
PENDING: set[str] = set()  # pages linked before they land (none now)


def _prose(text: str) -> str:
    """The README without code blocks and without the generated plans block (scripts/readme_plans.py)."""
    text = re.sub(r"<!-- readme_plans:begin -->.*<!-- readme_plans:end -->", "", text, flags=re.S)
    return re.sub(r"```.*?```", "", text, flags=re.S)


def test_readme_opens_with_what_it_does_and_the_two_commands():
    text = README.read_text(encoding="utf-8")
    first_code = text.index("```bash")
    assert text.index("## ") > first_code  # no section before the set-up commands
    commands = text[first_code:text.index("```", first_code + 3)].splitlines()[1:]
    assert commands == [
        "# 1. set up, then run the main job: a plan for DeepSeek-V3 at 128K on 1,024 H100",
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[plot]' && .venv/bin/moeplan plan deepseek-v3 "
        "--gpu h100 --gpus 1024 --seq-len 128k --gbs 1024",
        "# 2. set up and run the tests (what CI runs: .ci/run calls this)",
        "bash scripts/test.sh",
    ]


def test_readme_is_short_with_no_long_paragraph():
    """5,258 words with a 540-word paragraph before; the generated examples aside, a page a person reads."""
    prose = _prose(README.read_text(encoding="utf-8"))
    assert len(prose.split()) < 900, len(prose.split())
    paragraphs = [p for p in re.split(r"\n\s*\n", prose) if p.strip() and not p.lstrip().startswith("|")]
    assert max(len(p.split()) for p in paragraphs) <= 120


def test_one_page_per_command_and_every_link_resolves():
    text = README.read_text(encoding="utf-8")
    for page in PAGES:
        assert (ROOT / "docs" / "commands" / f"{page}.md").is_file(), page
        if page != "common":
            assert f"docs/commands/{page}.md" in text, page
    assert "docs/mcp.md" in text and "docs/serve.md" in text
    for md in [README, *(ROOT / "docs").rglob("*.md")]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", md.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://")):
                continue
            resolved = (md.parent / target).resolve()
            if resolved.relative_to(ROOT).as_posix() in PENDING:
                continue
            assert resolved.exists(), f"{md.relative_to(ROOT)}: {target}"


def test_the_trace_size_the_docs_give_is_the_headline_traces():
    """The README said ~19 MB for the headline trace (512 micro-batches): plan 1 has changed since; the page gives
    what benchmarks/timeline_scale.py measures today, checked here on the plan and its trace."""
    import gzip

    from moeplan import api
    from moeplan.engine.timeline import build_timeline, chrome_trace_bytes

    report = api.search_plans("deepseek-v3", gpu="h100", gpus=1024, seq_len=131072, gbs=1024, top=1)
    plan = report.plans[0]
    tl = build_timeline(plan.config, plan.gpu)
    data = chrome_trace_bytes(tl)
    page = (ROOT / "docs" / "commands" / "estimate.md").read_text(encoding="utf-8")
    said = " ".join(page.split())
    assert f"{tl.microbatches} micro-batches" in said
    assert f"{len(data) / 1e6:.1f} MB trace, {len(gzip.compress(data, compresslevel=6, mtime=0)) / 1e6:.1f} MB gzipped" in said
