"""``gpuseat jupyterhub config`` and ``cull`` at the command line: bad flags are one clear message, exit 2."""

from __future__ import annotations

import pytest
from hubcourse import make_course


@pytest.fixture
def db(tmp_path):
    url = f"sqlite:///{tmp_path / 'course.db'}"
    make_course(url, tmp_path, key="lab", people=["ada"], seats=1).close()
    return url


def test_config_prints_a_loadable_file(cli, db):
    r = cli("jupyterhub", "config", "--db", db, "--spawner", "docker", "--mode", "pool")
    assert r.code == 0, r.err
    assert "c.JupyterHub.spawner_class = 'dockerspawner.DockerSpawner'" in r.out
    assert "course='lab'" in r.out and "mode='pool'" in r.out  # the only course is the default
    compile(r.out, "jupyterhub_config.py", "exec")


@pytest.mark.parametrize(
    "flags, where, what",
    [
        (["--spawner", "slurm"], "--spawner", "unknown spawner 'slurm'"),
        (["--mode", "lottery"], "--mode", "Input should be 'assigned' or 'pool'"),
        (["--cull-idle-hours", "nan"], "--cull-idle-hours", "finite"),
        (["--cull-idle-hours", "1000000000"], "--cull-idle-hours", "less than or equal to 8784"),
        (["--contact", "x\nimport os"], "--contact", "one line"),
        (["--course", "nope"], "--course", "no course 'nope'"),
        (["--mig-strategy", "both"], "--mig-strategy", "Input should be 'mixed' or 'single'"),
        (["--session-lead", "999"], "--session-lead", "less than or equal to 240"),
        (["--engine-token-file", "hub-token"], "--engine-token-file", "not an absolute path"),
        (["--engine-token-file", "/etc/x\nimport os"], "--engine-token-file", "not an absolute path"),
    ],
)
def test_config_bad_flags(cli, db, flags, where, what):
    r = cli("jupyterhub", "config", "--db", db, *flags)
    assert r.code == 2, (r.out, r.err)
    assert where in r.err and what in r.err
    assert r.out == ""


def test_cull_needs_the_hubs_token(cli, db, monkeypatch):
    monkeypatch.delenv("JUPYTERHUB_API_TOKEN", raising=False)
    r = cli("jupyterhub", "cull", "--db", db, "--api-url", "http://127.0.0.1:9/hub/api", "--once")
    assert r.code == 2 and "JUPYTERHUB_API_TOKEN" in r.err


def test_cull_with_a_hub_that_is_down_is_an_engine_error(cli, db, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "x" * 32)
    r = cli("jupyterhub", "cull", "--db", db, "--api-url", "http://127.0.0.1:9/hub/api", "--once")
    assert r.code == 1 and "the Hub API did not answer" in r.err


def test_config_no_check_renders_without_connecting(cli, tmp_path, monkeypatch):
    monkeypatch.delenv("GPUSEAT_DB_URL", raising=False)
    never = tmp_path / "never" / "course.db"  # a SQLite file a connection would create
    for url in ("postgresql+psycopg://gpuseat@postgres.gpuseat.svc.cluster.local/gpuseat", f"sqlite:///{never}"):
        r = cli("jupyterhub", "config", "--no-check", "--course", "lab", "--db", url, "--spawner", "kubernetes")
        assert r.code == 0, r.err
        assert f"GPUSEAT_DB_URL = os.environ.get('GPUSEAT_DB_URL', {url!r})" in r.out and "course='lab'" in r.out
        compile(r.out, "jupyterhub_config.py", "exec")
    assert not never.parent.exists()


@pytest.mark.parametrize(
    "flags, where",
    [
        (["--db", "postgresql+psycopg://h/db"], "--course"),
        (["--course", "lab"], "--db"),
        (["--course", "lab", "--db", "not a url"], "--db"),
        (["--course", "Lab 1", "--db", "postgresql+psycopg://h/db"], "--course"),
    ],
)
def test_config_no_check_bad_input(cli, monkeypatch, flags, where):
    monkeypatch.delenv("GPUSEAT_DB_URL", raising=False)
    r = cli("jupyterhub", "config", "--no-check", *flags)
    assert r.code == 2, (r.out, r.err)
    assert where in r.err and r.out == ""


def test_config_adds_the_engine_service_reading_its_token_from_a_file(cli, db):
    from gpuseat.jupyterhub.config import ENGINE_SCOPES, ENGINE_SERVICE

    r = cli("jupyterhub", "config", "--db", db, "--engine-token-file", "/etc/gpuseat/hub-token")
    assert r.code == 0, r.err
    assert "with open('/etc/gpuseat/hub-token', encoding='utf-8') as _token:" in r.out
    assert "token_file=/etc/gpuseat/hub-token" in r.out  # what the engine is told to read
    assert f"'name': {ENGINE_SERVICE!r}" in r.out and repr(list(ENGINE_SCOPES)) in r.out
    compile(r.out, "jupyterhub_config.py", "exec")
    plain = cli("jupyterhub", "config", "--db", db)
    assert ENGINE_SERVICE not in plain.out
