"""Which ``[policy]`` stops an engine carries out is a fact of its registry spec (``policy_stops``), the one
source that ``gpuseat apply``'s note (:func:`gpuseat.engines.idle.unenforced`) reads: every engine answers
it, the built-in ones as their code does, and the note names exactly the stops an engine's spec leaves out,
a plug-in engine's included."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuseat.engines import idle, registry
from gpuseat.engines.apply import course_state
from gpuseat.store import CourseStore

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuseat" / "engines"
POLICY = "\n[policy]\nidle_minutes = 30\nnever_connected_hours = 48\nquota_hours = 40\n"
#: the rule that carries out each stop, called from an engine's own package
RULE = {"idle_minutes": "idle_step(", "never_connected_hours": "never_connected_step("}


@pytest.mark.parametrize("name", registry.names())
def test_every_engine_spec_says_which_stops_it_carries_out(name: str) -> None:
    spec = registry.spec(name)
    assert isinstance(spec.policy_stops, tuple) and set(spec.policy_stops) <= set(registry.POLICY_STOPS)
    if spec.target is None:  # manual: nobody delivers its seats, nothing is stopped
        assert spec.policy_stops == ()
        return
    assert "quota_hours" in spec.policy_stops, "every delivering engine stops a seat at 0 h (engines/hours.py)"
    code = "".join(p.read_text() for p in (SRC / name).glob("*.py"))
    for field, call in RULE.items():
        assert (field in spec.policy_stops) == (call in code), f"{name}: {field} in its spec, {call} in its code"


def _seated(store: CourseStore, engines: list[str]) -> None:
    text = store.courses.course_text("lab") + POLICY  # type: ignore[attr-defined]
    store.courses.set_course_text("lab", text, changes=[])  # type: ignore[attr-defined]
    seats = [{"key": f"s-{n}", "kind": registry.spec(n).kinds[0], "engine": n, "host": "gpu01"} for n in engines]
    store.seats.add_seats("lab", seats)


def _named(lines: list[str]) -> set[str]:
    return {m.group(1) for line in lines if (m := re.search(r"\[policy\] (\w+)\)", line))}


def test_the_apply_note_names_exactly_the_stops_an_engine_lacks(store: CourseStore) -> None:
    every = list(registry.delivering())
    _seated(store, every)
    state = course_state(store, "lab")
    for name in every:
        lines = idle.unenforced(store, state, name, None)
        assert _named(lines) == set(registry.POLICY_STOPS) - set(registry.spec(name).policy_stops), (name, lines)
        assert all(f"on {name} seats (s-{name})" in line for line in lines), lines
    (idle_note,) = [x for x in idle.unenforced(store, state, "slurm", None) if "idle_minutes" in x]
    assert "only host and JupyterHub seats are stopped when idle" in idle_note


def test_a_plug_in_engine_is_named_by_what_its_spec_says(store: CourseStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plug-in engine that carries out every stop is named for none, and the others' notes name it among
    those that do; one that declares none is named for all three."""
    builtin = registry.specs()
    doer = registry.EngineSpec("mycloud", ("cloud",), "x:Y", None, "d", policy_stops=registry.POLICY_STOPS)
    idler = registry.EngineSpec("othercloud", ("cloud",), "x:Z", None, "d")
    monkeypatch.setattr(registry, "specs", lambda: {**builtin, "mycloud": doer, "othercloud": idler})
    _seated(store, ["mycloud", "othercloud", "slurm"])
    state = course_state(store, "lab")
    assert idle.unenforced(store, state, "mycloud", None) == []
    assert _named(idle.unenforced(store, state, "othercloud", None)) == set(registry.POLICY_STOPS)
    notes = idle.unenforced(store, state, "slurm", None)
    assert "only host, JupyterHub and mycloud seats are stopped when idle" in notes[0], notes
