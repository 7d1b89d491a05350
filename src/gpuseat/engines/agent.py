"""``gpuseat agent``: keep this machine true to the course store, within seconds.

A level-triggered control loop, as Kubernetes' kubelet and mig-parted's apply are: every pass plans
from the store *and* the machine as they are now, so a pass missed, a crash mid-apply or a change
made by hand are all corrected by the next one. The agent wakes when

- the store changed: the newest ``events`` id is past its cursor (PostgreSQL wakes it at once with
  ``LISTEN``/``NOTIFY``; SQLite is polled every ``poll_s``: one cheap read of the head's and the cursor's rows);
- the store was replaced (``gpuseat db restore``): the events row at its cursor is gone or is another
  one (the agent keeps its time, course, actor and action; read with the head, by primary key), even
  where writes since took the head past the cursor again: every course is planned at once;
- an events id below its cursor that was missing appeared (PostgreSQL takes ids at INSERT, not at commit: a
  transaction that took id 100 can commit after the one that took 101, which the agent followed already): its
  course is planned; such an id is looked for with the head, by primary key, for ``hole_s`` (a transaction
  rolled back leaves it missing for good); SQLite takes ids in commit order and has none;
- a schedule boundary passed (an access window or session opening or closing);
- a resync is due (every ``resync_s``): what that pass changes was changed by hand (drift) and is
  logged as ``drift.reverted``;
- a failed step's retry is due (back-off 2 s, doubling to 60 s).

One agent per engine and host applies at a time: it holds a lease row in the store (renewed every
third of ``lease_s``, between the steps of a pass too); a second agent waits as standby and takes over
when the lease expires (by the store's clock, and unrenewed for a lease period by its own: see
:meth:`Agent._take_lease`) or is given back. Before each step the holder checks that its lease has not run out
by its own clock (no read of the store: a lease period from its last renewal, which no standby cuts short); a
pass stopped because it had is finished by the next tick, once the lease is renewed. ``gpuseat apply`` holds the
same leases for its pass, and leaves an engine and host whose lease a live agent holds to it (:func:`leased_pass`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Unpack

from gpuseat.core.seating import AGENT_ACTOR
from gpuseat.engines.apply import Pass, Planned, PlanOptions, apply_all, one_pass, per_host, plan_all, targets
from gpuseat.engines.runner import Runner
from gpuseat.errors import GpuseatError, NotFound, StoreError

if TYPE_CHECKING:
    from gpuseat.store import CourseStore

#: how often a pass looks for a release, move or deletion written since it began (one indexed read)
STALE_LOOK_S = 1.0
MAX_LEASE_S = 600.0  # the longest lease an agent holds (``gpuseat agent --lease``)
_HOLE_WINDOW = 1000  # missing events ids looked for at most this far below the head
CHANNEL = "gpuseat_events"  # the NOTIFY channel, per schema since migration 0016 (store.agents.listener)


def _gone(holder: str) -> bool:
    """Whether ``holder`` (``host:pid:token``) was an agent of this machine whose process no longer runs: its
    lease is free whatever any clock says. False when unsure (another machine, or the pid is in use)."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit() or int(pid) <= 1:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it runs, as another user
        return False
    return False


@dataclass
class AgentOptions:
    """What an agent serves and how often it looks."""

    engine: str | None = None
    host: str | None = None
    course: str | None = None
    poll_s: float = 1.0
    resync_s: float = 300.0
    lease_s: float = 15.0
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: no ``host``: the one host its per-host engine's seats are on, found in the store (:meth:`Agent._find_host`)
    seat_host: str | None = None

    @property
    def lease_name(self) -> str:
        """One lease per engine and host (``agent:host:gpu1``), whatever ``course``: see :func:`lease_names`. No
        ``--host``: the host its seats are on, as ``gpuseat apply`` names it (this machine's name until found)."""
        return lease_names(self.engine, self.host or self.seat_host)[0]


