"""The participant's page after the course's access hours close: the engines lock the seat then (ssh refused), and
the page said *running* with its ssh line and nothing else. It now says access is closed, why, and (inside the
course's days) that it opens again, from the one rule the engines apply (``gpuseat.core.window.access_now``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuseat.core.course import Course
from gpuseat.files import parse_toml, validate

from .served import Served


def _schedule(served: Served, schedule: str) -> None:
    """The course file's ``[schedule]`` replaced, stored as ``gpuseat course update`` stores it."""
    text = f'name = "Lab"\nparticipants = 2\n\n[needs]\nmin_gpu_memory_gb = 16\nisolation = "partitioned"\n\n{schedule}'
    course = validate(Course, parse_toml(text, where="lab.toml"), where="lab.toml", text=text)
    served.store.courses.update_course("lab", course, text)


def _closed(served: Served) -> str | None:
    page = served.client.get(f"/t/{served.links['ann']}")
    assert page.status_code == 200 and 'id="seat-key"' in page.text, page.text[:500]
    if 'id="access-closed"' not in page.text:
        return None
    return page.text.split('id="access-closed"', 1)[1].split("</p>", 1)[0]


def test_the_page_says_access_is_closed_when_the_engines_lock_the_seat(served: Served) -> None:
    now = datetime.now(UTC)
    opens = (now + timedelta(hours=6)).replace(minute=0, second=0, microsecond=0)
    hours = f'"{opens:%H:%M}-{opens + timedelta(hours=1):%H:%M}"'
    days = f"[schedule]\nstart = {(now - timedelta(days=1)).date()}\ndays = 4\n"
    _schedule(served, days + f"access = {hours}\n")  # today's window is hours away: closed now
    said = _closed(served)
    assert said is not None and "outside the course&#39;s access hours (next opens" in said, said
    assert "logging in is refused until then, and your files stay" in said

    _schedule(served, days + 'access = "24/7"\n')  # open around the clock: nothing said
    assert _closed(served) is None

    past = f"[schedule]\nstart = {(now - timedelta(days=10)).date()}\ndays = 3\naccess = {hours}\n"
    _schedule(served, past)  # its days are over
    said = _closed(served)
    assert said is not None and "the course&#39;s schedule has ended" in said and "files stay" not in said


def test_the_seats_page_says_access_is_closed_beside_a_running_seat(served: Served) -> None:
    """The organizer's Seats page showed *running* for seats the engines lock (the course's days are over); it now
    says access is closed under the state, as ``gpuseat seats status``' note does."""
    served.store.seats.set_seat_state("lab", "mig-01", "running", reason="ann can log in")
    assert served.login().status_code == 303
    page = served.client.get("/seats")
    assert page.status_code == 200 and "access closed" not in page.text  # open now: nothing said
    now = datetime.now(UTC)
    _schedule(served, f'[schedule]\nstart = {(now - timedelta(days=10)).date()}\ndays = 3\naccess = "09:00-17:00"\n')
    page = served.client.get("/seats")
    row = page.text.split('<tr data-seat="mig-01">', 1)[1].split("</tr>", 1)[0]
    assert "running" in row and "access closed: the course&#39;s schedule has ended" in row, row
