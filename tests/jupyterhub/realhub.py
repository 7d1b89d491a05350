"""A real JupyterHub for tests and the benchmark: loopback only, random free ports, stopped by pid.

The hub runs from the ``jupyterhub_config.py`` that ``gpuseat jupyterhub config`` printed, followed by
the lines a site adds anyway (ports, proxy, spawner paths) and a test-driver service whose token may
create users and start, stop and inspect their servers.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ports import free_port

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
DRIVER_SCOPES = [
    "admin:users",
    "admin:servers",
    "admin:server_state",
    "access:servers",
    "list:users",
    "read:users",
]
TINY_SERVER = Path(__file__).with_name("tiny_server.py")


class HubMissing(RuntimeError):
    """JupyterHub or configurable-http-proxy is not installed (run scripts/setup.sh)."""


def find_proxy() -> Path:
    """configurable-http-proxy from the project's ``.npm/`` prefix (scripts/setup.sh) or PATH."""
    local = REPO / ".npm" / "node_modules" / ".bin" / "configurable-http-proxy"
    if local.exists():
        return local
    found = shutil.which("configurable-http-proxy")
    if found:
        return Path(found)
    raise HubMissing("configurable-http-proxy not found: run scripts/setup.sh (npm install into .npm/)")


def find_hub() -> Path:
    """The ``jupyterhub`` command next to this Python."""
    hub = VENV_BIN / "jupyterhub"
    if not hub.exists():
        raise HubMissing("jupyterhub is not installed in this environment: run scripts/setup.sh")
    return hub


