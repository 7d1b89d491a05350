"""The generated config inside Zero to JupyterHub's own hub config, loaded the way the chart loads it.

What the chart does (jupyterhub/zero-to-jupyterhub-k8s, ``jupyterhub/files/hub/jupyterhub_config.py``
and ``z2jh.py``, read from upstream): JupyterHub's config loader runs the chart's
``jupyterhub_config.py`` with ``c`` defined; that file does ``from z2jh import get_config`` (a lookup
``get_config(key, default=None)`` in the chart's values, which shadows JupyterHub's ``get_config``),
sets the spawner class, the consecutive failure limit from ``hub.consecutiveFailureLimit``, resets
``c.JupyterHub.services`` and ``load_roles`` to empty lists, appends ``jupyterhub-idle-culler`` (service
and role) when ``cull.enabled`` (the chart's default), and finally runs every ``hub.extraConfig``
snippet, sorted by key, with a bare ``exec(config_py)`` in its own globals.

The test writes those steps as a chart-shaped ``jupyterhub_config.py`` and ``z2jh.py`` next to a
``values.yaml`` made of the chart's defaults merged with the values documented in docs/jupyterhub.md
(the snippet replaced by ``gpuseat jupyterhub config --no-check`` output), then loads it with
JupyterHub's own ``load_config_file``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "jupyterhub.md"
IN_CLUSTER = "postgresql+psycopg://gpuseat@postgres.gpuseat.svc/gpuseat"

# The chart's defaults (values.yaml) that the steps below read.
CHART_DEFAULTS: dict[str, Any] = {
    "hub": {"consecutiveFailureLimit": 5, "extraConfig": {}, "services": {}},
    "cull": {"enabled": True, "users": False, "removeNamedServers": False, "timeout": 3600, "every": 600},
}

Z2JH_PY = '''
"""get_config(key, default=None): a dotted lookup in the chart's values (as the chart's z2jh.py)."""
import os
from functools import lru_cache

import yaml


@lru_cache
def _load_config():
    with open(os.path.join(os.path.dirname(__file__), "values.yaml")) as f:
        return yaml.safe_load(f)


def get_config(key, default=None):
    value = _load_config()
    for level in key.split("."):
        if not isinstance(value, dict) or level not in value:
            return default
        value = value[level]
    return value


def set_config_if_not_none(cparent, name, key):
    data = get_config(key)
    if data is not None:
        setattr(cparent, name, data)
'''

CHART_CONFIG_PY = """
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

from z2jh import get_config, set_config_if_not_none

c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
set_config_if_not_none(c.Spawner, "consecutive_failure_limit", "hub.consecutiveFailureLimit")

c.JupyterHub.services = []
c.JupyterHub.load_roles = []
if get_config("cull.enabled", False):
    c.JupyterHub.load_roles.append(
        {
            "name": "jupyterhub-idle-culler",
            "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
            "services": ["jupyterhub-idle-culler"],
        }
    )
    cull_cmd = ["python3", "-m", "jupyterhub_idle_culler", "--url=http://localhost:8081/hub/api"]
    cull_cmd.append("--timeout=%s" % get_config("cull.timeout"))
    c.JupyterHub.services.append({"name": "jupyterhub-idle-culler", "command": cull_cmd})

for key, config_py in sorted(get_config("hub.extraConfig", {}).items()):
    print("Loading extra config: %s" % key)
    exec(config_py)
"""

LOADER = """
import json, sys
from jupyterhub.app import JupyterHub
from traitlets.config import LazyConfigValue

def value(v):
    return v.get_value([]) if isinstance(v, LazyConfigValue) else v

