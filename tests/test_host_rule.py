"""One host rule (gpuseat.core.hosts): the same value gets the same verdict wherever it is typed.

Each row is one hostile or edge value with its verdict: the host it becomes, or None when refused.
The entry points: a seat's host (``SeatSpec``, ``gpuseat seats add --host`` through the real CLI,
``gpuseat apply --host``), the host engine's ``ssh_host`` setting, ``split_user_host`` (``seats
connect --ssh``), and ``core.hosts.ssh_target`` with ``gpuseat top --ssh`` (a stand-in ``ssh`` on PATH
records what it was given; a refused value never starts it). ``user@`` is taken only by the ``--ssh``
entry points. Before the one rule, the seat host took ``gpu_01``-style names but ``a..b`` and ``node-``
too and no IPv6 address, ``--ssh`` took ``::::``, and ``ssh_host`` refused ``gpu_01``.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuseat.cli import main
from gpuseat.cli.apply import seat_host
from gpuseat.core.hosts import split_user_host, ssh_target
from gpuseat.engines.registry import validate_settings
from gpuseat.errors import InputError
from gpuseat.files import validate
from gpuseat.store.specs import SeatSpec

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
LISTING = "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5c8c1b4e-0e6f-4d9a-9c3e-2f1a7b6d8e90)\n"
SSH = '#!/bin/sh\necho "$@" >> "$HOSTRULE_SSH_LOG"\nexit 255\n'

LONG = ".".join(["a" * 63] * 4)[:253]  # 253 characters: the longest name
#: value → the host it becomes (None: refused everywhere)
ROWS: list[tuple[str, str | None]] = [
    ("-oProxyCommand=x", None),
    ("gpu01\n", None),
    ("a..b", None),
    ("gpu_01", "gpu_01"),  # /etc/hosts names: ssh resolves them, so every entry point takes them
    ("node-", None),
    ("GPU01.lab.example.", "GPU01.lab.example."),
    ("fe80::1", "fe80::1"),
    ("[fe80::1]", "fe80::1"),
    ("::::", None),
    ("10.0.0.5", "10.0.0.5"),
    ("10.0.0.256", None),
    ("1234", None),  # the resolver reads it as 0.0.4.210
    (LONG, LONG),
    (LONG + "a", None),
    ("a" * 64, None),
    ("gpu01;reboot", None),
    ("gpu 01", None),
    ("gpu\u0660\u0661", None),  # Arabic-Indic digits
    ("h200.toml", None),
    ("fe80::1%eth0", None),  # a zone names an interface of the machine ssh runs on: none of a participant's
    ("[fe80::1%eth0]", None),
    ("fe80::1%e;x", None),
    ("[gpu01]", None),
]
IDS = [repr(v[:24]) for v, _ in ROWS]
#: refused by the rule but stored as seat hosts by an older gpuseat: `apply/agent --host` still selects them
STORED_BEFORE = {"a..b", "node-", "1234", "10.0.0.256", "a" * 64, "h200.toml"}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with the 2016 course and its roster, copied for each row."""
    db = tmp_path_factory.mktemp("hosts") / "gpuseat.db"
    url = f"sqlite:///{db}"
    for args in (
        ("course", "create", str(EXAMPLES / "course-2016.toml"), "--plan-option", "1"),
        ("roster", "import", str(EXAMPLES / "roster-16.csv")),
    ):
        assert main([*args, "--db", url]) == 0, args
    return db


def _verdict(call: Callable[[], Any]) -> str | None:
    try:
        return str(call())
    except InputError as exc:
        assert exc.where and exc.fix, exc  # which field, and how to fix it
        return None


