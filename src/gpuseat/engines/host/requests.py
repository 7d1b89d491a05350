"""The host engine's part of participant self-service (issue 40): seat requests and the seat-hour stop.

- ``stop``: the account is locked (sshd refuses every key) and the participant's processes end; the
  seat stays stopped (a resync re-locks an account unlocked by hand) until a ``start``.
- ``start``: the lock is lifted (by the access plan, which no longer holds it back); refused with no
  seat hours left, and not possible while the course's access hours are closed.
- ``restart``: processes end, the seat runs. ``reset``: processes end and the home is restored from the
  ``skeleton`` setting (``/etc/skel``): every file of the participant's home is gone.
- ``key``: the participant's new key is already in the store; the access plan writes the keys file
  (one atomic replace: the old key leaves in the same instant the new one arrives); the request is done
  once the file holds it.
- At 0 seat hours a running seat is stopped with the reason (a ``stop`` by the agent on its timeline): the
  rule of :mod:`gpuseat.engines.hours`, the same on every engine that can stop a seat.
- Idle (``[policy] idle_minutes``): every monitor reading of the seat's GPU below ``idle_gpu_percent`` *and*
  no SSH activity (no command running over SSH, no input on the participant's terminals) for that long →
  a warning on the page; still so ``grace_minutes`` later → stopped. Never during a lab session, never
  without monitor readings that cover the window: the rule of :mod:`gpuseat.engines.idle`, shared with
  the JupyterHub engine (this engine gives it the SSH signal).
- Never connected (``never_connected_hours``): a seat whose holder has not logged in with their own key
  (sshd's "Accepted publickey for LOGIN … SHA256:<their key>", from the journal or the ``sshd_log`` file;
  gpuseat's probe key does not count) that long after getting it, after the rule was set for them (set after
  day one: not counted from before), or after their last start carried out (a start gives the whole window
  again), is stopped; a login is recorded once as ``seat.connected``. An unreadable log stops nothing.
- Lab sessions: from ``lead_minutes`` before one until it ends, no stop for hours (a seat stopped for hours
  runs through it), and each running seat is checked once as its participant (``seat.check``, the probe of
  ``seats check``), so a broken seat is on the organizer's overview before the session starts: the rule of
  :mod:`gpuseat.engines.sessions`, the same on every engine.

Each request ends in a ``request.record`` step that looks at the machine and marks it done or failed
with the reason, so a failed lock or a closed window is said, not left pending.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuseat.core.selfservice import RunState
from gpuseat.engines import hours as seat_hours
from gpuseat.engines import idle as idle_rule
from gpuseat.engines import sessions as session_checks
from gpuseat.engines.base import (
    RUN_REQUESTS,
    Changes,
    CourseState,
    Step,
    plan_holder_requests,
    refused_outcome,
    stale_requests,
)
from gpuseat.errors import InputError

if TYPE_CHECKING:
    from gpuseat.engines.host.engine import HostEngine
    from gpuseat.engines.host.machine import Account
    from gpuseat.store.requests import RequestView


def plan_requests(
    engine: HostEngine, course: CourseState, changes: Changes, refused: Mapping[str, str] | None = None
) -> None:
    """Add the steps of this host's pending requests and of its stopped seats to ``changes``.

    ``refused``: seat → why its holder gets nothing on this host (another course's older holder keeps its
    device, :mod:`gpuseat.engines.host.others`). Their login may be that other course's account (one person in
    both): each of their requests only fails with those words, and no stop (hours, idle, never connected),
    check, lock or end of processes is planned for them."""
    if course.course is None or course.archived:
        return
    here = {s.key for s in course.seats if s.engine == "host" and (s.host or None) == engine.host}
    if not here:
        return
    pending = engine.pending_requests(here)
    holders = {seat.key: p for seat, p in course.holders() if seat.key in here}
    changes.steps += [_record(engine, course, None, r, why) for r, why in stale_requests(pending, holders)]
    for seat_key, why in sorted((refused or {}).items()):
        p = holders.pop(seat_key, None)
        if p is not None:
            mine = sorted((r for r in pending if r.participant == p.key and r.seat == seat_key), key=lambda x: x.id)
            changes.steps += [_record(engine, course, None, r, why) for r in mine]
    states = engine.store.requests.run_states(engine.course)
    # hours, and the session that holds back a stop for hours, are counted on the store's clock (unless
    # the pass was given a time): this host's clock, stepped ahead, would stop a seat for hours not used
    now = course.now or (engine.store.requests.now() if holders else datetime.now(UTC))
    # how far this host's clock is ahead of the store's: the idle check reads this host's clock (the monitor's
    # readings and the terminals' times are on it) and turns the store's times (starts, warnings) onto it
    ahead = timedelta(0) if course.now is not None else datetime.now(UTC) - now
    ledger = seat_hours.read(engine.store, engine.course, now) if holders else None
    hours = ledger.hours if ledger is not None else {}
    sessions = ledger.sessions if ledger is not None else None
    policies = sessions.policies if sessions is not None else {}
    in_session = sessions is not None and sessions.current is not None
    checks = session_checks.SessionChecks(engine, course, ledger)
    windows: idle_rule.Windows = {}
    since_of = {seat.key: seat.assigned_since for seat in course.seats}
    never_rule = any(x.get("never_connected_hours") for x in policies.values())
    connected = engine.store.requests.connected(engine.course) if never_rule else {}
    # when the rule was set for each holder: set after they got the seat, its window counts from then
    rule_since = engine.store.requests.policy_set_at(engine.course, "never_connected_hours") if never_rule else {}
    # sshd's log is read once a pass, from the earliest seat time of the holders it may be asked about (not
    # connected yet, and running or held back only for hours): read from the first holder's in seat-key order,
    # it lacked the login of a holder seated earlier, who was stopped as never connected
    read_from = min(
        (
            when
            for k, p in holders.items()
            if (when := since_of.get(k)) is not None
            and policies.get(p.key, {}).get("never_connected_hours")
            and not connected.get(p.key)
            and _may_run(states.get(p.key, RunState(True)))
        ),
        default=None,
    )
    sshd_log: list[list[str] | None] = []  # the pass's one read of sshd's log, once a holder needs it
    look = _Look(engine, {engine.login_of(p) for p in holders.values()})
    add = changes.steps.append
    for seat_key, p in sorted(holders.items()):
        login = engine.login_of(p)
        state = states.get(p.key, RunState(True))
        # lab sessions do not count against the hours: no stop for hours in (or just before) one, and a
        # seat stopped for hours runs through the session (its timeline keeps the stop for afterwards)
        rule = seat_hours.rule(hours.get(p.key), policies.get(p.key, {}), sessions, now)
        running = rule.runs(state)
        mine = sorted((r for r in pending if r.participant == p.key and r.seat == seat_key), key=lambda x: x.id)
        running = plan_holder_requests(
            changes,
            mine,
            running,
            rule.refusals(),
            run=partial(_run_steps, engine, changes, p.key, login),
            record=partial(_record, engine, course, login),
        )
        if running and rule.stop_reason is not None and not any(r.action in RUN_REQUESTS for r in mine):
            why = rule.stop_reason
            add(engine._step("seat.stop", seat_key, why, "record", participant=p.key, reason=why))
            running = False
        if running and not mine and not in_session and policies.get(p.key, {}).get("idle_minutes"):
            started = max(filter(None, [since_of.get(seat_key), state.since if state.running else None]), default=None)
            idle = _idle_step(engine, course, p.key, seat_key, login, policies[p.key], started, windows, ahead, look)
            if idle is not None:
                add(idle)
                running = idle.action != "seat.stop"
        # (while access is still closed the seat is locked on purpose: checked once the window opens)
        hours_never = policies.get(p.key, {}).get("never_connected_hours")
        held_since = since_of.get(seat_key)
        if running and not mine and hours_never and held_since is not None and not connected.get(p.key):
            last_start = state.since if state.running else None  # a start gives a fresh window
            found = _never_connected(engine, p, login, float(hours_never), (held_since, rule_since.get(p.key)),
                                     last_start, now, sshd_log, changes, (read_from or held_since) + ahead)  # fmt: skip
            if found is not None:
                add(found)
                running = found.action != "seat.stop"
        if running and (check := checks.check(seat_key, p.key)) is not None:  # ready before the session
            add(check)
        if not running:
            why = state.reason if state.reason and not state.running else "the seat is stopped"
            changes.steps[:] = [x for x in changes.steps if not (x.action == "account.unlock" and x.target == login)]
            acct = look.account(login)
            if acct is not None and not acct.locked:
                add(engine._step("account.lock", login, why, "revoke", participant=p.key, login=login))
            if acct is None:
                _lock_when_made(engine, changes, p.key, login, why)
            if acct is not None and acct.uid in look.procs().values():
                add(engine._step("processes.end", login, why, "revoke", participant=p.key, login=login))
    if (report := checks.report(holders)) is not None:  # after this pass's checks: the broken seats, to the webhook
        add(report)


def _may_run(state: RunState) -> bool:
    """Whether a seat in ``state`` may run in this pass: it runs, or is stopped for hours (it runs near a
    lab session); a seat its holder or the agent stopped for anything else stays stopped."""
    return state.running or seat_hours.stopped_for_hours(state.reason)


def do_request(engine: HostEngine, step: Step) -> str | None:
    """Carry out ``home.reset``, ``seat.stop`` and ``request.record`` (see the module docstring)."""
    d = step.data
    if step.action == "home.reset":
        return _reset_home(engine, str(d["login"]), str(d["skeleton"]), d.get("request"))
    if engine.runner.dry_run:
        return None
    if step.action == "seat.stop":
        engine.store.requests.agent_stop(engine.course, str(step.participant), str(d["reason"]))
        return None
    if step.action in session_checks.SESSION_STEPS:
        return session_checks.do(engine, step)
    if step.action in idle_rule.IDLE_STEPS:
        return idle_rule.do_idle(engine, step)
    ok, reason = _verdict(engine, d)
    engine.store.requests.finish_request(engine.course, int(d["id"]), ok=ok, reason=reason)
    if not ok:
        return f"request {d['id']} ({d['request']}) failed: {reason}"
    return None


def _verdict(engine: HostEngine, d: Any) -> tuple[bool, str]:
    if (outcome := refused_outcome(d)) is not None:
        return outcome
    login, action = str(d.get("login") or ""), str(d["request"])
    m = engine.machine
    acct = m.account(login)
    if acct is None:
        return False, f"no account {login} on {engine.host or 'this host'} yet"
    if action == "stop":
        if not acct.locked:
            return False, "the account could not be locked"
        if m.processes({acct.uid}):
            return False, "processes are still running"
        return True, "stopped: logins refused, processes ended"
    if action == "key":
        text = (engine.keys_dir / login).read_text() if (engine.keys_dir / login).exists() else ""
        blob = str(d.get("key") or "").split()[1:2]
        if blob and blob[0] in text:
            return True, "your new key is installed (the old one is removed)"
        return False, "the key could not be installed"
    if acct.locked:
        closed = d.get("closed")
        return False, f"the seat cannot run now: {closed}" if closed else "the account could not be unlocked"
    said = {"start": "started: you can log in", "restart": "restarted: processes ended, you can log in"}
    return True, said.get(action, "reset: home restored from the course skeleton, you can log in")


def _idle_step(
    engine: HostEngine,
    course: CourseState,
    who: str,
    seat: str,
    login: str,
    policy: dict[str, Any],
    started: datetime | None,
    windows: idle_rule.Windows,
    ahead: timedelta,
    look: _Look,
) -> Step | None:
    """Idle stop (:func:`gpuseat.engines.idle.idle_step`) with this host's signal: no SSH activity.
    Counted on this host's clock, as the monitor's readings and the terminals' input times are."""
    now = course.now or datetime.now(UTC)
    return idle_rule.idle_step(engine, who=who, seat=seat, policy=policy, started=started,
                               last_active=look.last_ssh(login, now), signal="no SSH activity", now=now,
                               ahead=ahead, windows=windows)  # fmt: skip


