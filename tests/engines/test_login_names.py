"""One login name per participant on every engine (docs/course.md, "Login names").

The same two participants — ``ann.lee`` with no ``unix_user`` (not a Unix name: the derived slug) and
``bob`` with ``unix_user = bsmith`` (the roster's wins) — hold a seat of each engine in turn, in one real
SQLite course store; each engine plans their way in (the host engine from the store alone, Kubernetes
without a cluster, libvirt against its own test driver, Slurm's members from the store's views) and the
monitor's seat map expects the same user. JupyterHub is the one exception: its user name is the hub
authenticator's (``match_by``), not a Unix login.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuseat.core.delivery import login_name
from gpuseat.core.roster import RosterText
from gpuseat.engines import registry
from gpuseat.engines.apply import course_state
from gpuseat.engines.base import Step
from gpuseat.engines.runner import RecordingRunner
from gpuseat.readings import SeatEntry
from gpuseat.store import CourseStore, open_store

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NODE_XML = Path(__file__).resolve().parents[1] / "vms" / "node.xml"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMPpYX2NVyCeEfq4DRJTNTAcHWqOemrjj1X6AyrPik8u {}@laptop"
ROSTER = f"key,name,email,unix_user,ssh_key\nann.lee,Ann Lee,ann@example.edu,,{KEY.format('ann')}\n" + (
    f"bob,Bob,bob@example.edu,bsmith,{KEY.format('bob')}\n"
)
WANTED = {"ann.lee": login_name("ann.lee", None), "bob": "bsmith"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CourseStore]:
    """The 2016 course with the two participants and two seats of each engine (libvirt's from its carve)."""
    s = open_store(f"sqlite:///{tmp_path / 'course.db'}", create=True)
    s.courses.create_course(EXAMPLES / "course-2016.toml", key="demo")
    s.roster.import_roster("demo", RosterText(ROSTER, where="roster.csv"))
    seats: list[dict[str, Any]] = [{"key": f"seat-0{i}", "kind": "gpu", "engine": "libvirt"} for i in (1, 2)]
    for engine in ("host", "kubernetes", "slurm"):
        seats += [{"key": f"{engine}-{i}", "kind": "gpu", "engine": engine, "host": "gpu01"} for i in (1, 2)]
    s.seats.add_seats("demo", seats)
    yield s
    s.close()


def hold(store: CourseStore, prefix: str) -> None:
    """Ann and Bob move onto the two seats whose keys start with ``prefix``."""
    for person, n in (("ann.lee", 1), ("bob", 2)):
        seat = f"{prefix}-{n:02d}" if prefix == "seat" else f"{prefix}-{n}"
        holding = next(p.seat for p in store.roster.participants("demo") if p.key == person)
        (store.seats.move if holding else store.seats.assign)("demo", person, seat)


def logins(steps: list[Step]) -> dict[str, str]:
    """Participant → the login named by each ``seat.record`` step (its way in, or the login it records)."""
    out = {}
    for s in steps:
        if s.action == "seat.record" and s.participant:
            out[s.participant] = str(s.data.get("login") or s.data["access"]["user"])
    return out


def test_every_engine_gives_a_participant_the_same_login(store: CourseStore, tmp_path: Path) -> None:
    assert WANTED["ann.lee"] != "ann.lee" and WANTED["ann.lee"].startswith("annlee")
    seen: dict[str, dict[str, str]] = {}

    hold(store, "host")
    host = registry.build("host", store, "demo", settings={"nvidia_smi": str(tmp_path / "no-nvidia-smi")},
                          runner=RecordingRunner(dry_run=True), host="gpu01")  # fmt: skip
    changes = host.plan(course_state(store, "demo"))
    assert any("planned from the store alone" in n for n in changes.notes)
    seen["host"] = logins(changes.steps)

    hold(store, "kubernetes")
    k8s = registry.build("kubernetes", store, "demo", runner=RecordingRunner(dry_run=True))
    seen["kubernetes"] = logins(k8s.plan(course_state(store, "demo")).steps)

    hold(store, "seat")
    from gpuseat.engines.libvirt.engine import LibvirtEngine
    from gpuseat.engines.libvirt.libvirt_host import LibvirtHost

    settings = {"connect": "test:///default", "inventory": str(EXAMPLES / "ibm-2xM60.toml"), "disk_gb": 8,
                "image": "/var/lib/libvirt/images/debian-12-genericcloud-amd64.qcow2"}  # fmt: skip
    vms = registry.build("libvirt", store, "demo", settings=settings, runner=RecordingRunner())
    assert isinstance(vms, LibvirtEngine)
    test_host = LibvirtHost(f"test://{NODE_XML}")
    try:
        vms.use(test_host)
        vms.records = True
        changes = vms.plan(course_state(store, "demo"))
        assert not vms.apply(changes).failed
        seen["libvirt"] = logins(changes.steps)
        seen["libvirt VMs"] = {h.participant or "": h.login for h in vms.observe(course_state(store, "demo"))}
    finally:
        test_host.close()

    hold(store, "slurm")
    from gpuseat.engines.slurm.course import course_from_values

    people = store.roster.participants("demo")
    course = course_from_values("demo", (), people, store.seats.seats("demo"), skip=[])
    seen["slurm"] = {m.participant: m.unix_user for m in course.members}

    entries = [SeatEntry(p.seat or "", f"GPU-{p.key}", participant=p.key, user=p.unix_user) for p in people]
    seen["monitor"] = {e.participant or "": e.login or "" for e in entries}

    assert seen == dict.fromkeys(seen, WANTED), seen