@pytest.mark.parametrize(("value", "becomes"), ROWS, ids=IDS)
def test_a_host_gets_one_verdict_everywhere(value: str, becomes: str | None, cli, template: Path, tmp_path) -> None:
    spec = lambda: validate(SeatSpec, {"key": "s1", "kind": "gpu", "host": value}, where="seat s1").host  # noqa: E731
    assert _verdict(spec) == becomes
    assert _verdict(lambda: seat_host(value)) == (value if value in STORED_BEFORE else becomes)
    ssh_host = lambda: validate_settings("host", {"ssh_host": value}).ssh_host  # noqa: E731
    assert _verdict(ssh_host) == becomes
    assert _verdict(lambda: split_user_host(value)[1]) == becomes
    assert _verdict(lambda: ssh_target(value)) == becomes
    assert _verdict(lambda: split_user_host(f"ann@{value}")[1]) == becomes

    db = tmp_path / "gpuseat.db"
    shutil.copyfile(template, db)
    (tmp_path / "l.txt").write_text(LISTING)
    r = cli("seats", "add", "--from-nvidia-smi", tmp_path / "l.txt", "--host", value, "--db", f"sqlite:///{db}")
    assert "Traceback" not in r.err
    if becomes is None:
        assert r.code == 2 and "--host" in r.err and "not a host name" in r.err and "To fix" in r.err, r.err
    else:
        assert r.code == 0, r.err
        with sqlite3.connect(db) as con:
            assert con.execute("SELECT host FROM seats").fetchall() == [(becomes,)]
        con.close()


