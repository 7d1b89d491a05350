"""The worked example of docs/course.md through the real CLI, and bad input with exit 2 and nothing stored."""

from __future__ import annotations

import json
import tomllib

import pytest

from gpuseat.store import open_store

from .conftest import EXAMPLES

COURSE = str(EXAMPLES / "course-2016.toml")
ROSTER = str(EXAMPLES / "roster-16.csv")
SERVER = str(EXAMPLES / "ibm-2xM60.toml")
FIXTURES = EXAMPLES.parent / "tests" / "fixtures"


def ok(result):
    assert result.code == 0, result.err
    assert "Traceback" not in result.out + result.err
    return result


def test_worked_example_2016(cli, url):
    db = ("--db", url)
    out = ok(cli("course", "create", COURSE, "--plan-option", "1", *db)).out
    assert "course course-2016: Deep learning course, 2016" in out and "16 × aws:g2.2xlarge" in out
    assert "16 added" in ok(cli("roster", "import", ROSTER, *db)).out
    passthrough = json.loads(
        ok(cli("seats", "add", "--inventory", SERVER, "--mode", "passthrough", "-f", "json", *db)).out
    )
    assert [(s["key"], s["kind"], s["memory_gb"]) for s in passthrough] == [
        (f"seat-0{i}", "gpu", 8.0) for i in range(1, 5)
    ]
    cloud = json.loads(ok(cli("seats", "add", "--cloud", "-f", "json", *db)).out)
    assert len(cloud) == 12 and {(s["kind"], s["engine"], s["profile"]) for s in cloud} == {
        ("cloud", "skypilot", "aws:g2.2xlarge")
    }
    assert "no seats to add" in ok(cli("seats", "add", "--cloud", *db)).out  # everybody is covered now
    report = json.loads(ok(cli("seats", "assign", "-f", "json", *db)).out)
    pairs = {a["participant"]: a["seat"] for a in report["assigned"]}
    assert len(pairs) == 16 and len(set(pairs.values())) == 16
    # own hardware first, by participant key: the first four get the M60 passthrough seats
    assert [pairs[p] for p in ("amartin", "bcosta", "cwei", "dkowalski")] == [
        "seat-01",
        "seat-02",
        "seat-03",
        "seat-04",
    ]
    assert json.loads(ok(cli("seats", "assign", "-f", "json", *db)).out)["kept"] == 16  # re-running changes nothing
    status = json.loads(ok(cli("seats", "status", "-f", "json", *db)).out)
    assert {(r["seat"], r["participant"]) for r in status} == {(s, p) for p, s in pairs.items()}
    assert {r["state"] for r in status} == {"planned"}
    links = json.loads(ok(cli("roster", "links", "--base-url", "https://gpu.example.org", "-f", "json", *db)).out)
    assert len(links) == 16 and all(r["link"].startswith("https://gpu.example.org/t/") for r in links)
    with open_store(url) as store:
        token = links[0]["link"].rsplit("/", 1)[1]
        assert store.tokens.participant_for_token(token).key == links[0]["participant"]
    again = json.loads(ok(cli("roster", "links", "-f", "json", *db)).out)
    assert {r["status"] for r in again} == {"issued before (use --rotate)"} and all(r["link"] is None for r in again)
    # the seats file of top/monitor, for the four seats with a device (none here: UUIDs come when provisioned)
    exported = ok(cli("seats", "export", "--format", "toml", *db)).out
    assert tomllib.loads(exported) == {}
    listed = json.loads(ok(cli("course", "list", "-f", "json", *db)).out)
    assert [(c["key"], c["participants"], c["seats"], c["assigned"]) for c in listed] == [("course-2016", 16, 16, 16)]


