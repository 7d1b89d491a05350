"""Participant self-service on the host engine with a real sshd (issue 40): each request is a store row
that ``gpuseat apply`` (or the agent) carries out; checked by logging in as the participant.

stop refuses logins and ends processes; start lets them in again; restart ends processes; reset
restores the home from the skeleton; a new key works and the old one is refused; at 0 seat hours the
seat is stopped with the reason, a top-up and a start let the participant in again.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from .hostlab import Lab, free_port
from .test_agent import MIG, AgentProcess, _alive_of, _seat_of, _settings, until

#: the agent-driven waits of the quota test: a deadline only (each ends as soon as its condition holds); a
#: PostgreSQL run on a loaded 2-core machine once needed more than 20 s for one pass
AGENT_WAIT_S = 90


def _runs(uid: int, name: str) -> bool:
    """True while a process ``name`` of ``uid`` runs."""
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and p.stat().st_uid == uid and (p / "comm").read_text().strip() == name:
                return True
        except OSError:
            continue
    return False


def _apply(cli: Callable[..., Any], db: str) -> Any:
    r = cli("apply", "--course", "lab", "--engine", "host", "--host", "gpu1", "--db", db)
    assert r.code in (0, 1), r.out + r.err
    return r


def _requests(cli: Callable[..., Any], db: str, who: str) -> list[dict[str, Any]]:
    r = cli("seat", "requests", "--participant", who, "--format", "json", "--db", db)
    assert r.code == 0, r.err
    return list(json.loads(r.out))


def _ready(cli: Callable[..., Any], lab: Lab, db: str, skeleton: Path) -> None:
    _settings(cli, lab, db)
    r = cli("engines", "settings", "host", f"skeleton={skeleton}", "--course", "lab", "--db", db)
    assert r.code == 0, r.err
    by_uuid = _seat_of(cli, db)
    for who, uuid in (("ann", MIG[0]), ("ben", MIG[1])):
        assert cli("seats", "assign", "--participant", who, "--seat", by_uuid[uuid], "--db", db).code == 0
    _apply(cli, db)
    lab.start_sshd()
    assert lab.ssh("ann", "true").returncode == 0, lab.sshd_log()[-2000:]


def _uid(lab: Lab, who: str) -> int:
    import pwd

    return pwd.getpwnam(lab.people[who].user).pw_uid


def test_stop_start_restart_reset_and_a_new_key(
    hostcourse: tuple[Lab, str], cli: Callable[..., Any], tmp_path: Path
) -> None:
    lab, db = hostcourse
    skeleton = tmp_path / "skel"
    skeleton.mkdir()
    (skeleton / "README.txt").write_text("welcome to the lab\n")
    skeleton.chmod(0o755)
    _ready(cli, lab, db, skeleton)
    uid = _uid(lab, "ann")

    # ann leaves a training loop running, then stops her seat
    loop = subprocess.Popen(
        ["ssh", "-F", "none", "-i", str(lab.people["ann"].private_key), "-p", str(lab.port), "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
         f"{lab.people['ann'].user}@127.0.0.1", "sleep 600"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        until(lambda: _runs(uid, "sleep"))  # her loop runs (not only sshd's session for it, still being set up)
        r = cli("seat", "stop", "--participant", "ann", "--db", db)
        assert r.code == 0 and "pending" in r.out, r.out + r.err
        assert _requests(cli, db, "ann")[0]["state"] == "pending"
        _apply(cli, db)
        until(lambda: not _alive_of(uid))
    finally:
        loop.kill()
        loop.wait()
    done = _requests(cli, db, "ann")[0]
    assert (done["action"], done["state"]) == ("stop", "done"), done
    assert lab.ssh("ann", "true").returncode == 255  # logins refused
    assert lab.ssh("ben", "true").returncode == 0  # the neighbour is untouched
    # a second apply changes nothing (the stop holds; no unlock planned)
    assert "nothing to change" in _apply(cli, db).out
    # a stop already done is not pending twice; start lets her in
    assert cli("seat", "start", "--participant", "ann", "--db", db).code == 0
    _apply(cli, db)
    assert _requests(cli, db, "ann")[0]["state"] == "done"
    assert lab.ssh("ann", "true").returncode == 0

    # restart ends her processes; she can log in afterwards
    stray = subprocess.Popen(["runuser", "-u", lab.people["ann"].user, "--", "sleep", "600"])
    try:
        until(lambda: _alive_of(uid))
        assert cli("seat", "restart", "--participant", "ann", "--db", db).code == 0
        _apply(cli, db)
        until(lambda: not _alive_of(uid))
    finally:
        stray.kill()
        stray.wait()
    assert _requests(cli, db, "ann")[0]["state"] == "done"
    assert lab.ssh("ann", "true").returncode == 0

    # reset: a typed confirmation, then her home is the skeleton
    assert lab.ssh("ann", "echo mine > ~/notes.txt").returncode == 0
    refused = cli("seat", "reset", "--participant", "ann", "--db", db)
    assert refused.code == 2 and "--confirm ann" in refused.err
    assert cli("seat", "reset", "--participant", "ann", "--confirm", "ann", "--db", db).code == 0
    _apply(cli, db)
    listing = lab.ssh("ann", "ls -A ~; cat ~/README.txt")
    assert listing.returncode == 0, listing.stderr
    assert "notes.txt" not in listing.stdout and "welcome to the lab" in listing.stdout

    # a new key: installed by the apply; the old one refused, the new one in
    new = tmp_path / "newkey"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ann@new", "-f", str(new)], check=True)
    r = cli("seat", "key", "--participant", "ann", "--key-file", f"{new}.pub", "--db", db)
    assert r.code == 0, r.err
    assert lab.ssh("ann", "true").returncode == 0  # the old key works until the new one is installed
    _apply(cli, db)
    assert _requests(cli, db, "ann")[0]["state"] == "done"
    assert lab.ssh("ann", "true").returncode == 255
    assert lab.ssh("ann", "true", key=new).returncode == 0


def test_a_bad_key_is_refused_and_nothing_changes(hostcourse: tuple[Lab, str], cli: Callable[..., Any]) -> None:
    lab, db = hostcourse
    bad = lab.root / "bad.pub"
    for text, says in (
        ("ssh-ed25519 " + "A" * 10_000, "characters"),
        ('command="sh" ' + lab.people["ann"].public_key, "options"),
        (lab.people["ann"].public_key + "\n" + lab.people["ben"].public_key, "one key line"),
    ):
        bad.write_text(text)
        r = cli("seat", "key", "--participant", "ann", "--key-file", bad, "--db", db)
        assert r.code == 2 and says in r.err, r.err
    small_rsa = lab.root / "rsa2048"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(small_rsa)], check=True)
    r = cli("seat", "key", "--participant", "ann", "--key-file", f"{small_rsa}.pub", "--db", db)
    assert r.code == 2 and "3072" in r.err
    assert _requests(cli, db, "ann") == []
    out = cli("roster", "export", "--format", "json", "--db", db)
    if out.code == 0:
        assert lab.people["ann"].public_key.split()[1] in out.out


def test_holders_stopped_elsewhere_are_locked_out_from_the_pass_that_makes_their_accounts_here(
    hostcourse: tuple[Lab, str], cli: Callable[..., Any]
) -> None:
    """ann stopped her seat on another server (gpu2, whose agent carried the stop out) and cat has no seat
    hours left; both are moved onto seats of this one, where they have no account yet. The pass that makes
    their accounts locks them before their keys are written: neither logs in (ben does), and the next pass
    changes nothing. (``useradd`` made them unlocked: their keys let them in until the next pass.)"""
    from gpuseat.store import open_store

    lab, db = hostcourse
    _settings(cli, lab, db)
    by_uuid = _seat_of(cli, db)
    store = open_store(db)
    try:
        store.seats.add_seats("lab", [{"key": "far-01", "kind": "gpu", "engine": "host", "host": "gpu2"}])
        store.seats.assign("lab", "ann", "far-01")
        asked = store.requests.request_seat("lab", "ann", "stop", actor="ann")
        assert store.requests.finish_request("lab", asked.id, ok=True, reason="stopped")  # by gpu2's agent
        store.seats.move("lab", "ann", by_uuid[MIG[0]])
        store.seats.assign("lab", "ben", by_uuid[MIG[1]])
        store.seats.assign("lab", "cat", by_uuid[MIG[2]])
        store.requests.add_seat_hours("lab", "cat", 0, kind="quota", actor="organizer")
    finally:
        store.close()
    _apply(cli, db)
    lab.start_sshd()
    assert lab.ssh("ben", "true").returncode == 0, lab.sshd_log()[-2000:]
    assert lab.ssh("ann", "true").returncode == 255
    assert lab.ssh("cat", "true").returncode == 255
    assert "nothing to change" in _apply(cli, db).out
    assert lab.ssh("ann", "true").returncode == 255


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_at_zero_hours_the_agent_stops_the_seat_and_a_topup_lets_it_start(
    kind: str, request: pytest.FixtureRequest, cli: Callable[..., Any], tmp_path: Path
) -> None:
    """With the agent running (SQLite: it polls; PostgreSQL: a NOTIFY wakes it), no organizer apply."""
    lab, db = request.getfixturevalue("hostcourse" if kind == "sqlite" else "pghostcourse")
    _ready(cli, lab, db, tmp_path)
    agent = AgentProcess(db, tmp_path / "agent.log", "--resync", "1").start()
    try:
        assert cli("seat", "quota", "--participant", "ann", "--hours", "0", "--db", db).code == 0
        until(lambda: lab.ssh("ann", "true").returncode == 255, timeout=AGENT_WAIT_S)
        # the stop is recorded in the pass's last phase, after the revoke that refuses her: wait for it
        until(lambda: _requests(cli, db, "ann") != [], timeout=AGENT_WAIT_S)
        stop = _requests(cli, db, "ann")[0]
        assert stop["action"] == "stop" and "no seat hours left" in stop["reason"], stop
        assert lab.ssh("ben", "true").returncode == 0
        # a start with no hours left is refused with the reason; the seat stays stopped
        assert cli("seat", "start", "--participant", "ann", "--db", db).code == 0
        until(lambda: _requests(cli, db, "ann")[0]["state"] != "pending", timeout=AGENT_WAIT_S)
        assert _requests(cli, db, "ann")[0]["state"] == "failed"
        assert "no seat hours left" in _requests(cli, db, "ann")[0]["reason"]
        assert lab.ssh("ann", "true").returncode == 255
        # a top-up, then a start: she is in again
        assert cli("seat", "topup", "--participant", "ann", "--hours", "5", "--db", db).code == 0
        assert cli("seat", "start", "--participant", "ann", "--db", db).code == 0
        until(lambda: lab.ssh("ann", "true").returncode == 0, timeout=AGENT_WAIT_S)
        until(lambda: _requests(cli, db, "ann")[0]["state"] == "done", timeout=AGENT_WAIT_S)  # recorded after the grant
        time.sleep(0.5)
        hours = {h["participant"]: h for h in json.loads(cli("seat", "hours", "-f", "json", "--db", db).out)}
        assert hours["ann"]["quota"] == 0 and hours["ann"]["topups"] == 5 and 0 < hours["ann"]["left"] <= 5
    finally:
        agent.stop()


def test_the_participant_page_stops_and_starts_the_seat(
    hostcourse: tuple[Lab, str], cli: Callable[..., Any], tmp_path: Path
) -> None:
    """From the page: Stop → the agent's pass → ssh refused; Start → in again; the page says each."""
    import re

    from fastapi.testclient import TestClient

    from gpuseat.catalog.bundle import load_catalog
    from gpuseat.store import open_store
    from gpuseat.web.app import Portal, create_app

    lab, db = hostcourse
    _ready(cli, lab, db, tmp_path)
    store = open_store(db)
    links = {t.participant: t.token for t in store.tokens.issue_tokens("lab")}
    portal = Portal(store, load_catalog(), "lab", link_days_after_end=None)
    try:
        with TestClient(create_app(portal)) as client:
            ann = links["ann"]

            def press(action: str) -> None:
                csrf = re.search(r'name="csrf" value="([^"]+)"', client.get(f"/t/{ann}").text)
                assert csrf is not None
                r = client.post(
                    f"/t/{ann}/seat", data={"csrf": csrf.group(1), "action": action}, follow_redirects=False
                )
                assert r.status_code == 303, r.text

            press("stop")
            assert "stop: pending" in client.get(f"/t/{ann}").text
            _apply(cli, db)
            assert lab.ssh("ann", "true").returncode == 255
            page = client.get(f"/t/{ann}").text
            assert "stop: done" in page and 'id="seat-start"' in page
            press("start")
            _apply(cli, db)
            assert lab.ssh("ann", "true").returncode == 0
            assert "start: done" in client.get(f"/t/{ann}").text
    finally:
        store.close()


