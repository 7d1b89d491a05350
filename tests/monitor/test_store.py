"""The course database on SQLite (always) and PostgreSQL (when GPUSEAT_TEST_PG_URL is set)."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text

from gpuseat.db import make_engine, resolve_url
from gpuseat.db.models import Base
from gpuseat.monitor.replay import ReplaySampler, synthetic_snapshot
from gpuseat.monitor.runner import Monitor, observe
from gpuseat.readings import SeatEntry, SeatMap
from gpuseat.store import open_monitor

T0 = 1_700_000_040.0  # a minute boundary


def seats_for(snap, n):
    devs = [m.uuid for g in snap.gpus for m in g.mig][:n]
    return [SeatEntry(f"s{i:02d}", d, f"p{i:02d}") for i, d in enumerate(devs)]


def test_migration_matches_models(url):
    store = open_monitor(url)
    with make_engine(url).connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    store.close()
    assert diff == []


def test_sqlite_runs_in_wal_mode(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'x' / 'c.db'}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_default_url_honours_data_dir(data_dir, monkeypatch):
    assert resolve_url() == f"sqlite:///{data_dir / 'gpuseat.db'}"
    monkeypatch.setenv("GPUSEAT_DB_URL", "postgresql+psycopg://u@h/db")
    assert resolve_url() == "postgresql+psycopg://u@h/db"
    assert resolve_url("sqlite:///x.db") == "sqlite:///x.db"


def test_seat_import_reassigns(url):
    store = open_monitor(url)
    store.import_seats([SeatEntry("s1", "MIG-a", "alice", "al"), SeatEntry("s2", "GPU-b", "bob")])
    store.import_seats([SeatEntry("s1", "MIG-a", "carol")])
    by_seat = {e.seat: e for e in store.seat_map().entries}
    assert by_seat["s1"].participant == "carol" and by_seat["s1"].login == "carol"
    assert by_seat["s2"].participant == "bob"
    with make_engine(url).connect() as conn:
        closed = conn.execute(text("SELECT count(*) FROM assignments WHERE valid_to IS NOT NULL")).scalar()
    assert closed == 1
    store.close()


def test_seat_import_stores_a_changed_host_as_the_rule_writes_it(url):
    """A seats file's ``host = "[2001:db8::6]"`` for a seat already stored was kept with its brackets
    (only a new seat's was normalised), and the participant was shown ``ssh alice@[2001:db8::6]``."""
    store = open_monitor(url)
    old_mig = "MIG-GPU-8932f937-d72c-4106-c12f-20bd9faed9f6/7/0"  # drivers R450-R460
    for host in ("[2001:db8::5]", "[2001:db8::6]"):
        store.import_seats([SeatEntry("s1", old_mig, "alice", None, host)])
    with make_engine(url).connect() as conn:
        assert conn.execute(text("SELECT host, device_uuid FROM seats")).all() == [("2001:db8::6", old_mig)]
    store.import_seats([SeatEntry("s1", old_mig, "alice", None, "[2001:db8::6]")])  # the same file again
    with make_engine(url).connect() as conn:
        moves = conn.execute(text("SELECT count(*) FROM events WHERE action = 'seat.device'")).scalar()
    assert moves == 1  # one change of host, not one per import of the same file
    store.close()


def test_downsampling_keeps_one_row_per_device_minute_and_prunes_raw(url):
    snaps = [
        synthetic_snapshot(gpus=1, migs_per_gpu=2, processes=1, taken_at=T0 + 10 * i) for i in range(3 * 60 * 6 + 1)
    ]
    store = open_monitor(url, raw_keep_s=3600)
    seats = seats_for(snaps[0], 2)
    store.import_seats(seats)
    seat_map = store.seat_map()
    for snap in snaps:  # 3 hours at 10 s
        _, states = observe(snap, seat_map, users={})
        store.write(snap.host, snap.taken_at, states)
    counts = store.counts()
    assert counts["minute_aggregates"] == 2 * 180  # 180 finished minutes × 2 devices
    assert counts["samples"] <= 2 * (360 + 7)  # only the last hour (+ the current minute) stays raw
    rows = store.usage_rows()
    busy = [r for r in rows if r.participant == "p00"]
    assert len(busy) == 180 and all(r.samples == 6 and r.active_samples == 6 for r in busy)
    assert {r.memory_max_mib for r in busy} == {512}
    idle = [r for r in rows if r.participant == "p01"]
    assert all(r.active_samples == 0 for r in idle)
    assert len(store.usage_rows(since=T0 + 3600)) == 2 * 120
    store.close()


def test_rollup_resumes_after_restart(url):
    store = open_monitor(url)
    snap = synthetic_snapshot(gpus=1, migs_per_gpu=1, processes=1, taken_at=T0)
    for i in range(12):
        _, states = observe(snap, SeatMap(), users={})
        store.write("lab", T0 + 10 * i, states)
    store.close()
    again = open_monitor(url)
    _, states = observe(snap, SeatMap(), users={})
    again.write("lab", T0 + 200, states)
    assert again.counts()["minute_aggregates"] == 2  # minutes 0 and 1, each once (no duplicate key)
    again.close()


class FlakyStore:
    """A real store whose writes fail while ``down`` is set (the database went away)."""

    def __init__(self, store):
        self.store, self.down = store, True

    def write(self, *args):
        if self.down:
            raise OSError("database is locked")
        self.store.write(*args)

    def record_alert(self, alert):
        self.store.record_alert(alert)

    def close(self):
        self.store.close()


def test_failing_writes_are_retried_and_sampling_goes_on(tmp_path):
    snaps = [synthetic_snapshot(gpus=1, migs_per_gpu=2, processes=1, taken_at=T0 + 10 * i) for i in range(5)]
    flaky = FlakyStore(open_monitor(f"sqlite:///{tmp_path / 'c.db'}"))
    mon = Monitor(ReplaySampler(snaps, loop=False), SeatMap(), store=flaky)
    ticks = [mon.tick() for _ in range(3)]
    assert [t.stored for t in ticks] == [False] * 3 and len(mon.pending) == 3 and mon.write_failures == 6
    flaky.down = False
    assert mon.tick().stored and not mon.pending
    assert flaky.store.counts()["samples"] == 4 * 2
    mon.close()


class SlowStore:
    """A real store whose writes wait until ``release`` is set (a locked or slow database)."""

    def __init__(self, store):
        import threading

        self.store, self.release, self.writing = store, threading.Event(), threading.Event()

    def write(self, *args):
        self.writing.set()
        assert self.release.wait(30)
        self.store.write(*args)

    def record_alert(self, alert):
        self.store.record_alert(alert)

    def close(self):
        self.store.close()


def test_background_writer_never_delays_a_tick_and_stores_every_sample_on_close(tmp_path):
    snaps = [synthetic_snapshot(gpus=1, migs_per_gpu=2, processes=1, taken_at=T0 + 10 * i) for i in range(4)]
    slow = SlowStore(open_monitor(f"sqlite:///{tmp_path / 'c.db'}"))
    mon = Monitor(ReplaySampler(snaps, loop=False), SeatMap(), store=slow, background=True)
    ticks = [mon.tick()]
    assert slow.writing.wait(30)  # the writer thread is stuck in the first write ...
    ticks += [mon.tick() for _ in range(3)]  # ... and the ticks still return
    assert not any(t.stored for t in ticks) and mon.samples_stored == 0
    slow.release.set()
    assert mon.wait_written(30)
    assert mon.samples_stored == 4 and not mon.pending
    mon.close()
    assert open_monitor(f"sqlite:///{tmp_path / 'c.db'}").counts()["samples"] == 4 * 2


def test_background_writer_retries_failed_writes_in_order(tmp_path):
    snaps = [synthetic_snapshot(gpus=1, migs_per_gpu=2, processes=1, taken_at=T0 + 10 * i) for i in range(5)]
    flaky = FlakyStore(open_monitor(f"sqlite:///{tmp_path / 'c.db'}"))
    mon = Monitor(ReplaySampler(snaps, loop=False), SeatMap(), store=flaky, background=True)
    for _ in range(3):
        mon.tick()
        assert mon.wait_written(30)
    assert len(mon.pending) == 3 and mon.write_failures == 6 and mon.samples_stored == 0
    flaky.down = False
    mon.tick()
    assert mon.wait_written(30) and not mon.pending and mon.samples_stored == 4
    with make_engine(f"sqlite:///{tmp_path / 'c.db'}").connect() as conn:
        ids = [r[0] for r in conn.execute(text("SELECT ts FROM samples ORDER BY id"))]
    assert ids == sorted(ids) and len(ids) == 4 * 2  # the retried rows were written first, in order
    mon.close()
