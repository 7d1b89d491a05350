"""The pure parts of delivery: delimiters, hosts, instructions, mig-minors, probe output, device adoption."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuseat.core.delivery import (
    SeatDevice,
    adopt,
    instruction,
    parse_mig_minors,
    parse_probe,
)
from gpuseat.core.hosts import check_host, split_user_host
from gpuseat.core.roster import parse_roster, sniff_delimiter
from gpuseat.errors import InputError

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk2Xkq6v5gW2d3ooT2mVrEJ6n3Y7F1pYz8T6vGq8J3D ann@laptop"


@pytest.mark.parametrize("sep", [",", ";", "\t"])
def test_roster_delimiters(sep: str) -> None:
    text = sep.join(["name", "email", "unix_user", "ssh_key"]) + "\n"
    text += sep.join(["Müller, Anna", "ann@example.org", "ann", KEY]) + "\n"
    if sep == ",":
        text = text.replace("Müller, Anna", '"Müller, Anna"')
    [row] = parse_roster(text, groups=("participants",))
    assert (row.name, row.email, row.unix_user, row.ssh_key) == ("Müller, Anna", "ann@example.org", "ann", KEY)


def test_sniff_ignores_quoted_separators() -> None:
    assert sniff_delimiter('"name;x",email\n') == ","
    assert sniff_delimiter("email\n") == ","


@given(st.text(max_size=80))
def test_check_host_accepts_only_plain_names(text: str) -> None:
    try:
        host = check_host(text, field="ssh_host")
    except InputError as exc:
        assert exc.where == "ssh_host"
        return
    assert not any(c in host for c in " ;&|$`'\"\\/\n@")


def test_split_user_host() -> None:
    assert split_user_host("ann@gpu1.example.org:2222") == ("ann", "gpu1.example.org", 2222)
    assert split_user_host("[2001:db8::1]:22") == (None, "2001:db8::1", 22)
    for bad in ("ann@h200.toml", "ann@gpu 1", "ann@-oProxyCommand=x", "ann@gpu1:99999", "Bad User@gpu1"):
        with pytest.raises(InputError):
            split_user_host(bad)


def test_instruction_never_prints_the_inventory_name() -> None:
    way = instruction({"kind": "ssh", "host": "h200-2x"}, seat="s1", unix_user="ann", server_name="h200-2x")
    assert way.command is None and "ssh_host" in (way.missing or "")
    way = instruction({"kind": "ssh", "host": "gpu1.example.org", "port": 2222}, seat="s1", unix_user="ann")
    assert way.command == "ssh -p 2222 ann@gpu1.example.org" and "Port 2222" in (way.ssh_config or "")
    assert instruction(None, seat="s1", unix_user="ann").missing


def test_mig_minors_and_probe() -> None:
    minors = parse_mig_minors("gpu0/gi1/access 3\ngpu0/gi1/ci0/access 4\nconfig 1\nmonitor 2\n")
    assert minors == {(0, 1, None): 3, (0, 1, 0): 4}
    with pytest.raises(InputError, match="mig-minors line 2"):
        parse_mig_minors("gpu0/gi1/access 3\ngpu0/gi1 4\n")
    seen = parse_probe(
        "CUDA_VISIBLE_DEVICES=MIG-a\nGPU 0: NVIDIA H200 (UUID: GPU-x)\n  MIG 1g.18gb     Device  0: (UUID: MIG-a)\n"
        "GPU 1: NVIDIA H200 (UUID: GPU-y)\n"
    )
    assert seen.cuda_visible == "MIG-a" and seen.visible == ("MIG-a", "GPU-y")


def test_adopt_takes_free_devices_of_the_profile() -> None:
    devices = {
        "GPU-0": SeatDevice("GPU-0", 0, split=True),
        "MIG-a": SeatDevice("MIG-a", 0, 7, 0, "1g.18gb"),
        "MIG-b": SeatDevice("MIG-b", 0, 8, 0, "1g.18gb"),
        "MIG-c": SeatDevice("MIG-c", 0, 9, 0, "3g.71gb"),
        "GPU-1": SeatDevice("GPU-1", 1),
    }
    wanted = [("s1", "mig", "1g.18gb"), ("s2", "mig", "1g.18gb"), ("s3", "gpu", None), ("s4", "mig", "7g.141gb")]
    assert adopt(wanted, devices, {"MIG-a"}) == {"s1": "MIG-b", "s3": "GPU-1"}


def test_missing_package_messages_name_the_extras_the_readme_names() -> None:
    import tomllib
    from pathlib import Path

    from gpuseat.cli import EXTRAS

    root = Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    readme = (root / "README.md").read_text()
    assert EXTRAS["sqlalchemy"] == EXTRAS["alembic"] == "store"  # the course store, not [monitor]
    for extra in set(EXTRAS.values()):
        assert extra in extras and f"`[{extra}]`" in readme, extra
