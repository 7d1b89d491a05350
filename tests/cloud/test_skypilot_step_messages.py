"""A failed SkyPilot step reads once: the seat named once, what is wrong, one fix (the error's own).

``gpuseat apply --engine skypilot`` against the recording fake SDK and a real store (SQLite and
PostgreSQL): a cloud seat whose offer the course lacks, a launch SkyPilot refuses and a roster login the
image owns each fail with one message, the same in the apply output, on stderr and in the pass's
``engine.apply`` events row. It printed ``seat X: seat X: …``, the error's fix and then a second, generic
``To fix: fix the setting or roster value; the agent retries``; the step that waited for it repeated the
fix once more.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from gpuseat.core.roster import RosterText
from gpuseat.engines.apply import one_pass
from gpuseat.engines.runner import RecordingRunner
from gpuseat.services.seat_sources import unknown_offer_fix
from gpuseat.store import CourseStore, open_store
from pg_schema import db_url  # noqa: F401 (the url fixture: SQLite and PostgreSQL)

from .fakesky import FakeSky, installed_sky  # noqa: F401 (the real_sky fixture)
from .skysetup import ssh_key

LACKING = "aws:p9.nope"  # an offer neither gpuseat's catalog nor the course's offers files have
OPTION = {  # students on a bundled cloud offer, instructors on the lacking one (a cloud group by its mode)
    "rank": 1,
    "offers": [{"offer": "aws:g4dn.xlarge", "count": 2}],
    "groups": [
        {"group": "students", "offer": "aws:g4dn.xlarge", "units": 2, "seats": 2},
        {"group": "instructors", "offer": LACKING, "seats": 1, "mode": "instance"},
    ],
}
STEP_LINE = re.compile(r"^  [+~-] |^  note: |^Plan: ", re.MULTILINE)


@pytest.fixture
def lab(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_sky: Any
) -> Iterator[tuple[CourseStore, FakeSky]]:
    """Course ``lab``, open around the clock from yesterday (``gpuseat apply`` plans at the real time):
    ann on ``cloud-1`` (the bundled offer), ``cloud-3`` on the lacking offer, bob unseated."""
    start = datetime.now(UTC).date() - timedelta(days=1)
    course = tmp_path / "lab.toml"
    course.write_text(
        f'name = "lab"\n[schedule]\nstart = {start}\ndays = 5\n'
        '[[group]]\nname = "students"\ncount = 2\n[[group]]\nname = "instructors"\ncount = 1\n'
    )
    st = open_store(url, create=True)
    st.courses.create_course(course, key="lab", timezone="UTC", plan_option=OPTION)
    roster = (
        "name,email,group,unix_user,ssh_key\n"
        f"Ann,ann@example.edu,students,ann,{ssh_key(tmp_path, 'ann')}\n"
        f"Bob,bob@example.edu,instructors,,{ssh_key(tmp_path, 'bob')}\n"
    )
    st.roster.import_roster("lab", RosterText(roster, where="roster.csv"))
    st.seats.add_seats(
        "lab",
        [
            {"key": "cloud-1", "kind": "cloud", "engine": "skypilot", "profile": "aws:g4dn.xlarge"},
            {"key": "cloud-3", "kind": "cloud", "engine": "skypilot", "profile": LACKING},
        ],
    )
    st.seats.assign("lab", "ann", "cloud-1")
    fake = FakeSky(real_sky)
    monkeypatch.setattr("gpuseat.engines.skypilot.sdk.load_sky", lambda: fake)
    yield st, fake
    st.close()


def step_message(out: str, mark: str, head: str) -> str:
    """The message after ``mark`` (``FAILED: ``, ``skipped: ``) on the apply output's step line that
    starts with ``head``, up to the next step line (a message may span lines)."""
    start = out.index(head)
    nxt = STEP_LINE.search(out, start + len(head))
    line = out[start : nxt.start() if nxt else len(out)].rstrip("\n")
    assert mark in line, line
    return line.split(mark, 1)[1]


def failed_rows(store: CourseStore) -> dict[str, str]:
    """The failed steps of the pass's ``engine.apply`` events row: step → error."""
    (row,) = [e for e in store.events.events("lab") if e.action == "engine.apply"]
    assert row.detail is not None
    return {f["step"]: f["error"] for f in row.detail["failed"]}


def seat_once(message: str, seat: str) -> None:
    """One message: the seat named once, exactly one fix, on its last line."""
    assert len(re.findall(rf"\bseat {seat}(?![\w.-])", message)) == 1, message
    assert message.count("To fix") == 1 and "\nTo fix: " in message, message
    assert "\n" not in message.split("\nTo fix: ")[1], message


