"""``gpuseat seats check`` on libvirt seats, against a real libvirtd, a real network and real VMs.

Two seats of a course (real SQLite store, made through the CLI) run as TCG VMs on a private libvirt
network. Each guest (tests/vms/ssh_guest.py) takes its login and keys from the seed gpuseat made and
runs sshd; ``seats check`` finds each VM's address from libvirt's DHCP leases, logs in *as the
participant* with the organiser's probe key and judges ``nvidia-smi -L``: seat-01's VM lists its
seat's GPU (ready), seat-02's lists two GPUs (broken), and a stopped VM is broken with the reason.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import time

import libvirt
import pytest

from gpuseat.cli import main
from gpuseat.store import open_store

from . import guest, ssh_guest
from .conftest import EXAMPLES, SSH_KEYS, require_tool
from .libvirtd import private_network, remove_pools, shared_libvirtd

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
BOOT_S = 420  # two TCG guests booting on a busy 2-core runner
WAIT_S = 120


@pytest.fixture(scope="module")
def daemon(pytestconfig):
    return shared_libvirtd(pytestconfig)  # one daemon for every libvirtd module of this run


@pytest.fixture
def network(daemon):
    """A transient NAT-less libvirt network of its own (name, bridge, /24), destroyed after the test."""
    with private_network(daemon[0]) as name:
        yield name


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


def _poll(what: str, deadline_s: float, probe, detail=lambda: ""):
    """``probe()`` until it returns something truthy; fail naming ``what`` after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while True:
        got = probe()
        if got:
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


