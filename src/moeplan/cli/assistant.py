"""``moeplan mcp`` and ``moeplan skill install``: their parsers and handlers (cli.build_parser calls
:func:`add_parsers`). Nothing heavy is imported until a command runs (``moeplan --help`` stays fast)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

from moeplan.base.errors import MoeplanError

SKILL_NAME = "moeplan"
# Where Claude Code looks for personal skills (one folder per skill holding SKILL.md); other assistants that read
# the open agent-skills format take the folder anywhere: give DIR.
DEFAULT_SKILLS_DIR = "~/.claude/skills"


def skill_source() -> Any:
    """The skill folder shipped inside the package (moeplan/assistant/skills/moeplan; the repository's
    skills/moeplan is a link to it)."""
    from importlib import resources  # here, not at import: `moeplan --help` builds this module's parsers

    return resources.files("moeplan.assistant") / "skills" / SKILL_NAME


def _files(root: Any, prefix: str = "") -> list[tuple[str, bytes]]:
    out = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        rel = f"{prefix}{entry.name}"
        if entry.is_dir():
            out += _files(entry, rel + "/")
        else:
            out.append((rel, entry.read_bytes()))
    return out


def _is_moeplan_skill(folder: Path) -> bool:
    """An earlier install of this skill (its SKILL.md names it), which an install may replace."""
    try:
        head = (folder / "SKILL.md").read_text(encoding="utf-8")[:400]
    except OSError:
        return False
    return head.startswith("---") and f"\nname: {SKILL_NAME}\n" in head


def install_skill(directory: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Copy the skill into ``directory``/moeplan (default ~/.claude/skills/moeplan): written beside the target,
    then moved into place, so a failure leaves nothing half-written. An earlier install of it is replaced; any other
    folder of that name is refused."""
    import shutil
    import tempfile
    from pathlib import Path

    base = Path(os.path.expanduser(str(directory if directory is not None else DEFAULT_SKILLS_DIR)))
    if base.exists() and not base.is_dir():
        raise MoeplanError(f"cannot install the skill into {base}: not a directory")
    target = base / SKILL_NAME
    if target.is_symlink() or (target.exists() and not _is_moeplan_skill(target)):
        raise MoeplanError(f"cannot install the skill: {target} exists and is not an earlier install of the moeplan "
                           "skill (move it, or give another DIR)")
    files = _files(skill_source())
    try:
        base.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{SKILL_NAME}-", dir=base))
    except OSError as exc:
        raise MoeplanError(f"cannot install the skill into {base}: {exc.strerror or exc}") from None
    try:
        for rel, data in files:
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        old = None
        if target.exists():
            old = base / f".{SKILL_NAME}-old-{os.getpid()}"
            target.rename(old)
        staging.rename(target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise MoeplanError(f"cannot install the skill into {base}: {exc.strerror or exc}") from None
    return {"skill": SKILL_NAME, "path": str(target), "files": [rel for rel, _ in files]}


def cmd_skill_install(args: argparse.Namespace, console: Any) -> int:
    out = install_skill(args.dir)
    if args.json:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        sys.stdout.write(f"installed the {SKILL_NAME} skill ({len(out['files'])} files) in {out['path']}\n")
    return 0


def cmd_mcp(args: argparse.Namespace, console: Any) -> int:
    try:
        import mcp.server.mcpserver  # noqa: F401  (the optional extra)
    except ImportError:
        raise MoeplanError("moeplan mcp needs the MCP Python SDK: pip install 'moeplan[mcp]'") from None
    from moeplan.assistant.mcp_server import serve

    serve()
    return 0


def add_parsers(sub: Any) -> None:
    """The two commands on moeplan's subparsers (``sub``: build_parser's add_subparsers object)."""
    p = sub.add_parser(
        "mcp", help="serve moeplan's tools to an assistant over MCP (stdio; needs pip install 'moeplan[mcp]')",
        description="A Model Context Protocol server over stdio (the official Python SDK): read-only tools list_models, "
        "list_hardware, params, estimate, plan (with progress), sweep, explain, check_config (config text in), export "
        "(overrides, YAML, Megatron-LM) and calibrate (log text in, profile out), each returning what the matching "
        "command prints with --json. Register it with an assistant as the command `moeplan mcp` (docs/mcp.md).",
        epilog="example (Claude Code): claude mcp add moeplan -- moeplan mcp")
    p.set_defaults(handler=cmd_mcp)

    examples = "examples:\n  moeplan skill install\n  moeplan skill install ./my-agent/skills --json"
    p = sub.add_parser("skill", help="install the moeplan agent skill where an assistant looks for skills",
                       description="The agent skill shipped with moeplan (SKILL.md, references, evals).",
                       epilog=examples, formatter_class=argparse.RawDescriptionHelpFormatter)
    skill_sub = p.add_subparsers(dest="skill_command", metavar="ACTION", required=True, parser_class=type(p))
    q = skill_sub.add_parser("install", help="copy the skill into DIR/moeplan and print where",
                             description="Copy the moeplan skill into DIR/moeplan (default ~/.claude/skills/moeplan, "
                             "where Claude Code reads personal skills); an earlier install is replaced.",
                             epilog=examples, formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("dir", nargs="?", metavar="DIR", help="skills folder (default ~/.claude/skills)")
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(handler=cmd_skill_install)
