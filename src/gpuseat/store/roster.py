"""The roster in the store: import a checked roster (added, updated, absent), list, find and remove participants."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import and_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpuseat.core.delivery import login_name
from gpuseat.core.roster import RosterRow, RosterText, parse_roster
from gpuseat.db.models import Assignment, CourseRecord, Event, Participant, Seat, SeatRequest
from gpuseat.errors import InputError, did_you_mean
from gpuseat.store.base import Concern
from gpuseat.store.rows import (
    DEFAULT_ACTOR,
    _course,
    _delivered,
    _log,
    _open_seat_key,
    _participant,
    _participant_view,
)
from gpuseat.store.views import ParticipantView, RosterChange, RosterReport


class Roster(Concern):
    """``store.roster``: a course's participants, imported from a roster and found by key, email or user."""

    def import_roster(
        self,
        course: str | None,
        source: Path | RosterText | Sequence[RosterRow],
        *,
        where: str | None = None,
        actor: str = DEFAULT_ACTOR,
    ) -> RosterReport:
        """Import a roster in one transaction: a CSV file (a :class:`~pathlib.Path`), CSV text with its
        name (:class:`~gpuseat.core.roster.RosterText`) or rows already parsed; never a bare string,
        which could be either a file name or the text.

        Participants are matched by email: new ones are added, known ones updated (the report lists
        the changed fields), ones no longer listed are kept and reported as ``absent``. A bad row
        raises :class:`InputError` with ``FILE:LINE:COLUMN`` and nothing is stored. Once an engine has
        applied the course, a login is never passed to another participant (:func:`_check_login`).
        """
        if isinstance(source, str):
            raise TypeError("import_roster takes a Path, a RosterText or parsed rows, not a str (file name or text?)")
        text: str | None = None
        rows: list[RosterRow] = []
        if isinstance(source, Path):
            from gpuseat.files import read_text

            text, where = read_text(source), where or str(source)
        elif isinstance(source, RosterText):
            text, where = source.text, where or source.where
        else:
            rows, where = list(source), where or "roster"
        with self._database.write() as s:
            crow = _course(s, course)
            # PostgreSQL: the course file's groups as a course update (FOR UPDATE) leaves them, and that update's
            # check of the roster waits for this import (read before, they were the old file's: orphans)
            s.refresh(crow, with_for_update={"read": True})
            groups = tuple(g["name"] for g in (crow.summary or {}).get("groups", ())) or ("participants",)
            if text is not None:
                rows = parse_roster(text, groups=groups, where=where)
            else:
                _check_groups(rows, groups, where)
            _check_group_sizes(rows, crow, where)
            return _apply_roster(s, crow, rows, where, actor)

    def participants(self, course: str | None = None) -> list[ParticipantView]:
        """Every participant of a course with their current seat, by key."""
        with self._database.read() as s:
            crow = _course(s, course)
            q = (
                select(Participant, Seat.key)
                .outerjoin(Assignment, and_(Assignment.participant_id == Participant.id, Assignment.valid_to.is_(None)))
                .outerjoin(Seat, Seat.id == Assignment.seat_id)
                .where(Participant.course_id == crow.id)
                .order_by(Participant.key)
            )
            return [_participant_view(crow.key, p, seat) for p, seat in s.execute(q)]

    def logins_left(self, course: str | None) -> dict[str, str]:
        """Logins the course's participants had on its machines before a re-import (or a seats file) gave them
        another, login → participant key: their accounts stay, locked, until the course is deleted."""
        with self._database.read() as s:
            return _logins_left(s, _course(s, course))

    def find_participant(self, course: str | None, who: str) -> ParticipantView:
        """A participant by key, email (any case) or Unix user name; :class:`NotFound` otherwise."""
        with self._database.read() as s:
            crow = _course(s, course)
            p = _participant(s, crow, who)
            return _participant_view(crow.key, p, _open_seat_key(s, p.id))

    def remove_participants(
        self,
        course: str | None,
        keys: Sequence[str],
        *,
        reason: str | None = None,
        actor: str = DEFAULT_ACTOR,
        dry_run: bool = False,
    ) -> list[dict[str, Any]]:
        """Take participants (key, email or Unix user) off the course in one transaction, all or nothing: their
        seat released (``reason``, as ``seats release`` checks it), links revoked, pending requests failed, their
        row deleted (``reason`` None: ``removed from the roster``); one ``roster.remove`` events row keeps their
        rows and past assignments (:mod:`gpuseat.store.leaving`). ``dry_run``: nothing written. One dict per
        participant: participant, seat, past_seats, links, requests, survey_answers."""
        from gpuseat.store.leaving import remove_participants

        return remove_participants(self._database, course, keys, reason=reason, actor=actor, dry_run=dry_run)


def _check_groups(rows: list[RosterRow], groups: tuple[str, ...], where: str) -> None:
    """Parsed rows name one of the course's groups (what :func:`parse_roster` checks on text)."""
    for r in rows:
        if r.group is not None and r.group not in groups:
            raise InputError(
                f"unknown group {r.group!r}.{did_you_mean(r.group, groups)}",
                where=f"{where}:{r.line}",
                fix=f"use one of the course's groups: {', '.join(groups)}",
            )


