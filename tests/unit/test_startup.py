"""Start-up cost of the CLI: `moeplan --help` and `moeplan models` import only what they use (the
time itself is measured by benchmarks/plan_scale.py; a module list is what a test can hold fixed)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("yaml", "matplotlib", "moeplan.api", "moeplan.plan.planner", "moeplan.engine.timing", "moeplan.engine.memory",
         "moeplan.hardware", "moeplan.megatron.export", "moeplan.run.strategy")


def _modules_after(argv: list[str]) -> set[str]:
    code = ("import contextlib, io, json, sys\n"
            "from moeplan.cli import main\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    try:\n"
            f"        main({argv!r})\n"
            "    except SystemExit:\n"
            "        pass\n"
            "assert out.getvalue().strip()\n"
            "sys.__stdout__.write(json.dumps(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(proc.stdout))


def test_help_imports_neither_rich_nor_the_engine():
    loaded = _modules_after(["--help"])
    assert "moeplan.cli" in loaded
    assert not {m for m in loaded if m.split(".")[0] == "rich"}
    assert not loaded & set(HEAVY)
    # nor the model catalog (importlib.resources, the config readers: ~25 ms): --help needs only the
    # version tables (moeplan.run.attention_backend once imported it for a type annotation)
    assert not {m for m in loaded if m.startswith("moeplan.models")}


def test_models_imports_the_catalog_but_not_the_engine():
    loaded = _modules_after(["models"])
    assert {"moeplan.models.catalog", "moeplan.engine.params", "rich.table"} <= loaded
    assert not loaded & set(HEAVY)