IDLE_COURSE = """name = "Idle lab"
participants = 4

[needs]
min_gpu_memory_gb = 16
isolation = "partitioned"

[schedule]
start = 2026-09-07
days = 5

[policy]
idle_minutes = 3
grace_minutes = 0
idle_gpu_percent = 10
"""


def _samples(db: str, seat_util: dict[str, int], minutes: int) -> None:
    """Stand-in monitor readings: every 20 s over the last ``minutes`` for each seat, at its utilisation."""
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from gpuseat.db.models import Device, Sample, Seat

    engine = create_engine(db)
    now = int(time.time())
    with Session(engine) as s, s.begin():
        for key, util in seat_util.items():
            seat = s.scalar(select(Seat).where(Seat.key == key))
            assert seat is not None and seat.device_uuid
            dev = Device(host="gpu1", uuid=seat.device_uuid, name="NVIDIA H200")
            s.add(dev)
            s.flush()
            for ts in range(now - minutes * 60, now + 1, 20):
                s.add(
                    Sample(
                        ts=ts, device_id=dev.id, seat_id=seat.id, utilization_gpu=util, processes=0,
                        foreign_processes=0, active=util > 0,
                    )
                )  # fmt: skip
    engine.dispose()


def _held_since(db: str, minutes: int) -> None:
    """As if every seat had been held for ``minutes`` (the idle window must have passed)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(db)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE assignments SET valid_from = :t WHERE valid_to IS NULL"),
            {"t": datetime.now(UTC) - timedelta(minutes=minutes)},
        )
    engine.dispose()


def _earlier(db: str, who: str, minutes: int) -> None:
    """As if all of ``who``'s seat history (her seat, her requests) had happened ``minutes`` earlier."""
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from gpuseat.db.models import Assignment, Participant, SeatRequest

    back = timedelta(minutes=minutes)
    engine = create_engine(db)
    with Session(engine) as s, s.begin():
        pid = s.scalar(select(Participant.id).where(Participant.key == who))
        for a in s.scalars(select(Assignment).where(Assignment.participant_id == pid)):
            a.valid_from -= back
        for r in s.scalars(select(SeatRequest).where(SeatRequest.participant_id == pid)):
            r.requested_at -= back
            r.done_at = None if r.done_at is None else r.done_at - back
    engine.dispose()


