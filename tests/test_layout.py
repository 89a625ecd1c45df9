"""The layout: the import graph of harness, upstream and downstream, built from the source.

Imports flow one way (library <- stages <- experiment and CLI): no import circles, no private name
taken from another package, and the library never reaches up into a stage or the experiment runner.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: import package -> its folder: the stages keep their own top-level folders and install as harness.upstream
#: and harness.downstream (pyproject's package-dir), so one namespace holds everything
PACKAGES = {"harness": "harness", "harness.upstream": "upstream", "harness.downstream": "downstream"}
STAGES = ("harness.upstream", "harness.downstream")
#: the top layer: the experiment runner and the command line may import the stages
TOP = ("harness.cli", "harness.experiment")


def _modules() -> "dict[str, Path]":
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = pkg.split(".") + list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _package(module: str, modules: "dict[str, Path]") -> str:
    """The package a module belongs to (itself for a package's ``__init__``)."""
    return module if modules[module].name == "__init__.py" else module.rpartition(".")[0]


def _import_module_target(node: ast.AST) -> "str | None":
    """The module named by ``importlib.import_module("harness...")`` (or ``import_module``, ``__import__``), if
    ``node`` is such a call with a literal name; a dynamic import is an import, and the graph must see it."""
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
        return None
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    target = node.args[0].value
    if name in ("import_module", "__import__") and isinstance(target, str) and target.split(".")[0] == "harness":
        return target
    return None


def _imports(module: str, path: Path, modules: "dict[str, Path]") -> "list[tuple[str, list[str]]]":
    """(imported project module, names taken from it) for every import statement and every literal
    ``importlib.import_module`` call, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        target = _import_module_target(node)
        if target:
            out.append((target, []))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.split(".")[0] == "harness"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "harness":
                continue
            names = [a.name for a in node.names]
            subs = [f"{node.module}.{n}" for n in names if f"{node.module}.{n}" in modules]
            out += [(s, []) for s in subs]
            out.append((node.module, [n for n in names if f"{node.module}.{n}" not in modules]))
    return [(m, names) for m, names in out if m in modules and m != module]


@pytest.fixture(scope="module")
def graph() -> "dict[str, list[tuple[str, list[str]]]]":
    modules = _modules()
    return {m: _imports(m, p, modules) for m, p in modules.items()}


def test_the_graph_is_read(graph):
    assert len(graph) > 30
    assert ("harness.heads.variants", ["noise_layers"]) in graph["harness.upstream.optim"]  # from X import names
    assert "harness.uncertainty.metrics" in {
        m for m, _ in graph["harness.upstream.evaluation"]
    }  # from package import module
    assert "harness.report.render" in {m for m, _ in graph["harness.report.build"]}


def test_no_import_circles(graph):
    edges = {m: {t for t, _ in deps} for m, deps in graph.items()}
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    assert not cycles, f"import circles: {cycles}"


def test_no_private_name_is_taken_across_packages(graph):
    modules = _modules()
    bad = [
        f"{m} takes {n} from {t}"
        for m, deps in graph.items()
        for t, names in deps
        for n in names
        if n.startswith("_") and not n.startswith("__") and _package(t, modules) != _package(m, modules)
    ]
    assert not bad, "private names imported across packages: " + "; ".join(bad)


def test_dynamic_imports_are_seen():
    """``importlib.import_module("harness.x")`` is an arrow of the graph: a literal one is followed (the head
    bench's ``--before`` reads an old checkout's head by path, not by an import of this one)."""
    call = ast.parse('importlib.import_module("harness.heads")').body[0].value
    assert _import_module_target(call) == "harness.heads"
    modules = _modules()
    dynamic = [
        f"{m}: {t}"
        for m, p in modules.items()
        for node in ast.walk(ast.parse(p.read_text()))
        for t in [_import_module_target(node)]
        if t
    ]
    assert dynamic == ["harness.bench.heads: harness.heads"], dynamic


def test_the_stages_never_import_each_other(graph):
    """upstream and downstream are leaves above the library: what both need (the training loop, trackers, the
    precision rule, the tasks and the few-shot probe) lives in library rooms (harness.training, harness.tasks)."""
    bad = [
        f"{m} imports {t}"
        for m, deps in graph.items()
        for t, _ in deps
        for a, b in (STAGES, STAGES[::-1])
        if m.startswith(a) and t.startswith(b)
    ]
    assert not bad, "stage-to-stage imports: " + "; ".join(bad)


def test_imports_flow_one_way(graph):
    up = [
        f"{m} imports {t}" for m, deps in graph.items() for t, _ in deps if m.startswith(STAGES) and t.startswith(TOP)
    ]
    down = [
        f"{m} imports {t}"
        for m, deps in graph.items()
        for t, _ in deps
        if not m.startswith(STAGES + TOP) and t.startswith(STAGES)
    ]
    assert not up and not down, "imports against the layering: " + "; ".join(up + down)


#: what each library package may not import: the numbers are computed in uncertainty (and shift) and only
#: rendered in report; uncertainty and shift never reach into the report or the experiment runner
FORBIDDEN = {
    "harness.uncertainty": ("harness.report", "harness.shift", "harness.experiment", "harness.cli"),
    "harness.shift": ("harness.report", "harness.experiment", "harness.cli"),
    "harness.heads": ("harness.models", "harness.runs", "harness.report", "harness.shift", "harness.experiment"),
    "harness.report": ("harness.models", "harness.backbones", "harness.heads", "harness.experiment", "harness.cli"),
}
#: exceptions to FORBIDDEN: the variant registry is plain data (no torch), so the report may read which variants
#: have factors without reaching into the head
ALLOWED = {"harness.report": ("harness.heads.variants",)}
#: third-party modules that compute (models, optimisation, statistics): report may not import them
COMPUTING = ("torch", "scipy", "sklearn", "timm")


def _third_party(path: Path) -> "set[str]":
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_each_package_keeps_to_its_layer(graph):
    bad = [
        f"{m} imports {t}"
        for m, deps in graph.items()
        for t, _ in deps
        for pkg, banned in FORBIDDEN.items()
        if (m == pkg or m.startswith(pkg + ".")) and t.startswith(banned) and t not in ALLOWED.get(pkg, ())
    ]
    assert not bad, "; ".join(bad)


def test_report_only_renders():
    modules = _modules()
    bad = [
        f"{m} imports {lib}"
        for m, path in modules.items()
        if m.startswith("harness.report")
        for lib in _third_party(path) & set(COMPUTING)
    ]
    assert not bad, "report modules render numbers computed elsewhere: " + "; ".join(bad)


def test_one_namespace_is_installed():
    """pyproject installs every package under ``harness`` (no top-level ``upstream``/``downstream``)."""
    import tomllib

    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["package-dir"] == PACKAGES
    packages = {m for m, p in _modules().items() if p.name == "__init__.py"}
    assert set(tool["packages"]) == packages and all(p.split(".")[0] == "harness" for p in packages)


def test_test_file_names_are_unique():
    """pytest's default import mode names a test module by its file name: two tests/**/test_x.py collide."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_every_test_that_starts_debug_launcher_holds_the_port_lock():
    """accelerate's ``debug_launcher`` always meets at port 29500: under ``pytest -n 2`` two tests that start it
    at once would meet each other. Each test function whose file starts it asks for ``debug_launcher_port``
    (tests/conftest.py), which serialises them; a new one that forgets fails here."""
    unlocked = []
    for path in (ROOT / "tests").rglob("test_*.py"):
        text = path.read_text()
        if "debug_launcher(" not in text:
            continue
        tree = ast.parse(text)
        scripts = {
            t.id
            for n in ast.walk(tree)
            if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Constant)
            and "debug_launcher(" in str(n.value.value)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        for f in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
            uses = {n.id for n in ast.walk(f) if isinstance(n, ast.Name)} & scripts
            if uses and "debug_launcher_port" not in {a.arg for a in f.args.args}:
                unlocked.append(f"{path.relative_to(ROOT)}::{f.name}")
    assert unlocked == [], f"these start debug_launcher without the debug_launcher_port fixture: {unlocked}"


#: names with a leading underscore that their library documents as public
PUBLIC_UNDERSCORED = {"os._exit", "sys._getframe"}


def _imported_names(tree: ast.Module) -> "dict[str, str]":
    """Local name -> the module (or module.name) it is bound to, for every import of a library (not harness)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if not a.name.startswith("harness"):
                    out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and not (node.module or "").startswith("harness"):
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def test_no_private_api_of_another_library_is_called():
    """The guide's rule: never another library's private API (a name with one leading underscore reached through
    one of its modules or classes), e.g. ``torch.ops.aten._softmax`` or ``AcceleratorState._reset_state``."""
    bad = []
    for module, path in _modules().items():
        tree = ast.parse(path.read_text())
        libs = _imported_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            chain, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if not isinstance(value, ast.Name) or value.id not in libs:
                continue
            dotted = ".".join([libs[value.id], *reversed(chain)])
            if any(p.startswith("_") and not p.startswith("__") for p in chain) and dotted not in PUBLIC_UNDERSCORED:
                bad.append(f"{module}:{node.lineno} {dotted}")
    assert not bad, "private API of other libraries: " + "; ".join(sorted(set(bad)))


def test_every_name_imported_from_a_project_module_exists(graph):
    """Imports inside functions run only when the function does: a name moved or removed from a module must fail
    here, not in a user's run (e.g. ``from harness.models import load_source`` after it moved to harness.sources)."""
    import importlib

    missing = []
    for module, deps in graph.items():
        for target, names in deps:
            if not names:
                continue
            loaded = importlib.import_module(target)
            missing += [f"{module} takes {n} from {target}" for n in names if n != "*" and not hasattr(loaded, n)]
    assert not missing, "; ".join(missing)


#: the size limits (docs/development.md), counted on ruff-formatted code: 450 lines a module, 100 a function
#: (``end_lineno - lineno + 1``, docstring included). Limits, not targets: a module near 400 lines or a function
#: near 60 is a smell to examine, split only along a real seam.
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 450, 100


def test_modules_and_functions_keep_under_the_size_limits():
    big = []
    for module, path in _modules().items():
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            big.append(f"{module}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    big.append(f"{module}.{node.name}: {n} lines")
    assert not big, "over the size limits (split along a real seam): " + "; ".join(big)
