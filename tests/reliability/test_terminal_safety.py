"""User data never reaches the organizer's terminal as raw control characters.

A participant name in a seats file, a host name in a replay, a course name: each carries an escape
sequence (clear screen, set window title) and a right-to-left override; every output format of the
commands that print them must show none of them raw.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpuseat.monitor.replay import synthetic_snapshot, write_replay
from gpuseat.safe_text import clean, csv_cell, csv_value

EVIL = "ann\x1b[2J\x1b]0;owned\x07\u202etxt.exe\x9b31m"
RAW = ("\x1b", "\x07", "\u202e", "\x9b")


def _raw(text: str) -> list[str]:
    return [c for c in RAW if c in text]


@pytest.fixture
def capture_files(tmp_path: Path) -> tuple[Path, Path]:
    snap = synthetic_snapshot(gpus=1, migs_per_gpu=2, processes=1, taken_at=1_700_000_040.0)
    snap = replace(snap, host="gpu1" + EVIL)
    write_replay(tmp_path / "r.jsonl", [snap])
    migs = [m.uuid for m in snap.gpus[0].mig]
    seats = "".join(
        f'[[seat]]\nid = "s{i}"\ndevice = "{u}"\nparticipant = {json.dumps(EVIL + str(i))}\n'
        for i, u in enumerate(migs)
    )
    (tmp_path / "seats.toml").write_text(seats, encoding="utf-8")
    return tmp_path / "r.jsonl", tmp_path / "seats.toml"


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_top_prints_no_raw_controls(cli, capture_files, fmt):
    replay, seats = capture_files
    r = cli("top", "--replay", replay, "--seats", seats, "--once", "--format", fmt)
    assert r.code == 0, r.err
    if r.code != 0:  # a seats file with such a name may also be refused: then with one clean message
        assert _raw(r.err) == [] and "Traceback" not in r.err
        return
    assert _raw(r.out) == [], r.out
    assert _raw(r.err) == []
    if fmt == "json":  # JSON keeps the data exactly, escaped
        assert "\\u001b" in r.out


def test_course_name_with_escapes(cli, tmp_path):
    course = tmp_path / "c.toml"
    course.write_text(
        f"name = {json.dumps('Lab' + EVIL)}\nparticipants = 2\n[needs]\nmin_gpu_memory_gb = 4\n"
        "[schedule]\nstart = 2026-03-02\ndays = 3\n",
        encoding="utf-8",
    )
    # each command runs to the end (a refused file printed nothing, so the check once passed without a name)
    for args in (("plan", course), ("plan", course, "--explain"), ("plan", course, "--format", "csv")):
        r = cli(*args)
        assert r.code == 0 and ("Lab" in r.out or "csv" in args), (args, r.err)  # plan's CSV has no title
        assert _raw(r.out + r.err) == [], (args, r.out, r.err)
    r = cli("course", "create", course, "--key", "esc")
    assert r.code == 0 and "Lab" in r.out, r.err
    assert _raw(r.out + r.err) == [], r.out
    for args in (("course", "list"), ("course", "show", "--course", "esc"), ("course", "list", "--format", "csv")):
        r = cli(*args)
        assert r.code == 0 and "Lab" in r.out, (args, r.err)
        assert _raw(r.out + r.err) == [], (args, r.out)


def test_clean_and_csv_cell():
    assert clean("a\x1b[31mb\nc") == "a\ufffd[31mb\nc"
    assert clean("a\nb", one_line=True) == "a\ufffdb"
    assert csv_cell("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert csv_cell("@SUM(A1)") == "'@SUM(A1)"
    assert csv_cell("-3.5") == "-3.5"
    assert csv_cell("+1 cmd") == "'+1 cmd"
    assert csv_cell(7) == 7
    assert csv_cell(" =2") == "' =2"  # a spreadsheet skips the space and runs the rest
    for value in ("=HYPERLINK(1)", " =2", "-Ann", "-3.5", "'plain", "plain", "'", "''=x"):
        assert csv_value(csv_cell(value)) == value, value  # read back as it was, an apostrophe of its own too
    assert csv_value("'-Ann") == "-Ann"  # a name an earlier round trip gave the apostrophe is read without it


def test_the_portal_and_the_cli_write_csv_cells_by_one_rule(capsys):
    """The portal's downloads and the CLI's ``--format csv`` once had two formula rules: the portal
    prefixed ``-3.5`` with an apostrophe (a negative amount became text), the CLI let `` =2`` through."""
    import csv
    import io

    from gpuseat.cli._output import print_csv
    from gpuseat.web.exports import csv_text

    values = ["-3.5", " =2", "=1+1", "-2+3", "@x", "+1 cmd", "plain", "ann@example.org", "a\tb", -4, 2.5, None]
    portal = list(csv.reader(io.StringIO(csv_text(["v"], [[v] for v in values]))))
    print_csv([{"v": v} for v in values], ["v"])
    cli = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert portal == cli
    assert [row[0] for row in portal[1:4]] == ["-3.5", "' =2", "'=1+1"]


def test_a_roster_downloaded_and_imported_again_keeps_its_names(cli, tmp_path: Path) -> None:
    """``roster list -f csv`` writes ``-Ann Lee`` as ``'-Ann Lee`` (the formula rule); imported again, the
    name became ``'-Ann Lee`` ("3 updated"), so each round trip through a spreadsheet changed the roster."""
    root = Path(__file__).resolve().parents[2]
    db = f"sqlite:///{tmp_path / 'c.db'}"
    (tmp_path / "r.csv").write_text(
        "name,email,group,unix_user\n-Ann Lee,ann@example.org,participants,ann\n=Bob,bob@example.org,participants,bob\n"
        "'@Cy,cy@example.org,participants,cy\n"
    )
    assert cli("course", "create", root / "examples" / "course-2016.toml", "--plan-option", "1", "--db", db).code == 0
    assert cli("roster", "import", tmp_path / "r.csv", "--db", db).code == 0
    for _ in range(2):
        listed = cli("roster", "list", "--format", "csv", "--db", db)
        assert "'-Ann Lee" in listed.out and "'=Bob" in listed.out, listed.out
        (tmp_path / "again.csv").write_text(listed.out)
        again = cli("roster", "import", tmp_path / "again.csv", "--db", db)
        assert (again.code, again.out.strip()) == (0, "course course-2016: 0 added, 0 updated, 3 unchanged"), again
    listed = cli("roster", "list", "--format", "json", "--db", db)
    names = {p["key"]: p["name"] for p in json.loads(listed.out)}
    assert names == {"ann": "-Ann Lee", "bob": "=Bob", "cy": "@Cy"}, names  # '@Cy: a defused cell, as written
