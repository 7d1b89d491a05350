"""``seats check`` on a host seat from the adversary's side: *ready* also means nobody but root and the holder can
open the seat's device files (an ACL entry, a mode bit) or holds them open (a process). Real sshd, real accounts,
stand-in device files with real POSIX ACLs (``tests/delivery/hostlab.py``)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .conftest import make_course
from .hostlab import MIG_AND_WHOLE, Lab
from .test_host_engine import MIG, WHOLE, _opens, _seats, _up


def test_a_seat_someone_else_can_open_is_not_ready(hostcourse: tuple[Lab, str], cli: Callable[..., Any]) -> None:
    lab, db = hostcourse
    by_uuid = {s["device_uuid"]: k for k, s in _seats(cli, db).items()}
    for who, uuid in (("ann", WHOLE), ("ben", MIG[1])):
        assert cli("seats", "assign", "--participant", who, "--seat", by_uuid[uuid], "--db", db).code == 0
    _up(cli, lab, db)
    lab.start_sshd()
    gpu, ben = lab.dev / "nvidia1", lab.people["ben"].user

    def ann_check() -> tuple[int, dict[str, Any]]:
        r = cli("seats", "check", "--seat", by_uuid[WHOLE], "--db", db, "--format", "json")
        (row,) = json.loads(r.out)["seats"]  # (ben's seat is broken too while he can open ann's GPU: he sees two)
        return r.code, row

    code, ann = ann_check()
    assert code == 0 and ann["state"] == "ready", ann

    # a hand-made ACL entry: ben can open ann's GPU (ENXIO: permission passed, no driver behind the stand-in)
    subprocess.run(["setfacl", "-m", f"u:{ben}:rw", str(gpu)], check=True)
    assert _opens(lab, "ben", gpu)[str(gpu)] == "ENXIO"
    code, ann = ann_check()
    assert code == 3 and ann["state"] == "broken", ann
    assert f"also open to {ben} (ACL on {gpu})" in ann["reason"], ann["reason"]
    assert "gpuseat apply --course lab" in ann["reason"] and f"setfacl -x u:{ben} {gpu}" in ann["reason"]
    _up(cli, lab, db)  # the pass takes the entry away
    assert _opens(lab, "ben", gpu)[str(gpu)] == "EACCES"
    code, ann = ann_check()
    assert code == 0 and ann["state"] == "ready", ann

    # chmod o+rw, and a process of ben's that holds ann's GPU (an O_PATH descriptor: the stand-in has no driver)
    subprocess.run(["chmod", "o+rw", str(gpu)], check=True)
    fd = os.open(gpu, os.O_PATH)
    try:
        held = subprocess.Popen(["sleep", "120"], user=ben, pass_fds=(fd,))
    finally:
        os.close(fd)
    try:
        code, ann = ann_check()
        assert code == 3 and ann["state"] == "broken", ann
        assert f"everyone (mode o+rw on {gpu})" in ann["reason"] and f"setfacl -m o::- {gpu}" in ann["reason"]
        assert f"{ben} (process {held.pid} holds {gpu})" in ann["reason"] and f"kill {held.pid}" in ann["reason"]
        _up(cli, lab, db)  # mode bits cleared; ben's process holds a seat that is not his: ended
        assert held.wait(10) != 0
        code, ann = ann_check()
        assert code == 0 and ann["state"] == "ready", ann
    finally:
        if held.poll() is None:
            held.kill()
            held.wait()


def test_two_compute_instances_of_one_gpu_instance_share_its_file_and_are_ready(
    bare_lab: Lab, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """The pass grants both holders the GPU instance's capability file: the check names nobody for it."""
    lab = bare_lab
    migs = [{"gi": 7, "ci": ci, "profile": "1c.2g.35gb", "uuid": f"MIG-cccccccc-000{ci}-4000-8000-00000000000{ci}"}
            for ci in (0, 1)]  # fmt: skip
    lab.build([{"minor": 0, "name": "NVIDIA H200", "pci": "00000000:1A:00.0", "uuid": str(MIG_AND_WHOLE[0]["uuid"]),
                "mig": migs}])  # fmt: skip
    db = f"sqlite:///{tmp_path / 'course.db'}"
    make_course(lab, tmp_path, cli, db)
    by_uuid = {s["device_uuid"]: k for k, s in _seats(cli, db).items()}
    for who, m in zip(("ann", "ben"), migs, strict=True):
        assert cli("seats", "assign", "--participant", who, "--seat", by_uuid[m["uuid"]], "--db", db).code == 0
    _up(cli, lab, db)
    lab.start_sshd()
    r = cli("seats", "check", "--db", db, "--format", "json")
    assert r.code == 0, r.out + r.err
    assert json.loads(r.out)["summary"] == {"ready": 2, "broken": 0, "total": 2}
