"""Seats as VMs: ``gpuseat vms up|down|status`` through libvirt, for the CLI and the portal alike.

``up`` makes one domain per seat of the course's carve layout: the domain XML comes from carve's
libvirt renderer (one source), with gpuseat's owner metadata, a qcow2 overlay on the organizer's base
image and a NoCloud seed carrying the participant's login. It is idempotent: what is right stays, what
drifted is redefined, domains without gpuseat's metadata are never touched. Before anything is
defined, the doctor's passthrough/vGPU checks run for the host and stop ``up`` with their fixes.
The store gets each seat's engine state and, once the guest has an address, its connect string.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from xml.sax.saxutils import escape

from gpuseat.core.carve import Layout, Slice
from gpuseat.errors import EngineError, InputError
from gpuseat.render.base import RenderOptions, slice_uuid
from gpuseat.render.libvirt import DirectBoot, Owner, domain_xml
from gpuseat.vms import names
from gpuseat.vms.domain import drift
from gpuseat.vms.seed import Guest, meta_data, seed_iso, user_data

if TYPE_CHECKING:
    from gpuseat.doctor import Report
    from gpuseat.services.courses import CourseStore
    from gpuseat.vms.libvirt_host import LibvirtHost

VirtType = Literal["kvm", "qemu"]
DEFAULT_POOL_DIR = "/var/lib/libvirt/images/gpuseat"
NO_PARTICIPANT_USER = "gpuseat"  # the login of a VM whose seat nobody holds yet (no key: nobody gets in)


class _AsDict:
    """One ``to_dict()`` per result type (``--format json`` and the portal's API)."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data."""
        return asdict(self)  # type: ignore[call-overload]


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
            raise InputError(f"{self.vcpus} vCPUs", where="--vcpus", fix="give 1 to 1024")
        if not 64 <= self.memory_mib <= 16 * 1024 * 1024:
            raise InputError(f"{self.memory_mib} MiB", where="--memory-mib", fix="give 64 MiB to 16 TiB")
        if not 1 <= self.disk_gb <= 65536:
            raise InputError(f"{self.disk_gb} GB", where="--disk-gb", fix="give 1 to 65536")
        if self.image_format not in ("qcow2", "raw"):
            raise InputError(f"'{self.image_format}'", where="--image-format", fix="qcow2 or raw")
        names.key(self.pool, where="--pool")
        if self.network is not None:
            names.key(self.network, where="--network")
        for flag, value in (("--image", self.image), ("--pool-dir", self.pool_dir), ("--serial-dir", self.serial_dir)):
            if value is not None and (not value.startswith("/") or "\x00" in value or "\n" in value):
                raise InputError(f"'{value}' is not an absolute path", where=flag, fix="give a path starting with /")


@dataclass(frozen=True)
class VmSeat:
    """One seat to run as a VM: its carve seat (the GPU) and who holds it."""

    key: str
    seat: Slice
    participant: str | None = None
    user: str = NO_PARTICIPANT_USER
    ssh_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Login:
    """Who holds a seat and how they log in to its VM (from the store's assignment and roster)."""

    participant: str | None = None
    user: str = NO_PARTICIPANT_USER
    ssh_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class SeatResult(_AsDict):
    """What ``up``/``down``/``status`` did or saw for one seat."""

    seat: str
    domain: str
    participant: str | None
    action: str  # defined | redefined | unchanged | started | failed | removed | absent | seen
    state: str  # libvirt's: running, shut off, … ("absent": no domain)
    detail: str = ""
    connect: str | None = None
    disk: str | None = None
    seed: str | None = None


@dataclass(frozen=True)
class VmReport(_AsDict):
    """The result of one command: per-seat results, the pre-flight checks run, notes for the organizer."""

    course: str
    connect: str
    seats: tuple[SeatResult, ...]
    preflight: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def failed(self) -> bool:
        """Whether any seat failed (exit code 1)."""
        return any(s.action == "failed" for s in self.seats)


# -- pure parts ------------------------------------------------------------------------------------


def domain_name(course: str, seat: str) -> str:
    """The libvirt name of a seat's VM."""
    return names.domain_name(course, seat)


def guest(course: str, vm: VmSeat, options: VmOptions) -> Guest:
    """What the seed tells the guest; the instance id changes whenever the login or set-up changes."""
    name = domain_name(course, vm.key)
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
    name = domain_name(course, vm.key)
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
    name = domain_name(course, vm.key)
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


def connect_string(user: str, ip: str, remote_host: str | None, remote_user: str | None) -> str:
    """``ssh user@ip``, or through the libvirt host as a jump host for a remote ``--connect``."""
    if remote_host is None:
        return f"ssh {user}@{ip}"
    jump = f"{remote_user}@{remote_host}" if remote_user else remote_host
    return f"ssh -J {jump} {user}@{ip}"


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


# -- libvirt ---------------------------------------------------------------------------------------


def _open(uri: str) -> LibvirtHost:
    from gpuseat.vms.libvirt_host import LibvirtHost

    return LibvirtHost(uri)


def _run_preflight(host: LibvirtHost, seats: Sequence[VmSeat], options: VmOptions) -> tuple[list[dict], list[str]]:
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
                "extract it and pass --doctor-root DIR"
            )
            return [], notes
        root = Path("/")
    from gpuseat.doctor import diagnose

    checks: list[dict] = []
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
            fix="apply the fixes above, reboot if they say so, and re-run `gpuseat vms up`; "
            "`gpuseat doctor --for passthrough` shows the full report",
        )
    return checks, notes


