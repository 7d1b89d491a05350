"""The public surface: the error tree is exported and documented, and no public type name means two things."""

from __future__ import annotations

import ast
import inspect
import re
from collections import defaultdict
from pathlib import Path

import pytest

import gpuseat
from gpuseat import errors
from pysource import parse_file

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "gpuseat"


def _error_classes() -> set[str]:
    return {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, errors.GpuseatError) and not name.startswith("_")
    }


def _documented_tree() -> dict[str, str]:
    """Class → parent, read from the tree drawing in docs/api.md's Errors section."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    block = text.split("## Errors", 1)[1].split("```", 2)[1]
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        m = re.match(r"^([│├└─ ]*)([A-Z]\w+)", line)
        if not m:
            continue
        depth, name = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[name] = stack[-1][1] if stack else ""
        stack.append((depth, name))
    return parents


def test_every_error_is_exported_and_documented_with_its_parent() -> None:
    classes = _error_classes()
    assert classes <= set(gpuseat.__all__), classes - set(gpuseat.__all__)
    tree = _documented_tree()
    assert set(tree) == classes
    for name, parent in tree.items():
        cls = getattr(gpuseat, name)
        assert cls.__mro__[1].__name__ == (parent or "Exception"), name


def test_errors_module_docstring_draws_the_same_tree() -> None:
    drawn = set(re.findall(r"^    [│├└─ ]*([A-Z]\w+)\s{2,}", errors.__doc__ or "", re.M))
    assert drawn == _error_classes()


def test_no_public_class_name_is_defined_twice() -> None:
    """One name, one meaning: e.g. the monitor's view of a tick is TickView, the store's seat is SeatView."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(parse_file(path)):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].append(str(path.relative_to(SRC)))
    twice = {name: files for name, files in where.items() if len(files) > 1}
    assert twice == {}


def test_the_scan_sees_a_duplicate(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class Seat: ...\n")
    (tmp_path / "b.py").write_text("def f():\n    class Seat: ...\n")
    names = [
        n.name for p in sorted(tmp_path.glob("*.py")) for n in ast.walk(parse_file(p)) if isinstance(n, ast.ClassDef)
    ]
    assert names == ["Seat", "Seat"]


def test_store_errors_name_fields_and_the_cli_names_flags(tmp_path: Path, cli) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with gpuseat.open_store(url, create=True) as store:
        store.courses.create_course(ROOT / "examples" / "course-2016.toml", key="dl-2016")
        with pytest.raises(gpuseat.NotFound) as info:
            store.courses.get_course("dl-2017")
        assert info.value.where == "course" and "dl-2016" in info.value.message
        with pytest.raises(gpuseat.NotFound) as info:
            store.claims.claim_seat("dl-2016", "nobody")
        assert info.value.where == "participant"
        with pytest.raises(gpuseat.InputError) as bad:
            store.courses.create_course(ROOT / "examples" / "course-2016.toml", key="Not A Slug")
        assert bad.value.where == "key"
    r = cli("seats", "status", "--course", "dl-2017", "--db", url)
    assert r.code == 2 and r.err.startswith("error: --course: no course 'dl-2017'"), r.err


def test_a_bare_string_is_not_taken_for_a_roster(tmp_path: Path) -> None:
    """``import_roster("a", "roster.csv")`` once parsed the file *name* as CSV; now a str is refused."""
    (tmp_path / "roster.csv").write_text("name,email\nAda,ada@example.org\n")
    with gpuseat.open_store(f"sqlite:///{tmp_path / 'c.db'}", create=True) as store:
        store.courses.create_course(ROOT / "examples" / "course-2016.toml", key="a")
        with pytest.raises(TypeError, match="not a str"):
            store.roster.import_roster("a", str(tmp_path / "roster.csv"))  # type: ignore[arg-type]
        report = store.roster.import_roster("a", tmp_path / "roster.csv")
        assert report.added == 1 and store.roster.participants("a")[0].email == "ada@example.org"
