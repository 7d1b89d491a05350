"""A course's own cloud offers (``offers_files``, stored by ``gpuseat course create``) through ``seats add
--cloud``, the SkyPilot engine and ``seats skypilot``: the cloud seats of the offer the plan chose from
the course's own offers file are added with that offer's id and launched with its instance type and
region, as those of a bundled offer are, on SQLite and PostgreSQL, whatever happens to the file on disk.
A course stored before gpuseat kept its offers files keeps working on the bundled offers, and one whose
plan rents an offer it no longer has gets one clear message (exit 2) naming the offer and the file."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloud.fakesky import FakeSky, import_sky
from cloud.skysetup import ssh_key
from gpuseat.core.roster import RosterText
from gpuseat.engines.apply import one_pass
from gpuseat.engines.runner import RecordingRunner
from gpuseat.store import open_store
from pg_schema import db_url  # noqa: F401 (the url fixture: SQLite and PostgreSQL)

CATALOG = Path(__file__).resolve().parents[1] / "src" / "gpuseat" / "catalog" / "data" / "offers.toml"
OWN = "aws:g6e.xlarge-eu"  # the course's own quote: an instance type and region gpuseat's catalog lacks
OPEN = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)  # Monday 10:00, inside the 09:00-17:00 sessions (UTC course)

COURSE = """\
name = "Own cloud lab"
offers_files = ["offers.toml"]
offers = [{offers}]

[schedule]
start = 2026-03-02
end = 2026-03-13
weekdays = ["mon", "tue", "wed", "thu", "fri"]
hours = "09:00-17:00"

[[group]]
name = "students"
count = 2
min_gpu_memory_gb = 12
"""


def own_offers_text() -> str:
    """An offers file of the bundled format: the bundled aws:g6e.xlarge, quoted for Stockholm."""
    text = CATALOG.read_text(encoding="utf-8")
    block = text[text.index('id = "aws:g6e.xlarge"') :]
    block = block[: block.index("[[offer]]")]
    assert 'region = "us-east-1"' in block and "price_usd = 1.861" in block
    block = (
        block.replace('id = "aws:g6e.xlarge"', f'id = "{OWN}"')
        .replace('region = "us-east-1"', 'region = "eu-north-1"')
        .replace("price_usd = 1.861", "price_usd = 0.95")
    )
    return "schema_version = 1\n\n[[offer]]\n" + block


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A course folder with the course's own offers file."""
    out = tmp_path / "lab"
    out.mkdir()
    (out / "offers.toml").write_text(own_offers_text(), encoding="utf-8")
    return out


def course_file(folder: Path, name: str, offers: str) -> Path:
    path = folder / name
    path.write_text(COURSE.format(offers=offers), encoding="utf-8")
    return path


