"""The import contract of the house (read from the source with :mod:`ast`, nothing imported):

* no import circle among moeplan's modules, counting imports inside functions (a circle cannot hide in one);
* no upward import: each package of ``src/moeplan`` is one layer, and a module imports only its own package or
  the tiers below it; packages that share a tier (the engine and the Megatron readers/exports) never import
  each other;
* below the API, no import of any module (moeplan's, the standard library's, a dependency's) is placed inside a
  function: every dependency shows at the top of its module. Lazy imports are for the front (API, plots, report,
  CLI: start-up time); an optional extra that a lower module needs (torch, megatron-core) is loaded by name
  through moeplan.base.extras, the one loader, whose table names them.

Tiers, bottom to top: the package layout of ``src/moeplan`` is this table, with no exceptions.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

TIERS: tuple[tuple[str, ...], ...] = (
    ("moeplan.base",),                                       # errors, vocabulary, field table, argument checks
    ("moeplan.models", "moeplan.hardware", "moeplan.logs"),  # data: catalogs, specs, training-log readers
    ("moeplan.run",),                                        # the run record, the layout, the strategy file
    ("moeplan.engine", "moeplan.megatron"),                  # the cost model | Megatron readers and exports
    ("moeplan.plan",),                                       # search, advice, bounds, explain
    ("moeplan.lint", "moeplan.calibrate"),                   # the linter | the calibration to a cluster
    ("moeplan.api",),                                        # the Python API
    ("moeplan.plots", "moeplan.templating"),                 # the edge: figures | the report's and page's templates,
    ("moeplan.report",),                                     # the HTML report,
    ("moeplan.assistant", "moeplan.web"),                    # the MCP server and the skill | the page (moeplan serve),
    ("moeplan.cli",),                                        # the command line
    ("moeplan.__main__", "moeplan"),                         # and `python -m moeplan`
)
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (" | ".join(p.removeprefix("moeplan.") for p in tier), tier) for tier in TIERS)
LAZY_IMPORTS_ALLOWED_FROM = "api"  # this layer and above may import inside functions (start-up time); below it none


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "moeplan").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def package_of(module: str) -> str | None:
    """The layer package a module belongs to (the longest package name that is the module or holds it)."""
    best = None
    for tier in TIERS:
        for pkg in tier:
            if (module == pkg or module.startswith(pkg + ".")) and (best is None or len(pkg) > len(best)):
                best = pkg
    return best


def layer_of(module: str) -> int | None:
    """Index of the module's tier."""
    pkg = package_of(module)
    return None if pkg is None else next(i for i, tier in enumerate(TIERS) if pkg in tier)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _targets(importer: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """moeplan modules an import statement executes (a package's __init__ runs before its submodule)."""
    is_pkg = MODULES[importer].name == "__init__.py"
    names: set[str] = set()
    if isinstance(node, ast.Import):
        names = {a.name for a in node.names}
    else:
        base = node.module or ""
        if node.level:
            pkg = importer.split(".") if is_pkg else importer.split(".")[:-1]
            pkg = pkg[:len(pkg) - (node.level - 1)]
            base = ".".join(pkg + ([base] if base else []))
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            names.add(sub if sub in MODULES else base)
    out: set[str] = set()
    own = set(_ancestors(importer))
    for name in names:
        if name.split(".")[0] != "moeplan" or name not in MODULES:
            continue
        out.add(name)
        out.update(a for a in _ancestors(name) if a in MODULES and a not in own and a != "moeplan")
    out.discard(importer)
    return out


def _imports(module: str) -> list[tuple[str, int, bool]]:
    """(target, line, inside a function) for every moeplan import of a module, TYPE_CHECKING blocks left out."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.orelse:
                    visit(stmt, in_function)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend((t, child.lineno, in_function) for t in sorted(_targets(module, child)))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in {t for t, _, _ in GRAPH[v]}:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in sorted(GRAPH):
        if m not in index:
            strong(m)
    return out


def test_the_graph_is_read() -> None:
    """The reader sees the known edges (so the checks below cannot pass on an empty graph)."""
    assert {"moeplan.run.config", "moeplan.run.parallel", "moeplan.base.fields", "moeplan.base"} <= {
        t for t, _, _ in GRAPH["moeplan.engine.memory"]} | {t for t, _, _ in GRAPH["moeplan.run.config"]}
    assert "moeplan.megatron.export" in {t for t, _, _ in GRAPH["moeplan.megatron.mcore"]}
    assert "moeplan.megatron.read.collect" in {t for t, _, _ in GRAPH["moeplan.megatron.read.bridge_yaml"]}


def test_every_module_has_a_layer() -> None:
    missing = sorted(m for m in MODULES if layer_of(m) is None)
    assert not missing, f"classify these modules in tests/contract/test_imports.py LAYERS: {', '.join(missing)}"


def test_no_import_circles() -> None:
    cycles = _cycles()
    assert not cycles, "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_upward_imports() -> None:
    bad = []
    for module, edges in GRAPH.items():
        mine = layer_of(module)
        for target, line, _ in edges:
            theirs = layer_of(target)
            if mine is not None and theirs is not None and (
                    theirs > mine or (theirs == mine and package_of(target) != package_of(module))):
                bad.append(f"{module}:{line} ({package_of(module)}) imports {target} ({package_of(target)})")
    assert not bad, "upward or sideways imports:\n" + "\n".join(bad)


def test_every_package_is_a_layer() -> None:
    """``ls src/moeplan`` is the architecture: every package directly under it is one layer of the table."""
    root = SRC / "moeplan"
    packages = {f"moeplan.{p.name}" for p in root.iterdir() if (p / "__init__.py").is_file()}
    flat = {f"moeplan.{p.stem}" for p in root.glob("*.py") if p.stem != "__init__"}
    assert packages | flat == {pkg for tier in TIERS for pkg in tier} - {"moeplan"}


def _function_imports(module: str, text: str | None = None) -> list[tuple[str, int]]:
    """(imported name, line) of every import statement inside a function of a module (or of ``text``), whatever
    it imports (moeplan, the standard library, a dependency), TYPE_CHECKING blocks left out."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.orelse:
                    visit(stmt, in_function)
                continue
            if in_function and isinstance(child, ast.Import):
                found.extend((a.name, child.lineno) for a in child.names)
            elif in_function and isinstance(child, ast.ImportFrom):
                found.append(("." * child.level + (child.module or ""), child.lineno))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(MODULES[module].read_text(encoding="utf-8") if text is None else text), False)
    return found