def _never_connected(
    engine: HostEngine,
    p: Any,
    login: str,
    hours: float,
    since: tuple[datetime, datetime | None],
    started: datetime | None,
    now: datetime,
    log: list[list[str] | None],
    changes: Changes,
    read_from: datetime,
) -> Step | None:
    """A seat its holder never logged in to (with their own key: gpuseat's probe does not count) within
    ``hours`` of getting it or of the rule being set for them, the later (``since``), or of their last start
    carried out (``started``) is stopped; a login found in sshd's log is recorded once (``seat.connected``).
    Without a readable sshd log nothing is stopped (the plan says so). ``since``, ``started`` and ``now`` are
    the store's times. ``log`` holds the pass's one read of the log (None: unreadable), shared by every
    holder, made by the first that needs it (an empty log is not read again for each one): the journal is
    asked from ``read_from`` (on this host's clock), the earliest seat time of the holders checked, so it
    holds each one's logins."""
    if not log:
        log.append(_sshd_lines(engine, read_from))
    lines = log[0]
    if lines is None:
        note = (
            f"never_connected_hours: sshd's log ({engine.settings.sshd_log}) cannot be read: no seat is stopped for it"
        )
        if note not in changes.notes:
            changes.notes.append(note)
        return None
    mine = _fingerprint(p.ssh_key) if p.ssh_key else None
    wanted = f"Accepted publickey for {login} "
    if mine and any(wanted in x and mine in x for x in lines):
        return idle_rule.connected_step(engine, who=p.key, seat=p.seat or login, why=f"{p.key} logged in as {login}",
                                        login=login)  # fmt: skip
    return idle_rule.never_connected_step(engine, who=p.key, seat=p.seat or login, hours=hours, since=since[0],
                                          started=started, now=now, rule_since=since[1])  # fmt: skip


