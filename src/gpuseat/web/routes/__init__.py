"""The portal's routes by concern, one ``APIRouter`` named ``router`` per module (wired by
:func:`gpuseat.web.app.create_app`).

The parameters the routes share, as ``Annotated`` types (FastAPI's own way to name a dependency once),
so a route's signature says in one line what it takes: ``def seat_action(request: Request, data: Form,
user: OrganizerPost, portal: PortalDep)``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from starlette.datastructures import FormData

from gpuseat.store import ParticipantView
from gpuseat.web.deps import get_portal, organizer_form, participant_form, read_form
from gpuseat.web.portal import Portal

#: the app's portal
PortalDep = Annotated[Portal, Depends(get_portal)]
#: the POST's form, read once under the body cap
Form = Annotated[FormData, Depends(read_form)]
#: the organizer who sent the form (origin checked, CSRF token bound to their session)
OrganizerPost = Annotated[str, Depends(organizer_form)]
#: the link's participant, for a POST whose CSRF token is bound to that link
LinkPost = Annotated[ParticipantView, Depends(participant_form)]
