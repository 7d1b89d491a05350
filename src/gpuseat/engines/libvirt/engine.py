"""The libvirt engine: one VM per seat, planned from the store and applied step by step.

Each seat holder gets the seat's domain (carve's libvirt renderer, gpuseat's owner metadata naming
them) booting *their own* qcow2 overlay of the organizer's base image and a NoCloud seed with their
one login name (:func:`gpuseat.core.delivery.login_name`) and SSH key (plus the organizer's probe key).

:meth:`LibvirtEngine.plan` reads libvirt and the store and lists only what differs:

* a new holder: ``domain.create`` (fresh overlay, seed, define, start);
* a hand-over (the domain is another participant's): ``domain.stop`` of the running VM, then
  ``disk.remove`` and ``seed.remove`` of the previous holder's disk and login (revoke), then
  ``domain.reimage`` (a fresh overlay: cloud-init never removes a former user, so the new holder must
  never boot the previous holder's disk);
* a vacated seat (release, move away, archive): ``domain.stop`` and ``seed.remove``; nothing starts a
  VM for nobody;
* drift (a definition changed by hand, a new key): ``domain.update``; a holder's stopped VM:
  ``domain.start``; outside the course's access hours: ``domain.stop``;
* ``seat.record`` writes the way in (``ssh LOGIN@ADDR``, ``holder`` = the participant) once the VM has
  an address; ``seat.clear`` takes a vacated seat's way in (and its old connect string) away;
* a deleted course, or a seat no longer in it: ``domain.remove`` (domain, disks and seeds).

A second plan right after an apply is empty. libvirt is driven through libvirt-python; a dry run
lists the equivalent ``virsh`` commands and changes nothing. The mock driver (``test://``) never
writes into the course store (its addresses are made up).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuseat.core.delivery import login_name, parse_probe
from gpuseat.core.readiness import Access, Readiness, ReadyState, judge
from gpuseat.core.seating import AGENT_ACTOR
from gpuseat.engines import sessions as session_checks
from gpuseat.engines.base import Changes, CourseState, Holding, Step, StepEngine
from gpuseat.engines.host import others
from gpuseat.engines.libvirt import machine as vm_
from gpuseat.engines.libvirt import names, requests
from gpuseat.engines.libvirt.domain import drift, hostdevs
from gpuseat.errors import GpuseatError, InputError

if TYPE_CHECKING:
    from gpuseat.core.carve import Layout
    from gpuseat.engines.libvirt.libvirt_host import LibvirtHost
    from gpuseat.store import ParticipantView, SeatView

TEST_DRIVER_NOTE = "libvirt's test driver (test://): nothing is recorded in the course store"
GRANTS = ("domain.create", "domain.reimage", "domain.update", "domain.start")


#: what a ``connect`` URI may name (libvirt's remote URIs, https://libvirt.org/uri.html): the drivers, the
#: transports (none: the local socket) and the query parameters; not ``ext``, ``command`` or ``netcat``,
#: which make the agent (root, with its SSH key) run a program that the URI names, here or on the host
LIBVIRT_DRIVERS = frozenset(("qemu", "test"))
LIBVIRT_TRANSPORTS = frozenset(("", "unix", "ssh", "libssh", "libssh2", "tls", "tcp"))
LIBVIRT_PARAMS = frozenset(
    ("name", "keyfile", "no_verify", "no_tty", "pkipath", "known_hosts", "known_hosts_verify", "sshauth",
     "tls_priority", "mode", "proxy", "socket")
)  # fmt: skip


class LibvirtSettings(BaseModel):
    """The libvirt engine's settings (stored per course: ``gpuseat engines settings libvirt K=V``)."""

    model_config = ConfigDict(extra="forbid")

    connect: str = Field("qemu:///system", description="libvirt URI (qemu+ssh://root@HOST/system; test:///default)")
    inventory: str | None = Field(None, description="the server inventory TOML the seats were added from")
    mode: Literal["passthrough", "vgpu"] = Field("passthrough", description="the carve mode the seats were added with")
    image: str | None = Field(None, description="base image on the libvirt host; each holder boots an overlay of it")
    image_format: Literal["qcow2", "raw"] = Field("qcow2", description="format of the base image")
    disk_gb: int = Field(40, ge=1, le=65536, description="size of each holder's overlay, GB")
    pool: str = Field("gpuseat", description="libvirt storage pool for disks and seeds")
    pool_dir: str | None = Field(vm_.DEFAULT_POOL_DIR, description="folder of the pool when gpuseat creates it")
    network: str = Field("default", description="libvirt network of the VMs' NIC ('none': no NIC)")
    vcpus: int = Field(4, ge=1, le=1024, description="vCPUs per VM")
    memory_mib: int = Field(16384, ge=64, le=16 * 1024 * 1024, description="memory per VM, MiB")
    virt_type: names.VirtType = Field("kvm", description="kvm, or qemu (TCG: no KVM, slow)")
    gpu: bool = Field(True, description="give each VM its seat's GPU (no: try the image first)")
    start: bool = Field(True, description="start each holder's VM (no: define only)")
    serial_dir: str | None = Field(None, description="folder on the libvirt host for serial console logs")
    boot_kernel: str | None = Field(None, description="direct kernel boot: the kernel (host path)")
    boot_initrd: str | None = Field(None, description="direct kernel boot: the initrd (host path)")
    boot_cmdline: str = Field("console=ttyS0", description="direct kernel boot: the command line")
    doctor_root: str | None = Field(None, description="pre-flight from an extracted `gpuseat doctor --capture`")
    preflight: bool = Field(True, description="run the doctor's checks before defining GPU VMs")
    probe_key: str | None = Field(None, description="probe key (KEY, KEY.pub): KEY.pub may log in as each holder")
    address_wait: float = Field(0.0, ge=0, le=600, description="seconds apply waits for a started VM's address")
    timeout: float = Field(60.0, gt=0, le=3600, description="seconds a probe may take")

    @field_validator("connect")
    @classmethod
    def _uri(cls, v: str) -> str:
        from urllib.parse import parse_qsl, urlsplit

        scheme = v.split(":", 1)[0]
        if ":" not in v or not scheme.replace("+", "").replace("-", "").isalnum() or any(ord(c) < 33 for c in v):
            raise ValueError("must be a libvirt URI like qemu:///system")
        driver, _, transport = scheme.partition("+")
        if driver not in LIBVIRT_DRIVERS or transport not in LIBVIRT_TRANSPORTS:
            raise ValueError(
                f"{scheme}: must be qemu (or test) over a local socket, ssh, libssh, libssh2, tls or tcp, like "
                "qemu+ssh://root@HOST/system (the ext transport runs a command of the URI's choosing)"
            )
        try:
            parts = urlsplit(v)
            _ = parts.port  # in the digits 0-9 (qemu+ssh://root@gpu1:١٢/system was stored, for libvirt to refuse)
        except ValueError as exc:
            raise ValueError(f"not a libvirt URI: {exc}") from None
        odd = sorted({k for k, _ in parse_qsl(parts.query, keep_blank_values=True)} - LIBVIRT_PARAMS)
        if odd:
            allowed = ", ".join(sorted(LIBVIRT_PARAMS))
            raise ValueError(
                f"{', '.join(odd)}: not a parameter gpuseat passes on (command and netcat name programs to "
                f"run); allowed: {allowed}"
            )
        return v

    @field_validator("pool")
    @classmethod
    def _pool(cls, v: str) -> str:
        if not names.is_key(v):
            raise ValueError("must be lower-case letters, digits and single dashes (a libvirt name)")
        return v

    @field_validator("network")
    @classmethod
    def _network(cls, v: str) -> str:
        if v != "none" and not names.is_key(v):
            raise ValueError("must be a libvirt network name (lower-case letters, digits, dashes) or none")
        return v

    @field_validator("image", "pool_dir", "serial_dir", "boot_kernel", "boot_initrd", "doctor_root", "probe_key",
                     "inventory")  # fmt: skip
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        if v is not None and not vm_.plain_path(v):
            raise ValueError("must be an absolute path without control characters")
        return v

    @field_validator("boot_cmdline")
    @classmethod
    def _cmdline(cls, v: str) -> str:
        if any(ord(c) < 32 for c in v):
            raise ValueError("must be one line")
        return v