def _sshd_lines(engine: HostEngine, since: datetime) -> list[str] | None:
    """sshd's log lines since ``since``: the journal (``journalctl``), or the tail of a log file (None:
    it cannot be read)."""
    where = engine.settings.sshd_log
    if where == "journal":
        done = engine.runner.try_run(
            [
                "journalctl",
                "-q",
                "-o",
                "cat",
                "_COMM=sshd",
                "_COMM=sshd-session",
                "--since",
                since.strftime("%Y-%m-%d %H:%M:%S UTC"),
            ],
            mutates=False,
            where="host",
        )
        return done.stdout.splitlines() if done.returncode == 0 else None
    path = Path(where)
    if not path.is_file():
        return None
    with path.open("rb") as fh:
        fh.seek(max(0, path.stat().st_size - 8_000_000))
        return fh.read().decode(errors="replace").splitlines()


def _fingerprint(key_line: str) -> str | None:
    """``SHA256:…`` of a public key line, as sshd logs it."""
    import base64
    import hashlib

    try:
        blob = base64.b64decode(key_line.split()[1], validate=True)
    except (IndexError, ValueError):
        return None
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


class _Look:
    """The holders' accounts, processes and terminals on this host, each read once a pass when first asked
    (one read per holder went through ``/etc/shadow``, every process and every terminal of the machine
    once per holder: a thousand times a pass for a 1,000-seat server with an idle policy)."""

    def __init__(self, engine: HostEngine, logins: set[str]) -> None:
        self._host, self._logins = engine, logins
        self._accounts: dict[str, Account] | None = None
        self._procs: dict[int, int] | None = None
        self._notty: set[int] | None = None
        self._typed: dict[int, datetime] | None = None

    def account(self, login: str) -> Account | None:
        """``login``'s account (one made by hand too), as :meth:`Machine.account` reads it."""
        if self._accounts is None:
            self._accounts = {a.login: a for a in self._host.machine.course_accounts() if a.login in self._logins}
        found = self._accounts.get(login)
        return found if found is not None else self._host.machine.account(login)

    def procs(self) -> dict[int, int]:
        """pid → uid of the holders' live processes."""
        if self._procs is None:
            uids = set()
            for login in self._logins:
                with contextlib.suppress(KeyError):
                    uids.add(pwd.getpwnam(login).pw_uid)
            self._procs = self._host.machine.processes(uids)
        return self._procs

    def last_ssh(self, login: str, now: datetime) -> datetime | None:
        """When ``login`` last used an SSH session: now while a command runs over SSH without a terminal,
        else the last input on one of their terminals (the atime of ``/dev/pts/N``, as ``w`` reads it)."""
        try:
            uid = pwd.getpwnam(login).pw_uid
        except KeyError:
            return None
        if self._notty is None or self._typed is None:
            self._notty, self._typed = set(), {}
            for pid, owner in self.procs().items():
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if cmd.startswith(b"sshd:") and b"notty" in cmd:
                    self._notty.add(owner)
            for tty in Path("/dev/pts").glob("[0-9]*"):
                try:
                    st = tty.stat()
                except OSError:
                    continue
                at = datetime.fromtimestamp(max(st.st_atime, st.st_mtime), UTC)
                if st.st_uid not in self._typed or at > self._typed[st.st_uid]:
                    self._typed[st.st_uid] = at
        return now if uid in self._notty else self._typed.get(uid)


