"""Two courses with the same seat keys in one store: samples, alerts, digests and reports stay in their course.

Course ``a`` and course ``b`` both have a ``seat-01`` (on different GPUs) held by different people.
The monitor runs for course ``b`` only; nothing it measures or raises may show up in course ``a``,
and course ``a``'s own alerts must not reach course ``b``'s organizer (issue 21).
"""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import text

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.roster import RosterText
from gpuseat.monitor.replay import synthetic_snapshot, write_replay
from gpuseat.readings import Alert, LeafReading, SeatEntry, leaves
from gpuseat.services.report import build_digest
from gpuseat.services.survey import SurveyService
from gpuseat.store import CourseStore, SeatSpec

EXAMPLES = Path(__file__).parents[2] / "examples"
T0 = 1_700_000_040.0  # a minute boundary


def _two_courses(store: CourseStore, b_device: str) -> dict[str, int]:
    """Courses a and b, each with seat-01 (and seat-02) held by their own participant; returns seat ids."""
    for key, who, device in (("a", "ann", "GPU-aaaaaaaa-0000-0000-0000-000000000001"), ("b", "bob", b_device)):
        store.courses.create_course(EXAMPLES / "course-2016.toml", key=key)
        roster = f"name,email,unix_user,key\n{who.title()},{who}@{key}.example.org,{who},{who}\n"
        store.roster.import_roster(key, RosterText(roster, where=f"{key}.csv"))
        store.seats.add_seats(
            key,
            [
                SeatSpec(key="seat-01", kind="gpu", device_uuid=device, state="running"),
                SeatSpec(key="seat-02", kind="gpu", state="running"),
            ],
        )
        store.seats.assign(key, who, "seat-01")
    return {f"{s.course}/{s.key}": s.id for c in ("a", "b") for s in store.seats.seats(c)}


def test_the_monitor_of_course_b_samples_only_course_b(cli, store: CourseStore, url: str, tmp_path: Path) -> None:
    snaps = [synthetic_snapshot(gpus=1, migs_per_gpu=0, processes=1, taken_at=T0 + 30 * i) for i in range(9)]
    device = snaps[0].gpus[0].uuid
    ids = _two_courses(store, device)
    write_replay(tmp_path / "r.jsonl", snaps)
    r = cli(
        "monitor", "--replay", tmp_path / "r.jsonl", "--course", "b", "--db", url, "--interval", "0.1", "--ticks", "9"
    )
    assert r.code == 0, r.err
    with store.database.engine.connect() as conn:
        sampled = conn.execute(text("SELECT DISTINCT seat_id, participant_id FROM samples")).all()
        bob = conn.execute(
            text("SELECT p.id FROM participants p JOIN courses c ON c.id = p.course_id WHERE c.key = 'b'")
        )
        bob_id = bob.scalar()
    assert sampled == [(ids["b/seat-01"], bob_id)]
    activity = store.activity
    assert set(activity.live(seat_ids=[ids["a/seat-01"], ids["a/seat-02"]])) == set()
    assert set(activity.live(seat_ids=[ids["b/seat-01"]])) == {ids["b/seat-01"]}
    r = cli("usage", "--course", "a", "--db", url, "--format", "json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["participants"] == []
    r = cli("usage", "--course", "b", "--db", url, "--format", "json")
    assert r.code == 0, r.err
    assert [u["participant"] for u in json.loads(r.out)["participants"]] == ["bob"]


def test_a_seat_key_without_ids_is_looked_up_in_the_monitors_course(store: CourseStore, url: str) -> None:
    """A seats-file entry names only the key ``seat-01``: course b's monitor stores it on b's seat-01."""
    snap = synthetic_snapshot(gpus=1, migs_per_gpu=0, processes=0, taken_at=T0)
    ids = _two_courses(store, snap.gpus[0].uuid)
    monitor = store.monitor.of_course("b")
    entry = SeatEntry("seat-01", snap.gpus[0].uuid, "bob")  # as read from a file: no row ids
    monitor.write("host-b", T0, [LeafReading(leaf, entry, ()) for leaf in leaves(snap)])
    with store.database.engine.connect() as conn:
        assert conn.execute(text("SELECT seat_id FROM samples")).scalars().all() == [ids["b/seat-01"]]


def test_alerts_and_digests_stay_in_their_course(store: CourseStore, url: str) -> None:
    ids = _two_courses(store, "GPU-bbbbbbbb-0000-0000-0000-000000000002")
    for course, who in (("a", "ann"), ("b", "bob")):
        monitor = store.monitor.of_course(course)
        monitor.record_alert(
            Alert("idle", "seat-01", f"seat seat-01 idle, participant {who}", T0, True, "seat-01", who)
        )
    catalog = load_catalog()
    for course, who, other in (("a", "ann", "bob"), ("b", "bob", "ann")):
        digest = build_digest(store, SurveyService(store), catalog, course, bench_results=[])
        assert [(a.seat_id, a.participant) for a in digest.alerts] == [(ids[f"{course}/seat-01"], who)]
        assert all(other not in a.message for a in digest.alerts)
    # clearing course a's alert leaves course b's open
    monitor = store.monitor.of_course("a")
    monitor.record_alert(Alert("idle", "seat-01", "cleared", T0 + 60, False, "seat-01", "ann"))
    assert monitor.open_alerts() == []
    assert [a.participant for a in store.activity.open_alerts(seat_ids=[ids["b/seat-01"]])] == ["bob"]
    assert store.activity.open_alerts(seat_ids=[ids["a/seat-01"], ids["a/seat-02"]]) == []


def test_a_lost_gpu_alert_of_a_courseless_monitor_reaches_only_the_course_on_that_gpu(
    store: CourseStore, url: str
) -> None:
    device = "GPU-bbbbbbbb-0000-0000-0000-000000000002"
    ids = _two_courses(store, device)
    monitor = store.monitor  # no --course: the alert is placed by the GPU's seats
    monitor.record_alert(Alert("gpu_lost", device, f"GPU {device} lost", T0, True))
    assert [a.kind for a in store.activity.open_alerts(seat_ids=[ids["b/seat-01"]])] == ["gpu_lost"]
    assert store.activity.open_alerts(seat_ids=[ids["a/seat-01"]]) == []
