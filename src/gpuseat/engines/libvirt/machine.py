"""The machine side of the libvirt engine: what one seat's VM is made of, and the libvirt calls that
make, reimage, stop and remove it.

A seat's VM is a domain rendered by carve's libvirt renderer (one source) with gpuseat's owner
metadata, a qcow2 overlay of the organizer's base image (one per holder: a new holder never boots
the previous holder's disk) and a NoCloud seed carrying the holder's login and key. The engine
(:mod:`gpuseat.engines.libvirt.engine`) decides *what* must change; this module does it, each call a
no-op when the machine already is so. Domains without gpuseat's metadata are never touched.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

from gpuseat.core.carve import Layout, Slice
from gpuseat.engines.libvirt import names
from gpuseat.engines.libvirt.domain import owner
from gpuseat.engines.libvirt.names import VirtType
from gpuseat.engines.libvirt.seed import Guest, meta_data, seed_iso, user_data
from gpuseat.errors import EngineError, InputError
from gpuseat.render.base import RenderOptions, slice_uuid
from gpuseat.render.libvirt import DirectBoot, Owner, domain_xml

if TYPE_CHECKING:
    from gpuseat.doctor import Report
    from gpuseat.engines.libvirt.libvirt_host import LibvirtHost

DEFAULT_POOL_DIR = "/var/lib/libvirt/images/gpuseat"
NO_PARTICIPANT_USER = "gpuseat"  # the login of a VM whose seat nobody holds (no key: nobody gets in)


@dataclass(frozen=True)
class VmOptions:
    """How the VMs are made: where (``connect``), from what image, how big, with or without their GPUs."""

    connect: str = "qemu:///system"
    image: str | None = None
    image_format: str = "qcow2"
    disk_gb: int = 40
    pool: str = "gpuseat"
    pool_dir: str | None = DEFAULT_POOL_DIR
    network: str | None = "default"
    vcpus: int = 4
    memory_mib: int = 16384
    virt_type: VirtType = "kvm"
    gpu: bool = True
    start: bool = True
    serial_dir: str | None = None
    boot: DirectBoot | None = None
    doctor_root: Path | None = None
    preflight: bool = True
    packages: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    probe_keys: tuple[str, ...] = ()  # the organiser's probe key(s), authorised for the seat's login

    def __post_init__(self) -> None:
        if not 0 < self.vcpus <= 1024:
            raise InputError(f"{self.vcpus} vCPUs", where="vcpus", fix="give 1 to 1024")
        if not 64 <= self.memory_mib <= 16 * 1024 * 1024:
            raise InputError(f"{self.memory_mib} MiB", where="memory_mib", fix="give 64 MiB to 16 TiB")
        if not 1 <= self.disk_gb <= 65536:
            raise InputError(f"{self.disk_gb} GB", where="disk_gb", fix="give 1 to 65536")
        if self.image_format not in ("qcow2", "raw"):
            raise InputError(f"'{self.image_format}'", where="image_format", fix="qcow2 or raw")
        names.key(self.pool, where="pool")
        if self.network is not None:
            names.key(self.network, where="network")
        for flag, value in (("image", self.image), ("pool_dir", self.pool_dir), ("serial_dir", self.serial_dir)):
            if value is not None and not plain_path(value):
                raise InputError(f"'{value}' is not an absolute path", where=flag, fix="give a path starting with /")


def plain_path(value: str) -> bool:
    """An absolute path without control characters (it goes into domain and volume XML)."""
    return value.startswith("/") and not any(ord(c) < 32 or ord(c) == 127 for c in value)


@dataclass(frozen=True)
class VmSeat:
    """One seat to run as a VM: its carve seat (the GPU) and who holds it."""

    key: str
    seat: Slice
    participant: str | None = None
    user: str = NO_PARTICIPANT_USER
    ssh_keys: tuple[str, ...] = ()


# -- pure parts ------------------------------------------------------------------------------------


def guest(course: str, vm: VmSeat, options: VmOptions) -> Guest:
    """What the seed tells the guest; the instance id changes whenever the login or set-up changes."""
    name = names.domain_name(course, vm.key)
    keys = (*vm.ssh_keys, *options.probe_keys)
    content = "\n".join((vm.user, *keys, *options.packages, "\x00", *options.commands))
    digest = hashlib.sha256(content.encode()).hexdigest()[:12]
    return Guest(
        hostname=vm.key,
        instance_id=f"{name}-{digest}",
        user=vm.user,
        ssh_keys=keys,
        packages=options.packages,
        commands=options.commands,
    )


def seed_prefix(domain: str) -> str:
    """Seed volumes are ``<domain>-cidata-<hash>.iso``: a new login or set-up is a new volume."""
    return f"{domain}-cidata-"


def seed_hash(seed: Guest) -> str:
    """12 hex digits of the seed's content (its user-data and meta-data)."""
    return hashlib.sha256((user_data(seed) + "\x00" + meta_data(seed)).encode()).hexdigest()[:12]


