"""Seats and assignments in the store: add, state machine, assign, move, release, history."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from gpuseat.core.seating import ASSIGNABLE_STATES, EngineName, SeatState
from gpuseat.db.models import Assignment, CourseRecord, Event, Participant, Seat
from gpuseat.errors import InputError, NoFreeSeat, SeatTaken, did_you_mean
from gpuseat.safe_text import clean
from gpuseat.store.base import Concern
from gpuseat.store.rows import (
    DEFAULT_ACTOR,
    _assignment_view,
    _clock,
    _course,
    _group_names,
    _holder,
    _log,
    _misfit,
    _needs,
    _open,
    _open_seat,
    _participant,
    _pref,
    _seat,
    _seat_view,
)
from gpuseat.store.views import AssignmentView, AssignReport, SeatView, _utc

if TYPE_CHECKING:
    from gpuseat.core.needs import SeatNeed
    from gpuseat.core.readiness import Access
    from gpuseat.store.evacuate import HostMoveReport
    from gpuseat.store.specs import SeatSpec


class Seats(Concern):
    """``store.seats``: seats and assignments (add, state machine, assign, move, release, history)."""

    def __call__(self, course: str | None = None) -> list[SeatView]:
        """The old facade's ``store.seats(…)`` (deprecated): warns once, then :meth:`seats`."""
        warnings.warn("store.seats(…) is deprecated: use store.seats.seats(…)", DeprecationWarning, stacklevel=2)
        return self.seats(course)

    def add_seats(
        self, course: str | None, specs: Iterable[SeatSpec | dict[str, Any]], *, actor: str = DEFAULT_ACTOR
    ) -> list[SeatView]:
        """Add seats in one transaction; a key or device used twice (here or already stored) is refused."""
        from gpuseat.files import validate
        from gpuseat.store.specs import SeatSpec  # Pydantic: only for writing seats

        checked = [
            spec if isinstance(spec, SeatSpec) else validate(SeatSpec, spec, where=f"seat {i + 1}")
            for i, spec in enumerate(specs)
        ]
        now = datetime.now(UTC)
        with self._database.write() as s:
            crow = _course(s, course)
            # PostgreSQL: the groups as a course update (FOR UPDATE) leaves them (read before, a seat could be
            # reserved for a group the update had just taken out, which its check of the seats did not see)
            s.refresh(crow, with_for_update={"read": True})
            groups = _group_names(crow)
            keys = set(s.scalars(select(Seat.key).where(Seat.course_id == crow.id)))
            devices = set(s.scalars(select(Seat.device_uuid).where(Seat.course_id == crow.id)))
            # a whole GPU without a UUID yet is its host and PCI address (an inventory added twice made two
            # seats of each GPU, and two participants got the same one)
            gpus = {(h, r) for h, r in s.execute(select(Seat.host, Seat.engine_ref).where(Seat.course_id == crow.id))}
            for i, spec in enumerate(checked):
                where = f"seat {i + 1} ({spec.key})"
                if (spec.engine_ref or "").startswith("pci="):
                    if (spec.host, spec.engine_ref) in gpus:
                        raise InputError(
                            f"the GPU at {spec.engine_ref} on {spec.host} already backs another seat",
                            where=where,
                            fix="one seat per GPU: was this server added before? (gpuseat seats status lists them)",
                        )
                    gpus.add((spec.host, spec.engine_ref))
                if spec.key in keys:
                    raise InputError(
                        f"seat key {spec.key!r} is used twice in course {crow.key!r}",
                        where=where,
                        fix="give each seat its own key (or release and re-add the existing one)",
                    )
                if spec.device_uuid is not None and spec.device_uuid in devices:
                    raise InputError(
                        f"device {spec.device_uuid} already backs another seat",
                        where=where,
                        fix="one seat per GPU or MIG device",
                    )
                for g in spec.groups:
                    if g not in groups:
                        raise InputError(
                            f"unknown group {g!r}.{did_you_mean(g, groups)}",
                            where=where,
                            fix=f"use one of the course's groups: {', '.join(groups)}",
                        )
                keys.add(spec.key)
                devices.add(spec.device_uuid)
            added = []
            for spec in checked:
                seat = Seat(
                    course_id=crow.id,
                    created_at=now,
                    state_at=now,
                    state_reason="added",
                    **spec.model_dump(exclude={"groups"}),
                    groups=list(spec.groups),
                )
                s.add(seat)
                added.append(seat)
            s.flush()
            _log(s, crow.key, actor, "seats.add", detail={"seats": [a.key for a in added]})
            return [_seat_view(crow.key, a, None) for a in added]

    def seats(self, course: str | None = None) -> list[SeatView]:
        """Every seat of a course with its current participant, by key."""
        with self._database.read() as s:
            crow = _course(s, course)
            q = (
                select(Seat, Participant.key, Assignment)
                .outerjoin(Assignment, and_(Assignment.seat_id == Seat.id, Assignment.valid_to.is_(None)))
                .outerjoin(Participant, Participant.id == Assignment.participant_id)
                .where(Seat.course_id == crow.id)
                .order_by(Seat.key)
            )
            return [_seat_view(crow.key, seat, (who, a)) for seat, who, a in s.execute(q)]

    def get_seat(self, course: str | None, seat: str) -> SeatView:
        """One seat by key, with its current participant."""
        with self._database.read() as s:
            crow = _course(s, course)
            row = _seat(s, crow, seat)
            return _seat_view(crow.key, row, _holder(s, row.id))

    def seat_of(self, course: str | None, participant: str) -> SeatView | None:
        """The seat a participant holds now (None when they hold none)."""
        with self._database.read() as s:
            crow = _course(s, course)
            p = _participant(s, crow, participant)
            row = _open_seat(s, p.id)
            return None if row is None else _seat_view(crow.key, row, _holder(s, row.id))

    def set_seat_state(
        self,
        course: str | None,
        seat: str,
        state: SeatState | str,
        *,
        reason: str | None = None,
        engine: EngineName | None = None,
        engine_ref: str | None = None,
        connect: str | None = None,
        device_uuid: str | None = None,
        host: str | None = None,
        access: Access | None = None,
        clear_access: bool = False,
        actor: str = DEFAULT_ACTOR,
    ) -> SeatView:
        """Move a seat through planned → requested → running (or failed/released), with a reason.

        Engines call this as they provision: the engine, its reference (domain name, job id, cluster
        name), how to connect (``access``, structured) and the device UUID are updated with the state
        when given, through the one seat write (:func:`gpuseat.store.access.apply_seat_change`).
        """
        from gpuseat.files import validate
        from gpuseat.store.access import apply_seat_change
        from gpuseat.store.specs import _SeatUpdate

        changes = validate(
            _SeatUpdate,
            {"engine": engine, "engine_ref": engine_ref, "connect": connect, "device_uuid": device_uuid, "host": host},
            where=f"seat {seat}",
        )
        with self._database.write() as s:
            crow = _course(s, course)
            row = _seat(s, crow, seat, lock=True)
            holder = _holder(s, row.id)  # read once: for the events row and the answer (a hub starts here)
            apply_seat_change(
                s,
                crow,
                row,
                state=state,
                reason=reason,
                access=access,
                clear_access=clear_access,
                fields={n: getattr(changes, n) for n in ("engine", "engine_ref", "connect", "device_uuid", "host")},
                always=True,
                action="seat.state",
                actor=actor,
                holder=None if holder is None else holder[0],
            )
            return _seat_view(crow.key, row, holder)

    def assign_all(
        self, course: str | None = None, *, partial: bool = False, actor: str = DEFAULT_ACTOR
    ) -> AssignReport:
        """Give every participant without a seat the best suitable free seat, deterministically.

        The most constrained groups go first, then participants by key; seats are preferred reserved
        for the group, then smallest, then by key. Re-running changes nothing. When some participant
        cannot be seated, :class:`NoFreeSeat` is raised and nothing is stored, unless ``partial``.
        """
        with self._database.write() as s:
            crow = _course(s, course)
            seats = list(s.scalars(select(Seat).where(Seat.course_id == crow.id).order_by(Seat.key).with_for_update()))
            now = _clock(s, crow.key, actor)
            taken = set(
                s.scalars(
                    select(Assignment.seat_id).where(
                        Assignment.valid_to.is_(None), Assignment.seat_id.in_([x.id for x in seats])
                    )
                )
            )
            people = list(s.scalars(select(Participant).where(Participant.course_id == crow.id)))
            holding = set(
                s.scalars(
                    select(Assignment.participant_id).where(
                        Assignment.valid_to.is_(None), Assignment.participant_id.in_([p.id for p in people])
                    )
                )
            )
            chosen, missing = choose_seats(
                [x for x in seats if x.id not in taken], [p for p in people if p.id not in holding], _needs(crow)
            )
            made: list[AssignmentView] = []
            left = [p.key for p in missing]
            for p, seat in chosen:
                a = Assignment(seat_id=seat.id, participant_id=p.id, valid_from=now, mode="assigned")
                s.add(a)
                made.append(_assignment_view(crow.key, seat.key, p.key, a))
            if left and not partial:
                raise NoFreeSeat(
                    f"{len(left)} participant(s) would have no suitable seat ({', '.join(sorted(left)[:10])}"
                    f"{', …' if len(left) > 10 else ''}); {len(made)} seat(s) would be assigned",
                    where=f"course {crow.key}",
                    fix="add seats for them (gpuseat seats add) or assign with --partial; nothing was stored",
                )
            s.flush()
            if made:
                _log(
                    s,
                    crow.key,
                    actor,
                    "seats.assign",
                    detail={"assigned": {m.participant: m.seat for m in made}, "left": left},
                )
            return AssignReport(crow.key, tuple(sorted(made, key=lambda m: m.seat)), len(holding), tuple(sorted(left)))

    def assign(self, course: str | None, participant: str, seat: str, *, actor: str = DEFAULT_ACTOR) -> AssignmentView:
        """Give a participant a chosen seat (they must not hold one; the seat must be free)."""
        with self._database.write() as s:
            crow = _course(s, course)
            p = _participant(s, crow, participant)
            row = _seat(s, crow, seat, lock=True)
            held = _open_seat(s, p.id)
            if held is not None:
                if held.id == row.id:
                    return _assignment_view(crow.key, row.key, p.key, _open(s, seat_id=row.id))
                raise SeatTaken(
                    f"{p.key} already holds seat {held.key}",
                    where=f"participant {p.key}",
                    fix=f"move them instead: gpuseat seats move --participant {p.key} --seat {row.key}",
                )
            return give_seat(s, crow, p, row, actor, "seat.assign")

    def move(self, course: str | None, participant: str, seat: str, *, actor: str = DEFAULT_ACTOR) -> AssignmentView:
        """Move a participant to another (free) seat; the old assignment is closed, history kept."""
        with self._database.write() as s:
            crow = _course(s, course)
            p = _participant(s, crow, participant)
            row = _seat(s, crow, seat, lock=True)
            old = _open(s, participant_id=p.id)
            if old is not None and old.seat_id == row.id:
                return _assignment_view(crow.key, row.key, p.key, old)
            if old is not None:
                old.valid_to, old.ended_by = _clock(s, crow.key, actor), "move"
                s.flush()
            return give_seat(s, crow, p, row, actor, "seat.move")

    def move_from_host(
        self,
        course: str | None,
        host: str,
        *,
        to_host: str | None = None,
        partial: bool = False,
        dry_run: bool = False,
        actor: str = DEFAULT_ACTOR,
    ) -> HostMoveReport:
        """Move every holder of a seat on ``host`` (a server that died) to the best suitable free seat on another
        host (only ``to_host`` when given), by :meth:`assign_all`'s rule, each as :meth:`move` does, in one
        transaction. Too few such seats: :class:`NoFreeSeat` and nothing moves, unless ``partial`` (who fits
        moves, the others are named in ``stayed``); ``dry_run``: the same report, nothing stored. An unknown
        host is an :class:`InputError`; the host's seats keep their state."""
        from gpuseat.store.evacuate import HostMove, HostMoveReport, check_hosts, too_few_seats

        with self._database.write() as s:
            crow = _course(s, course)
            seats = list(s.scalars(select(Seat).where(Seat.course_id == crow.id).order_by(Seat.key).with_for_update()))
            check_hosts(crow, seats, host, to_host)
            # locked: a release committed meanwhile (PostgreSQL) is seen, not overwritten by this move
            open_ = select(Assignment).where(
                Assignment.valid_to.is_(None), Assignment.seat_id.in_([x.id for x in seats])
            )
            held = {a.seat_id: a for a in s.scalars(open_.with_for_update())}
            people = {p.id: p for p in s.scalars(select(Participant).where(Participant.course_id == crow.id))}
            old_seat = {held[x.id].participant_id: x for x in seats if x.host == host and x.id in held}
            leaving = [people[i] for i in old_seat]
            elsewhere = [x for x in seats if x.id not in held and x.host != host and to_host in (None, x.host)]
            chosen, left = choose_seats(elsewhere, leaving, _needs(crow))
            if left and not partial:
                raise too_few_seats(crow, host, to_host, len(leaving), len(chosen), left)
            if not dry_run and chosen:
                now = _clock(s, crow.key, actor)
                for p, _ in chosen:
                    old = held[old_seat[p.id].id]
                    old.valid_to, old.ended_by = now, "move"
                s.flush()
                for p, x in chosen:
                    give_seat(s, crow, p, x, actor, "seat.move")
            moved = tuple(HostMove(p.key, old_seat[p.id].key, host, x.key, x.host) for p, x in chosen)
            return HostMoveReport(crow.key, host, to_host, moved, tuple(sorted(p.key for p in left)), dry_run)

    def release(
        self,
        course: str | None,
        *,
        participant: str | None = None,
        seat: str | None = None,
        reason: str = "released",
        actor: str = DEFAULT_ACTOR,
    ) -> AssignmentView | None:
        """Close the open assignment of a participant or of a seat; None when there was none."""
        if (participant is None) == (seat is None):
            raise InputError("name a participant or a seat", where="release", fix="give exactly one of them")
        _check_reason(reason)
        with self._database.write() as s:
            crow = _course(s, course)
            if participant is not None:
                p = _participant(s, crow, participant)
                a = _open(s, participant_id=p.id)
            else:
                row = _seat(s, crow, cast(str, seat))
                a = _open(s, seat_id=row.id)
            if a is None:
                return None
            a.valid_to, a.ended_by = _clock(s, crow.key, actor), reason
            s.flush()
            seat_key = s.scalar(select(Seat.key).where(Seat.id == a.seat_id)) or ""
            who = s.scalar(select(Participant.key).where(Participant.id == a.participant_id)) or ""
            _log(s, crow.key, actor, "seat.release", participant=who, seat=seat_key, detail={"reason": reason})
            return _assignment_view(crow.key, seat_key, who, a)

    def history(
        self, course: str | None = None, *, participant: str | None = None, seat: str | None = None
    ) -> list[AssignmentView]:
        """Every assignment, open and closed, oldest first (optionally of one participant or seat)."""
        with self._database.read() as s:
            crow = _course(s, course)
            q = (
                select(Assignment, Seat.key, Participant.key)
                .join(Seat, Seat.id == Assignment.seat_id)
                .join(Participant, Participant.id == Assignment.participant_id)
                .where(Seat.course_id == crow.id)
                .order_by(Assignment.valid_from, Assignment.id)
            )
            if participant is not None:
                q = q.where(Participant.id == _participant(s, crow, participant).id)
            if seat is not None:
                q = q.where(Seat.id == _seat(s, crow, seat).id)
            return [_assignment_view(crow.key, sk, pk, a) for a, sk, pk in s.execute(q)]

    def removed_held(self, course: str | None, participant: str) -> set[str]:
        """The seats ``participant`` held that were removed since (``seats remove``): their assignments went with
        them, the removal's events row keeps them (a page still open on one is stale, not an attempt)."""
        with self._database.read() as s:
            crow = _course(s, course)
            q = select(Event.detail).where(Event.course_key == crow.key, Event.action == "seats.remove")
            past = [a for d in s.scalars(q) if isinstance(d, dict) for a in d.get("past_assignments") or ()]
            return {str(a["seat"]) for a in past if isinstance(a, dict) and a.get("participant") == participant}

    def held_on_devices(self, uuids: Iterable[str], engines: str | Iterable[str]) -> list[dict[str, Any]]:
        """Every held seat of ``engines`` (one name, or several: the engines that deliver a GPU of the server they
        run on, :data:`gpuseat.engines.host.others.LOCAL`) on one of the devices ``uuids``, in every course that is
        not archived (one read): course, seat, device_uuid, participant, unix_user, since (when the holder got it)
        and engine, oldest first. Device UUIDs are unique per course only: two courses on one server may name the
        same GPU, under any host name and through any of those engines (the host engine's rule,
        :mod:`gpuseat.engines.host.others`)."""
        wanted = sorted(set(uuids))
        return self._held(_engine_in(engines), Seat.device_uuid.in_(wanted)) if wanted else []

    def held_seats(
        self, seats: Iterable[tuple[str, str]], engine: str, uuids: Iterable[str] = (), engines: Iterable[str] = ()
    ) -> list[dict[str, Any]]:
        """:meth:`held_on_devices` of the seats named (course, seat key) instead: the held ones of ``engine`` in
        courses not archived (the libvirt engine finds other courses' seats by their domains on its host), and in
        the same read the held seats of ``engines`` on the devices ``uuids`` (the other engines' seats on a GPU a
        seat of its course names)."""
        pairs = [and_(CourseRecord.key == c, Seat.key == k) for c, k in sorted(set(seats))]
        wanted, local = sorted(set(uuids)), sorted(set(engines))
        named = [and_(Seat.engine == engine, or_(*pairs))] if pairs else []
        if wanted and local:
            named.append(and_(Seat.engine.in_(local), Seat.device_uuid.in_(wanted)))
        return self._held(or_(*named)) if named else []

    def held_by_engine(self, engine: str) -> list[dict[str, Any]]:
        """:meth:`held_on_devices` of every seat of ``engine``, with its ``engine_ref`` (a Slurm seat's GRES device:
        node and device files; courses on one cluster may name the same GPU under other seat keys)."""
        return self._held(Seat.engine == engine)

    def _held(self, *where: Any) -> list[dict[str, Any]]:
        with self._database.read() as s:
            q = (
                select(CourseRecord.key, Seat.key, Seat.device_uuid, Participant.key, Participant.unix_user)
                .add_columns(Assignment.valid_from, Seat.engine_ref, Seat.engine)
                .join(Seat, Seat.course_id == CourseRecord.id)
                .join(Assignment, and_(Assignment.seat_id == Seat.id, Assignment.valid_to.is_(None)))
                .join(Participant, Participant.id == Assignment.participant_id)
                .where(CourseRecord.archived_at.is_(None), *where)
                .order_by(Assignment.valid_from, CourseRecord.key, Seat.key)
            )
            names = ("course", "seat", "device_uuid", "participant", "unix_user", "since", "engine_ref", "engine")
            return [dict(zip(names, (*row[:5], _utc(row[5]), *row[6:]), strict=True)) for row in s.execute(q)]