def probe_public_key(key: Path, *, where: str = "probe_key") -> str:
    """The one-line public key (``KEY.pub``) of the organiser's probe key ``KEY``, for the seeds."""
    pub = key.with_name(key.name + ".pub")
    if not pub.is_file():
        raise InputError(f"{pub} not found", where=where, fix="give a key made by ssh-keygen (KEY, KEY.pub)")
    return pub.read_text().strip()


class LibvirtEngine(StepEngine[LibvirtSettings]):
    """The ``libvirt`` engine (see the module docstring)."""

    name = "libvirt"
    settings_model = LibvirtSettings

    def setup(self) -> None:
        """The engine's own parts, from its settings."""
        self.records: bool | None = None  # None: every driver but libvirt's mock driver records
        self._lv: LibvirtHost | None = None

    # -- the connection, the layout, the options ---------------------------------------------------

    def use(self, connection: LibvirtHost) -> None:
        """Talk to this open connection (a test keeps one ``test://`` host across plan and apply)."""
        self._lv = connection

    @property
    def libvirt(self) -> LibvirtHost:
        """The libvirt connection (opened on first use)."""
        if self._lv is None:
            from gpuseat.engines.libvirt.libvirt_host import LibvirtHost

            self._lv = LibvirtHost(self.settings.connect)
        return self._lv

    def _records(self) -> bool:
        return (not self.libvirt.is_test_driver) if self.records is None else self.records

    @cached_property
    def layout(self) -> Layout:
        """The carve layout of the server the seats were added from (their GPUs' PCI addresses)."""
        if self.settings.inventory is None:
            raise InputError(
                "the libvirt engine needs the server's inventory to give seats their GPUs",
                where="libvirt settings: inventory",
                fix="gpuseat engines settings libvirt inventory=/path/SERVER.toml mode=passthrough|vgpu "
                "(the inventory the seats were added from)",
            )
        from gpuseat.catalog.bundle import load_catalog
        from gpuseat.services.carving import carve_inventory

        return carve_inventory(Path(self.settings.inventory), load_catalog(), mode=self.settings.mode)

    @cached_property
    def options(self) -> vm_.VmOptions:
        """How the VMs are made (the settings, the course file's ``[vm]`` set-up, the probe key)."""
        s = self.settings
        packages: tuple[str, ...] = ()
        commands: tuple[str, ...] = ()
        try:
            vm = self.store.courses.course_file(self.course).vm
            packages, commands = tuple(vm.packages), tuple(vm.commands)
        except GpuseatError:
            pass  # a course gone from the store: nothing is made for it
        boot = None
        if s.boot_kernel and s.boot_initrd:
            from gpuseat.render.libvirt import DirectBoot

            boot = DirectBoot(s.boot_kernel, s.boot_initrd, s.boot_cmdline)
        probe = (probe_public_key(Path(s.probe_key)),) if s.probe_key else ()
        return vm_.VmOptions(
            connect=s.connect, image=s.image, image_format=s.image_format, disk_gb=s.disk_gb, pool=s.pool,
            pool_dir=s.pool_dir, network=None if s.network == "none" else s.network, vcpus=s.vcpus,
            memory_mib=s.memory_mib, virt_type=s.virt_type, gpu=s.gpu, start=s.start, serial_dir=s.serial_dir,
            boot=boot, doctor_root=Path(s.doctor_root) if s.doctor_root else None, preflight=s.preflight,
            packages=packages, commands=commands, probe_keys=probe,
        )  # fmt: skip

    def _vm(self, seat_key: str, participant: str, login: str, keys: Sequence[str]) -> vm_.VmSeat:
        by_name = {s.name: s for s in self.layout.slices}
        if seat_key not in by_name:
            raise InputError(
                f"seat {seat_key} is not in the layout of {self.layout.server.name} ({len(by_name)} seats)",
                where=f"seat {seat_key}",
                fix="set the inventory and mode the seats were added with (gpuseat engines settings libvirt …)",
            )
        names.guest_login(login, where=f"participant {participant}: login")
        return vm_.VmSeat(seat_key, by_name[seat_key], participant, login, tuple(keys))

    def _seats(self, state: CourseState) -> dict[str, SeatView]:
        return {s.key: s for s in state.seats if s.engine == self.name and (self.host is None or s.host == self.host)}

    # -- plan ----------------------------------------------------------------------------------------

    def plan(self, course: CourseState) -> Changes:
        """Every step that makes the libvirt host match the store (see the module docstring)."""
        names.key(self.course, where="course key")
        changes = Changes(self.name, self.course, self.host)
        lv = self.libvirt
        pool = lv.find_pool(self.settings.pool)  # None: made (or started) by the first domain.create
        seats = self._seats(course)
        elsewhere = {s.key for s in course.seats if s.engine == self.name} - set(seats)  # another --host's
        owned = {k: d for k, d in lv.owned(self.course).items() if k not in elsewhere}
        deleting = course.course is None or self.course in self.store.agents.pending_deletions()
        holders = {s.key: p for s, p in course.holders() if s.key in seats} if course.active else {}
        for key, other in sorted(self._other_courses(holders, seats).items()):  # another course's older holder
            what, fix = others.refusal(key, holders.pop(key).key, other)  # keeps the GPU: this VM stops, if it runs
            changes.steps.append(self._step("seat.device", key, what, "grant", seat=key, fix=fix))  # seat.clear goes on
        records = self._records() and course.course is not None and not course.archived
        gone = "the course is archived" if course.archived else None
        for key in sorted(set(owned) | set(seats)):
            here = vm_.read_seat(lv, pool, self.course, key)
            seat = seats.get(key)
            if deleting or seat is None:
                if here.dom is not None or here.disks or here.seeds:
                    why = "the course is deleted" if deleting else f"{key} is no longer a libvirt seat of the course"
                    step = self._step("domain.remove", here.domain, why, "revoke", seats=(key,), seat=key)
                    changes.steps.append(step)
                continue
            p = holders.get(key)
            if p is None:
                self._plan_vacated(changes, course, seat, here, gone, records)
            else:
                self._plan_holder(changes, course, seat, p, here, pool, records)
        if not deleting:
            requests.plan_requests(self, course, changes, seats)
        grants = [s for s in changes.steps if s.action in GRANTS and s.action != "domain.start"]
        if grants:
            if self.options.image is None:
                changes.notes.append("no image: the VMs have no system disk (gpuseat engines settings libvirt image=…)")
            vms = [self._vm(s.data["seat"], s.participant or "", s.data["login"], s.data["keys"])
                   for s in grants if not s.data.get("error")]  # fmt: skip
            _checks, notes = vm_.run_preflight(lv, vms, self.options)
            changes.notes.extend(notes)
        if not self._records() and seats:
            changes.notes.append(TEST_DRIVER_NOTE)
        return changes

    def _other_courses(
        self, holders: dict[str, ParticipantView], seats: dict[str, SeatView]
    ) -> dict[str, others.Holder]:
        """This course's held seats whose GPU (PCI device or mdev) a VM of another course not archived on this libvirt
        host also passes through, or whose device UUID another course's seat of an engine that delivers a GPU of its
        server names (an SSH seat, a hub server: :data:`~gpuseat.engines.host.others.LOCAL`), held there since
        before: seat → that holding (the host engine's rule, module :mod:`gpuseat.engines.host.others`: the older
        holding keeps the device). Read from libvirt: the other courses' domains and their hostdevs; their holders
        and since, and the seats on this course's device UUIDs, from the store (one read)."""
        lv = self.libvirt
        theirs: dict[tuple[str, str], tuple[str, ...]] = {}
        for dom, who in lv.domains() if holders else ():
            if who is not None and who.course != self.course:
                theirs[(who.course, who.seat)] = hostdevs(dom.XMLDesc(lv.lv.VIR_DOMAIN_XML_INACTIVE))
        uuids = {u for key in holders if (u := seats[key].device_uuid)}
        if not any(theirs.values()) and not uuids:
            return {}  # the usual host: one course
        held = []
        for r in self.store.seats.held_seats(theirs, self.name, uuids, others.LOCAL):
            if r["course"] == self.course:
                continue
            devs = (*theirs.get((r["course"], r["seat"]), ()), *([r["device_uuid"]] if r["device_uuid"] else ()))
            held.append(others.Holder((r["since"], r["course"], r["seat"]), r["participant"], "", devs, devs))
        for key, p in holders.items():
            devs = (*self._hostdevs(key), *([seats[key].device_uuid] if seats[key].device_uuid else ()))
            since = seats[key].assigned_since or datetime.max.replace(tzinfo=UTC)
            held.append(others.Holder((since, self.course, key), p.key, "", devs, devs))
        return others.shared(self.course, held)[0]

    def _hostdevs(self, key: str) -> tuple[str, ...]:
        """The devices seat ``key``'s VM passes through (none without a GPU or outside the layout)."""
        by_name = {s.name: s for s in self.layout.slices}
        if key not in by_name or not self.options.gpu:
            return ()
        vm = vm_.VmSeat(key, by_name[key])
        return hostdevs(vm_.wanted_xml(self.course, self.layout, vm, self.options, disk=None, seed=None))

    def _plan_vacated(
        self, changes: Changes, course: CourseState, seat: SeatView, here: vm_.OnHost, gone: str | None, records: bool
    ) -> None:
        """Nobody holds the seat: the VM stops (and stays stopped), the last holder's login goes."""
        who = here.participant
        why = gone or (f"{who} no longer holds {seat.key}: nobody does" if who else f"nobody holds {seat.key}")
        add = changes.steps.append
        if here.running:
            add(self._step("domain.stop", here.domain, why, "revoke", seats=(seat.key,), seat=seat.key))
        for s in here.seeds:
            add(self._step("seed.remove", s, f"{why}: the seed with their login goes", "revoke", seats=(seat.key,),
                           volume=s))  # fmt: skip
        old = course.access.get(seat.key) or {}
        if records and (old.get("holder") or old.get("user") or old.get("command") or seat.connect
                        or seat.state == "running"):  # fmt: skip
            add(self._clear_step(seat.key, seat=seat.key))

    def _plan_holder(
        self,
        changes: Changes,
        course: CourseState,
        seat: SeatView,
        p: ParticipantView,
        here: vm_.OnHost,
        pool: Any,
        records: bool,
    ) -> None:
        """``p`` holds the seat: their VM, on their own disk, with their login, running."""
        add = changes.steps.append
        key, name = seat.key, here.domain
        login = self.login_of(p)
        keys = [p.ssh_key] if p.ssh_key else []
        if not keys:
            changes.notes.append(f"{p.key} has no SSH key: the login {login} on their VM takes none (add one)")
        data: dict[str, Any] = {"seat": key, "login": login, "keys": keys}
        error = wanted_seed = None
        vm = None
        try:
            vm = self._vm(key, p.key, login, keys)
            wanted_seed = vm_.seed_name(self.course, vm, self.options)
        except InputError as exc:
            if "is not in the layout" in exc.what:
                changes.notes.append(f"{exc.what}: skipped")
                return
            error = data["error"] = exc.message
        previous = here.participant if here.dom is not None else None
        handover = here.dom is not None and previous != p.key
        before = previous or "a previous holder"
        wanted_disk = vm_.disk_name(name, p.key)
        if here.dom is not None and not handover and f"{name}.qcow2" in here.disks:
            wanted_disk = f"{name}.qcow2"  # a disk made before per-holder overlays, same holder
        seats = (key,)
        # revoke: the previous holder's session, disk and login; disks and seeds that are not theirs
        if handover and here.running:
            add(self._step("domain.stop", name, f"{key} goes from {before} to {p.key}: {before}'s sessions end",
                           "revoke", seats=seats, seat=key))  # fmt: skip
        for d in here.disks:
            if d != wanted_disk:
                why = f"{before}'s disk: {p.key} never gets it" if handover else f"a disk {p.key} does not own"
                add(self._step("disk.remove", d, why, "revoke", seats=seats, volume=d))
        for s in here.seeds:
            if s != wanted_seed:
                why = f"the seed with {before}'s login" if handover else f"an older seed of {login}"
                add(self._step("seed.remove", s, why, "revoke", seats=seats, volume=s))
        if course.closed is not None:
            if here.running and not handover:
                add(self._step("domain.stop", name, f"access is closed: {course.closed}", "revoke", seats=seats,
                               seat=key))  # fmt: skip
            if records:
                self._plan_record(changes, course, seat, p, login, running=False, ip=None, note=course.closed)
            return
        # grant: the holder's VM
        o = self.options
        granted = True
        if here.dom is None:
            add(self._step("domain.create", name, f"{p.key} holds {key}: a fresh disk and a seed with login {login}",
                           "grant", participant=p.key, seats=seats, **data))  # fmt: skip
        elif handover:
            add(self._step("domain.reimage", name, f"{key} goes from {before} to {p.key}: a fresh disk, login {login}",
                           "grant", participant=p.key, seats=seats, **data))  # fmt: skip
        else:
            fixed: list[str] = []
            if vm is not None and wanted_seed is not None:
                disk = vm_.volume_path(self.libvirt, pool, wanted_disk, o.pool_dir) if o.image else None
                seed = vm_.volume_path(self.libvirt, pool, wanted_seed, o.pool_dir)
                wanted = vm_.wanted_xml(self.course, self.layout, vm, o, disk=disk, seed=seed)
                fixed = drift(wanted, here.inactive_xml or "<domain/>")
            new_seed = wanted_seed not in here.seeds
            no_disk = o.image is not None and wanted_disk not in here.disks
            if error or fixed or new_seed or no_disk:
                why = "; ".join(
                    [*(["a new seed: login, key or the course's [vm] set-up changed"] if new_seed else []),
                     *([f"fixed: {', '.join(fixed)}"] if fixed else []), *(["its disk is gone"] if no_disk else [])]
                ) or "its definition"  # fmt: skip
                add(self._step("domain.update", name, f"{p.key}'s VM: {why}", "grant", participant=p.key, seats=seats,
                               restart=bool(new_seed and here.running), **data))  # fmt: skip
            elif o.start and not here.running:
                add(self._step("domain.start", name, f"{p.key}'s VM is {here.state}", "grant", participant=p.key,
                               seats=seats, seat=key))  # fmt: skip
            else:
                granted = False
        if records:
            if granted:
                add(self._record_step(key, p.key, f"{p.key} logs in as {login}", seat=key, login=login, wait=True))
            else:
                ip = vm_.address(self.libvirt, here.dom) if here.running else None
                self._plan_record(changes, course, seat, p, login, running=here.running, ip=ip, note=here.state)

    def _plan_record(
        self,
        changes: Changes,
        course: CourseState,
        seat: SeatView,
        p: ParticipantView,
        login: str,
        *,
        running: bool,
        ip: str | None,
        note: str,
    ) -> None:
        state, _reason, access, connect = self._wanted(seat, p.key, login, running=running, ip=ip, why=note)
        old = course.access.get(seat.key)
        name = names.domain_name(self.course, seat.key)
        if (old, seat.state, seat.connect or "", seat.engine_ref) != (access.to_dict(), state, connect, name):
            why = f"{p.key} logs in as {login}"
            changes.steps.append(self._record_step(seat.key, p.key, why, seat=seat.key, login=login, note=note))

    def _wanted(
        self, seat: SeatView, participant: str, login: str, *, running: bool, ip: str | None, why: str
    ) -> tuple[str, str, Access, str]:
        """(seat state, reason, access, connect string) for the holder: their way in once the VM has an
        address; before that a way in that names no one (the page says "being prepared")."""
        name = names.domain_name(self.course, seat.key)
        lv = self.libvirt
        if running and ip:
            command = vm_.connect_string(login, ip, lv.remote_host, vm_.uri_user(lv.uri))
            jump = vm_.jump_of(lv.remote_host, vm_.uri_user(lv.uri))
            access = Access(kind="ssh", host=ip, user=login, jump_host=jump, command=command,
                            device_uuid=seat.device_uuid, notes=(f"VM {name}",), holder=participant)  # fmt: skip
            return "running", f"libvirt: {name} running", access, command
        note = f"VM {name} is starting: its address is not known yet" if running else f"VM {name}: {why}"
        access = Access(kind="ssh", device_uuid=seat.device_uuid, notes=(note,))
        return ("running" if running else "requested"), f"libvirt: {note}", access, ""

    # -- apply ---------------------------------------------------------------------------------------

    def _would(self, *commands: Sequence[str]) -> bool:
        """A dry run: record the ``virsh`` equivalents of what the step would do (run nothing)."""
        if not self.runner.dry_run:
            return False
        for argv in commands:
            self.runner.run(["virsh", "-c", self.settings.connect, *argv])
        return True

    def do(self, step: Step) -> str | None:
        """Carry out one planned step (each a no-op when libvirt already is so)."""
        d, s, lv = step.data, self.settings, self.libvirt
        match step.action:
            case "domain.stop":
                if not self._would(["destroy", step.target]):
                    vm_.stop_vm(lv, self.course, d["seat"])
            case "seed.remove" | "disk.remove":
                if not self._would(["vol-delete", "--pool", s.pool, d["volume"]]):
                    vm_.remove_volumes(lv, s.pool, [d["volume"]])
            case "domain.remove":
                if not self._would(["destroy", step.target], ["undefine", "--nvram", step.target]):
                    gone = vm_.remove_vm(lv, self.course, d["seat"], s.pool)
                    return f"removed: {', '.join(gone)}" if gone else None
            case "domain.create" | "domain.reimage" | "domain.update":
                if d.get("error"):
                    raise InputError(d["error"], where=f"seat {d['seat']}", fix="correct the roster, then apply again")
                vm = self._vm(d["seat"], step.participant or "", d["login"], d["keys"])
                restart = [["destroy", step.target]] if d.get("restart") else []
                # a stopped seat's VM (a participant's stop) gets its definition but stays off
                o = self.options if d.get("start", True) else replace(self.options, start=False)
                start = [["start", step.target]] if o.start else []
                if self._would(*restart, ["define", f"{step.target}.xml"], *start):
                    return None
                made = vm_.ensure_vm(lv, self.course, self.layout, vm, o, restart=bool(d.get("restart")))
                notes = []
                if not made.uploaded:
                    notes.append(
                        "this libvirt driver cannot upload volumes: the seed ISO is empty (normal for test://)"
                    )
                if made.pending:
                    notes.append(f"the new definition applies at the VM's next start (virsh shutdown {step.target})")
                return "; ".join(notes) or None
            case "domain.start":
                dom = lv.lookup(step.target)
                if dom is None:
                    raise InputError(f"domain {step.target} is gone", where=f"seat {d['seat']}", fix="apply again")
                if not self._would(["start", step.target]):
                    lv.start(dom, d["seat"])
            case "seat.device":  # planned so that apply names the seat and fails it (exit 2); the rest goes on
                raise InputError(step.why, where=f"seat {step.target}", fix=d.get("fix") or None)
            case "seat.record":
                return self._record(step)
            case "domain.restart" | "domain.reset" | "seat.stop" | "request.record":
                return requests.do_request(self, step)
            case "seat.check" | "session.report":
                return session_checks.do(self, step)
            case "seat.clear":
                if not self.runner.dry_run:
                    seat = self.store.seats.get_seat(self.course, d["seat"])
                    state = "requested" if seat.state == "running" else seat.state
                    access = Access(kind="ssh", device_uuid=seat.device_uuid, notes=("nobody holds this seat",))
                    self.store.seats.set_seat_state(self.course, seat.key, state, reason="libvirt: nobody holds it",
                                              connect="", access=access, actor=AGENT_ACTOR)  # fmt: skip
            case _:
                raise InputError(f"the libvirt engine has no step {step.action!r}", where="plan")
        return None

    def _record(self, step: Step) -> str | None:
        """Write the holder's way in as the VM is now (waiting up to ``address_wait`` for its address)."""
        d, lv = step.data, self.libvirt
        if self.runner.dry_run:
            return None
        seat = self.store.seats.get_seat(self.course, d["seat"])
        dom = lv.lookup(names.domain_name(self.course, seat.key))
        running = bool(dom is not None and dom.isActive())
        ip = vm_.address(lv, dom) if running else None
        end = time.monotonic() + (self.settings.address_wait if d.get("wait") else 0)
        while running and ip is None and time.monotonic() < end:
            time.sleep(0.2)  # a lease query is cheap: the address is recorded soon after the lease
            ip = vm_.address(lv, dom)
        why = str(d.get("note") or (lv.state(dom) if dom is not None else "absent"))
        state, reason, access, connect = self._wanted(seat, step.participant or "", d["login"], running=running, ip=ip,
                                                      why=why)  # fmt: skip
        from gpuseat.core.seating import transition_error

        if transition_error(seat.state, state):  # a released seat is requested again first
            self.store.seats.set_seat_state(self.course, seat.key, "requested", reason="libvirt", actor=AGENT_ACTOR)
        self.store.seats.set_seat_state(self.course, seat.key, state, reason=reason, engine_ref=names.domain_name(
            self.course, seat.key), connect=connect, access=access, actor=AGENT_ACTOR)  # fmt: skip
        return None if ip or not running else "no address yet: the next apply (or the agent) records it"

    # -- observe, check, connect -------------------------------------------------------------------

    def observe(self, course: CourseState) -> list[Holding]:
        """Every running VM of the course, and whose login it carries."""
        out = []
        for dom, who in self.libvirt.domains():
            if who is None or who.course != self.course or not dom.isActive():
                continue
            p = course.people.get(who.participant or "")
            login = self.login_of(p) if p else (login_name(who.participant, None) if who.participant else "")
            detail = f"domain {dom.name()} running"
            out.append(Holding(self.name, "vm", login, who.participant, who.seat, self.host, detail))
        return out

    def probe(self, seat: SeatView, participant: ParticipantView) -> Readiness:
        """SSH into the seat's VM as the participant's login with the probe key; judge ``nvidia-smi -L``."""

        def result(state: ReadyState, reason: str | None, evidence: str, visible: tuple[str, ...] = ()) -> Readiness:
            return Readiness(self.course, seat.key, participant.key, state, reason, evidence[-4000:], visible,
                             datetime.now(UTC), self.name)  # fmt: skip

        lv = self.libvirt
        yielded = self._other_courses({seat.key: participant}, {seat.key: seat}).get(seat.key)
        if yielded is not None:  # what apply says: another course's older holder keeps this GPU
            return result("broken", others.refusal(seat.key, participant.key, yielded)[0], "")
        if self.settings.probe_key is None:
            return result("broken", "no probe key set (libvirt setting probe_key)", "")
        dom = lv.lookup(names.domain_name(self.course, seat.key))
        if dom is None:
            return result("broken", "the VM has no address to log in to (domain absent)", "")
        from gpuseat.engines.libvirt.domain import owner

        who = owner(lv.inactive_xml(dom))
        if who is None or who.participant != participant.key:
            made = who.participant if who and who.participant else "nobody"
            return result("broken", f"the VM is still made for {made} (being prepared: not applied yet)", "")
        ip = vm_.address(lv, dom)
        if ip is None:
            return result("broken", f"the VM has no address to log in to (domain {lv.state(dom)})", "")
        login = self.login_of(participant)
        half = max(1, int(self.settings.timeout // 2))
        argv = ["ssh", "-i", self.settings.probe_key, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                "-o", "UserKnownHostsFile=/dev/null", "-o", f"ConnectTimeout={half}"]  # fmt: skip
        if (jump := vm_.jump_of(lv.remote_host, vm_.uri_user(lv.uri))) is not None:
            argv += ["-J", jump]
        argv += [f"{login}@{ip}", "--", "nvidia-smi", "-L"]
        done = self.runner.try_run(argv, timeout=self.settings.timeout, mutates=False, where=f"seat {seat.key}")
        evidence = (done.stdout + done.stderr).strip()
        if done.returncode == 124:
            return result("broken", f"ssh to {ip} did not answer within {self.settings.timeout:g} s", evidence)
        if done.returncode != 0:
            return result("broken", f"ssh or nvidia-smi failed (exit {done.returncode})", evidence)
        # the one reading of nvidia-smi -L (a MIG device counts, not also the GPU line above it)
        visible = parse_probe(done.stdout).visible
        state, reason = judge(seat.device_uuid, visible)
        return result(state, reason, evidence, visible)

    def refused(self, participant: ParticipantView) -> str | None:
        """Exclusivity: None when ``participant`` (a previous or released holder) has no running VM of
        this course on a seat they do not hold; else which one."""
        holds = {s.key: s.participant for s in self.store.seats.seats(self.course)}
        for dom, who in self.libvirt.domains():
            if who is None or who.course != self.course or who.participant != participant.key:
                continue
            if dom.isActive() and holds.get(who.seat) != participant.key:
                return f"VM {dom.name()} still runs with {self.login_of(participant)}'s login"
        return None