def test_no_function_local_imports_below_the_front() -> None:
    front = next(i for i, (name, _) in enumerate(LAYERS) if name == LAZY_IMPORTS_ALLOWED_FROM)
    bad = [f"{module}:{line} imports {target} inside a function"
           for module, edges in GRAPH.items() for target, line, local in edges
           if local and (layer_of(module) or 0) < front]
    bad += [f"{module}:{line} imports {name} inside a function"
            for module in MODULES if (layer_of(module) or 0) < front
            for name, line in _function_imports(module)]
    assert not bad, "\n".join(bad)


def test_the_function_import_reader_sees_them() -> None:
    """The reader finds a function-local import of the standard library, and the front still has some (so the
    check above cannot pass on a reader that sees nothing)."""
    assert any(m.startswith("moeplan.cli") and _function_imports(m) for m in MODULES)
    text = ("from typing import TYPE_CHECKING\nimport os\nif TYPE_CHECKING:\n    import json\n"
            "def f():\n    import warnings\n    from json import dumps\n")
    assert _function_imports("moeplan.base", text) == [("warnings", 6), ("json", 7)]


def test_the_field_table_is_a_leaf() -> None:
    """moeplan.base.fields imports only the foundation (errors, vocab): the engine asks it version questions."""
    allowed = {"moeplan.base.errors", "moeplan.base.vocab"}
    assert {t for t, _, _ in GRAPH["moeplan.base.fields"]} <= allowed
    assert not GRAPH["moeplan.base.vocab"] and not GRAPH["moeplan.base.errors"] and not GRAPH["moeplan.megatron"]
    assert not GRAPH["moeplan.base"]


def test_timing_does_not_import_memory() -> None:
    """The time model stands below the memory model: what both need (parameters per GPU) lives in
    moeplan.engine.param_shards."""
    timing = [m for m in MODULES if m == "moeplan.engine.timing" or m.startswith("moeplan.engine.timing.")]
    assert len(timing) > 5
    bad = [f"{m}:{line}" for m in timing for t, line, _ in GRAPH[m] if t == "moeplan.engine.memory"]
    assert not bad, "timing imports memory: " + ", ".join(bad)


def _private_imports() -> list[str]:
    """``from moeplan.x import _name`` from another module (a private name used outside its owner);
    ``import a as _a`` aliases are fine: the imported name itself is public."""
    bad = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("moeplan"):
                bad += [f"{module}:{node.lineno} imports {node.module}.{a.name}"
                        for a in node.names if a.name.startswith("_") and node.module != module]
    return bad


def test_no_private_names_across_modules() -> None:
    """Each module owns its private helpers: one that another module needs is made public by its owner."""
    assert GRAPH["moeplan.engine.timing.step"], "the module reader sees imports"
    bad = _private_imports()
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)
