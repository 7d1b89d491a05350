"""``monitor --seats FILE`` goes through the course store's facade: checked, and every change is an event."""

from __future__ import annotations

from pathlib import Path

from gpuseat.core.roster import RosterText
from gpuseat.monitor.replay import synthetic_snapshot, write_replay
from gpuseat.store import CourseStore

EXAMPLES = Path(__file__).parents[2] / "examples"
T0 = 1_700_000_040.0


def _replay(tmp_path: Path) -> list[str]:
    snaps = [synthetic_snapshot(gpus=1, migs_per_gpu=2, processes=1, taken_at=T0 + 10 * i) for i in range(2)]
    write_replay(tmp_path / "r.jsonl", snaps)
    return [m.uuid for m in snaps[0].gpus[0].mig]


def _seats(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    path.write_text("".join(f'[[seat]]\nid = "{s}"\ndevice = "{d}"\nparticipant = "{p}"\n' for s, d, p in rows))
    return path


def _monitor(cli, url: str, tmp_path: Path, seats: Path, *more: str):
    return cli("monitor", "--replay", tmp_path / "r.jsonl", "--seats", seats, "--db", url, "--ticks", "1", *more)


def test_a_seats_file_writes_events(cli, store: CourseStore, url: str, tmp_path: Path) -> None:
    migs = _replay(tmp_path)
    first = _seats(tmp_path / "a.toml", [("s0", migs[0], "p0"), ("s1", migs[1], "p1")])
    r = _monitor(cli, url, tmp_path, first)
    assert r.code == 0, r.err
    actions = [(e.action, e.participant, e.seat) for e in store.events.events("default")]
    assert actions[0][0] == "course.create"
    assert ("seats.add", None, None) in actions
    assert {(a, p, s) for a, p, s in actions if a == "seat.assign"} == {
        ("seat.assign", "p0", "s0"),
        ("seat.assign", "p1", "s1"),
    }
    assert {p for a, p, _ in actions if a == "roster.add"} == {"p0", "p1"}
    last = store.events.events("default")[-1].id
    # p1 moves to s0, p0 is no longer listed: releases and a new assignment, as events
    second = _seats(tmp_path / "b.toml", [("s0", migs[0], "p1"), ("s1", migs[1], "p2")])
    assert _monitor(cli, url, tmp_path, second).code == 0
    later = [(e.action, e.participant, e.seat) for e in store.events.events("default", after_id=last)]
    assert ("seat.release", "p0", "s0") in later and ("seat.release", "p1", "s1") in later
    assert ("seat.assign", "p1", "s0") in later and ("seat.assign", "p2", "s1") in later
    assert {s.key: s.participant for s in store.seats.seats("default")} == {"s0": "p1", "s1": "p2"}
    # the same file again changes nothing and logs nothing
    last = store.events.events("default")[-1].id
    assert _monitor(cli, url, tmp_path, second).code == 0
    assert store.events.events("default", after_id=last) == []


def test_a_rostered_course_refuses_strangers_and_stores_nothing(
    cli, store: CourseStore, url: str, tmp_path: Path
) -> None:
    migs = _replay(tmp_path)
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="dl")
    store.roster.import_roster(
        "dl", RosterText("name,email,unix_user,key\nAda,ada@example.org,ada,ada\n", where="r.csv")
    )
    before = store.events.events("dl")[-1].id
    seats = _seats(tmp_path / "s.toml", [("s0", migs[0], "ada"), ("s1", migs[1], "mallory")])
    r = _monitor(cli, url, tmp_path, seats, "--course", "dl")
    assert r.code == 2 and "mallory" in r.err and "roster" in r.err
    assert store.seats.seats("dl") == [] and store.events.events("dl", after_id=before) == []
    ok = _seats(tmp_path / "ok.toml", [("s0", migs[0], "ada")])
    assert _monitor(cli, url, tmp_path, ok, "--course", "dl").code == 0
    assert [(s.key, s.participant) for s in store.seats.seats("dl")] == [("s0", "ada")]
    assert [e.action for e in store.events.events("dl", after_id=before)] == ["seat.assign", "seats.add"]
