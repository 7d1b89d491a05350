"""The libvirt seat engine (:class:`LibvirtEngine`, ``gpuseat.services.vms:LibvirtEngine`` in the registry).

One VM per seat, made by :mod:`gpuseat.services.vms`: ``provision`` brings up the seat's VM (a hand-over
gives the new holder a fresh overlay and seed), ``connect`` says how to SSH in, ``probe`` logs in *as
the participant* with the organiser's probe key (authorised for the seat's login through the seed)
and judges ``nvidia-smi -L``, ``revoke`` ends the holder's session at once (VM stopped, seed deleted),
``teardown`` removes the VM, its seed and its disks.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from gpuseat.core.readiness import Access, Readiness, ReadyState, judge
from gpuseat.errors import InputError
from gpuseat.services import vms

if TYPE_CHECKING:
    from gpuseat.core.carve import Layout
    from gpuseat.services.courses import CourseStore, ParticipantView, SeatView

_YES = ("yes", "true", "1", "on")
PROBE_TIMEOUT_S = 60


def probe_public_key(key: Path, *, where: str = "probe_key") -> str:
    """The one-line public key (``KEY.pub``) of the organiser's probe key ``KEY``, for the seeds."""
    pub = key.with_name(key.name + ".pub")
    if not pub.is_file():
        raise InputError(f"{pub} not found", where=where, fix="give a key made by ssh-keygen (KEY, KEY.pub)")
    return pub.read_text().strip()