def _reset_home(engine: HostEngine, login: str, skeleton: str, request: int | None) -> str | None:
    """Restore ``login``'s home from ``skeleton``, once per ``request``: an agent killed after the reset, before the
    request was marked done, left it pending, and the next pass wiped what the participant wrote since."""
    done = engine.reset_mark(request) if request is not None else None
    if done is not None and done.exists():
        return f"already restored for request {request}"
    try:
        entry = pwd.getpwnam(login)
    except KeyError:
        raise InputError(f"no account {login}", where="home.reset") from None
    home = Path(entry.pw_dir)
    if not home.is_absolute() or len(home.parts) < 3 or not home.is_dir() or home.stat().st_uid != entry.pw_uid:
        raise InputError(f"{login}'s home {home} is not theirs to reset", where="home.reset")
    if not os.path.isdir(skeleton):
        raise InputError(f"the skeleton {skeleton} is not a folder", where="host setting skeleton")
    run = engine.runner.run
    run(["find", str(home), "-mindepth", "1", "-delete"], where="host")
    run(["cp", "-a", f"{skeleton.rstrip('/')}/.", str(home)], where="host")
    run(["chown", "-R", f"{entry.pw_uid}:{entry.pw_gid}", str(home)], where="host")
    if done is not None and not engine.runner.dry_run:
        done.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        done.touch()
    return f"{home} restored from {skeleton}"


