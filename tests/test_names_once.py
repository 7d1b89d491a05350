"""Every name once (issue 39 item 4): no re-export shims, and a public name that two modules of src/gpuseat
both define at top level
is either one of the hooks each module of a kind defines by design (listed here with why), or a defect —
the same fact kept twice (two ``HELD`` tuples, two ``ClaimMode`` literals, two host-name rules that give one
value different verdicts) or one name with two meanings (``SeatState`` a literal and a class).

Private names (``_x``) are each module's own business and are not counted; Alembic revisions are history.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from pysource import parse_file

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuseat"

#: names each module of one kind defines by design: the same role in every one, looked up through the module
BY_DESIGN: dict[str, str] = {
    "register": "each cli/ module adds its commands to the app with register(app)",
    "render": "each render/ module's entry point (the Renderer protocol in render/base.py)",
    "RENDERER": "each render/ module's Renderer value, collected by render/__init__.py",
    "router": "each web/routes/ module's APIRouter",
    "log": "each module's logger, logging.getLogger(__name__)",
    "plan_requests": "each engine's seat-request module: the steps for the holder's stop/start/… requests",
    "do_request": "each engine's seat-request module: carrying out one of those steps",
    "SCHEMA_VERSION": "each JSON file format's own version (plan, carve, readings, doctor, bench, export)",
    "T": "a module's own TypeVar",
    "HERE": "a module's own folder (templates and static files beside it)",
    "ENGINE": "an engine's name in the registry, kept beside the code that writes it (seats' engine column)",
    "Course": "db/models.py keeps Course as the documented old name of CourseRecord (a deprecation alias); "
    "gpuseat.core.course.Course is the course file",
}


def _top_level_names(path: Path) -> list[str]:
    """The names ``path`` binds at its top level by def, class or assignment (not by import)."""
    names: list[str] = []
    for node in parse_file(path).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return names


def defined_twice(root: Path) -> dict[str, list[str]]:
    """Public top-level name → the modules under ``root`` that define it, where more than one does."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if "migrations" in rel.parts:
            continue
        for name in set(_top_level_names(path)):
            if not name.startswith("_"):
                where[name].append(rel.as_posix())
    return {name: files for name, files in where.items() if len(files) > 1}


def test_every_public_name_is_defined_once() -> None:
    twice = {name: files for name, files in defined_twice(SRC).items() if name not in BY_DESIGN}
    assert not twice, "defined in more than one module (define it once and import it, or rename what differs):\n" + (
        "\n".join(f"  {name}: {', '.join(files)}" for name, files in sorted(twice.items()))
    )


def test_the_list_of_hooks_names_only_what_exists() -> None:
    """A hook name no longer defined twice leaves the list: the list cannot hide a new second meaning."""
    twice = defined_twice(SRC)
    assert not [name for name in BY_DESIGN if name not in twice]


def test_the_scan_sees_a_name_defined_twice(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text('HELD = ("requested", "running")\n_private = 1\n')
    (tmp_path / "b.py").write_text('from a import _private\nHELD = ("requested", "running")\n_private = 2\n')
    (tmp_path / "c.py").write_text("class SeatState:\n    pass\n")
    (tmp_path / "d.py").write_text("from typing import Literal\nSeatState: type = Literal['running']\n")
    assert defined_twice(tmp_path) == {"HELD": ["a.py", "b.py"], "SeatState": ["c.py", "d.py"]}


def only_re_exports(root: Path) -> list[str]:
    """Modules under ``root`` (not packages' ``__init__``) that define nothing: imports, ``__all__`` and a
    docstring only — a second address for names that live elsewhere (a re-export shim)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py") or "migrations" in path.parts:
            continue
        body = parse_file(path).body
        imports = [n for n in body if isinstance(n, ast.Import | ast.ImportFrom)]
        rest = [
            n
            for n in body
            if not isinstance(n, ast.Import | ast.ImportFrom | ast.If)
            and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
            and not (isinstance(n, ast.Assign) and [getattr(t, "id", "") for t in n.targets] == ["__all__"])
        ]
        if imports and not rest:
            found.append(path.relative_to(root).as_posix())
    return found


def test_no_module_only_re_exports_another() -> None:
    assert only_re_exports(SRC) == []


def test_the_shim_check_sees_a_shim(tmp_path: Path) -> None:
    (tmp_path / "health.py").write_text(
        '"""Re-exported."""\nfrom store.health import lost_gpus\n__all__ = ["lost_gpus"]\n'
    )
    (tmp_path / "real.py").write_text("from os import path\n\n\ndef f():\n    return path\n")
    (tmp_path / "__init__.py").write_text("from real import f\n")
    assert only_re_exports(tmp_path) == ["health.py"]
