"""After ``seats move --from-host gpu1``, the host engine's dry run plans what the move means on the machines: on
gpu1 (the stand-in host of the delivery lab, applied once for the holders) the movers' access is taken away, on
gpu2 (planned from the store alone) it is given on their new seats. No sshd: only plans, and one real pass."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from delivery import conftest as delivery
from delivery.hostlab import MIG_AND_WHOLE, Lab
from gpuseat.core.roster import RosterText
from gpuseat.engines.apply import one_pass, plan_all
from gpuseat.engines.runner import Runner
from gpuseat.store import SeatSpec, open_store

bare_lab, lab = delivery.bare_lab, delivery.lab
MIG = [str(m["uuid"]) for m in MIG_AND_WHOLE[0]["mig"]]  # type: ignore[index]
COURSE = 'name = "dl"\nparticipants = 2\n[schedule]\nstart = 2026-09-07\ndays = 5\n'


def test_apply_dry_run_revokes_on_the_dead_host_and_grants_on_the_other(
    lab: Lab, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    (tmp_path / "dl.toml").write_text(COURSE)
    seats = [("seat-01", "gpu1", MIG[0]), ("seat-02", "gpu1", MIG[1]), ("seat-03", "gpu1", MIG[2]),
             ("seat-04", "gpu2", "MIG-gpu2-0"), ("seat-05", "gpu2", "MIG-gpu2-1")]  # fmt: skip
    with open_store(url, create=True) as store:
        store.courses.create_course(tmp_path / "dl.toml", key="dl")
        rows = ["key,name,email,unix_user,ssh_key"]
        for who in ("ann", "ben"):
            p = lab.person(who)
            rows.append(f"{who},{who},{who}@example.org,{p.user},{p.public_key}")
        store.roster.import_roster("dl", RosterText("\n".join(rows) + "\n", where="roster"))
        store.seats.add_seats(
            "dl", [SeatSpec(key=k, kind="mig", host=h, device_uuid=u, engine="host") for k, h, u in seats]
        )
        store.agents.set_engine_settings("dl", "host", {k: v for k, v in lab.settings().items() if k != "ssh_port"})
        store.seats.assign("dl", "ann", "seat-01")
        store.seats.assign("dl", "ben", "seat-02")
        done = one_pass(store, course="dl", host="gpu1", runner=Runner())  # gpu1 as it was before it died
        assert not done.failed, done.failed
    moved = cli("seats", "move", "--from-host", "gpu1", "--db", url)
    assert moved.code == 0, moved
    assert "ann: seat-01 (gpu1) -> seat-04 (gpu2)" in moved.out and "ben: seat-02 (gpu1) -> seat-05 (gpu2)" in moved.out

    plan = cli("apply", "--dry-run", "--host", "gpu1", "--format", "json", "--db", url)
    assert plan.code == 0, plan
    steps = [s for p in json.loads(plan.out)["plans"] for s in p["steps"]]
    revoked = {(s["action"], s["target"]) for s in steps if s["phase"] == "revoke"}
    users = {lab.people[who].user for who in ("ann", "ben")}
    assert {("key.remove", u) for u in users} <= revoked and {("account.lock", u) for u in users} <= revoked, steps
    freed = {seat for s in steps if s["action"] == "device.revoke" for seat in s["seats"]}
    assert {"seat-01", "seat-02"} <= freed, steps
    assert not [s for s in steps if s["phase"] == "grant"], steps
    with open_store(url) as store:  # gpu2 is not this machine: its plan from the store alone
        [there] = plan_all(
            store, course="dl", host="gpu2", runner=Runner(dry_run=True),
            overrides={"host": {"nvidia_smi": str(tmp_path / "no-nvidia-smi")}},
        )  # fmt: skip
    assert there.changes is not None
    granted = {(s.action, s.participant, s.seats) for s in there.changes.ordered() if s.phase == "grant"}
    assert {("account.add", "ann", ("seat-04",)), ("account.add", "ben", ("seat-05",))} <= granted, granted
