"""Issue 9: no db ↔ monitor cycle. The database layer never imports the monitor; the monitor reaches the
database only through the ``SampleStore`` protocol (``gpuseat.readings``); the shared types live in the
neutral ``gpuseat.readings``, which imports neither; nvidia-smi is spawned only by ``gpuseat.nvsmi``."""

from __future__ import annotations

import ast
from pathlib import Path

from pysource import parse_file, parse_text

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuseat"


def imports(path: Path) -> set[str]:
    """Every module a file imports (top level, inside functions and under TYPE_CHECKING)."""
    out: set[str] = set()
    for node in ast.walk(parse_file(path)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def files(package: str) -> list[Path]:
    return sorted((SRC / package).rglob("*.py"))


def test_db_never_imports_monitor():
    for path in files("db"):
        bad = {m for m in imports(path) if m.startswith("gpuseat.monitor")}
        assert not bad, f"{path.relative_to(SRC)} imports {bad}"


def test_monitor_reaches_db_only_through_the_service_layer():
    for path in files("monitor"):
        bad = {m for m in imports(path) if m.startswith("gpuseat.db")}
        assert not bad, f"{path.relative_to(SRC)} imports {bad}"


def test_readings_and_nvsmi_are_neutral():
    for name in ("readings.py", "nvsmi.py"):
        bad = {m for m in imports(SRC / name) if m.startswith(("gpuseat.monitor", "gpuseat.db", "gpuseat.cli"))}
        assert not bad, f"{name} imports {bad}"


def test_only_the_adapter_spawns_nvidia_smi():
    spawners = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "subprocess" in imports(path) and "nvidia-smi" in text and path.name != "nvsmi.py":
            tree = parse_text(text)
            calls = [
                n for n in ast.walk(tree)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("run", "Popen")
                and any(isinstance(a, ast.Constant) and a.value == "nvidia-smi" for a in ast.walk(n))
            ]  # fmt: skip
            if calls:
                spawners.append(str(path.relative_to(SRC)))
    assert spawners == []


def test_one_data_dir_resolver():
    users = [p for p in SRC.rglob("*.py") if "user_data_dir" in p.read_text(encoding="utf-8")]
    assert [str(p.relative_to(SRC)) for p in users] == ["paths.py"]