def _check_group_sizes(rows: list[RosterRow], crow: CourseRecord, where: str) -> None:
    """More participants in a group than the course file plans seats for is refused."""
    planned = {g["name"]: g["count"] for g in (crow.summary or {}).get("groups", ())}
    counts: dict[str, int] = {}
    for r in rows:
        if r.group is not None:
            counts[r.group] = counts.get(r.group, 0) + 1
    for group, n in counts.items():
        if group in planned and n > planned[group]:
            raise InputError(
                f"{n} participants in group {group!r}, the course file plans {planned[group]} seats",
                where=where,
                fix="raise the group's count in the course file (and load it: gpuseat course update FILE) or drop rows",
            )


_ROSTER_FIELDS = ("key", "name", "group_name", "unix_user", "ssh_key")
#: a participant's field → the roster column that sets it (the key is made when the file has no key column)
_COLUMN_OF = {"name": "name", "group_name": "group", "unix_user": "unix_user", "ssh_key": "ssh_key"}


def _apply_roster(s: Session, crow: CourseRecord, rows: list[RosterRow], where: str, actor: str) -> RosterReport:
    now = datetime.now(UTC)
    stored = {p.email: p for p in s.scalars(select(Participant).where(Participant.course_id == crow.id)) if p.email}
    keys = {p.key: p for p in s.scalars(select(Participant).where(Participant.course_id == crow.id))}
    delivered = _delivered(s, crow)
    before = {id(p): login_name(p.key, p.unix_user) for p in keys.values()}
    # login → the key of who has it now (or had it, on the machines: a login renamed after delivery)
    had = {**(_logins_left(s, crow) if delivered else {}), **{before[id(p)]: p.key for p in keys.values()}}
    row_of: dict[int, RosterRow] = {}
    changes: list[RosterChange] = []
    requested, own_keys = _requested_keys(s, crow), []
    moved: dict[str, list[str | None]] = {}  # key → [old group, new group]: a rule the group sets counts from now
    listed = {r.email for r in rows}
    for r in rows:
        values = {"key": r.key, "name": r.name, "group_name": r.group, "unix_user": r.unix_user, "ssh_key": r.ssh_key}
        p = stored.get(r.email)
        if p is None and "key" in r.columns and (by_key := keys.get(r.key)) and by_key.email not in listed:
            p = by_key  # a file with a key column names the participant: this row gives them a new email
        if p is not None:  # a column the file does not have keeps what is stored (the key: when made from the email)
            kept = {f for f, c in _COLUMN_OF.items() if c not in r.columns}
            if not {"key", "unix_user"} & r.columns:
                kept.add("key")
            values.update({f: getattr(p, f) for f in kept})
            last, replaced = requested.get(p.id, (None, set()))
            if p.ssh_key is not None and p.ssh_key == last and values["ssh_key"] in replaced:
                # the file still has the key a key request replaced since (or none): the newer key stays
                values["ssh_key"] = p.ssh_key
                own_keys.append(p.key)
        key = str(values["key"])
        other = keys.get(key)
        if other is not None and other is not p:
            raise InputError(
                f"key: {key!r} belongs to another participant ({other.email})",
                where=f"{where}:{r.line}",
                fix=f"give this row its own key column value; or, to change {other.email}'s email, name them on "
                f"this row by their key ({key!r}) in a key column",
            )
        if delivered:
            _check_login(r, where, login_name(key, values["unix_user"]), had, {key, p.key if p else key})
        if p is None:
            p = Participant(course_id=crow.id, email=r.email, created_at=now, updated_at=now, **values)
            s.add(p)
            keys[key] = p
            row_of[id(p)] = r
            changes.append(RosterChange(key, r.email, "added", ()))
            continue
        row_of[id(p)] = r
        changed = tuple(f for f in _ROSTER_FIELDS if getattr(p, f) != values[f])
        if p.email != r.email:
            p.email = r.email
            changed += ("email",)
        if changed:
            if "group_name" in changed:
                moved[key] = [p.group_name, values["group_name"]]
            keys.pop(p.key, None)
            for f in changed:
                if f != "email":
                    setattr(p, f, values[f])
            p.updated_at = now
            keys[key] = p
            changes.append(
                RosterChange(key, r.email, "updated", tuple("group" if f == "group_name" else f for f in changed))
            )
        else:
            changes.append(RosterChange(key, r.email, "unchanged", ()))
    _check_logins_unique(keys.values(), row_of, where)
    try:
        s.flush()
    except IntegrityError:
        raise InputError(
            "two participants would share a key or email",
            where=where,
            fix="check the key, email and unix_user columns",
        ) from None
    absent = tuple(sorted(p.key for p in stored.values() if id(p) not in row_of))
    count = {a: sum(1 for c in changes if c.action == a) for a in ("added", "updated", "unchanged")}
    detail: dict[str, object] = {"file": where, **count, "absent": list(absent)}
    renamed = [p for p in keys.values() if id(p) in before and before[id(p)] != login_name(p.key, p.unix_user)]
    left = {before[id(p)]: p.key for p in renamed}
    if delivered and left:  # kept for later imports: the machines still have these accounts, homes and files
        detail["logins_left"] = left
    if own_keys:
        detail["own_keys"] = own_keys
    if moved:  # store.requests.policy_set_at: a rule of the new group is set for them at this row
        detail["groups"] = moved
    _log(s, crow.key, actor, "roster.import", detail=detail)
    return RosterReport(
        crow.key, count["added"], count["updated"], count["unchanged"], tuple(changes), absent, tuple(own_keys)
    )