def _policy_course(lab: Lab, cli: Callable[..., Any], tmp_path: Path, toml: str) -> tuple[str, dict[str, str]]:
    """Course ``lab`` from ``toml``: ann, ben, cat on the three MIG seats, applied, sshd started."""
    db = f"sqlite:///{tmp_path / 'course.db'}"
    lab.port = free_port()
    (tmp_path / "lab.toml").write_text(toml)
    for who in ("ann", "ben", "cat", "dan"):
        lab.person(who)
    (tmp_path / "roster.csv").write_text(lab.roster())
    listing = subprocess.run([str(lab.nvidia_smi), "-L"], capture_output=True, text=True, check=True).stdout
    (tmp_path / "smi-L.txt").write_text(listing)
    for args in (
        ("course", "create", tmp_path / "lab.toml", "--key", "lab"),
        ("roster", "import", tmp_path / "roster.csv"),
        ("seats", "add", "--from-nvidia-smi", tmp_path / "smi-L.txt", "--engine", "host", "--host", "gpu1"),
    ):
        assert cli(*args, "--db", db).code == 0, args
    _settings(cli, lab, db)
    by_uuid = _seat_of(cli, db)
    seat = {"ann": by_uuid[MIG[0]], "ben": by_uuid[MIG[1]], "cat": by_uuid[MIG[2]]}
    for who, key in seat.items():
        assert cli("seats", "assign", "--participant", who, "--seat", key, "--db", db).code == 0
    _apply(cli, db)
    lab.start_sshd()
    return db, seat


