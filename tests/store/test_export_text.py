"""An edited course export's text refuses control characters where the store's own writers do: a participant's
name, email, group or SSH key (the roster's cell rule), a release's reason, a top-up's note (one line of plain
text) and a survey answer (line breaks kept, as the portal takes them). Each such archive, its checksum made to
match, is one clear error naming the member, the row and the field, exit 2, nothing stored (SQLite and PostgreSQL).
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from gpuseat.cli import main
from gpuseat.services.survey import SurveyService
from gpuseat.store import SeatSpec, open_store

from .test_export import make_small, rewrite

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl a@x"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\x00")


def exported(url: str, tmp_path: Path) -> Path:
    """The small course with a released seat, a top-up and a survey answer, exported through the CLI."""
    make_small(url)
    with open_store(url) as store:
        store.seats.add_seats("small", [SeatSpec(key="s1", kind="gpu", memory_gb=80)])
        store.claims.claim_seat("small", "a")
        store.seats.release("small", participant="a", reason="left early")
        store.requests.add_seat_hours("small", "a", 2, actor="t", note="make-up lab")
        survey = SurveyService(store)
        survey.set_state("small", "open")
        survey.submit("small", "a", {"q_expectations": ["8"], "q_format": ["7"], "q_recommend": ["9"]})
    path = tmp_path / "small.zip"
    assert main(["course", "export", "--course", "small", "--to", str(path), "--db", url]) == 0
    return path


def forged(good: Path, dst: Path, member: str, edit: Any) -> Path:
    """A copy of ``good`` with ``edit`` applied to ``member``'s JSON and its checksum made to match."""
    with zipfile.ZipFile(good) as zf:
        data, manifest = json.loads(zf.read(member)), json.loads(zf.read("manifest.json"))
    edit(data)
    blob = json.dumps(data).encode()
    manifest["sha256"][member] = hashlib.sha256(blob).hexdigest()
    rewrite(good, dst, {member: blob, "manifest.json": manifest})
    return dst


def person(field: str, value: str) -> Any:
    return lambda rows: rows[0].update({field: value})


def answer(value: object) -> Any:
    return lambda survey: survey["responses"][0]["answers"].update({"q_format": value})


BAD = [  # (member, edit, where the message points)
    ("participants.json", person("name", "A\x1b[2J\x1b]0;owned\x07"), "participants.json[0]: field 'name'"),
    ("participants.json", person("name", "A\nB"), "participants.json[0]: field 'name'"),
    ("participants.json", person("name", "A\u202etxt.exe"), "participants.json[0]: field 'name'"),
    ("participants.json", person("email", "a\x9b31m@example.org"), "participants.json[0]: field 'email'"),
    ("participants.json", person("group", "participants\x00"), "participants.json[0]: field 'group'"),
    ("participants.json", person("ssh_key", KEY + "\u202e"), "participants.json[0]: field 'ssh_key'"),
    ("assignments.json", lambda rows: rows[0].update(ended_by="left\x1b[2J"), "assignments.json[0]: field 'ended_by'"),
    ("seat_hours.json", lambda rows: rows[0].update(note="lab\x1b]0;x\x07"), "seat_hours.json[0]: field 'note'"),
    ("seat_hours.json", lambda rows: rows[0].update(note="lab\nday"), "seat_hours.json[0]: field 'note'"),
    ("survey.json", answer("fine\x1b[2J"), "survey.json: field 'responses[0].answers'"),
    ("survey.json", answer(["fine", "x\u202e"]), "survey.json: field 'responses[0].answers'"),
]


def test_control_characters_in_an_archives_text_are_refused(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = exported(url, tmp_path)
    for i, (member, edit, where) in enumerate(BAD):
        bad = forged(good, tmp_path / f"bad{i}.zip", member, edit)
        capsys.readouterr()
        assert main(["course", "import", str(bad), "--key", "copy", "--db", url]) == 2, (member, where)
        err = capsys.readouterr().err
        assert f"{bad}: {where}" in err and "control characters" in err and "plain text" in err, err
        assert "Traceback" not in err and err.count("error:") == 1, err
        assert not [c for c in RAW if c in err], err  # the message shows the value escaped
    # what the writers allow still imports: a survey's free text keeps its lines, a name its letters
    fine = forged(good, tmp_path / "fine.zip", "survey.json", answer("line one\nline two"))
    fine = forged(fine, tmp_path / "fine2.zip", "participants.json", person("name", "Zoë Ørsted-李"))
    assert main(["course", "import", str(fine), "--key", "copy", "--db", url]) == 0
    with open_store(url) as store:  # only the intact import stored a course
        assert [c.key for c in store.courses.list_courses()] == ["copy", "small"]
        assert store.roster.participants("copy")[0].name == "Zoë Ørsted-李"
