"""Seat requests and the seat-hour ledger travel with a course export (issue 40): export → import into
another store gives the same requests, quotas, top-ups and hours left; an export made before these members
existed still imports. A request still pending at export time (``course delete`` writes the export first)
is in the export as it was, and imported as failed: never carried out on whoever holds the seat by then."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuseat.store import CourseStore, open_store
from gpuseat.store.export import LEDGER_MEMBERS, PENDING_AT_EXPORT, export_course, import_course

from .conftest import two_seat_lab


def _course(tmp_path: Path, store: CourseStore | None = None):
    store = store or open_store(f"sqlite:///{tmp_path / 'a.db'}", create=True)
    ann, ben = two_seat_lab(store)
    store.seats.assign("lab", ann, "seat-01")
    store.seats.assign("lab", ben, "seat-02")
    stop = store.requests.request_seat("lab", ann, "stop", actor=ann)
    store.requests.finish_request("lab", stop.id, ok=True, reason="stopped: logins refused, processes ended")
    store.requests.request_seat("lab", ann, "restart", actor=ann)  # still pending
    store.requests.add_seat_hours("lab", ann, 60, kind="quota", actor="organizer")
    store.requests.add_seat_hours("lab", ann, 5, actor="organizer", note="project week")
    return store, ann, ben


def _rows(store, who: str) -> list[tuple]:
    return [(r.seat, r.action, r.state, r.reason, r.actor, r.requested_at, r.done_at)
            for r in store.requests.seat_requests("lab", participant=who)]  # fmt: skip


def test_requests_and_hours_survive_export_and_import(tmp_path: Path) -> None:
    store, ann, ben = _course(tmp_path)
    got = export_course(store, "lab", tmp_path / "lab.zip")
    assert (got["seat_requests"], got["seat_hours"]) == (2, 2)
    other = open_store(f"sqlite:///{tmp_path / 'b.db'}", create=True)
    summary = import_course(other, tmp_path / "lab.zip")
    assert [r.state for r in other.requests.seat_requests("lab", participant=ann)] == ["failed", "done"]
    assert (summary["seat_requests"], summary["requests_failed"], summary["seat_hours"]) == (2, 1, 2)
    assert _rows(other, ann)[1:] == _rows(store, ann)[1:] and _rows(other, ben) == []  # the done stop as it was
    hours, again = store.requests.seat_hours("lab")[ann], other.requests.seat_hours("lab")[ann]
    assert (again.quota, again.topups) == (hours.quota, hours.topups) == (60, 5)
    assert other.requests.run_states("lab")[ann].running is False  # the stop is on her timeline there too
    store.close()
    other.close()


def test_an_export_without_the_ledger_members_still_imports(tmp_path: Path) -> None:
    store, ann, _ben = _course(tmp_path)
    export_course(store, "lab", tmp_path / "lab.zip")
    old = io.BytesIO()
    with zipfile.ZipFile(tmp_path / "lab.zip") as src, zipfile.ZipFile(old, "w") as dst:
        manifest = json.loads(src.read("manifest.json"))
        for name in LEDGER_MEMBERS:
            del manifest["sha256"][name]
        dst.writestr("manifest.json", json.dumps(manifest))
        for name in src.namelist():
            if name != "manifest.json" and name not in LEDGER_MEMBERS:
                dst.writestr(name, src.read(name))
    (tmp_path / "old.zip").write_bytes(old.getvalue())
    other = open_store(f"sqlite:///{tmp_path / 'b.db'}", create=True)
    summary = import_course(other, tmp_path / "old.zip")
    assert (summary["seat_requests"], summary["seat_hours"]) == (0, 0)
    assert other.requests.seat_requests("lab", participant=ann) == []
    store.close()
    other.close()


def test_a_request_pending_when_the_course_was_deleted_is_imported_failed(
    store: CourseStore, url: str, cli: Callable[..., Any], tmp_path: Path
) -> None:
    _store, ann, _ben = _course(tmp_path, store)
    deleted = cli("course", "delete", "lab", "--yes", "--export-to", tmp_path / "lab.zip", "--db", url)
    assert deleted.code == 0 and "course lab deleted" in deleted.out, deleted.out + deleted.err
    with zipfile.ZipFile(tmp_path / "lab.zip") as zf:  # the export is the record as it was
        exported = json.loads(zf.read("seat_requests.json"))
    assert [(r["action"], r["state"], r["done_at"]) for r in exported] == [
        ("stop", "done", exported[0]["done_at"]),
        ("restart", "pending", None),
    ]
    imported = cli("course", "import", tmp_path / "lab.zip", "--db", url)
    assert imported.code == 0, imported.out + imported.err
    assert store.requests.seat_requests("lab", pending=True) == []  # nothing left for an agent to carry out
    assert "1 seat request(s) pending at export stored as failed, never carried out" in imported.out, imported.out
    restart, stop = store.requests.seat_requests("lab", participant=ann)
    assert (restart.action, restart.state, restart.reason) == ("restart", "failed", PENDING_AT_EXPORT)
    assert restart.done_at is not None and restart.done_at >= restart.requested_at
    assert (stop.action, stop.state) == ("stop", "done")
    assert store.requests.run_states("lab")[ann].running is False  # her seat stays stopped, as exported
    said = [e for e in store.events.events("lab") if e.action == "seat.request.failed"]
    assert [(e.participant, e.detail["reason"]) for e in said] == [(ann, PENDING_AT_EXPORT)]
