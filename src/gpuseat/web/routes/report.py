"""``/report``: the course report, one self-contained HTML file (organizer session)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from gpuseat.web.deps import need_organizer
from gpuseat.web.routes import PortalDep

router = APIRouter()


@router.get("/report", response_class=HTMLResponse, dependencies=[Depends(need_organizer)])
def report(request: Request, portal: PortalDep) -> Response:
    """The report as a page, or as a download with ``?download=1``; its own CSP allows only its inline style."""
    from gpuseat.web.report import render_report, report_csp

    html = render_report(portal.digest(with_alternatives=True))
    headers = {"cache-control": "no-store", "content-security-policy": report_csp(header=True)}
    if request.query_params.get("download") == "1":
        headers["content-disposition"] = f'attachment; filename="report-{portal.course_key}.html"'
    return HTMLResponse(html, headers=headers)
