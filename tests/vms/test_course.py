"""``vms up/status/down`` from the course store: seats, participants and keys in; engine state and connect out.

Real SQLite store (the store's own tests cover PostgreSQL), libvirt's test driver as the host.
"""

from __future__ import annotations

import json

import pytest

from gpuseat.cli import main
from gpuseat.errors import InputError
from gpuseat.services import vms
from gpuseat.services.courses import open_store

from .conftest import EXAMPLES, NODE_XML, layout, public_key

OPTIONS = vms.VmOptions(connect=f"test://{NODE_XML}")


def fill(store, key="demo"):
    """The README's worked example: the 2016 course, its roster, the 4 passthrough seats, assignments."""
    store.create_course(EXAMPLES / "course-2016.toml", key=key)
    store.import_roster(key, EXAMPLES / "roster-16.csv")
    lay = layout("ibm-2xM60.toml", mode="passthrough")
    store.add_seats(
        key, [{"key": s.name, "kind": "gpu", "host": lay.server.name, "memory_gb": s.memory_gb} for s in lay.slices]
    )
    store.assign_all(key, partial=True)
    return lay


@pytest.fixture
def store(tmp_path):
    s = open_store(f"sqlite:///{tmp_path / 'course.db'}", create=True)
    yield s
    s.close()


def test_up_records_engine_state_and_connect_strings(store, test_host):
    lay = fill(store)
    report = vms.up(store, "demo", lay, OPTIONS, test_host, record=True)  # the mock driver, recorded on purpose
    assert [r.action for r in report.seats] == ["defined+started"] * 4
    people = {p.key: p for p in store.participants("demo")}
    for seat in store.seats("demo"):
        assert (seat.engine, seat.engine_ref, seat.state) == ("libvirt", f"gpuseat-demo-{seat.key}", "running")
        holder = people[seat.participant]
        assert seat.connect.startswith(f"ssh {holder.unix_user}@192.168.122.")
        meta = test_host.lookup(seat.engine_ref).XMLDesc(0)
        assert f'participant="{holder.key}"' in meta
    events = len(store.events("demo"))
    again = vms.up(store, "demo", lay, OPTIONS, test_host)
    assert {r.action for r in again.seats} == {"unchanged"}
    assert len(store.events("demo")) == events  # nothing changed, nothing logged


def test_status_and_down_update_the_store(store, test_host):
    lay = fill(store)
    vms.up(store, "demo", lay, OPTIONS, test_host, record=True)
    test_host.lookup("gpuseat-demo-seat-02").destroy()
    report = vms.status(store, "demo", OPTIONS.connect, test_host, record=True)
    assert {r.seat: r.state for r in report.seats}["seat-02"] == "shut off"
    assert store.get_seat("demo", "seat-02").state == "requested"
    rows = {r.seat: r for r in report.seats}
    holder = store.get_seat("demo", "seat-01").participant
    user = {p.key: p.unix_user for p in store.participants("demo")}[holder]
    assert rows["seat-01"].connect.startswith(f"ssh {user}@") and rows["seat-01"].participant == holder
    # a domain deleted by hand: status writes the truth back (not running, no stale access)
    gone = test_host.lookup("gpuseat-demo-seat-03")
    gone.destroy()
    gone.undefine()
    assert store.get_seat("demo", "seat-03").connect
    report = vms.status(store, "demo", OPTIONS.connect, test_host, record=True)
    assert {r.seat: r.state for r in report.seats}["seat-03"] == "absent"
    seat = store.get_seat("demo", "seat-03")
    assert seat.state == "failed" and not seat.connect and "domain is gone" in seat.state_reason
    down = vms.down(store, "demo", OPTIONS.connect, host=test_host, record=True)
    assert {r.seat: r.action for r in down.seats} == {
        "seat-01": "removed", "seat-02": "removed", "seat-03": "cleaned", "seat-04": "removed"
    }  # fmt: skip
    assert all("seed deleted" in r.detail for r in down.seats)  # seed of the hand-deleted domain too
    assert {s.state for s in store.seats("demo")} == {"released", "failed"}
    again = vms.up(store, "demo", lay, OPTIONS, test_host, record=True)  # a released seat can be brought back
    assert {s.state for s in store.seats("demo")} == {"running"} and not again.failed


def test_the_mock_driver_never_writes_into_the_course_store(store, test_host):
    lay = fill(store)
    before = [(s.state, s.engine, s.connect) for s in store.seats("demo")]
    events = len(store.events("demo"))
    report = vms.up(store, "demo", lay, OPTIONS, test_host)
    assert vms.TEST_DRIVER_NOTE in report.notes and not report.failed
    vms.status(store, "demo", OPTIONS.connect, test_host)
    vms.down(store, "demo", OPTIONS.connect, host=test_host)
    assert [(s.state, s.engine, s.connect) for s in store.seats("demo")] == before
    assert len(store.events("demo")) == events


