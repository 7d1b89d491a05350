"""The shared-host engine against a real sshd, real Unix users and stand-in device files.

As the participant: log in with your own key, see exactly your seat's UUID; as the adversary:
open a neighbour's device file (EACCES), log in after losing the seat (refused).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from .hostlab import MIG_AND_WHOLE, Lab, free_port

MIG = [m["uuid"] for m in MIG_AND_WHOLE[0]["mig"]]  # type: ignore[index]
WHOLE = str(MIG_AND_WHOLE[1]["uuid"])
OPEN = "python3 -c \"import os,sys\nfor f in sys.argv[1:]:\n try: os.close(os.open(f, os.O_RDONLY)); print(f, 'OK')\n except OSError as e: print(f, __import__('errno').errorcode[e.errno])\" "


def _up(cli: Callable[..., Any], lab: Lab, db: str, *extra: str) -> Any:
    r = cli("host", "up", "--course", "lab", "--db", db, *lab.flags(), *extra)
    assert r.code == 0, r.out + r.err
    return r


def _seats(cli: Callable[..., Any], db: str) -> dict[str, dict[str, Any]]:
    r = cli("seats", "export", "--format", "json", "--db", db)
    return {s["key"]: s for s in json.loads(r.out)}


def _opens(lab: Lab, who: str, *files: object) -> dict[str, str]:
    done = lab.ssh(who, OPEN + " ".join(str(f) for f in files))
    assert done.returncode == 0, done.stderr + lab.sshd_log()[-2000:]
    return dict(line.rsplit(" ", 1) for line in done.stdout.splitlines())


def _ann_and_ben_up(lab: Lab, db: str, cli: Callable[..., Any]) -> dict[str, str]:
    """ann on the first MIG seat, ben on the second, ``host up``, sshd started; device UUID → seat key."""
    by_uuid = {s["device_uuid"]: k for k, s in _seats(cli, db).items()}
    for who, uuid in (("ann", MIG[0]), ("ben", MIG[1])):
        assert cli("seats", "assign", "--participant", who, "--seat", by_uuid[uuid], "--db", db).code == 0
    _up(cli, lab, db)
    lab.start_sshd()
    return by_uuid


def test_participants_get_their_own_gpu_and_nothing_else(hostcourse: tuple[Lab, str], cli: Callable[..., Any]) -> None:
    lab, db = hostcourse
    seats = _seats(cli, db)
    by_uuid = {s["device_uuid"]: k for k, s in seats.items()}
    for who, uuid in (("ann", MIG[0]), ("ben", MIG[1]), ("cat", WHOLE)):
        r = cli("seats", "assign", "--participant", who, "--seat", by_uuid[uuid], "--db", db)
        assert r.code == 0, r.err
    first = _up(cli, lab, db)
    assert "change(s)" in first.out
    lab.start_sshd()  # reads the sshd drop-in host up wrote (PermitUserEnvironment, keys folder)

    # the participant logs in with their own key and sees exactly their seat's UUID
    for who, uuid in (("ann", MIG[0]), ("ben", MIG[1]), ("cat", WHOLE)):
        env = lab.ssh(who, "env")
        assert env.returncode == 0, env.stderr + lab.sshd_log()[-2000:]
        assert f"CUDA_VISIBLE_DEVICES={uuid}" in env.stdout.splitlines()
        listed = lab.ssh(who, f"{lab.nvidia_smi} -L").stdout
        assert uuid in listed and sum(u in listed for u in [*MIG, WHOLE]) == 1, listed

    # the adversary: ann opens ben's MIG capability files and cat's whole GPU → EACCES
    ann_gi, ann_ci = lab.cap_file(0, 7), lab.cap_file(0, 7, 0)
    ben_gi, ben_ci = lab.cap_file(0, 8), lab.cap_file(0, 8, 0)
    seen = _opens(lab, "ann", ann_gi, ann_ci, ben_gi, ben_ci, lab.dev / "nvidia1", lab.cap_file(0, 9))
    assert seen[str(ben_gi)] == seen[str(ben_ci)] == "EACCES"
    assert seen[str(lab.dev / "nvidia1")] == "EACCES"
    assert seen[str(lab.cap_file(0, 9))] == "EACCES"  # a free seat is nobody's
    assert seen[str(ann_gi)] == seen[str(ann_ci)] == "ENXIO"  # permission passed; no driver behind it
    # dan holds no seat: no way in at all
    assert lab.ssh("dan", "true").returncode == 255

    # idempotent: a second run changes nothing (host files, accounts, store events)
    from gpuseat.store import open_store

    def snapshot() -> tuple[int, list[str]]:
        with open_store(db) as store:
            events = len(store.events.events("lab"))
        files = sorted(f"{p}:{p.stat().st_mtime_ns}" for p in lab.root.rglob("*") if p.is_file())
        keys = sorted(f"{p}:{p.stat().st_mtime_ns}" for p in lab.keys_dir.iterdir())
        return events, files + keys

    before = snapshot()
    again = _up(cli, lab, db)
    assert "nothing to change" in again.out, again.out
    assert snapshot() == before  # no event, no file rewritten

    # the systemd layer: one drop-in per holder, closed device policy, accepted by systemd-analyze
    slices = sorted((lab.root / "systemd").glob("user-*.slice.d/50-gpuseat.conf"))
    assert len(slices) == 3
    for path in slices:
        text = path.read_text()
        assert "DevicePolicy=closed" in text and "DeviceAllow=/dev/char/" in text
        if shutil.which("systemd-analyze"):
            unit = lab.root / f"gpuseat-verify-{path.parent.name.split('.')[0]}.slice"
            unit.write_text("[Unit]\nDescription=gpuseat verify\n" + text)
            done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
            assert str(unit) not in done.stderr, done.stderr


def test_move_repins_and_the_old_holder_is_refused(hostcourse: tuple[Lab, str], cli: Callable[..., Any]) -> None:
    lab, db = hostcourse
    by_uuid = _ann_and_ben_up(lab, db, cli)
    assert lab.ssh("ben", "true").returncode == 0

    # ann moves to the third MIG seat; ben's seat goes to dan
    moved = cli("seats", "move", "--participant", "ann", "--seat", by_uuid[MIG[2]], "--db", db)
    assert moved.code == 0 and "gpuseat apply --course lab" in moved.out, moved.out  # says how it is applied
    released = cli("seats", "release", "--participant", "ben", "--db", db)
    assert released.code == 0 and "gpuseat apply --course lab" in released.out
    assert cli("seats", "assign", "--participant", "dan", "--seat", by_uuid[MIG[1]], "--db", db).code == 0
    _up(cli, lab, db)

    env = lab.ssh("ann", "env").stdout
    assert f"CUDA_VISIBLE_DEVICES={MIG[2]}" in env.splitlines()
    seen = _opens(lab, "ann", lab.cap_file(0, 7), lab.cap_file(0, 9))
    assert seen[str(lab.cap_file(0, 7))] == "EACCES" and seen[str(lab.cap_file(0, 9))] == "ENXIO"
    refused = lab.ssh("ben", "true")
    assert refused.returncode == 255 and "denied" in refused.stderr.lower()
    assert f"CUDA_VISIBLE_DEVICES={MIG[1]}" in lab.ssh("dan", "env").stdout.splitlines()

    # course end: everyone is out
    r = cli("host", "down", "--course", "lab", "--db", db)
    assert r.code == 0, r.err
    assert lab.ssh("ann", "true").returncode == 255


def test_unknown_host_or_device_is_one_clear_message(hostcourse: tuple[Lab, str], cli: Callable[..., Any]) -> None:
    lab, db = hostcourse
    r = cli("host", "up", "--course", "lab", "--db", db, *lab.flags(), "--host", "gpu9")
    assert r.code == 2 and "host 'gpu9' is not in course 'lab'" in r.err and "Traceback" not in r.err
    (lab.dev / "nvidia1").unlink()
    r = cli("host", "up", "--course", "lab", "--db", db, *lab.flags())
    assert r.code == 2 and "does not exist" in r.err and "Traceback" not in r.err


@pytest.mark.parametrize("fault", ["missing_device", "wrong_uuid", "no_key"])
def test_seats_check_names_the_fault(hostcourse: tuple[Lab, str], cli: Callable[..., Any], fault: str) -> None:
    lab, db = hostcourse
    by_uuid = {s["device_uuid"]: k for k, s in _seats(cli, db).items()}
    for who, uuid in (("ann", MIG[0]), ("ben", MIG[1]), ("cat", WHOLE)):
        assert cli("seats", "assign", "--participant", who, "--seat", by_uuid[uuid], "--db", db).code == 0
    _up(cli, lab, db)
    lab.start_sshd()
    status = cli("host", "status", "--db", db, "--format", "json")
    assert status.code == 0 and [r["state"] for r in json.loads(status.out)] == ["ready"] * 3, status.out
    ok = cli("seats", "check", "--db", db, "--format", "json")
    assert ok.code == 0, ok.out + ok.err
    report = json.loads(ok.out)
    assert report["summary"] == {"ready": 3, "broken": 0, "total": 3}
    assert {r["seat"]: r["visible"] for r in report["seats"]}[by_uuid[WHOLE]] == [WHOLE]

    if fault == "missing_device":
        lab.cap_file(0, 8, 0).unlink()
        expect = "device file"
    elif fault == "wrong_uuid":  # the store says ben's seat is the third MIG device
        import sqlite3

        con = sqlite3.connect(db.removeprefix("sqlite:///"))
        con.execute(
            "UPDATE seats SET device_uuid = ? WHERE key = ?",
            ("MIG-ffffffff-0000-4000-8000-000000000000", by_uuid[MIG[1]]),
        )
        con.commit()
        con.close()
        expect = "not the seat's MIG-ffffffff"
    else:
        (lab.keys_dir / lab.people["ben"].user).write_text("# emptied\n")
        expect = "no SSH key installed"
    bad = cli("seats", "check", "--db", db, "--format", "json")
    assert bad.code == 3
    rows = {r["participant"]: r for r in json.loads(bad.out)["seats"]}
    assert rows["ben"]["state"] == "broken" and expect in rows["ben"]["reason"], rows["ben"]
    assert rows["ann"]["state"] == rows["cat"]["state"] == "ready"


def test_one_hung_seat_does_not_stall_the_others(hostcourse: tuple[Lab, str], cli: Callable[..., Any]) -> None:
    import time

    lab, db = hostcourse
    by_uuid = {s["device_uuid"]: k for k, s in _seats(cli, db).items()}
    for who, uuid in (("ann", MIG[0]), ("ben", MIG[1]), ("cat", WHOLE)):
        assert cli("seats", "assign", "--participant", who, "--seat", by_uuid[uuid], "--db", db).code == 0
    _up(cli, lab, db)
    lab.start_sshd()
    conf = lab.root / "bin" / "devices.json"
    conf.write_text(json.dumps({**json.loads(conf.read_text()), "hang_users": [lab.people["ben"].user]}))
    import os
    import sys

    started = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "gpuseat", "seats", "check", "--db", db, "--format", "json", "--timeout", "4",
         "--workers", "2"],
        capture_output=True, text=True, env=os.environ.copy(), timeout=120,
    )  # fmt: skip
    took = time.monotonic() - started  # the whole command, exit included (the hung call lasts an hour)
    rows = {x["participant"]: x for x in json.loads(r.stdout)["seats"]}
    assert rows["ann"]["state"] == rows["cat"]["state"] == "ready"
    assert rows["ben"]["state"] == "broken" and "did not answer within 4 s" in rows["ben"]["reason"]
    assert took < 4 * 2 + 20, took  # two rounds of two workers at most, plus start-up: never the hang


def test_an_existing_system_account_is_never_taken_over(lab: Lab, tmp_path: Any, cli: Callable[..., Any]) -> None:
    from .conftest import COURSE_TOML

    db = f"sqlite:///{tmp_path / 'course.db'}"
    (tmp_path / "c.toml").write_text(COURSE_TOML)
    lab.port = free_port()
    mallory = lab.person("mal")
    (tmp_path / "r.csv").write_text(f"name,email,unix_user,ssh_key\nMal,mal@example.org,daemon,{mallory.public_key}\n")
    listing = subprocess.run([str(lab.nvidia_smi), "-L"], capture_output=True, text=True, check=True).stdout
    (tmp_path / "l.txt").write_text(listing)
    assert cli("course", "create", tmp_path / "c.toml", "--key", "lab", "--db", db).code == 0
    refused = cli("roster", "import", tmp_path / "r.csv", "--db", db)  # the roster refuses it first
    assert refused.code == 2 and "'daemon' is an account the machines have" in refused.err, refused.err
    # a store an older gpuseat filled: the login reached the store, and the engine must still refuse it
    (tmp_path / "r.csv").write_text(f"name,email,unix_user,ssh_key\nMal,mal@example.org,mal,{mallory.public_key}\n")
    assert cli("roster", "import", tmp_path / "r.csv", "--db", db).code == 0
    with sqlite3.connect(tmp_path / "course.db") as conn:
        conn.execute("UPDATE participants SET unix_user = 'daemon' WHERE unix_user = 'mal'")
    for args in (
        ("seats", "add", "--from-nvidia-smi", tmp_path / "l.txt", "--engine", "host", "--host", "gpu1"),
        ("seats", "assign"),
    ):
        assert cli(*args, "--db", db).code == 0, args
    r = cli("host", "up", "--db", db, *lab.flags())
    assert r.code == 2 and "account 'daemon' already exists" in r.err and "Traceback" not in r.err
    assert not (lab.keys_dir / "daemon").exists()


def test_seats_check_bench_runs_lenet_pinned_to_each_ready_seat(
    hostcourse: tuple[Lab, str], cli: Callable[..., Any]
) -> None:
    """``seats check --bench``: the LeNet benchmark runs once per *ready* host seat, at once, each
    process pinned to its seat's UUID; the result (or the benchmark's own error) is stored with the
    seat's check. A broken seat is not benchmarked."""
    import torch

    lab, db = hostcourse
    by_uuid = _ann_and_ben_up(lab, db, cli)
    (lab.keys_dir / lab.people["ben"].user).write_text("# emptied\n")
    r = cli("seats", "check", "--db", db, "--bench", "--bench-iterations", "20", "--format", "json")
    assert r.code == 3, r.out + r.err  # ben's seat is broken
    rows = {x["participant"]: x for x in json.loads(r.out)["seats"]}
    assert rows["ben"]["state"] == "broken" and rows["ben"]["bench"] is None
    bench = rows["ann"]["bench"]
    assert rows["ann"]["state"] == "ready" and bench["cuda_visible_devices"] == MIG[0]
    if torch.cuda.is_available():  # a GPU machine: the run itself (a stand-in UUID is no CUDA device)
        assert bench["seconds"] is not None or bench["error"]
    else:
        assert bench["seconds"] is None and "built without CUDA" in bench["error"], bench
    from gpuseat.store import open_store

    with open_store(db) as store:
        stored = store.delivery.readiness_of("lab")
    assert stored[by_uuid[MIG[0]]]["bench"] == bench
    bad = cli("seats", "check", "--db", db, "--bench", "--bench-iterations", "0")
    assert bad.code == 2 and "--bench-iterations" in bad.err
