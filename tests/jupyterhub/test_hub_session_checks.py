"""Ready before every session on JupyterHub seats (:mod:`gpuseat.engines.sessions`, the host engine's rule),
against the stand-in hub REST API: 10 minutes before a lab session (lead 15) one pass checks each running
seat as its holder, the way ``seats check`` does (a token of theirs, their server started, the GPUs listed
in a kernel; a server that did not run is stopped again), stores the verdict and posts the broken seats to
the course webhook (a real local HTTP receiver); the seat its holder is stopping is not checked, and a
broken seat is checked again only after four minutes.

The stand-in issues tokens and starts servers but has no kernels: the probe's verdict is *broken* with
the hub's answer, as a hub whose single-user servers serve no kernels gives it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote

import httpx
import pytest
from hubcourse import COURSE_TOML, seat_specs
from test_hub_engine_plan import TOKEN, URL, StandInHub, engine_for, spawned

from delivery.test_webhook import Receiver, receiver  # noqa: F401  (the receiver fixture)
from gpuseat.core.roster import RosterText
from gpuseat.engines.apply import course_state
from gpuseat.store import open_store
from session_soon import session_soon

PEOPLE = ("ada", "ben", "cy")


class TokenHub(StandInHub):
    """The stand-in hub, which also issues a user's tokens and starts their server with one."""

    def handle(self, request: httpx.Request) -> httpx.Response:
        parts = unquote(request.url.path).removeprefix("/hub/api/").split("/")
        if parts[0] == "users" and len(parts) >= 3 and parts[2] == "tokens":
            self.calls.append((request.method, request.url.path))
            if request.method == "POST" and request.headers.get("Authorization") == f"token {TOKEN}":
                return httpx.Response(201, json={"token": f"token-of-{parts[1]}", "id": "a1"})
            return httpx.Response(204)
        if request.method == "POST" and parts[0] == "users" and parts[2:] == ["server"]:
            self.calls.append((request.method, request.url.path))
            if request.headers.get("Authorization") != f"token token-of-{parts[1]}":
                return httpx.Response(403, json={"message": "not this user's token"})
            self.run(parts[1])
            return httpx.Response(201)
        return super().handle(request)


def test_before_a_session_each_running_hub_seat_is_checked_as_its_holder_and_the_broken_ones_posted(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    receiver: Receiver,  # noqa: F811
) -> None:
    monkeypatch.setenv("HUB_TEST_TOKEN", TOKEN)
    at, schedule = session_soon()
    head = COURSE_TOML.format(n=3).split("[schedule]")[0]
    (tmp_path / "lab.toml").write_text(f'webhook = "{receiver.url}"\n{head}{schedule}[policy]\nlead_minutes = 15\n')
    store = open_store(f"sqlite:///{tmp_path / 'hub.db'}", create=True)
    try:
        store.courses.create_course(tmp_path / "lab.toml", key="lab", timezone="UTC")
        roster = "name,email,group,unix_user\n" + "".join(f"{p.title()},{p}@example.edu,,{p}\n" for p in PEOPLE)
        store.roster.import_roster("lab", RosterText(roster, where="r.csv"))
        store.seats.add_seats("lab", seat_specs(3))
        for person, seat in zip(PEOPLE, ("mig-1", "mig-2", "mig-3"), strict=True):
            store.seats.assign("lab", person, seat)
            store.seats.set_seat_state("lab", seat, "planned", engine="jupyterhub", reason="a hub seat")
        store.agents.set_engine_settings("lab", "jupyterhub", {"hub_url": URL, "token_env": "HUB_TEST_TOKEN"},
                                         actor="test")  # fmt: skip
        hub = TokenHub(*PEOPLE)
        spawned(store, "ben")  # ben's server runs (on his seat, as the spawn hook records it); ada's does not
        hub.run("ben")
        store.requests.request_seat("lab", "cy", "stop", actor="cy")  # cy stops her seat
        engine = engine_for(store, hub)
        early = engine.plan(course_state(store, "lab", now=at - timedelta(minutes=30)))
        assert "seat.check" not in {s.action for s in early.steps}  # no session near yet

        changes = engine.plan(course_state(store, "lab"))
        checks = [(s.target, s.participant) for s in changes.steps if s.action == "seat.check"]
        assert checks == [("mig-1", "ada"), ("mig-2", "ben")]  # not cy's
        assert [s.action for s in changes.ordered()][-1] == "session.report"
        report = engine.apply(changes)
        assert not report.failed, [o.to_dict() for o in report.failed]
        assert ("POST", "/hub/api/users/ada/server") in hub.calls  # with ada's own token
        assert hub.users["ada"] == {} and "" in hub.users["ben"]  # ada's server stopped again, ben's runs on
        found = store.delivery.readiness_of("lab")
        assert sorted(found) == ["mig-1", "mig-2"]
        assert {k: (v["state"], v["participant"]) for k, v in found.items()} == {
            "mig-1": ("broken", "ada"), "mig-2": ("broken", "ben"),
        }  # fmt: skip
        assert "no kernel on ada's server" in found["mig-1"]["reason"], found["mig-1"]
        body = receiver.wait("session.check")
        assert (body["course"], body["engine"], body["checked"]) == ("lab", "jupyterhub", 2), body
        assert [(b["seat"], b["participant"]) for b in body["broken"]] == [("mig-1", "ada"), ("mig-2", "ben")]
        assert datetime.fromisoformat(body["session_starts"]) == at

        again = engine.plan(course_state(store, "lab"))
        assert not {"seat.check", "session.report"} & {s.action for s in again.steps}, again.steps
        later = engine.plan(course_state(store, "lab", now=datetime.now(UTC) + timedelta(minutes=5)))
        assert [s.target for s in later.steps if s.action == "seat.check"] == ["mig-1", "mig-2"]
    finally:
        store.close()
