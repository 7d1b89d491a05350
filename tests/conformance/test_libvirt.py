"""libvirt seats from the participant's side: ``seats release`` and ``seats move``, then nothing but
``gpuseat apply``.

A private libvirtd (tests/vms/libvirtd.py) boots each seat's VM under TCG on a private libvirt network.
The guest (tests/vms/ssh_guest.py ``DISK_INIT``) stands in for a cloud image: its accounts live on
the VM's disk, each boot *adds* the seed's user and keys to them (cloud-init never removes a former
user), it takes a DHCP lease and runs the host's OpenSSH ``sshd``. The course lives in a real SQLite
store, driven through the CLI. The adversary is the previous holder: after the hand-over their key
must be refused by the VM they used to hold, the seat they left must stay stopped, and the store
must never show their login for the seat.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from gpuseat.cli import main
from gpuseat.store import open_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vms import guest, ssh_guest  # tests/vms: the TCG boot machinery
from vms.conftest import EXAMPLES, require_tool
from vms.libvirtd import private_network, remove_pools, shared_libvirtd

libvirt = pytest.importorskip("libvirt")
# one libvirtd at a time (tests/vms/libvirtd.py locks it): one xdist worker runs them all in turn, instead of
# a second worker waiting on the lock
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(name="libvirtd")]

UUIDS = ("GPU-5eed0001-0000-4000-8000-000000000001", "GPU-5eed0002-0000-4000-8000-000000000002")
INVENTORY = f"""name = "lab"
[[gpu]]
model = "M60"
boards = 1
[[gpu.chip]]
pci = "0000:86:00.0"
uuid = "{UUIDS[0]}"
[[gpu.chip]]
pci = "0000:87:00.0"
uuid = "{UUIDS[1]}"
"""
BOOT_S = 420  # TCG guests booting on a busy 2-core runner
SLOW_S = 90  # a step slower than this is reported as a warning in the run's summary (it passes; see why)


def _slow(what: str, started: float) -> None:
    """Say so in pytest's warnings summary when one step took long: a passing run that took minutes then
    shows which wait it spent them in (guest boot, sshd, apply's address wait) without a rerun."""
    took = time.monotonic() - started
    if took > SLOW_S:
        warnings.warn(f"libvirt conformance: {what} took {took:.0f} s", stacklevel=2)


def _poll(what: str, deadline_s: float, probe, detail=lambda: ""):
    started = time.monotonic()
    end = started + deadline_s
    while True:
        got = probe()
        if got:
            _slow(what, started)
            return got
        if time.monotonic() > end:
            pytest.fail(f"{what} not within {deadline_s:g} s\n{detail()}")
        time.sleep(0.1)


def _sshd_answers(ip: str) -> bool:
    try:
        with socket.create_connection((ip, 22), timeout=3) as sock:
            sock.settimeout(10)
            return sock.recv(64).startswith(b"SSH-2.0-")
    except OSError:
        return False


def _ssh(key: Path, login: str, ip: str, command: str) -> subprocess.CompletedProcess:
    """Log in as ``login`` with ``key`` (BatchMode: a refused key fails, it never asks)."""
    argv = [require_tool("ssh"), "-i", str(key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=20", "-o", "IdentitiesOnly=yes",
            f"{login}@{ip}", command]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def _cleanup(uri: str, course: str, pool: str) -> None:
    conn = libvirt.open(uri)
    try:
        for dom in conn.listAllDomains(0):
            if dom.name().startswith(f"gpuseat-{course}-"):
                if dom.isActive():
                    dom.destroy()
                dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
    finally:
        conn.close()
    remove_pools(uri, pool)


def test_release_and_move_carried_out_by_apply_alone(tmp_path, monkeypatch, capsys, pytestconfig):
    token = secrets.token_hex(3)
    course, pool = f"ho{token}", f"gpuseat-tho{token}"
    db = f"sqlite:///{tmp_path / 'course.db'}"
    monkeypatch.setenv("GPUSEAT_DB_URL", db)
    monkeypatch.setenv("COLUMNS", "200")

    def cli(*args: str, code: int = 0) -> str:
        started = time.monotonic()
        got = main(list(args))
        _slow(f"gpuseat {' '.join(args[:2])}", started)
        out = capsys.readouterr()
        assert got == code, out.out + out.err
        return out.out

    keygen = require_tool("ssh-keygen")
    keys = {}
    for who in ("alice", "bob", "probe"):
        keys[who] = tmp_path / who
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", who, "-f", str(keys[who])], check=True)
    inventory = tmp_path / "lab.toml"
    inventory.write_text(INVENTORY)
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "name,email,group,unix_user,ssh_key\n"
        + "".join(
            f"{w.title()} Test,{w}@example.edu,participants,{w},{keys[w].with_suffix('.pub').read_text().strip()}\n"
            for w in ("alice", "bob")
        )
    )
    cli("course", "create", str(EXAMPLES / "course-2016.toml"), "--key", course, "--plan-option", "1")
    cli("roster", "import", str(roster))
    cli("seats", "add", "--inventory", str(inventory), "--mode", "passthrough", "--engine", "libvirt")
    cli("seats", "move", "--participant", "alice", "--seat", "seat-01")
    cli("seats", "move", "--participant", "bob", "--seat", "seat-02")

    uri, work = shared_libvirtd(pytestconfig)  # the libvirtd group's one daemon
    with private_network(uri) as network:
        boot = work / f"boot-{token}"
        boot.mkdir()
        console = work / f"console-{token}"
        console.mkdir()
        initrd = ssh_guest.build(boot / "initrd.cpio", {"seat-01": [UUIDS[0]], "seat-02": [UUIDS[1]]}, disk=True)
        base = work / f"base-{token}.qcow2"
        subprocess.run([require_tool("qemu-img"), "create", "-q", "-f", "qcow2", str(base), "64M"], check=True)
        base.chmod(0o644)
        cli("engines", "settings", "libvirt", f"connect={uri}", f"inventory={inventory}", f"image={base}",
            "disk_gb=1", f"pool={pool}", f"pool_dir={work / pool}", f"network={network}", "vcpus=1",
            "memory_mib=384", "virt_type=qemu", "gpu=no", f"serial_dir={console}",
            f"boot_kernel={guest.kernel(boot)}", f"boot_initrd={initrd}",
            "boot_cmdline=console=ttyS0 quiet loglevel=3 panic=-1", f"probe_key={keys['probe']}",
            "address_wait=300", "timeout=60")  # fmt: skip
        logs = {s: console / f"gpuseat-{course}-{s}.log" for s in ("seat-01", "seat-02")}

        def text(seat: str) -> str:
            return logs[seat].read_text(errors="replace") if logs[seat].exists() else ""

        def tails() -> str:
            return "\n".join(f"--- {k}\n{text(k)[-1500:]}" for k in logs)

        def up_line(seat: str, after: int = 0) -> str | None:
            done = text(seat)[after:].rpartition("\n")[0]  # whole lines: the console may be half-way through one
            found = [ln for ln in done.splitlines() if ln.startswith(f"{ssh_guest.MARKER} up ")]
            assert f"{ssh_guest.MARKER}-ERROR" not in text(seat)[after:], tails()
            return found[-1] if found else None

        def seat_row(seat: str) -> dict:
            with open_store(db) as store:
                row = store.seats.get_seat(course, seat)
                return {
                    "connect": row.connect,
                    "state": row.state,
                    "access": store.delivery.access_of(course).get(seat),
                }

        def running(seat: str) -> bool:
            conn = libvirt.open(uri)
            try:
                return bool(conn.lookupByName(f"gpuseat-{course}-{seat}").isActive())
            finally:
                conn.close()

        try:
            # day one: each holder's VM is made and booted; apply waits for the addresses and records them
            out = cli("apply", "--course", course)
            assert out.count("+ domain.create") == 2 and "Applied: 4 done, 0 failed" in out, out
            _poll("both guests up", BOOT_S, lambda: up_line("seat-01") and up_line("seat-02"), tails)
            assert "user=alice disk= accounts=alice" in up_line("seat-01")
            ip = {}
            for seat, who in (("seat-01", "alice"), ("seat-02", "bob")):
                row = seat_row(seat)
                assert row["connect"].startswith(f"ssh {who}@10."), row
                assert row["access"]["holder"] == who and row["state"] == "running"
                ip[seat] = row["connect"].rsplit("@", 1)[1]
                _poll(f"sshd of {seat}", 120, lambda s=seat: _sshd_answers(ip[s]), tails)
            assert _ssh(keys["bob"], "bob", ip["seat-02"], "id -un").stdout.strip() == "bob"
            assert cli("apply", "--course", course).startswith(f"course {course} · libvirt: nothing to change")

            # the roster after day one: bob is given a new login (bob2), alice a new key (her old one leaked)
            laptop = tmp_path / "alice-laptop"
            subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", "alice2", "-f", str(laptop)], check=True)
            again = tmp_path / "roster-2.csv"
            again.write_text(
                "key,name,email,group,unix_user,ssh_key\n"
                f"alice,Alice Test,alice@example.edu,participants,alice,{laptop.with_suffix('.pub').read_text()}"
                f"bob,Bob Test,bob@example.edu,participants,bob2,{keys['bob'].with_suffix('.pub').read_text()}"
            )
            cli("roster", "import", str(again))
            marks = {seat: len(text(seat)) for seat in logs}
            out = cli("apply", "--course", course)
            assert out.count("~ domain.update") == 2 and ", 0 failed" in out, out  # the same disks: no reimage
            booted = {s: _poll(f"{s} booted again", BOOT_S, lambda s=s: up_line(s, marks[s]), tails) for s in logs}
            assert "user=alice disk=alice accounts=alice" in booted["seat-01"], booted
            assert "user=bob2 disk=bob accounts=bob,bob2" in booted["seat-02"], booted  # bob's home is kept
            for seat in logs:
                _poll(f"sshd of {seat}", 120, lambda s=seat: _sshd_answers(ip[s]), tails)
            # alice: the leaked key is refused, her new one lets her in
            leaked = _ssh(keys["alice"], "alice", ip["seat-01"], "id -un")
            assert leaked.returncode == 255 and "Permission denied" in leaked.stderr, leaked
            assert _ssh(laptop, "alice", ip["seat-01"], "id -un").stdout.strip() == "alice"
            keys["alice"] = laptop
            # bob: the old login is refused (its key gone, the account expired), the new one is in, with his files
            old = _ssh(keys["bob"], "bob", ip["seat-02"], "id -un")
            assert old.returncode == 255 and "Permission denied" in old.stderr, old
            new = _ssh(keys["bob"], "bob2", ip["seat-02"], "id -un; ls /home")
            assert new.returncode == 0 and new.stdout.split() == ["bob2", "bob", "bob2"], new
            assert seat_row("seat-02")["connect"] == f"ssh bob2@{ip['seat-02']}"
            assert cli("apply", "--course", course).startswith(f"course {course} · libvirt: nothing to change")

            # the course changes in the store only: bob leaves, alice moves to the seat bob had
            cli("seats", "release", "--participant", "bob")
            cli("seats", "move", "--participant", "alice", "--seat", "seat-02")

            def page(seat: str, who: str):
                """What ``who``'s participant page says about the seat's way in."""
                from gpuseat.services.delivery import way_in

                with open_store(db) as store:
                    person = next(x for x in store.roster.participants(course) if x.key == who)
                    return way_in(store, store.seats.get_seat(course, seat), person)

            with open_store(db) as store:
                assert store.delivery.access_of(course)["seat-02"]["holder"] == "bob"  # not carried out yet
            shown = page("seat-02", "alice")  # alice's page never shows bob's login
            assert shown.command is None and "being prepared" in (shown.missing or ""), shown
            before = len(text("seat-02"))
            out = cli("apply", "--course", course)
            lines = [ln.split()[:3] for ln in out.splitlines() if ln.startswith("  ")]
            assert ["-", "domain.stop", f"gpuseat-{course}-seat-01"] in lines, out  # alice's old seat: vacated
            assert ["-", "domain.stop", f"gpuseat-{course}-seat-02"] in lines, out  # bob's session ends
            assert ["~", "domain.reimage", f"gpuseat-{course}-seat-02"] in lines, out
            assert sum(1 for ln in lines if ln[1] == "disk.remove") == 1, out  # bob's disk
            assert ", 0 failed, 0 skipped" in out, out
            order = [ln[1] for ln in lines]
            assert order.index("domain.reimage") > max(i for i, a in enumerate(order) if a in ("disk.remove",
                                                                                                "seed.remove"))  # fmt: skip

            # the new holder boots a fresh disk with their own login; the previous holder's key is refused
            line = _poll("seat-02 booted for alice", BOOT_S, lambda: up_line("seat-02", before), tails)
            assert "user=alice disk= accounts=alice" in line, line  # nothing of bob's on the disk
            row = seat_row("seat-02")
            assert row["connect"].startswith("ssh alice@10.") and row["access"]["holder"] == "alice", row
            new_ip = row["connect"].rsplit("@", 1)[1]
            _poll("sshd of seat-02", 120, lambda: _sshd_answers(new_ip), tails)
            refused = _ssh(keys["bob"], "bob", new_ip, "id -un")
            assert refused.returncode == 255 and "Permission denied" in refused.stderr, refused
            mine = _ssh(keys["alice"], "alice", new_ip, "id -un; ls /home")
            assert mine.returncode == 0 and mine.stdout.split() == ["alice", "alice"], mine
            assert page("seat-02", "alice").command == row["connect"]
            status = {r["seat"]: r for r in json.loads(cli("vms", "status", "-f", "json"))["seats"]}
            assert (status["seat-02"]["participant"], status["seat-02"]["state"], status["seat-02"]["vm_for"]) == (
                "alice", "running", "alice"
            )  # fmt: skip
            assert (status["seat-01"]["participant"], status["seat-01"]["state"]) == (None, "shut off")
            # the seat alice left: stopped, and its way in names no one
            assert not running("seat-01")
            left = seat_row("seat-01")
            assert not left["connect"] and not left["access"].get("holder") and left["state"] == "requested", left
            # seats check logs in as the holder and finds the previous holder refused
            got = json.loads(cli("seats", "check", "--course", course, "--format", "json"))
            (checked,) = got["seats"]
            assert (checked["seat"], checked["participant"], checked["state"]) == ("seat-02", "alice", "ready"), got

            # a second apply plans nothing, and the vacated seat's VM stays stopped
            again = cli("apply", "--course", course)
            assert again.startswith(f"course {course} · libvirt: nothing to change"), again
            assert "Plan: 0 to add, 0 to change, 0 to take away." in again
            assert not running("seat-01") and running("seat-02")

            # the course is deleted: it waits for the engine, and the next apply removes every VM, disk and seed
            out = cli("course", "delete", course, "--yes", "--export-to", str(tmp_path / "export.zip"))
            assert "deleted once the engines have taken every access away" in out, out
            out = cli("apply", "--course", course)
            assert out.count("- domain.remove") == 2 and f"course {course} deleted" in out, out
            conn = libvirt.open(uri)
            try:
                assert [d.name() for d in conn.listAllDomains(0) if d.name().startswith(f"gpuseat-{course}-")] == []
            finally:
                conn.close()
            assert list((work / pool).iterdir()) == []  # no disk, no seed (logins and keys) left
        finally:
            _cleanup(uri, course, pool)
