"""The course webhook (the course file's ``webhook``): the agent posts, to a real HTTP server on a free
port, the broken seats before a lab session (one seat's device file removed) and an idle warning.

The receiver refuses the first POST (HTTP 500): the body still arrives, from the sender's retry, and the
pass that queued it did not wait for it.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpuseat.engines.apply import one_pass
from gpuseat.engines.runner import Runner
from gpuseat.store import open_store

from .hostlab import Lab, free_port
from .test_agent import MIG, _seat_of, _settings
from .test_selfservice import IDLE_COURSE, _apply, _held_since, _policy_course, _samples


class Receiver:
    """Bodies POSTed to ``url``; the first POST is answered 500 (a receiver that fails once)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.refused = 0
        got = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                first = got.refused == 0
                if first:
                    got.refused += 1
                else:
                    got.bodies.append(body)
                self.send_response(500 if first else 204)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def wait(self, event: str, timeout: float = 20.0) -> dict[str, Any]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            found = [b for b in self.bodies if b.get("event") == event]
            if found:
                return found[-1]
            time.sleep(0.1)
        raise AssertionError(f"no {event} body within {timeout} s (got {self.bodies}, refused {self.refused})")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


def test_before_a_session_the_webhook_names_the_broken_seat_and_why(
    lab: Lab, cli: Callable[..., Any], tmp_path: Path, receiver: Receiver
) -> None:
    """A session 20 minutes ahead (lead 30 min): ben's device file is gone; the pass checks every seat as
    its participant and the webhook body names ben's seat and the reason before the session starts."""
    at = datetime.now(UTC) + timedelta(minutes=20)
    end = at + timedelta(hours=1)
    (tmp_path / "lab.toml").write_text(
        f'name = "Session lab"\nparticipants = 2\nwebhook = "{receiver.url}"\n'
        '[needs]\nmin_gpu_memory_gb = 16\nisolation = "partitioned"\n'
        f'[schedule]\nstart = {(at - timedelta(days=1)).date()}\ndays = 3\naccess = "24/7"\n'
        f'[[schedule.session]]\ndate = {at.date()}\nhours = "{at:%H:%M}-{end:%H:%M}"\n'
        "[policy]\nlead_minutes = 30\n"
    )
    lab.person("ann"), lab.person("ben")
    (tmp_path / "roster.csv").write_text(lab.roster())
    listing = subprocess.run([str(lab.nvidia_smi), "-L"], capture_output=True, text=True, check=True).stdout
    (tmp_path / "smi-L.txt").write_text(listing)
    lab.port = free_port()
    db = f"sqlite:///{tmp_path / 'course.db'}"
    for args in (
        ("course", "create", tmp_path / "lab.toml", "--key", "lab", "--timezone", "UTC"),
        ("roster", "import", tmp_path / "roster.csv"),
        ("seats", "add", "--from-nvidia-smi", tmp_path / "smi-L.txt", "--engine", "host", "--host", "gpu1"),
    ):
        r = cli(*args, "--db", db)
        assert r.code == 0, (args, r.err)
    _settings(cli, lab, db)
    by_uuid = _seat_of(cli, db)
    seat = {"ann": by_uuid[MIG[0]], "ben": by_uuid[MIG[1]]}
    for who, key in seat.items():
        assert cli("seats", "assign", "--participant", who, "--seat", key, "--db", db).code == 0
    # half an hour earlier, the session was not near yet: seats delivered, nobody checked
    with open_store(db) as store:
        earlier = one_pass(store, course="lab", engine="host", host="gpu1", runner=Runner(),
                           now=datetime.now(UTC) - timedelta(minutes=30))  # fmt: skip
    assert not earlier.failed
    assert not [o for r in earlier.reports for o in r.outcomes if o.step.action in ("seat.check", "session.report")]
    lab.start_sshd()
    assert lab.ssh("ben", "true").returncode == 0
    lab.cap_file(0, 8, 0).unlink()  # then ben's MIG device file went
    started = time.monotonic()
    r = cli("apply", "--course", "lab", "--engine", "host", "--host", "gpu1", "--db", db)
    assert "session.report" in r.out, r.out + r.err
    assert time.monotonic() - started < 30  # the refused POST did not hold the pass
    body = receiver.wait("session.check")
    assert datetime.now(UTC) < at <= datetime.fromisoformat(body["session_starts"]) + timedelta(minutes=1)
    assert (body["course"], body["engine"], body["host"], body["checked"]) == ("lab", "host", "gpu1", 2)
    (broken,) = body["broken"]
    assert (broken["seat"], broken["participant"]) == (seat["ben"], "ben")
    assert "device file" in broken["reason"], broken
    assert receiver.refused == 1  # the first POST failed and was tried again


def test_an_idle_warning_is_posted_with_the_seat_and_when_it_stops(
    lab: Lab, cli: Callable[..., Any], tmp_path: Path, receiver: Receiver
) -> None:
    toml = IDLE_COURSE.replace("grace_minutes = 0", "grace_minutes = 10").replace(
        'name = "Idle lab"', f'name = "Idle lab"\nwebhook = "{receiver.url}"'
    )
    db, seat = _policy_course(lab, cli, tmp_path, toml)
    _held_since(db, 10)
    _samples(db, {seat["ann"]: 0, seat["ben"]: 93}, 5)  # ann idle, ben training; cat has no readings
    before = datetime.now(UTC)
    assert "seat.warn" in _apply(cli, db).out
    body = receiver.wait("seat.idle")
    assert (body["course"], body["seat"], body["participant"], body["minutes_idle"]) == ("lab", seat["ann"], "ann", 3)
    stops = datetime.fromisoformat(body["stops_at"])
    assert before + timedelta(minutes=10) - timedelta(seconds=1) <= stops <= datetime.now(UTC) + timedelta(minutes=10)
    assert "it stops in 10 min" in body["text"]
    assert [b["participant"] for b in receiver.bodies] == ["ann"]  # only the idle seat is warned
