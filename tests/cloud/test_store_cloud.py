"""Cloud seats from the course store: the 2016 course with 12 cloud seats, files, recorded clusters, cost so far."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuseat.catalog.bundle import load_catalog
from gpuseat.engines.skypilot import tasks as cloud

courses = pytest.importorskip("gpuseat.store")
EXAMPLES = Path(__file__).parents[2] / "examples"
OPTION = {
    "rank": 1,
    "offers": [{"offer": "aws:g2.2xlarge", "count": 12}],
    "groups": [{"group": "participants", "offer": "aws:g2.2xlarge", "units": 12, "seats": 12}],
}


@pytest.fixture
def store(tmp_path: Path):
    st = courses.open_store(f"sqlite:///{tmp_path / 'course.db'}", create=True)
    st.courses.create_course(EXAMPLES / "course-2016.toml", key="c2016", timezone="UTC", plan_option=OPTION)
    st.seats.add_seats("c2016", [{"key": f"cloud-{i:02d}", "kind": "cloud"} for i in range(1, 13)])
    yield st
    st.close()


def test_write_for_course_records_clusters_and_cost_so_far(store, tmp_path: Path) -> None:
    offers = load_catalog().offers
    written = cloud.write_for_course(store, "c2016", tmp_path / "sky", offers, cloud.TaskOptions())
    assert len(written.tasks) == 12 and written.windows == 1 and written.warnings
    seat = store.seats.get_seat("c2016", "cloud-03")
    assert (seat.engine, seat.engine_ref, seat.state) == ("skypilot", "gs-c2016-cloud-03", "requested")
    # 2016-06-06 00:00 UTC start, 10 min lead: at 2016-06-07 00:00 each seat ran 24 h 10 min
    now = datetime(2016, 6, 7, tzinfo=UTC)
    costs = cloud.cost_so_far(store, "c2016", offers, now)
    assert len(costs) == 12
    assert costs[0].hours.runs_s == (24 * 3600 + 600,)
    # g2.2xlarge billed per started hour in 2016: 25 h at $0.65
    assert costs[0].usd == pytest.approx(25 * 0.65)
    with pytest.raises(Exception, match="time zone"):
        cloud.cost_so_far(store, "c2016", offers, datetime(2016, 6, 7))


def test_seats_skypilot_command(store, tmp_path: Path, cli) -> None:
    pytest.importorskip("gpuseat.cli.seats")
    url = f"sqlite:///{tmp_path / 'course.db'}"
    out = tmp_path / "sky"
    r = cli("seats", "skypilot", "--course", "c2016", "--db", url, "--out", out, "--disk-gb", "30")
    assert r.code == 0, r.err
    assert "12 task file(s)" in r.out and "retired instance type" in r.err
    assert "the agent launches and stops these seats itself" in r.err
    assert len(list(out.glob("gs-c2016-cloud-*.yaml"))) == 12
    assert "disk_size: 30" in (out / "gs-c2016-cloud-01.yaml").read_text()
    r = cli("seats", "skypilot", "--course", "c2016", "--db", url, "--out", out, "--gpuseat-spec", "x; rm -rf /")
    assert r.code == 2 and "pip requirement" in r.err
    r = cli("seats", "skypilot", "--course", "c2016", "--db", url, "--out", out, "--wheelhouse", out, "--force")
    assert r.code == 2 and "--wheelhouse" in r.err and "0 gpuseat wheels" in r.err
    r = cli("seats", "skypilot", "--course", "c2016", "--db", url, "--out", out, "--offline")
    assert r.code == 2 and "--offline" in r.err