app = JupyterHub()
app.load_config_file(sys.argv[1])
c = app.config
hook = c.Spawner.pre_spawn_hook
print(json.dumps({
    "spawner_class": c.JupyterHub.get("spawner_class"),
    "services": [s["name"] for s in value(c.JupyterHub.services)],
    "roles": [r["name"] for r in value(c.JupyterHub.load_roles)],
    "limit": c.Spawner.consecutive_failure_limit,
    "hook": type(hook.__self__).__name__ + "." + hook.__name__,
    "course": hook.__self__.settings.course,
    "db_url": hook.__self__.settings.db_url,
    "post_stop": c.Spawner.post_stop_hook.__name__,
}))
"""


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Helm's values merge: nested mappings merge, anything else is replaced."""
    out = dict(a)
    for key, value in b.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def documented_values() -> dict[str, Any]:
    """The first YAML block of the Zero to JupyterHub section of docs/jupyterhub.md."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Zero to JupyterHub") :]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "docs/jupyterhub.md lost its z2jh values block"
    return yaml.safe_load(block.group(1))


def gpuseat_config(*flags: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "gpuseat", "jupyterhub", "config", *flags],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def load_in_chart(tmp: Path, values: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """Run the chart-shaped hub config through JupyterHub's own config loader (a child process)."""
    (tmp / "values.yaml").write_text(yaml.safe_dump(values), encoding="utf-8")
    (tmp / "z2jh.py").write_text(textwrap.dedent(Z2JH_PY), encoding="utf-8")
    (tmp / "jupyterhub_config.py").write_text(CHART_CONFIG_PY, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    env["GPUSEAT_DB_URL"] = IN_CLUSTER  # hub.extraEnv from the Secret
    return subprocess.run(
        [sys.executable, "-c", LOADER, str(tmp / "jupyterhub_config.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
        timeout=120,
        check=False,
    )


def test_the_documented_values_load_inside_the_charts_hub_config(tmp_path):
    snippet = gpuseat_config(
        "--spawner", "kubernetes", "--keep-spawner-class", "--mode", "pool", "--no-check",
        "--course", "lab", "--db", IN_CLUSTER,
    )  # fmt: skip
    values = documented_values()
    assert values["hub"]["extraConfig"]["gpuseat"].strip() == "# paste gpuseat_config.py here"
    values["hub"]["extraConfig"]["gpuseat"] = snippet
    done = load_in_chart(tmp_path, _merge(CHART_DEFAULTS, values))
    assert done.returncode == 0, done.stderr
    assert "Loading extra config: gpuseat" in done.stdout
    import json

    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["spawner_class"] == "kubespawner.KubeSpawner"  # the chart's own class is kept
    assert got["hook"] == "SeatHooks.pre_spawn_hook" and got["post_stop"] == "post_stop_hook"
    assert (got["course"], got["db_url"]) == ("lab", IN_CLUSTER)
    assert got["limit"] == 0
    # the documented values turn z2jh's activity culler off; gpuseat's GPU culler runs with its own role
    assert got["services"] == ["gpuseat-cull"] and got["roles"] == ["gpuseat-cull"]


def test_with_the_charts_culler_left_on_both_run_side_by_side(tmp_path):
    values = _merge(CHART_DEFAULTS, {"hub": {"extraConfig": {"gpuseat": gpuseat_config(
        "--spawner", "kubernetes", "--keep-spawner-class", "--no-check", "--course", "lab", "--db", IN_CLUSTER,
    )}}})  # fmt: skip
    done = load_in_chart(tmp_path, values)
    assert done.returncode == 0, done.stderr
    import json

    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["services"] == ["jupyterhub-idle-culler", "gpuseat-cull"]
    assert got["roles"] == ["jupyterhub-idle-culler", "gpuseat-cull"]
    assert got["limit"] == 0  # the snippet wins over the chart's consecutiveFailureLimit of 5


def test_the_loader_is_the_charts_a_bare_get_config_call_fails_there(tmp_path):
    """What the old documented paste did: the loader reproduces the crash from the issue."""
    values = _merge(CHART_DEFAULTS, {"hub": {"extraConfig": {"old": "c = get_config()\n"}}})
    done = load_in_chart(tmp_path, values)
    assert done.returncode != 0
    assert "get_config() missing 1 required positional argument: 'key'" in done.stderr


@pytest.mark.parametrize("spawner", ["kubernetes", "local"])
def test_the_same_text_still_loads_as_a_plain_config_file(tmp_path, spawner):
    text = gpuseat_config("--spawner", spawner, "--no-check", "--course", "lab", "--db", IN_CLUSTER)
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", LOADER, str(path)], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert '"course": "lab"' in done.stdout
