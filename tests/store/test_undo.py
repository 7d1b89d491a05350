"""Undo: ``seats remove``, ``course archive`` (read-only, links revoked), ``course delete --yes`` (export
first), in the library and the CLI, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import text

from gpuseat.cli import main
from gpuseat.core.roster import RosterText
from gpuseat.errors import InputError, NotFound
from gpuseat.services.survey import SurveyService
from gpuseat.store import CourseStore, SeatSpec, open_store

from .conftest import EXAMPLES


def seats(store: CourseStore, n: int = 4) -> None:
    store.seats.add_seats(None, [SeatSpec(key=f"s{i}", kind="gpu", memory_gb=80) for i in range(n)])


def named_commands_exist(text: str) -> list[str]:
    """What is wrong with each ``gpuseat …`` command a message names (a command or flag that does not exist)."""
    import click
    import typer

    from gpuseat.cli import build_app
    from test_architecture_doc import _check, _words

    root = typer.main.get_command(build_app())
    assert isinstance(root, click.Group)
    named = [re.split(r"[`);]", part)[0] for part in text.split("gpuseat ")[1:]]
    assert named, f"no command named: {text}"
    return [w for line in named for w in _check(root, _words(line))]


def test_seats_remove_planned_released_or_failed_only_all_or_nothing(course2016: CourseStore) -> None:
    store = course2016
    seats(store)
    who = store.roster.participants()[0].key
    held = store.claims.claim_seat(None, who).key
    running, lost = [k for k in ("s3", "s2", "s1") if k != held][:2]
    store.seats.set_seat_state(None, running, "running", reason="up")
    store.seats.set_seat_state(None, held, "failed", reason="jupyterhub: GPU lost")  # held and failed
    store.seats.set_seat_state(None, lost, "failed", reason="jupyterhub: GPU lost")  # failed, nobody holds it
    refusals = []
    with pytest.raises(InputError, match=f"seat {held} is held by {who}") as err:
        store.lifecycle.remove_seats(None, [lost, held])
    refusals.append(err.value)
    with pytest.raises(InputError, match=f"seat {running} is running .engine manual.; without --force") as err:
        store.lifecycle.remove_seats(None, [running])
    refusals.append(err.value)
    with pytest.raises(NotFound, match="no seat 's9'") as err:
        store.lifecycle.remove_seats(None, ["s1", "s9"])
    refusals.append(err.value)
    for e in refusals:  # each fix names a command that exists, with its flags
        assert "nothing was removed" in e.fix and named_commands_exist(e.fix) == [], e.fix
    assert f"gpuseat seats release --seat {held} --course course-2016" in refusals[0].fix
    assert f"gpuseat seats remove {running} --course course-2016 --force" in refusals[1].fix
    assert len(store.seats.seats()) == 4  # nothing removed by the refused calls
    store.seats.release(None, participant=who)
    # a failed seat nobody holds is removed as it is: nothing makes it planned or released again
    assert store.lifecycle.remove_seats(None, [held, lost], actor="test") == [held, lost]
    assert store.lifecycle.remove_seats(None, [running], actor="test", force=True) == [running]
    assert sorted(s.key for s in store.seats.seats()) == sorted({"s0", "s1", "s2", "s3"} - {held, lost, running})
    removed, forced = store.events.events()[-2:]
    assert removed.action == "seats.remove" and removed.actor == "test" and "forced" not in removed.detail
    assert [x["key"] for x in removed.detail["seats"]] == [held, lost]  # type: ignore[index]
    assert [x["state"] for x in removed.detail["seats"]] == ["failed", "failed"]  # type: ignore[index]
    assert removed.detail["past_assignments"][0]["participant"] == who  # type: ignore[index]
    assert forced.detail["forced"] == [running]  # type: ignore[index]
    assert store.claims.claim_seat(None, who).key not in (held, lost, running)


def test_archived_course_is_read_only_and_links_revoked(course2016: CourseStore) -> None:
    store = course2016
    seats(store)
    people = [p.key for p in store.roster.participants()]
    store.claims.claim_seat(None, people[0])
    tokens = store.tokens.issue_tokens(None)
    assert store.tokens.participant_for_token(tokens[0].token) is not None
    done = store.lifecycle.archive_course(None, actor="test")
    assert done["tokens_revoked"] == len(people) and not done["already"]
    assert store.tokens.participant_for_token(tokens[0].token) is None  # links are dead
    assert store.lifecycle.archive_course(None)["already"]
    refused = [
        lambda: store.claims.claim_seat(None, people[1]),
        lambda: store.claims.claim_seat(
            None, people[0]
        ),  # held seat: reads are fine, but an archived course claims nothing
        lambda: store.seats.release(None, participant=people[0]),
        lambda: store.seats.assign_all(None, partial=True),
        lambda: store.seats.add_seats(None, [SeatSpec(key="new", kind="gpu")]),
        lambda: store.roster.import_roster(
            None, RosterText("name,email\nNew Person,new@example.org\n", where="more.csv")
        ),
        lambda: store.tokens.issue_tokens(None),
        lambda: store.seats.set_seat_state(None, "s1", "running"),
        lambda: store.lifecycle.remove_seats(None, ["s2"]),
        lambda: store.courses.set_plan_option(None, {"rank": 1}),
    ]
    for i, call in enumerate(refused):
        with pytest.raises(InputError, match="archived") as err:
            call()
        assert "read-only" in str(err.value), i
    survey = SurveyService(store)
    with pytest.raises(InputError, match="archived"):
        survey.set_state(None, "open")
    # reads answer as before
    assert store.seats.seat_of(None, people[0]) is not None and len(store.seats.seats()) == 4
    # raw SQL is refused by the database itself
    with store.database.engine.begin() as conn, pytest.raises(InputError, match="archived"):
        conn.execute(text("UPDATE participants SET name = 'x'"))


def test_cli_undo(
    tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path / "data"))
    with open_store(url, create=True) as store:
        store.courses.create_course(EXAMPLES / "course-2016.toml", key="c16")
        store.roster.import_roster("c16", EXAMPLES / "roster-16.csv")
        seats(store, 3)
        store.seats.set_seat_state("c16", "s0", "failed", reason="slurm: node down")  # an engine's failure
        store.seats.set_seat_state("c16", "s1", "running", reason="up")
    assert main(["seats", "remove", "s0", "s1", "--course", "c16", "--db", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: seat s1: seat s1 is running") and err.count("error: ") == 1, err
    assert "`gpuseat seats remove s1 --course c16 --force`" in err and named_commands_exist(err) == [], err
    assert main(["seats", "remove", "s0", "s1", "--course", "c16", "--force", "--db", url]) == 0
    assert "removed 2 seat(s): s0, s1" in capsys.readouterr().out
    assert main(["seats", "remove", "nope", "--course", "c16", "--db", url]) == 2
    assert "no seat 'nope'" in capsys.readouterr().err
    # delete without --yes: a refusal that says how to confirm, nothing changes
    assert main(["course", "delete", "c16", "--db", url]) == 2
    err = capsys.readouterr().err
    assert "gpuseat course delete c16 --yes" in err and "Traceback" not in err
    assert main(["course", "archive", "c16", "--db", url]) == 0
    assert "archived: read-only" in capsys.readouterr().out
    assert main(["seats", "assign", "--partial", "--course", "c16", "--db", url]) == 2
    assert "archived (read-only)" in capsys.readouterr().err
    assert main(["course", "delete", "c16", "--yes", "--db", url]) == 0
    out = capsys.readouterr().out
    path = Path(out.split("export written: ")[1].split("\n")[0])
    assert path.is_file() and path.parent == tmp_path / "data" / "exports"
    assert main(["course", "list", "--db", url]) == 0
    assert "c16" not in capsys.readouterr().out
    # the export brings it back, archived as it was
    assert main(["course", "import", str(path), "--db", url]) == 0
    with open_store(url) as store:
        assert store.courses.get_course("c16").participants == 16 and len(store.seats.seats("c16")) == 1
        with pytest.raises(InputError, match="archived"):
            store.seats.add_seats("c16", [SeatSpec(key="s9", kind="gpu")])
