"""Two courses on one Slurm node's GPU (a course left unarchived, then the next one with a seat recorded on the same
device file under another seat key: another GRES type on the same ``File=``, which slurmd counts as a second GPU):
the Slurm engine follows the host engine's rule (``gpuseat.engines.other_courses``): the older holder keeps the GPU;
the newer holder is in no session, seat limit or association of their course, and the pass fails their seat's
``seat.device`` step (exit 2) with the other course's seat and the fix. The stand-in cluster of
``test_engine_plan.py`` (no daemons) and a real SQLite store.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gpuseat.engines import registry
from gpuseat.engines.apply import one_pass, plan_all
from gpuseat.engines.slurm import config
from gpuseat.engines.slurm import course as service

from .test_engine_plan import Lab, lab  # noqa: F401 (lab: the fixture)


def _second_course(lab: Lab, root: Path) -> None:  # noqa: F811
    """Course c2, made after c1: dan holds seat x-01, recorded on gpu01's /dev/nvidia0 (alice's GPU in c1)."""
    st = lab.store
    today = datetime.now(UTC).date()
    (root / "c2.toml").write_text(
        f'name = "c2"\nparticipants = 1\n\n[needs]\nmin_gpu_memory_gb = 4\n\n[schedule]\nstart = {today}\n'
        f'end = {today}\n\n[[schedule.session]]\ndate = {today}\nhours = "00:00-24:00"\n'
    )
    (root / "c2-roster.csv").write_text("name,email,group,unix_user\ndan,dan@example.edu,participants,dan\n")
    st.courses.create_course(root / "c2.toml", key="c2", timezone="UTC")  # type: ignore[attr-defined]
    st.roster.import_roster("c2", root / "c2-roster.csv")  # type: ignore[attr-defined]
    dev = config.GresDevice(node="gpu01", gres_type="m60", files=("/dev/nvidia0",), core=0, seat="x-01")
    st.seats.add_seats("c2", [{"key": "x-01", "kind": "gpu", "host": "gpu01", "memory_gb": 8}])  # type: ignore[attr-defined]
    service.record_config(st, "c2", config.bind_cores([dev]))
    st.seats.assign("c2", "dan", "x-01")  # type: ignore[attr-defined]
    st.agents.set_engine_settings("c2", "slurm", {"slurm_conf": str(lab.fake.conf), "cancel_wait_s": 1})  # type: ignore[attr-defined]


def test_the_newer_courses_seat_on_the_same_gpu_gets_no_session_and_fails(lab: Lab, tmp_path: Path) -> None:  # noqa: F811
    assert not lab.apply().failed  # c1: alice on /dev/nvidia0, bob on /dev/nvidia1
    _second_course(lab, tmp_path)
    (p,) = plan_all(lab.store, course="c2", engine="slurm", runner=lab.runner)  # type: ignore[arg-type]
    acts = {(s.action, s.target) for s in p.changes.steps}
    assert ("seat.device", "x-01") in acts and not any(a == "seat.record" for a, _t in acts)
    done = one_pass(lab.store, course="c2", engine="slurm", runner=lab.runner)  # type: ignore[arg-type]
    (failed,) = done.failed
    assert failed["exit_code"] == 2 and "seat.device" in failed["step"], failed
    msg = failed["error"] or ""
    assert "course c1 is not archived and its seat seat-01 (held by alice since" in msg
    assert "gpuseat course archive c1" in msg and "gpuseat seats release --course c1 --seat seat-01" in msg
    c2 = {n: u for n, u in lab.fake.reservations.items() if n.startswith("gpuseat-c2-")}
    assert all("dan" not in users for users in c2.values())
    limits = {(x.user, x.seat_type) for x in config.job_submit_limits((lab.etc / "job_submit.lua").read_text())}
    assert ("dan", "m60.x-01") not in limits and ("alice", "m60.seat-01") in limits
    assert not [s for s in lab.plan().steps if s.action == "seat.device"]  # c1's pass: alice keeps her GPU
    # seats check says the same, before any srun
    settings = lab.store.agents.engine_settings("c2", "slurm")  # type: ignore[attr-defined]
    engine = registry.build("slurm", lab.store, "c2", settings=settings, runner=lab.runner)  # type: ignore[arg-type]
    (dan,) = lab.store.roster.participants("c2")  # type: ignore[attr-defined]
    ready = engine.probe(lab.store.seats.get_seat("c2", "x-01"), dan)  # type: ignore[attr-defined]
    assert ready.state == "broken" and "course c1 is not archived" in (ready.reason or "")
    # c1 archived: dan gets the GPU
    lab.store.lifecycle.archive_course("c1")  # type: ignore[attr-defined]
    (p,) = plan_all(lab.store, course="c2", engine="slurm", runner=lab.runner)  # type: ignore[arg-type]
    acts = {(s.action, s.target) for s in p.changes.steps}
    assert ("seat.device", "x-01") not in acts and ("seat.record", "x-01") in acts
