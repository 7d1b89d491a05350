"""The generated jupyterhub_config.py: it loads, wires the hooks and the culler, and no value becomes code."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from traitlets.config import Config

from gpuseat.jupyterhub.config import CULL_SCOPES, CULL_SERVICE, SPAWNER_CLASSES, HubSettings, render


def load(text: str) -> tuple[Config, dict]:
    """Execute a config file the way JupyterHub does (``get_config()`` returns the config object)."""
    config = Config()
    namespace: dict = {"get_config": lambda: config}
    exec(compile(text, "jupyterhub_config.py", "exec"), namespace)
    return config, namespace


def settings(**kw) -> HubSettings:
    return HubSettings(**{"course": "ml-2026", "db_url": "sqlite:////srv/gpuseat/gpuseat.db", **kw})


@pytest.mark.parametrize("spawner", sorted(SPAWNER_CLASSES))
def test_config_wires_hooks_spawner_and_a_narrow_culler(spawner):
    config, ns = load(render(settings(mode="pool", cull_idle_hours=1.5, cull_every_s=60), spawner))
    hooks = ns["gpuseat"]
    assert config.JupyterHub.spawner_class == SPAWNER_CLASSES[spawner]
    assert config.Spawner.pre_spawn_hook == hooks.pre_spawn_hook
    assert config.Spawner.post_stop_hook == hooks.post_stop_hook
    assert config.Spawner.consecutive_failure_limit == 0
    assert hooks.settings == settings(mode="pool", cull_idle_hours=1.5, cull_every_s=60)
    # every spawner gets a deep copy of the config: the hooks stay one object (one store, one thread)
    assert copy.deepcopy(config).Spawner.pre_spawn_hook.__self__ is hooks
    (service,) = config.JupyterHub.services.get_value([])
    (role,) = config.JupyterHub.load_roles.get_value([])
    assert service["name"] == CULL_SERVICE
    assert service["command"][1:] == [
        "-m", "gpuseat", "jupyterhub", "cull", "--course", "ml-2026", "--idle-hours", "1.5", "--every", "60"
    ]  # fmt: skip
    assert service["environment"] == {"GPUSEAT_DB_URL": "sqlite:////srv/gpuseat/gpuseat.db"}
    assert role == {"name": CULL_SERVICE, "scopes": list(CULL_SCOPES), "services": [CULL_SERVICE]}
    assert ("isolate_devices" in config.SystemdSpawner) == (spawner == "systemd")


def test_config_appends_to_the_sites_services_and_env_wins_for_the_url(monkeypatch):
    site = "c = get_config()\nc.JupyterHub.services = [{'name': 'site'}]\n"
    monkeypatch.setenv("GPUSEAT_DB_URL", "postgresql+psycopg://hub@db/gpuseat")
    config, ns = load(site + render(settings(), "local"))
    assert [s["name"] for s in config.JupyterHub.services] == ["site", CULL_SERVICE]
    assert ns["gpuseat"].settings.db_url == "postgresql+psycopg://hub@db/gpuseat"


def test_keep_the_hubs_spawner_class():
    config, _ = load(
        "c = get_config()\nc.JupyterHub.spawner_class = 'tljh.spawner.UserCreatingSpawner'\n"
        + render(settings(), "systemd", set_spawner_class=False)
    )
    assert config.JupyterHub.spawner_class == "tljh.spawner.UserCreatingSpawner"


def test_culler_off():
    config, _ = load(render(settings(cull_idle_hours=0), "docker"))
    assert "services" not in config.JupyterHub


_line = st.text(st.characters(blacklist_characters="\r\n\x00", blacklist_categories=("Cs",)), min_size=1, max_size=80)


@given(
    course=st.from_regex(r"\A[a-z0-9][a-z0-9-]{0,20}\Z"),
    contact=_line,
    db_url=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=80),
    hours=st.floats(min_value=0, max_value=8784),
)
def test_no_value_becomes_code(course, contact, db_url, hours):
    want = settings(course=course, contact=contact, db_url=db_url, cull_idle_hours=hours)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("GPUSEAT_DB_URL", raising=False)
        _, ns = load(render(want, "kubernetes"))
    assert ns["gpuseat"].settings == want
    assert set(ns) <= {
        "get_config",
        "__builtins__",
        "os",
        "sys",
        "HubSettings",
        "SeatHooks",
        "c",
        "gpuseat",
        "GPUSEAT_DB_URL",
    }


@pytest.mark.parametrize(
    "bad",
    [
        {"course": "ML 2026"},
        {"cull_idle_hours": float("inf")},
        {"cull_idle_hours": float("nan")},
        {"cull_idle_hours": 1e9},
        {"cull_idle_hours": -1},
        {"contact": "ask\nimport os"},
        {"mode": "lottery"},
        {"db_url": ""},
    ],
)
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValidationError):
        settings(**bad)
