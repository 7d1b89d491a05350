"""Self-service after day one in the portal (the ASGI app), from the participant's side: two tabs of the same
page, each with its own form, posted at the same moment.

One pending request per action on a seat (docs/policy.md): the second tab's Stop is answered "already
pending", on SQLite (writers take turns) and on PostgreSQL (read committed: each transaction saw no pending
stop of the other, not yet committed, and both were stored).
"""

from __future__ import annotations

import threading
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.orm import Session

from gpuseat.db.models import SeatRequest

from .test_participant_controls import _csrf, _post, served  # noqa: F401 (a fixture)


def test_two_tabs_pressing_stop_at_once_store_one_stop(served: Any) -> None:  # noqa: F811
    """Tab one's stop is written and held just before its commit until tab two has been answered (at most
    1 s: a tab two that waits for tab one's commit is answered after it); tab two's stop is refused."""
    store, client, links = served
    ann = links["ann"]
    tab2 = TestClient(client.app, base_url="http://testserver")
    forms = [_csrf(client, ann), _csrf(tab2, ann)]
    written, answered = threading.Event(), threading.Event()

    def hold_first(session: Session, _ctx: Any) -> None:
        if not written.is_set() and any(isinstance(o, SeatRequest) for o in session.new):
            written.set()
            answered.wait(1.0)

    out: dict[str, Any] = {}
    event.listen(Session, "after_flush", hold_first)
    try:
        first = threading.Thread(target=lambda: out.setdefault("1", _post(client, ann, csrf=forms[0], action="stop")))
        first.start()
        assert written.wait(10)
        second = _post(tab2, ann, csrf=forms[1], action="stop")
        answered.set()
        first.join(10)
    finally:
        event.remove(Session, "after_flush", hold_first)
        tab2.close()
    assert out["1"].status_code == 303, out["1"].text
    assert second.status_code == 400 and "already pending" in second.text, second.text
    assert [(r.action, r.state) for r in store.requests.seat_requests("lab", participant="ann")] == [
        ("stop", "pending")
    ]