def _requested_keys(s: Session, crow: CourseRecord) -> dict[int, tuple[str | None, set[str | None]]]:
    """Participant id → the key their latest key request set (their page, ``gpuseat seat key``) and the keys
    their key requests replaced (None: they had none, or the request is older than this record)."""
    out: dict[int, tuple[str | None, set[str | None]]] = {}
    q = select(SeatRequest.participant_id, SeatRequest.payload).where(
        SeatRequest.course_id == crow.id, SeatRequest.action == "key"
    )
    for pid, payload in s.execute(q.order_by(SeatRequest.id)):
        d = payload or {}
        out[pid] = (d.get("key"), out.get(pid, (None, set()))[1] | {d.get("replaced")})
    return out


def _logins_left(s: Session, crow: CourseRecord) -> dict[str, str]:
    """Logins participants of this course had on its machines before a re-import gave them another (or before
    they were removed from the roster), by key."""
    q = select(Event.detail).where(
        Event.course_key == crow.key,
        # a re-import, a seats file's rename, a removal (roster remove)
        Event.action.in_(("roster.import", "roster.update", "roster.remove")),
        Event.at >= crow.created_at,
    )
    out: dict[str, str] = {}
    for detail in s.scalars(q.order_by(Event.id)):
        out.update((detail or {}).get("logins_left") or {})
    return out


def _login_column(r: RosterRow) -> str:
    """The column a row's login comes from: its unix_user, else the key (made from the email without one)."""
    return next((c for c in ("unix_user", "key") if c in r.columns), "email")


def _check_login(r: RosterRow, where: str, login: str, had: dict[str, str], mine: set[str]) -> None:
    """A login another participant has (or had, on the course's machines) is not this row's: their account,
    home folder, files and processes are on the machines under it, and would be this participant's."""
    owner = had.get(login)
    if owner is not None and owner not in mine:
        column = _login_column(r)
        raise _passed(column, login, owner, r.place(where, column))


def _passed(column: str, login: str, owner: str, where: str) -> InputError:
    return InputError(
        f"{column}: the login {login!r} is {owner}'s on the course's machines (their account, home and "
        "files); a login is never passed to another participant",
        where=where,
        fix="give this participant a unix_user nobody in the course has had (an exchange of two logins "
        "too: each gets a new one)",
    )


def _shared(column: str, login: str, first: str, second: str, where: str) -> InputError:
    return InputError(
        f"{column}: the login {login!r} would be both {first}'s and {second}'s",
        where=where,
        fix="give each participant their own unix_user",
    )


def check_logins(
    s: Session, crow: CourseRecord, given: dict[str, str], *, column: str, where: Callable[[str], str]
) -> None:
    """The roster's rule for logins given outside a roster file (a seats file, ``course import``), participant
    key → login: no two participants of the course share one, and once an engine has applied the course none
    is a login another participant had on its machines (:func:`_logins_left`). ``where(key)`` places an error."""
    people = s.scalars(select(Participant).where(Participant.course_id == crow.id))
    owners = {login_name(p.key, p.unix_user): p.key for p in people if p.key not in given}
    left = _logins_left(s, crow) if _delivered(s, crow) else {}
    for key, login in given.items():
        owner = owners.setdefault(login, key)
        if owner != key:
            raise _shared(column, login, owner, key, where(key))
        if left.get(login, key) != key:
            raise _passed(column, login, left[login], where(key))


def logins_left_detail(s: Session, crow: CourseRecord, key: str, old: str, new: str) -> dict[str, object]:
    """The event detail that keeps a login renamed outside a roster file (a seats file) as its participant's
    once an engine has applied the course (read back by :func:`_logins_left`)."""
    return {"logins_left": {old: key}} if old != new and _delivered(s, crow) else {}


def _check_logins_unique(people: Iterable[Participant], row_of: dict[int, RosterRow], where: str) -> None:
    """No two participants of the course end up with one login (a row's unix_user and another's key slug)."""
    seen: dict[str, Participant] = {}
    for p in sorted(people, key=lambda x: row_of[id(x)].line if id(x) in row_of else 0):
        login = login_name(p.key, p.unix_user)
        first = seen.setdefault(login, p)
        if first is not p and id(p) in row_of:  # two left out of the file: not this import's doing
            r = row_of[id(p)]
            column = _login_column(r)
            raise _shared(column, login, first.key, p.key, r.place(where, column))
