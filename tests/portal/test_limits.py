"""What one client may cost the server: a huge chunked body, a thousand silent sockets, a hang-up mid-body."""

from __future__ import annotations

import os
import re
import resource
import shutil
import socket
import time

import httpx
import pytest

from .live import start

GIB = 1024**3
#: the tests on the module's one demo server run on one xdist worker, so the server starts once
SHARED = pytest.mark.xdist_group(name="portal-limits-demo")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One demo server for the tests that leave it as they found it (each checks it still answers)."""
    folder = tmp_path_factory.mktemp("limits")
    tmp = folder / "server-tmp"
    tmp.mkdir()
    server = start(["--demo", "--idle-timeout", "2"], folder / "serve.log", env={"TMPDIR": str(tmp)})
    server.extra["tmp"] = tmp
    yield server
    assert server.stop() == 0


def snapshot(folder) -> dict[str, int]:
    """Every file under ``folder`` with its size."""
    return {os.path.join(d, f): os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder) for f in files}


@SHARED
def test_a_chunked_2_gib_body_to_login_writes_nothing_to_disk(demo):
    before = snapshot(demo.extra["tmp"])
    sent = 0

    def body():  # generated lazily: the test never holds more than one chunk
        nonlocal sent
        head = b'--b\r\nContent-Disposition: form-data; name="file"; filename="x.csv"\r\n\r\n'
        sent += len(head)
        yield head
        chunk = b"x" * (1024 * 1024)
        while sent < 2 * GIB:
            sent += len(chunk)
            yield chunk

    headers = {"content-type": "multipart/form-data; boundary=b"}  # no Content-Length: chunked
    try:
        r = httpx.post(demo.url + "/login", content=body(), headers=headers, timeout=60)
        status = r.status_code
    except httpx.HTTPError:  # the server may close while we still send: it answered and hung up
        status = 413
    assert status == 413
    assert sent < 64 * 1024 * 1024, sent  # stopped early: the server read at most its cap
    assert snapshot(demo.extra["tmp"]) == before  # no spooled upload, no temporary file
    assert shutil.disk_usage(demo.extra["tmp"])  # the folder is still there
    assert httpx.get(demo.url + "/healthz").status_code == 200


@SHARED
def test_a_declared_huge_body_is_refused_before_reading(demo):
    r = httpx.post(demo.url + "/t/abc/survey", content=b"x" * 100, headers={"content-length": "100"})
    assert r.status_code in (403, 404)  # small: reaches the route
    with socket.create_connection(("127.0.0.1", int(demo.url.rsplit(":", 1)[1]))) as s:
        s.sendall(b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 2147483648\r\n\r\n")
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413")


@SHARED
def test_a_client_that_hangs_up_mid_body_logs_one_redacted_line_and_no_traceback(demo):
    port = int(demo.url.rsplit(":", 1)[1])
    token = re.search(r"/t/([A-Za-z0-9_-]{20,})", demo.output()).group(1)
    start_at = len(demo.output())  # the shared server's log: count this test's lines only
    for path in ("/login", "/login", f"/t/{token}/seat"):
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(
                f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n".encode()
                + b"Content-Length: 5000\r\n\r\nusername=admin&password="
            )
    assert httpx.get(demo.url + "/healthz").status_code == 200
    deadline = time.monotonic() + 20
    while demo.output()[start_at:].count("client left") < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    log = demo.output()
    assert log[start_at:].count("client left during its request to /login") == 2, log
    assert "client left during its request to /t/[token]/seat" in log[start_at:], log  # the token never reaches the log
    assert log.count(token) == 1, log  # only the demo's own banner line
    assert "Traceback" not in log and "Exception" not in log, log


def test_a_silent_body_times_out(tmp_path):
    server = start(["--demo", "--receive-timeout", "1"], tmp_path / "serve.log")
    try:
        with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=30) as s:
            s.sendall(
                b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                b"Content-Length: 100\r\n\r\nusername="
            )
            answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer
    finally:
        assert server.stop() == 0


def test_1030_idle_sockets_under_a_1024_fd_limit_do_not_stop_a_new_client(tmp_path):
    if not shutil.which("prlimit"):
        pytest.skip("prlimit (util-linux) is missing")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this test process may open only {hard} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4096) if hard == resource.RLIM_INFINITY else hard, hard))
    server = start(["--demo", "--idle-timeout", "4"], tmp_path / "serve.log", prefix=["prlimit", "--nofile=1024"])
    port = int(server.url.rsplit(":", 1)[1])
    idle: list[socket.socket] = []
    try:
        for _ in range(1030):  # they connect and say nothing (the kernel's backlog takes what the server cannot)
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            idle.append(s)
        fds = f"/proc/{server.proc.pid}/fd"  # prlimit execs the server: same process
        until = time.monotonic() + 30
        opened = 0
        while time.monotonic() < until:  # out of descriptors: the flood is in
            opened = len(os.listdir(fds))
            if opened >= 1010:
                break
            time.sleep(0.02)
        assert opened >= 1010, f"the flood never used up the server's descriptors ({opened} open): proves nothing"
        answered = None
        began = time.monotonic()
        deadline = began + 15  # the silent ones are closed after --idle-timeout (4 s)
        while time.monotonic() < deadline:
            try:
                r = httpx.get(server.url + "/healthz", timeout=5)
            except httpx.HTTPError:
                continue
            if r.status_code == 200:
                answered = time.monotonic()
                break
            assert r.status_code == 503  # over the concurrency limit: a clear refusal, not a hang
        assert answered is not None, server.output()[-2000:]
        print(f"a new client was served {answered - began:.1f} s after 1,030 silent sockets")
        assert server.proc.poll() is None  # still serving
    finally:
        for s in idle:
            s.close()
        assert server.stop() == 0
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
