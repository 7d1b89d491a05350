"""A course file's own offers files (``offers_files``) through ``gpuseat course create``: a missing or invalid
file is refused (exit 2, one message naming the course file and the offers file, nothing stored); a valid
one is stored with the course, so that the report's alternatives and every re-plan of the stored course
equal ``gpuseat plan`` on the file, on SQLite and PostgreSQL, whatever happens to the file afterwards."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.course import Course
from gpuseat.errors import InputError
from gpuseat.services.report import build_digest
from gpuseat.services.survey import SurveyService
from gpuseat.store import open_store
from pg_schema import db_url  # noqa: F401 (the url fixture: SQLite and PostgreSQL)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
LAB = EXAMPLES / "h200-lab"  # course.toml names offers.toml: a 2× H200 server next to aws:g5.xlarge


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    """The h200-lab walk-through's course file and offers file, in a folder of the test's own."""
    folder = tmp_path / "lab"
    folder.mkdir()
    shutil.copy(LAB / "course.toml", folder / "course.toml")
    shutil.copy(LAB / "offers.toml", folder / "offers.toml")
    return folder / "course.toml"


def ok(result):
    assert result.code == 0, result.err
    assert "Traceback" not in result.out + result.err
    return result


def stored_courses(url: str) -> list[str]:
    with open_store(url, create=True) as store:
        return [c.key for c in store.courses.list_courses()]


def plan_options(cli, course: Path) -> list[dict[str, object]]:
    """``gpuseat plan`` on the file, with the report's number of alternatives."""
    return json.loads(ok(cli("plan", course, "--alternatives", "5", "--format", "json")).out)["options"]


def report_alternatives(url: str, key: str) -> tuple[list[dict[str, object]], list[str]]:
    with open_store(url) as store:
        digest = build_digest(store, SurveyService(store), load_catalog(), key, with_alternatives=True)
    return digest.alternatives, digest.notes


def test_a_missing_offers_file_is_refused_and_nothing_stored(cli, url, lab):
    (lab.parent / "offers.toml").unlink()
    r = cli("course", "create", lab, "--db", url)
    assert r.code == 2 and "Traceback" not in r.err
    assert f"{lab}: field 'offers_files': {lab.parent / 'offers.toml'}: offers file not found" in r.err
    assert f"check 'offers.toml' in offers_files: it is relative to the course file's folder ({lab.parent})" in r.err
    assert stored_courses(url) == []


@pytest.mark.parametrize(
    ("change", "what"),
    [
        (lambda t: t.replace('gpu = "H200-141GB"', 'gpu = "H900"'), ":6: field 'offer[0]': unknown GPU model 'H900'"),
        (lambda t: t.replace("price_usd = 4000", "price_usd = -5"), "field 'offer[0].price_usd'"),
        (lambda t: t.replace("[[offer]]", "[[offer]"), "malformed TOML"),
        (lambda t: t + "colour = 1\n", "field 'offer[0].colour': unknown field"),
    ],
    ids=["unknown-gpu", "negative-price", "bad-toml", "unknown-field"],
)
def test_an_invalid_offers_file_is_refused_with_the_plan_message(cli, url, lab, change, what):
    """The same rule and the same message as ``gpuseat plan`` on the file; nothing is stored."""
    offers = lab.parent / "offers.toml"
    offers.write_text(change(offers.read_text()))
    r = cli("course", "create", lab, "--db", url)
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert r.err.startswith(f"error: {lab}: field 'offers_files': {offers}") and what in r.err, r.err
    planned = cli("plan", lab)
    assert planned.code == 2 and planned.err == r.err
    assert stored_courses(url) == []


def test_an_offers_file_that_is_a_folder_is_refused(cli, url, lab):
    (lab.parent / "offers.toml").unlink()
    (lab.parent / "offers.toml").mkdir()
    r = cli("course", "create", lab, "--db", url)
    assert r.code == 2 and f"field 'offers_files': {lab.parent / 'offers.toml'}: is a directory" in r.err
    assert stored_courses(url) == []


def test_stored_offers_give_the_report_the_plan_of_the_file(cli, url, lab):
    """Stored with the course: the report's alternatives are ``gpuseat plan``'s options, and stay so when
    the offers file is deleted, or changed on disk (the stored course keeps the text it was created with)."""
    out = ok(cli("course", "create", lab, "--key", "h200", "--plan-option", "1", "--db", url)).out
    assert "offers files stored with it: offers.toml" in out
    assert "offers files stored with it: offers.toml" in ok(cli("course", "show", "--course", "h200", "--db", url)).out
    planned = plan_options(cli, lab)
    assert any(o["offer"] == "example:bm-2xH200" for p in planned for o in p["offers"])  # the file's offer counts
    alternatives, notes = report_alternatives(url, "h200")
    assert alternatives == planned and notes == []
    from gpuseat.services.planning import plan_stored_course  # here: the old code fails this test, not the file

    with open_store(url) as store:
        assert store.courses.offers_texts("h200") == [("offers.toml", (LAB / "offers.toml").read_text())]
        whole = plan_stored_course(store, "h200", load_catalog(), alternatives=5).to_dict()
    on_file = json.loads(ok(cli("plan", lab, "--alternatives", "5", "--format", "json")).out)
    assert whole["options"] == on_file["options"] and whole["warnings"] == on_file["warnings"]

    offers = lab.parent / "offers.toml"
    offers.write_text(offers.read_text().replace("price_usd = 4000", "price_usd = 1"))
    assert plan_options(cli, lab) != planned  # the file on disk now plans differently…
    assert report_alternatives(url, "h200") == (planned, [])  # …the stored course does not
    offers.unlink()
    assert report_alternatives(url, "h200") == (planned, [])
    shutil.move(lab.parent, lab.parent.with_name("moved"))
    assert report_alternatives(url, "h200") == (planned, [])
    report = lab.parent.parent / "report.html"
    ok(cli("report", "--out", report, "--course", "h200", "--db", url))
    html = report.read_text()
    assert "example:bm-2xH200" in html.split('<section id="cost">')[0] and "no alternatives" not in html


