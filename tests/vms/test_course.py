"""``gpuseat vms up|status|down`` from the CLI: ``up`` is ``apply --engine libvirt`` with its flags
stored as the course's libvirt settings first.

Real SQLite store, libvirt's mock driver (``test:///default``: each command gets a fresh mock host,
and its made-up addresses never reach the course store).
"""

from __future__ import annotations

import json

import pytest

from gpuseat.cli import main
from gpuseat.engines import registry
from gpuseat.engines.libvirt import machine
from gpuseat.engines.libvirt.engine import TEST_DRIVER_NOTE
from gpuseat.engines.runner import Runner
from gpuseat.store import open_store

from .conftest import EXAMPLES, public_key

INVENTORY = str(EXAMPLES / "ibm-2xM60.toml")


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPUSEAT_DB_URL", f"sqlite:///{tmp_path / 'course.db'}")
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal for the tables

    def run(*args: str, code: int = 0) -> str:
        got = main(list(args))
        out = capsys.readouterr()
        assert got == code, out.out + out.err
        return out.out if code == 0 else out.err

    run("course", "create", str(EXAMPLES / "course-2016.toml"), "--key", "demo", "--plan-option", "1")
    run("roster", "import", str(EXAMPLES / "roster-16.csv"))
    run("seats", "add", "--inventory", INVENTORY, "--mode", "passthrough", "--engine", "libvirt")
    run("seats", "add", "--cloud")
    run("seats", "assign")
    return run


def test_vms_up_is_apply_with_the_flags_stored_as_settings(cli, tmp_path):
    plan = json.loads(cli("vms", "up", "--course", "demo", "--connect", "test:///default", "--inventory", INVENTORY,
                          "--vcpus", "2", "-f", "json"))  # fmt: skip
    (libvirt,) = plan["plans"]
    assert [s["action"] for s in libvirt["steps"]] == ["domain.create"] * 4
    assert TEST_DRIVER_NOTE in libvirt["notes"]
    assert all(o["state"] == "done" for o in plan["reports"][0]["outcomes"])
    stored = json.loads(cli("engines", "settings", "libvirt", "-f", "json"))
    assert stored == {"connect": "test:///default", "inventory": INVENTORY, "vcpus": 2}
    # the mock driver's made-up addresses never reach the course store
    status = {r["seat"]: r for r in json.loads(cli("seats", "status", "-f", "json"))}
    for i, who in enumerate(("amartin", "bcosta", "cwei", "dkowalski"), start=1):
        row = status[f"seat-0{i}"]
        assert (row["participant"], row["engine"], row["state"], row["connect"]) == (who, "libvirt", "planned", None)
    # `apply` uses the stored settings: each run gets a fresh mock host, so it plans the VMs again
    dry = cli("apply", "--engine", "libvirt", "--dry-run")
    assert "+ domain.create    gpuseat-demo-seat-01" in dry and "amartin holds seat-01" in dry
    assert "would run: virsh -c test:///default define gpuseat-demo-seat-01.xml" in dry
    # status reads libvirt and the store and changes nothing
    rows = json.loads(cli("vms", "status", "-f", "json"))
    assert rows["connect"] == "test:///default"
    assert [(r["seat"], r["participant"], r["state"], r["connect"]) for r in rows["seats"]][:1] == [
        ("seat-01", "amartin", "absent", "")
    ]
    assert "nothing to change" in cli("vms", "down")


def test_bad_input_is_one_message_and_exit_2(cli):
    err = cli("vms", "up", "--connect", "test:///default", "--inventory", INVENTORY, "--pool", "../etc", code=2)
    assert "pool" in err and "Traceback" not in err
    err = cli("vms", "up", "--connect", "not a uri", code=2)
    assert "connect" in err and "Traceback" not in err
    err = cli("engines", "settings", "libvirt", "network=a;b", code=2)
    assert "network" in err and "Traceback" not in err
    err = cli("vms", "up", "--connect", "test:///default", code=2)  # no inventory: the GPUs are unknown
    assert "inventory" in err and "Traceback" not in err


def test_vms_up_probe_key_is_authorised_in_every_seed(cli, tmp_path):
    """`vms up --probe-key KEY`: KEY.pub joins each holder's login in their seed (what `seats check` uses)."""
    key = tmp_path / "probe"
    key.write_text("not read: only KEY.pub is\n")
    up = ("vms", "up", "--connect", "test:///default", "--inventory", INVENTORY, "--probe-key", str(key))
    err = cli(*up, code=2)
    assert "probe.pub not found" in err and "--probe-key" in err and "Traceback" not in err
    probe_pub = public_key("carol")  # any real public key line
    (tmp_path / "probe.pub").write_text(probe_pub + "\n")
    cli(*up)
    with open_store(f"sqlite:///{tmp_path / 'course.db'}") as store:
        settings = store.agents.engine_settings("demo", "libvirt")
        assert settings["probe_key"] == str(key)
        engine = registry.build("libvirt", store, "demo", settings=settings, runner=Runner())
        people = {p.key: p for p in store.roster.participants("demo")}
    options = engine.options  # type: ignore[attr-defined]
    assert options.probe_keys == (probe_pub,)
    seat = engine.layout.slices[0]  # type: ignore[attr-defined]
    alice = people["amartin"]
    vm = machine.VmSeat(seat.name, seat, alice.key, alice.unix_user, (alice.ssh_key,))
    assert machine.guest("demo", vm, options).ssh_keys == (alice.ssh_key, probe_pub)