def seat_mac(course: str, seat: str) -> str:
    """The seat's NIC address, derived from course and seat: the same on every redefinition and hand-over
    (so DHCP gives the VM the same address), in QEMU's locally administered range ``52:54:00``."""
    digest = hashlib.sha256(f"gpuseat/{course}/{seat}".encode()).digest()
    return "52:54:00:" + ":".join(f"{b:02x}" for b in digest[:3])


_PTY_SERIAL = "    <serial type='pty'>\n      <target port='0'/>\n    </serial>\n"
_NIC = "    <interface type='network'>\n"


def wanted_xml(
    course: str, layout: Layout, vm: VmSeat, options: VmOptions, *, disk: str | None, seed: str | None
) -> str:
    """The domain gpuseat wants for this seat, from carve's renderer.

    Every domain gets a serial console (``virsh console NAME`` shows a failed boot), its output also
    logged to ``serial_dir/NAME.log`` when given, and a NIC with the seat's own MAC (:func:`seat_mac`).
    """
    name = names.domain_name(course, vm.key)
    xml = _rendered(course, layout, vm, options, disk=disk, seed=seed)
    if options.serial_dir:
        log = escape(f"{options.serial_dir.rstrip('/')}/{name}.log", {"'": "&apos;"})
        serial = (
            f"    <serial type='pty'>\n      <log file='{log}' append='on'/>\n      <target port='0'/>\n    </serial>\n"
        )
        if _PTY_SERIAL not in xml:
            raise EngineError("the renderer's serial console changed", where="vms", fix="report this as a bug")
        xml = xml.replace(_PTY_SERIAL, serial)
    if options.network is not None:
        if _NIC not in xml:
            raise EngineError("the renderer's network interface changed", where="vms", fix="report this as a bug")
        xml = xml.replace(_NIC, f"{_NIC}      <mac address='{seat_mac(course, vm.key)}'/>\n")
    return xml


def _rendered(
    course: str, layout: Layout, vm: VmSeat, options: VmOptions, *, disk: str | None, seed: str | None
) -> str:
    name = names.domain_name(course, vm.key)
    return domain_xml(
        layout,
        vm.seat,
        RenderOptions(vcpus=options.vcpus),
        name=name,
        uuid=slice_uuid(layout, vm.seat, f"vm/{course}"),
        memory_mib=options.memory_mib,
        virt_type=options.virt_type,
        owner=Owner(course=course, seat=vm.key, participant=vm.participant),
        gpu=options.gpu,
        disk=disk,
        cidata=seed,
        network=options.network,
        boot=options.boot,
        pty_console=True,
    )


def jump_of(remote_host: str | None, remote_user: str | None) -> str | None:
    """The ``ssh -J`` target of a remote ``--connect`` host: an IPv6 one (``qemu+ssh://[2001:db8::1]/system``)
    in brackets, as ``-J`` and ``ProxyJump`` read it (a bare one is host ``2001``)."""
    if remote_host is None:
        return None
    host = f"[{remote_host}]" if ":" in remote_host else remote_host
    return f"{remote_user}@{host}" if remote_user else host


def connect_string(user: str, ip: str, remote_host: str | None, remote_user: str | None) -> str:
    """``ssh user@ip``, or through the libvirt host as a jump host for a remote ``--connect`` (quoted where
    a shell would glob it: zsh stops at an unmatched ``[…]``)."""
    from gpuseat.core.delivery import ssh_command

    return ssh_command(ip, user, None, jump_of(remote_host, remote_user))


def preflight_targets(seats: Iterable[VmSeat], options: VmOptions) -> list[str]:
    """The doctor targets the seats need: ``passthrough`` and/or ``vgpu`` (none without GPUs)."""
    if not options.gpu:
        return []
    modes = {vm.seat.mode for vm in seats}
    return [t for t in ("passthrough", "vgpu") if t in modes]


def preflight_failures(report: Report, target: str) -> list[str]:
    """The doctor's failed checks as lines: what it saw and the fix."""
    lines = []
    for check in report.checks:
        if check.status == "fail":
            gpu = f" (GPU {check.gpu})" if check.gpu else ""
            lines.append(
                f"[{target}] {check.id}{gpu}: {check.evidence}" + (f" — fix: {check.fix}" if check.fix else "")
            )
    return lines