def test_a_seat_never_connected_is_stopped_a_login_with_the_own_key_counts_the_probe_not(
    lab: Lab, cli: Callable[..., Any], tmp_path: Path
) -> None:
    db, seat = _policy_course(lab, cli, tmp_path, IDLE_COURSE.replace("idle_minutes = 3", "never_connected_hours = 1"))
    sshd_log = lab.root / "sshd" / "sshd.log"
    assert cli("engines", "settings", "host", f"sshd_log={sshd_log}", "--course", "lab", "--db", db).code == 0
    assert lab.ssh("ben", "true").returncode == 0  # ben logs in once with his key
    checked = cli("seats", "check", "--course", "lab", "--seat", seat["ann"], "--db", db)  # the probe logs in as ann
    assert checked.code == 0, checked.out + checked.err
    _apply(cli, db)  # within the hour: nobody stopped (ann is not tried here: that would be a login)
    assert _requests(cli, db, "ann") == [] and _requests(cli, db, "cat") == []
    _held_since(db, 120)
    r = _apply(cli, db)
    assert "seat.stop" in r.out, r.out
    assert lab.ssh("ann", "true").returncode == 255
    stop = _requests(cli, db, "ann")[0]
    assert stop["reason"].startswith("never connected: ann did not log in within 1 h"), stop
    assert lab.ssh("ben", "true").returncode == 0 and _requests(cli, db, "ben") == []
    # cat never logged in either: stopped the same way; a start lets her in with a fresh window (the next
    # pass, before she logs in, does not stop her again at once), and she is not stopped once she logs in
    assert lab.ssh("cat", "true").returncode == 255
    assert cli("seat", "start", "--participant", "cat", "--db", db).code == 0
    _apply(cli, db)
    assert "seat.stop" not in _apply(cli, db).out
    _earlier(db, "cat", 120)  # … but the window still holds: a start 2 h ago without a login is stopped
    assert "seat.stop" in _apply(cli, db).out
    assert (
        _requests(cli, db, "cat")[0]["reason"] == "never connected: cat did not log in within 1 h of their last start"
    )
    assert cli("seat", "start", "--participant", "cat", "--db", db).code == 0
    _apply(cli, db)
    assert lab.ssh("cat", "true").returncode == 0
    assert "seat.connected" in _apply(cli, db).out
    assert "nothing to change" in _apply(cli, db).out
    assert lab.ssh("cat", "true").returncode == 0


