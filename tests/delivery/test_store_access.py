"""The one store path for delivery (state + access + events, readiness) and ``seats connect``,
on SQLite and PostgreSQL; and the engine registry's classes all implement the one interface."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuseat.core.readiness import Access, Readiness
from gpuseat.errors import InputError, InvalidTransition
from gpuseat.store import CourseStore, open_store
from pg_schema import pg_schema_url

from .conftest import COURSE_TOML


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'course.db'}"
    return pg_schema_url(request)


@pytest.fixture
def store(url: str, tmp_path: Path) -> Iterator[CourseStore]:
    s = open_store(url, create=True)
    (tmp_path / "lab.toml").write_text(COURSE_TOML)
    s.courses.create_course(tmp_path / "lab.toml", key="lab")
    (tmp_path / "r.csv").write_text("name;email;unix_user\nAnn;ann@example.org;ann\nBen;ben@example.org;ben\n")
    s.roster.import_roster("lab", tmp_path / "r.csv")
    s.seats.add_seats(
        "lab", [{"key": f"seat-0{i}", "kind": "mig", "host": "h200-2x", "engine": "host"} for i in (1, 2)]
    )
    s.seats.assign("lab", "ann", "seat-01")
    yield s
    s.close()


def _events(store: CourseStore, action: str) -> list[Any]:
    return [e for e in store.events.events("lab") if e.action == action]


def test_one_path_writes_state_access_and_one_event(store: CourseStore) -> None:
    access = Access(kind="ssh", host="gpu1.example.org", port=2222, user="ann", device_uuid="MIG-1")
    assert store.delivery.record_delivery("lab", "seat-01", access=access, state="running", reason="host up")
    assert not store.delivery.record_delivery("lab", "seat-01", access=access, state="running", reason="host up")
    seat = store.seats.get_seat("lab", "seat-01")
    assert seat.state == "running" and seat.state_reason == "host up"
    assert Access.from_dict(store.delivery.access_of("lab")["seat-01"]) == access
    [event] = _events(store, "seat.delivery")
    assert event.seat == "seat-01" and event.participant == "ann" and event.detail["to"] == "running"
    with pytest.raises(InvalidTransition):
        store.delivery.record_delivery("lab", "seat-01", state="planned")
    with pytest.raises(InputError, match="no seat 'seat-9'"):
        store.delivery.record_delivery("lab", "seat-9", state="running")


def test_readiness_is_kept_per_seat_with_an_event(store: CourseStore) -> None:
    now = datetime.now(UTC)
    r = Readiness("lab", "seat-01", "ann", "broken", "no GPU visible", "GPU list: empty", (), now, "host")
    assert store.delivery.record_readiness([r]) == 1
    kept = store.delivery.readiness_of("lab")["seat-01"]
    assert kept["state"] == "broken" and kept["reason"] == "no GPU visible" and kept["checked_at"] == now.isoformat()
    assert _events(store, "seat.check")[0].detail["state"] == "broken"


def test_semicolon_roster_imported(store: CourseStore) -> None:
    assert {p.unix_user for p in store.roster.participants("lab")} == {"ann", "ben"}


def test_seats_connect_sets_and_shows_the_way_in(url: str, store: CourseStore, cli: Callable[..., Any]) -> None:
    r = cli("seats", "connect", "seat-01", "--ssh", "gpu1.example.org:2222", "--jump", "gw.example.org", "--db", url)
    assert r.code == 0, r.err
    assert "ssh -p 2222 -J gw.example.org ann@gpu1.example.org" in r.out
    shown = json.loads(cli("seats", "connect", "seat-01", "--db", url, "--format", "json").out)
    assert "Host gpuseat-seat-01" in shown["ssh_config"] and "ProxyJump gw.example.org" in shown["ssh_config"]
    # the inventory's name is not a host: refused, naming the field
    bad = cli("seats", "connect", "seat-02", "--ssh", "ann@h200-2x.toml", "--db", url)
    assert bad.code == 2 and "ssh" in bad.err and "Traceback" not in bad.err
    label = cli("seats", "connect", "seat-02", "--ssh", "ben@h200-2x", "--db", url)
    assert label.code == 2 and "inventory's name" in label.err and "ssh_host" in label.err
    assert cli("seats", "connect", "seat-02", "--url", "javascript:alert(1)", "--db", url).code == 2
    assert cli("seats", "connect", "seat-02", "--ssh", "ann@gpu1;rm -rf /", "--db", url).code == 2
    ok = cli("seats", "connect", "seat-02", "--url", "https://hub.example.org/user/ben/", "--db", url)
    assert ok.code == 0 and "https://hub.example.org/user/ben/" in ok.out


def test_seats_add_count_for_one_profile(url: str, store: CourseStore, cli: Callable[..., Any], tmp_path: Path) -> None:
    inv = Path(__file__).resolve().parents[2] / "examples" / "h200-2x-server.toml"
    store.courses.create_course(tmp_path / "lab.toml", key="mig")
    args = ("seats", "add", "--course", "mig", "--inventory", inv, "--mode", "mig", "--profile", "1g.18gb")
    five = cli(*args, "--count", "5", "--db", url, "--format", "json")
    assert five.code == 0, five.err
    assert len(json.loads(five.out)) == 5
    too_many = cli(*args, "--count", "15", "--db", url)
    assert too_many.code == 2 and "do not fit" in too_many.err and "Traceback" not in too_many.err


def test_seats_connect_never_prints_the_previous_holders_access(
    url: str, store: CourseStore, cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent hands the seat over while ``seats connect`` reads it: what is printed (the stored access)
    and what is judged (the way in) come from one read, so ben's login never shows beside ann's seat.
    The hand-over is injected right after the command's first read of the stored ways in (CI once caught
    the interleaving by chance on PostgreSQL)."""
    from gpuseat.store.delivery import Delivery

    bens = Access(kind="ssh", host="gpu1.example.org", user="ben", holder="ben")
    store.delivery.record_delivery("lab", "seat-01", access=bens)  # made for the seat's previous holder
    original = Delivery.access_of
    handed: list[bool] = []

    def access_of(self: Delivery, course: str | None = None) -> dict[str, dict[str, Any]]:
        seen = original(self, course)
        if not handed:  # the agent writes ann's way in just after this read
            handed.append(True)
            anns = Access(kind="ssh", host="gpu1.example.org", user="ann", holder="ann")
            store.delivery.record_delivery("lab", "seat-01", access=anns)
        return seen

    monkeypatch.setattr(Delivery, "access_of", access_of)
    out = cli("seats", "connect", "seat-01", "--db", url, "--format", "json")
    assert out.code == 0, out.err
    shown = json.loads(out.out)
    assert "ben@" not in out.out and shown["access"] is None
    assert shown["missing"].startswith("being prepared")
    monkeypatch.setattr(Delivery, "access_of", original)
    again = json.loads(cli("seats", "connect", "seat-01", "--db", url, "--format", "json").out)
    assert again["access"]["user"] == "ann" and "ann@gpu1.example.org" in (again["command"] or "")