def disk_prefix(domain: str) -> str:
    """Disk volumes are ``<domain>-disk-<holder>.qcow2``: each holder of the seat gets their own overlay."""
    return f"{domain}-disk-"


def disk_name(domain: str, participant: str | None) -> str:
    """The overlay of the seat's current holder (a hash of the participant key: no name in file names)."""
    tag = hashlib.sha256(f"gpuseat-holder/{participant or ''}".encode()).hexdigest()[:12]
    return f"{disk_prefix(domain)}{tag}.qcow2"


def seed_name(course: str, vm: VmSeat, options: VmOptions) -> str:
    """The seed volume of the seat's holder: its name carries a hash of its content (a new login or
    set-up is a new volume)."""
    return f"{seed_prefix(names.domain_name(course, vm.key))}{seed_hash(guest(course, vm, options))}.iso"


def uri_user(uri: str) -> str | None:
    """The user of a remote libvirt URI (``qemu+ssh://root@host/system`` → ``root``)."""
    return urllib.parse.urlsplit(uri).username


# -- the machine -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OnHost:
    """What one seat has on the libvirt host now (read-only, for the plan)."""

    domain: str
    dom: Any | None  # the libvirt domain (None: not defined)
    participant: str | None  # whose VM it is (gpuseat's metadata)
    running: bool
    state: str  # libvirt's: running, shut off, … ("absent": no domain)
    disks: tuple[str, ...]
    seeds: tuple[str, ...]
    inactive_xml: str | None


def seat_volumes(host: LibvirtHost, pool: Any, domain: str) -> tuple[list[str], list[str]]:
    """The seat's disk volumes (each holder's overlay, and a pre-0.x ``<domain>.qcow2``) and seed volumes."""
    if pool is None:
        return [], []
    disks = host.volume_names(pool, disk_prefix(domain))
    if host.volume(pool, f"{domain}.qcow2") is not None:
        disks.append(f"{domain}.qcow2")
    return disks, host.volume_names(pool, seed_prefix(domain))


def read_seat(host: LibvirtHost, pool: Any, course: str, seat: str) -> OnHost:
    """The seat's domain (refused when the name is taken by a domain gpuseat did not make for this
    seat), its state, whose it is, and its disk and seed volumes."""
    name = names.domain_name(course, seat)
    dom = host.lookup(name)
    xml = host.inactive_xml(dom) if dom is not None else None
    who = owner(xml) if xml is not None else None
    if dom is not None and (who is None or who.course != course or who.seat != seat):
        whose = "has no gpuseat metadata" if who is None else f"belongs to course {who.course} seat {who.seat}"
        raise EngineError(
            f"a domain named {name} exists and {whose}; gpuseat leaves it alone",
            where=f"seat {seat} on {host.uri}",
            fix=f"rename or remove that domain yourself (virsh domrename {name} NEW), then apply again",
        )
    disks, seeds = seat_volumes(host, pool, name)
    running = bool(dom is not None and dom.isActive())
    state = host.state(dom) if dom is not None else "absent"
    return OnHost(name, dom, who.participant if who else None, running, state, tuple(disks), tuple(seeds), xml)


def volume_path(host: LibvirtHost, pool: Any, name: str, pool_dir: str | None) -> str:
    """Where a volume of the pool is (or will be): its path, else the pool's folder + name."""
    if pool is not None:
        vol = host.volume(pool, name)
        if vol is not None:
            return str(vol.path())
        return f"{host.pool_path(pool).rstrip('/')}/{name}"
    return f"{(pool_dir or '').rstrip('/')}/{name}"


def run_preflight(
    host: LibvirtHost, seats: Iterable[VmSeat], options: VmOptions
) -> tuple[list[dict[str, Any]], list[str]]:
    """Run the doctor for what the seats need; raise with its findings when a seat cannot work."""
    targets = preflight_targets(seats, options)
    notes: list[str] = []
    if not targets or not options.preflight:
        return [], notes
    root = options.doctor_root
    if root is None:
        if host.is_test_driver:
            notes.append("pre-flight skipped: libvirt's test driver has no real host to check")
            return [], notes
        if host.remote_host is not None:
            notes.append(
                f"pre-flight skipped: {host.remote_host} is remote; run `gpuseat doctor --capture host.tar.gz` there, "
                "extract it and set the libvirt setting doctor_root=DIR"
            )
            return [], notes
        root = Path("/")
    from gpuseat.doctor import diagnose

    checks: list[dict[str, Any]] = []
    failures: list[str] = []
    for target in targets:
        report, _ = diagnose(root, target)  # type: ignore[arg-type]
        checks += [{"target": target, **c.as_dict()} for c in report.checks]
        failures += preflight_failures(report, target)
    if failures:
        raise EngineError(
            f"the host cannot run these seats' VMs yet ({len(failures)} doctor check(s) failed; nothing was defined):\n"
            + "\n".join(f"  {line}" for line in failures),
            where=f"pre-flight on {host.uri}" + (f" (doctor root {root})" if root != Path("/") else ""),
            fix="apply the fixes above, reboot if they say so, and apply again; "
            "`gpuseat doctor --for passthrough` shows the full report",
        )
    return checks, notes


