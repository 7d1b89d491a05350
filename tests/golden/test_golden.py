"""Golden outputs: what the CLI and the portal show for the example courses stays the same through refactors.

Each case runs the real thing — the installed ``gpuseat`` command in a child process, or the portal's
ASGI app through a TestClient — on the example course files, and compares what it printed or served
with ``tests/golden/data/<case>.txt``, after :func:`normalise` has replaced what differs between runs
(today's dates and times, access tokens, CSRF values, the temporary folder, the clone's path, ports,
measured durations, the version), so it gives the same result on any machine, day, clone path or
terminal: children run with a fixed ``COLUMNS``/``LINES``/``TERM``/``TZ`` and no ``GPUSEAT_*`` variable
of the shell.

To accept an intended change of output, rewrite the files and review their diff::

    GPUSEAT_TEST_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q -n 0 tests/golden

(read once at import; a ``GPUSEAT_TEST_`` variable, so the suite, which removes every other ``GPUSEAT_*`` variable before collecting, keeps it).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

import gpuseat
from gpuseat.cli import main
from gpuseat.web.app import Portal, create_app

UPDATE = os.environ.get("GPUSEAT_TEST_UPDATE_GOLDEN") == "1"
DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[2]
#: the ``gpuseat`` command the virtualenv installed (the same entry point a user runs)
COMMAND = Path(sys.executable).with_name("gpuseat")
#: the source tree this test imported, so the child processes run the same code
SRC = Path(gpuseat.__file__).resolve().parents[1]
COURSE = "dl-2016"
PASSWORD = "a long enough passphrase"
#: the portal's "now": the middle of the 2016 course, so its pages do not age with the calendar
CLOCK = datetime(2016, 6, 13, 10, 30, tzinfo=UTC)
WIDTH = "100"


def child_env(data_dir: Path) -> dict[str, str]:
    """The environment of every child: the shell's, less anything that changes gpuseat's output."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPUSEAT_", "FORCE_COLOR", "CLICOLOR", "TTY_", "NO_COLOR"))
    }
    env.update(
        COLUMNS=WIDTH,
        LINES="40",
        TERM="dumb",
        TZ="UTC",
        LC_ALL="C.UTF-8",
        PYTHONIOENCODING="utf-8",
        PYTHONPATH=str(SRC),
        GPUSEAT_DATA_DIR=str(data_dir),
    )
    return env


def gpuseat_command(args: list[str], data_dir: Path) -> str:
    """Run ``gpuseat ARGS`` from the clone's root; its exit code, stdout and stderr as one text."""
    assert COMMAND.is_file(), f"{COMMAND} is missing: install gpuseat into this virtualenv (pip install -e .)"
    done = subprocess.run(
        [str(COMMAND), *args],
        cwd=REPO,
        env=child_env(data_dir),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        check=False,
    )
    return f"$ gpuseat {' '.join(args)}\nexit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}"


