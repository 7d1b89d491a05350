"""The activity service reads what the real monitor pipeline wrote (samples, minute aggregates, alerts)."""

from __future__ import annotations

from gpuseat.monitor.alerts import AlertTracker
from gpuseat.monitor.replay import ReplaySampler, synthetic_snapshot
from gpuseat.monitor.runner import Monitor
from gpuseat.readings import SeatEntry
from gpuseat.store import Store, open_store

T0 = 1_700_006_400.0  # a UTC day boundary (19675 × 86400)


def _run(url: str, seconds: int, *, step: int = 10, idle_hours: float = 0.5) -> tuple[Store, dict[str, int]]:
    snaps = [
        synthetic_snapshot(gpus=1, migs_per_gpu=3, processes=1, taken_at=T0 + step * i)
        for i in range(seconds // step + 1)
    ]
    store = open_store(url, create=True)
    devs = [m.uuid for m in snaps[0].gpus[0].mig]
    store.monitor.import_seats([SeatEntry(f"s{i}", d, f"p{i}") for i, d in enumerate(devs)])
    mon = Monitor(
        ReplaySampler(snaps, loop=False),
        store.monitor.seat_map(),
        store=store.monitor,
        alerts=AlertTracker(idle_hours=idle_hours),
    )
    mon.run(0, ticks=len(snaps))
    with store.database.engine.connect() as conn:
        ids = {k: i for k, i in conn.exec_driver_sql("SELECT key, id FROM seats")}
    return store, ids


def test_live_last_active_idle_and_daily(db_url):
    store, ids = _run(db_url, 2 * 3600)
    act = store.activity
    end = T0 + 2 * 3600

    live = act.live()
    assert set(live) == set(ids.values())  # one synthetic MIG slice per seat, all sampled
    busy, idle = live[ids["s0"]], live[ids["s1"]]
    assert busy.at == int(end) and busy.active and busy.memory_used_mib == 512 and busy.processes == 1
    assert not idle.active and idle.memory_used_mib == 0
    assert act.live(now=end + 3600) == {}  # nothing within the live window an hour later
    assert set(act.live(seat_ids=[ids["s1"]])) == {ids["s1"]}

    last = act.last_active()
    assert last[ids["s0"]] == end  # the newest raw sample is newer than the last rolled-up minute
    assert last[ids["s1"]] is None and last[ids["s2"]] is None
    assert act.idle_seats(T0) == sorted([ids["s1"], ids["s2"]])
    assert act.idle_seats(end + 1) == sorted(ids.values())
    assert act.idle_seats(T0, seat_ids=[ids["s0"]]) == []

    days = act.daily()
    assert {d.seat_id for d in days} == set(ids.values())
    s0 = next(d for d in days if d.seat_id == ids["s0"])
    assert s0.day == int(T0) // 86400 and round(s0.sampled_hours, 3) == 2.0 and s0.active_share == 1.0
    assert all(d.active_hours == 0 for d in days if d.seat_id != ids["s0"])

    alerts = act.open_alerts()
    assert {(a.kind, a.seat) for a in alerts} == {("idle", "s1"), ("idle", "s2")}
    assert [a.seat for a in act.open_alerts(seat_ids=[ids["s2"]])] == ["s2"]
    store.close()


def test_last_active_survives_the_raw_prune(tmp_path):
    """After raw samples are pruned, the last busy minute still answers ``last_active``."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    store, ids = _run(url, 3 * 3600, step=60)
    store.database.engine.dispose()
    with store.database.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM samples")
    act = store.activity
    assert act.last_active()[ids["s0"]] == T0 + 3 * 3600 - 1  # the end of the last rolled-up (finished) minute
    assert act.live() == {}
    store.close()


def test_results_have_one_dict_shape(tmp_path):
    store, ids = _run(f"sqlite:///{tmp_path / 'c.db'}", 600)
    act = store.activity
    live = act.live()[ids["s0"]].to_dict()
    assert live["seat_id"] == ids["s0"] and live["active"] is True
    assert act.daily()[0].to_dict().keys() == {"seat_id", "day", "sampled_hours", "active_hours", "utilization_avg"}
    assert act.open_alerts() == []  # 10 minutes is not idle for half an hour yet
    store.close()
