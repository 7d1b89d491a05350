"""Hostile text through the portal: names, answers and seats that a spreadsheet, a browser or a cache could
misread, through the real ASGI app and the real SQLite store.

- every CSV download defuses formulas by the one rule (``safe_text.csv_cell``), the survey's too;
- a roster downloaded from the Roster page and uploaded again changes nothing, whatever its names hold;
- a name the CSV would change (a bidi override, a C1 control) is refused at import with one message (exit 2
  from the CLI) instead of coming back changed from every download;
- nothing a link answers is kept by a cache (its ``ssh_config`` too).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest

from gpuseat.core.roster import parse_roster
from gpuseat.errors import InputError
from gpuseat.safe_text import csv_cell
from gpuseat.web.exports import csv_text
from gpuseat.web.routes.organizer import ROSTER_DOWNLOAD_COLUMNS

from .served import Served

#: a survey with one free-text question: a participant types the whole cell
TEXT_SURVEY = """key = "free"
title = "Anything else?"
source = "tests"
as_of = "2026-12-07"

[[question]]
id = "note"
kind = "text"
text = "Anything else?"
"""


def test_the_survey_csv_defuses_answers_by_the_rule_of_the_other_downloads(
    served: Served, cli: Any, tmp_path: Path
) -> None:
    """The survey's CSV had a formula rule of its own: a participant's ``＝HYPERLINK(…)`` (full-width ``=``,
    which the other downloads defuse) went out as it came, and an answer ``-3.5`` became the text ``'-3.5``.
    A free-text answer keeps its line breaks (quoted), as before. ``survey report -f csv`` printed the table;
    it prints the same CSV as the portal."""
    (tmp_path / "free.toml").write_text(TEXT_SURVEY)
    served.client.app.state.portal.surveys.set_template("lab", str(tmp_path / "free.toml"))  # type: ignore[attr-defined]
    served.store.courses.set_survey_state("lab", "open")
    answers = {"ann": '＝HYPERLINK("http://evil.example","x")', "ben": "-3.5"}
    for who, text in answers.items():
        token = served.links[who]
        saved = served.client.post(f"/t/{token}/survey", data={"csrf": served.csrf(f"/t/{token}"), "q_note": text})
        assert saved.status_code == 200, saved.text[:300]
    assert served.login().status_code == 303
    got = served.client.get("/survey.csv")
    assert got.status_code == 200 and got.headers["cache-control"] == "no-store"
    rows = list(csv.reader(io.StringIO(got.text)))
    assert rows[0] == ["response", "note"]
    cells = sorted(row[1] for row in rows[1:])
    assert cells == sorted(csv_cell(a) for a in answers.values()) == ["'" + answers["ann"], "-3.5"]
    printed = cli("survey", "report", "-f", "csv", "--course", "lab", "--db", str(served.store.url))
    assert printed.code == 0 and list(csv.reader(io.StringIO(printed.out))) == rows, printed.out
    # a second answer of ann's replaces her first: several lines, the first like a formula
    served.client.cookies.clear()
    ann = served.links["ann"]
    data = {"csrf": served.csrf(f"/t/{ann}"), "q_note": "=first line\r\nsecond line"}
    assert served.client.post(f"/t/{ann}/survey", data=data).status_code == 200
    assert served.login().status_code == 303
    rows = list(csv.reader(io.StringIO(served.client.get("/survey.csv").text)))
    assert "'=first line\nsecond line" in [row[1] for row in rows[1:]]


#: names a roster takes that a spreadsheet, a page or a terminal could misread
NAMES = [
    "=Ann+1",
    "-Ben Lee",
    "@Cid",
    "+1 Dee",
    "＝Eve",  # full-width equals
    "<b>Fay</b> & <script>x</script>",
    "Gi\u200dl \u05e9\u05dc\u05d5\u05dd",  # a zero-width joiner, Hebrew
    "H" * 256,
    "-3.5",
    "'=Ivy",  # an apostrophe of the file's own: read as the formula rule's (safe_text.csv_value)
]


def _upload(served: Served, text: str) -> Any:
    csrf = served.csrf("/roster")
    return served.client.post("/roster/import", data={"csrf": csrf}, files={"file": ("class.csv", text.encode())})


def _main(page: Any) -> str:
    """The page's main part (what a failed assertion shows)."""
    return str(page.text).partition("<main")[2][:800]


