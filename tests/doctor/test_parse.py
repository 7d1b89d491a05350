"""The procfs/sysfs parsers, on real lines and on generated ones."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuseat.core.mmio import mmio_size_gb
from gpuseat.doctor import parse

addresses = st.integers(min_value=1, max_value=(1 << 48) - 1)
sizes = st.integers(min_value=1, max_value=1 << 40)
flag_values = st.sampled_from([0x40200, 0x14220C, 0x14220C | parse.IORESOURCE_UNSET, 0x2000 | 0x200])


@given(st.lists(st.tuples(addresses, sizes, flag_values), min_size=1, max_size=6))
def test_resource_lines_round_trip(bars):
    text = "".join(f"0x{s:016x} 0x{s + n - 1:016x} 0x{f:016x}\n" for s, n, f in bars)
    text += "0x0000000000000000 0x0000000000000000 0x0000000000000000\n" * 7  # ROM and SR-IOV lines
    parsed = parse.parse_resource(text)
    assert [(b.index, b.start, b.size, b.flags) for b in parsed] == [(i, s, n, f) for i, (s, n, f) in enumerate(bars)]
    assert all(b.assigned == (not f & parse.IORESOURCE_UNSET) for b, (_, _, f) in zip(parsed, bars, strict=True))


def test_real_unassigned_bar1_line():
    (bar,) = parse.parse_resource("0x0000000000000000 0x00000001ffffffff 0x000000002014220c\n")
    assert bar.size == 8 << 30 and bar.is_64bit and bar.prefetchable and not bar.assigned


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.integers(0, 7))
def test_bus_ids_from_nvidia_smi_and_sysfs_agree(domain, bus, dev, fn):
    sysfs = f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"
    smi = f"{domain:08X}:{bus:02X}:{dev:02X}.{fn}"
    assert parse.normalize_bdf(smi) == parse.normalize_bdf(sysfs) == sysfs


@given(st.lists(st.integers(0, 999), min_size=2, max_size=3))
def test_driver_version_from_proc(parts):
    version = ".".join(str(p) for p in parts)
    for text in (
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Tue Jun  6 22:20:39 UTC 2023\nGCC version: x\n",
        f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  (dvs-builder@U16)\n",
    ):
        assert parse.parse_driver_version(text) == version
    assert parse.version_tuple(version) == tuple(parts)


def test_mig_csv_as_nvidia_smi_prints_it():
    csv = "pci.bus_id, mig.mode.current, mig.mode.pending\n00000000:00:09.0, Enabled, Enabled\n00000000:41:00.0, [N/A], [N/A]\n"
    assert parse.mig_modes(csv) == {"0000:00:09.0": ("Enabled", "Enabled"), "0000:41:00.0": ("[N/A]", "[N/A]")}


@given(st.integers(min_value=1, max_value=1 << 44))
def test_mmio_size_is_the_smallest_power_of_two_that_fits(total):
    gb = mmio_size_gb([total])
    assert gb & (gb - 1) == 0
    assert gb * (1 << 30) >= total
    assert gb == 1 or (gb // 2) * (1 << 30) < total


def test_interrupt_chips_and_modprobe_lines():
    assert parse.interrupt_chips(" 24: 0 0 IR-PCI-MSI 458752-edge PCIe PME\n") == (True, False)
    assert parse.interrupt_chips(" 28: 0 0 PCI-MSIX-0000:00:01.0 0-edge virtio0\n") == (False, True)
    assert parse.modprobe_blacklists("# blacklist nouveau\nblacklist nouveau # no\n", "nouveau")
    assert not parse.modprobe_blacklists("# blacklist nouveau\noptions nouveau modeset=0\n", "nouveau")
    assert parse.modprobe_blacklists("install nouveau /bin/false\n", "nouveau")


def test_doctor_catalog_rows_point_at_real_models():
    from gpuseat.catalog.doctor import doctor_catalog

    catalog = doctor_catalog()
    assert catalog.model_for("13f2")[1].id == "M60"
    for row in catalog.mig_min.values():
        assert catalog.gpus[row.gpu].mig, row.gpu
    assert catalog.model_for("ffff") == ("NVIDIA device 10de:ffff", None)