def build_step(*args: str, stdin: str = "") -> str:
    """One set-up step through the CLI in-process (faster than a child); fails the test on a non-zero exit."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        sys.stdin = saved
    assert code == 0, f"gpuseat {' '.join(args)}: exit {code}\n{out.getvalue()}\n{err.getvalue()}"
    return out.getvalue()


# -- normalising ------------------------------------------------------------------------------------


def _run_days() -> list[date]:
    """Days a run can stamp: today, and a day either side (a run across midnight, a clock in another zone)."""
    today = datetime.now(UTC).date()
    return [today + timedelta(days=d) for d in (-1, 0, 1)]


def normalise(text: str, known: dict[str, str]) -> str:
    """``text`` with every value that differs between runs replaced by a ``<placeholder>``.

    ``known`` maps run-specific literals (tokens, folders) to their placeholders. A date and time of
    this run becomes ``<now>``; a date alone is left as it is (course dates and prices' ``as of`` dates
    are content).
    """
    for value, name in sorted(known.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(value, name)
    for day in _run_days():
        stamp = rf"{day.isoformat()}[T ]\d{{2}}:\d{{2}}(?::\d{{2}}(?:\.\d+)?)?(?:Z|[+-]\d{{2}}:?\d{{2}}| UTC)?"
        text = re.sub(stamp, "<now>", text)
    text = re.sub(r'(name="csrf"[^>]*value=")[^"]+(")', r"\1<csrf>\2", text)
    text = re.sub(r"\b[0-9a-f]{64}\b", "<hex64>", text)
    text = re.sub(r"\b(127\.0\.0\.1|localhost|testserver):\d+", r"\1:<port>", text)
    text = re.sub(r"\b\d+(?:\.\d+)? ?(?:ms|µs)\b", "<duration>", text)
    text = re.sub(r"\b(took|in|after) \d+\.\d+ ?s\b", r"\1 <duration>", text)
    return re.sub(rf"(?<![\w.]){re.escape(gpuseat.__version__)}(?![\w.])", "<version>", text)


def folders(tmp_path: Path) -> dict[str, str]:
    """The test's temporary folder and the clone's path, as placeholders."""
    return {str(tmp_path): "<tmp>", str(REPO): "<repo>"}


def check(case: str, text: str) -> None:
    """Compare with (or, with GPUSEAT_TEST_UPDATE_GOLDEN=1, write) the golden file of ``case``."""
    path = DATA / f"{case}.txt"
    if UPDATE:
        DATA.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing: GPUSEAT_TEST_UPDATE_GOLDEN=1 writes it"
    assert text == path.read_text(encoding="utf-8"), f"{case}: the output changed (diff above: - golden, + now)"


# -- the course ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Course:
    """The 2016 example course with its roster, seats and links, in a SQLite store of its own folder."""

    folder: Path
    tokens: dict[str, str]  # participant → access token

    def copy(self, to: Path) -> tuple[str, Path]:
        """A private copy of the store (pages write visits and sessions): its URL and data dir."""
        shutil.copytree(self.folder, to)
        return f"sqlite:///{to / 'course.db'}", to / "data"

    def known(self, tmp_path: Path) -> dict[str, str]:
        """What :func:`normalise` replaces for a test of this course: the tokens and the folders."""
        return {**{token: f"<token:{who}>" for who, token in self.tokens.items()}, **folders(tmp_path)}


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Course:
    """Built once through the CLI: course create, roster import, seats add (server and cloud), assign, links."""
    folder = tmp_path_factory.mktemp("golden") / "course"
    folder.mkdir()
    db = f"sqlite:///{folder / 'course.db'}"
    scope = ["--course", COURSE, "--db", db]
    with pytest.MonkeyPatch.context() as mp:
        for name in [n for n in os.environ if n.startswith("GPUSEAT_") and n != "GPUSEAT_CACHE_DIR"]:
            mp.delenv(name)  # the test's own cache folder stays: never the shell's ~/.cache/gpuseat
        mp.setenv("GPUSEAT_DATA_DIR", str(folder / "data"))
        mp.setenv("COLUMNS", WIDTH)
        mp.chdir(REPO)
        build_step("course", "create", "examples/course-2016.toml", "--key", COURSE, "--plan-option", "1", "--db", db)
        build_step("roster", "import", "examples/roster-16.csv", *scope)
        build_step("seats", "add", "--inventory", "examples/ibm-2xM60.toml", "--mode", "passthrough", *scope)
        build_step("seats", "add", "--cloud", *scope)
        build_step("seats", "assign", *scope)
        links = json.loads(build_step("roster", "links", "--base-url", "https://gpu.example.org", "-f", "json", *scope))
        build_step("admin", "set-password", "--password-stdin", "--db", db, stdin=PASSWORD + "\n")
    tokens = {row["participant"]: row["link"].rsplit("/t/", 1)[1] for row in links}
    return Course(folder, tokens)


# -- the CLI ------------------------------------------------------------------------------------------

CLI_CASES = {
    "help": ["--help"],
    "plan-help": ["plan", "--help"],
    "seats-help": ["seats", "--help"],
    "plan-course-2016": ["plan", "examples/course-2016.toml"],
    "plan-course-h200-mig": ["plan", "examples/course-h200-mig.toml"],
}


@pytest.mark.parametrize("case", CLI_CASES)
def test_cli_output_is_unchanged(case: str, tmp_path: Path) -> None:
    check(case, normalise(gpuseat_command(CLI_CASES[case], tmp_path), folders(tmp_path)))


def test_seats_status_is_unchanged(course: Course, tmp_path: Path) -> None:
    db, data = course.copy(tmp_path / "c")
    text = gpuseat_command(["seats", "status", "--course", COURSE, "--db", db], data)
    check("seats-status", normalise(text, course.known(tmp_path)))


# -- the portal ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def portal(db: str) -> Iterator[TestClient]:
    """The portal of the course, as ``gpuseat serve`` builds it, with its clock in the middle of the course."""
    store = gpuseat.open_store(db)
    app = create_app(Portal(store, gpuseat.load_catalog(), COURSE, link_days_after_end=None, clock=CLOCK))
    try:
        with TestClient(app, base_url="http://testserver") as client:
            yield client
    finally:
        store.close()


def page(response: httpx.Response, known: dict[str, str]) -> str:
    """A response as its status, content type and body, normalised."""
    head = f"status {response.status_code}\ncontent-type {response.headers.get('content-type')}\n"
    return normalise(head + response.text, known)


def test_participant_page_is_unchanged(course: Course, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db, data = course.copy(tmp_path / "c")
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(data))
    with portal(db) as client:
        response = client.get(f"/t/{course.tokens['amartin']}")
    check("portal-participant", page(response, course.known(tmp_path)))


def test_report_is_unchanged(course: Course, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db, data = course.copy(tmp_path / "c")
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(data))
    with portal(db) as client:
        form = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)
        assert form, "no CSRF field on /login"
        login = client.post("/login", data={"csrf": form.group(1), "username": "admin", "password": PASSWORD})
        assert login.status_code == 200, login.text[:300]
        response = client.get("/report")
    check("portal-report", page(response, course.known(tmp_path)))
