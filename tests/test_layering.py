"""The layering rules, checked on the source with ``ast`` (every import, also inside functions).

- core/ and render/ are pure: no catalog loaders, no db, monitor, cli, doctor, services or web;
  the catalog reaches them as a value (:class:`gpuseat.catalog.bundle.Catalog`).
- db never imports monitor, and monitor never imports db (it reaches the store through a protocol
  that the service layer fills in), so there is no cycle between them.
- Nothing below cli/ and web/ imports them.
- store/ is the one owner of SQL: only store/ and db/ import SQLAlchemy or the ORM models
  (``gpuseat.db.models``), and store/ itself imports no services, monitor, cli or web; only they
  reach the store's database handle (its engine, sessions, writer queue: ``store.database``, ``_engine``).
- No import cycle between any two modules of src/gpuseat (a package counts as its ``__init__``;
  ``from pkg import name`` imports ``pkg`` and, where ``name`` is a module, ``pkg.name``; imports under
  ``if TYPE_CHECKING:`` do not count, as they do not run).
"""

from __future__ import annotations

import ast
from collections import deque
from itertools import pairwise
from pathlib import Path

import pytest

from pysource import parse_file

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuseat"

LOADERS = {
    "gpuseat.catalog": {
        "find_gpu",
        "gpu_models",
        "resolve_gpu",
        "reference_results",
        "data_toml",
        "data_csv",
        "data_text",
    },
    "gpuseat.catalog.partitions": {"partition_catalog"},
    "gpuseat.catalog.licences": {"licences"},
    "gpuseat.catalog.offers": {"bundled_offers", "provider_rules"},
    "gpuseat.catalog.doctor": {"doctor_catalog"},
    "gpuseat.catalog.bundle": {"load_catalog"},
    "gpuseat.bench.results": {"recorded_results"},
}
LOADER_NAMES = set().union(*LOADERS.values())