def test_a_roster_downloaded_and_uploaded_again_changes_nothing(served: Served, cli: Any, tmp_path: Path) -> None:
    """Names that start like formulas, hold HTML, a zero-width joiner or right-to-left letters, or are as long
    as a name may be: stored as read, shown escaped, and the Roster page's CSV read again changes nothing."""
    rows = [["", name, f"p{i}@example.org", "participants", f"p{i}", ""] for i, name in enumerate(NAMES)]
    header = ROSTER_DOWNLOAD_COLUMNS
    parsed = parse_roster(csv_text(header, rows), groups=("participants",), where="r.csv")
    stored = [p.name for p in parsed]
    assert stored == [*NAMES[:-1], "=Ivy"]
    again = parse_roster(
        csv_text(header, [[r[0], n, *r[2:]] for r, n in zip(rows, stored, strict=True)]), groups=("participants",)
    )
    assert [p.name for p in again] == stored
    # and through the portal (the course has two places: two of them)
    assert served.login().status_code == 303
    text = f'name,email,unix_user\n"{NAMES[0]}",ann@example.org,ann\n"{NAMES[5]}",ben@example.org,ben\n'
    first = _upload(served, text)
    assert first.status_code == 200 and "0 added, 2 updated" in first.text, _main(first)
    assert {p.key: p.name for p in served.store.roster.participants("lab")} == {"ann": NAMES[0], "ben": NAMES[5]}
    page = served.client.get("/roster").text
    assert "&lt;b&gt;Fay&lt;/b&gt; &amp; &lt;script&gt;x&lt;/script&gt;" in page and "<script>x" not in page
    download = served.client.get("/roster.csv")
    assert download.status_code == 200 and download.headers["cache-control"] == "no-store"
    assert "'=Ann+1" in download.text
    again_page = _upload(served, download.text)
    assert again_page.status_code == 200 and "0 added, 0 updated, 2 unchanged" in again_page.text, _main(again_page)
    # a name the CSV would write otherwise is refused, naming the cell, and nothing is stored
    refused = _upload(served, "name,email,unix_user\nAnn\u202eLee,ann@example.org,ann\n")
    assert refused.status_code == 400 and "class.csv:2:1: name: control characters" in refused.text, _main(refused)
    assert served.store.roster.find_participant("lab", "ann").name == NAMES[0]
    # and from the CLI: exit 2, one message
    for bad, says in [("Ann\u202eLee", "control characters"), ("A" * 257, "257 characters, more than 256")]:
        (tmp_path / "r.csv").write_text(f"name,email,unix_user\n{bad},ann@example.org,ann\n", encoding="utf-8")
        r = cli("roster", "import", tmp_path / "r.csv", "--course", "lab", "--db", str(served.store.url))
        assert r.code == 2 and "r.csv:2:1: name: " + says in r.err and "Traceback" not in r.err, (bad, r.err)
    assert served.store.roster.find_participant("lab", "ann").name == NAMES[0]


@pytest.mark.parametrize("bad", ["Ann\u202eLee", "Ann\u2067Lee", "Ann\x9b2JLee", "Ann\x85Lee"])
def test_a_name_the_csv_would_change_is_refused(bad: str) -> None:
    """A bidi override or a C1 control in a name was stored; every CSV download wrote it as U+FFFD, so the
    roster read again "updated" the name."""
    with pytest.raises(InputError) as refused:
        parse_roster(f"name,email\nOk,ok@example.org\n{bad},ann@example.org\n", groups=("p",), where="r.csv")
    assert refused.value.where == "r.csv:3:1" and "name: control characters" in refused.value.message


def test_a_links_ssh_config_is_never_cached(served: Served) -> None:
    """The page and its polls said ``no-store``, the ssh_config download not: a cache could keep the seat's
    login and host for a link after a move, a release or a rotation."""
    from gpuseat.services.delivery import build_access

    made = build_access("gpu1.example.org:2201", None, None, [], None, "MIG-1", server_name="gpu1")
    served.store.delivery.record_delivery("lab", "mig-01", access=made)
    ann = served.links["ann"]
    config = served.client.get(f"/t/{ann}/ssh_config")
    assert config.status_code == 200 and "Port 2201" in config.text
    assert config.headers["cache-control"] == "no-store"
    served.store.seats.release("lab", participant="ann")
    gone = served.client.get(f"/t/{ann}/ssh_config")
    assert gone.status_code == 404 and gone.headers["cache-control"] == "no-store"
