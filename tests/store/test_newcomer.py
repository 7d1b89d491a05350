"""Issue 38, the newcomer's frictions (items 13, 15, 22, 23) through the real CLI: a second server added
from its inventory, what to set when a seat has no way in, tables that fit 80 columns, ``roster list``,
the default survey, the seats file's left-out seats, and the PostgreSQL helper script."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest
from rich.cells import cell_len

from .conftest import EXAMPLES

ROOT = EXAMPLES.parent
MIG_COURSE = EXAMPLES / "course-h200-mig.toml"
H200 = EXAMPLES / "h200-2x-server.toml"
BOX = "┏┓┗┛━┳┻╇┡┩└┘┴┬─╋┼┃│┠┨┯┷"


def ok(result):
    assert result.code == 0, result.out + result.err
    assert "Traceback" not in result.out + result.err
    return result


@pytest.fixture
def mig_course(cli, url, tmp_path):
    """The 14-seat MIG workshop with its offers file beside it, and the H200 server's seats added."""
    for name in ("course-h200-mig.toml", "offers-h200.toml"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    ok(cli("course", "create", tmp_path / "course-h200-mig.toml", "--key", "w", "--db", url))
    return ("--db", url)


def test_a_second_server_numbers_on_and_says_what_fits_only_for_the_seats_added(cli, mig_course, tmp_path):
    db = mig_course
    first = ok(cli("seats", "add", "--inventory", H200, "--mode", "mig", "--profile", "1g.18gb", *db)).out
    assert "14 seats of 1g.18gb fit on h200-2x: seat-01 … seat-14" in first
    second = tmp_path / "h200-b.toml"
    second.write_text(H200.read_text().replace('name = "h200-2x"', 'name = "h200-b"'))
    # today: "14 seats fit" printed, then "seat key 'seat-01' is used twice" and nothing added
    added = ok(cli("seats", "add", "--inventory", second, "--mode", "mig", "--profile", "1g.18gb", *db))
    assert "used twice" not in added.err
    assert "14 seats of 1g.18gb fit on h200-b: seat-15 … seat-28" in added.out
    seats = json.loads(ok(cli("seats", "export", "-f", "json", *db)).out)
    assert [s["key"] for s in seats] == [f"seat-{i:02d}" for i in range(1, 29)]
    assert {s["host"] for s in seats if s["key"] >= "seat-15"} == {"h200-b"}
    # the same server again would give each of its MIG slices to two seats: refused, nothing added
    again = cli("seats", "add", "--inventory", second, "--mode", "mig", "--profile", "1g.18gb", "--count", "2", *db)
    assert again.code == 2 and "server h200-b already backs 14 seat(s)" in again.err, again.err
    assert len(json.loads(ok(cli("seats", "export", "-f", "json", *db)).out)) == 28
    # a third server's add asked by count numbers on too, and JSON output stays JSON (the note goes to stderr)
    third = tmp_path / "h200-c.toml"
    third.write_text(H200.read_text().replace('name = "h200-2x"', 'name = "h200-c"'))
    three = ok(cli("seats", "add", "--inventory", third, "--mode", "mig", "--profile", "1g.18gb", "--count", "2",
                   "-f", "json", *db))  # fmt: skip
    assert [s["key"] for s in json.loads(three.out)] == ["seat-29", "seat-30"]
    # a refused add says no "fit" for seats it did not add
    fourth = tmp_path / "h200-d.toml"
    fourth.write_text(H200.read_text().replace('name = "h200-2x"', 'name = "h200-d"'))
    bad = cli("seats", "add", "--inventory", fourth, "--mode", "mig", "--profile", "1g.18gb", "--group", "server", *db)
    assert bad.code == 2 and "unknown group 'server'" in bad.err and "fit" not in bad.out
    assert len(json.loads(ok(cli("seats", "export", "-f", "json", *db)).out)) == 30


def test_no_way_in_says_what_works_for_a_seat_that_exists_and_following_it_gives_the_ssh_line(cli, mig_course):
    """A seat added (by hand: no engine) from an inventory without ssh_host: the inventory was read by
    ``seats add`` and is read no more, and the host engine's setting does nothing for a seat of no engine,
    so the advice is the seat's own way in (it said "set ssh_host in its inventory file or with `gpuseat
    engines settings host ssh_host=HOST`", and neither changed the seat). Followed, the seat has its line."""
    db = mig_course
    ok(cli("seats", "add", "--inventory", H200, "--mode", "mig", "--profile", "1g.18gb", "--count", "1", *db))
    shown = ok(cli("seats", "connect", "seat-01", *db)).out
    assert shown.startswith("seat-01: the server has no reachable address yet: "), shown
    assert "run `gpuseat seats connect seat-01 --ssh USER@HOST`" in shown, shown
    assert "ssh_host is read only by `gpuseat seats add --inventory`, for the seats it adds" in shown, shown
    assert "engines settings" not in shown and "set ssh_host" not in shown, shown
    data = json.loads(ok(cli("seats", "connect", "seat-01", "-f", "json", *db)).out)
    assert data["command"] is None and "--ssh USER@HOST" in data["missing"]
    # the old advice, followed: the seat is as it was
    ok(cli("engines", "settings", "host", "ssh_host=gpu1.example.org", *db))
    assert ok(cli("seats", "connect", "seat-01", *db)).out == shown
    # the new one, followed: the seat's way in
    ok(cli("seats", "connect", "seat-01", "--ssh", "ann@gpu1.example.org", *db))
    assert ok(cli("seats", "connect", "seat-01", *db)).out == "seat-01: ssh ann@gpu1.example.org\n"


def test_after_a_clear_a_seat_says_what_works_and_waits_for_its_record_once_its_engine_has_ssh_host(cli, url, tmp_path):
    """The server's address came only from the inventory given to ``seats add`` (no engine setting): once the
    seat's way in is cleared (``seats connect --clear``), the advice names the host engine's setting and the
    seat's own way in, and the inventory file only as what ``seats add`` read (it said "set ssh_host in its
    inventory file", which changes no seat that exists); the seat's own way in, followed, gives its ssh line
    (the setting, followed: tests/delivery/test_address_advice.py). With the host engine's ssh_host set, a
    cleared seat gets its way in back on the engine's next pass, so nothing is to be set."""
    db = ("--db", url)
    inventory = tmp_path / "server.toml"
    server = (EXAMPLES / "ibm-2xM60.toml").read_text()
    inventory.write_text(server.replace('name = "ibm-2xM60"', 'name = "ibm-2xM60"\nssh_host = "gpu1.example.org"'))
    for args in (
        ("course", "create", EXAMPLES / "course-2016.toml"),
        ("roster", "import", EXAMPLES / "roster-16.csv"),
        ("seats", "add", "--inventory", inventory, "--mode", "passthrough", "--engine", "host", "--count", "2"),
        ("seats", "assign", "--participant", "amartin", "--seat", "seat-01"),
    ):
        ok(cli(*args, *db))
    assert ok(cli("seats", "connect", "seat-01", *db)).out == "seat-01: ssh amartin@gpu1.example.org\n"
    cleared = ok(cli("seats", "connect", "seat-01", "--clear", *db)).out
    assert cleared.startswith("seat-01: the server has no reachable address yet: set "), cleared
    assert "`gpuseat engines settings host ssh_host=HOST` (or --ssh-host HOST of `gpuseat host up`)" in cleared
    assert "or run `gpuseat seats connect seat-01 --ssh USER@HOST`" in cleared, cleared
    assert "set ssh_host in" not in cleared and "inventory file or" not in cleared, cleared  # the old advice
    assert "ssh_host is read only by `gpuseat seats add --inventory`, for the seats it adds" in cleared, cleared
    ok(cli("seats", "connect", "seat-01", "--ssh", "amartin@gpu1.example.org", *db))
    assert ok(cli("seats", "connect", "seat-01", *db)).out == "seat-01: ssh amartin@gpu1.example.org\n"

    ok(cli("engines", "settings", "host", "ssh_host=gpu1.example.org", *db))
    held = ok(cli("seats", "connect", "seat-01", "--clear", *db)).out
    assert held.startswith("seat-01: being prepared: ") and held.endswith("; you will log in as amartin\n"), held
    free = ok(cli("seats", "connect", "seat-02", "--clear", *db)).out
    assert free == "seat-02: no way in yet: the host engine records it at gpu1.example.org for a holder\n", free
    ok(cli("engines", "settings", "host", "ssh_host=", *db))
    unset = ok(cli("seats", "connect", "seat-01", *db)).out
    assert "set `gpuseat engines settings host ssh_host=HOST`" in unset, unset


def test_no_way_in_at_all_names_them_too():
    from gpuseat.core.delivery import instruction

    missing = instruction(None, seat="cloud-03", unix_user="ada").missing or ""
    assert missing.startswith("no way in is set for this seat yet: ")
    assert "run `gpuseat seats connect cloud-03 --ssh USER@HOST`" in missing, missing
    assert "for a seat of the host engine set `gpuseat engines settings host ssh_host=HOST`" in missing, missing
    assert "--ssh-host HOST" in missing and "set ssh_host in" not in missing, missing
    assert "ssh_host is read only by `gpuseat seats add --inventory`, for the seats it adds" in missing, missing


def test_the_seats_file_says_which_seats_it_leaves_out_and_why(cli, mig_course):
    db = mig_course
    ok(cli("seats", "add", "--inventory", H200, "--mode", "mig", "--profile", "1g.18gb", "--count", "3", *db))
    result = ok(cli("seats", "export", "--format", "toml", *db))
    assert tomllib.loads(result.out) == {}  # still a valid (empty) seats file
    assert "3 seat(s) left out, without a device UUID: seat-01, seat-02, seat-03" in result.err
    assert "gpuseat host up" in result.err and "--from-nvidia-smi" in result.err
    assert "# 3 seat(s) left out" in result.out  # the file says it too
    capture = ROOT / "tests" / "fixtures" / "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-mig__590.48.01.txt"
    ok(cli("seats", "add", "--from-nvidia-smi", capture, "--host", "gpu1", *db))
    both = ok(cli("seats", "export", "--format", "toml", *db))
    assert [s["id"] for s in tomllib.loads(both.out)["seat"]] == ["seat-04", "seat-05", "seat-06", "seat-07"]
    assert "3 seat(s) left out" in both.err


def _split_table(out: str) -> tuple[str, list[str], list[str]]:
    """(title, the words of the table itself, the columns its caption says are hidden)."""
    lines = out.splitlines()
    at = next((i for i, line in enumerate(lines) if "columns hidden" in line), len(lines))
    caption = " ".join(line.strip() for line in lines[at:])
    hidden = re.search(r"columns hidden to fit \d+: (.*) \(-f wide shows all\)", caption)
    words = "".join(" " if c in BOX else c for c in "\n".join(lines[1:at])).split()
    return lines[0].strip(), words, hidden.group(1).split(", ") if hidden else []


def _whole_words(rows: list[dict]) -> set[str]:
    return {w for r in rows for v in r.values() if v is not None for w in str(v).split()}


def _fits(out: str, width: int = 80) -> None:
    for line in out.splitlines():
        assert cell_len(line) <= width, line
    assert "…" not in out


@pytest.fixture
def course_2016(cli, url):
    db = ("--db", url)
    ok(cli("course", "create", EXAMPLES / "course-2016.toml", "--plan-option", "1", *db))
    ok(cli("roster", "import", EXAMPLES / "roster-16.csv", *db))
    return db


def test_tables_fit_80_columns_without_cutting_a_word(cli, course_2016):
    db = course_2016
    added = ok(cli("seats", "add", "--cloud", *db)).out
    _fits(added)
    ok(cli("seats", "assign", *db))
    ok(cli("seats", "connect", "cloud-01", "--ssh", "ubuntu@cloud-01.lab.example.org", *db))
    for args, columns in (
        (
            ("seats", "status"),
            ("seat", "kind", "participant", "engine", "state", "reason", "since", "last_gpu_activity", "connect"),
        ),
        (("roster", "list"), ("key", "name", "email", "group", "unix_user", "seat")),
        (("course", "list"), ("key", "name", "starts_on", "ends_on", "timezone", "participants", "seats", "assigned")),
    ):
        table = ok(cli(*args, *db)).out
        _fits(table)
        rows = json.loads(ok(cli(*args, "-f", "json", *db)).out)
        _, words, hidden = _split_table(table)
        cut = [w for w in words if w not in _whole_words(rows) | set(columns)]
        assert not cut, (args, cut, table)  # every word in the table is a whole value's word
        assert all(c in words or c in hidden for c in columns), (args, table)  # shown, or said hidden
        wide = ok(cli(*args, "-f", "wide", *db)).out
        _, wide_words, wide_hidden = _split_table(wide)
        assert "…" not in wide and not wide_hidden and all(c in wide_words for c in columns), (args, wide)
    links = ok(cli("roster", "links", "--base-url", "https://gpu.example.org", *db)).out
    _fits(links)
    assert len(re.findall(r"https://gpu\.example\.org/t/[A-Za-z0-9_-]{43}\b", links)) == 16  # whole, one a line


def test_roster_list_shows_the_participants_and_their_seats(cli, course_2016):
    db = course_2016
    ok(cli("seats", "add", "--cloud", *db))
    ok(cli("seats", "assign", "--participant", "amartin", "--seat", "cloud-05", *db))
    listed = json.loads(ok(cli("roster", "list", "-f", "json", *db)).out)
    assert len(listed) == 16 and {"key", "name", "email", "group", "unix_user", "seat"} <= set(listed[0])
    assert next(p for p in listed if p["key"] == "amartin")["seat"] == "cloud-05"
    table = ok(cli("roster", "list", *db)).out
    assert "16 participant(s) of course-2016, 1 with a seat" in table and "amartin" in table
    csv = ok(cli("roster", "list", "-f", "csv", *db)).out.splitlines()
    assert csv[0] == "key,name,email,group,unix_user,ssh_key,seat" and len(csv) == 17
    assert len(json.loads(ok(cli("roster", "list", "--group", "participants", "-f", "json", *db)).out)) == 16
    bad = cli("roster", "list", "--group", "server", *db)
    assert bad.code == 2 and "no participants in group 'server'" in bad.err and "participants" in bad.err
    assert "Traceback" not in bad.err


def test_roster_list_does_not_create_a_database(cli, tmp_path):
    path = tmp_path / "none.db"
    result = cli("roster", "list", "--db", f"sqlite:///{path}")
    assert result.code == 2 and "no gpuseat database here" in result.err
    assert not path.exists()


def test_the_default_survey_asks_about_this_courses_format(cli, course_2016):
    questions = json.loads(ok(cli("survey", "report", "-f", "json", *course_2016)).out)["questions"]
    assert [q["id"] for q in questions] == ["expectations", "result", "apply", "format", "recommend"]
    assert not any("in-person" in q["text"] for q in questions)
    assert "format" in next(q["text"] for q in questions if q["id"] == "format")


@pytest.mark.skipif(not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")), reason="no PostgreSQL server here")
def test_postgres_script_says_which_variable_gpuseat_reads(tmp_path):
    folder = Path(tempfile.mkdtemp(prefix="gpuseat-pg-", dir="/tmp"))  # the postgres user must reach it
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") or k == "GPUSEAT_CACHE_DIR"}
    try:
        started = subprocess.run(
            ["bash", str(ROOT / "scripts" / "postgres.sh"), "start", str(folder)],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        exports = dict(re.findall(r"^export (\w+)='([^']*)'$", started.stdout, re.M))
        assert set(exports) == {"GPUSEAT_TEST_PG_URL"}  # what scripts/test.sh evaluates: the tests only
        user_url = re.search(r"export GPUSEAT_DB_URL='([^']+)'", started.stderr)
        assert user_url and "GPUSEAT_DB_URL" in started.stdout  # explained on stderr, and a comment for eval
        assert user_url.group(1) != exports["GPUSEAT_TEST_PG_URL"]  # your course store is not the tests' one
        env.update(GPUSEAT_DB_URL=user_url.group(1), GPUSEAT_DATA_DIR=str(tmp_path))
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
        made = subprocess.run(
            [sys.executable, "-m", "gpuseat", "course", "create", str(EXAMPLES / "course-2016.toml")],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip
        if made.returncode != 0 and "[postgres]" in made.stderr:
            pytest.skip("the [postgres] extra is not installed")
        assert made.returncode == 0, made.stderr
        assert "course course-2016" in made.stdout
    finally:
        subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "stop", str(folder)], check=False, timeout=60)
    assert not folder.exists()
