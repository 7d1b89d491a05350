"""The organizer's pages: overview, roster, seats, alerts, benchmarks, links and survey.

Every route is a plain ``def`` (run in a worker thread: store calls never block the event loop) and
starts by asking for the organizer; every POST's form comes through the app's capped ``read_form``
and a CSRF token bound to the session.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.datastructures import FormData

from gpuseat.errors import InputError
from gpuseat.web.limits import MAX_UPLOAD
from gpuseat.web.portal import Portal

Page = Callable[..., HTMLResponse]
ROSTER_ROWS = 1000


def add_organizer_routes(
    app: FastAPI,
    portal: Portal,
    *,
    page: Page,
    need: Callable[[Request], str],
    read_form: Callable[[Request], Awaitable[FormData]],
    organizer_form: Callable[[Request, FormData], str],
    go: Callable[[Request, str], Response],
) -> None:
    """Register the organizer's pages on ``app`` (helpers come from :func:`gpuseat.web.app.create_app`)."""

    def seats_page(request: Request, status: int = 200, **ctx: Any) -> Response:
        d = portal.seats_page()  # a fixed handful of queries, never one per seat
        free = [r.seat.key for r in d.seats if r.seat.participant is None and r.seat.state != "released"]
        waiting = [p.key for p in d.participants if p.seat is None]
        return page(
            request, "seats.html", status=status, tab="seats", d=d, free=free, waiting=waiting, ways=d.ways, **ctx
        )

    @app.get("/overview", response_class=HTMLResponse)
    def overview(request: Request) -> Response:
        need(request)
        from gpuseat.services.delivery import checklist

        ready = checklist(portal.store, portal.course_key)
        return page(request, "overview.html", d=portal.digest(), tab="overview", checklist=ready)

    def roster_page(request: Request, status: int = 200, **ctx: Any) -> Response:
        key = portal.course_key
        people = portal.store.participants(key)
        return page(
            request,
            "roster.html",
            status=status,
            tab="roster",
            course=portal.store.get_course(key),
            people=people[:ROSTER_ROWS],  # a page of 20,000 rows helps nobody and costs seconds to render
            total=len(people),
            **ctx,
        )

    @app.get("/roster", response_class=HTMLResponse)
    def roster(request: Request) -> Response:
        need(request)
        return roster_page(request)

    @app.post("/roster/import")
    def roster_import(request: Request, data: FormData = Depends(read_form)) -> Response:
        user = organizer_form(request, data)
        upload = data.get("file")
        ctx: dict[str, Any] = {}
        if upload is None or isinstance(upload, str) or not upload.filename:
            ctx["error"] = "choose a CSV file to import"
        else:
            raw = upload.file.read(MAX_UPLOAD + 1)
            name = Path(upload.filename).name[:120]
            try:
                if len(raw) > MAX_UPLOAD:
                    raise InputError("the file is larger than 2 MiB", where=name, fix="split the roster")
                try:
                    text = raw.decode("utf-8-sig")
                except UnicodeDecodeError as exc:
                    raise InputError(
                        f"not UTF-8 text (byte {exc.start})", where=name, fix="save as UTF-8 CSV"
                    ) from None
                report = portal.import_roster(text, where=name, actor=user)
                ctx["notice"] = (
                    f"imported {name}: {report.added} added, {report.updated} updated, {report.unchanged} unchanged"
                    + (f", {len(report.absent)} no longer listed (kept)" if report.absent else "")
                )
                ctx["changes"] = report.changes
            except InputError as exc:
                ctx["error"] = exc.message
        return roster_page(request, status=400 if ctx.get("error") else 200, **ctx)

    @app.get("/seats", response_class=HTMLResponse)
    def seats(request: Request) -> Response:
        need(request)
        return seats_page(request)

    @app.get("/seats/live.json")
    def seats_live(request: Request) -> Response:
        need(request)
        d = portal.seats_page()  # polled by the open Seats page: the same few queries, not the whole digest
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

    @app.post("/seats/action")
    def seat_action(request: Request, data: FormData = Depends(read_form)) -> Response:
        user = organizer_form(request, data)
        action = str(data.get("action", ""))
        who, seat = str(data.get("participant", "")).strip(), str(data.get("seat", "")).strip()
        key = portal.course_key
        try:
            if action == "assign-all":
                rep = portal.store.assign_all(key, partial=True, actor=user)
                notice = f"assigned {len(rep.assigned)} seats" + (
                    f"; no seat for {', '.join(rep.unassigned)}" if rep.unassigned else ""
                )
            elif action == "assign":
                portal.store.assign(key, who, seat, actor=user)
                notice = f"{who} now holds seat {seat}"
            elif action == "move":
                portal.store.move(key, who, seat, actor=user)
                notice = f"{who} moved to seat {seat}"
            elif action == "release":
                done = portal.store.release(key, seat=seat or None, participant=None if seat else who, actor=user)
                notice = (
                    f"released seat {done.seat} of {done.participant} (undo: assign {done.participant} to {done.seat})"
                    if done
                    else "nothing to release"
                )
            else:
                raise InputError(f"unknown action {action[:20]!r}", where="action", fix="use the page's buttons")
        except InputError as exc:
            return seats_page(request, status=400, error=exc.message)
        return seats_page(request, notice=notice)

    @app.post("/seats/connect")
    def seat_connect(request: Request, data: FormData = Depends(read_form)) -> Response:
        user = organizer_form(request, data)
        from gpuseat.services.delivery import build_access

        value = {k: str(data.get(k, "")).strip() or None for k in ("seat", "ssh", "jump", "url", "note")}
        try:
            seat = portal.store.get_seat(portal.course_key, value["seat"] or "")
            notes = [value["note"]] if value["note"] else []
            made = build_access(
                value["ssh"], value["url"], value["jump"], notes, None, seat.device_uuid, server_name=seat.host
            )
            portal.store.record_delivery(seat.course, seat.key, access=made, actor=user)
        except InputError as exc:
            return seats_page(request, status=400, error=exc.message)
        return seats_page(request, notice=f"seat {seat.key}: way in saved")

    @app.get("/alerts", response_class=HTMLResponse)
    def alerts(request: Request) -> Response:
        need(request)
        return page(request, "alerts.html", tab="alerts", d=portal.digest())

    @app.get("/bench", response_class=HTMLResponse)
    def bench(request: Request) -> Response:
        need(request)
        return page(request, "bench.html", tab="bench", d=portal.digest())

    @app.get("/links", response_class=HTMLResponse)
    def links(request: Request) -> Response:
        need(request)
        return page(request, "links.html", tab="links", status_rows=portal.store.token_status(portal.course_key))

    @app.get("/survey", response_class=HTMLResponse)
    def survey_results(request: Request) -> Response:
        need(request)
        return page(request, "survey_results.html", tab="survey", d=portal.digest())

    @app.post("/survey")
    def survey_state(request: Request, data: FormData = Depends(read_form)) -> Response:
        user = organizer_form(request, data)
        state = {"open": "open", "close": "closed"}.get(str(data.get("action", "")))
        if state is None:
            raise InputError("unknown survey action", where="action", fix="use the page's buttons")
        portal.surveys.set_state(portal.course_key, state, actor=user)
        return go(request, "/survey")

    @app.post("/survey/template")
    def survey_template(request: Request, data: FormData = Depends(read_form)) -> Response:
        """The editor: new wording for the questions, accepted only while nobody has answered."""
        import tempfile

        from pydantic import ValidationError

        from gpuseat.web.survey_edit import edited, to_toml

        user = organizer_form(request, data)
        key = portal.course_key
        form = {k: v for k, v in data.items() if isinstance(v, str)}
        try:
            template = edited(portal.surveys.template(key), form)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InputError(
                f"{first['msg']} ({where})", where="survey editor", fix="shorten or fill the text"
            ) from None
        with tempfile.TemporaryDirectory(prefix="gpuseat-survey-") as folder:
            path = Path(folder) / f"{template.key}.toml"
            path.write_text(to_toml(template), encoding="utf-8")
            portal.surveys.set_template(key, str(path))
        portal.store.log(key, "survey.template", actor=user, detail={"template": template.key})
        return go(request, "/survey")

    @app.get("/survey.csv")
    def survey_csv(request: Request) -> Response:
        need(request)
        return Response(
            portal.surveys.export_csv(portal.course_key),
            media_type="text/csv; charset=utf-8",
            headers={"content-disposition": 'attachment; filename="survey.csv"', "cache-control": "no-store"},
        )