def lease_names(engine: str | None, host: str | None) -> tuple[str, ...]:
    """The agent leases that cover ``engine`` on ``host`` (not named: this machine, an agent's default): its
    agent's (``agent:host:gpu1``) and, for one engine, an agent's for every engine there (``agent:all:gpu1``).
    An agent's ``--course`` is not in the name: one agent per engine and host applies, whatever its courses."""
    where = host or socket.gethostname()
    own = f"agent:{engine or 'all'}:{where}"
    return (own,) if engine is None else (own, f"agent:all:{where}")


def course_of(holder: str) -> str | None:
    """The course an agent's ``holder`` applies alone (``gpu1:12:ab12cd (course lab)``); None: every course."""
    head, sep, tail = holder.rpartition(" (course ")
    return tail[:-1] if sep and head and tail.endswith(")") else None


def _new_holder(course: str | None = None, kind: str = "") -> str:
    """``host:pid:token``, with `` (course KEY)`` for an agent of one course (:func:`course_of`)."""
    scope = f" (course {course})" if course else ""
    return f"{socket.gethostname()}:{os.getpid()}:{kind}{secrets.token_hex(3)}{scope}"


@dataclass
class Agent:
    """The loop (see the module docstring); :meth:`tick` is one iteration, :meth:`run` loops."""

    store: CourseStore
    options: AgentOptions
    runner: Runner = field(default_factory=Runner)
    say: Callable[[str], None] = print
    holder: str = ""  # host:pid:token and its course, if one (:func:`_new_holder`)
    cursor: int | None = None
    role: str = "starting"
    passes: int = 0
    _renew_at: float = 0.0
    _held_until: float = 0.0  # this agent's clock: no standby takes the lease before (a lease period from a renewal)
    _resync_at: float = 0.0
    _retry_at: float | None = None
    _backoff: float = 2.0
    _next_change: datetime | None = None  # on the store's clock, as the pass worked it out
    _wakes: dict[str, datetime] = field(default_factory=dict)  # each course's, as its last pass worked it out
    _change_at: float = float("inf")  # the same on this agent's clock (which no step of the machine's moves)
    _skew: timedelta = timedelta(0)  # the store's clock less this machine's, read at the last pass
    _leader: bool = False
    _waker: Any = None
    _saved: int | None = None
    _mark: str | None = None  # what marks the events row at the cursor (store.agents.events_head_marked)
    hole_s: float = 30.0  # how long an events id missing below the cursor is looked for (PostgreSQL)
    _holes: dict[int, float] = field(default_factory=dict)  # such ids → when first found missing (monotonic)
    _cut: bool = False  # the last pass stopped because the lease had run out
    _stale: bool = False  # the last pass stopped because a row that takes access away came under it
    _report_at: float = 0.0  # when this agent next says in the store that it runs
    _unreachable: str | None = None  # why the store failed the last tick (said once, until it answers again)
    clock: Callable[[], float] = time.monotonic  # this agent's own clock, which no NTP step moves
    # a standby: another's lease row (holder, expiry), since when it is so, when it runs out (this agent's clock)
    # and its holder's lease period
    _seen: tuple[tuple[str, float], float, float, float] | None = None
    _told: str | None = None  # the holder whose other scope this standby said it leaves unapplied
    _several: tuple[str, ...] = ()  # no --host, and the seats on several hosts: said once

    def __post_init__(self) -> None:
        self.holder = self.holder or _new_holder(self.options.course)

    def _left_out(self, holder: str) -> None:
        """Said once per holder, by a standby: the holder applies one course only, so what this agent serves besides
        (another course, or every other course) is not applied on this host while it runs. One agent per engine
        and host applies (two agents of different courses would write the same host's shared files at once)."""
        theirs, mine = course_of(holder), self.options.course
        if theirs is None or theirs == mine or holder == self._told:
            return
        self._told = holder
        o = self.options
        flags = " ".join([*(["--engine", o.engine] if o.engine else []), *(["--host", o.host] if o.host else [])])
        left, fix = (
            (f"course {mine} is", f"stop both agents and run one for every course: gpuseat agent {flags}".rstrip())
            if mine
            else (f"every course but {theirs} is", "stop that agent (this one applies every course)")
        )
        self.say(
            f"agent {self.holder}: standby for {o.lease_name}, whose holder {holder} applies course {theirs} only: "
            f"{left} not applied on this host while it runs (one agent per engine and host applies); to apply it, {fix}"
        )

    def _find_host(self) -> None:
        """An agent started without ``--host`` of a per-host engine (or of every engine) applies the one host its
        seats are on (the host engine's default), which is often not this machine's name: it takes that host's
        lease, as ``gpuseat apply`` and an agent given ``--host`` do (:func:`apply_pairs`), and acts for that host
        from then on (seats added later on a second host are left to that host's agent). Looked for at each lease
        renewal until found; seats on several hosts already: this machine's name, the engine's own rule, said once."""
        o = self.options
        if o.host is not None or o.seat_host is not None or (o.engine is not None and not per_host(o.engine)):
            return
        hosts = sorted({h for e, h in apply_pairs(self.store, course=o.course, engine=o.engine, host=None)
                        if h and per_host(e)})  # fmt: skip
        if len(hosts) > 1 and tuple(hosts) != self._several:
            self._several = tuple(hosts)
            self.say(
                f"agent {self.holder}: the seats are on several hosts ({', '.join(hosts)}) and no --host says which "
                f"one this machine is: lease {o.lease_name} (this machine's name), which `gpuseat apply` for those "
                "hosts does not wait for; to fix: run the agent with --host NAME"
            )
        if len(hosts) != 1:
            return
        old = o.lease_name
        o.seat_host = hosts[0]
        if o.lease_name == old:
            return
        if self._leader:  # led under this machine's name: given back, and the status said under the new one
            self.store.agents.drop_lease(old, self.holder)
        self.store.agents.forget_agent(old, self.holder)
        self._leader, self._seen, self._told, self.role, self.cursor = False, None, None, "starting", None
        self.say(f"agent {self.holder}: its seats are on host {o.seat_host} (no --host): lease {o.lease_name}")

    def _also(self) -> str | None:
        """The second lease of an agent of every engine that found its seats' host (no ``--host``): the engines that
        are not per host it applies for this machine, which an apply without ``--host`` leases as
        ``agent:all:THIS-MACHINE`` (:func:`_pair`)."""
        o = self.options
        mine = lease_names(None, None)[0]
        return mine if o.engine is None and o.host is None and o.seat_host and mine != o.lease_name else None

    def _take_also(self) -> bool:
        """Take or renew :meth:`_also` (no takeover: it is an apply's while that runs, and runs out after a crash)."""
        also = self._also()
        return also is None or self.store.agents.take_lease(also, self.holder, self.options.lease_s)

    def _saved_cursor(self) -> int | None:
        """The events id the last leader of this lease had applied up to (kept in the store)."""
        for row in self.store.agents.agent_statuses():
            if row["name"] == self.options.lease_name and row["last_apply_at"]:
                return int(row["cursor"])
        return None

    def _take_lease(self, now: float) -> bool:
        """Take or renew the lease. Another holder's row is taken over once it has run out by the database's clock
        and this agent has seen it unrenewed for a lease period of its own clock (at a first look: for the time
        the row had left, and at least a lease period, unless its holder was this machine's and is gone), or
        unrenewed for three of its holder's lease periods (what the row had left when its holder was first seen,
        or the longest wait between its renewals on this agent's clock). The database's
        clock stepped ahead (an NTP correction, SQLite's machine) shows a live leader's lease as run out, which
        its standby took over at once; stepped back, a dead one's as running on for the step (an hour with no
        leader)."""
        o, agents = self.options, self.store.agents
        row = None if self._leader else agents.lease(o.lease_name)
        if row is None or row[0] == self.holder:
            self._seen = None
            return agents.take_lease(o.lease_name, self.holder, o.lease_s)
        seen, left, last = (row[0], row[1]), row[2], self._seen
        if last is None or last[0] != seen:  # a first look, or renewed (or taken by another) since
            if last is None or last[0][0] != seen[0]:  # a holder first seen: its lease period is what the row has left
                self._left_out(seen[0])
                period = max(o.lease_s, min(max(left, 0.0), MAX_LEASE_S))
            else:  # renewed: at least as long as the longest wait between its renewals (this agent's clock)
                period = max(last[3], now - last[1])
            # a first look waits at least a lease period too (the database's clock stepped ahead shows a live
            # leader's row as run out, and an agent started just then took it at once: two leaders), unless the
            # holder was an agent of this machine whose process is gone (a crash, kill -9): then the row is taken
            # as soon as it has run out by the database's clock (a holder of another machine of the same name
            # cannot be told apart, so its row must still run out)
            left_s = min(max(left, 0.0), 3 * o.lease_s)
            wait = left_s if _gone(seen[0]) else max(o.lease_s, left_s)
            due = now + (wait if last is None else o.lease_s)
            self._seen = last = (seen, now, due, period)
        _seen, since, due, period = last
        if (left > 0 or now < due) and now - since < 3 * period:
            return False
        taken = agents.take_lease(o.lease_name, self.holder, o.lease_s, unchanged=seen)
        self._seen = None if taken else self._seen
        return taken

    def _report(self, now: float) -> None:
        """Say in the store that this agent runs, as what (every third of a lease period, and at a change of
        role): ``gpuseat agent status`` lists each agent, standbys too, while its report is under three
        lease periods old."""
        if now >= self._report_at:
            o = self.options
            self.store.agents.report_agent(o.lease_name, self.holder, self.role, 3 * o.lease_s)
            self._report_at = now + o.lease_s / 3

    def tick(self) -> Pass | None:
        """One iteration: keep the lease; pass when something is due. Returns the pass, if any."""
        now = self.clock()
        head: int | None = None
        marks: dict[int, str] = {}
        if self._holes:  # given up after hole_s: a transaction that rolled back (or a course deleted since)
            self._holes = {i: t for i, t in self._holes.items() if now - t < self.hole_s}
        if self._leader:
            head, marks = self.store.agents.events_head_marked(self.cursor, self._holes)
        if head is not None and self.cursor is not None and marks.get(self.cursor) != self._mark:
            # the events row at the cursor is gone (the ids went back) or another one (writes since took the ids
            # past it again); events rows are never changed or deleted: the store was replaced under this agent
            # (`gpuseat db restore`). What it holds now is planned whole at once (the events past the
            # old cursor miss the restored courses), under the lease taken again first: the restored lease
            # row is the backup's (another holder may hold it)
            now_at = "is another one now" if self.cursor in marks else "is gone"
            self.say(
                f"agent {self.holder}: the store was replaced (events row {self.cursor}, which this agent had "
                f"applied up to, {now_at}; its newest is {head}): planning every course"
            )
            self.cursor, self._mark, self._saved, self._renew_at = None, None, None, 0.0
            self._holes.clear()
        if now >= self._renew_at or not self._leader:
            self._find_host()
            was = self._leader
            self._leader = self._take_lease(now) and self._take_also()
            self._renew_at = now + self.options.lease_s / 3
            self._held_until = now + self.options.lease_s if self._leader else 0.0
            if self._leader:  # the store's clock read again with each renewal: stepped (NTP on the database's
                # machine), an access window's change it moved is passed at once, not at the next resync
                self._skew = self.store.requests.now() - datetime.now(UTC)
            if self._leader != was or self.role == "starting":
                self.role = "leader" if self._leader else "standby"
                self.say(f"agent {self.holder}: {self.role} for {self.options.lease_name}")
                if self._leader:  # a new leader plans everything once, from where the last leader stopped
                    self.cursor = None
                    self._holes.clear()
                    self._saved = self._saved_cursor()  # read before this agent's own status is written
                # one row per lease: a standby writes it only while no agent has (it would hide the leader in
                # `gpuseat agent status`); the row keeps the last leader's cursor (None): a standby, or a new
                # leader before its first pass, has applied nothing
                name = self.options.lease_name
                if self._leader or all(r["name"] != name for r in self.store.agents.agent_statuses()):
                    self.store.agents.save_agent_status(name, holder=self.holder, role=self.role, cursor=self.cursor)
                self._report_at = 0.0
        self._report(now)
        if not self._leader:
            return None
        if head is None or self.cursor is None:  # a new leader, or the lease just taken again: read it now
            head, marks = self.store.agents.events_head_marked()
        wall = datetime.now(UTC) + self._skew  # the store's time: what the pass's next change is on
        filled = self._holes.keys() & marks.keys()  # ids missing below the cursor that are there now
        changed = self.cursor is None or head > self.cursor or bool(filled)
        if self.cursor is None and self._saved is not None and head == self._saved:
            changed = False  # nothing changed in the store since the last leader's pass: a resync
            self._resync_at = 0.0
        resync = now >= self._resync_at
        # passed by the store's time as this machine's clock and the last skew make it, or by this agent's own
        # clock: a machine clock stepped back an hour after a pass put an access window's change off until the
        # resync (5 minutes) or the next change in the store
        boundary = self._next_change is not None and (wall >= self._next_change or now >= self._change_at)
        retry = self._retry_at is not None and now >= self._retry_at
        if not (changed or resync or boundary or retry):
            return None
        drift = resync and not changed and not boundary and not retry
        only: set[str] | None = None
        touched = self._follow(head, filled) if changed or self.cursor is None else set()
        if changed and self.cursor is not None and not (resync or boundary or retry):
            # a store change: re-plan only the courses it touched (this and other agents' own writes do not count)
            only = touched
            if self.options.course is not None:
                only &= {self.options.course}
            if not only:
                self.cursor, self._mark = head, marks.get(head)
                return None
        result = self._pass(drift=drift, courses=only)
        self.cursor, self._mark = head, marks.get(head)
        if resync:
            self._resync_at = now + self.options.resync_s
        # a pass of some courses (a change in them) keeps the others' next changes due, and its own replace theirs
        wakes = {p.course: p.state.wake_at for p in result.planned if p.state is not None and p.state.wake_at}
        self._wakes = {k: t for k, t in self._wakes.items() if only is not None and k not in only} | wakes
        nxt = self._next_change = min(self._wakes.values(), default=None)
        self._change_at = float("inf")
        if nxt is not None:  # the skew read by this pass
            self._change_at = self.clock() + (nxt - datetime.now(UTC) - self._skew).total_seconds()
        failed = result.failed
        if failed:
            self._retry_at = now + self._backoff
            self._backoff = min(self._backoff * 2, 60.0)
        else:
            self._retry_at, self._backoff = None, 2.0
        if self._stale:  # a release or move came under this pass: planned again at once, revokes first
            self._retry_at = now
        if self._cut:  # the lease ran out under this pass (a clock step, a stall): renew it, then finish at once
            self._renew_at, self._retry_at = 0.0, now
        self.store.agents.save_agent_status(
            self.options.lease_name,
            holder=self.holder,
            role=self.role,
            cursor=head,
            applied=True,
            resynced=resync,
            pending=max(0, result.pending),
            failed=failed[:50],
        )
        return result

    def _follow(self, head: int, filled: set[int]) -> set[str]:
        """The courses others changed past the cursor or in the ``filled`` ids (read before the pass that plans
        them); where ids do not follow commits (PostgreSQL), the ids up to ``head`` not there yet are kept as
        holes, looked for each tick (:meth:`tick`). SQLite, a new leader: no read."""
        agents = self.store.agents
        follows = agents.ids_follow_commits
        if self.cursor is None and follows:
            return set()
        low = max(0, head - _HOLE_WINDOW) if self.cursor is None else self.cursor
        rows = agents.events_after(low, ids=filled)
        for i in filled:
            del self._holes[i]
        if not follows:
            seen, now = {r[0] for r in rows}, self.clock()
            for i in range(max(low, head - _HOLE_WINDOW) + 1, head + 1):
                if i not in seen:
                    self._holes.setdefault(i, now)
        return {course for _i, course, actor in rows if course and actor != AGENT_ACTOR}

    def _pass(self, *, drift: bool, courses: set[str] | None = None) -> Pass:
        o = self.options
        self.passes += 1
        self._cut = self._stale = False
        # a release, a move, a deletion … written while this pass runs: the rest of its plan may grant what that row
        # took away; looked for once a STALE_LOOK_S between steps, and the pass stops for a new one (tick)
        start, look_at = self.store.agents.events_head(), self.clock() + STALE_LOOK_S
        scope = courses if courses is not None else None if o.course is None else {o.course}

        def guard() -> bool:  # asked before each step: a pass longer than the lease renews it as it goes
            now = self.clock()
            # held a lease period from its last renewal by this agent's clock: a standby takes it over only once
            # it has seen the row unrenewed that long (:meth:`_take_lease`), and the database's clock may have
            # stepped; no read of the store per step (a 1,000-seat pass spent 9 of its 10 parts on them)
            if now >= self._renew_at:
                held = self.store.agents.take_lease(o.lease_name, self.holder, o.lease_s) and self._take_also()
                self._renew_at = now + o.lease_s / 3
                self._held_until = now + o.lease_s if held else 0.0
            else:
                held = now < self._held_until
            self._report(now)  # a long pass keeps the leader listed
            self._cut = self._cut or not held
            nonlocal look_at
            if held and now >= look_at:
                look_at = now + STALE_LOOK_S
                found = self.store.agents.revoking_after(start, scope, exclude_actor=AGENT_ACTOR)
                if found is not None:
                    self._stale = True
                    self.say(
                        f"agent {self.holder}: events row {found} may take away what this pass grants: planning again"
                    )
                    return False
            return held

        try:
            self._skew = self.store.requests.now() - datetime.now(UTC)
            result = one_pass(
                self.store,
                course=o.course,
                engine=o.engine,
                host=o.host,
                seat_host=o.seat_host,
                runner=self.runner,
                overrides=o.overrides,
                guard=guard,
                drift=drift,
                actor=AGENT_ACTOR,
                courses=courses,
            )
        except StoreError:
            raise  # the store is locked or failing: the run loop says so once and redoes the pass once it answers
        except GpuseatError as exc:
            self.say(f"agent: the pass failed: {exc.message}")
            result = Pass()
            result.planned = []
            self._retry_at = self.clock() + self._backoff
            return result
        for r in result.reports:
            for out in r.outcomes:
                mark = {"done": "done", "failed": "FAILED", "skipped": "skipped"}[out.state]
                tail = f": {out.message}" if out.message else ""
                self.say(f"{r.course} {r.engine}: {mark} {out.step.sign} {out.step.action} {out.step.target}{tail}")
        for p in result.planned:
            if p.error:
                self.say(f"{p.course} {p.engine_name}: cannot plan: {p.error}")
        for key in result.deleted:
            self.say(f"{key}: deleted (no engine holds anything for it now)")
        return result

    def wait(self, seconds: float, stop: threading.Event) -> None:
        """Sleep until ``seconds`` pass, ``stop`` is set, or (PostgreSQL) a new events row is notified."""
        if self._waker is None:
            self._waker = _waker(self.store)
        if self._waker is not None and self._leader:
            try:
                for _n in self._waker.notifies(timeout=seconds, stop_after=1):
                    break
                return
            except Exception:  # the listening connection died: poll from now on, reconnect later
                self._waker = False
        stop.wait(seconds)

    def _pause(self) -> float:
        """Seconds to the next tick: ``poll_s`` for the leader; a standby (or an agent the store failed) looks
        at most every third of a lease period."""
        return self.options.poll_s if self._leader else min(self.options.poll_s * 2, self.options.lease_s / 3)

    def _store_failed(self, exc: GpuseatError) -> None:
        """One line when the store starts failing (a held write lock names its holder), not one per try; once it
        answers again the lease is taken again (a standby may have taken it meanwhile) and the pass is redone."""
        why = exc.what if exc.where is None else f"{exc.where}: {exc.what}"
        if self._unreachable is None or why.split(";")[0] != self._unreachable.split(";")[0]:  # not per holder list
            self.say(f"agent {self.holder}: the store failed ({why}); trying again every {self._pause():g} s, "
                     "the machine keeps what it has")  # fmt: skip
            self._unreachable = why

    def run(self, stop: threading.Event | None = None) -> None:
        """Loop until ``stop`` is set (SIGTERM/SIGINT set it from the CLI); give the lease back at the end."""
        halt = stop or threading.Event()
        try:
            while not halt.is_set():
                try:
                    self.tick()
                except GpuseatError as exc:  # the store is locked or unreachable for a while: say so once, keep going
                    self._leader = False
                    self._store_failed(exc)
                else:
                    if self._unreachable is not None:
                        self.say(f"agent {self.holder}: the store answers again")
                        self._unreachable = None
                self.wait(self._pause(), halt)
        finally:
            with contextlib.suppress(GpuseatError):
                if self._unreachable is None:  # else the lease runs out by itself: no exit waits on a held lock
                    if self._leader:
                        for name in filter(None, (self.options.lease_name, self._also())):
                            self.store.agents.drop_lease(name, self.holder)
                    self.store.agents.forget_agent(self.options.lease_name, self.holder)
            if self._waker:
                self._waker.close()


