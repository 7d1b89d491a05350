"""Start-up loads only what a command uses: which modules a fresh ``gpuseat`` process imports.

Behaviour, not timing: each check runs a real child interpreter and reads its ``sys.modules``
(issue 39, Performance). Timings are ``benchmarks/bench_startup.py``'s job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from gpuseat.cli import COMMANDS, build_app

ROOT = Path(__file__).resolve().parents[1]

#: what no command needs at start-up: the store's ORM, the portal, cluster clients, the benchmark
NEVER_AT_IMPORT = {"sqlalchemy", "alembic", "fastapi", "starlette", "uvicorn", "kubernetes", "torch"}


def _modules(code: str, tmp_path: Path) -> set[str]:
    """Every module in ``sys.modules`` after ``code`` ran in a fresh interpreter (data folder in tmp_path)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") or k == "GPUSEAT_CACHE_DIR"}
    env.update(GPUSEAT_DATA_DIR=str(tmp_path / "data"), HOME=str(tmp_path))
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)"
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def _loaded(code: str, tmp_path: Path) -> set[str]:
    """Top-level packages in ``sys.modules`` after ``code`` ran in a fresh interpreter."""
    return {name.split(".")[0] for name in _modules(code, tmp_path)}


def test_import_cli_loads_no_heavy_package(tmp_path: Path) -> None:
    loaded = _loaded("import gpuseat.cli", tmp_path)
    assert "gpuseat" in loaded  # the probe sees what was imported
    assert not loaded & {"click", "typer"}  # imported by main(), with the collector paused (collect_later)
    assert not loaded & NEVER_AT_IMPORT
    assert not loaded & {"pydantic", "highspy", "numpy", "rich"}


def test_plan_help_loads_no_solver_validator_or_rich(tmp_path: Path) -> None:
    loaded = _loaded("from gpuseat.cli import main\nassert main(['plan', '--help']) == 0", tmp_path)
    assert not loaded & (NEVER_AT_IMPORT | {"pydantic", "highspy", "numpy", "rich"})


def test_plan_json_loads_no_store_or_rich(tmp_path: Path) -> None:
    loaded = _loaded(
        "from gpuseat.cli import main\nassert main(['plan', 'examples/course-2016.toml', '-f', 'json']) == 0",
        tmp_path,
    )
    assert "pydantic" in loaded  # the course file was really validated and priced
    assert not loaded & (NEVER_AT_IMPORT | {"rich"})


def _status(tmp_path: Path, *args: str) -> tuple[set[str], str]:
    """(modules loaded, the printed table) of ``gpuseat seats status ARGS`` in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") or k == "GPUSEAT_CACHE_DIR"}
    env.update(GPUSEAT_DATA_DIR=str(tmp_path / "data"), HOME=str(tmp_path), COLUMNS="200")
    code = (
        f"from gpuseat.cli import main\nassert main(['seats', 'status', *{list(args)!r}]) == 0\n"
        "import json, sys\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stderr.strip().splitlines()[-1])), proc.stdout


def test_seats_status_reads_without_the_orm(tmp_path: Path) -> None:
    """``seats status`` reads through the light path (the DB-API driver, :mod:`gpuseat.store.lite`): no
    SQLAlchemy, no Pydantic; a database URL the light path does not take (driver options) goes through
    the full store, and both print the same table."""
    steps = [
        ["course", "create", "examples/course-2016.toml", "--plan-option", "1"],
        ["roster", "import", "examples/roster-16.csv"],
        ["seats", "add", "--cloud"],
        ["seats", "assign"],
    ]
    _modules(f"from gpuseat.cli import main\nfor s in {steps!r}:\n    assert main(s) == 0", tmp_path)
    loaded, light = _status(tmp_path, "-f", "json")
    assert "gpuseat.store.lite" in loaded and "sqlite3" in loaded  # the seats were really read
    assert not {name.split(".")[0] for name in loaded} & (NEVER_AT_IMPORT | {"pydantic", "pydantic_core"})
    assert not loaded & {"gpuseat.core.course", "gpuseat.readings", "gpuseat.core.roster", "gpuseat.catalog"}
    rows = json.loads(light)
    assert len(rows) == 16 and all(r["participant"] for r in rows)  # 4 server seats and 12 cloud seats, assigned
    database = next((tmp_path / "data").rglob("*.db"))
    loaded, full = _status(tmp_path, "-f", "json", "--db", f"sqlite:///{database}?timeout=5")
    assert "sqlalchemy.orm" in loaded and "gpuseat.store.seats" in loaded  # the full store read it
    assert "gpuseat.core.course" not in loaded  # a type only in store/rows.py: parsing course files is not needed
    assert json.loads(full) == rows


def test_store_package_loads_a_name_only_when_asked(tmp_path: Path) -> None:
    """``from gpuseat.store import open_store`` loads the opening, not every concern or Pydantic."""
    loaded = _modules("from gpuseat.store import open_store", tmp_path)
    assert "gpuseat.store.opening" in loaded
    assert not loaded & {"gpuseat.store.specs", "gpuseat.store.views", "gpuseat.store.rows", "gpuseat.core.roster"}
    assert not {name.split(".")[0] for name in loaded} & {"pydantic", "rich"}
    every = _modules("import gpuseat.store\nfor n in gpuseat.store.__all__:\n    getattr(gpuseat.store, n)", tmp_path)
    assert {"gpuseat.store.specs", "gpuseat.store.tokens", "gpuseat.core.roster"} <= every


def test_store_package_refuses_an_unknown_name() -> None:
    import gpuseat.store

    with pytest.raises(ImportError, match="no_such_name"):
        exec("from gpuseat.store import no_such_name", {})
    assert sorted(dir(gpuseat.store)) == sorted(set(dir(gpuseat.store)) | set(gpuseat.store.__all__))


@pytest.mark.parametrize("module", sorted(COMMANDS))
def test_each_module_adds_exactly_its_listed_commands(module: str) -> None:
    """``gpuseat <name>`` registers only the module :data:`COMMANDS` names for it, so the list must be exact."""
    group = typer.main.get_group(build_app(module))
    assert tuple(group.commands) == COMMANDS[module]


def test_whole_app_lists_every_command_once() -> None:
    group = typer.main.get_group(build_app())
    names = [n for names in COMMANDS.values() for n in names]
    assert sorted(group.commands) == sorted(names)
    assert len(names) == len(set(names))