def test_the_chosen_option_is_billed_by_the_stored_offers_rules(cli, url, lab):
    """The report's cost so far prices a line on the course's own offer by that offer's billing rule: the
    server is rented by the whole month, so two days into September the month's rent is billed, even with
    the offers file gone (it was priced in step with the hours, as an offer the catalog does not know)."""
    from datetime import UTC, datetime

    ok(cli("course", "create", lab, "--key", "h200", "--plan-option", "1", "--db", url))
    (lab.parent / "offers.toml").unlink()
    with open_store(url) as store:
        digest = build_digest(
            store, SurveyService(store), load_catalog(), "h200", now=datetime(2026, 9, 9, 12, tzinfo=UTC)
        )
    assert digest.spend is not None
    rent = [ln for ln in digest.spend.lines if ln.offer == "example:bm-2xH200" and ln.item == "server rent"]
    assert [(ln.planned_usd, ln.to_date_usd) for ln in rent] == [(4000.0, 4000.0)]


def test_export_and_import_keep_the_offers_files(cli, url, lab, tmp_path):
    ok(cli("course", "create", lab, "--key", "h200", "--db", url))
    archive = tmp_path / "h200.zip"
    ok(cli("course", "export", "--to", archive, "--course", "h200", "--db", url))
    ok(cli("course", "import", archive, "--key", "copy", "--db", url))
    planned = plan_options(cli, lab)
    (lab.parent / "offers.toml").unlink()
    assert report_alternatives(url, "copy") == (planned, [])


def test_a_course_stored_without_its_offers_texts_says_so(cli, url, lab):
    """A course stored before the texts were kept (the column is NULL): the report says which offers file
    is missing from the store, and plans on the bundled offers, instead of planning as if the course had
    named none."""
    from sqlalchemy import update

    from gpuseat.db.models import CourseRecord

    text = lab.read_text().replace('offers = ["example:*", "aws:g5.xlarge"]\n', "")  # every offer counts
    lab.write_text(text)
    bare = lab.with_name("bare.toml")
    bare.write_text(text.replace('offers_files = ["offers.toml"]\n', ""))
    ok(cli("course", "create", lab, "--key", "h200", "--db", url))
    with_file = plan_options(cli, lab)
    assert report_alternatives(url, "h200") == (with_file, [])
    with open_store(url) as store, store.database.write() as s:
        s.execute(update(CourseRecord).values(offers_files=None))
    alternatives, notes = report_alternatives(url, "h200")
    assert alternatives == plan_options(cli, bare) != with_file  # the bundled offers only
    assert notes == [
        "the course's offers file(s) offers.toml are not stored with it (it was stored before gpuseat kept "
        "them): their offers are left out here; gpuseat plan on the course file reads them"
    ]


def test_a_course_without_offers_files_is_stored_as_before(cli, url):
    """No offers files, from a file or already parsed (the demo's way): nothing is stored for them."""
    ok(cli("course", "create", EXAMPLES / "course-2016.toml", "--db", url))
    with open_store(url) as store:
        assert store.courses.offers_texts("course-2016") is None
        parsed = store.courses.course_file("course-2016")
        store.courses.create_course_from(parsed, key="parsed", source_text=store.courses.course_text("course-2016"))
        assert store.courses.offers_texts("parsed") is None
    assert report_alternatives(url, "parsed")[0] == plan_options(cli, EXAMPLES / "course-2016.toml")


def test_a_parsed_course_naming_offers_files_needs_their_texts(url, lab):
    """The store cannot read offers files itself: a parsed course that names some is refused without
    their texts (else its re-plans would silently drop them), and stored with them."""
    parsed = Course.model_validate(
        {
            "offers_files": ["offers.toml"],
            "offers": ["example:*"],
            "participants": 2,
            "schedule": {"start": "2026-09-07", "days": 3},
        }
    )
    text = (lab.parent / "offers.toml").read_text()
    with open_store(url, create=True) as store:
        with pytest.raises(InputError, match="names the offers files"):
            store.courses.create_course_from(parsed, key="p")
        assert store.courses.list_courses() == []
        store.courses.create_course_from(parsed, key="p", offers_files=[("offers.toml", text)])
        assert store.courses.offers_texts("p") == [("offers.toml", text)]