def _engine_in(engines: str | Iterable[str]) -> Any:
    """The seats of engine ``engines`` (a name), or of one of them."""
    return Seat.engine == engines if isinstance(engines, str) else Seat.engine.in_(sorted(set(engines)))


#: the history keeps a release's reason in ``assignments.ended_by``, String(32)
_REASON_LIMIT = 32


def _check_reason(reason: str) -> None:
    """A release's reason as the history keeps it, whole, or one input error (it was cut to 32 characters unsaid;
    a newline or an escape sequence would have reached every terminal that prints the history)."""
    if not reason.strip():
        raise InputError("the reason is empty", where="reason", fix="give a few words, or leave it out ('released')")
    if clean(reason, one_line=True) != reason:
        raise InputError(
            "the reason has control characters (a newline, an escape sequence)",
            where="reason",
            fix="write it as one line of plain text",
        )
    if len(reason) > _REASON_LIMIT:
        raise InputError(
            f"the reason has {len(reason)} characters; the history keeps at most {_REASON_LIMIT}",
            where="reason",
            fix=f"shorten it to {_REASON_LIMIT} characters or fewer",
        )


def choose_seats(
    free: Iterable[Seat], waiting: Iterable[Participant], needs: dict[str, SeatNeed]
) -> tuple[list[tuple[Participant, Seat]], list[Participant]]:
    """The one rule that picks seats for people (``seats assign``, ``seats move --from-host``): of the seats nobody
    holds (``free``), those in an assignable state; the most constrained groups go first, then participants by key;
    each gets the best suitable seat left (own hardware, reserved for their group, smallest, by key). Returns who
    gets which seat, in that order, and who is left without one."""
    ready = [x for x in free if x.state in ASSIGNABLE_STATES]
    people = list(waiting)
    fitting: dict[str | None, list[Seat]] = {}  # per group: suitable free seats, best first
    for group in {p.group_name for p in people}:
        suits = [x for x in ready if _misfit(x, group, needs) is None]
        fitting[group] = sorted(suits, key=lambda x, g=group: _pref(x, g))  # type: ignore[misc]
    people.sort(key=lambda p: (len(fitting[p.group_name]), p.group_name or "", p.key))
    used: set[int] = set()
    chosen: list[tuple[Participant, Seat]] = []
    left: list[Participant] = []
    for p in people:
        seat = next((x for x in fitting[p.group_name] if x.id not in used), None)
        if seat is None:
            left.append(p)
            continue
        used.add(seat.id)
        chosen.append((p, seat))
    return chosen, left


def give_seat(s: Session, crow: CourseRecord, p: Participant, row: Seat, actor: str, action: str) -> AssignmentView:
    holder = _holder(s, row.id)
    if holder is not None:
        raise SeatTaken(
            f"seat {row.key} is held by {holder[0]}",
            where=f"seat {row.key}",
            fix="release it first (gpuseat seats release --seat …) or choose a free seat",
        )
    problem = _misfit(row, p.group_name, _needs(crow))
    if problem is not None:
        raise InputError(
            f"seat {row.key} does not suit {p.key}: {problem}", where=f"seat {row.key}", fix="choose another seat"
        )
    if row.state not in ASSIGNABLE_STATES:
        raise InputError(f"seat {row.key} is {row.state}", where=f"seat {row.key}", fix="request the seat again first")
    a = Assignment(seat_id=row.id, participant_id=p.id, valid_from=_clock(s, crow.key, actor), mode="assigned")
    s.add(a)
    s.flush()
    _log(s, crow.key, actor, action, participant=p.key, seat=row.key)
    return _assignment_view(crow.key, row.key, p.key, a)