def _lock_when_made(engine: HostEngine, changes: Changes, who: str, login: str, why: str) -> None:
    """A stopped holder whose account this pass makes (a move onto this server, stopped by their own stop
    or for seat hours elsewhere): ``useradd`` makes it unlocked, and the key written next would let them in
    until the next pass. The lock runs right after the account is made, before its key is written."""
    at = next((i for i, x in enumerate(changes.steps) if x.action == "account.add" and x.target == login), None)
    if at is not None and not any(x.action == "account.lock" and x.target == login for x in changes.steps):
        made = changes.steps[at]
        lock = engine._step("account.lock", login, why, "grant", participant=who, seats=made.seats, login=login)
        changes.steps.insert(at + 1, lock)


def _run_steps(engine: HostEngine, changes: Changes, who: str, login: str, r: RequestView) -> None:
    """A restart or reset ends the participant's processes; a reset also restores their home from the skeleton."""
    if r.action in ("restart", "reset"):
        changes.steps.append(engine._step("processes.end", login, f"{who} asked for a {r.action}", "revoke",
                                          participant=who, login=login))  # fmt: skip
    if r.action == "reset":
        skeleton = engine.settings.skeleton
        changes.steps.append(engine._step("home.reset", login, f"{who} asked for a reset", "grant",
                                          participant=who, login=login, skeleton=skeleton, request=r.id))  # fmt: skip


def _record(engine: HostEngine, course: CourseState, login: str | None, r: RequestView, refused: str | None) -> Step:
    return engine._request_step(r, refused, login=login, key=r.key, closed=course.closed)
