"""Server descriptions: TOML inventory, --gpu, nvidia-smi XML captures, mig-parted configs."""

from __future__ import annotations

import pytest

from gpuseat.core.inventory import (
    parse_mig_parted,
    server_from_gpu_flag,
    server_from_toml,
)
from gpuseat.errors import InputError
from gpuseat.files import read_toml
from gpuseat.services.carving import server_from_nvidia_smi

from .conftest import CATALOG, FIXTURES


def test_gpu_flag_counts_boards_not_chips():
    server = server_from_gpu_flag("M60:2", CATALOG)
    assert len(server.chips) == 4 and server.boards == 2 and [c.board for c in server.chips] == [0, 0, 1, 1]
    assert len(server_from_gpu_flag("H200-141GB:8", CATALOG).chips) == 8


@pytest.mark.parametrize("spec", ["M61:2", "M60:x", "M60:0"])
def test_bad_gpu_flag(spec):
    with pytest.raises(InputError):
        server_from_gpu_flag(spec, CATALOG)


def test_example_inventory(m60_example):
    server = server_from_toml(read_toml(m60_example), CATALOG, where=str(m60_example))
    assert server.name == "ibm-2xM60" and server.gpu.id == "M60"
    assert [c.pci for c in server.chips] == ["0000:86:00.0", "0000:87:00.0", "0000:88:00.0", "0000:89:00.0"]
    assert server.chips[0].bars_mib == (16, 8192, 32)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"gpu": [{"model": "M60", "boards": 1, "chip": [{}, {}, {}]}]}, "3 [[gpu.chip]] entries"),
        ({"gpu": [{"model": "M60", "chip": [{"pci": "86:00"}]}]}, "not a PCI address"),
        ({"gpu": [{"model": "M60", "color": "red"}]}, "unknown field"),
        ({"gpu": [{"model": "M60"}, {"model": "T4"}]}, "several GPU models"),
        ({"gpu": []}, "gpu"),
    ],
)
def test_malformed_inventory(data, message):
    with pytest.raises(InputError) as err:
        server_from_toml(data, CATALOG, where="server.toml")
    assert message in err.value.message


@pytest.mark.parametrize(
    ("fixture", "model", "pci", "bar1"),
    [
        ("telegraf__a100-sxm4-v12.xml", "A100-80GB", "0000:01:00.0", 131072),
        ("telegraf__tesla-t4.xml", "T4", "0000:00:1e.0", 256),
        ("telegraf__a10g.xml", "A10G", "0000:00:1e.0", 32768),
    ],
)
def test_nvidia_smi_captures(fixture, model, pci, bar1):
    server = server_from_nvidia_smi((FIXTURES / fixture).read_text(), CATALOG, where=fixture)
    chip = server.chips[0]
    assert (server.gpu.id, chip.pci, chip.bars_mib) == (model, pci, (48.0, float(bar1)))
    assert chip.uuid and chip.uuid.startswith("GPU-")


def _xml(text: str) -> object:
    return server_from_nvidia_smi(text, CATALOG, where="x.xml")


def _mig_parted(text: str) -> object:
    return parse_mig_parted(text, where="c.yaml")


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (_xml, "<nvidia_smi_log><gpu>", "not nvidia-smi XML"),
        (_xml, "<nvidia_smi_log/>", "no <gpu>"),
        (
            _xml,
            "<nvidia_smi_log><gpu><uuid>GPU-1</uuid><product_name>Voodoo 2</product_name></gpu></nvidia_smi_log>",
            "not in the catalog",
        ),
        (_mig_parted, "mig-configs: {a: []}", "version"),
        (_mig_parted, "version: v2\nmig-configs: {a: []}", "version"),
        (
            _mig_parted,
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      bogus: 1\n",
            "unknown field",
        ),
        (_mig_parted, "version: v1\nmig-configs: [", "malformed YAML"),
        (_mig_parted, "version: v1\nmig-configs:\n  a: []\n  b: []\n", "choose one with --config"),
    ],
)
def test_bad_captures_and_configs(parse, text, message):
    with pytest.raises(InputError) as err:
        parse(text)
    assert message in err.value.message
