"""Course export → delete → import gives the same course (SQLite, PostgreSQL, SQLite → PostgreSQL);
bad archives are one clear error with exit code 2 and nothing stored changes."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from gpuseat.cli import main
from gpuseat.core.readiness import Access
from gpuseat.core.roster import RosterText
from gpuseat.errors import InputError
from gpuseat.services.survey import SurveyService
from gpuseat.store import CourseStore, SeatSpec, open_store
from gpuseat.store.export import collect
from pg_schema import pg_schema_url

PEOPLE = 200


def big_course(store: CourseStore, tmp_path: Path) -> str:
    """A 200-person course with two groups, seats, claims, moves, releases, tokens, survey answers."""
    path = tmp_path / "term.toml"
    path.write_text(
        'name = "Term course"\n[schedule]\nstart = 2026-01-05\ndays = 10\n'
        '[[group]]\nname = "students"\ncount = 190\nmin_gpu_memory_gb = 10\n'
        '[[group]]\nname = "staff"\ncount = 10\nmin_gpu_memory_gb = 40\nisolation = "dedicated"\n'
    )
    store.courses.create_course(path, key="term", timezone="Europe/Berlin")
    rows = ["name,email,group,unix_user"] + [
        f"Person {i},p{i:03d}@example.org,{'staff' if i < 10 else 'students'},u{i:03d}" for i in range(PEOPLE)
    ]
    store.roster.import_roster("term", RosterText("\n".join(rows), where="term.csv"))
    store.seats.add_seats(
        "term",
        [
            SeatSpec(key=f"mig-{i:03d}", kind="mig", memory_gb=20, host="gpu1", device_uuid=f"MIG-{i:04d}")
            for i in range(170)
        ]
        + [SeatSpec(key=f"gpu-{i:02d}", kind="gpu", memory_gb=80, groups=("staff",)) for i in range(12)],
    )
    people = [p.key for p in store.roster.participants("term")]
    for who in people[:150]:
        store.claims.claim_seat("term", who, mode="pool" if who.endswith("7") else "assigned")
    for who in people[:20]:
        store.seats.release("term", participant=who, reason="left early")
    store.seats.move("term", people[30], "mig-169")
    store.seats.set_seat_state("term", "mig-000", "running", reason="up", engine="jupyterhub", engine_ref="u/")
    store.tokens.issue_tokens("term")
    store.tokens.rotate_tokens("term", people[:5])
    survey = SurveyService(store)
    survey.set_state("term", "open")
    for i, who in enumerate(people[:60]):
        survey.submit(
            "term", who, {"q_expectations": [str(1 + i % 10)], "q_format": ["7"], "q_recommend": [str(i % 11)]}
        )
    survey.set_state("term", "closed")
    first = sorted(x.key for x in store.seats.seats("term"))[0]  # a way in set by an engine travels too
    store.delivery.record_delivery(
        "term", first, access=Access(kind="ssh", host="gpu1.example.org", port=22, user="u001")
    )
    return "term"


def snapshot(store: CourseStore, course: str) -> dict:
    """Everything a course holds, by keys; the log without the lines delete and import add."""
    data = collect(store, course)
    data["events.json"] = [e for e in data["events.json"] if e["action"] not in ("course.delete", "course.import")]
    data.pop("samples_summary.json")
    return data


def round_trip(src: CourseStore, dst: CourseStore, tmp_path: Path) -> None:
    before = snapshot(src, "term")
    assert len(before["participants.json"]) == PEOPLE and len(before["survey.json"]["responses"]) == 60
    archive = tmp_path / "term.gpuseat.zip"
    done = src.lifecycle.delete_course("term", export_to=archive, actor="test")
    assert done["export"] == archive and archive.is_file() and done["participants"] == PEOPLE
    assert [c.key for c in src.courses.list_courses()] == []
    got = dst.lifecycle.import_course(archive, actor="test")
    assert got["course"] == "term" and got["participants"] == PEOPLE and got["survey_responses"] == 60
    assert snapshot(dst, "term") == before
    # the imported course works: tokens still open the portal's links, claims go on
    assert dst.claims.claim_seat("term", "p190@example.org").participant == "u190"


def test_export_delete_import_gives_the_same_course(store: CourseStore, tmp_path: Path) -> None:
    big_course(store, tmp_path)
    round_trip(store, store, tmp_path)
    lines = [e.action for e in store.events.events("term")]
    assert lines.count("course.delete") == 1 and lines.count("course.import") == 1
    assert lines.count("course.create") == 1  # the append-only log is not written twice


def test_sqlite_to_postgresql(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    pg = pg_schema_url(request)
    with open_store(f"sqlite:///{tmp_path / 'a.db'}", create=True) as src, open_store(pg, create=True) as dst:
        big_course(src, tmp_path)
        round_trip(src, dst, tmp_path)


def test_tokens_survive_the_trip(store: CourseStore, tmp_path: Path) -> None:
    store.courses.create_course(Path(__file__).parents[2] / "examples" / "course-2016.toml", key="small")
    store.roster.import_roster("small", RosterText("name,email\nA,a@example.org\nB,b@example.org\n", where="r.csv"))
    issued = {t.participant: t.token for t in store.tokens.issue_tokens("small")}
    store.lifecycle.delete_course("small", export_to=tmp_path / "s.zip")
    assert store.tokens.participant_for_token(issued["a"]) is None
    store.lifecycle.import_course(tmp_path / "s.zip")
    assert store.tokens.participant_for_token(issued["a"]).key == "a"  # type: ignore[union-attr]


def make_small(url: str) -> None:
    with open_store(url, create=True) as store:
        store.courses.create_course(Path(__file__).parents[2] / "examples" / "course-2016.toml", key="small")
        store.roster.import_roster("small", RosterText("name,email\nA,a@example.org\n", where="r.csv"))


def rewrite(src: Path, dst: Path, change: dict[str, object]) -> None:
    """A copy of an archive with members replaced (bytes) or the manifest edited (dict)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            blob = zin.read(name)
            if name in change:
                new = change[name]
                blob = new if isinstance(new, bytes) else json.dumps({**json.loads(blob), **new}).encode()  # type: ignore[dict-item]
            zout.writestr(name, blob)


