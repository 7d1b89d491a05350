"""Shared helpers for the VM tests: example paths and the outside tools they need."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def require_tool(name: str) -> str:
    """The tool's path; missing, it fails on CI and skips elsewhere."""
    path = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)
    if path is None:
        message = f"{name} is not installed (scripts/setup.sh installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


NODE_XML = Path(__file__).resolve().parent / "node.xml"
SSH_KEYS = Path(__file__).resolve().parent / "keys"


@pytest.fixture
def test_host():
    """A private, empty libvirt test-driver host (one network, one pool), closed after the test."""
    from gpuseat.engines.libvirt.libvirt_host import LibvirtHost

    host = LibvirtHost(f"test://{NODE_XML}")
    yield host
    host.close()


def layout(name: str, **request):
    """A carve layout of one of the shipped example inventories."""
    from gpuseat.catalog.bundle import load_catalog
    from gpuseat.core.carve import CarveRequest, carve
    from gpuseat.core.inventory import server_from_toml
    from gpuseat.core.needs import SeatNeed
    from gpuseat.files import read_toml

    catalog = load_catalog()
    server = server_from_toml(read_toml(EXAMPLES / name), catalog, where=name)
    need = SeatNeed(isolation="shared", **request.pop("need", {}))
    return carve(server, CarveRequest(need=need, **request), catalog)


def public_key(name: str) -> str:
    """A real OpenSSH public key made by ssh-keygen for the tests (tests/vms/keys/NAME.pub)."""
    return (SSH_KEYS / f"{name}.pub").read_text().strip()