@pytest.fixture
def fake(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> FakeSky:
    """The recording fake of the installed SkyPilot SDK, as the engine loads it."""
    sky = FakeSky(import_sky(tmp_path_factory))
    monkeypatch.setattr("gpuseat.engines.skypilot.sdk.load_sky", lambda: sky)
    return sky


def ok(result: Any) -> Any:
    assert result.code == 0, result.err
    assert "Traceback" not in result.out + result.err
    return result


def refused(result: Any) -> str:
    assert result.code == 2, (result.out, result.err)
    assert "Traceback" not in result.out + result.err
    return str(result.err)


def create(cli: Any, course: Path, key: str, url: str) -> None:
    ok(cli("course", "create", course, "--key", key, "--plan-option", "1", "--db", url))


def forget_offers_texts(url: str, key: str) -> None:
    """What a course stored before gpuseat kept its offers files looks like (migration 0017's NULL)."""
    from sqlalchemy import update

    from gpuseat.db.models import CourseRecord

    with open_store(url) as store, store.database.write() as s:
        s.execute(update(CourseRecord).where(CourseRecord.key == key).values(offers_files=None))


def launch(url: str, key: str, tmp_path: Path, fake: FakeSky) -> tuple[Any, list[dict[str, Any]]]:
    """Ann holds cloud-01; one pass of the agent for the skypilot engine at OPEN: (the pass, the launched tasks)."""
    keys = tmp_path / f"keys-{key}"
    keys.mkdir()
    roster = f"name,email,group,unix_user,ssh_key\nAnn,ann@example.edu,students,ann,{ssh_key(keys, 'ann')}\n"
    with open_store(url) as store:
        store.roster.import_roster(key, RosterText(roster, where="roster.csv"))
        store.seats.assign(key, "ann", "cloud-01")
        done = one_pass(store, course=key, engine="skypilot", runner=RecordingRunner(), now=OPEN)
    return done, fake.launched()


def test_the_courses_own_cloud_offer_is_added_and_launched(cli, url, folder, tmp_path, fake):
    """The plan's option 1 rents the course's own offer: ``seats add --cloud`` adds its seats with its id
    (they were refused as renting no cloud offer), and the agent launches them with its instance type and
    region (it could not tell which offer they rent), with the offers file gone from the disk."""
    course = course_file(folder, "course.toml", f'"{OWN}"')
    planned = json.loads(ok(cli("plan", course, "--format", "json")).out)["options"][0]
    assert [g["offer"] for g in planned["groups"]] == [OWN]
    create(cli, course, "own", url)
    (folder / "offers.toml").unlink()  # the stored course keeps the text it was created with
    added = json.loads(ok(cli("seats", "add", "--cloud", "-f", "json", "--course", "own", "--db", url)).out)
    assert [(s["key"], s["kind"], s["engine"], s["profile"], s["memory_gb"]) for s in added] == [
        (f"cloud-0{i}", "cloud", "skypilot", OWN, 48.0) for i in (1, 2)
    ]
    done, tasks = launch(url, "own", tmp_path, fake)
    assert not done.failed, done.failed
    (task,) = tasks
    assert task["resources"]["cloud"] == "aws"
    assert (task["resources"]["instance_type"], task["resources"]["region"]) == ("g6e.xlarge", "eu-north-1")
    assert "P_USER=ann" in task["setup"]
    with open_store(url) as store:
        seat = store.seats.get_seat("own", "cloud-01")
    assert (seat.state, seat.engine_ref) == ("running", "gs-own-cloud-01")


def test_seats_skypilot_writes_the_own_offers_task(cli, url, folder, tmp_path):
    """``gpuseat seats skypilot`` (the task files for running sky yourself) looks the offer up the same way."""
    create(cli, course_file(folder, "course.toml", f'"{OWN}"'), "own", url)
    ok(cli("seats", "add", "--cloud", "--course", "own", "--db", url))
    out = tmp_path / "sky"
    ok(cli("seats", "skypilot", "--out", out, "--course", "own", "--db", url))
    task = yaml.safe_load((out / "gs-own-cloud-01.yaml").read_text(encoding="utf-8"))
    assert task["resources"]["cloud"] == "aws"
    assert (task["resources"]["instance_type"], task["resources"]["region"]) == ("g6e.xlarge", "eu-north-1")


def test_a_course_stored_without_its_offers_texts(cli, url, folder, tmp_path, fake):
    """Stored before gpuseat kept offers files: a plan on a bundled offer still gets its seats added and
    launched as before; a plan on the course's own offer is one clear refusal naming the offer, the
    offers file the store lacks and how to fix it (it said the plan rents no cloud offer), at ``seats add
    --cloud`` and at the agent's launch (it could not tell which offer the seat rents)."""
    create(cli, course_file(folder, "bundled.toml", '"aws:g4dn.xlarge"'), "bundled", url)
    create(cli, course_file(folder, "own.toml", f'"{OWN}"'), "own", url)
    ok(cli("seats", "add", "--cloud", "--course", "own", "--db", url))  # added while the texts were stored
    forget_offers_texts(url, "bundled")
    forget_offers_texts(url, "own")

    added = json.loads(ok(cli("seats", "add", "--cloud", "-f", "json", "--course", "bundled", "--db", url)).out)
    assert {(s["kind"], s["profile"]) for s in added} == {("cloud", "aws:g4dn.xlarge")} and len(added) == 2
    done, tasks = launch(url, "bundled", tmp_path, fake)
    assert not done.failed, done.failed
    assert [(t["resources"]["instance_type"], t["resources"]["region"]) for t in tasks] == [
        ("g4dn.xlarge", "us-east-1")
    ]

    with open_store(url) as store:
        store.lifecycle.remove_seats("own", ["cloud-02"])
    err = refused(cli("seats", "add", "--cloud", "--course", "own", "--db", url))
    assert err.startswith("error: --cloud: ")
    assert f"plan option 1 of course 'own' rents cloud offer {OWN} for group students" in err
    assert "neither in gpuseat's catalog nor in the offers files stored with the course" in err
    fix = "the course was stored before gpuseat kept its offers files (offers.toml): load its course file again "
    assert fix + "beside them (gpuseat course update COURSE.toml --key own stores them with it)" in err
    with open_store(url) as store:
        assert [s.key for s in store.seats.seats("own")] == ["cloud-01"]  # nothing added

    done, tasks = launch(url, "own", tmp_path, fake)
    assert len(tasks) == 1  # the bundled course's only
    (launched,) = [o for r in done.reports for o in r.outcomes if o.step.action == "cloud.launch"]
    assert (launched.state, launched.exit_code) == ("failed", 2)
    error = str(launched.message)
    assert f"seat cloud-01: it rents offer {OWN}, which is neither in gpuseat's catalog nor in the offers" in error
    assert fix in error

    # the fix as given: the course file loaded again beside its offers file stores the texts; the seat launches
    ok(cli("course", "update", folder / "own.toml", "--key", "own", "--db", url))
    with open_store(url) as store:
        again = one_pass(store, course="own", engine="skypilot", runner=RecordingRunner(), now=OPEN)
    assert not again.failed, again.failed
    assert [(t["resources"]["instance_type"], t["resources"]["region"]) for t in fake.launched()][-1] == (
        "g6e.xlarge",
        "eu-north-1",
    )


def test_a_seat_on_a_lacking_offer_is_never_launched_on_another_groups_offer():
    """A plan option with a bundled cloud group and one on an offer the course lacks (mode ``instance``): a
    seat of the second group is refused, naming its offer; it was launched on the first group's offer."""
    from gpuseat.catalog.bundle import load_catalog
    from gpuseat.engines.skypilot.tasks import offer_for
    from gpuseat.errors import InputError

    option = {
        "rank": 1,
        "groups": [
            {"group": "students", "offer": "aws:g4dn.xlarge", "seats": 2, "mode": "instance"},
            {"group": "instructors", "offer": OWN, "seats": 1, "mode": "instance"},
        ],
    }
    offers = load_catalog().offers
    assert offer_for("aws:g4dn.xlarge", option, offers, seat="cloud-01").id == "aws:g4dn.xlarge"
    with pytest.raises(InputError, match=f"seat cloud-03: it rents offer {OWN}, which is neither"):
        offer_for(OWN, option, offers, seat="cloud-03")
    with pytest.raises(InputError) as caught:
        offer_for(OWN, option, offers, seat="cloud-03", unknown_fix=lambda: "create the course again")
    assert caught.value.fix == "create the course again"
    with pytest.raises(InputError, match="seat cloud-04: cannot tell which offer the cloud seat rents \\(several"):
        offer_for(None, option, offers, seat="cloud-04")


def test_a_seat_naming_an_offer_the_course_lacks_is_refused_even_with_one_cloud_group():
    """A seat whose profile is an offer id the course lacks (a typo, an offer gone from the catalog) on a plan
    with one cloud group: refused with its offer named; it was launched on the group's offer without a word.
    A profile that is no offer id still takes the plan's one cloud offer."""
    from gpuseat.catalog.bundle import load_catalog
    from gpuseat.engines.skypilot.tasks import offer_for
    from gpuseat.errors import InputError

    option = {"rank": 1, "groups": [{"group": "students", "offer": "aws:g4dn.xlarge", "seats": 2, "mode": "instance"}]}
    offers = load_catalog().offers
    for typo in ("aws:g4dn.xlarg", "gcp:g4dn.xlarge"):
        with pytest.raises(InputError, match=f"seat cloud-02: it rents offer {typo}, which is neither"):
            offer_for(typo, option, offers, seat="cloud-02")
    assert offer_for("aws:g4dn.xlarge", option, offers, seat="cloud-01").id == "aws:g4dn.xlarge"
    assert offer_for(None, option, offers, seat="cloud-01").id == "aws:g4dn.xlarge"
    assert offer_for("T4", option, offers, seat="cloud-01").id == "aws:g4dn.xlarge"
