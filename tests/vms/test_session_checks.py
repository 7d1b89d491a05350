"""Ready before every session on libvirt seats, as the organizer lives it (:mod:`gpuseat.engines.sessions`,
the rule the host engine follows too), against libvirt's test driver: 10 minutes before a lab session
(lead 15) one pass checks each running VM as its holder (SSH with the probe key, ``nvidia-smi -L``), stores
the verdict and posts the broken seats to the course webhook (a real local HTTP receiver); a ready seat is
not checked again, a broken one only after four minutes; a seat its holder stopped is never checked.

The test driver's VMs have no guest: the probe's ``ssh`` is answered by the runner, with ann's GPU for her
and a refused connection for the others (what an unreachable guest gives)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from delivery.test_webhook import Receiver, receiver  # noqa: F401  (the receiver fixture)
from gpuseat.engines.apply import course_state
from gpuseat.engines.runner import RecordingRunner
from gpuseat.store import open_store
from pg_schema import db_url  # noqa: F401 (the url fixture: SQLite and PostgreSQL)
from session_soon import session_soon
from stepped_clock import stepped

from .conftest import EXAMPLES, SSH_KEYS
from .test_test_driver import again_empty, apply, build, fill, holder

REFUSED = (255, "", "ssh: connect to host 192.168.122.3 port 22: Connection refused\n")


def test_before_a_session_each_running_vm_is_checked_once_a_broken_one_again_later_and_posted_once(
    tmp_path: Path,
    test_host,
    receiver: Receiver,  # noqa: F811
) -> None:
    at, schedule = session_soon()
    head = (EXAMPLES / "course-2016.toml").read_text().split("[schedule]")[0]
    (tmp_path / "lab.toml").write_text(f'webhook = "{receiver.url}"\n{head}{schedule}[policy]\nlead_minutes = 15\n')
    logins: list[str] = []

    def ssh(argv: tuple[str, ...]) -> tuple[int, str, str]:
        login = next(a for a in argv if "@" in a).split("@")[0]
        logins.append(login)
        return (
            (0, "GPU 0: Tesla M60 (UUID: GPU-6f3c0a1e-0000-4000-8000-000000000001)\n", "")
            if login == "amartin"
            else REFUSED
        )

    store = open_store(f"sqlite:///{tmp_path / 'course.db'}", create=True)
    try:
        lay = fill(store, seats=4, assign=3, source=tmp_path / "lab.toml")
        first, second, third = (s.name for s in lay.slices[:3])
        ann, ben, cat = (holder(store, k) for k in (first, second, third))
        eng = build(
            store, test_host, runner=RecordingRunner(answers={("ssh",): ssh}), probe_key=str(SSH_KEYS / "alice")
        )
        early = eng.plan(course_state(store, "demo", now=at - timedelta(minutes=30)))
        assert "seat.check" not in {s.action for s in early.steps}  # no session near yet: nothing checked
        assert not eng.apply(early).failed and not logins
        store.requests.request_seat("demo", cat.key, "stop", actor=cat.key)  # cat stops her own seat

        steps, report = apply(eng, store)
        checks = [o.step for o in report.outcomes if o.step.action == "seat.check"]
        assert [(s.target, s.participant) for s in checks] == [(first, ann.key), (second, ben.key)], steps
        assert ("record", "session.report", target(at)) in steps  # once, after the checks
        assert sorted(logins) == ["amartin", "bcosta"]  # probed as each holder's own login
        found = store.delivery.readiness_of("demo")
        assert (found[first]["state"], found[first]["participant"]) == ("ready", ann.key)
        assert (found[second]["state"], found[second]["reason"]) == ("broken", "ssh or nvidia-smi failed (exit 255)")
        assert third not in found and lay.slices[3].name not in found
        body = receiver.wait("session.check")
        assert (body["course"], body["engine"], body["checked"]) == ("demo", "libvirt", 2), body
        assert body["broken"] == [
            {"seat": second, "participant": ben.key, "reason": "ssh or nvidia-smi failed (exit 255)"}
        ]
        assert datetime.fromisoformat(body["session_starts"]) == at

        again_empty(eng, store)  # right after: the ready seat is done, the broken one waits four minutes
        later = eng.plan(course_state(store, "demo", now=datetime.now(UTC) + timedelta(minutes=5)))
        assert [(s.action, s.target) for s in later.ordered()] == [
            ("seat.check", second),
            ("session.report", target(at)),
        ]
        again = eng.apply(later)
        assert not again.failed and sorted(logins) == ["amartin", "bcosta", "bcosta"]
        assert [o.message for o in again.outcomes if o.step.action == "session.report"] == [
            "unchanged since the last post"
        ]
        assert len(receiver.bodies) == 1  # the same broken list is not posted twice
    finally:
        store.close()


def target(at: datetime) -> str:
    """The ``session.report`` step's target for the session at ``at``."""
    return f"session {at:%Y-%m-%d %H:%M} UTC"


