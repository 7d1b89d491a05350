"""A release written while an agent's pass runs stops that pass: the rest of its plan may still grant the released
person their seat (a 1,000-seat first pass takes minutes). The agent looks for such a row once a second between
steps, stops, and plans again at once, revokes first; a row that takes nothing away (a seat check) stops nothing.
A dry-run host agent on SQLite and PostgreSQL; the release is written from inside the pass, by its first command."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuseat.engines.agent import STALE_LOOK_S, Agent, AgentOptions
from gpuseat.engines.base import STOPPED
from gpuseat.engines.runner import Runner
from gpuseat.store import CourseStore

from .test_after_day_one_clock import Clock
from .test_agent_restore import _seats


class _Midway(Runner):
    """A dry-run Runner that, as the pass's first step begins, lets ``then`` write to the store and moves the clock
    on (a dry pass planned from the store runs no command: ``take`` is what every step calls)."""

    def __init__(self, clock: Clock, then: Callable[[], None]) -> None:
        super().__init__(dry_run=True)
        self.clock, self.then, self.done = clock, then, False

    def take(self) -> Any:
        if not self.done:
            self.done = True
            self.then()
            self.clock.t += STALE_LOOK_S + 0.1
        return super().take()


def _lab(store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]) -> None:
    """Course ``lab``: ann and ben, each holding a host seat on gpu1."""
    _seats(cli, url, tmp_path, "lab", 1)
    _seats(cli, url, tmp_path, "lab", 2)
    (tmp_path / "roster.csv").write_text("key,name,email\nann,Ann,ann@example.org\nben,Ben,ben@example.org\n")
    store.roster.import_roster("lab", tmp_path / "roster.csv")
    store.seats.assign_all("lab")


def _grants(result: Any, who: str, state: str) -> list[str]:
    return [
        f"{o.step.action} {o.step.target}"
        for r in result.reports
        for o in r.outcomes
        if o.step.phase == "grant" and o.step.participant == who and o.state == state
    ]


def test_a_release_under_a_pass_stops_it_and_the_next_pass_grants_nothing_to_the_released(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    _lab(store, url, tmp_path, cli)
    clock, said = Clock(), []
    runner = _Midway(clock, lambda: store.seats.release("lab", participant="ben"))
    agent = Agent(store, AgentOptions(engine="host", host="gpu1", resync_s=3600), runner=runner,
                  say=said.append, holder="gpu1:1:abc", clock=clock)  # fmt: skip
    first = agent.tick()
    assert first is not None and runner.done
    assert _grants(first, "ben", "skipped"), "the pass went on granting after ben's release"
    assert all(o.message == STOPPED for r in first.reports for o in r.outcomes if o.state == "skipped")
    assert any("may take away what this pass grants" in line for line in said), said
    clock.t += 0.01
    again = agent.tick()  # at once, not at the next change or resync
    assert again is not None and again.reports
    planned = [s for p in again.planned if p.changes for s in p.changes.steps]
    assert planned and not [s for s in planned if s.phase == "grant" and s.participant == "ben"]
    assert _grants(again, "ann", "done"), "ann's seat was not granted by the pass planned again"


def test_a_row_that_takes_nothing_away_stops_no_pass(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    _lab(store, url, tmp_path, cli)
    clock = Clock()
    (seat, *_rest) = store.seats.seats("lab")
    runner = _Midway(clock, lambda: store.events.log("lab", "seat.check", seat=seat.key, actor="organizer"))
    agent = Agent(store, AgentOptions(engine="host", host="gpu1", resync_s=3600), runner=runner,
                  say=lambda _line: None, holder="gpu1:1:abc", clock=clock)  # fmt: skip
    first = agent.tick()
    assert first is not None and runner.done
    assert not [o for r in first.reports for o in r.outcomes if o.state == "skipped"]


def test_portal_rows_plan_nothing_again(store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]) -> None:
    """An organizer's login and a participant's refused form are events rows anyone can write at will; each planned
    the course again (a pass per page view). They now wake no pass; a release after them does."""
    _lab(store, url, tmp_path, cli)
    clock = Clock()
    agent = Agent(store, AgentOptions(engine="host", host="gpu1", resync_s=3600), runner=Runner(dry_run=True),
                  say=lambda _line: None, holder="gpu1:1:abc", clock=clock)  # fmt: skip
    assert agent.tick() is not None
    for action in ("portal.login", "portal.logout-all", "portal.refused"):
        store.events.log("lab", action, actor="organizer")
    clock.t += 1.0
    assert agent.tick() is None and agent.passes == 1
    store.seats.release("lab", participant="ben")
    clock.t += 1.0
    assert agent.tick() is not None and agent.passes == 2