class LibvirtEngine:
    """Seats as libvirt VMs.

    Settings (plain strings): ``connect`` (libvirt URI), ``inventory`` and ``mode`` (the carve the
    seats came from), ``image``, ``pool``, ``pool_dir``, ``network``, ``virt_type``, ``vcpus``,
    ``memory_mib``, ``disk_gb``, ``gpu`` ("yes"/"no"), ``probe_key`` (a private key file whose
    ``.pub`` is authorised for each seat's login).
    """

    name = "libvirt"

    def __init__(
        self,
        store: CourseStore,
        course: str,
        *,
        connect: str = "qemu:///system",
        inventory: str | None = None,
        mode: str = "passthrough",
        image: str | None = None,
        pool: str = "gpuseat",
        pool_dir: str | None = vms.DEFAULT_POOL_DIR,
        network: str | None = "default",
        virt_type: str = "kvm",
        vcpus: str = "4",
        memory_mib: str = "16384",
        disk_gb: str = "40",
        gpu: str = "yes",
        probe_key: str | None = None,
    ) -> None:
        self.store = store
        self.course = store.get_course(course).key
        self.inventory = Path(inventory) if inventory else None
        self.mode = mode
        self.probe_key = Path(probe_key) if probe_key else None
        probe_pub = (probe_public_key(self.probe_key),) if self.probe_key is not None else ()
        try:
            self.options = vms.VmOptions(
                connect=connect, image=image, pool=pool, pool_dir=pool_dir, network=network or None,
                virt_type="qemu" if virt_type == "qemu" else "kvm", vcpus=int(vcpus), memory_mib=int(memory_mib),
                disk_gb=int(disk_gb), gpu=gpu.lower() in _YES, probe_keys=probe_pub,
            )  # fmt: skip
        except ValueError as exc:
            raise InputError(f"bad libvirt engine setting: {exc}", where="libvirt engine", fix="numbers") from None

    # -- helpers -----------------------------------------------------------------------------------

    def _layout(self) -> Layout:
        if self.inventory is None:
            raise InputError(
                "the libvirt engine needs the server's inventory to give seats their GPUs",
                where="libvirt engine: inventory",
                fix="set inventory=SERVER.toml (and mode) in the course's engine settings",
            )
        from gpuseat.catalog.bundle import load_catalog
        from gpuseat.services.carving import carve_inventory

        return carve_inventory(self.inventory, load_catalog(), mode=self.mode)

    def _access(self, seat: SeatView, result: vms.SeatResult | None) -> Access | None:
        if result is None or not result.connect:
            return None
        m = re.fullmatch(r"ssh (?:-J ([\w.@:-]+) )?([a-z_][a-z0-9_-]*)@([A-Za-z0-9][A-Za-z0-9.:-]*)", result.connect)
        if m is None:
            return None
        return Access(
            kind="ssh",
            host=m.group(3),
            user=m.group(2),
            jump_host=m.group(1),
            command=result.connect,
            device_uuid=seat.device_uuid,
            notes=(f"VM {result.domain} ({result.state})",),
        )

    def _status(self, seat: SeatView) -> vms.SeatResult | None:
        logins = {k: v for k, v in vms.course_logins(self.store, self.course).items() if k == seat.key}
        report = vms.status_seats(self.course, self.options.connect, logins)
        return next((r for r in report.seats if r.seat == seat.key), None)

    # -- the interface -----------------------------------------------------------------------------

    def provision(self, seat: SeatView, participant: ParticipantView | None) -> Access | None:
        """Bring up the seat's VM for its holder (a new holder: fresh disk and seed); how to connect."""
        layout = self._layout()
        key, seats, course_file = vms.course_vm_seats(self.store, self.course, layout)
        mine = [vm for vm in seats if vm.key == seat.key]
        if not mine:
            raise InputError(
                f"seat {seat.key} is not in the layout of {layout.server.name}",
                where="libvirt engine: inventory",
                fix="set the inventory the seats were added from",
            )
        options = replace(self.options, packages=course_file.vm.packages, commands=course_file.vm.commands)
        report = vms.up_seats(key, layout, mine, options)
        access = self._access(seat, report.seats[0])
        if vms.should_record(self.options.connect, None):
            vms.record_results(self.store, key, report.seats)
            if access is not None:  # the structured way in, through the one seat write
                self.store.record_delivery(self.course, seat.key, access=access, actor="gpuseat libvirt")
        return access

    def connect(self, seat: SeatView) -> Access | None:
        """``ssh user@address`` of the seat's running VM (None while it has no address)."""
        return self._access(seat, self._status(seat))

    def probe(self, seat: SeatView, participant: ParticipantView) -> Readiness:
        """SSH into the VM as the participant's login with the probe key; judge ``nvidia-smi -L``."""

        def result(state: ReadyState, reason: str | None, evidence: str, visible: tuple[str, ...] = ()) -> Readiness:
            return Readiness(
                course=self.course, seat=seat.key, participant=participant.key, state=state, reason=reason,
                evidence=evidence[-4000:], visible=visible, checked_at=datetime.now().astimezone(), engine=self.name,
            )  # fmt: skip

        if self.probe_key is None:
            return result("broken", "no probe key set (libvirt engine setting probe_key)", "")
        access = self.connect(seat)
        if access is None or access.host is None or access.user is None:
            status = self._status(seat)
            state = status.state if status else "absent"
            return result("broken", f"the VM has no address to log in to (domain {state})", "")
        argv = [
            "ssh", "-i", str(self.probe_key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", f"ConnectTimeout={PROBE_TIMEOUT_S // 2}",
        ]  # fmt: skip
        if access.jump_host:
            argv += ["-J", access.jump_host]
        argv += [f"{access.user}@{access.host}", "--", "nvidia-smi", "-L"]
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            return result("broken", f"ssh to {access.host} did not answer within {PROBE_TIMEOUT_S} s", "")
        evidence = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0:
            return result("broken", f"ssh or nvidia-smi failed (exit {proc.returncode})", evidence)
        visible = tuple(re.findall(r"\(UUID: ((?:GPU|MIG)-[0-9A-Za-z/-]+)\)", proc.stdout))
        state, reason = judge(seat.device_uuid, visible)
        return result(state, reason, evidence, visible)

    def revoke(self, seat: SeatView, participant: ParticipantView) -> None:
        """End the holder's access now: the VM is powered off and its seed (their login) deleted.

        Their disk goes when the seat is provisioned for someone else (a fresh overlay) or torn down.
        """
        from gpuseat.vms.libvirt_host import LibvirtHost

        name = vms.domain_name(self.course, seat.key)
        with LibvirtHost(self.options.connect) as host:
            dom = host.lookup(name)
            if dom is not None:
                host.stop(dom)
            try:
                pool = host.pool(self.options.pool, None)
            except InputError:
                pool = None
            if pool is not None:
                for v in host.volume_names(pool, vms.seed_prefix(name)):
                    host.delete_volume(pool, v)
        if vms.should_record(self.options.connect, None):
            current = self.store.get_seat(self.course, seat.key)
            if current.state in ("running", "requested"):
                self.store.set_seat_state(
                    self.course, seat.key, "requested", reason=f"access of {participant.key} revoked", connect=""
                )

    def teardown(self, seat: SeatView) -> None:
        """Remove the seat's VM, seed and disks."""
        vms.down_seats(
            self.course, self.options.connect, delete_disks=True, pool_name=self.options.pool,
            seat_keys=[seat.key], only=[seat.key],
        )  # fmt: skip
