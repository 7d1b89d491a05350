"""CLI for ``gpuseat vms up|down|status``: the libvirt engine, one VM per seat.

``up`` is ``gpuseat apply --engine libvirt``: its flags are stored as the course's libvirt settings
first (so ``apply`` and the agent use them too), then the host is made to match the course. ``down``
takes every holder's VM away (stopped, seeds with their logins deleted; disks kept). ``status`` reads
libvirt and the store and changes nothing.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import click
import typer

from gpuseat.cli._options import Commands, CourseOption, DbOption
from gpuseat.cli._output import Format, FormatOption, print_json, print_rows
from gpuseat.engines.libvirt.names import VIRT_TYPES

vms_app = typer.Typer(help="Seats as VMs through libvirt (the libvirt engine): one VM per seat holder.",
                      no_args_is_help=True, cls=Commands)  # fmt: skip


class VmMode(StrEnum):
    """How the seats' GPUs reach the VMs (the carve mode the seats were added with)."""

    passthrough = "passthrough"
    vgpu = "vgpu"


CONNECT = typer.Option(None, "--connect", "-c", help="libvirt URI, e.g. qemu+ssh://root@host/system.")
VM_STATUS_COLUMNS = ("seat", "participant", "domain", "state", "vm_for", "connect")


@vms_app.command("up")
def up(
    course: CourseOption = None,
    connect: str | None = CONNECT,
    image: str | None = typer.Option(None, "--image", help="Base image on the libvirt host (qcow2 cloud image)."),
    image_format: str | None = typer.Option(None, "--image-format", help="Format of --image: qcow2 or raw."),
    inventory: Path | None = typer.Option(None, "--inventory", help="The server inventory the seats came from."),
    mode: VmMode | None = typer.Option(None, "--mode", help="The carve mode the seats were added with."),
    vcpus: int | None = typer.Option(None, "--vcpus", help="vCPUs per VM (default 4)."),
    memory_mib: int | None = typer.Option(None, "--memory-mib", help="Memory per VM, MiB (default 16384)."),
    disk_gb: int | None = typer.Option(None, "--disk-gb", help="Size of each holder's overlay, GB (default 40)."),
    pool: str | None = typer.Option(None, "--pool", help="libvirt storage pool for disks and seeds."),
    pool_dir: str | None = typer.Option(None, "--pool-dir", help="Folder of a new --pool."),
    network: str | None = typer.Option(None, "--network", help="libvirt network of the VMs' NIC ('none': no NIC)."),
    virt_type: str | None = typer.Option(
        None, "--virt-type", click_type=click.Choice(VIRT_TYPES), help="kvm, or qemu (TCG: no KVM, slow)."
    ),
    no_gpu: bool = typer.Option(False, "--no-gpu", help="Define the VMs without their GPUs (try the image first)."),
    no_start: bool = typer.Option(False, "--no-start", help="Define only; do not start the VMs."),
    doctor_root: Path | None = typer.Option(
        None, "--doctor-root", help="Pre-flight from an extracted `gpuseat doctor --capture` (for remote hosts)."
    ),
    skip_doctor: bool = typer.Option(False, "--skip-doctor", help="Do not run the doctor's checks first."),
    probe_key: Path | None = typer.Option(
        None, "--probe-key", help="Probe key (KEY, KEY.pub): its .pub may log in as each seat's user (seats check)."
    ),
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Same as ``gpuseat apply --engine libvirt``: the flags are stored as the course's libvirt settings
    first, then each holder's VM is made, handed over or stopped to match the course."""
    from gpuseat.engines.libvirt.engine import probe_public_key

    if probe_key is not None:
        probe_public_key(probe_key.absolute(), where="--probe-key")
    given = {
        "connect": connect, "image": image, "image_format": image_format, "pool": pool, "pool_dir": pool_dir,
        "network": network, "vcpus": vcpus, "memory_mib": memory_mib, "disk_gb": disk_gb,
        "inventory": str(inventory.absolute()) if inventory else None, "mode": mode.value if mode else None,
        "virt_type": virt_type,
        "doctor_root": str(doctor_root.absolute()) if doctor_root else None,
        "probe_key": str(probe_key.absolute()) if probe_key else None,
        "gpu": False if no_gpu else None, "start": False if no_start else None,
        "preflight": False if skip_doctor else None,
    }  # fmt: skip
    _apply(course, db, fmt, {k: v for k, v in given.items() if v is not None}, revoke_all=False, where="gpuseat vms up")


@vms_app.command("down")
def down(course: CourseOption = None, db: DbOption = None, fmt: FormatOption = Format.table) -> None:
    """Course end on this libvirt host: every VM stops and the seeds with the holders' logins are deleted.

    Disks (the participants' work) stay; ``gpuseat course delete`` removes the domains and disks.
    """
    _apply(course, db, fmt, {}, revoke_all=True, where="gpuseat vms down")


@vms_app.command("status")
def vms_status(course: CourseOption = None, db: DbOption = None, fmt: FormatOption = Format.table) -> None:
    """Each libvirt seat: its holder, its VM's state and whose login the VM carries, and the stored
    way in (shown only when it was made for the holder). Reads libvirt and the store; changes nothing."""
    from gpuseat.engines import registry
    from gpuseat.engines.apply import course_state, settings_for
    from gpuseat.engines.libvirt import machine
    from gpuseat.engines.runner import Runner
    from gpuseat.store import open_store

    with open_store(db, create=False) as store:
        key = store.courses.get_course(course).key
        engine = registry.build("libvirt", store, key, settings=settings_for(store, key, "libvirt", None),
                                runner=Runner())  # fmt: skip
        state = course_state(store, key)
        running = {h.seat: h for h in engine.observe(state)}
        lv = engine.libvirt  # type: ignore[attr-defined]
        rows = []
        for seat in (s for s in state.seats if s.engine == "libvirt"):
            here = machine.read_seat(lv, None, key, seat.key)
            way = engine.connect(seat)
            rows.append(
                {
                    "seat": seat.key,
                    "participant": seat.participant,
                    "domain": here.domain,
                    "state": here.state,
                    "vm_for": running[seat.key].participant if seat.key in running else here.participant,
                    "connect": (way.command if way else None) or "",
                }
            )
    if fmt is Format.json:
        print_json({"course": key, "connect": lv.uri, "seats": rows})
        return
    print_rows(rows, VM_STATUS_COLUMNS, fmt, title=f"vms status · course {key} · {lv.uri}")


def _apply(course: str | None, db: str | None, fmt: Format, settings: dict[str, object], *, revoke_all: bool,
           where: str) -> None:  # fmt: skip
    from gpuseat.cli.apply import apply_engine

    apply_engine(
        course,
        db,
        "libvirt",
        settings,
        fmt,
        where=where,
        missing="course {key!r} has no seats on the libvirt engine",
        fix="add them: gpuseat seats add --inventory SERVER.toml --mode passthrough --engine libvirt",
        revoke_all=revoke_all,
    )


def register(app: typer.Typer) -> None:
    """Add ``gpuseat vms``."""
    app.add_typer(vms_app, name="vms")