#: the public keys of ann and ben (tests/vms/keys), as the roster gives them
JOURNAL_KEYS = {
    "ann": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOdDt3hsh9On7JeEj75Fe78EXa12aFreJIkOGBlvq4b0 ann@laptop",
    "ben": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGQXt3Pm4gjV0FwTsjmdZ3jwGQdcdzSx92Euav4GCXzs ben@laptop",
}
#: their fingerprints as sshd logs them (``ssh-keygen -lf`` of each)
JOURNAL_PRINTS = {
    "ann": "SHA256:ub8ZA3MP6sOYPFMV54YvhVsBueggB8KyPryFJqf29W8",
    "ben": "SHA256:mjjBUsQ7cB4JiutwxvpEToUHFFa2ZtHdKfqqbTsxHI0",
}
#: the fingerprint of gpuseat's probe key (tests/vms/keys/carol.pub)
PROBE_PRINT = "SHA256:JRmMCYuA63ohn026W3jR17z47ETSIiWbfhFSWpnrTOs"
#: the command the host engine asks the journal with, up to the time
JOURNAL_CMD = ("journalctl", "-q", "-o", "cat", "_COMM=sshd", "_COMM=sshd-session", "--since")


def test_the_journal_is_read_from_the_earliest_seat_time_so_a_holder_seated_earlier_keeps_their_login(
    tmp_path: Path,
) -> None:
    """One read of sshd's journal a pass serves every holder: read from the first holder's seat time in
    seat-key order (ann's, 2 h ago), it lacked ben's login 2.5 h ago (seated 3 h ago), and ben was stopped
    as never connected. The journal is a stand-in that answers journalctl's ``--since`` as journalctl does,
    with real sshd lines (a real sshd cannot log to the journal here): the sshd_log file setting reads the
    file's tail whatever the time, so it cannot show this."""
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from gpuseat.core.delivery import login_name
    from gpuseat.core.roster import RosterText
    from gpuseat.db.models import Assignment, Participant
    from gpuseat.engines import registry
    from gpuseat.engines.apply import course_state
    from gpuseat.engines.base import Changes
    from gpuseat.engines.host.requests import plan_requests
    from gpuseat.engines.runner import RecordingRunner
    from gpuseat.store import open_store

    db = f"sqlite:///{tmp_path / 'course.db'}"
    (tmp_path / "lab.toml").write_text(IDLE_COURSE.replace("idle_minutes = 3", "never_connected_hours = 1"))
    now = datetime.now(UTC).replace(microsecond=0)
    with open_store(db, create=True) as store:
        store.courses.create_course(tmp_path / "lab.toml", key="lab")
        rows = "".join(f"{who},{who.title()},{who}@example.edu,{key}\n" for who, key in JOURNAL_KEYS.items())
        store.roster.import_roster("lab", RosterText("key,name,email,ssh_key\n" + rows, where="roster.csv"))
        store.seats.add_seats(
            "lab", [{"key": f"gpu1-{n}", "kind": "gpu", "engine": "host", "host": "gpu1"} for n in (1, 2)]
        )
        store.seats.assign("lab", "ann", "gpu1-1")  # first in seat-key order, seated 2 h ago
        store.seats.assign("lab", "ben", "gpu1-2")  # seated 3 h ago
        sql = create_engine(db)
        with Session(sql) as s, s.begin():
            for who, hours in (("ann", 2), ("ben", 3)):
                pid = s.scalar(select(Participant.id).where(Participant.key == who))
                for a in s.scalars(select(Assignment).where(Assignment.participant_id == pid)):
                    a.valid_from = now - timedelta(hours=hours)
        sql.dispose()
        login = {p.key: login_name(p.key, p.unix_user) for p in store.roster.participants("lab")}
        # ben logged in with his own key 2.5 h ago, 30 min before ann got her seat; ann never did (1 h ago
        # the probe logged in as her: the read from her seat time was not empty)
        journal = [
            (now - timedelta(hours=2, minutes=31), "Connection from 192.0.2.7 port 33632 on 10.0.0.5 port 22 rdomain \"\""),
            (now - timedelta(hours=2, minutes=30), f"Accepted publickey for {login['ben']} from 192.0.2.7 port 33632 "
                                                   f"ssh2: ED25519 {JOURNAL_PRINTS['ben']}"),
            (now - timedelta(hours=2, minutes=29), f"Disconnected from user {login['ben']} 192.0.2.7 port 33632"),
            # gpuseat's probe (``seats check``) as ann, with its own key: not her login
            (now - timedelta(hours=1), f"Accepted publickey for {login['ann']} from 127.0.0.1 port 40110 ssh2: "
                                       f"RSA {PROBE_PRINT}"),
        ]  # fmt: skip

        def answer(args: tuple[str, ...]) -> tuple[int, str, str]:
            assert args[: len(JOURNAL_CMD)] == JOURNAL_CMD and len(args) == len(JOURNAL_CMD) + 1, args
            since = datetime.strptime(args[-1], "%Y-%m-%d %H:%M:%S UTC").replace(tzinfo=UTC)
            return 0, "".join(f"{line}\n" for at, line in journal if at >= since), ""

        def plan(runner: RecordingRunner) -> tuple[Changes, list[tuple[str, ...]]]:
            engine = registry.build("host", store, "lab", runner=runner, host="gpu1")
            changes = Changes("host", "lab", "gpu1")
            plan_requests(engine, course_state(store, "lab", now=now), changes)
            return changes, [r.argv for r in runner.take() if r.argv[0] == "journalctl"]

        def verdicts(changes: Changes) -> dict[str, str]:
            return {str(x.participant): x.action for x in changes.steps if x.action in ("seat.stop", "seat.connected")}

        changes, asked = plan(RecordingRunner(answers={("journalctl",): answer}))
        assert verdicts(changes) == {"ann": "seat.stop", "ben": "seat.connected"}, changes.steps
        assert asked == [(*JOURNAL_CMD, f"{now - timedelta(hours=3):%Y-%m-%d %H:%M:%S} UTC")]  # once, from ben's
        # a quiet journal (no sshd line since) is read once a pass, not again for each holder; both are stopped
        journal.clear()
        changes, asked = plan(RecordingRunner(answers={("journalctl",): answer}))
        assert verdicts(changes) == {"ann": "seat.stop", "ben": "seat.stop"} and len(asked) == 1, asked
        # an unreadable journal stops nobody, and says so once
        changes, asked = plan(RecordingRunner(answers={("journalctl",): (1, "", "No journal files were found.")}))
        assert verdicts(changes) == {} and len(asked) == 1, asked
        assert [n for n in changes.notes if "cannot be read" in n] == [
            "never_connected_hours: sshd's log (journal) cannot be read: no seat is stopped for it"
        ]