def test_seats_from_nvidia_smi_fill_device_uuids_and_export_as_seats_file(cli, url, tmp_path):
    db = ("--db", url)
    ok(cli("course", "create", COURSE, *db))
    ok(cli("roster", "import", ROSTER, *db))
    # an A100's -q -x without MIG UUIDs (old drivers): a clear message pointing at -L
    xml = FIXTURES / "telegraf__a100-sxm4-v12.xml"
    result = cli("seats", "add", "--from-nvidia-smi", xml, *db)
    assert result.code == 2 and "nvidia-smi -L" in result.err
    # an H100 capture whose `nvidia-smi -L` section lists 4 MIG devices (twice: idle and under load)
    capture = FIXTURES / "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-mig__590.48.01.txt"
    added = json.loads(ok(cli("seats", "add", "--from-nvidia-smi", capture, "--host", "gpu1", "-f", "json", *db)).out)
    assert [(s["key"], s["kind"], s["profile"], s["memory_gb"]) for s in added] == [
        ("seat-01", "mig", "3g.40gb", 40.0),
        ("seat-02", "mig", "2g.20gb", 20.0),
        ("seat-03", "mig", "1g.10gb", 10.0),
        ("seat-04", "mig", "1g.10gb", 10.0),
    ]
    assert all(s["device_uuid"].startswith("MIG-") for s in added)
    ok(cli("seats", "assign", "--participant", "amartin", "--seat", "seat-02", *db))
    seats_file = tomllib.loads(ok(cli("seats", "export", "--format", "toml", *db)).out)["seat"]
    assert len(seats_file) == 4
    two = next(s for s in seats_file if s["id"] == "seat-02")
    assert (two["participant"], two["host"]) == ("amartin", "gpu1") and "user" not in two  # login = key
    # the exported file is a valid --seats file for top/monitor
    path = tmp_path / "seats.toml"
    path.write_text(ok(cli("seats", "export", "--format", "toml", *db)).out)
    from gpuseat.monitor.seats import read_seats

    assert [e.participant for e in read_seats(path)].count("amartin") == 1
    rows = ok(cli("seats", "export", "--format", "csv", *db)).out.splitlines()
    assert rows[0].startswith("key,kind,host,device_uuid") and len(rows) == 5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("roster", "import", "MISSING.csv"), "file not found"),
        (("seats", "add"), "say where the seats come from"),
        (("seats", "add", "--cloud"), "no chosen plan option"),
        (("seats", "assign", "--participant", "nobody"), "no participant 'nobody'"),
        (("seats", "move", "--participant", "amartin", "--seat", "zz"), "no seat 'zz'"),
        (("seats", "release"), "name a participant or a seat"),
        (("roster", "links", "--base-url", "javascript:alert(1)"), "not a base URL"),
        (("course", "show", "--course", "nope"), "no course 'nope'"),
        (("course", "create", COURSE), "exists already"),
        (("course", "create", COURSE, "--key", "x", "--plan-option", "99"), "not 99"),
        (("seats", "add", "--inventory", SERVER, "--mode", "mig"), "mig"),
    ],
)
def test_bad_input_exits_2_with_one_message(cli, tmp_path, args, message):
    db = ("--db", f"sqlite:///{tmp_path / 'c.db'}")
    ok(cli("course", "create", COURSE, *db))
    ok(cli("roster", "import", ROSTER, *db))
    before = ok(cli("seats", "export", "--format", "json", *db)).out
    result = cli(*args, *db)
    assert result.code == 2, result.out + result.err
    assert message in result.err and "Traceback" not in result.err
    assert ok(cli("seats", "export", "--format", "json", *db)).out == before


def test_read_commands_do_not_create_the_database(cli, tmp_path):
    path = tmp_path / "none.db"
    for args in (("course", "list"), ("seats", "status"), ("roster", "links")):
        result = cli(*args, "--db", f"sqlite:///{path}")
        assert result.code == 2 and "no gpuseat database here" in result.err
    assert not path.exists()


def test_top_and_usage_read_the_seat_map_of_a_course(cli, url):
    db = ("--db", url)
    ok(cli("course", "create", COURSE, *db))
    ok(cli("course", "create", COURSE, "--key", "other", *db))
    ok(cli("roster", "import", ROSTER, "--course", "course-2016", *db))
    t4 = FIXTURES / "telegraf__tesla-t4.xml"  # one T4 with an Xorg and a python process
    ok(cli("seats", "add", "--from-nvidia-smi", t4, "--course", "course-2016", *db))
    ok(cli("seats", "assign", "--participant", "amartin", "--seat", "seat-01", "--course", "course-2016", *db))
    view = json.loads(ok(cli("top", "--once", "--from-xml", t4, "--course", "course-2016", "-f", "json", *db)).out)
    assert {(p["seat"], p["participant"]) for p in view["processes"]} == {("seat-01", "amartin")}
    other = json.loads(ok(cli("top", "--once", "--from-xml", t4, "--course", "other", "-f", "json", *db)).out)
    assert {(p["seat"], p["participant"]) for p in other["processes"]} == {(None, None)}  # no seats there
    assert json.loads(ok(cli("usage", "--course", "course-2016", "-f", "json", *db)).out)["participants"] == []
    bad = cli("usage", "--course", "nope", *db)
    assert bad.code == 2 and "no course 'nope'" in bad.err and "course-2016" in bad.err
