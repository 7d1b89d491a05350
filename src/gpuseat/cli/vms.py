"""CLI for ``gpuseat vms up|down|status``: parse flags, call :mod:`gpuseat.services.vms`, print."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpuseat.cli._output import FORMAT_OPTION, Format, print_csv, print_json, print_table, stderr_console

if TYPE_CHECKING:
    from gpuseat.core.carve import Layout
    from gpuseat.services.vms import VmReport

vms_app = typer.Typer(help="Seats as VMs through libvirt: define, start, stop and list one VM per seat.",
                      no_args_is_help=True)  # fmt: skip


class VmMode(StrEnum):
    """How the seats' GPUs reach the VMs (the carve mode the seats were added with)."""

    passthrough = "passthrough"
    vgpu = "vgpu"


class VirtType(StrEnum):
    """libvirt domain type."""

    kvm = "kvm"
    qemu = "qemu"


COURSE = typer.Option(None, "--course", help="Course key (default: the only course).")
CONNECT = typer.Option("qemu:///system", "--connect", "-c", help="libvirt URI, e.g. qemu+ssh://root@host/system.")
DB = typer.Option(None, "--db", help="Course database URL (default: GPUSEAT_DB_URL or the data dir).")
INVENTORY = typer.Option(None, "--inventory", help="The server inventory TOML the seats were added from.")
MODE = typer.Option(VmMode.passthrough, "--mode", help="The carve mode the seats were added with.")
COLUMNS = ["seat", "domain", "participant", "action", "state", "connect", "detail"]
TABLE_COLUMNS = ["seat", "participant", "action", "state", "connect", "detail"]  # domain: in the title


def _layout(inventory: Path | None, mode: VmMode) -> Layout | None:
    """The carve layout of the server (the same carve call ``seats add --inventory`` makes)."""
    if inventory is None:
        return None
    from gpuseat.catalog.bundle import load_catalog
    from gpuseat.services.carving import carve_inventory

    return carve_inventory(inventory, load_catalog(), mode=mode.value)


def _print(report: VmReport, fmt: Format, title: str) -> None:
    if fmt is Format.json:
        print_json(report.to_dict())
        return
    rows = [r.to_dict() for r in report.seats]
    if fmt is Format.csv:
        print_csv(rows, COLUMNS)
        return
    err = stderr_console()
    for note in report.notes:
        err.print(f"note: {note}", markup=False, highlight=False)
    title = f"{title} · course {report.course} (domains gpuseat-{report.course}-SEAT) · {report.connect}"
    print_table(rows, TABLE_COLUMNS, title=title)


@vms_app.command("up")
def up(
    course: str | None = COURSE,
    connect: str = CONNECT,
    image: str | None = typer.Option(None, "--image", help="Base image on the libvirt host (qcow2 cloud image)."),
    image_format: str = typer.Option("qcow2", "--image-format", help="Format of --image: qcow2 or raw."),
    inventory: Path | None = INVENTORY,
    mode: VmMode = MODE,
    vcpus: int = typer.Option(4, "--vcpus", help="vCPUs per VM."),
    memory_mib: int = typer.Option(16384, "--memory-mib", help="Memory per VM, MiB."),
    disk_gb: int = typer.Option(40, "--disk-gb", help="Size of each VM's disk (overlay), GB."),
    pool: str = typer.Option("gpuseat", "--pool", help="libvirt storage pool for disks and seeds."),
    pool_dir: str = typer.Option("/var/lib/libvirt/images/gpuseat", "--pool-dir", help="Folder of a new --pool."),
    network: str = typer.Option("default", "--network", help="libvirt network of the VMs' NIC."),
    virt_type: VirtType = typer.Option(VirtType.kvm, "--virt-type", help="kvm, or qemu (TCG: no KVM, slow)."),
    no_gpu: bool = typer.Option(False, "--no-gpu", help="Define the VMs without their GPUs (try the image first)."),
    no_start: bool = typer.Option(False, "--no-start", help="Define only; do not start the VMs."),
    doctor_root: Path | None = typer.Option(
        None, "--doctor-root", help="Pre-flight from an extracted `gpuseat doctor --capture` (for remote hosts)."
    ),
    skip_doctor: bool = typer.Option(False, "--skip-doctor", help="Do not run the doctor's checks first."),
    probe_key: Path | None = typer.Option(
        None, "--probe-key", help="Probe key (KEY, KEY.pub): its .pub may log in as each seat's user (seats check)."
    ),
    db: str | None = DB,
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Define and start one VM per seat (idempotent: re-running fixes drift and changes nothing else)."""
    from gpuseat.services import vms
    from gpuseat.services.courses import open_store
    from gpuseat.services.vms_engine import probe_public_key

    probe_keys = (probe_public_key(probe_key, where="--probe-key"),) if probe_key is not None else ()
    options = vms.VmOptions(
        connect=connect, image=image, image_format=image_format, disk_gb=disk_gb, pool=pool, pool_dir=pool_dir,
        network=network, vcpus=vcpus, memory_mib=memory_mib, virt_type=virt_type.value, gpu=not no_gpu,
        start=not no_start, doctor_root=doctor_root, preflight=not skip_doctor, probe_keys=probe_keys,
    )  # fmt: skip
    layout = _layout(inventory, mode)
    with open_store(db) as store:
        report = vms.up(store, course, layout, options)
    _print(report, fmt, "vms up")
    raise typer.Exit(1 if report.failed else 0)


@vms_app.command("down")
def down(
    course: str | None = COURSE,
    connect: str = CONNECT,
    delete_disks: bool = typer.Option(False, "--delete-disks", help="Also delete the VMs' disks (their work)."),
    pool: str = typer.Option("gpuseat", "--pool", help="libvirt storage pool of the disks and seeds."),
    db: str | None = DB,
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Stop and remove the course's VMs (only gpuseat's) and their seeds; disks stay unless --delete-disks.

    ``--delete-disks`` also finds the disks a plain ``down`` kept, from the course's seats in the store.
    """
    from gpuseat.services import vms
    from gpuseat.services.courses import open_store

    with open_store(db) as store:
        report = vms.down(store, course, connect, delete_disks=delete_disks, pool=pool)
    _print(report, fmt, "vms down")


@vms_app.command("status")
def status(
    course: str | None = COURSE,
    connect: str = CONNECT,
    db: str | None = DB,
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Each seat's VM, its state, participant and how to connect (recorded in the course store)."""
    from gpuseat.services import vms
    from gpuseat.services.courses import open_store

    with open_store(db) as store:
        report = vms.status(store, course, connect)
    _print(report, fmt, "vms status")


def register(app: typer.Typer) -> None:
    """Add ``gpuseat vms``."""
    app.add_typer(vms_app, name="vms")
