"""The package's layers: imports point down only, and no module imports itself round a circle.

The layers are read from docs/architecture.md's order (LAYERS below is that list). Every import counts, also one
inside a function or under ``TYPE_CHECKING``: a lazy import is still a dependency a reader has to follow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tracekit"

# Lowest first. A module may import from its own layer (no circles) and from layers below it.
LAYERS: list[tuple[str, ...]] = [
    ("tracekit.errors", "tracekit.rules"),  # the exceptions; the shipped rule tables (data)
    ("tracekit.common",),
    ("tracekit.schema",),
    ("tracekit.ingest",),
    ("tracekit.model",),
    ("tracekit.attribution",),
    ("tracekit.store",),
    ("tracekit.library",),
    ("tracekit.present",),
    ("tracekit.result",),
    ("tracekit.api",),
    ("tracekit.analysis", "tracekit.diff"),
    ("tracekit.cli", "tracekit.docgen"),
    ("tracekit.__main__",),
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _layer(module: str) -> int | None:
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    return None


def _typing_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:``."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def _imports(name: str, path: Path, typing: bool = True) -> set[str]:
    """The tracekit modules ``name`` imports (the package ``tracekit`` itself excluded: importing any
    submodule runs it, and the lower layers take only ``__version__`` from it); with ``typing`` false,
    not those under ``TYPE_CHECKING`` (they name a type for the checker and run nothing)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set() if typing else _typing_only(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != "tracekit" and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}
RUNTIME = {name: _imports(name, path, typing=False) for name, path in MODULES.items()}


def test_every_module_has_a_layer():
    assert [m for m in MODULES if m != "tracekit" and _layer(m) is None] == []


def test_imports_point_down():
    upward = [
        f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
        for m, targets in sorted(GRAPH.items())
        for t in sorted(targets)
        if m != "tracekit" and _layer(t) is not None and _layer(t) > _layer(m)
    ]
    assert upward == []


def test_no_import_circles():
    """No circle of imports that run (a report's renderer names the report's type for the checker only)."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(RUNTIME.get(m, ())):
            if state.get(t) == 1:
                cycles.append([*stack[stack.index(t) :], t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(RUNTIME):
        if m not in state:
            visit(m)
    assert [" -> ".join(c) for c in cycles] == []


@pytest.mark.parametrize("module", ["tracekit.capture", "tracekit.queries", "tracekit.rules"])
def test_no_module_shadows_a_data_package(module):
    import importlib.util

    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.submodule_search_locations, f"{module} is not a package"
    if module == "tracekit.queries":
        assert importlib.util.find_spec("tracekit.queries.core") is not None


def test_the_analyzer_does_not_import_capture():
    """Only the CLI's ``capture`` subcommand reaches the capture module (which needs torch)."""
    offenders = [
        m
        for m, targets in GRAPH.items()
        if m != "tracekit.cli" and any(t.startswith("tracekit.capture") for t in targets)
    ]
    assert offenders == []


def test_the_cache_key_covers_every_file_that_decides_a_database(tmp_path, monkeypatch):
    """A cached database is keyed by its inputs and by every file that decides its contents: editing a module
    of any layer, a shipped rule table, the stage vocabulary or a user rule folder's table changes the key."""
    import shutil

    from tracekit.schema import stages
    from tracekit.store import database

    package = tmp_path / "tracekit"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    vocabulary = tmp_path / "stages.csv"
    shutil.copy(stages.csv_path(), vocabulary)
    user_rules = tmp_path / "my_rules"
    user_rules.mkdir()
    (user_rules / "op_stages.csv").write_text("pattern,stage\n^my::attn$,fused_attention\n")
    monkeypatch.setenv("TRACEKIT_RULES_PATH", str(user_rules))

    edits = [
        *(package / layer / "__init__.py" for layer in ("ingest", "model", "attribution", "store", "schema")),
        package / "model" / "link.py",
        *sorted((package / "rules").glob("*.csv"))[:2],
        vocabulary,
        user_rules / "op_stages.csv",
    ]
    edits += sorted(package.rglob("*.sql"))[:3]  # the model's SQL modules, where there are any
    key = database.code_fingerprint(package, vocabulary)
    for path in edits:
        with path.open("a") as fh:
            fh.write("\n")
        changed = database.code_fingerprint(package, vocabulary)
        assert changed != key, f"editing {path.relative_to(tmp_path)} left the cache key as it was"
        key = changed
    # The key is stable while nothing changes.
    assert database.code_fingerprint(package, vocabulary) == key


def test_every_sql_module_ships_in_the_wheel():
    """Each package's sql/ folder (and its subfolders) is package data of that package in pyproject.toml."""
    import fnmatch

    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    missing = []
    for path in sorted(PACKAGE.rglob("sql/**/*.sql")):
        package = ".".join(path.relative_to(ROOT).parts[: path.relative_to(ROOT).parts.index("sql")])
        inside = path.relative_to(ROOT / package.replace(".", "/")).as_posix()
        if not any(
            fnmatch.fnmatch(inside, glob) and glob.count("/") == inside.count("/") for glob in data.get(package, [])
        ):
            missing.append(inside if package else str(path))
    assert missing == []
