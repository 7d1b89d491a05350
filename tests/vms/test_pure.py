"""The pure parts of ``gpuseat vms``: names, connect strings, which doctor checks run, libvirt's fixes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuseat.engines.libvirt import names
from gpuseat.engines.libvirt.domain import drift, owner
from gpuseat.engines.libvirt.libvirt_host import libvirt_fix
from gpuseat.engines.libvirt.machine import VmOptions, VmSeat, connect_string, preflight_targets
from gpuseat.errors import InputError

from .conftest import layout


def test_connect_strings_local_and_through_the_libvirt_host():
    assert connect_string("amartin", "192.168.122.5", None, None) == "ssh amartin@192.168.122.5"
    assert connect_string("amartin", "10.0.0.7", "gpu1.example.org", "root") == (
        "ssh -J root@gpu1.example.org amartin@10.0.0.7"
    )
    assert connect_string("amartin", "10.0.0.7", "gpu1.example.org", None) == "ssh -J gpu1.example.org amartin@10.0.0.7"
    # qemu+ssh://root@[2001:db8::1]/system: ssh -J reads a bare IPv6 host as host 2001 ("Invalid -J argument")
    assert connect_string("amartin", "fd00::7", "2001:db8::1", "root") == "ssh -J 'root@[2001:db8::1]' amartin@fd00::7"


def test_preflight_runs_what_the_seats_need():
    pt = layout("ibm-2xM60.toml", mode="passthrough")
    vg = layout("ibm-2xM60.toml", mode="vgpu", seats=7, need={"cuda": False})
    seats = [VmSeat(s.name, s) for s in (*pt.slices[:1], *vg.slices[:1])]
    assert preflight_targets(seats, VmOptions()) == ["passthrough", "vgpu"]
    assert preflight_targets(seats[:1], VmOptions()) == ["passthrough"]
    assert preflight_targets(seats, VmOptions(gpu=False)) == []


@pytest.mark.parametrize(
    ("message", "hint"),
    [
        ("unsupported configuration: host doesn't support VFIO PCI passthrough", "intel_iommu=on"),
        ("unsupported configuration: host doesn't support passthrough of host PCI devices", "doctor --for passthrough"),
        ("device not found: mediated device '5b0c…' not found", "mdev-create.sh"),
        ("something else entirely", "dumpxml"),
    ],
)
def test_libvirt_errors_get_a_fix(message, hint):
    assert hint in libvirt_fix(message)


@given(st.text(max_size=80))
def test_names_are_dns_labels_or_refused(text):
    try:
        name = names.domain_name("demo", text)
    except InputError:
        return
    assert name == f"gpuseat-demo-{text}" and len(name) <= 63
    assert all(c.islower() or c.isdigit() or c == "-" for c in text) and text.isascii()
    assert not text.startswith("-") and not text.endswith("-")


@pytest.mark.parametrize("user", ["root", "nobody", "Alice", "1abc", "a b", "a;rm", "x" * 40, ""])
def test_bad_unix_users_are_refused(user):
    with pytest.raises(InputError):
        names.guest_login(user, where="participant")


def test_owner_and_drift_read_libvirts_own_xml_shapes():
    mine = (
        "<domain type='kvm'><name>n</name><metadata><g:seat xmlns:g='https://gpuseat.dev/xmlns/libvirt-seat/1' "
        "course='demo' seat='seat-01'/></metadata><memory unit='GiB'>16</memory><vcpu>4</vcpu><devices>"
        "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='0x86' "
        "slot='0x00' function='0x0'/></source></hostdev></devices></domain>"
    )
    libvirts = mine.replace("<memory unit='GiB'>16</memory>", "<memory unit='KiB'>16777216</memory>"
                            "<currentMemory unit='KiB'>16777216</currentMemory>").replace(
        "<vcpu>4</vcpu>", "<vcpu placement='static'>4</vcpu>").replace("bus='0x86'", "bus='0x86' extra='1'")  # fmt: skip
    assert drift(mine, libvirts) == []
    assert drift(mine, libvirts.replace("bus='0x86'", "bus='0x87'")) == ["hostdevs"]
    assert owner(mine).seat == "seat-01" and owner(mine.replace("seat='seat-01'", "")) is None
