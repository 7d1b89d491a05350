"""The course's ``[policy]`` edited on ``/course/settings`` after day one, as the participant's page shows it.

An idle warning (the agent's ``seat.idle.warned``) says the seat stops after the grace period unless it is
used; once the organizer takes ``idle_minutes`` out of the policy, no pass stops the seat for it, and the page
no longer says so. Set again, the rule and its warning are back."""

from __future__ import annotations

from .served import Served

WARNING = "your seat is idle (GPU below 5 % and no SSH activity for 30 min): it stops in 10 min unless you use it"


def _save(served: Served, **fields: str) -> None:
    data = {"csrf": served.csrf("/course/settings"), "policy.quota_hours": "40"}
    r = served.client.post("/course/settings", data=data | {f"policy.{k}": v for k, v in fields.items()})
    assert r.status_code == 200 and "saved 1 change" in r.text, r.text[:2000]


def _warned(served: Served) -> bool:
    page = served.client.get(f"/t/{served.links['ann']}")
    assert page.status_code == 200
    return 'id="idle-warning"' in page.text and WARNING in page.text


def test_an_idle_warning_leaves_the_page_when_idle_minutes_is_taken_out(served: Served) -> None:
    assert served.login().status_code == 303
    _save(served, idle_minutes="30")
    served.store.requests.warn_idle("lab", "ann", "mig-01", WARNING)
    assert _warned(served)
    _save(served, idle_minutes="")
    assert served.store.courses.course_file("lab").policy.idle_minutes is None
    assert not _warned(served), "the page still says the seat stops, but no rule stops it any more"
    _save(served, idle_minutes="30")
    assert _warned(served)
