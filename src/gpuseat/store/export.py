"""One course as one file, and back: ``gpuseat course export`` / ``gpuseat course import``.

The archive is a zip of JSON documents (schema in docs/course.md, ``schema_version`` 1):
``manifest.json`` (format, schema_version, gpuseat version, when, the course key, row counts and the
SHA-256 of every other member), ``course.json``, ``participants.json``, ``seats.json``,
``assignments.json`` (history, open and closed, by seat and participant key), ``access_tokens.json``
(SHA-256 hashes and state only: a token itself is never stored), ``events.json`` (the course's log),
``survey.json`` (template and answers, or null) and ``samples_summary.json`` (per seat: samples and
minutes the monitor recorded, busy share, memory peak; a summary, not imported back), ``seat_requests.json``,
``seat_hours.json`` and ``engine_settings.json`` (read when present; :mod:`gpuseat.store.archive_rules`).

Rows are named by keys, never by database ids, so an export from SQLite imports into PostgreSQL.
Import is one transaction: a corrupt archive, a wrong ``schema_version``, a bad row or a course key
that exists already is one clear :class:`InputError` and nothing is stored. The export is the record as
it was (a seat request still pending says ``pending``); the import stores such a request as failed
(:data:`PENDING_AT_EXPORT`), so no agent carries it out on whoever holds the seat by then.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Integer, cast, func, select

from gpuseat.core.delivery import login_name
from gpuseat.core.seating import COURSE_KEY_PATTERN
from gpuseat.db.models import (
    AccessToken,
    Assignment,
    Course,
    Event,
    MinuteAggregate,
    Participant,
    Sample,
    Seat,
    SeatHours,
    SeatRequest,
    Survey,
    SurveyResponse,
)
from gpuseat.errors import InputError
from gpuseat.files import check_target, write_file
from gpuseat.store.archive_rules import add_engine_settings_rows, check_rows, engine_settings_rows
from gpuseat.store.export_rows import _ROWS, CourseRow, ExportSeatRow, ParticipantRow, SurveyRow

if TYPE_CHECKING:
    from gpuseat.store.facade import Store

__all__ = ["FORMAT", "SCHEMA_VERSION", "export_course", "import_course", "read_archive", "write_archive"]

FORMAT = "gpuseat-course-export"
SCHEMA_VERSION = 1
MEMBERS = (
    "course.json",
    "participants.json",
    "seats.json",
    "assignments.json",
    "access_tokens.json",
    "events.json",
    "survey.json",
    "samples_summary.json",
)
#: members added later: written always, read when present (an export made before them imports without them)
LEDGER_MEMBERS = ("seat_requests.json", "seat_hours.json", "engine_settings.json")
EXPORT_MAX_MEMBER_BYTES = 512 * 1024 * 1024  # a course with years of events stays far below; a zip bomb does not
MAX_ARCHIVE_BYTES = 1024 * 1024 * 1024
#: the reason of a request that was pending in an export: an import stores it failed, never carried out
PENDING_AT_EXPORT = "not carried out: the course was exported while it was pending"


# -- files -------------------------------------------------------------------------------------------


def check_archive_target(path: Path, *, force: bool, flag: str = "--to") -> None:
    """What an export or a backup adds to :func:`gpuseat.files.check_target` (no folder, FIFO, device or
    symlink): the folder exists, and the file does not (unless ``force``), so no archive is replaced by accident."""
    where = f"{flag} {path}"
    check_target(path, where=where)
    if not path.parent.is_dir():
        raise InputError("its folder does not exist", where=where, fix="create the folder first")
    if path.exists() and not force:
        raise InputError("exists already", where=where, fix="give a new file name, or add --force")


def write_archive(path: Path, data: bytes, *, force: bool = False, flag: str = "--to") -> None:
    """Write an archive through :func:`gpuseat.files.write_file` (whole or not at all), after
    :func:`check_archive_target`, readable by its owner only (it holds emails, keys and tokens)."""
    check_archive_target(path, force=force, flag=flag)
    write_file(path, data, where=f"{flag} {path}", mode=0o600)


# -- export ------------------------------------------------------------------------------------------


def _iso(value: datetime | date | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.isoformat()


def collect(store: Store, course: str | None) -> dict[str, Any]:
    """Every row of a course, by keys (the archive's members as Python objects)."""
    from gpuseat.store.rows import _course, participant_record

    with store.database.read() as s:
        c = _course(s, course)
        people = list(s.scalars(select(Participant).where(Participant.course_id == c.id).order_by(Participant.key)))
        pkey = {p.id: p.key for p in people}
        seats = list(s.scalars(select(Seat).where(Seat.course_id == c.id).order_by(Seat.key)))
        skey = {x.id: x.key for x in seats}
        assignments = list(
            s.scalars(select(Assignment).where(Assignment.seat_id.in_(list(skey) or [-1])).order_by(Assignment.id))
        )
        tokens = list(
            s.scalars(
                select(AccessToken).where(AccessToken.participant_id.in_(list(pkey) or [-1])).order_by(AccessToken.id)
            )
        )
        events = list(s.scalars(select(Event).where(Event.course_key == c.key).order_by(Event.id)))
        survey = s.scalar(select(Survey).where(Survey.course_id == c.id))
        responses = (
            list(
                s.scalars(
                    select(SurveyResponse).where(SurveyResponse.survey_id == survey.id).order_by(SurveyResponse.id)
                )
            )
            if survey is not None
            else []
        )
        samples = s.execute(
            select(
                Sample.seat_id, func.count(), func.sum(cast(Sample.active, Integer)),
                func.min(Sample.ts), func.max(Sample.ts), func.max(Sample.memory_used_mib),
            ).where(Sample.seat_id.in_(list(skey) or [-1])).group_by(Sample.seat_id)
        ).all()  # fmt: skip
        minutes = s.execute(
            select(
                MinuteAggregate.seat_id, func.count(), func.sum(MinuteAggregate.samples),
                func.sum(MinuteAggregate.active_samples), func.min(MinuteAggregate.minute),
                func.max(MinuteAggregate.minute), func.max(MinuteAggregate.memory_max_mib),
            ).where(MinuteAggregate.seat_id.in_(list(skey) or [-1])).group_by(MinuteAggregate.seat_id)
        ).all()  # fmt: skip
        requests = list(s.scalars(select(SeatRequest).where(SeatRequest.course_id == c.id).order_by(SeatRequest.id)))
        ledger = list(s.scalars(select(SeatHours).where(SeatHours.course_id == c.id).order_by(SeatHours.id)))
        return {
            "course.json": {
                "key": c.key,
                "name": c.name,
                "source_text": c.source_text,
                "summary": c.summary,
                "timezone": c.timezone,
                "starts_on": _iso(c.starts_on),
                "ends_on": _iso(c.ends_on),
                "plan_option": c.plan_option,
                "survey_state": c.survey_state,
                "created_at": _iso(c.created_at),
                "updated_at": _iso(c.updated_at),
                "archived_at": _iso(c.archived_at),
                "offers_files": c.offers_files,
            },
            "participants.json": [participant_record(p) for p in people],
            "seats.json": [seat_record(x) for x in seats],
            "assignments.json": [
                {
                    "seat": skey[a.seat_id],
                    "participant": pkey[a.participant_id],
                    "valid_from": _iso(a.valid_from),
                    "valid_to": _iso(a.valid_to),
                    "mode": a.mode,
                    "ended_by": a.ended_by,
                }
                for a in assignments
            ],
            "access_tokens.json": [
                {
                    "participant": pkey[t.participant_id],
                    "token_hash": t.token_hash,
                    "created_at": _iso(t.created_at),
                    "last_used_at": _iso(t.last_used_at),
                    "revoked_at": _iso(t.revoked_at),
                }
                for t in tokens
            ],
            "events.json": [
                {
                    "at": _iso(e.at),
                    "actor": e.actor,
                    "action": e.action,
                    "participant": e.participant,
                    "seat": e.seat,
                    "detail": e.detail,
                }
                for e in events
            ],
            "survey.json": None
            if survey is None
            else {
                "template_key": survey.template_key,
                "template_text": survey.template_text,
                "opened_at": _iso(survey.opened_at),
                "closed_at": _iso(survey.closed_at),
                "responses": [
                    {
                        "participant": pkey[r.participant_id],
                        "answers": r.answers,
                        "submitted_at": _iso(r.submitted_at),
                        "updated_at": _iso(r.updated_at),
                    }
                    for r in responses
                ],
            },
            "samples_summary.json": _samples_summary(skey, samples, minutes),
            "seat_requests.json": [
                {
                    "participant": pkey[r.participant_id],
                    "seat": r.seat_key,
                    "action": r.action,
                    "payload": r.payload,
                    "state": r.state,
                    "reason": r.reason,
                    "actor": r.actor,
                    "requested_at": _iso(r.requested_at),
                    "done_at": _iso(r.done_at),
                }
                for r in requests
            ],
            "seat_hours.json": [
                {
                    "participant": pkey[h.participant_id],
                    "kind": h.kind,
                    "hours": h.hours,
                    "note": h.note,
                    "actor": h.actor,
                    "at": _iso(h.at),
                }
                for h in ledger
            ],
            "engine_settings.json": engine_settings_rows(s, c.id),
        }


def _samples_summary(skey: dict[int, str], samples: Sequence[Any], minutes: Sequence[Any]) -> list[dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for sid, n, active, first, last, peak in samples:
        out.setdefault(skey[sid], {"seat": skey[sid]})["raw"] = {
            "samples": int(n),
            "active_samples": int(active or 0),
            "first_ts": first,
            "last_ts": last,
            "memory_max_mib": peak,
        }
    for sid, n, total, active, first, last, peak in minutes:
        out.setdefault(skey[sid], {"seat": skey[sid]})["minutes"] = {
            "minutes": int(n),
            "samples": int(total or 0),
            "active_samples": int(active or 0),
            "first_minute": first,
            "last_minute": last,
            "memory_max_mib": peak,
        }
    return [out[k] for k in sorted(out)]


def _json(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True).encode()


def archive_bytes(members: dict[str, Any]) -> tuple[bytes, str]:
    """The zip (members plus the manifest) and its SHA-256."""
    from gpuseat import __version__

    blobs = {name: _json(members[name]) for name in (*MEMBERS, *LEDGER_MEMBERS) if name in members}
    manifest = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "gpuseat_version": __version__,
        "exported_at": datetime.now(UTC).isoformat(),
        "course": members["course.json"]["key"],
        "counts": {name.removesuffix(".json"): len(members[name]) for name in blobs if isinstance(members[name], list)},
        "sha256": {name: hashlib.sha256(blob).hexdigest() for name, blob in blobs.items()},
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", _json(manifest))
        for name, blob in blobs.items():
            zf.writestr(name, blob)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def export_course(
    store: Store, course: str | None, path: Path, *, force: bool = False, actor: str = "gpuseat"
) -> dict[str, Any]:
    """Write the course to ``path`` (one zip); returns the course key, path, SHA-256 and row counts."""
    check_archive_target(path, force=force)
    members = collect(store, course)
    data, digest = archive_bytes(members)
    write_archive(path, data, force=force)
    key = members["course.json"]["key"]
    return {
        "course": key,
        "path": path,
        "sha256": digest,
        "bytes": len(data),
        **{name.removesuffix(".json"): len(v) for name, v in members.items() if isinstance(v, list)},
    }


def seat_record(x: Seat) -> dict[str, Any]:
    """A seat row as plain JSON: what an export's ``seats.json`` holds and a removal's event keeps."""
    return {
        "key": x.key,
        "kind": x.kind,
        "host": x.host,
        "device_uuid": x.device_uuid,
        "profile": x.profile,
        "memory_gb": x.memory_gb,
        "groups": list(x.groups or ()),
        "engine": x.engine,
        "engine_ref": x.engine_ref,
        "state": x.state,
        "state_reason": x.state_reason,
        "state_at": _iso(x.state_at),
        "connect": x.connect,
        "access": x.access,
        "readiness": x.readiness,
        "created_at": _iso(x.created_at),
    }


# -- reading an archive --------------------------------------------------------------------------------


def read_archive(path: Path) -> dict[str, Any]:
    """The checked, parsed members of an export (InputError naming the member and row otherwise)."""
    from gpuseat.files import read_bytes, validate

    where = str(path)
    raw = read_bytes(path, max_bytes=MAX_ARCHIVE_BYTES)
    try:
        zf = zipfile.ZipFile(io.BytesIO(raw))
    except (zipfile.BadZipFile, ValueError):
        raise InputError(
            "not a gpuseat course export (not a zip archive)",
            where=where,
            fix="give a file made by gpuseat course export",
        ) from None
    with zf:
        names = set(zf.namelist())

        def member(name: str) -> bytes:
            if name not in names:
                raise InputError(
                    f"{name} is missing", where=where, fix="the archive is incomplete: export the course again"
                )
            info = zf.getinfo(name)
            if info.file_size > EXPORT_MAX_MEMBER_BYTES:
                raise InputError(
                    f"{name} is too large ({info.file_size} bytes)", where=where, fix="not a gpuseat export"
                )
            try:
                return zf.read(name)
            except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
                raise InputError(
                    f"{name} is damaged ({exc})", where=where, fix="use an intact copy of the export"
                ) from None

        def parsed(name: str, blob: bytes) -> Any:
            try:
                return json.loads(blob.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:  # Recursion: nested too deep
                raise InputError(
                    f"{name} is not JSON ({exc})", where=where, fix="use an intact copy of the export"
                ) from None

        manifest = parsed("manifest.json", member("manifest.json"))
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise InputError(
                "not a gpuseat course export (no manifest)",
                where=where,
                fix="give a file made by gpuseat course export",
            )
        version = manifest.get("schema_version")
        if version != SCHEMA_VERSION:
            raise InputError(
                f"schema_version {version!r}; this gpuseat reads schema_version {SCHEMA_VERSION}",
                where=f"{where}: manifest.json",
                fix="import it with the gpuseat version that exported it (or a newer one that reads it)",
            )
        found = manifest.get("sha256")
        sums: dict[str, Any] = found if isinstance(found, dict) else {}
        out: dict[str, Any] = {"manifest": manifest}
        for name in (*MEMBERS, *(n for n in LEDGER_MEMBERS if n in names)):
            blob = member(name)
            if sums.get(name) != hashlib.sha256(blob).hexdigest():
                raise InputError(
                    f"{name} does not match its checksum in manifest.json",
                    where=where,
                    fix="use an intact copy of the export",
                )
            data = parsed(name, blob)
            if name == "course.json":
                out[name] = validate(CourseRow, data, where=f"{where}: {name}")
            elif name == "survey.json":
                out[name] = None if data is None else validate(SurveyRow, data, where=f"{where}: {name}")
            elif name == "samples_summary.json":
                out[name] = data
            else:
                if not isinstance(data, list):
                    raise InputError(f"{name} is not a list", where=where, fix="use an intact copy of the export")
                out[name] = [validate(_ROWS[name], row, where=f"{where}: {name}[{i}]") for i, row in enumerate(data)]
        for name in LEDGER_MEMBERS:
            out.setdefault(name, [])
    return out


# -- import ------------------------------------------------------------------------------------------


def import_course(store: Store, path: Path, *, key: str | None = None, actor: str = "gpuseat") -> dict[str, Any]:
    """Store the course of an export (under ``key``, default its own) in one transaction."""
    from gpuseat.store.claims import forget_course
    from gpuseat.store.requests import fail_pending
    from gpuseat.store.roster import check_logins
    from gpuseat.store.rows import _log

    got = read_archive(path)
    c: CourseRow = got["course.json"]
    new_key = key or c.key
    if not COURSE_KEY_PATTERN.fullmatch(new_key):
        raise InputError(
            f"course key {new_key!r} is not a slug", where="key", fix="use lower-case letters, digits and '-'"
        )
    where = str(path)
    people: list[ParticipantRow] = got["participants.json"]
    seats: list[ExportSeatRow] = got["seats.json"]
    _unique(where, "participants.json", [p.key for p in people])
    _unique(where, "participants.json (email)", [p.email for p in people if p.email])
    _unique(where, "seats.json", [x.key for x in seats])
    pkeys, skeys = {p.key for p in people}, {x.key for x in seats}
    for name, rows in (
        ("assignments.json", got["assignments.json"]),
        ("access_tokens.json", got["access_tokens.json"]),
        ("seat_requests.json", got["seat_requests.json"]),
        ("seat_hours.json", got["seat_hours.json"]),
    ):
        for i, row in enumerate(rows):
            if row.participant not in pkeys or (name == "assignments.json" and row.seat not in skeys):
                raise InputError(
                    "row names an unknown participant or seat",
                    where=f"{where}: {name}[{i}]",
                    fix="use an intact copy of the export",
                )
    # what the store holds once: two open assignments of a seat or a participant, a link, an answer (each was
    # exit 1, "the course database failed: UNIQUE constraint failed", with a fix about --db)
    open_ = [a for a in got["assignments.json"] if a.valid_to is None]
    _unique(where, "assignments.json (open, of one seat)", [a.seat for a in open_])
    _unique(where, "assignments.json (open, of one participant)", [a.participant for a in open_])
    _unique(where, "access_tokens.json", [t.token_hash for t in got["access_tokens.json"]])
    survey: SurveyRow | None = got["survey.json"]
    _unique(where, "survey.json responses", [r.participant for r in survey.responses] if survey else [])
    for i, r in enumerate(survey.responses if survey else []):
        if r.participant not in pkeys:
            raise InputError(
                "answer of an unknown participant",
                where=f"{where}: survey.json responses[{i}]",
                fix="use an intact copy of the export",
            )
    check_rows(where, got, archived=c.archived_at is not None)  # together: no two holders at once, no link revived
    with store.database.write() as s:
        if s.scalar(select(Course.id).where(Course.key == new_key)) is not None:
            raise InputError(
                f"a course {new_key!r} exists already in this store; nothing was imported",
                where=where,
                fix="import it under another key (--key NEW) or delete the existing course first",
            )
        taken = set(
            s.scalars(
                select(AccessToken.token_hash).where(
                    AccessToken.token_hash.in_([t.token_hash for t in got["access_tokens.json"]] or [""])
                )
            )
        )
        crow = Course(
            key=new_key, name=c.name, source_text=c.source_text, summary=c.summary, timezone=c.timezone,
            starts_on=c.starts_on, ends_on=c.ends_on, plan_option=c.plan_option, survey_state=c.survey_state,
            created_at=c.created_at, updated_at=c.updated_at, offers_files=c.offers_files,
        )  # fmt: skip
        s.add(crow)
        s.flush()
        pid: dict[str, int] = {}
        prow = [
            Participant(
                course_id=crow.id, key=p.key, name=p.name, email=p.email, group_name=p.group, unix_user=p.unix_user,
                ssh_key=p.ssh_key, created_at=p.created_at, updated_at=p.updated_at,
            )
            for p in people
        ]  # fmt: skip
        s.add_all(prow)
        srow = [Seat(course_id=crow.id, **x.model_dump()) for x in seats]
        s.add_all(srow)
        s.flush()
        pid = {p.key: p.id for p in prow}
        sid = {x.key: x.id for x in srow}
        ordered = got["assignments.json"]  # in their order (history); at most one open per seat and person
        s.add_all(
            Assignment(
                seat_id=sid[a.seat], participant_id=pid[a.participant], valid_from=a.valid_from, valid_to=a.valid_to,
                mode=a.mode, ended_by=a.ended_by,
            )
            for a in ordered
        )  # fmt: skip
        kept = [t for t in got["access_tokens.json"] if t.token_hash not in taken]
        s.add_all(
            AccessToken(
                participant_id=pid[t.participant], token_hash=t.token_hash, created_at=t.created_at,
                last_used_at=t.last_used_at, revoked_at=t.revoked_at,
            )
            for t in kept
        )  # fmt: skip
        if survey is not None:
            v = Survey(
                course_id=crow.id, template_key=survey.template_key, template_text=survey.template_text,
                opened_at=survey.opened_at, closed_at=survey.closed_at,
            )  # fmt: skip
            s.add(v)
            s.flush()
            s.add_all(
                SurveyResponse(survey_id=v.id, participant_id=pid[r.participant], answers=r.answers,
                               submitted_at=r.submitted_at, updated_at=r.updated_at)
                for r in survey.responses
            )  # fmt: skip
        s.add_all(
            SeatRequest(
                course_id=crow.id, participant_id=pid[r.participant], seat_key=r.seat, action=r.action,
                payload=r.payload, state=r.state, reason=r.reason, actor=r.actor, requested_at=r.requested_at,
                done_at=r.done_at,
            )
            for r in got["seat_requests.json"]
        )  # fmt: skip
        s.add_all(
            SeatHours(course_id=crow.id, participant_id=pid[h.participant], kind=h.kind, hours=h.hours, note=h.note,
                      actor=h.actor, at=h.at)
            for h in got["seat_hours.json"]
        )  # fmt: skip
        add_engine_settings_rows(s, crow.id, got["engine_settings.json"])
        # the log is append-only: lines still in the store (a course deleted here) are not written twice
        have = {
            _event_id(e.at, e.actor, e.action, e.participant, e.seat, e.detail)
            for e in s.scalars(select(Event).where(Event.course_key == new_key))
        }
        added = 0
        for e in got["events.json"]:
            if _event_id(e.at, e.actor, e.action, e.participant, e.seat, e.detail) in have:
                continue
            _log(s, new_key, e.actor, e.action, participant=e.participant, seat=e.seat, detail=e.detail, at=e.at)
            added += 1
        s.flush()
        logins = {p.key: login_name(p.key, p.unix_user) for p in people}  # the roster's rule, with the export's log
        check_logins(s, crow, logins, column="unix_user", where=lambda key: f"{where}: participants.json ({key})")
        # a request pending when the course was exported (course delete writes the export first) is kept in the
        # record, ended as failed: carried out now, it would act on whoever holds the seat by then
        failed = fail_pending(s, crow, PENDING_AT_EXPORT, actor)
        if c.archived_at is not None:  # last: an archived course takes no more rows
            crow.archived_at = c.archived_at
        skipped = len(got["access_tokens.json"]) - len(kept)
        detail = {"file": where, "from_course": c.key, "events_added": added, "tokens_skipped": skipped,
                  "requests_failed": failed}  # fmt: skip
        _log(s, new_key, actor, "course.import", detail=detail)
    forget_course(store.database, new_key)
    return {
        "course": new_key,
        "participants": len(people),
        "seats": len(seats),
        "assignments": len(got["assignments.json"]),
        "access_tokens": len(kept),
        "tokens_skipped": len(got["access_tokens.json"]) - len(kept),
        "events": added,
        "survey_responses": len(survey.responses) if survey else 0,
        "seat_requests": len(got["seat_requests.json"]),
        "requests_failed": failed,
        "seat_hours": len(got["seat_hours.json"]),
        "engine_settings": len(got["engine_settings.json"]),
    }


def _unique(where: str, name: str, values: list[str]) -> None:
    seen: set[str] = set()
    for v in values:
        if v in seen:
            raise InputError(f"{v!r} appears twice", where=f"{where}: {name}", fix="use an intact copy of the export")
        seen.add(v)


def _event_id(
    at: datetime, actor: str, action: str, participant: str | None, seat: str | None, detail: Any
) -> tuple[Any, ...]:
    when = (at if at.tzinfo else at.replace(tzinfo=UTC)).astimezone(UTC)
    return (when.isoformat(), actor, action, participant, seat, json.dumps(detail, sort_keys=True))