def _conflicts(host: LibvirtHost, course: str, seats: Sequence[VmSeat]) -> None:
    """Refuse, before any change, a domain name that is taken by a domain gpuseat did not make for this seat."""
    from gpuseat.vms.domain import owner

    for vm in seats:
        name = domain_name(course, vm.key)
        dom = host.lookup(name)
        if dom is None:
            continue
        who = owner(host.inactive_xml(dom))
        if who is None or who.course != course or who.seat != vm.key:
            whose = "has no gpuseat metadata" if who is None else f"belongs to course {who.course} seat {who.seat}"
            raise EngineError(
                f"a domain named {name} exists and {whose}; gpuseat leaves it alone",
                where=f"seat {vm.key} on {host.uri}",
                fix=f"rename or remove that domain yourself (virsh domrename {name} NEW), then re-run vms up",
            )


def up_seats(
    course: str, layout: Layout, seats: Sequence[VmSeat], options: VmOptions, host: LibvirtHost | None = None
) -> VmReport:
    """Define (and start) one VM per seat; idempotent, drift-repairing, foreign domains untouched."""
    names.key(course, where="course key")
    own = host is None
    host = host or _open(options.connect)
    try:
        checks, notes = _run_preflight(host, seats, options)
        _conflicts(host, course, seats)
        pool = host.pool(options.pool, options.pool_dir) if seats else None
        if options.image is None:
            notes.append(
                "no --image: the VMs have no system disk (give a cloud image, e.g. a Debian genericcloud qcow2)"
            )
        results = [_up_one(host, pool, course, layout, vm, options, notes) for vm in seats]
        return VmReport(course=course, connect=host.uri, seats=tuple(results), preflight=tuple(checks),
                        notes=tuple(dict.fromkeys(notes)))  # fmt: skip
    finally:
        if own:
            host.close()


def disk_prefix(domain: str) -> str:
    """Disk volumes are ``<domain>-disk-<holder>.qcow2``: each holder of the seat gets their own overlay."""
    return f"{domain}-disk-"


def disk_name(domain: str, participant: str | None) -> str:
    """The overlay of the seat's current holder (a hash of the participant key: no name in file names)."""
    tag = hashlib.sha256(f"gpuseat-holder/{participant or ''}".encode()).hexdigest()[:12]
    return f"{disk_prefix(domain)}{tag}.qcow2"


def seat_volumes(host: LibvirtHost, pool: Any, domain: str) -> tuple[list[str], list[str]]:
    """The seat's disk volumes (each holder's overlay, and a pre-0.x ``<domain>.qcow2``) and seed volumes."""
    disks = host.volume_names(pool, disk_prefix(domain))
    if host.volume(pool, f"{domain}.qcow2") is not None:
        disks.append(f"{domain}.qcow2")
    return disks, host.volume_names(pool, seed_prefix(domain))


