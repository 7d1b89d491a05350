"""`gpuseat apply --dry-run` on the 24-person example (examples/h200-lab): the plan of both engines, every
participant named, nothing changed — from an organizer's laptop with no GPU and no cloud credentials."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LAB = Path(__file__).resolve().parents[2] / "examples" / "h200-lab"


def test_dry_run_plans_the_24_person_lab_and_changes_nothing(tmp_path: Path, cli: Any) -> None:
    db = f"sqlite:///{tmp_path / 'c.db'}"
    for args in (
        ("course", "create", LAB / "course.toml", "--key", "h200", "--plan-option", "1"),
        ("roster", "import", LAB / "roster.csv"),
        ("seats", "add", "--inventory", LAB / "h200-2x.toml", "--mode", "mig", "--profile", "1g.18gb",
         "--engine", "host", "--group", "server"),
        ("seats", "add", "--cloud"),
        ("seats", "assign"),
    ):  # fmt: skip
        r = cli(*args, "--db", db)
        assert r.code == 0, (args, r.err)
    from gpuseat.store import open_store

    with open_store(db) as store:
        before = store.agents.events_head()
    text = cli("apply", "--dry-run", "--db", db)
    assert text.code == 0, text.err
    assert "course h200 · host on h200-2x:" in text.out and "course h200 · skypilot" in text.out
    assert "planned from the store alone" in text.out  # this machine is not the GPU server, and says so
    assert "would run: sky.launch gs-h200-cloud-01" in text.out
    people = [line.split(",")[0] for line in (LAB / "roster.csv").read_text().splitlines()[1:]]
    as_json = json.loads(cli("apply", "--dry-run", "--format", "json", "--db", db).out)
    assert as_json["dry_run"] is True
    planned_for = {s["participant"] for p in as_json["plans"] for s in p["steps"] if s["participant"]}
    assert len(planned_for) == 24 == len(people)
    assert {p["engine"] for p in as_json["plans"]} == {"host", "skypilot"}
    with open_store(db) as store:
        assert store.agents.events_head() == before, "a dry run writes nothing"
        assert all(s.state == "planned" for s in store.seats.seats("h200"))


def test_a_dry_run_that_cannot_plan_exits_2_and_names_the_fix(tmp_path: Path, cli: Any) -> None:
    """A plan the store's data prevents (Slurm seats before `gpuseat slurm config`) is the same error in a dry
    run as in `apply` (exit 2, the fix named): a pre-flight `apply --dry-run` exited 0 on it."""
    db = f"sqlite:///{tmp_path / 'c.db'}"
    inventory = LAB.parent / "ibm-2xM60.toml"
    for args in (
        ("course", "create", LAB.parent / "course-2016.toml", "--key", "dl"),
        ("seats", "add", "--inventory", inventory, "--mode", "passthrough", "--engine", "slurm"),
    ):
        assert cli(*args, "--db", db).code == 0, args
    r = cli("apply", "--dry-run", "--db", db)
    assert r.code == 2, (r.out, r.err)
    assert "cannot plan" in r.out and "gpuseat slurm config" in r.err, r.err
    assert r.err.count("To fix:") == 1, r.err