def test_bad_archives_are_one_clear_error(url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_small(url)
    good = tmp_path / "small.zip"
    assert main(["course", "export", "--course", "small", "--to", str(good), "--db", url]) == 0
    assert main(["course", "export", "--course", "small", "--to", str(good), "--db", url]) == 2  # exists
    assert "exists already" in capsys.readouterr().err
    cases = {
        "not-a-zip": b"PK\x03\x04 this is not a zip",
        "truncated": good.read_bytes()[: good.stat().st_size // 2],
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    rewrite(good, tmp_path / "v2", {"manifest.json": {"schema_version": 2}})
    rewrite(good, tmp_path / "tampered", {"participants.json": b"[]"})
    rewrite(good, tmp_path / "other", {"manifest.json": {"format": "something-else"}})
    expected = {
        "not-a-zip": "not a zip archive",
        "truncated": "not a zip archive",
        "v2": "schema_version 2; this gpuseat reads schema_version 1",
        "tampered": "participants.json does not match its checksum",
        "other": "not a gpuseat course export",
        "small.zip": "a course 'small' exists already",
    }
    for name, message in expected.items():
        path = good if name == "small.zip" else tmp_path / name
        assert main(["course", "import", str(path), "--db", url]) == 2, name
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and err.count("error:") == 1, (name, err)
    with open_store(url) as store:  # nothing stored changed
        assert [c.key for c in store.courses.list_courses()] == ["small"] and len(
            store.roster.participants("small")
        ) == 1
    # a bad row inside an intact archive names the member and row; nothing is stored
    rows = json.loads(zipfile.ZipFile(good).read("participants.json"))
    rows[0]["group"] = 5
    blob = json.dumps(rows).encode()
    import hashlib

    manifest = json.loads(zipfile.ZipFile(good).read("manifest.json"))
    manifest["sha256"]["participants.json"] = hashlib.sha256(blob).hexdigest()
    rewrite(good, tmp_path / "badrow", {"participants.json": blob, "manifest.json": manifest})
    assert main(["course", "import", str(tmp_path / "badrow"), "--key", "other", "--db", url]) == 2
    assert "participants.json[0]" in capsys.readouterr().err
    with open_store(url) as store:
        assert [c.key for c in store.courses.list_courses()] == ["small"]
    assert main(["course", "import", str(good), "--key", "copy", "--db", url]) == 0
    with open_store(url) as store:
        assert [c.key for c in store.courses.list_courses()] == ["copy", "small"]


def test_read_archive_refuses_a_zip_bomb_member(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuseat.store import export

    monkeypatch.setattr(export, "EXPORT_MAX_MEMBER_BYTES", 1_000_000)

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", json.dumps({"format": export.FORMAT, "schema_version": 1, "sha256": {}}))
        zf.writestr("course.json", b" " * (export.EXPORT_MAX_MEMBER_BYTES + 1))
    (tmp_path / "bomb.zip").write_bytes(buf.getvalue())
    with pytest.raises(InputError, match="too large"):
        export.read_archive(tmp_path / "bomb.zip")
