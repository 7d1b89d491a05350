"""``/course/settings``: the organizer sees and edits the course's ``[policy]`` (seat-hour quota, idle stop,
readiness lead, never-connected stop) and each group's overrides.

The form is checked field by field with the course file's own model; a wrong field (or one the form
has no input for, or one sent twice) is named on the form again (HTTP 400) and nothing is stored. A
saved edit replaces the policy tables of the stored course file (which the agent reads) with one events
row per field that changed.
"""

from __future__ import annotations

import hashlib

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

#: the form's hidden field naming the stored course file it was made from (:func:`version`)
VERSION_FIELD = "file"


def version(text: str) -> str:
    """The stored course file's text as the form carries it: a save made from a page older than a change of the
    file since (a ``course update``, another tab's save) is refused, as it would put back the values it showed."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def settings_page(request: Request, edit: Edit, made_from: str, status: int = 200, **ctx: str) -> Response:
    """The form, showing ``edit`` (what is stored, or what was typed) and its per-field messages; ``made_from``:
    the :func:`version` of the stored file its values are of."""
    return page(
        request,
        "settings.html",
        status=status,
        tab="settings",
        edit=edit,
        fields=FIELDS,
        integers=INTEGERS,
        shown=shown,
        version_field=VERSION_FIELD,
        version=made_from,
        **ctx,
    )


@router.get("/course/settings", response_class=HTMLResponse, dependencies=[Depends(need_organizer)])
def course_settings(request: Request, portal: PortalDep) -> Response:
    """The course's policy as the course file sets it (blank: not set, the default applies)."""
    text = portal.store.courses.course_text(portal.course_key)
    return settings_page(request, current(portal.store.courses.course_file(portal.course_key)), version(text))


@router.post("/course/settings")
def save_course_settings(request: Request, data: Form, user: OrganizerPost, portal: PortalDep) -> Response:
    """Check every field; store the new policy only when all are right (one events row per change)."""
    key = portal.course_key
    base = portal.store.courses.course_text(key)
    course = portal.store.courses.course_file(key)
    items = [(n, v) for n, v in data.multi_items() if n != VERSION_FIELD]
    made_from = [v for n, v in data.multi_items() if n == VERSION_FIELD]  # none: a script's post, as before
    form, wrong = form_fields(course, items)
    edit = parse(course, form)
    edit.errors |= wrong
    if made_from and made_from != [version(base)]:
        return settings_page(
            request,
            current(course),
            version(base),
            status=409,
            error="nothing was saved: the course file was changed since this page was loaded (gpuseat course "
            "update, or a save in another tab): the form now shows the stored values; make the change again",
        )
    if edit.errors:
        error = "nothing was saved: " + "; ".join(edit.errors.values())
        return settings_page(request, edit, version(base), status=400, error=error)
    changed = changes(current(course), edit)
    if not changed:
        return settings_page(request, edit, version(base), notice="nothing changed")
    try:
        text, _checked = rewritten(base, edit)
        portal.store.courses.set_course_text(key, text, changes=changed, base=base, actor=user)
    except InputError as exc:
        return settings_page(request, edit, version(base), status=400, error="nothing was saved: " + exc.message)
    return settings_page(
        request,
        current(portal.store.courses.course_file(key)),
        version(text),
        notice=f"saved {len(changed)} change" + ("" if len(changed) == 1 else "s"),
    )
