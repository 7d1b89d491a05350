"""The portal's CLI commands with good and bad input (exit 2 and one message, never a traceback)."""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import pytest

from gpuseat.catalog import data_text
from gpuseat.core.roster import RosterText
from gpuseat.store import open_store

from .live import csrf_of, login, start

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def course_db(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    store = open_store(url, create=True)
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="dl-2016")
    store.close()
    return url


def test_the_demo_ships_the_example_course():
    assert data_text("demo/course-2016.toml") == (EXAMPLES / "course-2016.toml").read_text(encoding="utf-8")


def test_admin_set_password(cli, course_db, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("a long enough passphrase\n"))
    r = cli("admin", "set-password", "--db", course_db, "--password-stdin")
    assert r.code == 0 and "created organizer admin" in r.out
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    r = cli("admin", "set-password", "--db", course_db, "--password-stdin")
    assert r.code == 2 and "password must be" in r.err and "Traceback" not in r.err
    r = cli("admin", "set-password", "--db", course_db, "--user", "-rf", "--password-stdin")
    assert r.code == 2 and "--user" in r.err
    store = open_store(course_db)
    assert store.accounts.verify("admin", "a long enough passphrase")
    assert not store.accounts.verify("admin", "short")
    store.close()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--port", "0"], "--port"),
        (["--port", "70000"], "--port"),
        (["--host", "-oProxyCommand=x"], "--host"),
        (["--course", "nope"], "nope"),
        (["--root-path", "gpuseat"], "--root-path"),
        (["--root-path", "/a b"], "--root-path"),
        (["--forwarded-allow-ips", "proxy.example.org"], "--forwarded-allow-ips"),
        (["--links-expire", "soon"], "--links-expire"),
        (["--idle-timeout", "0"], "--idle-timeout"),
    ],
)
def test_serve_refuses_bad_flags(cli, course_db, args, needle):
    r = cli("serve", "--db", course_db, *args)
    assert r.code == 2 and needle in r.err and "Traceback" not in r.err


def test_report_and_survey_need_an_existing_database(cli, tmp_path):
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    for args in (["report", "--out", tmp_path / "r.html"], ["survey", "open"], ["survey", "report"]):
        r = cli(*args, "--db", missing)
        assert r.code == 2 and "Traceback" not in r.err, args
    assert not (tmp_path / "none.db").exists()


def test_roster_upload_errors_name_file_line_and_column(course_db, tmp_path):
    store = open_store(course_db)
    store.accounts.set_password("admin", "a long enough passphrase")
    store.close()
    server = start(["--db", course_db], tmp_path / "serve.log")
    try:
        with httpx.Client(base_url=server.url) as c:
            login(c, server.url, "a long enough passphrase")
            bad = "name,email\nAda,ada@example.org\nBob,not-an-email\n"
            page = c.get("/roster")
            r = c.post(
                "/roster/import", data={"csrf": csrf_of(page.text)}, files={"file": ("class.csv", bad, "text/csv")}
            )
            assert r.status_code == 400 and "class.csv:3" in r.text and "email" in r.text
            assert "Ada" not in r.text.split('id="roster"')[1]  # nothing stored from the bad file
            binary = b"\xff\xfe\x00garbage"
            r = c.post(
                "/roster/import", data={"csrf": csrf_of(page.text)}, files={"file": ("x.csv", binary, "text/csv")}
            )
            assert r.status_code == 400 and "UTF-8" in r.text
    finally:
        assert server.stop() == 0


def test_the_portal_serves_a_postgresql_store(request, tmp_path):
    from pg_schema import pg_schema_url

    url = pg_schema_url(request)
    store = open_store(url, create=True)
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="dl-2016")
    store.roster.import_roster(
        "dl-2016", RosterText("name,email,unix_user\nAda Lovelace,ada@example.org,ada\n", where="r.csv")
    )
    store.seats.add_seats("dl-2016", [{"key": "m60-1", "kind": "gpu", "host": "gpu1.example.org", "memory_gb": 8.0}])
    store.seats.assign_all("dl-2016")
    token = store.tokens.issue_tokens("dl-2016")[0].token
    store.accounts.set_password("admin", "a long enough passphrase")
    store.close()
    server = start(["--db", url, "--links-expire", "never"], tmp_path / "serve.log")  # a 2016 course, run today
    try:
        with httpx.Client(base_url=server.url) as c:
            assert login(c, server.url, "a long enough passphrase").status_code == 303
            for path in ("/overview", "/seats", "/roster", "/links", "/survey", "/bench", "/alerts", "/report"):
                assert c.get(path).status_code == 200, path
            page = c.get("/survey")
            c.post("/survey", data={"csrf": csrf_of(page.text), "action": "open"})
        with httpx.Client(base_url=server.url) as p:
            page = p.get(f"/t/{token}")
            assert "ssh ada@gpu1.example.org" in page.text
            form = {"csrf": csrf_of(page.text), "q_expectations": "9", "q_format": "9", "q_recommend": "10"}
            assert "your answers are saved" in p.post(f"/t/{token}/survey", data=form).text
            assert p.get(f"/t/{token}/live").json()["seat"] == "m60-1"
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("command", [[], ["serve"], ["admin", "set-password"], ["survey", "template", "apply"]])
def test_help_shows_defaults_without_stray_escapes(cli, command):
    r = cli(*command, "--help")
    assert r.code == 0 and "\\[" not in r.out, r.out
    if command == ["serve"]:
        assert "[default: 127.0.0.1]" in r.out
