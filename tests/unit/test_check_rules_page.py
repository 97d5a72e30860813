"""docs/commands/check.md lists every rule code `check` can emit, each with the severities it can carry.

The codes are read from the code that makes findings, not from a list kept beside it: every ``Finding(severity,
rule, ...)`` in moeplan.lint and ``Pitfall(severity, rule, ...)`` in moeplan.plan.pitfalls with literal arguments,
the layout rules (moeplan.run.parallel's ``fail`` / ``LayoutCheck`` and moeplan.run.hybrid's (rule, reason) pairs:
lint reports each as an error) and Megatron-Core's assertions (moeplan.megatron.asserts.ASSERTS, as ``mcore-<id>``
with their own severity). A finding whose rule or severity is computed elsewhere must be one of the sources named
here, so a new kind fails this test until the page (and the test) know it."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from moeplan.megatron.asserts import ASSERTS

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "moeplan"
PAGE = ROOT / "docs" / "commands" / "check.md"
SEVERITIES = {"error", "warning", "info"}

# Findings whose rule or severity is not a literal: (file, rule expression, severity expression) -> where the codes
# come from (read below)
DYNAMIC = {
    ("lint/rules.py", "p.rule", "p.severity"): "pitfalls",
    ("lint/rules.py", "bad.rule", "'error'"): "layout",
    ("lint/checker.py", "f'mcore-{rule.id}'", "rule.severity"): "asserts",
    ("plan/pitfalls.py", "'cuda-graphs-memory'", "severity"): "cuda-graphs-memory",
}


def _calls(path: Path, names: set[str]):
    """Calls of ``names`` by bare name or as an attribute (``lint.Finding(...)``)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Name) and node.func.id in names)
                or (isinstance(node.func, ast.Attribute) and node.func.attr in names)):
            yield node


def _literal(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


# Layout-rule calls whose rule is not a literal: relays that pass a rule given to them on (moeplan.run.parallel)
LAYOUT_RELAYS = {"rule"}


def _layout_rules() -> set[str]:
    calls = list(_calls(SRC / "run" / "parallel.py", {"fail", "LayoutCheck"}))
    relayed = {ast.unparse(c.args[0]) for c in calls if c.args and _literal(c.args[0]) is None}
    assert relayed <= LAYOUT_RELAYS, f"a layout rule with a computed code: {sorted(relayed - LAYOUT_RELAYS)}"
    assert all(c.args for c in calls), "a layout rule without a positional code"
    codes = {_literal(c.args[0]) for c in calls}
    for call in ast.walk(ast.parse((SRC / "run" / "hybrid.py").read_text(encoding="utf-8"))):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append"
                and call.args and isinstance(call.args[0], ast.Tuple)):
            codes.add(_literal(call.args[0].elts[0]))
    codes.discard(None)
    return codes  # type: ignore[return-value]


def emitted() -> dict[str, set[str]]:
    """rule code -> the severities it can be emitted with (empty: computed, any)."""
    out: dict[str, set[str]] = defaultdict(set)
    seen_dynamic = set()
    for path in sorted(SRC.rglob("*.py")):  # wherever a finding is made
        rel = path.relative_to(SRC).as_posix()
        for call in _calls(path, {"Finding", "Pitfall"}):
            assert len(call.args) >= 2, f"{rel}:{call.lineno}: a finding without a positional severity and rule"
            sev, rule = _literal(call.args[0]), _literal(call.args[1])
            if sev is not None and rule is not None:
                out[rule].add(sev)
                continue
            key = (rel, ast.unparse(call.args[1]), ast.unparse(call.args[0]))
            assert key in DYNAMIC, f"{rel}:{call.lineno}: a finding with a computed rule or severity: {key}"
            seen_dynamic.add(key)
    assert seen_dynamic == set(DYNAMIC), "a computed finding this test reads is gone: update DYNAMIC"
    out.setdefault("cuda-graphs-memory", set())  # its severity is computed (error or warning): the row says both
    for code in _layout_rules():
        out[code].add("error")
    for a in ASSERTS:
        out[f"mcore-{a.id}"].add(a.severity)
    return dict(out)


def page_rows() -> dict[str, list[set[str]]]:
    rows: dict[str, list[set[str]]] = defaultdict(list)
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| `([a-z0-9-]+)` \| ([a-z /]+) \|", line)
        if m:
            rows[m.group(1)].append({s.strip() for s in m.group(2).split("/")})
    return dict(rows)


def test_the_sources_are_read():
    """The scan finds what it should (a broken reader would pass the page test vacuously)."""
    codes = emitted()
    assert {"dispatcher", "full-recompute", "delay-wgrad", "dispatcher-nvl72", "memory", "heads-tp",
            "mamba-heads-tp", "hybrid-mtp-stage", "deepep-ep-ranks", "mcore-paged-stash", "unknown-key"} <= set(codes)
    assert codes["dp-collapsed"] == {"warning", "info"} and codes["heads-tp"] == {"error"}
    assert len(codes) > 90


def test_every_rule_has_one_row_with_its_severities():
    rows = page_rows()
    codes = emitted()
    missing = sorted(set(codes) - set(rows))
    assert not missing, f"docs/commands/check.md has no row for {missing}"
    twice = sorted(c for c, r in rows.items() if len(r) > 1)
    assert not twice, f"rules with more than one row: {twice}"
    for code, sevs in codes.items():
        (listed,) = rows[code]
        assert listed <= SEVERITIES, (code, listed)
        if sevs:
            assert listed == sevs, f"{code}: the page says {sorted(listed)}, the code emits {sorted(sevs)}"
    assert rows["cuda-graphs-memory"] == [{"error", "warning"}]
    unknown = sorted(set(rows) - set(codes))
    assert not unknown, f"rows for rules nothing emits: {unknown}"
