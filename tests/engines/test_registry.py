"""The registry is the one list of engines, and every engine implements the one interface."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel

from gpuseat.engines import registry
from gpuseat.engines.base import Engine, StepEngine
from pysource import parse_file

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuseat"
METHODS = ("plan", "apply", "observe", "check", "connect", "probe")


@pytest.mark.parametrize("name", registry.delivering())
def test_every_engine_implements_the_interface(name: str) -> None:
    spec = registry.spec(name)
    cls = spec.load()
    assert cls.name == name, "the class names itself as the registry does"
    assert issubclass(cls, StepEngine)
    for method in METHODS:
        assert callable(getattr(cls, method, None)), f"{cls.__name__}.{method}"
    params = inspect.signature(cls.__init__).parameters
    assert {"store", "course", "settings", "runner", "host"} <= set(params), params
    model = spec.settings_model()
    assert model is not None and issubclass(model, BaseModel)
    assert model.model_config.get("extra") == "forbid", "a misspelt setting is refused, not ignored"
    assert "timeout" in model.model_fields, "seats check passes its timeout to every engine"
    assert all(f.description for f in model.model_fields.values()), "every setting says what it is"
    assert set(spec.kinds) and spec.doc


def test_an_engine_built_through_the_registry_is_an_engine(tmp_path: Path) -> None:
    from gpuseat.engines.runner import RecordingRunner
    from gpuseat.store import open_store

    (tmp_path / "c.toml").write_text('name = "x"\nparticipants = 1\n[schedule]\nstart = 2026-09-07\ndays = 2\n')
    with open_store(f"sqlite:///{tmp_path / 'c.db'}", create=True) as store:
        store.courses.create_course(tmp_path / "c.toml", key="c")
        engine = registry.build("host", store, "c", runner=RecordingRunner())
        assert isinstance(engine, Engine)


def test_bad_settings_are_one_clear_error() -> None:
    from gpuseat.errors import InputError

    with pytest.raises(InputError) as bad:
        registry.validate_settings("host", {"ssh_prot": "22"})
    assert "ssh_prot" in bad.value.what and "ssh_port" in (bad.value.fix or "")
    with pytest.raises(InputError) as unknown:
        registry.spec("nomad")
    assert "host" in (unknown.value.fix or "")


def test_no_other_list_of_engines() -> None:
    """Engine names appear as a list only in the registry (the old lists in seating/engine are gone)."""
    names = set(registry.names())
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.name == "registry.py":
            continue
        for node in ast.walk(parse_file(path)):
            if isinstance(node, ast.Tuple | ast.List | ast.Set) and len(node.elts) >= 4:
                words = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                if len(words & names) >= 4 and {"host", "slurm"} <= words:
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert offenders == []


def test_a_plugin_engine_registers_through_an_entry_point(tmp_path: Path) -> None:
    """A third-party package adds an engine with an entry point in the ``gpuseat.engines`` group."""
    pkg = tmp_path / "site"
    (pkg / "mycloud_gpuseat").mkdir(parents=True)
    (pkg / "mycloud_gpuseat" / "__init__.py").write_text(
        textwrap.dedent(
            """
            from gpuseat.engines.registry import EngineSpec
            SPEC = EngineSpec("mycloud", ("cloud",), "gpuseat.engines.host.engine:HostEngine",
                              "gpuseat.engines.host.engine:HostSettings", "A plug-in engine.")
            """
        )
    )
    dist = pkg / "mycloud_gpuseat-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mycloud-gpuseat\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[gpuseat.engines]\nmycloud = mycloud_gpuseat:SPEC\n")
    code = "from gpuseat.engines import registry; print(registry.names()); print(registry.spec('mycloud').doc)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(pkg), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "'mycloud'" in done.stdout and "A plug-in engine." in done.stdout


def test_engines_list_shows_the_registry(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("engines", "list", "--format", "json")
    assert r.code == 0
    import json

    assert [row["engine"] for row in json.loads(r.out)] == list(registry.names())
