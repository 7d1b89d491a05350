"""The organizer's routes: login and logout, the overview, roster, seats, access links, alerts,
benchmarks, seat hours and the CSV downloads.

Every page asks for the organizer (:func:`~gpuseat.web.deps.need_organizer`); every POST but the
login's comes through :func:`~gpuseat.web.deps.organizer_form` (capped form, origin check, a CSRF token
bound to the session). Routes are plain ``def``: store calls run in worker threads.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from gpuseat.errors import InputError, NotFound
from gpuseat.safe_text import clean
from gpuseat.services.seats_csv import SEATS_CSV_COLUMNS, seats_csv_rows
from gpuseat.web.deps import check_csrf, need_organizer, safe_next
from gpuseat.web.exports import csv_text
from gpuseat.web.limits import MAX_UPLOAD
from gpuseat.web.pages import (
    client_address,
    cookie_name,
    download,
    drop_session_cookie,
    go,
    page,
    root,
    session_secret,
    sessions_of,
    set_cookie,
)
from gpuseat.web.portal import Portal
from gpuseat.web.routes import Form, OrganizerPost, PortalDep
from gpuseat.web.seat_hours import SEAT_HOURS_CSV_COLUMNS, hour_rows
from gpuseat.web.security import CSRF_COOKIE, SESSION_COOKIE, SESSION_MAX_AGE_S

router = APIRouter()
log = logging.getLogger("gpuseat.web")
ROSTER_ROWS = 1000
ROSTER_DOWNLOAD_COLUMNS = ["key", "name", "email", "group", "unix_user", "seat"]
Organizer = Depends(need_organizer)

# -- login ---------------------------------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> Response:
    """The login form, bound to a pre-login cookie; it returns to ``?next=`` when that is a page of this portal
    (anything else is dropped without a word: the login still works, and lands on the overview)."""
    return page(request, "login.html", user=None, next=safe_next(request, request.query_params.get("next")))


@router.post("/login")
def login(request: Request, data: Form, portal: PortalDep) -> Response:
    """A session for the right password; failures count per address and account only."""
    check_csrf(request, data, "a:" + (request.cookies.get(cookie_name(request, CSRF_COOKIE)) or ""))
    user, password = str(data.get("username", ""))[:64], str(data.get("password", ""))
    back = safe_next(request, data.get("next"))  # checked again: the form is the client's to change
    key = f"{client_address(request)}|{user}"
    blocked = portal.login_limit.blocked(key)
    # the right password always gets in
    if not portal.check_password(user, password):
        portal.login_limit.fail(key)
        if blocked:
            return PlainTextResponse("too many failed logins: wait a few minutes", status_code=429)
        return page(request, "login.html", status=401, user=None, error="wrong user name or password", next=back)
    portal.login_limit.forget(key)
    if not _log_event(portal, "portal.login", user):  # no session for a course that is gone
        named = f" ({portal.course!r})" if portal.course else ""
        raise NotFound(
            f"the course this portal serves{named} has been deleted: there is nothing to log in to",
            where="course",
            fix="restore it from its export (gpuseat course import EXPORT) or serve another course "
            "(gpuseat serve --course KEY)",
        )
    response = go(request, back[len(root(request)) :] if back else "/overview")
    set_cookie(response, request, SESSION_COOKIE, sessions_of(request).issue(user), max_age=SESSION_MAX_AGE_S)
    return response


def _log_event(portal: Portal, action: str, user: str, detail: dict[str, Any] | None = None) -> bool:
    """Log ``action`` for the served course; False when the course was deleted under the running portal
    (its log went with it: a logout still logs out, with a line in the server log instead)."""
    try:
        portal.store.events.log(portal.course_key, action, actor=user, detail=detail)
    except InputError as exc:  # NotFound; "no course yet" when the portal serves "the only course"
        log.info("%s by %s not logged: %s", action, user, exc.message)
        return False
    return True


@router.post("/logout")
def logout(request: Request, user: OrganizerPost) -> Response:
    """End this session."""
    sessions_of(request).end(session_secret(request))
    response = go(request, "/login")
    drop_session_cookie(response, request)
    return response


@router.post("/logout/everywhere")
def logout_everywhere(request: Request, user: OrganizerPost, portal: PortalDep) -> Response:
    """End every session of this organizer (a lost laptop)."""
    n = sessions_of(request).end_all(user)
    _log_event(portal, "portal.logout-all", user, {"sessions": n})
    response = go(request, "/login")
    drop_session_cookie(response, request)
    return response


# -- pages -------------------------------------------------------------------------------------------


@router.get("/overview", response_class=HTMLResponse, dependencies=[Organizer])
def overview(request: Request, portal: PortalDep) -> Response:
    """The course at a glance, with the delivery checklist."""
    from gpuseat.services.delivery import checklist

    ready = checklist(portal.store, portal.course_key)
    return page(request, "overview.html", d=portal.digest(), tab="overview", checklist=ready)


def roster_page(request: Request, portal: Portal, status: int = 200, **ctx: Any) -> Response:
    """The roster (its first rows: a page of 20,000 rows helps nobody and costs seconds to render)."""
    key = portal.course_key
    people = portal.store.roster.participants(key)
    return page(
        request,
        "roster.html",
        status=status,
        tab="roster",
        course=portal.store.courses.get_course(key),
        people=people[:ROSTER_ROWS],
        total=len(people),
        **ctx,
    )


@router.get("/roster", response_class=HTMLResponse, dependencies=[Organizer])
def roster(request: Request, portal: PortalDep) -> Response:
    """The roster page."""
    return roster_page(request, portal)


@router.post("/roster/import")
def roster_import(request: Request, data: Form, user: OrganizerPost, portal: PortalDep) -> Response:
    """A roster CSV (at most 2 MiB, UTF-8): what changed, or one message for what is wrong."""
    upload = data.get("file")
    ctx: dict[str, Any] = {}
    if upload is None or isinstance(upload, str) or not upload.filename:
        ctx["error"] = "choose a CSV file to import"
    else:
        raw = upload.file.read(MAX_UPLOAD + 1)
        name = clean(Path(upload.filename).name[:120], one_line=True)  # the import's label, in the events log too
        try:
            if len(raw) > MAX_UPLOAD:
                raise InputError("the file is larger than 2 MiB", where=name, fix="split the roster")
            try:
                text = raw.decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                raise InputError(f"not UTF-8 text (byte {exc.start})", where=name, fix="save as UTF-8 CSV") from None
            report = portal.import_roster(text, where=name, actor=user)
            ctx["notice"] = (
                f"imported {name}: {report.added} added, {report.updated} updated, {report.unchanged} unchanged"
                + (f", {len(report.absent)} no longer listed (kept)" if report.absent else "")
                + (f"; kept the key set since by {', '.join(report.own_keys)}" if report.own_keys else "")
            )
            ctx["changes"] = report.changes
        except InputError as exc:
            ctx["error"] = exc.message
    return roster_page(request, portal, status=400 if ctx.get("error") else 200, **ctx)


@router.post("/roster/remove")
def roster_remove(request: Request, data: Form, user: OrganizerPost, portal: PortalDep) -> Response:
    """A participant who dropped out: the first POST answers the roster with what would go (the store's dry run)
    and a reason field; the second (``confirm=yes``) takes them off the course, as ``gpuseat roster remove`` does."""
    from gpuseat.services.leaving import removal_preview

    who = str(data.get("participant", "")).strip()
    reason = str(data.get("reason", "")).strip() or None  # blank: the store's own reason
    key, confirmed = portal.course_key, data.get("confirm") == "yes"

    def ask(found: list[dict[str, Any]], **ctx: Any) -> Response:
        asking = {"participant": found[0]["participant"], "preview": removal_preview(found, key), "reason": reason}
        return roster_page(request, portal, removing=asking, **ctx)

    try:
        found = portal.store.roster.remove_participants(key, [who], reason=reason, actor=user, dry_run=not confirmed)
    except InputError as exc:
        if exc.where != "reason":
            return roster_page(request, portal, status=400, error=exc.message)
        try:  # a reason the store refuses: the question again, with the reason to fix
            return ask(portal.store.roster.remove_participants(key, [who], dry_run=True), status=400, error=exc.message)
        except InputError as again:
            return roster_page(request, portal, status=400, error=again.message)
    if not confirmed:
        return ask(found)
    (r,) = found
    notice = f"removed {r['participant']}" + (f" (released seat {r['seat']})" if r["seat"] else "")
    return roster_page(request, portal, notice=notice + ": their access link no longer opens anything")


def seats_page(request: Request, portal: Portal, status: int = 200, **ctx: Any) -> Response:
    """The seats page: a fixed handful of queries, never one per seat."""
    d = portal.seats_page()
    free = [r.seat.key for r in d.seats if r.seat.participant is None and r.seat.state != "released"]
    waiting = [p.key for p in d.participants if p.seat is None]
    return page(request, "seats.html", status=status, tab="seats", d=d, free=free, waiting=waiting, ways=d.ways, **ctx)


@router.get("/seats", response_class=HTMLResponse, dependencies=[Organizer])
def seats(request: Request, portal: PortalDep) -> Response:
    """The seats page."""
    return seats_page(request, portal)


@router.get("/seats/live.json", dependencies=[Organizer])
def seats_live(portal: PortalDep) -> Response:
    """Polled by the open Seats page: the same few queries, not the whole digest."""
    d = portal.seats_page()
    return JSONResponse(
        {
            "seats": [
                {
                    "seat": r.seat.key,
                    "participant": r.seat.participant,
                    "state": r.seat.state,
                    "live": r.live.to_dict() if r.live else None,
                    "last_active": r.last_active,
                }
                for r in d.seats
            ]
        },
        headers={"cache-control": "no-store"},
    )


@router.post("/seats/action")
def seat_action(request: Request, data: Form, user: OrganizerPost, portal: PortalDep) -> Response:
    """Assign all, assign, move or release; the page again with what happened (or why not)."""
    action = str(data.get("action", ""))
    who, seat = str(data.get("participant", "")).strip(), str(data.get("seat", "")).strip()
    key = portal.course_key
    try:
        if action == "assign-all":
            rep = portal.store.seats.assign_all(key, partial=True, actor=user)
            notice = f"assigned {len(rep.assigned)} seats" + (
                f"; no seat for {', '.join(rep.unassigned)}" if rep.unassigned else ""
            )
        elif action == "assign":
            portal.store.seats.assign(key, who, seat, actor=user)
            notice = f"{who} now holds seat {seat}"
        elif action == "move":
            portal.store.seats.move(key, who, seat, actor=user)
            notice = f"{who} moved to seat {seat}"
        elif action == "release":
            if seat and who:  # the page's button names the holder it showed: a page out of date releases nobody else
                held = portal.store.seats.get_seat(key, seat).participant
                if held != who:
                    now = f"held by {held}" if held else "free"
                    msg = f"seat {seat} is {now}, not {who}'s: nothing released (the page was out of date)"
                    return seats_page(request, portal, status=409, error=msg)
                seat = ""  # release the holder's seat (the same one, unless they moved since this read)
            done = portal.store.seats.release(key, seat=seat or None, participant=None if seat else who, actor=user)
            notice = (
                f"released seat {done.seat} of {done.participant} (undo: assign {done.participant} to {done.seat})"
                if done
                else "nothing to release"
            )
        else:
            raise InputError(f"unknown action {action[:20]!r}", where="action", fix="use the page's buttons")
    except InputError as exc:
        return seats_page(request, portal, status=400, error=exc.message)
    return seats_page(request, portal, notice=notice)


@router.post("/seats/connect")
def seat_connect(request: Request, data: Form, user: OrganizerPost, portal: PortalDep) -> Response:
    """A seat's way in, typed by the organizer (ssh line, jump host, URL, note)."""
    from gpuseat.services.delivery import build_access

    value = {k: str(data.get(k, "")).strip() or None for k in ("seat", "ssh", "jump", "url", "note")}
    try:
        seat = portal.store.seats.get_seat(portal.course_key, value["seat"] or "")
        if value["ssh"] and value["url"]:  # a way in is one of them: the URL would be dropped unsaid
            raise InputError("an SSH line and a URL both given", where="SSH, URL", fix="give one of them")
        notes = [value["note"]] if value["note"] else []
        made = build_access(
            value["ssh"], value["url"], value["jump"], notes, None, seat.device_uuid, server_name=seat.host
        )
        portal.store.delivery.record_delivery(seat.course, seat.key, access=made, actor=user)
    except InputError as exc:
        return seats_page(request, portal, status=400, error=exc.message)
    return seats_page(request, portal, notice=f"seat {seat.key}: way in saved")


@router.get("/alerts", response_class=HTMLResponse, dependencies=[Organizer])
def alerts(request: Request, portal: PortalDep) -> Response:
    """Idle seats, foreign processes and other alerts."""
    return page(request, "alerts.html", tab="alerts", d=portal.digest())


@router.get("/bench", response_class=HTMLResponse, dependencies=[Organizer])
def bench(request: Request, portal: PortalDep) -> Response:
    """Benchmark results per seat."""
    return page(request, "bench.html", tab="bench", d=portal.digest())


@router.get("/hours", dependencies=[Organizer])
def hours_page(request: Request, portal: PortalDep) -> Response:
    """Seat hours per participant and the course's policy."""
    rows, policy = hour_rows(portal)
    return page(request, "hours.html", tab="hours", rows=rows, policy=policy)


@router.get("/hours.csv", dependencies=[Organizer])
def hours_csv(portal: PortalDep) -> Response:
    """Seat hours per participant, as a CSV."""
    rows, _policy = hour_rows(portal)
    return download(
        csv_text(SEAT_HOURS_CSV_COLUMNS, ([r.get(c) for c in SEAT_HOURS_CSV_COLUMNS] for r in rows)), "seat-hours.csv"
    )


@router.get("/seats.csv", dependencies=[Organizer])
def seats_csv(portal: PortalDep) -> Response:
    """Every seat, as a CSV: the same columns and rows as ``gpuseat seats export --format csv``."""
    rows = seats_csv_rows(portal.store.seats.seats(portal.course_key))
    return download(csv_text(SEATS_CSV_COLUMNS, ([r[c] for c in SEATS_CSV_COLUMNS] for r in rows)), "seats.csv")


@router.get("/roster.csv", dependencies=[Organizer])
def roster_csv(portal: PortalDep) -> Response:
    """The roster, as a CSV."""
    rows = portal.store.roster.participants(portal.course_key)
    return download(
        csv_text(ROSTER_DOWNLOAD_COLUMNS, ([getattr(p, c) for c in ROSTER_DOWNLOAD_COLUMNS] for p in rows)),
        "roster.csv",
    )


# -- access links ------------------------------------------------------------------------------------


@router.get("/links", response_class=HTMLResponse, dependencies=[Organizer])
def links(request: Request, portal: PortalDep) -> Response:
    """Who has a link, who used it."""
    return page(request, "links.html", tab="links", status_rows=portal.store.tokens.token_status(portal.course_key))


@router.post("/links")
def links_action(request: Request, data: Form, user: OrganizerPost, portal: PortalDep) -> Response:
    """Issue (also the mail merge), rotate or revoke links; the new ones shown once, or as a CSV."""
    action, who = str(data.get("action", "")), str(data.get("participant", "")).strip()
    people = [who] if who else None
    key = portal.course_key
    if action == "issue":  # links for those without one; sent links stay valid
        issued = portal.store.tokens.issue_tokens(key, people, actor=user)
        notice = f"issued {len(issued)} new links" + (
            "" if issued else " (everyone already has one: rotate a participant's link to replace it)"
        )
    elif action == "rotate":
        issued = portal.store.tokens.rotate_tokens(key, people, actor=user)
        notice = f"rotated {len(issued)} links: the old ones no longer open anything"
    elif action == "revoke":
        issued = []
        notice = f"revoked {portal.store.tokens.revoke_tokens(key, people, actor=user)} links"
    else:
        raise InputError(f"unknown action {action[:20]!r}", where="action", fix="use the page's buttons")
    rows = {p.key: p for p in portal.store.roster.participants(key)}
    base = portal.public_url(root(request))
    fresh = [
        {
            "participant": t.participant,
            "name": rows[t.participant].name if t.participant in rows else "",
            "email": rows[t.participant].email if t.participant in rows else "",
            "link": t.link(base),
        }
        for t in issued
    ]
    if data.get("format") == "csv":
        cols = ["participant", "name", "email", "link"]
        return download(csv_text(cols, ([f[c] for c in cols] for f in fresh)), "access-links.csv")
    return page(
        request,
        "links.html",
        tab="links",
        fresh=fresh,
        notice=notice,
        status_rows=portal.store.tokens.token_status(key),
    )
