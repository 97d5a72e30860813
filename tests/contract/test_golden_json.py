"""Golden JSON: one fixed command per subcommand, its ``--json`` output compared byte for byte with the stored
answer in ``tests/data/golden/``. It pins behaviour across refactors (issue #30: the package layout moved, the
numbers may not).

A deliberate change of an answer regenerates the files (and the diff is then reviewed like code)::

    .venv/bin/python tests/contract/test_golden_json.py --regen

The commands run in-process (``moeplan.cli.main``) from the repository root, so file arguments are relative
paths and the output names no temporary directory.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden"

RUN = ["--gpu", "h100", "--gpus", "16", "--seq-len", "4k"]

# name -> argv (each prints one JSON document); small cases so the whole test stays well under 20 s
CASES: dict[str, list[str]] = {
    "models": ["models", "--json"],
    "hardware": ["hardware", "--hardware", "examples/hardware_h100_200g.yaml", "--json"],
    "params": ["params", "deepseek-v3", "--seq-len", "128k", "--json"],
    "estimate": ["estimate", "qwen3-30b-a3b", *RUN, "--gbs", "256", "--tp", "1", "--pp", "1", "--ep", "8",
                 "--recompute", "selective:moe_act", "--json"],
    "plan": ["plan", "qwen3-30b-a3b", *RUN, "--gbs", "256", "--top", "3", "--json"],
    "sweep": ["sweep", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4k,8k", "--gbs-tokens", "1m",
              "--hold", "--tp", "1", "--pp", "1", "--ep", "8", "--json"],
    "explain": ["explain", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4k,8k",
                "--gbs-tokens", "1m", "--no-fix", "--json"],
    "check": ["check", "examples/deepseek_v3_128k_h100.yaml", "--model", "deepseek-v3", "--gpus", "1024", "--json"],
    "report": ["report", "qwen3-30b-a3b", *RUN, "--gbs", "256", "--top", "2", "--html", "{tmp}/report.html",
               "--json"],
    "calibrate": ["calibrate", "examples/qwen3_30b_a3b_16xh100_megatron_lm.log", "--gpu", "h100", "--json"],
    "skill": ["skill", "install", "{tmp}", "--json"],
}
# subcommands that print no JSON answer: `mcp` serves over stdio (tests/unit/test_mcp_*.py pin its answers,
# each equal to the CLI's --json); `serve` serves a page (tests/web/ pin it against the API)
NO_JSON_ANSWER = {"mcp", "serve"}


def run_case(name: str, tmp: Path) -> tuple[int, str]:
    """Exit code and stdout of one case, run in-process from the repository root."""
    from moeplan.cli import main

    argv = [a.replace("{tmp}", str(tmp)) for a in CASES[name]]
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(cwd)
    return code, out.getvalue().replace(str(tmp), "{tmp}")


def _golden(name: str) -> Path:
    return GOLDEN / f"{name}.json"


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_json(name: str, tmp_path: Path) -> None:
    code, out = run_case(name, tmp_path)
    stored = _golden(name).read_text(encoding="utf-8")
    expected_code, _, expected_out = stored.partition("\n")
    assert f"exit {code}" == expected_code, f"{name}: exit code changed"
    assert out == expected_out, (f"{name}: --json output changed; if deliberate, regenerate with "
                                 f"`python tests/contract/test_golden_json.py --regen` and review the diff")


def test_every_subcommand_has_a_case() -> None:
    from moeplan.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == set(CASES) | NO_JSON_ANSWER


def regen() -> None:
    import tempfile

    GOLDEN.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(CASES):
            code, out = run_case(name, Path(tmp))
            _golden(name).write_text(f"exit {code}\n{out}", encoding="utf-8")
            print(f"wrote {_golden(name).relative_to(ROOT)} (exit {code}, {len(out)} chars)")


if __name__ == "__main__":
    if sys.argv[1:] != ["--regen"]:
        sys.exit("usage: python tests/contract/test_golden_json.py --regen")
    regen()