def test_up_needs_the_layout_and_its_seats(store, test_host):
    fill(store)
    with pytest.raises(InputError, match="--inventory"):
        vms.up(store, "demo", None, OPTIONS, test_host)
    other = layout("h200-2x-server.toml", mode="passthrough")
    other = other.model_copy(
        update={"slices": tuple(s.model_copy(update={"name": f"gpu-{i}"}) for i, s in enumerate(other.slices))}
    )
    with pytest.raises(InputError, match="no seat of course demo"):
        vms.up(store, "demo", other, OPTIONS, test_host)
    assert test_host.conn.listAllDomains() == []


def test_worked_example_from_the_cli(tmp_path, monkeypatch, capsys):
    """The README's worked example, then `gpuseat vms up --course demo --connect test:///default`."""
    monkeypatch.setenv("GPUSEAT_DB_URL", f"sqlite:///{tmp_path / 'course.db'}")
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal for the table
    inventory = str(EXAMPLES / "ibm-2xM60.toml")

    def cli(*args: str) -> str:
        code = main(list(args))
        out = capsys.readouterr()
        assert code == 0, out.out + out.err
        return out.out

    cli("course", "create", str(EXAMPLES / "course-2016.toml"), "--key", "demo", "--plan-option", "1")
    cli("roster", "import", str(EXAMPLES / "roster-16.csv"))
    cli("seats", "add", "--inventory", inventory, "--mode", "passthrough", "--engine", "libvirt")
    cli("seats", "add", "--cloud")
    cli("seats", "assign")
    report = json.loads(cli("vms", "up", "--course", "demo", "--connect", "test:///default", "--inventory", inventory,
                            "-f", "json"))  # fmt: skip
    assert [s["action"] for s in report["seats"]] == ["defined+started"] * 4
    assert report["connect"] == "test:///default"
    assert any("nothing was recorded in the course store" in n for n in report["notes"])
    # the mock driver's made-up addresses never reach the course store
    status = {r["seat"]: r for r in json.loads(cli("seats", "status", "-f", "json"))}
    for i, who in enumerate(("amartin", "bcosta", "cwei", "dkowalski"), start=1):
        row = status[f"seat-0{i}"]
        assert (row["participant"], row["engine"], row["state"]) == (who, "libvirt", "planned")
        assert not row["connect"]
    assert {r["state"] for k, r in status.items() if not k.startswith("seat-0")} == {"planned"}  # cloud seats
    # the table form, and bad input: exit 2 with one message, no traceback
    table = cli("vms", "up", "--connect", "test:///default", "--inventory", inventory)
    assert "domains gpuseat-demo-SEAT" in table and "ssh amartin@192.168.122." in table
    code = main(["vms", "up", "--connect", "test:///default", "--inventory", inventory, "--pool", "../etc"])
    err = capsys.readouterr().err
    assert code == 2 and "--pool" in err and "Traceback" not in err


def test_vms_up_probe_key_is_authorised_in_every_seed(tmp_path, monkeypatch, capsys):
    """`vms up --probe-key KEY`: KEY.pub joins each seat's login in its seed (what `seats check` logs in with)."""
    monkeypatch.setenv("GPUSEAT_DB_URL", f"sqlite:///{tmp_path / 'course.db'}")
    inventory = str(EXAMPLES / "ibm-2xM60.toml")
    with open_store(f"sqlite:///{tmp_path / 'course.db'}", create=True) as store:
        lay = fill(store)
        _, seats, _ = vms.course_vm_seats(store, "demo", lay)
    key = tmp_path / "probe"
    key.write_text("not read: only KEY.pub is\n")
    up = ["vms", "up", "--connect", "test:///default", "--inventory", inventory, "-f", "json", "--probe-key", str(key)]
    assert main(up) == 2
    err = capsys.readouterr().err
    assert "probe.pub not found" in err and "--probe-key" in err and "Traceback" not in err
    probe_pub = public_key("carol")  # any real public key line
    (tmp_path / "probe.pub").write_text(probe_pub + "\n")
    assert main(up) == 0
    report = json.loads(capsys.readouterr().out)
    for vm, row in zip(seats, report["seats"], strict=True):
        want = vms.guest("demo", vm, vms.VmOptions(probe_keys=(probe_pub,)))
        assert want.ssh_keys == (*vm.ssh_keys, probe_pub) and vm.ssh_keys
        assert row["seed"].endswith(f"-cidata-{vms.seed_hash(want)}.iso"), row
