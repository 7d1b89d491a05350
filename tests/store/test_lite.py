"""The light read of ``seats status`` (gpuseat.store.lite) answers exactly what the full store answers,
on SQLite and PostgreSQL, or None when it cannot be sure; and it loads no SQLAlchemy, Alembic or Pydantic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from gpuseat.core.roster import RosterText
from gpuseat.errors import GpuseatError
from gpuseat.monitor.replay import synthetic_snapshot, write_replay
from gpuseat.store import CourseStore, SeatSpec, open_store
from gpuseat.store.lite import SeatStatus, full_status, head_revision, seat_status
from gpuseat.store.monitor import MinuteRow

EXAMPLES = Path(__file__).parents[2] / "examples"
T0 = 1_700_000_040.0  # a minute boundary
ROSTER = "name,email,unix_user,key\n" + "".join(f"P{i},p{i}@x.example.org,p{i},p{i}\n" for i in range(1, 6))


def full(store: CourseStore, course: str | None) -> SeatStatus:
    """What ``seats status`` reads through the full store."""
    return full_status(store, course)


def assert_same(url: str, store: CourseStore, course: str | None) -> SeatStatus:
    """The light read equals the full store's, field by field and in its JSON shape (UTC times)."""
    light, expected = seat_status(url, course), full(store, course)
    assert light == expected
    assert light is not None and [s.to_dict() for s in light.seats] == [s.to_dict() for s in expected.seats]
    assert {k: type(v) for k, v in light.last_active.items()} == {k: type(v) for k, v in expected.last_active.items()}
    return light


def add_course(store: CourseStore, key: str, device: str) -> None:
    """A course ``key`` of five people and seats in several states, three of them held."""
    store.courses.create_course(EXAMPLES / "course-2016.toml", key=key)
    store.roster.import_roster(key, RosterText(ROSTER, where=f"{key}.csv"))
    store.seats.add_seats(
        key,
        [
            SeatSpec(key="seat-01", kind="gpu", device_uuid=device, host="lab", state="running"),
            SeatSpec(key="seat-02", kind="mig", profile="1g.10gb", memory_gb=9.75, groups=("participants",)),
            SeatSpec(key="seat-03", kind="vm", engine="manual", connect="ssh p3@lab", state="requested"),
            SeatSpec(key="seat-04", kind="gpu", state="running"),
            SeatSpec(key="seat-00", kind="gpu"),
        ],
    )
    store.seats.set_seat_state(key, "seat-04", "failed", reason="the host did not answer")
    for who, seat in (("p1", "seat-01"), ("p2", "seat-02"), ("p3", "seat-03")):
        store.seats.assign(key, who, seat)