def test_idle_gpu_and_no_ssh_is_warned_then_stopped_a_busy_gpu_or_a_session_never(
    lab: Lab, cli: Callable[..., Any], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'course.db'}"
    lab.port = free_port()
    (tmp_path / "lab.toml").write_text(IDLE_COURSE)
    for who in ("ann", "ben", "cat", "dan"):
        lab.person(who)
    (tmp_path / "roster.csv").write_text(lab.roster())
    listing = subprocess.run([str(lab.nvidia_smi), "-L"], capture_output=True, text=True, check=True).stdout
    (tmp_path / "smi-L.txt").write_text(listing)
    for args in (
        ("course", "create", tmp_path / "lab.toml", "--key", "lab"),
        ("roster", "import", tmp_path / "roster.csv"),
        ("seats", "add", "--from-nvidia-smi", tmp_path / "smi-L.txt", "--engine", "host", "--host", "gpu1"),
    ):
        assert cli(*args, "--db", db).code == 0, args
    _settings(cli, lab, db)
    by_uuid = _seat_of(cli, db)
    seat = {"ann": by_uuid[MIG[0]], "ben": by_uuid[MIG[1]], "cat": by_uuid[MIG[2]]}
    for who, key in seat.items():
        assert cli("seats", "assign", "--participant", who, "--seat", key, "--db", db).code == 0
    _apply(cli, db)
    lab.start_sshd()
    _held_since(db, 10)
    # ann: GPU idle, no session; ben: a training loop keeps the GPU busy; cat: GPU idle, an SSH command running
    _samples(db, {seat["ann"]: 0, seat["ben"]: 93, seat["cat"]: 1}, 5)
    p = lab.people["cat"]
    session = subprocess.Popen(
        ["ssh", "-F", "none", "-i", str(p.private_key), "-p", str(lab.port), "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
         f"{p.user}@127.0.0.1", "sleep 600"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        until(lambda: _alive_of(_uid(lab, "cat")))
        _apply(cli, db)  # first: a warning, no stop
        assert lab.ssh("ann", "true").returncode == 0
        r = cli("seat", "requests", "--participant", "ann", "-f", "json", "--db", db)
        assert json.loads(r.out) == []
        from gpuseat.store import open_store

        with open_store(db) as store:
            warned = store.requests.idle_warning("lab", "ann")
            assert warned is not None and "it stops in 0 min unless you use it" in warned[1]
            assert (
                store.requests.idle_warning("lab", "ben") is None and store.requests.idle_warning("lab", "cat") is None
            )
        _apply(cli, db)  # the grace (0 min) has passed: ann's seat stops
        assert lab.ssh("ann", "true").returncode == 255
        stop = _requests(cli, db, "ann")[0]
        assert stop["action"] == "stop" and stop["reason"].startswith("idle: GPU below 10 %"), stop
        # the busy GPU and the open SSH session were never idle
        assert lab.ssh("ben", "true").returncode == 0
        assert _requests(cli, db, "ben") == [] and _requests(cli, db, "cat") == []
        assert _alive_of(_uid(lab, "cat"))
        # a start lets ann in again (the seat counts as started now: not idle until the window passes again)
        assert cli("seat", "start", "--participant", "ann", "--db", db).code == 0
        _apply(cli, db)
        assert lab.ssh("ann", "true").returncode == 0
        _apply(cli, db)
        assert lab.ssh("ann", "true").returncode == 0
    finally:
        session.kill()
        session.wait()


@pytest.mark.parametrize("hours", [5, -5], ids=["ahead", "behind"])
def test_an_agent_host_whose_clock_is_off_warns_an_idle_seat_once_then_stops_it(
    lab: Lab, cli: Callable[..., Any], tmp_path: Path, hours: int
) -> None:
    """The agent's host, and the monitor on it, 5 hours off the store's clock: ann's idle seat is warned,
    then stopped after the grace, and ben's busy one is left alone. Ahead, the warning (on the store's
    clock) always looked hours old, so each pass warned again and none stopped; behind, every seat
    looked just started (its start is on the store's clock), so none was ever idle."""
    from stepped_clock import stepped

    db, seat = _policy_course(lab, cli, tmp_path, IDLE_COURSE)
    _held_since(db, 10)  # on the store's (true) clock
    with stepped(timedelta(hours=hours)):
        _samples(db, {seat["ann"]: 0, seat["ben"]: 93}, 5)  # the monitor's readings: this host's clock
        _apply(cli, db)  # a warning
        assert lab.ssh("ann", "true").returncode == 0 and _requests(cli, db, "ann") == []
        _apply(cli, db)  # the grace (0 min) has passed: ann's seat stops
    assert lab.ssh("ann", "true").returncode == 255
    from gpuseat.store import open_store

    with open_store(db) as store:
        warned = [e for e in store.events.events("lab") if e.action == "seat.idle.warned"]
    assert [e.participant for e in warned] == ["ann"], warned
    stop = _requests(cli, db, "ann")[0]
    assert stop["action"] == "stop" and stop["reason"].startswith("idle: GPU below 10 %"), stop
    assert lab.ssh("ben", "true").returncode == 0 and _requests(cli, db, "ben") == []


def test_ready_before_the_session_seats_run_and_are_checked_a_broken_one_is_named(
    lab: Lab, cli: Callable[..., Any], tmp_path: Path
) -> None:
    """A session 20 minutes ahead, lead 30 min: every seat is checked as its participant before it starts
    (ben, without a key, is named broken with why); ann, out of hours, still gets in (sessions are exempt)."""
    from gpuseat.core import delivery
    from gpuseat.store import open_store

    at = datetime.now(UTC) + timedelta(minutes=20)
    end = at + timedelta(hours=1)
    (tmp_path / "lab.toml").write_text(
        f'name = "Session lab"\nparticipants = 2\n[needs]\nmin_gpu_memory_gb = 16\nisolation = "partitioned"\n'
        f'[schedule]\nstart = {(at - timedelta(days=1)).date()}\ndays = 3\naccess = "24/7"\n'
        f'[[schedule.session]]\ndate = {at.date()}\nhours = "{at:%H:%M}-{end:%H:%M}"\n'
        "[policy]\nquota_hours = 0\nlead_minutes = 30\n"
    )
    ann, ben = lab.person("ann"), lab.person("ben")
    (tmp_path / "roster.csv").write_text(
        f"key,name,email,unix_user,ssh_key\nann,ann,ann@example.org,{ann.user},{ann.public_key}\n"
        f"ben,ben,ben@example.org,{ben.user},\n"
    )
    listing = subprocess.run([str(lab.nvidia_smi), "-L"], capture_output=True, text=True, check=True).stdout
    (tmp_path / "smi-L.txt").write_text(listing)
    lab.port = free_port()
    db = f"sqlite:///{tmp_path / 'course.db'}"
    for args in (
        ("course", "create", tmp_path / "lab.toml", "--key", "lab", "--timezone", "UTC"),
        ("roster", "import", tmp_path / "roster.csv"),
        ("seats", "add", "--from-nvidia-smi", tmp_path / "smi-L.txt", "--engine", "host", "--host", "gpu1"),
    ):
        r = cli(*args, "--db", db)
        assert r.code == 0, (args, r.err)
    _settings(cli, lab, db)
    by_uuid = _seat_of(cli, db)
    seat = {"ann": by_uuid[MIG[0]], "ben": by_uuid[MIG[1]]}
    for who, key in seat.items():
        assert cli("seats", "assign", "--participant", who, "--seat", key, "--db", db).code == 0
    # sshd up first (with gpuseat's drop-in), so the check before the session can log in
    dropin = Path(lab.settings()["sshd_dropin"])
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text(delivery.sshd_dropin(str(lab.keys_dir), lab.group))
    lab.start_sshd()
    r = _apply(cli, db)
    assert "seat.check" in r.out, r.out
    with open_store(db) as store:
        checks = store.delivery.readiness_of("lab")
        assert store.requests.seat_hours("lab")["ann"].left == 0
    assert checks[seat["ann"]]["state"] == "ready", checks[seat["ann"]]
    assert checks[seat["ben"]]["state"] == "broken" and "no SSH key" in checks[seat["ben"]]["reason"]
    assert lab.ssh("ann", "true").returncode == 0  # 0 hours left, but the session is exempt
    assert "nothing to change" in _apply(cli, db).out  # checked once per session
