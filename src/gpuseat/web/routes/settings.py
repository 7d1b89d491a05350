"""``/course/settings``: the organizer sees and edits the course's ``[policy]`` (seat-hour quota, idle stop,
readiness lead, never-connected stop) and each group's overrides.

The form is checked field by field with the course file's own model; a wrong field (or one the form
has no input for, or one sent twice) is named on the form again (HTTP 400) and nothing is stored. A
saved edit replaces the policy tables of the stored course file (which the agent reads) with one events
row per field that changed.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from gpuseat.errors import InputError
from gpuseat.web.course_settings import (
    FIELDS,
    INTEGERS,
    Edit,
    changes,
    current,
    form_fields,
    parse,
    rewritten,
    shown,
)
from gpuseat.web.deps import need_organizer
from gpuseat.web.pages import page
from gpuseat.web.routes import Form, OrganizerPost, PortalDep

router = APIRouter()


def settings_page(request: Request, edit: Edit, status: int = 200, **ctx: str) -> Response:
    """The form, showing ``edit`` (what is stored, or what was typed) and its per-field messages."""
    return page(
        request,
        "settings.html",
        status=status,
        tab="settings",
        edit=edit,
        fields=FIELDS,
        integers=INTEGERS,
        shown=shown,
        **ctx,
    )


@router.get("/course/settings", response_class=HTMLResponse, dependencies=[Depends(need_organizer)])
def course_settings(request: Request, portal: PortalDep) -> Response:
    """The course's policy as the course file sets it (blank: not set, the default applies)."""
    return settings_page(request, current(portal.store.courses.course_file(portal.course_key)))


@router.post("/course/settings")
def save_course_settings(request: Request, data: Form, user: OrganizerPost, portal: PortalDep) -> Response:
    """Check every field; store the new policy only when all are right (one events row per change)."""
    key = portal.course_key
    course = portal.store.courses.course_file(key)
    form, wrong = form_fields(course, data.multi_items())
    edit = parse(course, form)
    edit.errors |= wrong
    if edit.errors:
        return settings_page(request, edit, status=400, error="nothing was saved: " + "; ".join(edit.errors.values()))
    changed = changes(current(course), edit)
    if not changed:
        return settings_page(request, edit, notice="nothing changed")
    try:
        base = portal.store.courses.course_text(key)
        text, _checked = rewritten(base, edit)
        portal.store.courses.set_course_text(key, text, changes=changed, base=base, actor=user)
    except InputError as exc:
        return settings_page(request, edit, status=400, error="nothing was saved: " + exc.message)
    return settings_page(
        request,
        current(portal.store.courses.course_file(key)),
        notice=f"saved {len(changed)} change" + ("" if len(changed) == 1 else "s"),
    )
