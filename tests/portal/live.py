"""Start the real portal (``python -m gpuseat serve``, i.e. uvicorn) as a child process on a free loopback port."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

from gpuseat.services.demo import Demo
from ports import free_port

SRC = Path(__file__).resolve().parents[2] / "src"


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    log: Path
    startup_s: float
    printed: str = ""
    extra: dict = field(default_factory=dict)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start(
    args: list[str], log: Path, *, env: dict | None = None, wait_s: float = 90, prefix: list[str] | None = None
) -> Server:
    """Run ``gpuseat serve ARGS --port P`` and wait until ``/`` answers; the log file gets stdout+stderr.

    ``prefix`` goes before the interpreter (e.g. ``prlimit --nofile=1024``). A free port can be taken by
    another test's server between the look and the bind: the server counts as up only once its own log
    says it runs on that port, and a server that lost its port is started again on another."""
    for _ in range(5):
        server = _start_once(args, log, env=env, wait_s=wait_s, prefix=prefix)
        if server is not None:
            return server
    raise RuntimeError(f"the server found no free port in 5 tries:\n{log.read_text()}")


def _start_once(
    args: list[str], log: Path, *, env: dict | None, wait_s: float, prefix: list[str] | None
) -> Server | None:
    port = free_port()
    full_env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONUNBUFFERED": "1", **(env or {})}
    fh = log.open("w")
    started = time.monotonic()
    proc = subprocess.Popen(
        [*(prefix or []), sys.executable, "-m", "gpuseat", "serve", *args, "--port", str(port)],
        stdout=fh,
        stderr=subprocess.STDOUT,
        env=full_env,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = started + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            if "address already in use" in log.read_text().lower():
                return None  # another server took the port first
            raise RuntimeError(f"the server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            answered = httpx.get(url + "/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            answered = False
        if answered and f"running on {url}" in log.read_text():
            break
        time.sleep(0.05)  # the server is up within seconds: notice it at once
    else:
        proc.kill()
        raise RuntimeError(f"the server did not answer within {wait_s} s:\n{log.read_text()}")
    return Server(proc, url, log, time.monotonic() - started, log.read_text())


def copy_demo(demo: Demo, folder: Path) -> Demo:
    """A copy of a seeded demo (:func:`~gpuseat.services.demo.seed_demo`) in ``folder``, for a test that writes
    to it: seeding once per module and copying costs a file copy instead of a seed per test."""
    shutil.copytree(demo.folder, folder)
    return replace(
        demo,
        folder=folder,
        db_url=demo.db_url.replace(str(demo.folder), str(folder), 1),
        bench_path=folder / demo.bench_path.relative_to(demo.folder),
    )


def demo_credentials(printed: str) -> tuple[str, str]:
    """(organizer password, participant token) from ``serve --demo``'s output."""
    password = re.search(r"password (\S+)", printed).group(1)
    token = re.search(r"/t/([A-Za-z0-9_-]+)", printed).group(1)
    return password, token


CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')


def csrf_of(html: str) -> str:
    return CSRF.search(html).group(1)


def login(client: httpx.Client, url: str, password: str, user: str = "admin") -> httpx.Response:
    page = client.get(url + "/login")
    return client.post(url + "/login", data={"csrf": csrf_of(page.text), "username": user, "password": password})