def test_seats_check_logs_in_to_each_vm_as_its_participant(daemon, network, tmp_path, monkeypatch, capsys):
    uri, work = daemon
    token = secrets.token_hex(3)
    course, pool = f"lv{token}", f"gpuseat-tcheck{token}"
    db = f"sqlite:///{tmp_path / 'course.db'}"
    monkeypatch.setenv("GPUSEAT_DB_URL", db)

    def cli(*args: str, code: int = 0) -> str:
        got = main(list(args))
        out = capsys.readouterr()
        assert got == code, out.out + out.err
        return out.out

    inventory = tmp_path / "lab.toml"
    inventory.write_text(INVENTORY)
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "name,email,group,unix_user,ssh_key\n"
        + "".join(
            f"{who.title()} Test,{who}@example.edu,participants,{who},{(SSH_KEYS / f'{who}.pub').read_text().strip()}\n"
            for who in ("alice", "bob")
        )
    )
    probe_key = tmp_path / "probe"
    subprocess.run([require_tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", "gpuseat-probe",
                    "-f", str(probe_key)], check=True)  # fmt: skip
    cli("course", "create", str(EXAMPLES / "course-2016.toml"), "--key", course, "--plan-option", "1")
    cli("roster", "import", str(roster))
    cli("seats", "add", "--inventory", str(inventory), "--mode", "passthrough", "--engine", "libvirt")
    cli("seats", "assign")

    # the guests: seat-01's VM has its own GPU; seat-02's was given two (its own and seat-01's)
    boot = work / f"boot-{token}"
    boot.mkdir()
    console = work / f"console-{token}"
    console.mkdir()
    initrd = ssh_guest.build(boot / "initrd.cpio", {"seat-01": [UUIDS[0]], "seat-02": [UUIDS[1], UUIDS[0]]})
    cli("engines", "settings", "libvirt", f"connect={uri}", f"network={network}", "gpu=no", "virt_type=qemu",
        "vcpus=1", "memory_mib=384", f"pool={pool}", f"pool_dir={work / f'pool-{token}'}",
        f"serial_dir={console}", f"inventory={inventory}", f"probe_key={probe_key}", "address_wait=300",
        f"boot_kernel={guest.kernel(boot)}", f"boot_initrd={initrd}",
        "boot_cmdline=console=ttyS0 quiet loglevel=3 panic=-1")  # fmt: skip
    try:
        out = cli("apply", "--course", course)
        assert out.count("+ domain.create") == 2 and ", 0 failed" in out, out

        logs = {s: console / f"gpuseat-{course}-{s}.log" for s in ("seat-01", "seat-02")}

        def booted() -> bool:
            text = {k: p.read_text(errors="replace") if p.exists() else "" for k, p in logs.items()}
            assert not any(f"{ssh_guest.MARKER}-ERROR" in t for t in text.values()), text
            # whole lines only: the console may be half-way through the one read below
            return all(f"{ssh_guest.MARKER} up hostname={k} " in t.rpartition("\n")[0] for k, t in text.items())

        def tails() -> str:
            return "\n".join(f"--- {k}\n{p.read_text(errors='replace')[-1500:] if p.exists() else ''}"
                             for k, p in logs.items())  # fmt: skip

        _poll("both guests up", BOOT_S, booted, tails)
        for seat, who in (("seat-01", "alice"), ("seat-02", "bob")):
            line = next(ln for ln in logs[seat].read_text().splitlines() if ln.startswith(f"{ssh_guest.MARKER} up"))
            assert f" user={who} keys=2 " in line, line  # the participant's key and the probe key, from the seed

        with open_store(db) as store:  # apply waited for the DHCP leases and recorded each holder's way in
            connect = {s.key: s.connect for s in store.seats.seats(course)}
        assert connect["seat-01"].startswith("ssh alice@10.") and connect["seat-02"].startswith("ssh bob@10."), connect
        for c in connect.values():
            _poll(f"sshd at {c}", WAIT_S, lambda c=c: _sshd_answers(c.rsplit("@", 1)[1]), tails)

        flags = ("--set", f"libvirt.connect={uri}", "--set", f"libvirt.probe_key={probe_key}")
        started = time.monotonic()
        out = cli("seats", "check", "--course", course, *flags, "--timeout", "120", "--format", "json", code=3)
        took = time.monotonic() - started
        result = json.loads(out)
        rows = {r["seat"]: r for r in result["seats"]}
        assert result["summary"] == {"ready": 1, "broken": 1, "total": 2}, out
        ok, bad = rows["seat-01"], rows["seat-02"]
        assert (ok["state"], ok["participant"], ok["engine"], ok["reason"]) == ("ready", "alice", "libvirt", None), ok
        assert ok["visible"] == [UUIDS[0]] and f"(UUID: {UUIDS[0]})" in ok["evidence"], ok
        assert (bad["state"], bad["participant"]) == ("broken", "bob"), bad
        assert bad["reason"] == "2 GPUs visible to the participant (expected exactly one)", bad
        assert bad["visible"] == [UUIDS[1], UUIDS[0]], bad
        assert took < 120, took

        # the results are the store's: the seat's last check and one seat.check event per seat
        with open_store(db) as store:
            stored = store.delivery.readiness_of(course)
            checks = [e for e in store.events.events(course) if e.action == "seat.check"]
        assert {k: v["state"] for k, v in stored.items()} == {"seat-01": "ready", "seat-02": "broken"}
        assert stored["seat-01"]["visible"] == [UUIDS[0]]
        assert sorted((e.seat, e.participant, e.detail["state"]) for e in checks) == [
            ("seat-01", "alice", "ready"), ("seat-02", "bob", "broken"),
        ]  # fmt: skip

        # a stopped VM: nothing to log in to, and the reason says so
        conn = libvirt.open(uri)
        try:
            conn.lookupByName(f"gpuseat-{course}-seat-01").destroy()
        finally:
            conn.close()
        out = cli("seats", "check", "--course", course, "--seat", "seat-01", *flags, "--format", "json", code=3)
        (row,) = json.loads(out)["seats"]
        assert row["state"] == "broken" and row["reason"] == "the VM has no address to log in to (domain shut off)"
        with open_store(db) as store:
            assert store.delivery.readiness_of(course)["seat-01"]["state"] == "broken"
    finally:
        _cleanup(uri, course, pool)