@dataclass(frozen=True)
class Held:
    """An engine and host whose agent lease a live agent holds: ``gpuseat apply`` leaves it to that agent."""

    engine: str
    host: str | None
    lease: str
    holder: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"engine": self.engine, "host": self.host, "lease": self.lease, "holder": self.holder}


@dataclass
class ApplyLease:
    """The agent leases a ``gpuseat apply`` pass holds (:func:`leased_pass`): taken where free, so that an agent
    starting meanwhile waits as standby, renewed between the steps as an agent's are, given back at the end.
    ``held``: the engines and hosts whose lease a live agent holds (not applied by this pass)."""

    store: CourseStore
    host: str | None = None  # ``--host``: what a plan of an engine that is not per host is for
    lease_s: float = 15.0
    holder: str = field(default_factory=lambda: _new_holder(kind="apply-"))
    clock: Callable[[], float] = time.monotonic
    taken: list[str] = field(default_factory=list)
    held: dict[tuple[str, str | None], Held] = field(default_factory=dict)
    _renew_at: float = 0.0
    _held_until: float = 0.0

    def take(self, pairs: Iterable[tuple[str, str | None]]) -> None:
        """Take the leases of each (engine, host), or note the live holder of one (:attr:`held`). A row that has
        run out is free, as is the row of a holder of this machine whose process is gone (``kill -9``)."""
        agents = self.store.agents
        for engine, host in sorted(set(pairs), key=lambda p: (p[0], p[1] or "")):
            for name in lease_names(engine, host):
                if name in self.taken:
                    continue
                row = agents.lease(name)
                gone = row is not None and _gone(row[0])
                live = row is not None and row[2] > 0 and not gone
                seen = (row[0], row[1]) if row is not None and gone else None
                if live or not agents.take_lease(name, self.holder, self.lease_s, unchanged=seen):
                    now = agents.lease(name) or row  # taken meanwhile: by whom
                    self.held[(engine, host)] = Held(engine, host, name, now[0] if now else "another agent")
                    break
                self.taken.append(name)
        self._renew_at, self._held_until = self.clock() + self.lease_s / 3, self.clock() + self.lease_s

    def leaves(self, planned: Planned) -> Held | None:
        """The live agent ``planned`` is left to, if any."""
        return self.held.get(_pair(planned.engine_name, planned.host, self.host))

    def guard(self) -> bool:
        """Asked before each step: the leases are still this pass's (renewed every third of a lease period, by
        this process's clock; no read of the store per step)."""
        now = self.clock()
        if now >= self._renew_at:
            held = all(self.store.agents.take_lease(n, self.holder, self.lease_s) for n in self.taken)
            self._renew_at, self._held_until = now + self.lease_s / 3, now + self.lease_s if held else 0.0
            return held
        return now < self._held_until

    def give_back(self) -> None:
        """Drop every lease taken (a standby agent takes it at its next look); a store failing now leaves them to
        run out by themselves."""
        with contextlib.suppress(GpuseatError):
            for name in self.taken:
                self.store.agents.drop_lease(name, self.holder)
        self.taken.clear()


