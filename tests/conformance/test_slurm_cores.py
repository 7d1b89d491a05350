"""Slurm seats of two cores each, from the participant's side: the cluster of ``test_slurm.py`` set up the
documented way with ``gpuseat engines settings slurm cores_per_seat=2`` stored first (its own cluster of 10 CPUs,
started once for this module: gres.conf binds seat i's GPU to cores 2i and 2i+1, each pair one socket).

A participant's data-loader job (``-c 2 --gres=gpu:1``) runs in the session on their own GPU and the two cores
it is bound to, while another participant's does the same on theirs; ``-c 3`` is refused at once saying how
many CPUs the seat has; outside the session the seat's GPU stays out of reach although two cores are free.
Seen here and fixed: with the node line ``CPUs=8`` alone (eight one-core sockets) a GPU bound to cores 0-1
spanned two sockets and Slurm 22.05 refused every ``-c 2`` job ("Requested node configuration is not
available"); with one socket of eight cores a one-CPU job on carol's GPU ran on alice's core 0 (22.05 binds a
GPU to its cores' socket, not to the cores). gpuseat's node line now makes each seat's cores one socket. The test cluster runs ``TaskPlugin=task/none`` (no cgroup delegation here), so a job's
``nproc``/``taskset`` show the machine's CPUs, not its own: the job's CPUs are read from Slurm
(``SLURM_CPUS_ON_NODE`` in the job, ``CPU_IDs`` in ``scontrol -d show job``). With the default of one core
nothing changes: ``test_slurm.py`` and ``test_slurm_after_day_one.py`` run it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from test_slurm import INDEX, Lab, _gpuseat, start_lab

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(name="slurm_conformance")]


@pytest.fixture(scope="module")
def wide() -> Iterator[Lab]:
    with start_lab(cores_per_seat=2, cpus=10) as started:  # two cores beyond the session's 8
        yield started


def _cpus(lab: Lab, who: str, *args: str) -> tuple[int, str, str]:
    """``srun ARGS`` as the participant in the session: exit code, what the job printed, what Slurm said."""
    session = ("-p", "gpuseat-conf", f"--reservation={lab.session}")
    ids = "$(scontrol -d show job $SLURM_JOB_ID | grep -o 'CPU_IDs=[^ ]*')"
    show = f'echo "CVD=$CUDA_VISIBLE_DEVICES CPUS=$SLURM_CPUS_ON_NODE {ids}"'
    proc = lab.as_user(who, "srun", "--immediate=60", *session, *args, "--", "sh", "-c", show)
    return proc.returncode, proc.stdout, proc.stderr


def test_a_two_core_seat_runs_c_2_on_its_own_gpu_and_cores_and_refuses_c_3(wide: Lab) -> None:
    assert wide.setup_codes == {"config": 0, "enroll": 0, "sessions": 0}
    gres = (wide.cluster.root / "etc" / "gres.conf").read_text()
    assert "Type=m60.seat-01 File=" in gres and [ln.split("Cores=")[1].split()[0] for ln in gres.splitlines()[3:]] == [
        "0-1",
        "2-3",
        "4-5",
        "6-7",
    ]
    out = wide.cluster.root / "out" / "loader-%j.out"
    sub = wide.as_user(
        "alice", "sbatch", "-p", "gpuseat-conf", f"--reservation={wide.session}", "-c", "2", "--gres=gpu:1",
        f"--output={out}", "--wrap", 'echo "CVD=$CUDA_VISIBLE_DEVICES CPUS=$SLURM_CPUS_ON_NODE"; sleep 60', check=True,
    )  # fmt: skip
    alice = sub.stdout.split()[-1]
    try:
        assert wide.wait_state(alice, {"RUNNING"}) == "RUNNING", wide.job(alice)
        shown = wide.job(alice)
        assert re.search(r"CPU_IDs=0-1 .*GRES=gpu:m60\.seat-01:1\(IDX:0\)", shown), shown
        # bob at the same time: his own GPU and its two cores
        rc, said, err = _cpus(wide, "bob", "-c", "2", "--gres=gpu:1")
        assert rc == 0 and f"CVD={INDEX['bob']} CPUS=2 CPU_IDs=2-3\n" in said, (said, err)
        deadline = time.monotonic() + 30
        text = ""
        while time.monotonic() < deadline and "CPUS=" not in text:
            path = wide.cluster.root / "out" / f"loader-{alice}.out"
            text = path.read_text() if path.exists() else ""
            time.sleep(0.2)
        assert f"CVD={INDEX['alice']} CPUS=2\n" in text, text
    finally:
        wide.slurm.run("scancel", [alice], check=False)
    rc, said, err = _cpus(wide, "alice", "-c", "3", "--gres=gpu:1")
    at_most = "your seat in gpuseat-conf has 2 CPUs (the cores its GPU is bound to); ask for at most 2 CPUs (-c 2)"
    assert rc != 0 and "CVD=" not in said and f"this job asks for 3 CPUs; {at_most}" in err, (said, err)
    rc, said, err = _cpus(wide, "carol", "--gres=gpu:1")  # one CPU is fine too: one of her seat's two
    assert rc == 0 and re.search(rf"^CVD={INDEX['carol']} CPUS=1 CPU_IDs=[45]$", said, re.M), (said, err)
    outside = wide.as_user("alice", "srun", "--immediate=2", "-p", "debug", "--gres=gpu:1", "true")
    assert outside.returncode != 0, outside.stderr  # cores 8-9 are free, but not her GPU's
    assert wide.as_user("alice", "srun", "--immediate=10", "-p", "debug", "-c", "2", "true").returncode == 0


def _core_count(lab: Lab) -> str:
    return lab.slurm.reservations()[lab.session].get("CoreCnt", "")


def test_a_course_that_ran_with_one_core_per_seat_gets_two_core_sessions_by_apply_alone(
    wide: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    """The course as it ran with one core per seat (the setting 1, its session made at 4 cores) while
    gres.conf binds two: ``gpuseat apply`` says gres.conf does not match and what to run. Set to 2 while alice's
    job runs in the session, ``gpuseat apply`` keeps the session (Slurm 22.05 changes no core reservation's
    ``CoreCnt``; making it again would end her job) and says so; once her job has ended, ``gpuseat apply`` alone
    makes it again with 8 cores, and carol's ``-c 2`` job runs in it on her own GPU and cores 4-5 (the 4 cores
    were 0-3)."""
    apply = ("apply", "--course", "conf", "--engine", "slurm", "--db", wide.url)
    wide.store.agents.set_engine_settings("conf", "slurm", {"cores_per_seat": 1})  # type: ignore[attr-defined]
    wide.slurm.run("scontrol", ["delete", f"ReservationName={wide.session}"])
    capsys.readouterr()
    assert _gpuseat(*apply) == 0 and _core_count(wide) == "4"
    said = capsys.readouterr().out
    assert "gres.conf binds seat-01 to cores 0-1, not 0; seat-02 to cores 2-3, not 1;" in said, said
    assert "(cores_per_seat is 1): run `gpuseat slurm config --course conf --cpus CPUS --out DIR`" in said
    out = wide.cluster.root / "out" / "kept-%j.out"
    sub = wide.as_user("alice", "sbatch", "-p", "gpuseat-conf", f"--reservation={wide.session}", "--gres=gpu:1",
                       f"--output={out}", "--wrap", "sleep 60", check=True)  # fmt: skip
    alice = sub.stdout.split()[-1]
    try:
        assert wide.wait_state(alice, {"RUNNING"}) == "RUNNING", wide.job(alice)
        wide.store.agents.set_engine_settings("conf", "slurm", {"cores_per_seat": 2})  # type: ignore[attr-defined]
        assert _gpuseat(*apply) == 0
        said = capsys.readouterr().out
        assert (
            f"note: session {wide.session} needs 8 cores for its seats (cores_per_seat 2), not 4; job(s) {alice} "
            in said
        )
        assert _core_count(wide) == "4" and wide.wait_state(alice, {"RUNNING"}) == "RUNNING"  # not cut
    finally:
        wide.slurm.run("scancel", [alice], check=False)
    assert wide.wait_state(alice, {"CANCELLED"}) == "CANCELLED"
    assert _gpuseat(*apply) == 0
    said = capsys.readouterr().out
    assert "reservation.resize" in said and "8 cores for its seats (cores_per_seat 2), not 4: made again" in said, said
    assert _core_count(wide) == "8" and "gres.conf binds" not in said and "slurmctld runs" not in said
    rc, said, err = _cpus(wide, "carol", "-c", "2", "--gres=gpu:1")
    assert rc == 0 and f"CVD={INDEX['carol']} CPUS=2 CPU_IDs=4-5\n" in said, (said, err)