@pytest.mark.parametrize(("value", "becomes"), ROWS, ids=IDS)
def test_top_ssh_passes_the_checked_host_or_never_starts_ssh(
    value: str, becomes: str | None, cli, tmp_path, monkeypatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(SSH)
    (bin_dir / "ssh").chmod(0o755)
    log = tmp_path / "ssh.log"
    monkeypatch.setenv("HOSTRULE_SSH_LOG", str(log))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    r = cli("top", "--ssh", f"ann@{value}", "--once")
    assert "Traceback" not in r.err
    if becomes is None:
        assert r.code == 2 and "--ssh" in r.err and not log.exists(), r.err
    else:
        assert log.read_text().split(" -- ")[1].split()[0] == f"ann@{becomes}"


@pytest.mark.parametrize("value", ["user@gpu01", "Ann@gpu01", "First.Last@gpu01", "-x@gpu01", "a@b@gpu01"])
def test_a_user_is_taken_only_by_ssh_entry_points(value: str) -> None:
    for call in (
        lambda: validate(SeatSpec, {"key": "s1", "kind": "gpu", "host": value}, where="seat s1"),
        lambda: seat_host(value),
        lambda: validate_settings("host", {"ssh_host": value}),
    ):
        assert _verdict(call) is None
    user = value.partition("@")[0]
    if user == "user":
        assert ssh_target(value) == value and split_user_host(value) == ("user", "gpu01", None)
        return
    # a participant's login (seats connect --ssh) follows the Unix user rule gpuseat creates logins by
    assert _verdict(lambda: split_user_host(value)) is None
    # the organizer's own --ssh names an account that exists there: First.Last is an admin's usual name
    if user in ("Ann", "First.Last"):
        assert ssh_target(value) == value
    else:
        assert _verdict(lambda: ssh_target(value)) is None


def _seated(cli, template: Path, tmp_path: Path, *connect: str) -> tuple[Path, str]:
    """A copy of the template store with seat-01 on gpu1.lab.example held, and ``seats connect seat-01 CONNECT…``
    when given: the store an older gpuseat's values are then written into."""
    db = tmp_path / "gpuseat.db"
    shutil.copyfile(template, db)
    (tmp_path / "l.txt").write_text(LISTING)
    url = f"sqlite:///{db}"
    for args in (
        ("seats", "add", "--from-nvidia-smi", tmp_path / "l.txt", "--host", "gpu1.lab.example"),
        ("seats", "assign", "--partial"),
        *([("seats", "connect", "seat-01", *connect)] if connect else []),
    ):
        assert cli(*args, "--db", url).code == 0, args
    return db, url


@pytest.mark.parametrize(
    "stored",
    [
        "UPDATE seats SET host = 'node-.lab.example'",  # seats add --host before the rule
        "UPDATE seats SET access = json_set(access, '$.host', 'node-.lab.example', "  # seats connect --ssh
        "'$.command', 'ssh ann@node-.lab.example')",
    ],
    ids=["seat-host", "way-in"],
)
def test_a_host_stored_before_the_rule_is_never_shown_as_a_command(cli, template: Path, tmp_path, stored: str) -> None:
    way_in = ("--ssh", "ann@gpu1.lab.example") if "access" in stored else ()
    db, url = _seated(cli, template, tmp_path, *way_in)
    with sqlite3.connect(db) as con:  # as an older gpuseat stored it
        con.execute(stored)
    con.close()
    r = cli("seats", "connect", "seat-01", "--format", "json", "--db", url)
    assert r.code == 0, r.err
    shown = json.loads(r.out)
    assert shown["command"] is None and shown["ssh_config"] is None, shown  # never `ssh ann@node-.lab.example`
    assert "seat seat-01's host 'node-.lab.example'" in shown["missing"]
    assert "gpuseat seats connect seat-01 --ssh" in shown["missing"]
    assert cli("seats", "status", "--db", url).code == 0  # the store reads as before


@pytest.mark.parametrize(
    ("stored", "command", "missing"),
    [  # a jump host an older gpuseat stored with seats connect --jump, and its command
        ("2001:db8::1", "ssh -J '[2001:db8::1]' amartin@gpu1.lab.example", None),  # bare: ssh -J read host 2001
        ("gw-.lab.example", None, "seat seat-01's jump host 'gw-.lab.example' is not one ssh -J takes"),
    ],
)
def test_a_jump_host_stored_before_the_rule_is_shown_as_ssh_takes_it(
    cli, template: Path, tmp_path, stored: str, command: str | None, missing: str | None
) -> None:
    db, url = _seated(cli, template, tmp_path, "--ssh", "amartin@gpu1.lab.example", "--jump", "gw.lab.example")
    with sqlite3.connect(db) as con:  # as an older gpuseat stored it
        con.execute(
            "UPDATE seats SET access = json_set(access, '$.jump_host', ?, '$.command', ?)",
            (stored, f"ssh -J {stored} amartin@gpu1.lab.example"),
        )
    con.close()
    shown = json.loads(cli("seats", "connect", "seat-01", "--format", "json", "--db", url).out)
    assert shown["command"] == command, shown
    if missing is None:
        assert f"    ProxyJump [{stored}]\n" in shown["ssh_config"], shown
    else:
        assert shown["ssh_config"] is None and missing in shown["missing"], shown
        assert "gpuseat seats connect seat-01 --ssh USER@HOST --jump" in shown["missing"]


@pytest.mark.parametrize(
    ("jump", "becomes"),
    [
        ("gw.example.org", "gw.example.org"),
        ("ann@gw.example.org:2200", "ann@gw.example.org:2200"),  # refused by ssh_host's rule before
        ("[2001:db8::1]:2200", "[2001:db8::1]:2200"),
        ("2001:db8::1", "[2001:db8::1]"),  # -J and ProxyJump read a bare one as host 2001, port db8::1
        ("ann@[2001:db8::1]", "ann@[2001:db8::1]"),
        ("gw_1", "gw_1"),
        ("ann@-oProxyCommand=x", None),
        ("gw..example.org", None),
        ("gw.example.org:0", None),
    ],
)
def test_a_jump_host_is_one_ssh_j_target_everywhere(jump: str, becomes: str | None) -> None:
    from gpuseat.engines.runner import RecordingRunner
    from gpuseat.engines.skypilot.engine import SkyPilotEngine
    from gpuseat.services.delivery import build_access

    assert _verdict(lambda: validate_settings("host", {"jump_host": jump}).jump_host) == becomes
    made = lambda: build_access("gpu1.example.org", None, jump, [], None, None)  # noqa: E731
    assert _verdict(lambda: made().jump_host) == becomes
    engine = SkyPilotEngine(None, "lab", runner=RecordingRunner())  # type: ignore[arg-type]
    argv = lambda: engine.probe_command("gs-lab-s1", "ann", {"host": "gpu1.example.org", "jump_host": jump})  # noqa: E731
    assert _verdict(lambda: (a := argv())[a.index("-J") + 1]) == becomes


# -- the same for device UUIDs (gpuseat.core.devices) ------------------------------------------------

GPU_UUID = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"  # CUDA's CUDA_VISIBLE_DEVICES documentation
#: nvidia-smi -L of drivers R450-R460 (MIG-<GPU UUID>/<GI>/<CI>) and of R470 on (MIG-<uuid>)
OLD_LISTING = f"GPU 0: A100-SXM4-40GB (UUID: {GPU_UUID})\n  MIG 1g.5gb Device 0: (UUID: MIG-{GPU_UUID}/7/0)\n"
NEW_LISTING = (
    "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-4f1d6a52-9c0e-2d5b-8a41-7e3c2b1a9f08)\n"
    "  MIG 1g.5gb      Device  0: (UUID: MIG-445da789-865d-5fd1-b2b6-32a48bf66c39)\n"
)


@pytest.mark.parametrize(
    ("uuid", "ok"),
    [
        (GPU_UUID, True),
        (f"MIG-{GPU_UUID}/7/0", True),
        ("MIG-445da789-865d-5fd1-b2b6-32a48bf66c39", True),
        (f"MIG-{GPU_UUID}/7", False),
        ("MIG-445da789/7/0", False),  # '/' only in the MIG-GPU- form
        (f"{GPU_UUID}/7/0", False),
        (f"MIG-{GPU_UUID}/7/0\n", False),
        ('GPU-8932f937"x', False),  # it goes into authorized_keys' environment="…"
        ("gpu-8932f937", False),
    ],
)
def test_a_device_uuid_gets_one_verdict(uuid: str, ok: bool) -> None:
    from gpuseat.core.devices import DEVICE_UUID as UUID_RE

    spec = lambda: validate(SeatSpec, {"key": "s1", "kind": "mig", "device_uuid": uuid}, where="seat s1")  # noqa: E731
    assert (_verdict(spec) is not None) is ok
    assert bool(UUID_RE.fullmatch(uuid)) is ok


@pytest.mark.parametrize("listing", [OLD_LISTING, NEW_LISTING], ids=["R460", "R470+"])
def test_seats_from_either_nvidia_smi_listing(listing: str, cli, template: Path, tmp_path) -> None:
    db = tmp_path / "gpuseat.db"
    shutil.copyfile(template, db)
    (tmp_path / "l.txt").write_text(listing)
    r = cli("seats", "add", "--from-nvidia-smi", tmp_path / "l.txt", "--db", f"sqlite:///{db}")
    assert r.code == 0, r.err
    with sqlite3.connect(db) as con:
        stored = con.execute("SELECT kind, device_uuid FROM seats").fetchall()
    con.close()
    assert stored == [("mig", listing.rpartition("UUID: ")[2].strip().rstrip(")"))]
    # the --seats file of top/monitor that seats export writes for it is one top and monitor read
    from gpuseat.monitor.seats import read_seats

    for fmt in ("toml", "csv"):  # the seats CSV (the portal's seats.csv too): top --seats refused it ('id' missing)
        r = cli("seats", "export", "--format", fmt, "--db", f"sqlite:///{db}")
        assert r.code == 0, r.err
        (tmp_path / f"seats.{fmt}").write_text(r.out)
        assert [e.device_uuid for e in read_seats(tmp_path / f"seats.{fmt}")] == [stored[0][1]]


@pytest.mark.parametrize("host", ["2001:db8::5", "[2001:db8::5]", "10.0.0.5"])
def test_an_address_seat_host_is_a_way_in(host: str, cli, template: Path, tmp_path) -> None:
    """An IPv6 address has no dot: it was taken for the inventory's label of the server, so its seat had
    "no reachable address yet" and ``seats connect --ssh`` refused that very address."""
    db = tmp_path / "gpuseat.db"
    shutil.copyfile(template, db)
    (tmp_path / "l.txt").write_text(OLD_LISTING)
    url = f"sqlite:///{db}"
    for args in (
        ("seats", "add", "--from-nvidia-smi", tmp_path / "l.txt", "--host", host, "--engine", "host"),
        ("seats", "assign", "--partial"),
    ):
        assert cli(*args, "--db", url).code == 0, args
    bare = host.strip("[]")
    shown = json.loads(cli("seats", "connect", "seat-01", "--format", "json", "--db", url).out)
    assert (shown["command"], shown["missing"]) == (f"ssh amartin@{bare}", None), shown
    assert f"    HostName {bare}\n" in shown["ssh_config"]
    r = cli("seats", "connect", "seat-01", "--ssh", f"amartin@{host}", "--jump", "gw@2001:db8::1", "--db", url)
    assert r.code == 0, r.err
    assert f"ssh -J 'gw@[2001:db8::1]' amartin@{bare}" in r.out


def test_apply_host_selects_a_seat_host_stored_before_the_rule(cli, template: Path, tmp_path) -> None:
    """``apply/agent --host node-`` (an agent unit installed by an older gpuseat) was refused by the rule,
    so that server's seats could not be applied at all; it selects the stored seats as before."""
    db = tmp_path / "gpuseat.db"
    shutil.copyfile(template, db)
    (tmp_path / "l.txt").write_text(NEW_LISTING)
    url = f"sqlite:///{db}"
    for args in (
        ("seats", "add", "--from-nvidia-smi", tmp_path / "l.txt", "--host", "gpu1.lab.example", "--engine", "host"),
        ("seats", "assign", "--partial"),
    ):
        assert cli(*args, "--db", url).code == 0, args
    with sqlite3.connect(db) as con:  # as an older gpuseat stored it
        con.execute("UPDATE seats SET host = 'node-'")
    con.close()
    r = cli("apply", "--dry-run", "--engine", "host", "--host", "node-", "--format", "json", "--db", url)
    assert r.code == 0, r.err
    (plan,) = json.loads(r.out)["plans"]
    assert plan["host"] == "node-" and "seat-01" in json.dumps(plan["steps"]), plan
    r = cli("apply", "--dry-run", "--host", "node-;x", "--db", url)
    assert r.code == 2 and "--host" in r.err and "To fix" in r.err, r.err


def test_the_host_engine_finds_an_r460_mig_seat(tmp_path: Path) -> None:
    """``nvidia-smi -q -x`` of drivers R450-R460 gives a MIG device no UUID; ``-L`` names it
    ``MIG-GPU-<uuid>/<gi>/<ci>``, the UUID such a seat is stored with. The host engine read only ``-q -x``'s, so
    on such a server it found none of its MIG seats (no device files, no CUDA_VISIBLE_DEVICES)."""
    from gpuseat.engines.host.machine import Machine
    from gpuseat.engines.runner import Runner

    xml = (
        f"<nvidia_smi_log><gpu><uuid>{GPU_UUID}</uuid><minor_number>3</minor_number><mig_devices><mig_device>"
        "<index>0</index><gpu_instance_id>7</gpu_instance_id><compute_instance_id>0</compute_instance_id>"
        "</mig_device></mig_devices></gpu></nvidia_smi_log>"
    )
    (tmp_path / "L.txt").write_text(OLD_LISTING)
    (tmp_path / "q.xml").write_text(xml)
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\n[ "$1" = -L ] && exec cat {tmp_path}/L.txt\nexec cat {tmp_path}/q.xml\n')
    smi.chmod(0o755)
    found = Machine(Runner()).discover(str(smi))
    mig = found[f"MIG-{GPU_UUID}/7/0"]
    assert (mig.minor, mig.gi, mig.ci, mig.profile) == (3, 7, 0, "1g.5gb")
    assert found[GPU_UUID].split


@pytest.mark.parametrize("field", ["ssh_host", "jump_host"])
def test_a_host_setting_stored_before_the_rule_says_where_to_set_it(field: str) -> None:
    """An older gpuseat stored ``ssh_host = "node-"``; the host engine's settings, read on every plan, refused
    it as ``ssh_host: ... not a host name`` without saying it is an engine setting or how to change it."""
    with pytest.raises(InputError) as info:
        validate_settings("host", {field: "node-"})
    assert info.value.where == f"host setting {field}"
    assert f"`gpuseat engines settings host {field}=VALUE`" in str(info.value.fix)
