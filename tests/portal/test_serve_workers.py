"""``gpuseat serve`` worker processes (issue 38 item 19): one per core for PostgreSQL, one for SQLite,
``--workers N`` to choose; the real CLI as a child process, a participant's page and claim through it."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuseat.cli.serve import MAX_WORKERS, default_workers
from gpuseat.core.roster import RosterText
from gpuseat.store import open_store

from .live import csrf_of, start

COURSE = 'name = "Rush"\nparticipants = 4\n[schedule]\nstart = 2026-09-07\ndays = 5\n'


def _course(url: str, tmp_path: Path) -> dict[str, str]:
    store = open_store(url, create=True)
    (tmp_path / "rush.toml").write_text(COURSE)
    store.courses.create_course(tmp_path / "rush.toml", key="rush")
    rows = "name,email\n" + "".join(f"P{i},p{i}@example.org\n" for i in range(4))
    store.roster.import_roster("rush", RosterText(rows, where="roster"))
    store.seats.add_seats("rush", [{"key": f"s{i}", "kind": "gpu", "host": "gpu1"} for i in range(4)])
    links = {t.participant: t.token for t in store.tokens.issue_tokens("rush")}
    store.close()
    return links


def _workers(parent: int) -> list[int]:
    """The server's worker processes (uvicorn's supervisor spawns them as its children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"spawn_main" in cmd:
            found.append(int(entry.name))
    return found


def test_postgresql_is_served_by_one_process_per_core(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    from pg_schema import pg_schema_url

    url = pg_schema_url(request)
    assert default_workers(url) == min(MAX_WORKERS, len(os.sched_getaffinity(0)))
    links = _course(url, tmp_path)
    server = start(["--db", url, "--workers", "3", "--links-expire", "never"], tmp_path / "serve.log")
    try:
        workers = _workers(server.proc.pid)
        assert len(workers) == 3, server.output()
        # every participant opens their page and takes a seat; requests land on any of the workers
        with httpx.Client(base_url=server.url) as client:
            for who, token in links.items():
                page = client.get(f"/t/{token}")
                assert page.status_code == 200 and 'id="seat-claim"' in page.text, who
                r = client.post(f"/t/{token}/claim", data={"csrf": csrf_of(page.text)}, follow_redirects=False)
                assert r.status_code == 303, r.text
                assert 'id="seat-key"' in client.get(f"/t/{token}").text, who
        store = open_store(url)
        held = {s.participant: s.key for s in store.seats.seats("rush") if s.participant}
        store.close()
        assert sorted(held) == sorted(links) and len(set(held.values())) == 4
    finally:
        assert server.stop(signal.SIGTERM) == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)


def test_sqlite_is_served_by_one_process(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'course.db'}"
    assert default_workers(url) == 1
    _course(url, tmp_path)
    server = start(["--db", url], tmp_path / "serve.log")
    try:
        assert _workers(server.proc.pid) == []
        assert httpx.get(server.url + "/healthz").status_code == 200
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("workers", ["0", str(MAX_WORKERS + 1)])
def test_serve_refuses_a_bad_worker_count(cli: Any, tmp_path: Path, workers: str) -> None:
    url = f"sqlite:///{tmp_path / 'course.db'}"
    _course(url, tmp_path)
    r = cli("serve", "--db", url, "--workers", workers)
    assert r.code == 2 and "--workers" in r.err and "Traceback" not in r.err