def _imports(path: Path, root: Path) -> list[tuple[str, str | None, int]]:
    """(module, imported name or None, line) for every import statement in the file."""
    tree = parse_file(path)
    package = ".".join(path.relative_to(root.parent).with_suffix("").parts[:-1])
    found: list[tuple[str, str | None, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = parts[: len(parts) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found += [(base, alias.name, node.lineno) for alias in node.names]
    return found


def _violations(folders: list[str], banned_prefixes: tuple[str, ...], loaders: bool, root: Path = SRC) -> list[str]:
    out = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            for module, name, line in _imports(path, root):
                full = f"{module}.{name}" if name else module
                where = f"{path.relative_to(root.parent)}:{line}"
                if any(full == p or full.startswith(p + ".") or module == p for p in banned_prefixes):
                    out.append(f"{where} imports {full}")
                if loaders and name in LOADERS.get(module, set()):
                    out.append(f"{where} imports the catalog loader {module}.{name}")
            if loaders:  # a loader reached some other way (a module attribute, a re-export) is still a call
                tree = parse_file(path)
                for node in ast.walk(tree):
                    if isinstance(node, ast.Call):
                        func = node.func
                        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                        if called in LOADER_NAMES and not (isinstance(func, ast.Attribute) and _on_value(func)):
                            out.append(f"{path.relative_to(root.parent)}:{node.lineno} calls the loader {called}()")
    return out


def _on_value(func: ast.Attribute) -> bool:
    """``catalog.find_gpu(...)`` is a method of the Catalog value passed in, not a loader."""
    value = func.value
    if isinstance(value, ast.Attribute):  # self.catalog.find_gpu(...)
        return value.attr in {"catalog", "cat"}
    return isinstance(value, ast.Name) and value.id in {"catalog", "cat", "self"}


@pytest.mark.parametrize("folder", ["core", "render"])
def test_core_and_render_are_pure(folder: str) -> None:
    banned = ("gpuseat.db", "gpuseat.monitor", "gpuseat.cli", "gpuseat.doctor", "gpuseat.services", "gpuseat.web")
    assert _violations([folder], banned, loaders=True) == []


def test_the_planner_core_reads_no_files_and_no_bench_store() -> None:
    """Recorded bench speeds reach the planner as an argument; course and offer files are read by services."""
    files = ["core/plan", "core/cost.py", "core/course.py", "core/needs.py"]
    out = []
    for entry in files:
        path = SRC / entry
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            for module, name, line in _imports(f, SRC):
                full = f"{module}.{name}" if name else module
                if full.startswith(("gpuseat.bench", "gpuseat.files")) or module in ("gpuseat.bench", "gpuseat.files"):
                    out.append(f"{f.relative_to(SRC.parent)}:{line} imports {full}")
    assert out == []


def test_no_cycle_between_db_and_monitor() -> None:
    assert _violations(["db"], ("gpuseat.monitor",), loaders=False) == []
    assert _violations(["monitor"], ("gpuseat.db",), loaders=False) == []


def test_only_front_ends_import_front_ends() -> None:
    below = [p.name for p in SRC.iterdir() if p.is_dir() and p.name not in {"cli", "web", "__pycache__"}]
    assert _violations(below, ("gpuseat.cli", "gpuseat.web"), loaders=False) == []


def test_only_the_store_speaks_sql() -> None:
    """Every query and write lives in gpuseat.store (and the schema, migrations and connection in db)."""
    others = [p.name for p in SRC.iterdir() if p.is_dir() and p.name not in {"store", "db", "__pycache__"}]
    top = [p.relative_to(SRC).as_posix() for p in SRC.glob("*.py")]
    out = []
    for entry in [*others, *top]:
        path = SRC / entry
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            for module, name, line in _imports(f, SRC):
                full = f"{module}.{name}" if name else module
                if module.split(".")[0] in {"sqlalchemy", "alembic"} or full.startswith("gpuseat.db.models"):
                    out.append(f"{f.relative_to(SRC.parent)}:{line} imports {full}")
    assert out == []


#: the store's handle and what it holds; only store/ and db/ may reach them
HANDLE_PARTS = frozenset({"engine", "writer", "read", "write", "queue", "turns", "lock_path"})
#: the old facade's private sessions and engine (any object's)
PRIVATE_DB = frozenset({"_engine", "_read", "_write", "_turns", "_lock_path", "_database"})


def _handle_uses(root: Path = SRC) -> list[str]:
    """Places outside store/ and db/ that reach the database handle: ``x._engine``, ``x._read()``, or
    ``store.database.engine`` / ``.read()`` / ``.write()`` … (sessions, connections and engines stay in the store)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] in {"store", "db"}:
            continue
        for node in ast.walk(parse_file(path)):
            if not isinstance(node, ast.Attribute):
                continue
            through = isinstance(node.value, ast.Attribute) and node.value.attr == "database"
            if node.attr in PRIVATE_DB or (through and node.attr in HANDLE_PARTS):
                out.append(f"{path.relative_to(root.parent)}:{node.lineno} uses .{node.attr}")
    return out


def test_only_the_store_touches_sessions_connections_and_the_engine() -> None:
    """One owner of the database handle: everything else calls a concern (``store.seats.assign``)."""
    assert _handle_uses() == []


def test_the_handle_check_sees_a_violation(tmp_path: Path) -> None:
    (tmp_path / "gpuseat" / "web").mkdir(parents=True)
    (tmp_path / "gpuseat" / "store").mkdir()
    (tmp_path / "gpuseat" / "web" / "page.py").write_text(
        "def f(store):\n    with store._engine.connect():\n        pass\n"
        "    with store.database.read() as s:\n        return s\n"
        "    store.seats.assign(None, 'a', 'b')\n"
    )
    (tmp_path / "gpuseat" / "store" / "ok.py").write_text("def g(store):\n    return store.database.engine\n")
    found = _handle_uses(tmp_path / "gpuseat")
    assert sorted(found) == ["gpuseat/web/page.py:2 uses ._engine", "gpuseat/web/page.py:4 uses .read"]


def _type_only_lines(path: Path) -> set[int]:
    """Lines of imports under ``if TYPE_CHECKING:`` (annotations only: no import at run time)."""
    lines: set[int] = set()
    for node in ast.walk(parse_file(path)):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            for inner in node.body:
                for sub in ast.walk(inner):
                    if isinstance(sub, ast.Import | ast.ImportFrom):
                        lines.add(sub.lineno)
    return lines


def test_the_store_sits_below_services_and_front_ends() -> None:
    """At run time store/ and db/ import no services, monitor, cli, web or hub code (type-only imports of
    the shared value types, e.g. ``services.engine.Access``, are allowed)."""
    banned = ("gpuseat.services", "gpuseat.monitor", "gpuseat.cli", "gpuseat.web", "gpuseat.jupyterhub")
    out = []
    for folder in ("store", "db"):
        for path in sorted((SRC / folder).rglob("*.py")):
            typed = _type_only_lines(path)
            for module, name, line in _imports(path, SRC):
                full = f"{module}.{name}" if name else module
                if line not in typed and any(full == b or full.startswith(b + ".") for b in banned):
                    out.append(f"{path.relative_to(SRC.parent)}:{line} imports {full}")
    assert out == []


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(root: Path = SRC) -> tuple[dict[str, dict[str, int]], dict[str, Path]]:
    """Module → {module of src/ it imports at run time → the line of the first such import}, and the files."""
    files = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, dict[str, int]] = {}
    for name, path in files.items():
        typed = _type_only_lines(path)
        edges: dict[str, int] = {}
        for module, imported, line in _imports(path, root):
            if line in typed:
                continue
            for target in (module, f"{module}.{imported}" if imported else module):
                if target in files and target != name:
                    edges[target] = min(line, edges.get(target, line))
        graph[name] = edges
    return graph, files


def _strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's algorithm: the components of more than one module (each holds at least one cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _one_cycle(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth first, inside the component)."""
    start, inside = component[0], set(component)
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v]):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if w in inside and w != start and w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle through {start}")  # a strongly connected component always has one


def _cycles(root: Path = SRC) -> list[str]:
    """One line per import cycle: the modules round the cycle, then where each import is."""
    graph, files = _import_graph(root)
    out = []
    for component in _strongly_connected(graph):
        cycle = _one_cycle(graph, component)
        steps = [f"{files[a].relative_to(root.parent)}:{graph[a][b]} imports {b}" for a, b in pairwise(cycle)]
        others = f" (component: {', '.join(component)})" if len(component) > len(cycle) - 1 else ""
        out.append(f"import cycle {' -> '.join(cycle)}: {'; '.join(steps)}{others}")
    return out


def test_no_import_cycles() -> None:
    """No two modules of src/ import each other, directly or round a longer loop: a shared piece moves down
    into a module both import (a run-time import inside a function counts too)."""
    assert _cycles() == []


def test_the_cycle_check_sees_a_cycle(tmp_path: Path) -> None:
    """A cycle through a function-level, relative and package import is found and named; a type-only one is not."""
    root = tmp_path / "gpuseat"
    (root / "pkg").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "pkg" / "__init__.py").write_text("from gpuseat.pkg.low import x\n")
    (root / "pkg" / "low.py").write_text("x = 1\n\ndef f():\n    from .helper import y\n")
    (root / "pkg" / "helper.py").write_text("from gpuseat.pkg import x\n\ny = x\n")
    (root / "typed.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from gpuseat import other\n"
    )
    (root / "other.py").write_text("import gpuseat.typed\n")
    found = _cycles(root)
    assert found == [
        "import cycle gpuseat.pkg -> gpuseat.pkg.low -> gpuseat.pkg.helper -> gpuseat.pkg: "
        "gpuseat/pkg/__init__.py:1 imports gpuseat.pkg.low; gpuseat/pkg/low.py:4 imports gpuseat.pkg.helper; "
        "gpuseat/pkg/helper.py:1 imports gpuseat.pkg"
    ]


def test_the_store_and_the_monitor_agree_on_the_gpu_lost_kind() -> None:
    from gpuseat.monitor.alerts import GPU_LOST
    from gpuseat.store import health

    assert health.GPU_LOST == GPU_LOST


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    """The walker finds imports inside functions and relative imports (so the rules above can fail)."""
    probe = tmp_path / "gpuseat" / "core" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(
        "def f():\n    from ..catalog import find_gpu\n    import gpuseat.db.store\n"
        "    import gpuseat.catalog.partitions as parts\n    parts.partition_catalog()\n"
    )
    found = _violations(["core"], ("gpuseat.db",), loaders=True, root=tmp_path / "gpuseat")
    assert any("gpuseat.db.store" in v for v in found)
    assert any("catalog loader gpuseat.catalog.find_gpu" in v for v in found)
    assert any("calls the loader partition_catalog()" in v for v in found)