def _up_one(
    host: LibvirtHost, pool: Any, course: str, layout: Layout, vm: VmSeat, options: VmOptions, notes: list[str]
) -> SeatResult:
    name = domain_name(course, vm.key)
    try:
        dom = host.lookup(name)
        previous = None
        if dom is not None:
            from gpuseat.vms.domain import owner

            who = owner(host.inactive_xml(dom))
            previous = who.participant if who else None
        # A hand-over: the VM of another holder (or a disk left from one) must not reach the new holder.
        # The previous holder's session ends now and their overlay is deleted: the new holder boots a
        # fresh overlay of the base image with a new seed (new instance id), so no account, key or file
        # of the previous holder survives (cloud-init alone would keep the old user and its keys).
        wanted_disk = disk_name(name, vm.participant)
        disks, _seeds = seat_volumes(host, pool, name)
        if dom is not None and previous == vm.participant and f"{name}.qcow2" in disks:
            wanted_disk = f"{name}.qcow2"  # adopt a disk made before per-holder overlays, same holder
        stale = [d for d in disks if d != wanted_disk]
        handover = (dom is not None and previous != vm.participant) or bool(stale)
        detail_parts = []
        if handover:
            if dom is not None and dom.isActive():
                host.stop(dom)
            for d in stale:
                host.delete_volume(pool, d)
            detail_parts.append(
                f"handed over from {previous or 'a previous holder'}: fresh disk and seed, previous disk deleted"
                if stale or previous
                else "new holder: fresh disk and seed"
            )
        disk = None
        if options.image is not None:
            disk = host.overlay(pool, wanted_disk, options.image, options.image_format, options.disk_gb, vm.key)
        seed_guest = guest(course, vm, options)
        seed_name = f"{seed_prefix(name)}{seed_hash(seed_guest)}.iso"
        seed, uploaded = host.upload(pool, seed_name, seed_iso(seed_guest), vm.key)
        if not uploaded:
            notes.append("this libvirt driver cannot upload volumes: the seed ISOs are empty (normal for test:///)")
        xml = wanted_xml(course, layout, vm, options, disk=disk, seed=seed)
        if dom is None:
            dom, action, detail = host.define(xml, vm.key), "defined", ""
        else:
            changed = drift(xml, host.inactive_xml(dom))
            if changed:
                dom = host.define(xml, vm.key)
                action, detail = "redefined", "fixed: " + ", ".join(changed)
            else:
                action, detail = "unchanged", ""
        if handover:
            action = "handed-over"
            detail = "; ".join([*detail_parts, *([detail] if detail else [])])
        pending = action == "redefined" and bool(dom.isActive())
        if pending:
            detail += f" (applies at the VM's next start: `virsh shutdown {name}`, then vms up)"
        else:
            for stale_seed in host.volume_names(pool, seed_prefix(name)):
                if stale_seed != seed_name:
                    host.delete_volume(pool, stale_seed)  # the seat's earlier seed (another login or set-up)
        if options.start and not dom.isActive():
            host.start(dom, vm.key)
            action = "started" if action == "unchanged" else f"{action}+started"
        ips = [] if pending else host.addresses(dom)  # pending: the running guest still has the old login
        connect = (
            connect_string(vm.user, ips[0].ip, host.remote_host, _uri_user(host.uri)) if ips and vm.ssh_keys else None
        )
        return SeatResult(vm.key, name, vm.participant, action, host.state(dom), detail, connect, disk, seed)
    except EngineError as exc:
        dom = host.lookup(name)
        state = host.state(dom) if dom is not None else "absent"
        return SeatResult(vm.key, name, vm.participant, "failed", state, exc.message)


def _uri_user(uri: str) -> str | None:
    import urllib.parse

    return urllib.parse.urlsplit(uri).username


def down_seats(
    course: str,
    connect: str,
    *,
    delete_disks: bool = False,
    pool_name: str = "gpuseat",
    host: LibvirtHost | None = None,
    seat_keys: Iterable[str] = (),
    only: Iterable[str] | None = None,
) -> VmReport:
    """Stop and undefine the course's gpuseat domains (only those) and delete their seeds (they hold
    user names and keys); disks stay unless ``delete_disks``.

    ``seat_keys`` (the course's seats from the store) lets a later ``down --delete-disks`` find the
    disks and seeds of seats whose domains an earlier plain ``down`` already removed.
    """
    names.key(course, where="course key")
    own = host is None
    host = host or _open(connect)
    try:
        owned = host.owned(course)
        keys = sorted(set(owned) | {names.key(k, where=f"seat {k}") for k in seat_keys})
        if only is not None:
            wanted = set(only)
            keys = [k for k in keys if k in wanted]
        pool = None
        try:
            pool = host.pool(pool_name, None) if keys else None
        except InputError:
            pool = None
        results = []
        for seat_key in keys:
            dom = owned.get(seat_key)
            name = domain_name(course, seat_key)
            who = None
            if dom is not None:
                who = _participant_of(host, dom)
                host.stop(dom)
                host.undefine(dom)
            detail = []
            if pool is not None:
                disks, seeds = seat_volumes(host, pool, name)
                if [host.delete_volume(pool, v) for v in seeds]:
                    detail.append("seed deleted")
                if delete_disks and [host.delete_volume(pool, v) for v in disks]:
                    detail.append("disk deleted")
                elif not delete_disks and disks:
                    detail.append(f"disk kept ({', '.join(disks)}; --delete-disks removes it)")
            if dom is None and not detail:
                continue  # nothing of this seat on the host
            results.append(
                SeatResult(seat_key, name, who, "removed" if dom else "cleaned", "absent", "; ".join(detail))
            )
        return VmReport(course=course, connect=host.uri, seats=tuple(results))
    finally:
        if own:
            host.close()


