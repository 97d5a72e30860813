"""The agent skill shipped with moeplan: SKILL.md's frontmatter within the open agent-skills format's limits, one
copy (skills/moeplan links to the packaged folder, which package data ships whole), links that resolve, the CLI
commands it tells an assistant to run, and `moeplan skill install`."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from moeplan.cli.assistant import install_skill, skill_source
from moeplan.cli import build_parser, main

from ..mcp_support import require_mcp

ROOT = Path(__file__).resolve().parents[2]
PACKAGED = ROOT / "src" / "moeplan" / "assistant" / "skills" / "moeplan"
NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")  # lowercase letters, digits, single hyphens inside


def _frontmatter(path: Path) -> tuple[dict, str]:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    head, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(head), body


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def test_frontmatter_is_within_the_format_limits():
    fm, body = _frontmatter(PACKAGED / "SKILL.md")
    assert set(fm) <= {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
    assert {"name", "description", "license", "compatibility", "allowed-tools"} <= set(fm)
    name = fm["name"]
    assert 1 <= len(name) <= 64 and NAME_RE.match(name) and name == PACKAGED.name  # the folder's name
    assert isinstance(fm["description"], str) and 1 <= len(fm["description"]) <= 1024
    assert "Use when" in fm["description"]  # what it does and when to use it
    assert isinstance(fm["compatibility"], str) and 1 <= len(fm["compatibility"]) <= 500
    assert fm["license"] == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]["text"]
    assert isinstance(fm["allowed-tools"], str) and "Bash(moeplan:*)" in fm["allowed-tools"].split()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in fm["metadata"].items())
    assert len(body.splitlines()) < 500  # the format's advice for SKILL.md's body


def test_allowed_mcp_tools_are_the_servers_tools():
    require_mcp()  # the server module imports the SDK's types
    from moeplan.assistant.mcp_server import TOOLS

    fm, _ = _frontmatter(PACKAGED / "SKILL.md")
    named = {t.removeprefix("mcp__moeplan__") for t in fm["allowed-tools"].split() if t.startswith("mcp__moeplan__")}
    assert named == {fn.__name__ for fn, _, _ in TOOLS}


def test_links_resolve_and_references_cite_sources():
    for md in PACKAGED.rglob("*.md"):
        for target in re.findall(r"\]\(([^)#]+)\)", md.read_text(encoding="utf-8")):
            if "://" not in target:
                assert (md.parent / target).exists(), f"{md.name}: {target}"
    refs = list((PACKAGED / "references").glob("*.md"))
    assert len(refs) >= 3
    rules = (PACKAGED / "references" / "long-context-rules.md").read_text()
    assert "nemo-mbridge-perf-moe-long-context" in rules and "moe-optimization.md" in rules


def test_commands_in_skill_md_parse():
    """Every `moeplan ...` line SKILL.md tells an assistant to run is accepted by the CLI's parser."""
    _, body = _frontmatter(PACKAGED / "SKILL.md")
    block = body.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    commands = [line.split("#")[0].split() for line in block.splitlines() if line.startswith("moeplan ")]
    assert len(commands) >= 5
    parser = build_parser()
    for argv in commands:
        parser.parse_args(argv[1:])


def test_one_copy_of_the_skill_ships_with_the_package():
    link = ROOT / "skills" / "moeplan"
    assert link.is_symlink() and link.resolve() == PACKAGED.resolve()
    assert Path(str(skill_source())).resolve() == PACKAGED.resolve()
    # package data (pyproject.toml) matches every file of the folder, so a wheel ships it whole
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    globs = data["moeplan.assistant"]
    for rel in _files(PACKAGED):
        assert any(fnmatch.fnmatch(f"skills/moeplan/{rel}", g) for g in globs), rel


def test_skill_install_into_a_folder(tmp_path, capsys):
    target = tmp_path / "skills"
    assert main(["skill", "install", str(target)]) == 0
    out = capsys.readouterr().out
    assert str(target / "moeplan") in out and out.count("\n") == 1
    assert _files(target / "moeplan") == _files(PACKAGED)
    assert (target / "moeplan" / "SKILL.md").read_bytes() == (PACKAGED / "SKILL.md").read_bytes()
    # again: an earlier install is replaced (a stale file goes), nothing is left beside it
    (target / "moeplan" / "stale.md").write_text("old")
    assert main(["skill", "install", str(target), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["path"] == str(target / "moeplan") and sorted(got["files"]) == _files(PACKAGED)
    assert sorted(p.name for p in target.iterdir()) == ["moeplan"]
    assert not (target / "moeplan" / "stale.md").exists()


def test_skill_install_default_is_the_claude_skills_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    out = install_skill()
    assert Path(out["path"]) == tmp_path / ".claude" / "skills" / "moeplan"
    assert (tmp_path / ".claude" / "skills" / "moeplan" / "evals" / "evals.json").is_file()


def test_skill_install_refuses_a_folder_it_did_not_write(tmp_path, capsys):
    other = tmp_path / "moeplan"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["skill", "install", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an earlier install" in err
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    assert main(["skill", "install", str(tmp_path / "file")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_mcp_server_start_imports_no_engine():
    """The server starts without the planner and estimator (imported at the first tool call): start-up time."""
    require_mcp()
    code = ("import json, sys\nfrom moeplan.assistant.mcp_server import build_server\nbuild_server()\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                           check=True).stdout.splitlines()[-1]))
    assert not loaded & {"moeplan.api", "moeplan.plan.planner", "moeplan.engine.timing.step", "moeplan.engine.memory", "yaml"}