def test_a_seat_on_an_offer_the_course_lacks_fails_with_one_message(lab, cli, url, tmp_path):
    store, fake = lab
    store.seats.assign("lab", "bob", "cloud-3")
    r = cli("apply", "--course", "lab", "--engine", "skypilot", "--db", url)
    assert r.code == 2 and "Traceback" not in r.err, (r.out, r.err)

    message = step_message(r.out, "FAILED: ", "  + cloud.launch     gs-lab-cloud-3")
    seat_once(message, "cloud-3")
    assert message.startswith(f"seat cloud-3: it rents offer {LACKING}, which is neither in gpuseat's catalog")
    fix = unknown_offer_fix(store, "lab")  # the offer's own fix, not the generic one
    assert message.endswith(f"\nTo fix: {fix}") and "the agent retries" not in message, message
    assert f"error: lab skypilot: skypilot::cloud.launch:gs-lab-cloud-3: {message}\n" in r.err, r.err
    # the command's last word sums the failures up and names the first without its fix, said on its line above
    assert r.err.count(fix) == 1 and r.err.count("To fix: ") == 2, r.err
    assert failed_rows(store) == {"cloud.launch gs-lab-cloud-3": message}
    # the record step that waits for it names the failure, and leaves its fix to the failed step's line
    waits = step_message(r.out, "skipped: ", "  ~ seat.record      cloud-3")
    assert waits == f"waits for: cloud.launch gs-lab-cloud-3 failed ({message.split(chr(10) + 'To fix: ')[0]})"
    assert "gs-lab-cloud-3" not in fake.clusters and "gs-lab-cloud-1" in fake.clusters  # ann's seat launched
    seat = store.seats.get_seat("lab", "cloud-3")
    assert seat.state == "failed" and seat.state_reason.startswith("not launched: seat cloud-3: it rents offer")
    # the task files name the seat once too (they said "seat cloud-3: cloud seat cloud-3 rents …")
    r = cli("seats", "skypilot", "--out", str(tmp_path / "tasks"), "--course", "lab", "--db", url)
    assert r.code == 2 and "Traceback" not in r.err, (r.out, r.err)
    assert r.err.startswith(f"error: seat cloud-3: it rents offer {LACKING}, which is neither"), r.err
    seat_once(r.err.rstrip("\n"), "cloud-3")


def test_a_launch_skypilot_refuses_fails_with_one_message(lab, cli, url):
    store, fake = lab
    fake.fail_launch = "Failed to acquire resources in all zones in us-east-1 for g4dn.xlarge"
    r = cli("apply", "--course", "lab", "--engine", "skypilot", "--db", url)
    assert r.code == 1 and "Traceback" not in r.err, (r.out, r.err)

    message = step_message(r.out, "FAILED: ", "  ~ seat.record      cloud-1")  # the launch is waited for here
    seat_once(message, "cloud-1")
    assert message.startswith("seat cloud-1: sky.launch gs-lab-cloud-1 failed: ResourcesUnavailableError: Failed")
    assert "\nTo fix: SkyPilot's error says why" in message and "skypilot: " not in message, message
    assert f"error: lab skypilot: skypilot::seat.record:cloud-1: {message}\n" in r.err, r.err
    assert failed_rows(store) == {"seat.record cloud-1": message}
    assert store.seats.get_seat("lab", "cloud-1").state_reason == (
        "not launched: sky.launch gs-lab-cloud-1 failed: ResourcesUnavailableError: "
        "Failed to acquire resources in all zones in us-east-1 for g4dn.xlarge"
    )


def test_a_login_the_image_owns_names_the_seat_and_the_participant_once(lab, tmp_path):
    store, fake = lab
    with store.database.engine.begin() as conn:  # the roster refuses system accounts since; one stored before
        conn.execute(text("UPDATE participants SET unix_user = 'admin' WHERE key = 'bob'"))
    store.seats.assign("lab", "bob", "cloud-3")
    done = one_pass(store, course="lab", engine="skypilot", runner=RecordingRunner(), now=datetime.now(UTC))
    (failed,) = done.failed
    assert failed["exit_code"] == 2 and failed["step"] == "skypilot::cloud.launch:gs-lab-cloud-3"
    message = failed["error"]
    seat_once(message, "cloud-3")
    assert message == (
        "seat cloud-3: participant bob: bob's login 'admin' is the cloud image's own admin user or a system account"
        "\nTo fix: give them another unix_user in the roster"
    )
    assert failed_rows(store) == {"cloud.launch gs-lab-cloud-3": message}
    assert "gs-lab-cloud-3" not in fake.clusters
