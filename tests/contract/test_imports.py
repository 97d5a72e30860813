"""The import contract of the house (read from the source with :mod:`ast`, nothing imported):

* no import circle among moeplan's modules, counting imports inside functions (a circle cannot hide in one);
* no upward import: the engine never imports the planner, the linter, the readers/exports, the API or the CLI;
* below the API, no moeplan import is placed inside a function (lazy imports are for the front: API, CLI, report).

Layers, bottom to top. A module may import its own layer or lower ones.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("moeplan.errors", "moeplan.argcheck", "moeplan.vocab", "moeplan.megatron", "moeplan.megatron.fields", "moeplan.te_release",
                    "moeplan.outfile")),  # file identity and atomic writes: imports only moeplan.errors
    ("data", ("moeplan.models", "moeplan.models.*", "moeplan.hardware", "moeplan.hardware.*",
              "moeplan.logs", "moeplan.logs.*")),  # training-log readers: text in, numbers out (engine-free)
    ("engine", ("moeplan.parallel", "moeplan.run", "moeplan.params", "moeplan.flops", "moeplan.activations",
                "moeplan.attention_backend", "moeplan.memory", "moeplan.timing", "moeplan.estimate", "moeplan.knobs", "moeplan.timeline", "moeplan.fsdp",
                "moeplan.muon")),
    ("guidance", ("moeplan.advice", "moeplan.bounds", "moeplan.planner", "moeplan.pitfalls")),
    ("beside", ("moeplan.rules", "moeplan.checker", "moeplan.explain", "moeplan.strategy", "moeplan.megatron.*",
                "moeplan.calibrate")),
    ("api", ("moeplan.api", "moeplan.listing")),
    ("edge", ("moeplan", "moeplan.__main__", "moeplan.cli", "moeplan.report", "moeplan.plots")),
)
LAZY_IMPORTS_ALLOWED_FROM = "api"  # this layer and above may import inside functions (start-up time)


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "moeplan").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def layer_of(module: str) -> int | None:
    """Index of the module's layer: an exact name wins over a ``pkg.*`` pattern."""
    for exact in (True, False):
        for i, (_, names) in enumerate(LAYERS):
            for name in names:
                if (exact and name == module) or (not exact and name.endswith(".*")
                                                   and module.startswith(name[:-1])):
                    return i
    return None


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
    assert {"moeplan.run", "moeplan.parallel", "moeplan.megatron.fields", "moeplan.megatron"} <= {
        t for t, _, _ in GRAPH["moeplan.memory"]} | {t for t, _, _ in GRAPH["moeplan.run"]}
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
            if mine is not None and theirs is not None and theirs > mine:
                bad.append(f"{module}:{line} ({LAYERS[mine][0]}) imports {target} ({LAYERS[theirs][0]})")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_function_local_imports_below_the_front() -> None:
    front = next(i for i, (name, _) in enumerate(LAYERS) if name == LAZY_IMPORTS_ALLOWED_FROM)
    bad = [f"{module}:{line} imports {target} inside a function"
           for module, edges in GRAPH.items() for target, line, local in edges
           if local and (layer_of(module) or 0) < front]
    assert not bad, "\n".join(bad)


def test_the_field_table_is_a_leaf() -> None:
    """moeplan.megatron.fields imports only the foundation (errors, vocab): the engine asks it version questions."""
    allowed = {"moeplan.errors", "moeplan.vocab"}
    assert {t for t, _, _ in GRAPH["moeplan.megatron.fields"]} <= allowed
    assert not GRAPH["moeplan.vocab"] and not GRAPH["moeplan.errors"] and not GRAPH["moeplan.megatron"]


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
    assert GRAPH["moeplan.timing"], "the module reader sees imports"
    bad = _private_imports()
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)