@pytest.fixture
def two_courses(cli, store: CourseStore, url: str, tmp_path: Path) -> CourseStore:
    """Courses a and b; the monitor ran for b (raw samples and rolled-up minutes), b has older history too."""
    snaps = [synthetic_snapshot(gpus=1, migs_per_gpu=1, processes=1, taken_at=T0 + 30 * i) for i in range(9)]
    device = snaps[0].gpus[0].mig[0].uuid
    add_course(store, "a", "GPU-aaaaaaaa-0000-0000-0000-000000000001")
    add_course(store, "b", device)
    write_replay(tmp_path / "r.jsonl", snaps)
    r = cli(
        "monitor", "--replay", tmp_path / "r.jsonl", "--course", "b", "--db", url, "--interval", "0.1", "--ticks", "9"
    )
    assert r.code == 0, r.err
    b = {s.key: s.id for s in store.seats.seats("b")}
    history = [
        MinuteRow(int(T0) // 60 - m, "GPU-history", b["seat-02"], None, 6, active, 10, 5, 1)
        for m, active in ((90, 6), (60, 0))  # busy 90 minutes ago, idle 60 minutes ago
    ]
    store.monitor.add_minutes(history)
    return store


def test_the_light_read_equals_the_full_store(two_courses: CourseStore, url: str) -> None:
    b = assert_same(url, two_courses, "b")
    ids = {s.key: s.id for s in b.seats}
    assert [s.key for s in b.seats] == ["seat-00", "seat-01", "seat-02", "seat-03", "seat-04"]
    assert b.last_active[ids["seat-01"]] is not None and b.last_active[ids["seat-00"]] is None
    assert b.last_active[ids["seat-02"]] == (int(T0) // 60 - 90) * 60 + 59  # only the rolled-up minute
    assert {s.state for s in b.seats} == {"planned", "running", "requested", "failed"}
    assert all(s.state_at is not None and s.state_at.utcoffset() == timedelta(0) for s in b.seats)
    a = assert_same(url, two_courses, "a")
    assert set(a.last_active.values()) == {None}  # course b's monitor saw nothing of course a
    if url.startswith("postgresql"):  # another session time zone: the same UTC times
        chatham = seat_status(f"{url}%20-cTimeZone%3DPacific/Chatham", "b")
        assert chatham is not None and [s.to_dict() for s in chatham.seats] == [s.to_dict() for s in b.seats]


def test_after_a_move_and_a_release(two_courses: CourseStore, url: str) -> None:
    two_courses.seats.move("b", "p1", "seat-00")
    two_courses.seats.release("b", participant="p2")
    b = assert_same(url, two_courses, "b")
    held = {s.key: s.participant for s in b.seats}
    assert held == {"seat-00": "p1", "seat-01": None, "seat-02": None, "seat-03": "p3", "seat-04": None}
    assert next(s for s in b.seats if s.key == "seat-00").assigned_since is not None


def test_the_course_is_chosen_and_refused_as_the_store_does(store: CourseStore, url: str) -> None:
    def same_error(course: str | None) -> None:
        with pytest.raises(GpuseatError) as expected:
            full(store, course)
        with pytest.raises(GpuseatError) as light:
            seat_status(url, course)
        assert type(light.value) is type(expected.value) and light.value.message == expected.value.message

    same_error(None)  # no course yet
    add_course(store, "only", "GPU-00000000-0000-0000-0000-000000000009")
    assert_same(url, store, None)  # the one course
    same_error("onyl")  # unknown, with the store's "did you mean"
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="second")
    same_error(None)  # two courses: name one


def test_an_older_schema_or_no_database_gives_none(store: CourseStore, url: str, tmp_path: Path) -> None:
    add_course(store, "a", "GPU-aaaaaaaa-0000-0000-0000-000000000001")
    assert seat_status(url, "a") is not None
    with store.database.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0014'"))
    assert seat_status(url, "a") is None  # the full store upgrades it first
    missing = tmp_path / "nothing-here" / "gpuseat.db"
    assert seat_status(f"sqlite:///{missing}", "a") is None
    assert not missing.exists() and not missing.parent.exists()  # read-only: never created


def test_a_database_at_an_older_revision_gives_none(tmp_path: Path) -> None:
    from gpuseat.db import make_engine, upgrade

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    upgrade(engine, "0014")
    engine.dispose()
    assert seat_status(url, None) is None


def test_the_db_argument_and_the_environment_name_the_database(two_courses: CourseStore, url: str, monkeypatch) -> None:
    monkeypatch.setenv("GPUSEAT_DB_URL", url)
    assert seat_status(None, "b") == full(two_courses, "b")


def test_head_revision_is_alembics() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parents[2] / "src/gpuseat/db/migrations"))
    assert {head_revision()} == set(ScriptDirectory.from_config(config).get_heads())


