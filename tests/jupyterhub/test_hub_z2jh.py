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

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "jupyterhub.md"
IN_CLUSTER = "postgresql+psycopg://gpuseat@postgres.gpuseat.svc/gpuseat"
# one worker runs the file, so the module's loader process (JupyterHub imported once) starts once
pytestmark = [pytest.mark.xdist_group(name="jupyterhub-z2jh")]

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
import json, os, sys, traceback
from jupyterhub.app import JupyterHub
from traitlets.config import LazyConfigValue

def value(v):
    return v.get_value([]) if isinstance(v, LazyConfigValue) else v

def load(path):
    app = JupyterHub()
    app.load_config_file(path)
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

# One request a line: {"path", "cwd", "env", "stdout", "stderr"}. JupyterHub is imported once (seconds of
# imports); each config loads in a fresh forked child, as its own hub process would: its own cwd,
# environment, sys.path and modules, its output in the request's files; the answer is its exit code.
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for fd, name in ((1, "stdout"), (2, "stderr")):
                os.dup2(os.open(req[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            load(req["path"])
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(json.dumps(os.waitstatus_to_exitcode(status)) + "\\n")
    sys.stdout.flush()
"""


def _env(**extra: str) -> dict[str, str]:
    """The hub's environment: none of the shell's GPUSEAT_* variables, gpuseat's sources importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") or k == "GPUSEAT_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    return {**env, **extra}


@pytest.fixture(scope="module")
def loader() -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    """``load(path, cwd, env)``: JupyterHub's config loader run on ``path`` in a child process of its own
    (what ``subprocess.run([python, -c, LOADER, path])`` gave, without importing JupyterHub each time)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", LOADER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env()
    )
    assert proc.stdin is not None and proc.stdout is not None

    def load(path: Path, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        out, err = cwd / "loader.out", cwd / "loader.err"
        request = {"path": str(path), "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err)}
        proc.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        answer = proc.stdout.readline()  # type: ignore[union-attr]
        assert answer, f"the loader process exited ({proc.poll()})"
        code = json.loads(answer)
        return subprocess.CompletedProcess([str(path)], code, out.read_text(), err.read_text())

    try:
        yield load
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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


def gpuseat_config(cli: Callable[..., Any], *flags: str) -> str:
    """What ``gpuseat jupyterhub config FLAGS`` prints (the CLI run in-process, see tests/conftest.py)."""
    done = cli("jupyterhub", "config", *flags)
    assert done.code == 0, done.err
    return str(done.out)


def load_in_chart(loader: Callable[..., subprocess.CompletedProcess[str]], tmp: Path, values: dict[str, Any]):
    """Run the chart-shaped hub config through JupyterHub's own config loader (a child process)."""
    (tmp / "values.yaml").write_text(yaml.safe_dump(values), encoding="utf-8")
    (tmp / "z2jh.py").write_text(textwrap.dedent(Z2JH_PY), encoding="utf-8")
    (tmp / "jupyterhub_config.py").write_text(CHART_CONFIG_PY, encoding="utf-8")
    # GPUSEAT_DB_URL: hub.extraEnv from the Secret
    return loader(tmp / "jupyterhub_config.py", tmp, _env(GPUSEAT_DB_URL=IN_CLUSTER))


def test_the_documented_values_load_inside_the_charts_hub_config(tmp_path, cli, loader):
    snippet = gpuseat_config(
        cli,
        "--spawner", "kubernetes", "--keep-spawner-class", "--mode", "pool", "--no-check",
        "--course", "lab", "--db", IN_CLUSTER,
    )  # fmt: skip
    values = documented_values()
    assert values["hub"]["extraConfig"]["gpuseat"].strip() == "# paste gpuseat_config.py here"
    values["hub"]["extraConfig"]["gpuseat"] = snippet
    done = load_in_chart(loader, tmp_path, _merge(CHART_DEFAULTS, values))
    assert done.returncode == 0, done.stderr
    assert "Loading extra config: gpuseat" in done.stdout
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["spawner_class"] == "kubespawner.KubeSpawner"  # the chart's own class is kept
    assert got["hook"] == "SeatHooks.pre_spawn_hook" and got["post_stop"] == "post_stop_hook"
    assert (got["course"], got["db_url"]) == ("lab", IN_CLUSTER)
    assert got["limit"] == 0
    # the documented values turn z2jh's activity culler off; gpuseat's GPU culler runs with its own role
    assert got["services"] == ["gpuseat-cull"] and got["roles"] == ["gpuseat-cull"]


def test_with_the_charts_culler_left_on_both_run_side_by_side(tmp_path, cli, loader):
    values = _merge(CHART_DEFAULTS, {"hub": {"extraConfig": {"gpuseat": gpuseat_config(cli,
        "--spawner", "kubernetes", "--keep-spawner-class", "--no-check", "--course", "lab", "--db", IN_CLUSTER,
    )}}})  # fmt: skip
    done = load_in_chart(loader, tmp_path, values)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["services"] == ["jupyterhub-idle-culler", "gpuseat-cull"]
    assert got["roles"] == ["jupyterhub-idle-culler", "gpuseat-cull"]
    assert got["limit"] == 0  # the snippet wins over the chart's consecutiveFailureLimit of 5


def test_the_loader_is_the_charts_a_bare_get_config_call_fails_there(tmp_path, loader):
    """What the old documented paste did: the loader reproduces the crash from the issue."""
    values = _merge(CHART_DEFAULTS, {"hub": {"extraConfig": {"old": "c = get_config()\n"}}})
    done = load_in_chart(loader, tmp_path, values)
    assert done.returncode != 0
    assert "get_config() missing 1 required positional argument: 'key'" in done.stderr


@pytest.mark.parametrize("spawner", ["kubernetes", "local"])
def test_the_same_text_still_loads_as_a_plain_config_file(tmp_path, cli, loader, spawner):
    text = gpuseat_config(cli, "--spawner", spawner, "--no-check", "--course", "lab", "--db", IN_CLUSTER)
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(text, encoding="utf-8")
    done = loader(path, tmp_path, _env())
    assert done.returncode == 0, done.stderr
    assert '"course": "lab"' in done.stdout
