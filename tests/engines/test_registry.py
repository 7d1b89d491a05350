"""The registry is the one list of engines, and every engine implements the one interface."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
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
    assert [row["engine"] for row in json.loads(r.out)] == list(registry.names())


# -- plug-ins installed beside gpuseat -------------------------------------------------------------------------

ROOT = SRC.parents[1]
GPUS = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-11111111-2222-3333-4444-55555555555{i})\n" for i in range(3))


def _site(where: Path, modules: dict[str, str], entry_points: dict[str, str]) -> Path:
    """A folder on sys.path holding ``modules`` (dotted name → source) and one installed distribution whose
    ``gpuseat.engines`` entry points are ``entry_points`` (name → ``module:attr``), as pip would leave them."""
    for name, source in modules.items():
        path = where.joinpath(*name.split(".")) / "__init__.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    dist = where / "plugs-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugs\nVersion: 1.0\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    (dist / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n{lines}")
    return where


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], None]]:
    """Put a site folder on sys.path for this test only; the registry reads the entry points again, and its
    modules are forgotten after the test."""
    tops: set[str] = set()

    def use(site: Path) -> None:
        monkeypatch.syspath_prepend(str(site))
        tops.update(p.name for p in site.iterdir() if p.is_dir() and not p.name.endswith(".dist-info"))
        registry._plugins.cache_clear()
        registry.specs.cache_clear()

    yield use
    registry._plugins.cache_clear()
    registry.specs.cache_clear()
    for name in [n for n in sys.modules if n.partition(".")[0] in tops]:
        del sys.modules[name]


def test_an_engine_name_fits_where_it_is_stored() -> None:
    """A seat's engine is a 16-character column (PostgreSQL refuses more) and ``apply --set`` reads the name up to
    the first dot: a spec whose name does not fit is refused where it is made, so a plug-in with it cannot load."""
    from gpuseat.db.models import EngineSetting, Seat

    assert Seat.__table__.c.engine.type.length == 16 <= EngineSetting.__table__.c.engine.type.length
    assert registry.EngineSpec("a" * 16, ("gpu",), None, None, "d").name == "a" * 16
    for bad in ("a" * 17, "my.cloud", "MyCloud", "-x", ""):
        with pytest.raises(ValueError, match="1 to 16 lowercase letters"):
            registry.EngineSpec(bad, ("gpu",), None, None, "d")
    with pytest.raises(ValueError, match="policy_stops"):
        registry.EngineSpec("x", ("gpu",), None, None, "d", policy_stops=("idle",))


def test_a_plugin_that_cannot_be_used_says_why(tmp_path: Path, installed: Callable[[Path], None], cli) -> None:  # type: ignore[no-untyped-def]
    """Before, a plug-in that failed to import, named no EngineSpec or took a built-in's name was dropped in
    silence: `engines list` left it out, and `seats add --engine`, `engines settings` and `apply` said "no seat
    engine called ..." as for a typo. Now its reason is kept and said wherever its name is used."""
    from gpuseat.errors import EngineError

    spec = 'from gpuseat.engines.registry import EngineSpec\nSPEC = EngineSpec({}, ("gpu",), {}, None, "d")\n'
    installed(_site(tmp_path / "site", {
        "plug_broken": "import plug_missing_dependency\n",
        "plug_class": "class Engine:\n    pass\n",
        "plug_clash": spec.format('"host"', '"gpuseat.engines.host.engine:HostEngine"'),
        "plug_badname": spec.format('"My Cloud"', '"x:Y"'),
        "plug_misnamed": spec.format('"misnamed"', '"gpuseat.engines.host.engine:HostEngine"'),
    }, {
        "broken": "plug_broken:SPEC", "klass": "plug_class:Engine", "host2": "plug_clash:SPEC",
        "mycloud": "plug_badname:SPEC", "misnamed": "plug_misnamed:SPEC",
    }))  # fmt: skip
    r = cli("engines", "list", "--format", "json")
    assert r.code == 0
    assert [row["engine"] for row in json.loads(r.out)] == [*(s.name for s in registry.BUILTIN), "misnamed"]
    assert r.err.count("not listed: ") == 4 and "plug_missing_dependency" in r.err, r.err

    why = registry.unusable()
    assert set(why) == {"broken", "klass", "host2", "mycloud"}, why
    assert "cannot load: ModuleNotFoundError: No module named 'plug_missing_dependency'" in why["broken"]
    assert "(plug_broken:SPEC, package plugs 1.0)" in why["broken"]
    assert "names a type, not an EngineSpec" in why["klass"]
    assert "an engine called 'host' is registered already" in why["host2"]
    assert "engine name 'My Cloud': 1 to 16 lowercase letters" in why["mycloud"]
    assert registry.spec("host").target == "gpuseat.engines.host.engine:HostEngine", "a built-in is never replaced"

    with pytest.raises(EngineError) as err:
        registry.spec("broken")
    assert err.value.exit_code == 1 and "No module named 'plug_missing_dependency'" in err.value.what
    assert "no seat engine called 'nomad'" in cli("engines", "settings", "nomad", "timeout=3").err  # a typo stays one
    r = cli("engines", "settings", "broken", "timeout=3")
    assert r.code == 1 and "plug_missing_dependency" in r.err and "Traceback" not in r.err, r.err

    (tmp_path / "c.toml").write_text('name = "x"\nparticipants = 1\n[schedule]\nstart = 2026-09-07\ndays = 2\n')
    (tmp_path / "gpus.txt").write_text(GPUS)
    assert cli("course", "create", str(tmp_path / "c.toml"), "--key", "c").code == 0
    r = cli("seats", "add", "--from-nvidia-smi", str(tmp_path / "gpus.txt"), "--engine", "broken")
    assert r.code == 2 and "No module named 'plug_missing_dependency'" in r.err, r.err
    r = cli("seats", "add", "--from-nvidia-smi", str(tmp_path / "gpus.txt"), "--engine", "misnamed")
    assert r.code == 0, r.err
    r = cli("apply")  # the class and the spec disagree on the name: one clear error, the engine never runs
    assert r.code == 1 and "names itself 'host', but its EngineSpec registers it as 'misnamed'" in r.out + r.err