@dataclass
class RealHub:
    """A running hub and a token for its REST API."""

    workdir: Path
    url: str  # the proxy's public URL, e.g. http://127.0.0.1:PORT
    token: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.url, headers={"Authorization": f"token {self.token}"}, timeout=120.0)

    # -- Hub REST API --------------------------------------------------------------------------

    def api(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        """One Hub REST API call (``path`` below ``/hub/api``)."""
        return self.client.request(method, f"/hub/api{path}", **kwargs)  # type: ignore[arg-type]

    def add_users(self, *names: str) -> None:
        """Create users (existing ones are fine)."""
        missing = [n for n in names if self.api("GET", f"/users/{n}").status_code == 404]
        if missing:
            r = self.api("POST", "/users", json={"usernames": missing})
            assert r.status_code == 201, r.text

    def start(self, name: str) -> httpx.Response:
        """Ask for the user's default server (201 ready, 202 pending, 503 refused by gpuseat)."""
        return self.api("POST", f"/users/{name}/server")

    def wait_ready(self, name: str, timeout: float = 180.0) -> dict:
        """Poll until the default server is ready; returns its server model (with ``state.pid``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            model = self.api("GET", f"/users/{name}").json()
            server = model.get("servers", {}).get("")
            if server and server.get("ready"):
                return server
            if not server and model.get("pending") is None:
                raise AssertionError(f"{name}'s server is gone: {model}")
            time.sleep(0.1)
        raise AssertionError(f"{name}'s server not ready after {timeout:.0f} s\n{self.log_tail()}")

    def stop_server(self, name: str, timeout: float = 120.0) -> None:
        """Stop the user's default server and wait until it is gone."""
        r = self.api("DELETE", f"/users/{name}/server")
        assert r.status_code in (202, 204, 400), r.text  # 400: not running
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            model = self.api("GET", f"/users/{name}").json()
            if not model.get("servers") and model.get("pending") is None:
                return
            time.sleep(0.2)
        raise AssertionError(f"{name}'s server did not stop\n{self.log_tail()}")

    def servers(self) -> dict[str, dict]:
        """Every user's default server model (users without one left out)."""
        out = {}
        for user in self.api("GET", "/users", params={"state": "active"}).json():
            server = user.get("servers", {}).get("")
            if server:
                out[user["name"]] = server
        return out

    # -- the single-user server ----------------------------------------------------------------

    def run_in_kernel(self, name: str, code: str, timeout: float = 120.0) -> str:
        """Start a kernel on the user's server, run ``code``, return what it printed."""
        import websocket

        r = self.client.post(f"/user/{name}/api/kernels", json={"name": "python3"})
        assert r.status_code == 201, r.text
        kernel = r.json()["id"]
        ws_url = self.url.replace("http://", "ws://") + f"/user/{name}/api/kernels/{kernel}/channels"
        ws = websocket.create_connection(ws_url, header=[f"Authorization: token {self.token}"], timeout=timeout)
        try:
            msg_id = uuid.uuid4().hex
            ws.send(
                json.dumps(
                    {
                        "header": {
                            "msg_id": msg_id,
                            "username": "test",
                            "session": uuid.uuid4().hex,
                            "msg_type": "execute_request",
                            "version": "5.3",
                        },
                        "parent_header": {},
                        "metadata": {},
                        "content": {"code": code, "silent": False, "store_history": False, "allow_stdin": False},
                        "channel": "shell",
                        "buffers": [],
                    }
                )
            )
            printed, deadline = [], time.monotonic() + timeout
            while time.monotonic() < deadline:
                msg = json.loads(ws.recv())
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = msg["header"]["msg_type"]
                if kind == "stream":
                    printed.append(msg["content"]["text"])
                elif kind == "error":
                    raise AssertionError(f"kernel error: {msg['content']}")
                elif kind == "status" and msg["content"]["execution_state"] == "idle":
                    return "".join(printed)
            raise AssertionError("kernel did not finish")
        finally:
            ws.close()
            self.client.delete(f"/user/{name}/api/kernels/{kernel}")

    # -- logs and shutdown ---------------------------------------------------------------------

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the hub's log (for failure messages)."""
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        """SIGTERM the hub (it stops its servers and the proxy), then make sure its group is gone."""
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        # anything the hub started and left behind shares its process group (start_new_session)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


# The hub's own spawner draws a server's port with a bind to port 0 that it closes again before the server
# binds it (jupyterhub#3005). While the other xdist worker opens servers and connections, that port can be
# taken in between: the server dies at bind and whatever now listens there answers the hub's readiness
# probe. The tests' servers take ports below the kernel's ephemeral range (32768-60999), which neither
# bind(0) nor an outgoing connection ever hands out.
SPAWNER_PORTS = """\
import random as _random
import socket as _socket

from jupyterhub.spawner import SimpleLocalProcessSpawner as _Simple


class HarnessSpawner(_Simple):
    async def start(self):
        for _ in range(1000):
            port = _random.randint(20000, 32767)
            with _socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            self.port = port
            break
        return await super().start()


c.JupyterHub.spawner_class = HarnessSpawner
"""


def site_lines(workdir: Path, *, public_port: int, tiny: bool, token: str, http_timeout: int = 300) -> str:
    """The lines a site adds after gpuseat's config: loopback ports, proxy, spawner paths, a driver service."""
    proxy = find_proxy()
    api_port, hub_port = free_port(), free_port()
    cmd = [sys.executable, str(TINY_SERVER)] if tiny else [str(VENV_BIN / "jupyterhub-singleuser")]
    args = ["--allow-root"] if (not tiny and os.geteuid() == 0) else []
    values = {
        "JupyterHub.bind_url": f"http://127.0.0.1:{public_port}",
        "JupyterHub.hub_bind_url": f"http://127.0.0.1:{hub_port}",
        "JupyterHub.db_url": f"sqlite:///{workdir / 'jupyterhub.sqlite'}",
        "JupyterHub.cookie_secret_file": str(workdir / "jupyterhub_cookie_secret"),
        "JupyterHub.authenticator_class": "null",
        "JupyterHub.log_level": "INFO",
        "ConfigurableHTTPProxy.api_url": f"http://127.0.0.1:{api_port}",
        "ConfigurableHTTPProxy.command": [str(proxy)],
        "ConfigurableHTTPProxy.pid_file": str(workdir / "proxy.pid"),
        "SimpleLocalProcessSpawner.home_dir_template": str(workdir / "home" / "{username}"),
        "Spawner.cmd": cmd,
        "Spawner.args": args,
        "Spawner.start_timeout": 300,
        "Spawner.http_timeout": http_timeout,
    }
    lines = ["", "# --- site settings added by the test harness ---", SPAWNER_PORTS]
    lines += [f"c.{key} = {value!r}" for key, value in values.items()]
    driver = {"name": "test-driver", "api_token": token}
    role = {"name": "test-driver", "scopes": DRIVER_SCOPES, "services": ["test-driver"]}
    lines += [f"c.JupyterHub.services.append({driver!r})", f"c.JupyterHub.load_roles.append({role!r})"]
    return "\n".join(lines) + "\n"


@contextmanager
def running_hub(
    config_text: str,
    workdir: Path,
    *,
    env: dict[str, str],
    tiny: bool = False,
    timeout: float = 180.0,
    http_timeout: int = 300,
    extra: str = "",
) -> Iterator[RealHub]:
    """Start a hub from ``config_text`` (gpuseat's config) in ``workdir``; stop it on exit.

    ``extra`` lines come last (e.g. an authenticator a browser can log in with)."""
    hub_cmd = find_hub()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "home").mkdir(exist_ok=True)
    port, token = free_port(), secrets.token_hex(32)
    config = workdir / "jupyterhub_config.py"
    config.write_text(
        config_text + site_lines(workdir, public_port=port, tiny=tiny, token=token, http_timeout=http_timeout) + extra,
        encoding="utf-8",
    )
    log_path = workdir / "hub.log"
    full_env = {**os.environ, **env, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(hub_cmd), "-f", str(config)],
            cwd=workdir,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    hub = RealHub(workdir, f"http://127.0.0.1:{port}", token, proc, log_path)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"jupyterhub exited with {proc.returncode}\n{hub.log_tail()}")
            try:
                if hub.api("GET", "/").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"jupyterhub not up after {timeout:.0f} s\n{hub.log_tail()}")
            time.sleep(0.1)
        yield hub
    finally:
        hub.stop()


def environ_of(pid: int) -> dict[str, str]:
    """A process's environment as the kernel sees it (``/proc/<pid>/environ``)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