def _participant_of(host: LibvirtHost, dom: Any) -> str | None:
    from gpuseat.vms.domain import owner

    who = owner(host.inactive_xml(dom))
    return who.participant if who else None


def status_seats(
    course: str, connect: str, logins: Mapping[str, Login] | None = None, host: LibvirtHost | None = None
) -> VmReport:
    """Each seat's domain, state, participant and address (seats in ``logins`` without a domain: ``absent``)."""
    names.key(course, where="course key")
    logins = logins or {}
    own = host is None
    host = host or _open(connect)
    try:
        owned = host.owned(course)
        results = []
        for key in sorted(set(owned) | set(logins)):
            login = logins.get(key)
            dom = owned.get(key)
            name = domain_name(course, key)
            if dom is None:
                results.append(SeatResult(key, name, login.participant if login else None, "absent", "absent"))
                continue
            ips = host.addresses(dom) if login and login.ssh_keys else []
            connect_to = (
                connect_string(login.user, ips[0].ip, host.remote_host, _uri_user(host.uri)) if login and ips else None
            )
            participant = login.participant if login else _participant_of(host, dom)
            results.append(SeatResult(key, name, participant, "seen", host.state(dom), "", connect_to))
        return VmReport(course=course, connect=host.uri, seats=tuple(results))
    finally:
        if own:
            host.close()


# -- the course store ------------------------------------------------------------------------------


def _vm_seat(kind: str, engine: str) -> bool:
    """Whether a stored seat can be a VM of ``vms`` (a whole GPU, a vGPU or a VM seat, not another engine's)."""
    return kind in ("gpu", "vgpu", "vm") and engine in ("manual", "libvirt")


def course_logins(store: CourseStore, course: str) -> dict[str, Login]:
    """Each seat's holder and login: the participant's unix user (else their key) and SSH key."""
    people = {p.key: p for p in store.participants(course)}
    out: dict[str, Login] = {}
    for seat in store.seats(course):
        p = people.get(seat.participant) if seat.participant else None
        if p is None:
            out[seat.key] = Login()
            continue
        user = names.unix_user(p.unix_user or p.key, where=f"participant {p.key}: unix_user")
        out[seat.key] = Login(p.key, user, (p.ssh_key,) if p.ssh_key else ())
    return out


def course_vm_seats(store: CourseStore, course: str | None, layout: Layout | None) -> tuple[str, list[VmSeat], Any]:
    """The course key, its seats that are in the layout (with their participants), and the course file."""
    view = store.get_course(course)
    seats = store.seats(view.key)
    if layout is None:
        wanted = [s.key for s in seats if _vm_seat(s.kind, s.engine)]
        raise InputError(
            f"gpuseat needs the server's carve layout to give seats {', '.join(wanted) or '(none)'} their GPUs",
            where="--inventory",
            fix="give the inventory the seats were added from: --inventory SERVER.toml --mode passthrough|vgpu",
        )
    by_key = {s.name: s for s in layout.slices}
    logins = course_logins(store, view.key)
    out = []
    for s in seats:
        if s.key in by_key:
            login = logins[s.key]
            key = names.key(s.key, where=f"seat {s.key}")
            out.append(VmSeat(key, by_key[s.key], login.participant, login.user, login.ssh_keys))
    if not out:
        raise InputError(
            f"no seat of course {view.key} is in the layout of {layout.server.name} ({len(layout.slices)} seats)",
            where="--inventory",
            fix="add the seats from this inventory first: gpuseat seats add --inventory FILE --mode MODE",
        )
    return view.key, out, store.course_file(view.key)


