"""The libvirt renderer's keywords for ``gpuseat vms``, checked by libvirt's own validators."""

from __future__ import annotations

import subprocess

import libvirt
import pytest

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.carve import CarveRequest, carve
from gpuseat.core.inventory import server_from_toml
from gpuseat.core.needs import SeatNeed
from gpuseat.files import read_toml
from gpuseat.render.base import RenderOptions
from gpuseat.render.libvirt import METADATA_NS, DirectBoot, Owner, domain_xml

from .conftest import EXAMPLES, require_tool

CATALOG = load_catalog()


def m60_layout():
    server = server_from_toml(read_toml(EXAMPLES / "ibm-2xM60.toml"), CATALOG, where="inventory")
    return carve(server, CarveRequest(need=SeatNeed(isolation="dedicated"), mode="passthrough"), CATALOG)


@pytest.mark.parametrize("gpu", [True, False])
def test_vms_keywords_validate_and_define(tmp_path, gpu):
    layout = m60_layout()
    seat = layout.slices[0]
    text = domain_xml(
        layout,
        seat,
        RenderOptions(vcpus=1),
        name="gpuseat-demo-seat-01",
        memory_mib=256,
        virt_type="qemu",
        owner=Owner(course="demo", seat=seat.name, participant="a&b <c>"),
        gpu=gpu,
        disk="/var/lib/x/a b.qcow2",
        cidata="/var/lib/x/seed'.iso",
        serial_log="/tmp/console.log",
        network="default",
        boot=DirectBoot(kernel="/k/vmlinuz", initrd="/k/initrd.gz", cmdline="console=ttyS0 quiet"),
    )
    path = tmp_path / "d.xml"
    path.write_text(text)
    proc = subprocess.run([require_tool("virt-xml-validate"), str(path), "domain"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    conn = libvirt.open("test:///default")
    try:
        dom = conn.defineXMLFlags(text, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
        meta = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, METADATA_NS)
        assert 'course="demo"' in meta and 'participant="a&amp;b &lt;c&gt;"' in meta
        xml = dom.XMLDesc(0)
        assert "<source file='/var/lib/x/seed&apos;.iso'/>" in xml
        assert ("<hostdev" in xml) is gpu
        assert "<kernel>/k/vmlinuz</kernel>" in xml and "type='qemu'" in xml
        assert "<source network='default'" in xml
    finally:
        conn.close()
