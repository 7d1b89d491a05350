"""The monitor's seats file (seat → device → participant), imported like any change.

``gpuseat monitor --seats FILE`` writes the file's seats into the course store in one transaction,
with the same rules and events as ``seats add`` / ``seats assign``: a new seat is added
(``seats.add``), a seat whose device, host or profile changed is updated (``seat.device``), an
assignment the file no longer lists is closed (``seat.release``) and a new one is checked like
``seats assign`` (the seat must be free, suit the participant and be in an assignable state;
``seat.assign``). A course made with ``gpuseat course create`` has a roster: a participant the
roster does not list is refused (import the roster first). A course named only by seats files (no
course file) is created on first use and gets its participants from the file (key and Unix user).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuseat.core.delivery import login_name
from gpuseat.core.logins import SYSTEM_LOGINS, is_participant_login
from gpuseat.core.roster import PARTICIPANT_KEY
from gpuseat.core.seating import COURSE_KEY_PATTERN
from gpuseat.db.models import Assignment, CourseRecord, Participant, Seat
from gpuseat.errors import InputError
from gpuseat.readings import SeatEntry
from gpuseat.store.base import Concern
from gpuseat.store.roster import check_logins, logins_left_detail
from gpuseat.store.rows import DEFAULT_ACTOR, _clock, _log, _open
from gpuseat.store.seats import give_seat
from gpuseat.store.specs import SeatSpec


class SeatFile(Concern):
    """``store.seatfile``: a seats file brought into the store (see the module doc)."""

    def import_seat_file(
        self, course: str, entries: Iterable[SeatEntry], *, where: str = "seats file", actor: str = DEFAULT_ACTOR
    ) -> int:
        """Bring ``course``'s seats and assignments in line with a seats file; returns how many seats it lists.

        A participant named on two seats keeps the last one. Nothing is stored when a row is refused.
        """
        from gpuseat.files import validate

        rows = list(entries)
        now = datetime.now(UTC)
        with self._database.write() as s:
            crow = s.scalar(select(CourseRecord).where(CourseRecord.key == course))
            if crow is None:
                crow = self._bare_course(s, course, now, actor)
            rostered = crow.source_text is not None
            added: list[str] = []
            for n, e in enumerate(rows, start=1):
                at = f"{where}: seat {n} ({e.seat})"
                seat = s.scalar(select(Seat).where(Seat.course_id == crow.id, Seat.key == e.seat).with_for_update())
                kind = "mig" if e.device_uuid.startswith("MIG-") else "gpu"
                if seat is None:
                    spec = validate(
                        SeatSpec,
                        {
                            "key": e.seat,
                            "kind": kind,
                            "host": e.host,
                            "device_uuid": e.device_uuid,
                            "profile": e.profile,
                        },
                        where=at,
                    )
                    seat = Seat(
                        course_id=crow.id,
                        created_at=now,
                        state_at=now,
                        state_reason="from a seats file",
                        **spec.model_dump(exclude={"groups", "state"}),
                        groups=[],
                        state="running",
                    )
                    s.add(seat)
                    s.flush()
                    added.append(seat.key)
                else:
                    changed = {
                        k: v
                        for k, v in (("device_uuid", e.device_uuid), ("host", e.host), ("profile", e.profile))
                        if getattr(seat, k) != v
                    }
                    if changed:  # stored as the rule writes them ([2001:db8::5] without brackets: ssh takes it bare)
                        checked = validate(SeatSpec, {"key": seat.key, "kind": seat.kind, **changed}, where=at)
                        wanted = {k: getattr(checked, k) for k in changed}
                        changed = {k: v for k, v in wanted.items() if getattr(seat, k) != v}
                    if changed:
                        for k, v in changed.items():
                            setattr(seat, k, v)
                        s.flush()
                        _log(s, crow.key, actor, "seat.device", seat=seat.key, detail={**changed, "from": where})
                person = self._seat_file_person(s, crow, e, rostered, now, actor, at)
                current = _open(s, seat_id=seat.id)
                if current is not None and (person is None or current.participant_id != person.id):
                    self._end(s, crow, current, now, actor, where)
                    current = None
                if current is None and person is not None:
                    elsewhere = _open(s, participant_id=person.id)
                    if elsewhere is not None:
                        self._end(s, crow, elsewhere, now, actor, where)
                    give_seat(s, crow, person, seat, actor, "seat.assign")
            if added:
                _log(s, crow.key, actor, "seats.add", detail={"seats": added, "from": where})
        return len(rows)

    def _bare_course(self, s: Session, key: str, now: datetime, actor: str) -> CourseRecord:
        if not COURSE_KEY_PATTERN.fullmatch(key):
            raise InputError(f"course key {key!r} is not a slug", where="course", fix="use e.g. dl-2016")
        crow = CourseRecord(
            key=key, name=f"Seats from a seats file ({key})", summary={}, timezone="UTC", created_at=now, updated_at=now
        )
        s.add(crow)
        s.flush()
        _log(s, key, actor, "course.create", detail={"name": crow.name, "from": "seats file"})
        return crow

    def _seat_file_person(
        self, s: Session, crow: CourseRecord, e: SeatEntry, rostered: bool, now: datetime, actor: str, at: str
    ) -> Participant | None:
        if e.participant is None:
            return None
        if e.user and not is_participant_login(e.user):  # the roster's rule for a login
            raise InputError(
                f"user {e.user!r} is not a participant's login"
                + (": the machines have that account for themselves" if e.user in SYSTEM_LOGINS else ""),
                where=at,
                fix="give a login of their own: lower-case letters, digits, '_' or '-', starting with a letter",
            )
        person = s.scalar(select(Participant).where(Participant.course_id == crow.id, Participant.key == e.participant))
        before = login_name(person.key, person.unix_user) if person is not None else None
        login = login_name(e.participant, e.user or (person.unix_user if person is not None else None))
        if login != before:  # the roster's rule: nobody else's login, now or (after day one) before
            check_logins(s, crow, {e.participant: login}, column="user", where=lambda _key: at)
        if person is None:
            if rostered:
                raise InputError(
                    f"participant {e.participant!r} is not on the roster of course {crow.key!r}",
                    where=at,
                    fix="import the roster first (gpuseat roster import) or fix the participant column",
                )
            if not PARTICIPANT_KEY.fullmatch(e.participant):  # the roster's rule for a key
                raise InputError(
                    f"participant {e.participant!r} is not a participant key",
                    where=at,
                    fix="use lower-case letters, digits, '.', '_' or '-'",
                )
            person = Participant(course_id=crow.id, key=e.participant, unix_user=e.user, created_at=now, updated_at=now)
            s.add(person)
            s.flush()
            _log(s, crow.key, actor, "roster.add", participant=person.key, detail={"from": "seats file"})
        elif e.user and person.unix_user != e.user:
            left = logins_left_detail(s, crow, person.key, str(before), login)
            person.unix_user, person.updated_at = e.user, now
            s.flush()
            detail = {"unix_user": e.user, **left}
            _log(s, crow.key, actor, "roster.update", participant=person.key, detail=detail)
        return person

    def _end(self, s: Session, crow: CourseRecord, a: Assignment, now: datetime, actor: str, where: str) -> None:
        a.valid_to, a.ended_by = _clock(s, crow.key, actor), "seats file"
        s.flush()
        seat_key = s.scalar(select(Seat.key).where(Seat.id == a.seat_id))
        who = s.scalar(select(Participant.key).where(Participant.id == a.participant_id))
        _log(s, crow.key, actor, "seat.release", participant=who, seat=seat_key, detail={"reason": where})
