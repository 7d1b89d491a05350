"""Self-service after day one on the host engine, from the participant's side: each request is made on the
participant's page (their link, the page's own form) and its effect checked on the machine by logging in
as the participant (a real sshd, real accounts, ``gpuseat apply``).

A request made and then overtaken by the organizer (a move, a release) before the agent came by acts only on
the seat its participant holds when it is carried out, never on the seat they left (now someone else's),
and ends with a reason their page shows.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .hostlab import Lab
from .test_agent import MIG, _seat_of
from .test_selfservice import _apply, _ready

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@contextmanager
def _page(db: str, who: str) -> Iterator[Callable[..., Any]]:
    """``who``'s page in the portal (the ASGI app): a function that presses one of its forms, as the page
    shows it (its CSRF token and seat field), with ``fields`` added; it answers the response."""
    from fastapi.testclient import TestClient

    from gpuseat.catalog.bundle import load_catalog
    from gpuseat.store import open_store
    from gpuseat.web.app import Portal, create_app

    store = open_store(db)
    token = {t.participant: t.token for t in store.tokens.issue_tokens("lab")}[who]
    portal = Portal(store, load_catalog(), "lab", link_days_after_end=None)
    try:
        with TestClient(create_app(portal)) as client:

            def press(**fields: str) -> Any:
                if not fields:
                    return client.get(f"/t/{token}")
                page = client.get(f"/t/{token}").text
                seat = re.search(r'name="seat" value="([^"]*)"', page)
                data = {"csrf": CSRF.search(page).group(1), **({"seat": seat.group(1)} if seat else {}), **fields}  # type: ignore[union-attr]
                return client.post(f"/t/{token}/seat", data=data, follow_redirects=False)

            yield press
    finally:
        store.close()


def _new_key(lab: Lab, who: str) -> Path:
    fresh = lab.root / "people" / f"{who}-new"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(fresh)], check=True)
    return fresh


def _requests_on_page(press: Callable[..., Any]) -> list[str]:
    """The lines of *Your requests* on the participant's page, oldest first."""
    import html

    page = press().text
    return [html.unescape(x) for x in re.findall(r'<li class="state \w+" data-request="\d+">([^<]*)</li>', page)][::-1]


def test_requests_overtaken_by_a_move_touch_neither_the_left_seat_nor_its_new_holder(
    hostcourse: tuple[Lab, str], cli: Callable[..., Any], tmp_path: Path
) -> None:
    """Ann asks for a reset, a stop and a new key on her page; before the agent comes by, the organizer moves
    her to another seat and gives hers to Ben. Ben's home, processes and login are untouched; Ann's home is
    not reset, her seat not stopped (she did not ask it of this seat); her new key is in, the old one out; her
    page says what became of each request."""
    lab, db = hostcourse
    _ready(cli, lab, db, tmp_path)
    by_uuid = _seat_of(cli, db)
    left, other = by_uuid[MIG[0]], by_uuid[MIG[2]]
    assert lab.ssh("ann", "echo mine > kept.txt").returncode == 0
    assert lab.ssh("ben", "echo his > kept.txt").returncode == 0
    fresh = _new_key(lab, "ann")
    with _page(db, "ann") as press:
        assert press(action="reset", confirm="reset").status_code == 303
        assert press(action="stop").status_code == 303
        assert press(action="key", key=fresh.with_suffix(".pub").read_text().strip()).status_code == 303
        assert cli("seats", "move", "--participant", "ann", "--seat", other, "--db", db).code == 0
        assert cli("seats", "move", "--participant", "ben", "--seat", left, "--db", db).code == 0
        _apply(cli, db)
        assert lab.ssh("ben", "cat kept.txt").stdout == "his\n"
        assert lab.ssh("ann", "cat kept.txt", key=fresh).stdout == "mine\n"  # not reset, not stopped
        assert lab.ssh("ann", "true").returncode == 255  # the old key is out
        said = _requests_on_page(press)
    assert said == [
        "reset: failed (ann holds seat-01 no more)",
        "stop: failed (ann holds seat-01 no more)",
        "key: done (stored: your key is installed on the seat you hold now (or get next) if that seat takes an SSH"
        " key; you left seat-01 before it was installed there)",
    ], said