def test_the_light_read_loads_no_orm(two_courses: CourseStore, url: str) -> None:
    probe = (
        "import json, sys\n"
        "from gpuseat.store.lite import seat_status\n"
        "status = seat_status(sys.argv[1], 'b')\n"
        "assert status is not None and len(status.seats) == 5\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") or k == "GPUSEAT_CACHE_DIR"}
    proc = subprocess.run([sys.executable, "-c", probe, url], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    loaded = set(json.loads(proc.stdout))
    assert loaded.isdisjoint({"sqlalchemy", "alembic", "pydantic", "pydantic_core"})
    assert ("psycopg" in loaded) == url.startswith("postgresql")  # the driver only for its own URLs


def test_other_urls_are_left_to_the_full_store(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    open_store(f"sqlite:///{db}", create=True).close()
    for url in (
        f"sqlite:///{db}?timeout=5",
        "sqlite://",
        "sqlite:///:memory:",
        f"mysql://x@/{db}",
        f"sqlite:///{db}\x1b",
    ):
        assert seat_status(url, None) is None, url
    (tmp_path / "not.db").write_text("hello")
    assert seat_status(f"sqlite:///{tmp_path / 'not.db'}", None) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file to another user")
def test_a_database_of_another_user_is_left_to_the_full_store(tmp_path: Path) -> None:
    """Its -wal and -shm files, which a read-only reader leaves behind, would be the reader's (sudo: root's)."""
    db = tmp_path / "c.db"
    with open_store(f"sqlite:///{db}", create=True) as store:
        add_course(store, "a", "GPU-aaaaaaaa-0000-0000-0000-000000000001")
    assert seat_status(f"sqlite:///{db}", None) is not None
    os.chown(db, 4321, 4321)
    assert seat_status(f"sqlite:///{db}", None) is None


SESSIONS = 'name = "{name}"\nparticipants = 2\n[schedule]\nstart = 2020-09-07\ndays = 5\nhours = "09:00-12:00"\n'
TWENTY_FOUR_SEVEN = 'name = "{name}"\nparticipants = 2\n[schedule]\nstart = 2020-09-07\ndays = 5\n'


def _held_course(store: CourseStore, tmp_path: Path, key: str, text: str, who: str, uuid: str) -> None:
    """Course ``key`` with one host seat gpu-1 on device ``uuid``, held by ``who`` and said running."""
    (tmp_path / f"{key}.toml").write_text(text.format(name=key))
    store.courses.create_course(tmp_path / f"{key}.toml", key=key)
    store.roster.import_roster(key, RosterText(f"key,name,email\n{who},{who},{who}@x.example.org\n", where="r.csv"))
    store.seats.add_seats(key, [SeatSpec(key="gpu-1", kind="gpu", host="gpu1", device_uuid=uuid, engine="host")])
    store.seats.assign(key, who, "gpu-1")
    store.seats.set_seat_state(key, "gpu-1", "running", reason="ann can log in")


def _notes(cli, url: str, course: str) -> dict[str, str | None]:
    r = cli("seats", "status", "--course", course, "-f", "json", "--db", url)
    assert r.code == 0, r.err
    return {row["seat"]: row["note"] for row in json.loads(r.out)}


def test_seats_status_says_when_a_running_seat_gets_no_access(
    cli, store: CourseStore, url: str, tmp_path: Path
) -> None:
    """A seat said running whose holder the engines lock out: the course's access is closed (its lab sessions are
    over), or another course not archived holds its GPU for an older holder (the host engine's rule). Before,
    ``seats status`` showed only 'running'; now its note says why, on the light read and the full store alike."""
    _held_course(store, tmp_path, "lab", SESSIONS, "cat", "GPU-cccccccc-0000-4000-8000-000000000001")
    _held_course(store, tmp_path, "jan", TWENTY_FOUR_SEVEN, "ann", "GPU-bbbbbbbb-0000-4000-8000-000000000001")
    _held_course(store, tmp_path, "feb", TWENTY_FOUR_SEVEN, "ben", "GPU-bbbbbbbb-0000-4000-8000-000000000001")
    assert _notes(cli, url, "lab") == {"gpu-1": "access closed: the course's schedule has ended"}
    assert _notes(cli, url, "jan") == {"gpu-1": None}  # the older holder keeps the GPU
    [note] = _notes(cli, url, "feb").values()
    assert note is not None and note.startswith(
        "seat gpu-1: course jan is not archived and its seat gpu-1 (held by ann"
    )
    assert "ben gets no access here" in note
    for course in ("lab", "jan", "feb"):
        light = seat_status(url, course)
        assert light is not None and light == full(store, course)  # the full store reads the same
    store.lifecycle.archive_course("jan")
    assert _notes(cli, url, "feb") == {"gpu-1": None}


def test_seats_status_notes_another_engines_older_holder_on_the_gpu(
    cli, store: CourseStore, url: str, tmp_path: Path
) -> None:
    """jan's SSH seat (host engine) and feb's hub seat (JupyterHub) name one GPU: the rule compares the engines
    that deliver a GPU of their server, whichever each course uses. Before, the note compared host seats only and
    said nothing of feb's hub seat, which the engine refuses; now both reads say it."""
    _held_course(store, tmp_path, "jan", TWENTY_FOUR_SEVEN, "ann", "GPU-bbbbbbbb-0000-4000-8000-000000000001")
    _held_course(store, tmp_path, "feb", TWENTY_FOUR_SEVEN, "ben", "GPU-bbbbbbbb-0000-4000-8000-000000000001")
    store.seats.set_seat_state("feb", "gpu-1", "running", engine="jupyterhub", reason="a hub seat")
    [note] = _notes(cli, url, "feb").values()
    assert note is not None and note.startswith("seat gpu-1: course jan is not archived and its seat gpu-1")
    for course in ("jan", "feb"):
        light = seat_status(url, course)
        assert light is not None and light == full(store, course)