def test_the_engines_page_toy_plugin_runs_a_course(tmp_path: Path, installed: Callable[[Path], None], cli) -> None:  # type: ignore[no-untyped-def]
    """docs/engines.md's `toy` package, installed as a plug-in, delivers a course: files appear, follow a move and
    a release, a second apply plans nothing, `seats check` probes through it. Then its package breaks (a
    dependency gone): `apply` and `seats check` say why instead of "no seat engine called 'toy'"."""
    import re

    page = (ROOT / "docs" / "engines.md").read_text()
    code = {
        name: re.search(rf"`toyengine/{name}`[^\n]*\n(?:[^\n]*\n)*?\n```python\n(.*?)```", page, re.S).group(1)  # type: ignore[union-attr]
        for name in ("__init__.py", "engine.py")
    }
    site = _site(tmp_path / "site", {"toyengine": code["__init__.py"]}, {"toy": "toyengine:SPEC"})
    (site / "toyengine" / "engine.py").write_text(code["engine.py"])
    installed(site)
    machine = tmp_path / "machine"
    (tmp_path / "gpus.txt").write_text(GPUS)

    def ok(*args: str) -> str:
        r = cli(*args)
        assert r.code == 0, (args, r.out, r.err)
        return r.out

    def files() -> dict[str, str]:
        return {p.name: p.read_text().strip() for p in machine.iterdir()}

    ok("course", "create", str(ROOT / "examples" / "course-2016.toml"), "--key", "toy")
    ok("roster", "import", str(ROOT / "examples" / "roster-16.csv"))
    ok("seats", "add", "--from-nvidia-smi", str(tmp_path / "gpus.txt"), "--engine", "toy")
    ok("engines", "settings", "toy", f"root={machine}")
    ok("seats", "assign", "--partial")
    ok("apply")
    uuid = [f"GPU-11111111-2222-3333-4444-55555555555{i}" for i in range(3)]
    assert files() == {"amartin": uuid[0], "bcosta": uuid[1], "cwei": uuid[2]}
    assert "nothing to change" in ok("apply")
    ok("seats", "release", "--participant", "cwei")
    ok("seats", "move", "--participant", "amartin", "--seat", "seat-03")
    out = ok("apply")
    assert "file.remove" in out and "seat.clear" in out, out
    assert files() == {"amartin": uuid[2], "bcosta": uuid[1]}
    assert "nothing to change" in ok("apply")
    assert ok("seats", "connect", "seat-03").strip() == f"seat-03: cat {machine / 'amartin'}"
    checked = json.loads(ok("seats", "check", "--format", "json"))
    assert checked["summary"] == {"ready": 2, "broken": 0, "total": 2}, checked

    (site / "toyengine" / "__init__.py").write_text("import toy_sdk_uninstalled\n" + code["__init__.py"])
    del sys.modules["toyengine"]
    installed(site)
    r = cli("apply")
    assert r.code == 1 and "No module named 'toy_sdk_uninstalled'" in r.out + r.err, (r.out, r.err)
    checked = json.loads(cli("seats", "check", "--format", "json").out)
    assert {s["state"] for s in checked["seats"]} == {"broken"}
    assert all("toy_sdk_uninstalled" in s["reason"] for s in checked["seats"]), checked


def test_apply_names_a_broken_plugin_that_never_applied(tmp_path: Path, installed: Callable[[Path], None], cli) -> None:  # type: ignore[no-untyped-def]
    """A plug-in engine that breaks before its first apply (a dependency of its package gone) holds nothing yet:
    `apply` planned only the engines that load, said "Plan: 0 to add" and exited 0, its seats never delivered and
    nothing said. Now it is planned as any engine of the seats, and its plan says why it cannot (once per course)."""
    spec = 'from gpuseat.engines.registry import EngineSpec\nSPEC = EngineSpec("later", ("gpu",), "plug_later:X", None, "d")\n'
    site = _site(tmp_path / "site", {"plug_later": spec}, {"later": "plug_later:SPEC"})
    installed(site)
    (tmp_path / "c.toml").write_text('name = "x"\nparticipants = 1\n[schedule]\nstart = 2026-09-07\ndays = 2\n')
    (tmp_path / "gpus.txt").write_text(GPUS)
    assert cli("course", "create", str(tmp_path / "c.toml"), "--key", "c").code == 0
    r = cli("seats", "add", "--from-nvidia-smi", str(tmp_path / "gpus.txt"), "--engine", "later")
    assert r.code == 0, r.err

    (site / "plug_later" / "__init__.py").write_text("import plug_later_sdk_gone\n" + spec)
    del sys.modules["plug_later"]
    installed(site)
    r = cli("apply")
    assert r.code == 1 and "Traceback" not in r.err, (r.out, r.err)
    assert r.out.count("cannot plan") == 1 and "course c · later: cannot plan: engine later: " in r.out, r.out
    assert "No module named 'plug_later_sdk_gone'" in r.out and "fix or reinstall its package" in r.out, r.out
    assert "error: c later: plan: engine later: the plug-in engine later (plug_later:SPEC" in r.err, r.err
    plans = json.loads(cli("apply", "--format", "json").out)["plans"]
    assert [(p["engine"], "plug_later_sdk_gone" in p["error"]) for p in plans] == [("later", True)], plans