@dataclass(frozen=True)
class Made:
    """What :func:`ensure_vm` left on the host: the domain's disk and seed paths, whether it runs, and
    whether a running VM still waits for its new definition (it applies at the next start)."""

    disk: str | None
    seed: str
    running: bool
    pending: bool
    uploaded: bool


def ensure_vm(
    host: LibvirtHost, course: str, layout: Layout, vm: VmSeat, options: VmOptions, *, restart: bool = False
) -> Made:
    """The seat's VM for its holder: their overlay (kept when it exists: it holds their work), their
    seed, the domain (re)defined when it differs and started; ``restart``: a running VM is powered off
    and started again so it boots with the new seed. Every other disk and seed of the seat is deleted
    first when the VM is not this holder's (a hand-over)."""
    name = names.domain_name(course, vm.key)
    pool = host.pool(options.pool, options.pool_dir)
    here = read_seat(host, pool, course, vm.key)
    wanted_disk = disk_name(name, vm.participant)
    if here.dom is not None and here.participant == vm.participant and f"{name}.qcow2" in here.disks:
        wanted_disk = f"{name}.qcow2"  # adopt a disk made before per-holder overlays, same holder
    foreign = here.dom is not None and here.participant != vm.participant
    if (foreign or restart) and here.dom is not None:
        host.stop(here.dom)
    if foreign:  # never boot the new holder on anything the previous one left
        for d in here.disks:
            if d != wanted_disk:
                host.delete_volume(pool, d)
    disk = None
    if options.image is not None:
        disk = host.overlay(pool, wanted_disk, options.image, options.image_format, options.disk_gb, vm.key)
    seed_guest = guest(course, vm, options)
    wanted_seed = seed_name(course, vm, options)
    seed, uploaded = host.upload(pool, wanted_seed, seed_iso(seed_guest), vm.key)
    xml = wanted_xml(course, layout, vm, options, disk=disk, seed=seed)
    dom = here.dom
    from gpuseat.engines.libvirt.domain import drift

    pending = False
    if dom is None or drift(xml, host.inactive_xml(dom)):
        pending = dom is not None and bool(dom.isActive())
        dom = host.define(xml, vm.key)
    for stale in host.volume_names(pool, seed_prefix(name)):
        if stale != wanted_seed and not pending:
            host.delete_volume(pool, stale)  # the seat's earlier seed (another login or set-up)
    if options.start and not dom.isActive():
        host.start(dom, vm.key)
    return Made(disk, seed, bool(dom.isActive()), pending, uploaded)


def stop_vm(host: LibvirtHost, course: str, seat: str) -> bool:
    """Power the seat's VM off at once (its holder's sessions end); whether it was running."""
    dom = host.lookup(names.domain_name(course, seat))
    if dom is None or not dom.isActive():
        return False
    host.stop(dom)
    return True


def remove_volumes(host: LibvirtHost, pool_name: str, names_: Iterable[str]) -> list[str]:
    """Delete these volumes of the pool (those that exist); the names deleted."""
    try:
        pool = host.pool(pool_name, None)
    except InputError:
        return []
    return [n for n in names_ if host.delete_volume(pool, n)]


def remove_vm(host: LibvirtHost, course: str, seat: str, pool_name: str) -> list[str]:
    """Stop and undefine the seat's gpuseat domain and delete its disks and seeds; what went."""
    name = names.domain_name(course, seat)
    gone = []
    dom = host.lookup(name)
    if dom is not None:
        who = owner(host.inactive_xml(dom))
        if who is not None and who.course == course and who.seat == seat:
            host.stop(dom)
            host.undefine(dom)
            gone.append(f"domain {name}")
    try:
        pool = host.pool(pool_name, None)
    except InputError:
        return gone
    disks, seeds = seat_volumes(host, pool, name)
    gone += [v for v in (*disks, *seeds) if host.delete_volume(pool, v)]
    return gone


def address(host: LibvirtHost, dom: Any) -> str | None:
    """The running guest's first IPv4 address (DHCP lease, then guest agent), or None."""
    ips = host.addresses(dom) if dom is not None else []
    return ips[0].ip if ips else None
