"""A webhook that fails is retried in the background and counted; it never stops or slows the monitor;
a URL that can never work is refused when the command starts."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from gpuseat.monitor.webhook import WebhookSender
from gpuseat.readings import Alert

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


class _Flaky(BaseHTTPRequestHandler):
    failures_left = 0
    received: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        if cls.failures_left > 0:
            cls.failures_left -= 1
            self.send_response(503)
        else:
            cls.received.append(body)
            self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver():
    handler = type("Handler", (_Flaky,), {"failures_left": 2, "received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, handler
    server.shutdown()
    server.server_close()


def _alert(i: int) -> Alert:
    return Alert(kind="idle", key=f"seat-{i}", message=f"seat-{i} idle", at=1_700_000_000.0 + i, seat=f"seat-{i}")


def test_failures_are_retried_in_order(receiver) -> None:
    server, handler = receiver
    sender = WebhookSender(f"http://127.0.0.1:{server.server_port}/hook", backoff_s=0.05)
    for i in range(3):
        sender.submit(_alert(i))
    sender.close(timeout_s=30)
    assert [a["key"] for a in handler.received] == ["seat-0", "seat-1", "seat-2"]
    assert (sender.sent, sender.failed, sender.dropped) == (3, 0, 0)
    assert handler.received[0]["state"] == "firing"


def test_a_dead_receiver_never_blocks_submit() -> None:
    sender = WebhookSender("http://127.0.0.1:9/closed", backoff_s=0.05, attempts=2, timeout_s=0.5)
    started = time.monotonic()
    for i in range(50):
        sender.submit(_alert(i))
    submit_time = time.monotonic() - started
    sender.close(timeout_s=60)
    assert sender.sent == 0 and sender.failed >= 1
    assert sender.failed + sender.dropped == 50
    # submitting 50 alerts took no network time: far less than one connection attempt each
    assert submit_time < 50 * 0.05


@pytest.mark.parametrize("url", ["file:///etc/passwd", "http://[::1", "http://x:0/", "javascript:alert(1)", "hooks"])
def test_a_bad_webhook_is_refused_at_start(cli, tmp_path, url) -> None:
    r = cli(
        "monitor",
        "--from-xml",
        FIXTURES / "telegraf__tesla-t4.xml",
        "--ticks",
        "1",
        "--webhook",
        url,
        "--db",
        f"sqlite:///{tmp_path / 'm.db'}",
    )
    assert r.code == 2, r.err
    assert "--webhook" in r.err and "Traceback" not in r.err
    assert not (tmp_path / "m.db").exists()