def _pair(engine: str, host: str | None, flag: str | None) -> tuple[str, str | None]:
    """The (engine, host) whose agent applies ``engine``'s plan for ``host``: a per-host engine's seat host, else
    the host asked for (``--host``; none: this machine, as an agent's lease is named)."""
    return (engine, host) if per_host(engine) else (engine, flag)


def apply_pairs(
    store: CourseStore, *, course: str | None, engine: str | None, host: str | None
) -> set[tuple[str, str | None]]:
    """Each (engine, host) a ``gpuseat apply`` with these flags plans for: the seats' and holdings' hosts of a
    per-host engine (``--host``: that one), else the host asked for."""
    pairs: set[tuple[str, str | None]] = set()
    for key, name in targets(store, course=course, engine=engine, host=host):
        if host is not None:
            pairs.add(_pair(name, host, host))
            continue
        try:
            hosts: set[str | None] = {s.host for s in store.seats.seats(key) if s.engine == name and s.host}
        except NotFound:
            hosts = set()
        hosts |= {h["host"] for h in store.agents.holdings(key) if h["engine"] == name and h["host"]}
        pairs |= {_pair(name, h, None) for h in hosts or {None}}
    return pairs


def leased_pass(store: CourseStore, lease: ApplyLease, *, actor: str, **plan: Unpack[PlanOptions]) -> Pass:
    """``gpuseat apply``'s pass (not a dry run) under the agent leases of what it plans: taken before it plans
    (a plan made while an agent applied could be stale), each engine and host a live agent holds left to it
    (:attr:`ApplyLease.held`), the leases given back at the end, on an error or Ctrl-C too."""
    try:
        lease.take(apply_pairs(store, course=plan.get("course"), engine=plan.get("engine"), host=plan.get("host")))
        planned = [p for p in plan_all(store, **plan) if lease.leaves(p) is None]
        return apply_all(store, planned, guard=lease.guard, actor=actor, writes=not plan["runner"].dry_run)
    finally:
        lease.give_back()


