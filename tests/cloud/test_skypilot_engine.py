"""The SkyPilot seat engine without a cloud: what it writes, which commands it runs (recorded by the
runner, with answers shaped like SkyPilot's), and what reaches the store. The task file it launches is
loaded with SkyPilot's own loader."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuseat.core.roster import RosterText
from gpuseat.errors import EngineError
from gpuseat.services.courses import open_store
from gpuseat.services.engine import load_engine

from .skysetup import ssh_key
from .test_skypilot import _sky_load

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).parents[2] / "examples"
OPTION = {
    "rank": 1,
    "offers": [{"offer": "aws:g4dn.xlarge", "count": 1}],
    "groups": [{"group": "students", "offer": "aws:g4dn.xlarge", "units": 1, "seats": 1}],
}


@pytest.fixture
def store(tmp_path):
    st = open_store(f"sqlite:///{tmp_path / 'course.db'}", create=True)
    st.create_course(EXAMPLES / "course-lab-hours.toml", key="lab", timezone="UTC", plan_option=OPTION)
    key = ssh_key(tmp_path, "ann")
    roster = f"name,email,group,unix_user,ssh_key\nAnn,ann@example.edu,students,ann,{key}\n"
    st.import_roster("lab", RosterText(roster, where="roster.csv"))
    st.add_seats("lab", [{"key": "cloud-1", "kind": "cloud"}])
    st.assign("lab", "ann", "cloud-1")
    yield st
    st.close()


class Sky:
    """Records argument lists; answers ``sky status --ip`` with an address and ``sky launch`` with ``code``."""

    def __init__(self, code: int = 0) -> None:
        self.calls: list[list[str]] = []
        self.code = code

    def __call__(self, argv):
        self.calls.append(list(argv))
        if argv[1:3] == ["status", "--ip"]:
            return subprocess.CompletedProcess(argv, 0, "54.12.3.4\n", "")
        if argv[1] == "launch" and self.code:
            return subprocess.CompletedProcess(argv, self.code, "", "sky.exceptions.ResourcesUnavailableError: no g4dn")
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_provision_launches_a_task_skypilot_loads_and_records_the_cluster(store, tmp_path):
    sky = Sky()
    engine = load_engine("skypilot", store, "lab", out=str(tmp_path / "sky"))
    engine.run = sky  # type: ignore[attr-defined]
    seat = store.get_seat("lab", "cloud-1")
    access = engine.provision(seat, store.find_participant("lab", "ann"))
    task = tmp_path / "sky" / "gs-lab-cloud-1.yaml"
    assert sky.calls[0] == ["sky", "launch", "--yes", "--cluster", "gs-lab-cloud-1", str(task)]
    (loaded,) = _sky_load([task], tmp_path / "home")
    assert "error" not in loaded and "P_USER=ann" in loaded["setup"] and loaded["idle_minutes"] is None
    after = store.get_seat("lab", "cloud-1")
    assert (after.engine, after.engine_ref, after.state) == ("skypilot", "gs-lab-cloud-1", "running")
    assert access is not None and (access.kind, access.host, access.user) == ("ssh", "54.12.3.4", "ann")
    assert access.command == "ssh ann@54.12.3.4"
    engine.teardown(after)
    assert sky.calls[-1] == ["sky", "down", "--yes", "gs-lab-cloud-1"]
    assert store.get_seat("lab", "cloud-1").state == "released"


def test_a_failed_launch_marks_the_seat_failed_with_skypilots_error(store, tmp_path):
    engine = load_engine("skypilot", store, "lab", out=str(tmp_path / "sky"))
    engine.run = Sky(code=1)  # type: ignore[attr-defined]
    with pytest.raises(EngineError, match="ResourcesUnavailableError"):
        engine.provision(store.get_seat("lab", "cloud-1"), store.find_participant("lab", "ann"))
    seat = store.get_seat("lab", "cloud-1")
    assert seat.state == "failed" and "ResourcesUnavailableError" in (seat.state_reason or "")