def record_results(store: CourseStore, course: str, results: Iterable[SeatResult], released: bool = False) -> None:
    """Write each seat's engine state (and connect string) to the store when it changed."""
    from gpuseat.core.seating import SeatState, transition_error

    current = {s.key: s for s in store.seats(course)}
    state: SeatState
    for r in results:
        seat = current.get(r.seat)
        if seat is None:
            continue
        if released:
            state, reason = "released", "vms down: domain removed"
        elif r.action == "failed":
            state, reason = "failed", r.detail.splitlines()[0][:2000]
        elif r.state == "running":
            state, reason = "running", f"libvirt: {r.state}"
        elif r.state == "absent":
            state, reason = "planned", "no VM defined"
        else:
            state, reason = "requested", f"libvirt: {r.state}"
        connect = r.connect if r.connect is not None else ("" if state != "running" else seat.connect)
        same = (seat.state, seat.engine, seat.engine_ref, seat.connect or "") == (
            state,
            "libvirt",
            r.domain,
            connect or "",
        )
        if same:
            continue
        if transition_error(seat.state, state):  # e.g. released → running: request it again first
            store.set_seat_state(course, r.seat, "requested", reason="vms", engine="libvirt", engine_ref=r.domain)
        store.set_seat_state(
            course,
            r.seat,
            state,
            reason=reason,
            engine="libvirt",
            engine_ref=r.domain,
            connect=connect,
        )


TEST_DRIVER_NOTE = "libvirt's test driver (test://): nothing was recorded in the course store"


def should_record(uri: str, record: bool | None) -> bool:
    """Whether results go to the course store: never by default for libvirt's mock driver (``test://``),
    whose made-up addresses and states must not reach a real course."""
    if record is not None:
        return record
    return uri.split(":", 1)[0].split("+")[0] != "test"


def up(
    store: CourseStore,
    course: str | None,
    layout: Layout | None,
    options: VmOptions,
    host: LibvirtHost | None = None,
    *,
    record: bool | None = None,
) -> VmReport:
    """``gpuseat vms up``: the course's seats from the store, the course file's ``[vm]`` set-up, states back."""
    key, seats, course_file = course_vm_seats(store, course, layout)
    assert layout is not None
    options = replace(options, packages=course_file.vm.packages, commands=course_file.vm.commands)
    report = up_seats(key, layout, seats, options, host)
    if should_record(options.connect if host is None else host.uri, record):
        record_results(store, key, report.seats)
    else:
        report = replace(report, notes=(*report.notes, TEST_DRIVER_NOTE))
    return report


def down(
    store: CourseStore | None,
    course: str | None,
    connect: str,
    *,
    delete_disks: bool = False,
    pool: str = "gpuseat",
    host: LibvirtHost | None = None,
    record: bool | None = None,
) -> VmReport:
    """``gpuseat vms down``: remove the course's domains and seeds (and disks) and mark their seats released."""
    key = store.get_course(course).key if store is not None else course
    if key is None:
        raise InputError("no course given", where="--course", fix="name the course whose VMs to remove")
    seat_keys = [s.key for s in store.seats(key) if _vm_seat(s.kind, s.engine)] if store is not None else []
    report = down_seats(key, connect, delete_disks=delete_disks, pool_name=pool, host=host, seat_keys=seat_keys)
    if store is not None and should_record(connect, record):
        record_results(store, key, [r for r in report.seats if r.action == "removed"], released=True)
    elif store is not None:
        report = replace(report, notes=(*report.notes, TEST_DRIVER_NOTE))
    return report


def status(
    store: CourseStore,
    course: str | None,
    connect: str,
    host: LibvirtHost | None = None,
    *,
    record: bool | None = None,
) -> VmReport:
    """``gpuseat vms status``: each seat's domain, state and participant, written back to the store.

    The store gets the truth: a seat whose domain is gone (deleted by hand) is no longer running
    (``failed``, with the reason) and its connect details are cleared.
    """
    view = store.get_course(course)
    vm_seats = {s.key: s for s in store.seats(view.key) if _vm_seat(s.kind, s.engine)}
    logins = {k: v for k, v in course_logins(store, view.key).items() if k in vm_seats}
    report = status_seats(view.key, connect, logins, host)
    if not should_record(connect if host is None else host.uri, record):
        return replace(report, notes=(*report.notes, TEST_DRIVER_NOTE))
    record_results(store, view.key, [r for r in report.seats if r.seat in logins and r.state != "absent"])
    for r in report.seats:
        seat = vm_seats.get(r.seat)
        if r.state != "absent" or seat is None or seat.engine != "libvirt":
            continue
        if seat.state in ("running", "requested") or seat.connect:
            store.set_seat_state(
                view.key,
                r.seat,
                "failed" if seat.state in ("running", "requested") else seat.state,
                reason="vms status: the VM's domain is gone (removed outside gpuseat); run gpuseat vms up",
                engine="libvirt",
                engine_ref=r.domain,
                connect="",
            )
    return report


def __getattr__(name: str) -> Any:
    """``LibvirtEngine`` lives in :mod:`gpuseat.services.vms_engine` (kept importable from here)."""
    if name == "LibvirtEngine":
        from gpuseat.services.vms_engine import LibvirtEngine

        return LibvirtEngine
    raise AttributeError(name)