def _waker(store: CourseStore) -> Any:
    """A LISTENing connection on PostgreSQL (None elsewhere: the agent polls)."""
    return store.agents.listener(CHANNEL)


def unit_file(
    *, gpuseat: str, engine: str | None, host: str | None, env_file: str, options: tuple[str, ...] = ()
) -> str:
    """The systemd unit for ``gpuseat agent`` on this machine (root: it manages accounts and devices);
    ``options`` are more of the agent's flags (``--course``, ``--poll`` …), already checked."""
    args = [gpuseat, "agent"]
    if engine:
        args += ["--engine", engine]
    if host:
        args += ["--host", host]
    args += options
    return (
        "[Unit]\n"
        "Description=gpuseat agent: keeps this machine's GPU seats true to the course store\n"
        "Documentation=https://github.com/gpuseat/gpuseat/blob/main/docs/delivery.md\n"
        "Wants=network-online.target\n"
        "After=network-online.target ssh.service\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"EnvironmentFile=-{env_file}\n"
        f"ExecStart={' '.join(args)}\n"
        "Restart=always\n"
        "RestartSec=2\n"
        "TimeoutStopSec=30\n"
        "KillSignal=SIGTERM\n"
        "# it creates accounts, writes keys and sets device ACLs: no ProtectSystem/PrivateDevices here\n"
        "NoNewPrivileges=yes\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )
