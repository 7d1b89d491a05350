"""The course store service on SQLite and PostgreSQL: courses, roster, seats, claims, tokens, events."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from sqlalchemy import create_engine, insert, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from gpuseat.core.roster import RosterText
from gpuseat.db.models import AccessToken, Assignment, Participant, Seat
from gpuseat.errors import InputError, InvalidTransition, NoFreeSeat, NotFound, SeatTaken, StoreError
from gpuseat.store import CourseStore, SeatSpec, open_store

from .conftest import EXAMPLES

ROSTER = (EXAMPLES / "roster-16.csv").read_text()
HEADER, *LINES = ROSTER.splitlines()
ED25519_BLOB = LINES[0].split(",")[4].split()[1]  # a real key made with ssh-keygen

TWO_GROUPS = """
name = "Two groups"
[schedule]
start = 2026-03-02
days = 5
[[group]]
name = "linux"
count = 3
min_gpu_memory_gb = 10
isolation = "partitioned"
[[group]]
name = "windows"
count = 2
guest_os = "windows"
min_gpu_memory_gb = 4
"""


def two_groups(store: CourseStore, tmp_path: Path) -> None:
    path = tmp_path / "two.toml"
    path.write_text(TWO_GROUPS)
    store.courses.create_course(path)
    rows = [
        "name,email,group,unix_user",
        "Ann,ann@example.org,linux,ann",
        "Ben,ben@example.org,linux,ben",
        "Cat,cat@example.org,linux,cat",
        "Dov,dov@example.org,windows,dov",
        "Eve,eve@example.org,windows,eve",
    ]
    store.roster.import_roster("two", RosterText("\n".join(rows)))
    store.seats.add_seats(
        "two",
        [
            SeatSpec(key="mig-1", kind="mig", memory_gb=10, profile="1g.10gb", device_uuid="MIG-1"),
            SeatSpec(key="mig-2", kind="mig", memory_gb=20, profile="2g.20gb", device_uuid="MIG-2"),
            SeatSpec(key="gpu-1", kind="gpu", memory_gb=80, device_uuid="GPU-1"),
            SeatSpec(key="vgpu-1", kind="vgpu", memory_gb=4, engine="libvirt", profile="M60-4Q"),
            SeatSpec(key="vgpu-2", kind="vgpu", memory_gb=8, engine="libvirt", profile="M60-8Q"),
        ],
    )


def counts(store: CourseStore) -> dict[str, int]:
    with store.database.engine.connect() as conn:
        return {
            t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar()
            for t in ("courses", "participants", "seats", "assignments", "access_tokens")
        }


# -- opening -----------------------------------------------------------------------------------------


def test_read_commands_do_not_create_a_database(tmp_path):
    path = tmp_path / "none.db"
    with pytest.raises(InputError, match="no gpuseat database here"):
        open_store(f"sqlite:///{path}")
    assert not path.exists()


def test_a_foreign_sqlite_file_is_refused(tmp_path):
    path = tmp_path / "other.db"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE invoices (id INTEGER PRIMARY KEY)"))
    engine.dispose()
    with pytest.raises(InputError, match="not a gpuseat database"):
        open_store(f"sqlite:///{path}", create=True)
    engine = create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        tables = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master WHERE type='table'"))}
    assert tables == {"invoices"}
    with pytest.raises(InputError, match="no gpuseat tables"):
        open_store(f"sqlite:///{path}")


def test_a_database_from_a_newer_gpuseat_is_refused(url):
    open_store(url, create=True).close()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(StoreError, match="newer gpuseat"):
        open_store(url)


def test_default_store_lives_in_the_data_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUSEAT_DB_URL", raising=False)
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path / "data"))
    with open_store(None, create=True) as store:
        store.courses.create_course(EXAMPLES / "course-2016.toml")
    assert (tmp_path / "data" / "gpuseat.db").is_file()
    with open_store() as store:
        assert store.courses.get_course().key == "course-2016"


# -- courses -----------------------------------------------------------------------------------------


def test_course_create_list_show(store):
    with pytest.raises(InputError, match="no course yet"):
        store.courses.get_course()
    view = store.courses.create_course(EXAMPLES / "course-2016.toml")
    assert view.key == "course-2016" and view.name == "Deep learning course, 2016"
    assert str(view.starts_on) == "2016-06-06" and str(view.ends_on) == "2016-06-20"
    assert view.groups == ("participants",)
    assert view.summary["groups"][0]["min_gpu_memory_gb"] == 4
    assert store.courses.get_course().key == "course-2016"  # the only course
    assert store.courses.course_file().participant_count == 16
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="dl-2017", timezone="Europe/Berlin")
    assert [c.key for c in store.courses.list_courses()] == ["course-2016", "dl-2017"]
    with pytest.raises(InputError, match="2 courses: course-2016, dl-2017"):
        store.courses.get_course()
    with pytest.raises(NotFound, match="Did you mean dl-2017"):
        store.courses.get_course("dl-2071")
    with pytest.raises(InputError, match="exists already"):
        store.courses.create_course(EXAMPLES / "course-2016.toml", key="dl-2017")
    with pytest.raises(InputError, match="not a slug"):
        store.courses.create_course(EXAMPLES / "course-2016.toml", key="../x")
    with pytest.raises(InputError, match="time zone"):
        store.courses.create_course(EXAMPLES / "course-2016.toml", key="x", timezone="Mars/Base")
    assert store.courses.get_course("dl-2017").to_dict()["timezone"] == "Europe/Berlin"


def test_bad_course_file_names_the_field(store, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("participants = 0\n[schedule]\nstart = 2026-01-01\ndays = 3\n")
    with pytest.raises(InputError, match="participants"):
        store.courses.create_course(bad)
    assert counts(store)["courses"] == 0


# -- roster ------------------------------------------------------------------------------------------


def test_roster_import_then_reimport_reports_changes(course2016):
    store = course2016
    people = store.roster.participants()
    assert len(people) == 16
    alice = store.roster.find_participant(None, "alice.martin@example.edu")
    assert alice.key == "amartin" and alice.group == "participants" and alice.ssh_key.startswith("ssh-ed25519 ")
    assert store.roster.find_participant(None, "amartin") == alice
    assert store.roster.find_participant(None, "ALICE.MARTIN@example.edu") == alice
    # re-import with a BOM, CRLF, a changed name and a new person: updates by email
    changed = LINES[0].replace("Alice Martin", "Alice Martin-Okoye")
    text_ = "\ufeff" + "\r\n".join([HEADER, changed, *LINES[1:-1], "Quinn Park,quinn.park@example.edu,,qpark,"])
    report = store.roster.import_roster(None, RosterText(text_, where="again.csv"))
    assert (report.added, report.updated, report.unchanged, report.absent) == (1, 1, 14, ("praman",))
    assert [(c.key, c.fields) for c in report.changes if c.action == "updated"] == [("amartin", ("name",))]
    assert store.roster.find_participant(None, "qpark").group == "participants"  # the only group
    # a file that no longer lists someone keeps them and says so
    report = store.roster.import_roster(None, RosterText("\n".join([HEADER, *LINES[:3]])))
    assert len(report.absent) == 14 and len(store.roster.participants()) == 17  # nobody is deleted


@pytest.mark.parametrize(
    ("row", "where", "what"),
    [
        ("Xa,alice.martin@example.edu,participants,xa,", "r.csv:18:2", "already on line 2"),
        ("Xb,not-an-email,participants,xb,", "r.csv:18:2", "not an email address"),
        ("Xc,xc@example.edu,students,xc,", "r.csv:18:3", "unknown group 'students'"),
        ("Xd,xd@example.edu,participants,Xd!,", "r.csv:18:4", "not a Unix user name"),
        ("Xe,xe@example.edu,participants,xe,ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEpyPhls", "r.csv:18:5", "cut or"),
        ("Xf,xf@example.edu,participants,xf,ssh-dss AAAAB3NzaC1kc3M=", "r.csv:18:5", "unknown key type"),
        (f"Xg,xg@example.edu,participants,xg,ssh-rsa {ED25519_BLOB}", "r.csv:18:5", "not a ssh-rsa key"),
        ("Xh,xh@example.edu,participants,amartin,", "r.csv:18:4", "already on line 2"),
        ('"Xi,xi@example.edu,participants,xi,', "r.csv:18", "malformed CSV|fields"),
        ("Xj,xj@example.edu,participants,xj,,extra", "r.csv:18:6", "6 fields"),
    ],
)
def test_a_bad_roster_row_names_line_and_column_and_stores_nothing(store, row, where, what):
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="small")
    store.roster.import_roster(None, RosterText("\n".join([HEADER, *LINES[:16]])))  # 16 rows: at the course's count
    before = store.roster.participants()
    with pytest.raises(InputError, match=what) as info:
        store.roster.import_roster(
            None, RosterText("\n".join([HEADER, *LINES[:16], row]).replace("Priya", "P"), where="r.csv")
        )
    assert info.value.where.startswith(where)
    assert store.roster.participants() == before


def test_more_participants_than_the_course_plans_is_refused(course2016):
    extra = "Zed,zed@example.edu,participants,zed,"
    with pytest.raises(InputError, match="17 participants in group 'participants', the course file plans 16"):
        course2016.roster.import_roster(None, RosterText("\n".join([HEADER, *LINES, extra])))
    assert len(course2016.roster.participants()) == 16


def test_roster_needs_an_email_column(course2016):
    with pytest.raises(InputError, match="no 'email' column") as info:
        course2016.roster.import_roster(None, RosterText("name,mail_address\nA,a@b.c\n", where="x.csv"))
    assert info.value.where == "x.csv:1"


# -- seats -------------------------------------------------------------------------------------------


def test_seat_key_used_twice_is_refused_and_nothing_is_added(course2016):
    store = course2016
    store.seats.add_seats(None, [SeatSpec(key="s1", kind="gpu", device_uuid="GPU-aaa")])
    with pytest.raises(InputError, match="seat key 's1' is used twice"):
        store.seats.add_seats(None, [{"key": "s2", "kind": "gpu"}, {"key": "s1", "kind": "mig"}])
    with pytest.raises(InputError, match="already backs another seat"):
        store.seats.add_seats(None, [{"key": "s3", "kind": "gpu", "device_uuid": "GPU-aaa"}])
    with pytest.raises(InputError, match="key"):
        store.seats.add_seats(None, [{"key": "-rf", "kind": "gpu"}])
    with pytest.raises(InputError, match="memory_gb"):
        store.seats.add_seats(None, [{"key": "s4", "kind": "gpu", "memory_gb": float("inf")}])
    with pytest.raises(InputError, match="unknown group"):
        store.seats.add_seats(None, [{"key": "s5", "kind": "gpu", "groups": ["partcipants"]}])
    assert [s.key for s in store.seats.seats()] == ["s1"]


def test_seat_state_machine(course2016):
    store = course2016
    store.seats.add_seats(None, [SeatSpec(key="c1", kind="cloud", engine="skypilot")])
    seat = store.seats.set_seat_state(None, "c1", "requested", reason="sky launch", engine_ref="gpuseat-c1")
    assert (seat.state, seat.engine_ref, seat.state_reason) == ("requested", "gpuseat-c1", "sky launch")
    seat = store.seats.set_seat_state(None, "c1", "running", connect="ssh amartin@10.0.0.5", host="10.0.0.5")
    assert seat.connect == "ssh amartin@10.0.0.5" and seat.state_at >= seat.state_at.replace(year=2020)
    store.seats.set_seat_state(None, "c1", "released", reason="course over")
    with pytest.raises(InvalidTransition, match="a released seat cannot become running"):
        store.seats.set_seat_state(None, "c1", "running")
    with pytest.raises(InputError, match="connect"):
        store.seats.set_seat_state(None, "c1", "requested", connect="ssh x\nrm -rf /")
    actions = [(e.action, (e.detail or {}).get("to")) for e in store.events.events() if e.action == "seat.state"]
    assert actions == [("seat.state", "requested"), ("seat.state", "running"), ("seat.state", "released")]


# -- assignments -------------------------------------------------------------------------------------


def test_claim_returns_the_held_seat_and_runs_out_clearly(course2016):
    store = course2016
    store.seats.add_seats(None, [SeatSpec(key=f"s{i}", kind="gpu", memory_gb=8) for i in range(1, 3)])
    first = store.claims.claim_seat(None, "amartin")
    assert first.key == "s1" and first.participant == "amartin" and first.mode == "assigned"
    assert store.claims.claim_seat(None, "alice.martin@example.edu").key == "s1"  # the same seat again
    assert store.claims.claim_seat(None, "bcosta", mode="pool").key == "s2"
    with pytest.raises(NoFreeSeat, match="no free seat suits cwei"):
        store.claims.claim_seat(None, "cwei")
    assert store.seats.seat_of(None, "bcosta").mode == "pool"
    assert store.seats.seat_of(None, "cwei") is None


def test_no_free_seat_says_whether_the_course_has_seats_at_all(course2016):
    """A course with no seats yet and a course whose seats are all taken or out of order get different
    messages (the first is a set-up step missed), on both databases."""
    store = course2016
    with pytest.raises(
        NoFreeSeat, match="course course-2016: no free seat for amartin: the course has no seats yet"
    ) as empty:
        store.claims.claim_seat(None, "amartin")
    assert empty.value.fix == "add seats (gpuseat seats add)"
    store.seats.add_seats(
        None, [SeatSpec(key="s1", kind="gpu", memory_gb=8), SeatSpec(key="s2", kind="gpu", memory_gb=8)]
    )
    store.seats.set_seat_state(None, "s2", "failed", reason="fan")
    assert store.claims.claim_seat(None, "amartin").key == "s1"
    with pytest.raises(NoFreeSeat, match="every seat that suits them is taken or out of order") as full:
        store.claims.claim_seat(None, "bcosta", mode="pool")
    assert "release one" in (full.value.fix or "")
    assert store.seats.seat_of(None, "bcosta") is None


def test_claims_match_group_needs(store, tmp_path):
    two_groups(store, tmp_path)
    # windows needs a VM (vgpu on libvirt); linux needs >= 10 GB and at least a partition
    assert store.claims.claim_seat("two", "dov").key == "vgpu-1"  # smallest that fits
    assert store.claims.claim_seat("two", "eve").key == "vgpu-2"
    assert [store.claims.claim_seat("two", p).key for p in ("ann", "ben", "cat")] == ["mig-1", "mig-2", "gpu-1"]


def test_assign_all_is_deterministic_and_idempotent(store, tmp_path):
    two_groups(store, tmp_path)
    report = store.seats.assign_all("two")
    pairs = {a.participant: a.seat for a in report.assigned}
    assert pairs == {"ann": "mig-1", "ben": "mig-2", "cat": "gpu-1", "dov": "vgpu-1", "eve": "vgpu-2"}
    again = store.seats.assign_all("two")
    assert again.assigned == () and again.kept == 5
    assert len(store.seats.history("two")) == 5


def test_assign_all_without_enough_seats_stores_nothing(course2016):
    store = course2016
    store.seats.add_seats(None, [SeatSpec(key=f"s{i:02d}", kind="gpu", memory_gb=8) for i in range(1, 5)])
    with pytest.raises(NoFreeSeat, match="12 participant"):
        store.seats.assign_all()
    assert counts(store)["assignments"] == 0
    report = store.seats.assign_all(partial=True)
    assert len(report.assigned) == 4 and len(report.unassigned) == 12
    assert [a.participant for a in report.assigned] == ["amartin", "bcosta", "cwei", "dkowalski"]


def test_release_and_move_keep_history(course2016):
    store = course2016
    store.seats.add_seats(None, [SeatSpec(key=k, kind="gpu") for k in ("a", "b", "c")])
    store.seats.assign(None, "amartin", "a")
    store.seats.assign(None, "bcosta", "b")
    with pytest.raises(SeatTaken, match="held by amartin"):
        store.seats.move(None, "bcosta", "a")
    with pytest.raises(SeatTaken, match="already holds seat a"):
        store.seats.assign(None, "amartin", "c")
    moved = store.seats.move(None, "amartin", "c")
    assert moved.seat == "c" and moved.valid_to is None
    released = store.seats.release(None, seat="b", reason="left the course")
    assert released.participant == "bcosta" and released.ended_by == "left the course"
    assert store.seats.release(None, participant="bcosta") is None
    hist = [(h.participant, h.seat, h.ended_by) for h in store.seats.history(None)]
    assert hist == [("amartin", "a", "move"), ("bcosta", "b", "left the course"), ("amartin", "c", None)]
    assert store.seats.history(None, participant="amartin")[0].valid_to is not None
    with pytest.raises(NotFound, match="no seat 'zz'"):
        store.seats.assign(None, "cwei", "zz")


def test_the_database_refuses_a_second_open_assignment(course2016):
    store = course2016
    store.seats.add_seats(None, [SeatSpec(key=k, kind="gpu") for k in ("a", "b")])
    store.seats.assign(None, "amartin", "a")
    with store.database.engine.connect() as conn:
        ids = dict(conn.execute(select(Seat.key, Seat.id)).all())
        people = dict(conn.execute(select(Participant.key, Participant.id)).all())
    for seat, who in (("a", "bcosta"), ("b", "amartin")):  # same seat; same participant
        with pytest.raises(IntegrityError), store.database.engine.begin() as conn:
            conn.execute(
                insert(Assignment).values(
                    seat_id=ids[seat], participant_id=people[who], valid_from=store.seats.history()[0].valid_from
                )
            )
    assert len(store.seats.history()) == 1


# -- tokens and events -------------------------------------------------------------------------------


def test_tokens_issue_rotate_revoke_and_lookup(course2016):
    store = course2016
    issued = store.tokens.issue_tokens(None)
    assert len(issued) == 16 and len({t.token for t in issued}) == 16
    assert all(len(t.token) == 43 for t in issued)  # token_urlsafe(32)
    assert store.tokens.issue_tokens(None) == []  # one active token each: nothing new to show
    alice = next(t for t in issued if t.participant == "amartin")
    assert alice.link("https://course.example.org/").startswith("https://course.example.org/t/")
    with store.database.engine.connect() as conn:
        hashes = set(conn.execute(select(AccessToken.token_hash)).scalars())
    assert alice.token not in hashes and hashlib.sha256(alice.token.encode()).hexdigest() in hashes
    found = store.tokens.participant_for_token(alice.token)
    assert found.key == "amartin" and found.course == "course-2016"
    status = {s["participant"]: s for s in store.tokens.token_status()}
    assert status["amartin"]["last_used_at"] is not None and status["bcosta"]["last_used_at"] is None
    assert store.tokens.participant_for_token(alice.token[:-1] + ("A" if alice.token[-1] != "A" else "B")) is None
    assert store.tokens.participant_for_token("--help") is None
    (new,) = store.tokens.rotate_tokens(None, ["amartin"])
    assert store.tokens.participant_for_token(alice.token) is None
    assert store.tokens.participant_for_token(new.token).key == "amartin"
    assert store.tokens.revoke_tokens(None, ["alice.martin@example.edu"]) == 1
    assert store.tokens.participant_for_token(new.token) is None
    assert len(store.tokens.issue_tokens(None, ["amartin"])) == 1


def test_events_are_append_only(course2016):
    store = course2016
    store.events.log(None, "portal.login", participant="amartin", actor="portal")
    events = store.events.events()
    assert [e.action for e in events] == ["course.create", "roster.import", "portal.login"]
    assert events[1].detail["added"] == 16
    for statement in ("UPDATE events SET actor = 'x'", "DELETE FROM events"):
        with pytest.raises(DBAPIError, match="append-only"), store.database.engine.begin() as conn:
            conn.execute(text(statement))
    assert len(store.events.events()) == 3
    assert [e.action for e in store.events.events(after_id=events[1].id)] == ["portal.login"]


def test_views_serialise_to_json(course2016):
    import json

    store = course2016
    store.seats.add_seats(None, [SeatSpec(key="a", kind="gpu", groups=("participants",))])
    store.claims.claim_seat(None, "amartin")
    for view in (
        store.courses.get_course(),
        store.seats.seats()[0],
        store.roster.participants()[0],
        store.seats.history()[0],
    ):
        data = view.to_dict()
        assert json.loads(json.dumps(data)) == data
    assert store.seats.seats()[0].to_dict()["groups"] == ["participants"]
