"""A real nginx (Debian's) in front of the portal, with the profile docs/portal.md describes.

Its own configuration and temporary folders live in the test's tmp folder; it listens on a free
loopback port, runs in the foreground (``daemon off``) and is stopped by its pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

NGINX = "/usr/sbin/nginx"

CONF = """\
{user}worker_processes 1;
error_log {tmp}/error.log warn;
events {{ worker_connections 512; }}
http {{
    access_log {tmp}/access.log;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location {location} {{
            proxy_pass http://127.0.0.1:{upstream}/;
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_request_buffering off;
            client_max_body_size 3m;
            proxy_read_timeout 60s;
        }}
    }}
}}
"""


def need_nginx() -> None:
    if not shutil.which(NGINX):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{NGINX} is missing (scripts/setup.sh --dev installs Debian's nginx-light)")
        pytest.skip(f"{NGINX} is missing")


@dataclass
class Nginx:
    proc: subprocess.Popen
    url: str
    folder: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful stop of master and worker
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_nginx(folder: Path, port: int, upstream: int, prefix: str) -> Nginx:
    """nginx on ``127.0.0.1:port`` proxying ``prefix/`` (or ``/``) to the portal on ``upstream``."""
    need_nginx()
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "nginx.conf"
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers must reach the test's private tmp folder
    conf.write_text(
        CONF.format(user=user, tmp=folder, port=port, upstream=upstream, location=f"{prefix}/"), encoding="utf-8"
    )
    proc = subprocess.Popen(
        [
            NGINX,
            "-p",
            str(folder),
            "-e",
            str(folder / "startup.log"),
            "-c",
            str(conf),
            "-g",
            f"daemon off; pid {folder}/nginx.pid;",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}{prefix}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nginx exited with {proc.returncode}: {(folder / 'startup.log').read_text()}")
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return Nginx(proc, url, folder)
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("nginx did not answer within 30 s")
