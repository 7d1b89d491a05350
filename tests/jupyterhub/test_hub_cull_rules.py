"""The culler's rule on its own: stop only a ready server whose live, idle seat has been quiet long enough."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuseat.jupyterhub.cull import HubServer, decide, servers_of
from gpuseat.store.activity import SeatLive

NOW = 1_800_000_000.0
HOUR = 3600.0


def live(active: bool, at: float = NOW - 10) -> SeatLive:
    return SeatLive(seat_id=1, at=int(at), memory_used_mib=0, memory_total_mib=9856, utilization_gpu=0,
                    processes=int(active), foreign_processes=0, active=active)  # fmt: skip


def server(started: float | None = NOW - 5 * HOUR, ready: bool = True, pending: str | None = None) -> HubServer:
    return HubServer("alice", "", ready, pending, started)


def test_idle_seat_is_stopped_busy_seat_is_kept():
    assert decide(server(), "s1", live=live(False), last_active=NOW - 3 * HOUR, now=NOW, idle_s=2 * HOUR).stop
    busy = decide(server(), "s1", live=live(True), last_active=NOW - 3 * HOUR, now=NOW, idle_s=2 * HOUR)
    assert not busy.stop and busy.reason == "GPU busy now"


def test_recent_start_protects_a_pool_seat_used_long_ago():
    v = decide(
        server(started=NOW - 0.5 * HOUR), "s1", live=live(False), last_active=NOW - 30 * HOUR, now=NOW, idle_s=HOUR
    )
    assert not v.stop


def test_no_monitor_reading_no_seat_or_not_ready_keeps_the_server():
    assert not decide(server(), "s1", live=None, last_active=None, now=NOW, idle_s=HOUR).stop
    assert not decide(server(), None, live=live(False), last_active=None, now=NOW, idle_s=HOUR).stop
    assert not decide(
        server(ready=False, pending="spawn"), "s1", live=live(False), last_active=None, now=NOW, idle_s=HOUR
    ).stop


def test_servers_from_the_hub_api():
    users = [
        {"name": "alice", "servers": {"": {"ready": True, "pending": None, "started": "2026-12-02T17:45:51.123456Z"}}},
        {"name": "bob", "servers": {}},
        {"name": "carol", "servers": {"gpu": {"ready": False, "pending": "spawn", "started": None}}},
    ]
    got = servers_of(users)
    assert [s.ref for s in got] == ["alice/", "carol/gpu"]
    assert got[0].started == 1796233551.123456
    assert got[1].started is None and got[1].pending == "spawn"


@given(
    active=st.booleans(),
    has_live=st.booleans(),
    started=st.one_of(st.none(), st.floats(NOW - 100 * HOUR, NOW)),
    last=st.one_of(st.none(), st.floats(NOW - 100 * HOUR, NOW)),
    idle_h=st.floats(0.01, 48),
)
def test_never_stops_a_busy_or_recent_server(active, has_live, started, last, idle_h):
    v = decide(
        server(started=started),
        "s1",
        live=live(active) if has_live else None,
        last_active=last,
        now=NOW,
        idle_s=idle_h * HOUR,
    )
    if v.stop:
        assert has_live and not active
        marks = [t for t in (started, last) if t is not None]
        assert marks and NOW - max(marks) >= idle_h * HOUR
