"""``gpuseat report`` on the demo course: one self-contained file with every section and chart."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from gpuseat.services.demo import seed_demo

#: the tests on the module's seeded demo run on one xdist worker, so it is seeded once
SHARED = pytest.mark.xdist_group(name="portal-report-demo")

SECTIONS = ("plan", "cost", "seats", "utilisation", "benchmarks", "survey")
CHARTS = ("cost", "utilisation", "benchmark", "nps", "survey-expectations", "survey-recommend")


class Parsed(HTMLParser):
    """Collects sections (their text), charts (their marks), and every URL-bearing attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, list[str]] = {}
        self.charts: dict[str, list[dict]] = {}
        self.urls: list[str] = []
        self.tags: set[str] = set()
        self._section: str | None = None
        self._chart: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        for key in ("src", "href", "action", "xlink:href"):
            if key in a:
                self.urls.append(a[key])
        if tag == "section":
            self._section = a.get("id")
            self.sections[self._section] = []
        if tag == "svg":
            self._chart = a.get("data-chart")
            self.charts[self._chart] = []
        if self._chart and tag in ("rect", "polyline", "text"):
            self.charts[self._chart].append({"tag": tag, **a})

    def handle_endtag(self, tag):
        if tag == "section":
            self._section = None
        if tag == "svg":
            self._chart = None

    def handle_data(self, data):
        if self._section and data.strip():
            self.sections[self._section].append(data.strip())


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory):
    return seed_demo(tmp_path_factory.mktemp("demo"))


@SHARED
def test_report_has_every_section_and_chart_and_no_external_urls(cli, demo_db, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(demo_db.folder))  # the demo's benchmark store
    out = tmp_path / "r.html"
    r = cli("report", "--db", demo_db.db_url, "--out", out)
    assert r.code == 0, r.err
    html = out.read_text(encoding="utf-8")
    doc = Parsed()
    doc.feed(html)
    for sid in SECTIONS:
        assert sid in doc.sections and len(" ".join(doc.sections[sid])) > 80, sid
    for chart in CHARTS:
        marks = doc.charts.get(chart)
        assert marks, f"chart {chart} missing"
        assert not any(m.get("data-empty") for m in marks), f"chart {chart} is empty"
        assert any(m["tag"] in ("rect", "polyline") for m in marks), chart
    assert doc.urls == [] and not {"script", "link", "img", "iframe"} & doc.tags
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in html
    text = " ".join(doc.sections["benchmarks"])
    assert "24 h of K520 work takes" in text
    assert "Net Promoter Score" in " ".join(doc.sections["survey"])
    assert "ibm:bm-2xM60" in " ".join(doc.sections["plan"]) and "aws:g2.2xlarge" in " ".join(doc.sections["plan"])
    seat_rows = [t for t in doc.sections["seats"] if t.startswith(("m60-", "aws-"))]
    assert len(seat_rows) == 16


@SHARED
def test_report_refuses_to_overwrite_without_force(cli, demo_db, tmp_path):
    out = tmp_path / "r.html"
    out.write_text("mine")
    r = cli("report", "--db", demo_db.db_url, "--out", out)
    assert r.code == 2 and "exists already" in r.err and out.read_text() == "mine"
    assert cli("report", "--db", demo_db.db_url, "--out", tmp_path / "missing" / "r.html").code == 2
    assert cli("report", "--db", demo_db.db_url, "--out", out, "--force").code == 0


@SHARED
def test_survey_report_in_the_terminal(cli, demo_db):
    r = cli("survey", "report", "--db", demo_db.db_url)
    assert r.code == 0, r.err
    assert "8 responses" in r.out and "NPS" in r.out and "teaching it to my team" in r.out
    j = cli("survey", "report", "--db", demo_db.db_url, "--format", "json")
    assert '"responses": 8' in j.out
    assert cli("survey", "close", "--db", demo_db.db_url).code == 0
    assert "survey closed" in cli("survey", "report", "--db", demo_db.db_url).out


class _Checked:
    """A ``seats check`` result as the store keeps it (the engines' Readiness, by its fields)."""

    def __init__(self, seat: str, participant: str, state: str, reason: str | None, at: str) -> None:
        self.course, self.seat, self.participant, self.state, self.reason = "dl-2016", seat, participant, state, reason
        self.visible: tuple[str, ...] = ()
        self.at = at

    def to_dict(self) -> dict:
        return {
            "course": self.course,
            "seat": self.seat,
            "participant": self.participant,
            "state": self.state,
            "reason": self.reason,
            "evidence": "",
            "visible": [],
            "checked_at": self.at,
            "engine": "libvirt",
        }


def test_report_has_a_readiness_section_from_the_last_seats_check(cli, tmp_path_factory, monkeypatch):
    demo = seed_demo(tmp_path_factory.mktemp("demo-ready"))  # its own store: this test writes checks
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(demo.folder))

    def readiness() -> str:
        out = tmp_path_factory.mktemp("out") / "r.html"
        r = cli("report", "--db", demo.db_url, "--out", out)
        assert r.code == 0, r.err
        doc = Parsed()
        doc.feed(out.read_text(encoding="utf-8"))
        return " ".join(doc.sections["readiness"])

    assert "No seat has been checked yet" in readiness() and "gpuseat seats check" in readiness()
    from gpuseat.store import open_store

    with open_store(demo.db_url) as store:
        held = [s for s in store.seats.seats("dl-2016") if s.participant][:3]
        store.delivery.record_readiness(
            [
                _Checked(held[0].key, held[0].participant, "ready", None, "2026-09-06T18:02:00+00:00"),
                _Checked(held[1].key, held[1].participant, "broken", "missing device file /dev/nvidia3",
                         "2026-09-06T18:03:00+00:00"),
            ]
        )  # fmt: skip
        assigned = sum(1 for s in store.seats.seats("dl-2016") if s.participant)
    text = readiness()
    assert "Last gpuseat seats check : 2026-09-06 18:03 UTC" in text
    assert f"1/{assigned} ready" in text and "1 broken" in text and f"{assigned - 2} not checked" in text
    assert f"{held[1].key} {held[1].participant} broken missing device file /dev/nvidia3" in text
    assert (
        f"{held[0].key} {held[0].participant} ready" in text
        and f"{held[2].key} {held[2].participant} not checked" in text
    )