def test_checks_before_a_session_count_on_the_stores_clock_across_a_step(
    url: str,
    tmp_path: Path,
    test_host,
) -> None:
    """The agent's host checked the seats while its clock was an hour ahead, then NTP stepped it back, then
    a day forward: a check counts from when the store recorded it, whatever the probing clock said. Stepped
    a day forward, the next pass checked every seat again (each check looked a day old); four minutes on,
    on a true clock, ben's broken seat was not checked again (his check looked an hour in the future).
    SQLite and PostgreSQL."""
    at, schedule = session_soon()
    head = (EXAMPLES / "course-2016.toml").read_text().split("[schedule]")[0]
    (tmp_path / "lab.toml").write_text(f"{head}{schedule}[policy]\nlead_minutes = 15\n")
    logins: list[str] = []

    def ssh(argv: tuple[str, ...]) -> tuple[int, str, str]:
        login = next(a for a in argv if "@" in a).split("@")[0]
        logins.append(login)
        gpu = "GPU 0: Tesla M60 (UUID: GPU-6f3c0a1e-0000-4000-8000-000000000001)\n"
        return (0, gpu, "") if login == "amartin" else REFUSED

    store = open_store(url, create=True)
    try:
        lay = fill(store, seats=2, assign=2, source=tmp_path / "lab.toml")
        first, second = (s.name for s in lay.slices[:2])
        eng = build(
            store, test_host, runner=RecordingRunner(answers={("ssh",): ssh}), probe_key=str(SSH_KEYS / "alice")
        )
        assert not eng.apply(eng.plan(course_state(store, "demo", now=at - timedelta(minutes=30)))).failed
        with stepped(timedelta(hours=1)):  # the agent's host an hour ahead: both seats checked
            steps, _report = apply(eng, store)
        assert [t for _p, a, t in steps if a == "seat.check"] == [first, second], steps
        assert sorted(logins) == ["amartin", "bcosta"]
        assert datetime.fromisoformat(store.delivery.readiness_of("demo")[second]["checked_at"]) > at  # its clock
        with stepped(timedelta(days=1)):  # a day forward: nothing is due again yet
            again_empty(eng, store)
        later = eng.plan(course_state(store, "demo", now=datetime.now(UTC) + timedelta(minutes=5)))
        assert [(s.action, s.target) for s in later.ordered()] == [("seat.check", second)]
        assert not eng.apply(later).failed and sorted(logins) == ["amartin", "bcosta", "bcosta"]
        # ann's ready seat goes to cwei: checked again, as cwei (it counted as checked for the session)
        cwei = store.roster.participants("demo")[2].key
        store.seats.release("demo", seat=first)
        store.seats.assign("demo", cwei, first)
        moved = eng.plan(course_state(store, "demo"))
        assert [(s.target, s.participant) for s in moved.steps if s.action == "seat.check"] == [(first, cwei)]
    finally:
        store.close()


def test_a_session_wakes_the_agent_at_its_lead_time_and_at_its_end_when_access_is_24_7(tmp_path: Path) -> None:
    """With ``access = "24/7"`` nothing opens or closes, but a lab session still changes what a pass does: its
    lead time starts the checks (and the hours exemption), its end ends the exemption. The agent wakes at each
    (``wake_at``), not up to one resync (300 s) later; the access window's own next change stays none."""
    at, schedule = session_soon(60)
    end = min(at + timedelta(minutes=30), at.replace(hour=23, minute=59))
    head = (EXAMPLES / "course-2016.toml").read_text().split("[schedule]")[0]
    (tmp_path / "lab.toml").write_text(f"{head}{schedule}[policy]\nlead_minutes = 15\n")
    store = open_store(f"sqlite:///{tmp_path / 'course.db'}", create=True)
    try:
        fill(store, seats=1, assign=1, source=tmp_path / "lab.toml")
        before = course_state(store, "demo", now=at - timedelta(minutes=30))
        assert (before.closed, before.wake_at) == (None, at - timedelta(minutes=15))
        during = course_state(store, "demo", now=at + timedelta(minutes=1))
        assert (during.closed, during.wake_at) == (None, end)
        assert course_state(store, "demo", now=end + timedelta(minutes=1)).wake_at is None  # the last session
        # the access window itself never closes: a cloud seat's autostop waits for no session (next_change)
        assert before.next_change is None and during.next_change is None
    finally:
        store.close()
