"""The host engine: one Linux GPU server, each participant on their own GPU or MIG instance.

Each seat holder gets a Unix account (their one login name: roster ``unix_user``, else a safe slug),
their SSH key in a root-owned keys file that also sets ``CUDA_VISIBLE_DEVICES`` to their seat's
UUID, and read/write access (POSIX ACLs) to exactly their seat's device files: ``/dev/nvidiaN`` for a
whole GPU, the GI and CI capability files ``/dev/nvidia-caps/nvidia-capN`` for MIG (from
``/proc/driver/nvidia-caps/mig-minors``). Per-user slice drop-ins (``DevicePolicy=closed``,
``DeviceAllow=``) add the cgroup layer on systemd hosts.

Anyone the course no longer gives this host (release, move elsewhere, archive, delete) loses their
key, their account is expired (sshd refuses keys too) and their processes end; a holder who moved to
another seat here keeps the account but any process still holding the old seat's device ends before
the new holder is let in. Outside the course's access windows accounts are locked and sessions end.

:meth:`HostEngine.plan` reads the machine and the store and lists only what differs, so a second
plan after an apply is empty. Device, proc and config roots are settings so the tests run it on
stand-in device files.
"""

from __future__ import annotations

import os
import shlex
import shutil
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from gpuseat.core import delivery, hosts
from gpuseat.core.logins import UNIX_USER
from gpuseat.core.readiness import Access, Readiness, judge
from gpuseat.core.seating import AGENT_ACTOR
from gpuseat.engines.base import Changes, CourseState, Holding, Step, StepEngine, ssh_access
from gpuseat.engines.host import others, sole
from gpuseat.engines.host.machine import Machine
from gpuseat.errors import InputError

if TYPE_CHECKING:
    from gpuseat.store import ParticipantView, SeatView

SHARED_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
#: groups whose members may do more than use their seat (administer the machine, read disks or logs, run
#: containers or VMs as root, open every GPU's render node): never the course accounts' group
PRIVILEGED_GROUPS = frozenset(
    ("root", "sudo", "wheel", "admin", "adm", "shadow", "disk", "kmem", "sys", "staff", "docker", "lxd", "incus",
     "libvirt", "libvirt-qemu", "kvm", "systemd-journal", "video", "render", "input", "tty", "ssh", "nvidia")
)  # fmt: skip


class HostSettings(BaseModel):
    """The host engine's settings (stored per course; flags of ``apply``/``agent`` override them)."""

    model_config = ConfigDict(extra="forbid")

    dev_root: str = Field("/dev", description="where the device files are")
    proc_root: str = Field("/proc", description="where /proc is (mig-minors)")
    nvidia_smi: str = Field("nvidia-smi", description="the nvidia-smi to run")
    keys_dir: str = Field("/etc/gpuseat/authorized_keys", description="root-owned authorized keys per login")
    sshd_dropin: str = Field("/etc/ssh/sshd_config.d/gpuseat.conf", description="the sshd drop-in gpuseat writes")
    profile_d: str | None = Field(None, description="the /etc/profile.d file (default gpuseat-COURSE.sh)")
    systemd_dir: str = Field("/etc/systemd/system", description="where user slice drop-ins go")
    group: str = Field("gpuseat", description="the Unix group of course accounts")
    ssh_host: str | None = Field(None, description="the name participants connect to")
    ssh_port: int | None = Field(None, ge=1, le=65535, description="sshd's port when not 22")
    jump_host: str | None = Field(None, description="a jump host participants go through (ssh -J)")
    probe_host: str = Field("127.0.0.1", description="where the loopback probe connects")
    probe_port: int | None = Field(None, ge=1, le=65535, description="sshd's port for the probe")
    cpu_quota: str | None = Field(None, pattern=r"^[0-9]{1,5}%$", description="CPUQuota= per participant")
    memory_max: str | None = Field(None, pattern=r"^[0-9]{1,9}[KMGT]?$", description="MemoryMax= per participant")
    timeout: float = Field(20.0, gt=0, le=3600, description="seconds a probe may take")
    skeleton: str = Field("/etc/skel", description="what a seat reset restores a participant's home from")
    sshd_log: str = Field("journal", description="sshd's log for the never-connected stop: journal or a file path")

    @field_validator(
        "dev_root",
        "proc_root",
        "nvidia_smi",
        "keys_dir",
        "sshd_dropin",
        "profile_d",
        "systemd_dir",
        "skeleton",
        "sshd_log",
    )
    @classmethod
    def _plain_path(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and (not v or any(c.isspace() or ord(c) < 32 for c in v)):
            raise ValueError(
                "must be a plain path without spaces or control characters (it goes into sshd and systemd files)"
            )
        # a relative path would be read from wherever the agent runs, and sshd reads a relative
        # AuthorizedKeysFile inside each participant's own home: they could add keys themselves
        others = {"nvidia_smi": "/" not in (v or ""), "sshd_log": v == "journal"}  # a command on PATH, the journal
        if v is not None and not v.startswith("/") and not others.get(str(info.field_name), False):
            raise ValueError("must be an absolute path (starting with /)")
        return v

    @field_validator("group")
    @classmethod
    def _group(cls, v: str) -> str:
        if not UNIX_USER.match(v):
            raise ValueError("must be a Unix group name like gpuseat")
        if v in PRIVILEGED_GROUPS:
            raise ValueError(f"{v} grants its members more than a seat: give the course accounts a group of their own")
        return v

    @field_validator("ssh_host")
    @classmethod
    def _host(cls, v: str | None) -> str | None:
        return hosts.check_host(v, field="ssh_host") if v else None

    @field_validator("probe_host")
    @classmethod
    def _probe_host(cls, v: str) -> str:
        """The one host rule too: ``gpu 1``, ``²`` or a URL was stored, and each probe then failed in ssh."""
        return hosts.check_host(v, field="probe_host")

    @field_validator("jump_host")
    @classmethod
    def _jump(cls, v: str | None) -> str | None:
        """``[user@]host[:port]`` as ``ssh -J`` and ``seats connect --jump`` take it (the one host rule)."""
        from gpuseat.core.hosts import jump_target

        return jump_target(v, field="jump_host") if v else None


def state_dir(course: str) -> Path:
    """Where the engine keeps the course's probe key (a machine-local secret, never in the store)."""
    from gpuseat.paths import data_dir

    return data_dir() / "host" / course


class HostEngine(StepEngine[HostSettings]):
    """The ``host`` engine (see the module docstring)."""

    name = "host"
    settings_model = HostSettings

    def setup(self) -> None:
        """The engine's own parts, from its settings."""
        self.machine = Machine(self.runner)
        s = self.settings
        self.keys_dir = Path(s.keys_dir)
        self.profile_d = Path(s.profile_d or f"/etc/profile.d/gpuseat-{self.course}.sh")
        self._lock = threading.Lock()
        self._view: tuple[dict[str, delivery.SeatDevice], dict[tuple[int, int, int | None], int]] | None = None

    # -- what the store wants here ---------------------------------------------------------------------

    def _seats(self, state: CourseState) -> list[SeatView]:
        seats = [s for s in state.seats if s.engine == "host"]
        hosts = sorted({s.host or "" for s in seats})
        if self.host is None:
            if len(hosts) > 1 and (mine := self._own_host(seats)) is not None:
                hosts = [mine]  # this server is the one whose GPUs it has (a second server was added)
            if len(hosts) > 1:
                raise InputError(
                    f"the course's host seats are on several hosts: {', '.join(hosts)}",
                    where="--host",
                    fix="say which one this server is with --host NAME",
                )
            self.host = (hosts[0] if hosts else None) or None
        elif seats and self.host not in hosts:
            raise InputError(
                f"host {self.host!r} is not in course {self.course!r} (its host seats are on: {', '.join(hosts)})",
                where="--host",
                fix="give the host name the seats were added with (gpuseat seats status lists them)",
            )
        return [s for s in seats if (s.host or None) == self.host]

    def _own_host(self, seats: list[SeatView]) -> str | None:
        """The one host of ``seats`` whose device UUIDs this machine's nvidia-smi lists (None when there
        is no nvidia-smi here, or not exactly one such host)."""
        if self.runner.which(self.settings.nvidia_smi) is None:
            return None
        devices = self._devices()[0]
        found = {s.host or "" for s in seats if s.device_uuid and s.device_uuid in devices}
        return found.pop() if len(found) == 1 else None

    def _devices(self) -> tuple[dict[str, delivery.SeatDevice], dict[tuple[int, int, int | None], int]]:
        with self._lock:
            if self._view is None:
                path = Path(self.settings.proc_root) / "driver" / "nvidia-caps" / "mig-minors"
                minors = delivery.parse_mig_minors(path.read_text()) if path.exists() else {}
                self._view = (self.machine.discover(self.settings.nvidia_smi), minors)
            return self._view

    def _seat_files(self, seat: SeatView, uuid: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        devices, minors = self._devices()
        dev = devices.get(uuid)
        if dev is None:
            raise InputError(
                f"seat {seat.key}: device {uuid} does not exist on this host "
                f"(nvidia-smi lists {len(devices)} device(s): {', '.join(sorted(devices)[:6])})",
                where=f"seat {seat.key}",
                fix="check the seat's UUID against `nvidia-smi -L` and re-add the seat",
            )
        root = self.settings.dev_root
        files, shared = delivery.device_files(dev, minors, root), delivery.shared_files(dev, root)
        for f in (*files, *shared):
            if not os.path.exists(f):
                raise InputError(
                    f"seat {seat.key}: device file {f} does not exist",
                    where=f"seat {seat.key}",
                    fix="load the driver with nv_cap_enable_devfs=1 and run nvidia-modprobe, then apply again",
                )
        return files, shared

    def _other_courses(self) -> tuple[dict[str, others.Holder], dict[str, set[str]]]:
        """What courses not archived hold on this machine's devices (module ``others``; by device UUID, whatever
        host name their seats give): this course's seats whose device an older holder of another course keeps,
        and device file → the other courses' logins that keep it."""
        rows = self.store.seats.held_on_devices(self._devices()[0], others.LOCAL)
        if all(r["course"] == self.course for r in rows):
            return {}, {}  # the usual server: one course
        return others.shared(self.course, others.with_files(rows, self._files_of))

    def _files_of(self, uuid: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """(own device files, all of them) of device ``uuid`` here; None when it is not on this host."""
        devices, minors = self._devices()
        dev = devices.get(uuid)
        if dev is None:
            return None
        root = self.settings.dev_root
        try:
            files = delivery.device_files(dev, minors, root)
        except InputError:
            return None
        return files, (*files, *delivery.shared_files(dev, root))

    def _held(self) -> list[others.Holder]:
        """Every held seat on this machine's devices in the courses not archived, with its device files (``others``)."""
        return others.with_files(self.store.seats.held_on_devices(self._devices()[0], others.LOCAL), self._files_of)

    def _adopted(self, seats: list[SeatView]) -> dict[str, str]:
        """Seats carved from an inventory have no UUID yet: a free device of their profile each. A device that
        another course's holder keeps (the same GPU or MIG instance, or a whole GPU over a slice) is not free:
        the rule of module ``others`` sees only seats with a UUID, so such a seat would put two people on it."""
        wanted = [(s.key, s.kind, s.profile) for s in seats if not s.device_uuid and s.kind in ("mig", "gpu")]
        if not wanted:
            return {}
        devices, held = self._devices()[0], self._held()
        taken = {s.device_uuid for s in seats if s.device_uuid}
        taken |= {u for u in devices if others.clashing(self.course, self._files_of(u), held)}
        return delivery.adopt(wanted, devices, taken)

    # -- plan ------------------------------------------------------------------------------------------

    def plan(self, course: CourseState) -> Changes:
        """Every step that makes this host match the store (see the module docstring).

        A dry run on a machine that is not the GPU server (no ``nvidia-smi``) plans from the store alone:
        every holder's steps as if the server had none of them yet, and a note that says so."""
        seats = self._seats(course)
        if seats and self.runner.dry_run and self.runner.which(self.settings.nvidia_smi) is None:
            return self._plan_from_store(course, seats)
        changes = Changes(self.name, self.course, self.host)
        add = changes.steps.append
        step = self._step
        s = self.settings
        adopted = self._adopted(seats) if seats else {}
        by_key = {seat.key: seat for seat in seats}  # lookups by key: a pass stays linear in the seats
        holders = {seat.key: p for seat, p in course.holders() if seat.key in by_key} if course.active else {}
        uses = any(seat.device_uuid or seat.key in adopted for seat in seats)  # else no device was read
        yielded, kept = self._other_courses() if uses else ({}, {})
        refused: dict[str, str] = {}  # seat → why its holder gets nothing here (their requests fail with it)
        for key, other in sorted(yielded.items()):  # another course's older holder keeps that GPU
            if key in holders:
                what, fix = others.refusal(key, holders.pop(key).key, other)
                refused[key] = what
                add(step("seat.device", key, what, "grant", seats=(key,), fix=fix))
        login_of = {k: self.login_of(p) for k, p in holders.items()}
        open_now = course.closed is None
        # seat → its own device files; file → the seats it belongs to (a MIG parent GPU is shared)
        own: dict[str, tuple[str, ...]] = {}
        seats_of: dict[str, set[str]] = {}
        files_of: dict[str, tuple[str, ...]] = {}
        wanted: dict[str, set[str]] = {}
        missing: dict[str, InputError] = {}
        for seat in seats:
            uuid = seat.device_uuid or adopted.get(seat.key)
            if not uuid:
                changes.notes.append(f"seat {seat.key} has no device on this host yet: add it from nvidia-smi")
                continue
            try:
                files, shared = self._seat_files(seat, uuid)
            except InputError as exc:  # one seat's device is missing: the others are still delivered
                missing[seat.key] = exc
                add(step("seat.device", seat.key, exc.what, "grant", seats=(seat.key,), fix=exc.fix or ""))
                continue
            own[seat.key], files_of[seat.key] = files, (*files, *shared)
            for f in (*files, *shared):
                seats_of.setdefault(f, set()).add(seat.key)
                wanted.setdefault(f, set())
                if seat.key in holders:
                    wanted[f].add(login_of[seat.key])
        deleted = course.course is None or self.course in self.store.agents.pending_deletions()
        known = self._known_logins(course, deleted=deleted)
        every = self.machine.course_accounts()
        accounts = {a.login: a for a in every if a.course == self.course and a.login in known}
        foreign = {a.login: a.uid for a in every if a.course != self.course} if kept else {}

        def keep_of(f: str) -> dict[str, int]:
            """Other courses' holders that keep device file ``f`` (module ``others``): login → uid."""
            return {x: foreign[x] for x in kept.get(f, ()) if x in foreign}

        for login in login_of.values():  # one made by hand or for another course (refused at account.add)
            found = self.machine.account(login) if login not in accounts else None  # each reads /etc/shadow
            if found is not None:
                accounts[login] = found
        uid_of = {a.login: a.uid for a in accounts.values()}
        procs = self.machine.processes({a.uid for a in accounts.values()})
        holding_logins = set(login_of.values())
        reason_gone = (
            "the course is deleted"
            if course.course is None
            else ("the course is archived" if course.archived else None)
        )

        seat_files = {f for files in own.values() for f in files}
        # revoke: people who hold no seat here any more (ending their processes frees the seats they hold
        # open: the next holder's grant on those seats waits for it)
        for a in sorted(accounts.values(), key=lambda x: x.login):
            if a.login in holding_logins or a.course != self.course:
                continue
            why = reason_gone or f"{a.login} holds no seat on {self.host or 'this host'} now"
            if (self.keys_dir / a.login).exists():
                add(step("key.remove", a.login, why, "revoke", login=a.login))
            if not a.locked:
                add(step("account.lock", a.login, why, "revoke", login=a.login))
            pids = {pid for pid, u in procs.items() if u == a.uid}
            if pids:
                held = {f for files in self.machine.open_files(pids, seat_files).values() for f in files}
                lost = tuple(sorted({k for f in held for k in seats_of.get(f, ())}))
                add(step("processes.end", a.login, why, "revoke", login=a.login, seats=lost))
            if self._slice(a.uid).exists():
                add(step("slice.remove", a.login, why, "revoke", login=a.login, uid=a.uid))
            if deleted:  # last, once its processes have ended: the account and its home folder go
                add(step("account.remove", a.login, "the course is deleted: its accounts go with it", "revoke",
                         login=a.login))  # fmt: skip
        if not open_now:
            for login in sorted(login_of.values()):
                shut = accounts.get(login)
                if shut is not None and not shut.locked:
                    add(step("account.lock", login, f"access is closed: {course.closed}", "revoke", login=login))
                if shut is not None and any(u == shut.uid for u in procs.values()):
                    add(step("processes.end", login, f"access is closed: {course.closed}", "revoke", login=login))
        # revoke: device files open to anyone but their seat's holder. A revoke only takes away: it keeps
        # the wanted logins that may open the file already; a new holder (a move onto a seat whose old
        # holder's process still runs) is let in by the grant, after that process has ended.
        current: dict[str, set[int] | None] = {f: self.machine.acl_users(Path(f)) for f in sorted(wanted)}
        for f, want_logins in sorted(wanted.items()):
            extra = keep_of(f)
            want_uids = {uid_of[x] for x in want_logins if x in uid_of} | set(extra.values())
            have = current[f]
            if have is None or have - want_uids:
                why = "only the seat's holder may open it" if want_logins else "nobody holds this seat now"
                may = set(uid_of.values()) if have is None else have  # None: anyone may open it now
                keep = sorted(
                    {x for x in want_logins if uid_of.get(x) in may} | {x for x, u in extra.items() if u in may}
                )
                add(step("device.revoke", f, why, "revoke", seats=tuple(sorted(seats_of[f])), path=f, logins=keep))
        # revoke: a holder's process that still holds a device file that is not theirs (a move)
        mine = {login_of[k]: {f for f in (*own.get(k, ()),)} for k in login_of}
        holder_pids = {pid: uid for pid, uid in procs.items() if uid in {uid_of.get(x) for x in holding_logins}}
        for pid, held in sorted(self.machine.open_files(set(holder_pids), seat_files).items()):
            login = next(x for x, u in uid_of.items() if u == holder_pids[pid])
            stray = sorted(held - mine.get(login, set()))
            if stray:
                lost = tuple(sorted({k for f in stray for k in seats_of.get(f, ())}))
                why = f"{login} moved: the process still holds {', '.join(lost)}"
                add(step("processes.end", f"{login} pid {pid}", why, "revoke", seats=lost, pids=[pid]))
        if not holders:
            self._record_steps(course, seats, {}, {}, adopted, changes)
            if not course.active or not seats:
                changes.notes.extend(self._plan_shared_files(remove=True, changes=changes))
            if deleted and state_dir(self.course).exists():
                why = "the course is deleted: its probe key goes with it"
                add(step("probe.remove", str(state_dir(self.course)), why, "revoke"))
            self._request_steps(course, changes, refused)
            return changes

        # grant: accounts, keys, slices, devices, environment
        if not _group_exists(s.group):
            add(step("group.add", s.group, "course accounts belong to it", "grant"))
        dropin = delivery.sshd_dropin(str(self.keys_dir), s.group)
        if not self.machine.file_is(Path(s.sshd_dropin), dropin):
            add(step("sshd.set", s.sshd_dropin, "sshd reads each course account's keys from gpuseat's folder", "grant",
                     text=dropin))  # fmt: skip
        probe_pub = self._probe_public()
        members = _members(s.group)
        for seat_key, p in sorted(holders.items()):
            login = login_of[seat_key]
            why = f"{p.key} holds {seat_key}"
            uuid = by_key[seat_key].device_uuid or adopted.get(seat_key)
            if not uuid or seat_key in missing:
                continue
            acct = accounts.get(login)
            if acct is None or login not in members:
                add(step("account.add", login, why, "grant", participant=p.key, seats=(seat_key,), login=login))
            if open_now and (acct is None or acct.locked):
                add(step("account.unlock", login, why, "grant", participant=p.key, seats=(seat_key,), login=login))
            elif acct is None:  # useradd makes it unlocked: locked before its key is written, until access opens
                add(step("account.lock", login, f"access is closed: {course.closed}", "grant", participant=p.key,
                         seats=(seat_key,), login=login))  # fmt: skip
            text = delivery.authorized_keys(p.ssh_key, probe_pub, uuid)
            if not self.machine.file_is(self.keys_dir / login, text):
                add(step("key.set", login, f"{why} ({uuid})", "grant", participant=p.key, seats=(seat_key,),
                         login=login, text=text))  # fmt: skip
            if not p.ssh_key:
                changes.notes.append(f"{p.key} has no SSH key in the roster: they cannot log in until they add one")
            allow = self._allow(own.get(seat_key, ()), files_of.get(seat_key, ()))
            slice_text = delivery.slice_dropin(allow, cpu_quota=s.cpu_quota, memory_max=s.memory_max)
            if acct is None or not self.machine.file_is(self._slice(acct.uid), slice_text):
                add(step("slice.set", login, f"{why}: its devices only", "grant", participant=p.key, seats=(seat_key,),
                         login=login, text=slice_text))  # fmt: skip
        for f, want_logins in sorted(wanted.items()):
            if not want_logins:
                continue
            want_uids = {uid_of[x] for x in want_logins if x in uid_of}
            extra = keep_of(f)
            if len(want_uids) < len(want_logins) or (current[f] or set()) != want_uids | set(extra.values()):
                owners = ", ".join(sorted(want_logins))
                add(step("device.grant", f, f"{owners} may open it", "grant", seats=tuple(sorted(seats_of[f])),
                         path=f, logins=sorted(want_logins | set(extra))))  # fmt: skip
        pins = {login_of[k]: by_key[k].device_uuid or adopted.get(k) or "" for k in holders}
        profile = delivery.profile_script(pins)
        if not self.machine.file_is(self.profile_d, profile):
            add(
                step("profile.set", str(self.profile_d), "login shells get CUDA_VISIBLE_DEVICES", "grant", text=profile)
            )
        self._record_steps(course, seats, holders, login_of, adopted, changes)
        if s.ssh_host is None and not any((course.access.get(k) or {}).get("host") for k in holders):
            changes.notes.append(
                "no way in is set: participant pages cannot say where to connect; "
                + delivery.address_advice("SEAT", self.name)
            )
        self._request_steps(course, changes, refused)
        return changes

    def _plan_from_store(self, course: CourseState, seats: list[SeatView]) -> Changes:
        changes = Changes(self.name, self.course, self.host)
        changes.notes.append(
            f"{self.settings.nvidia_smi} is not on this machine: planned from the store alone, as if "
            f"{self.host or 'the server'} had nothing yet; run `gpuseat apply --dry-run` there to see what differs"
        )
        if not course.active:
            changes.notes.append("the course is archived or deleted: every account of it is locked there")
            return changes
        here = {seat.key for seat in seats}
        for seat, p in course.holders():
            if seat.key not in here:
                continue
            login, why = self.login_of(p), f"{p.key} holds {seat.key}"
            add = changes.steps.append
            add(self._step("account.add", login, why, "grant", participant=p.key, seats=(seat.key,), login=login,
                           from_store=True))  # fmt: skip
            add(self._step("key.set", login, f"{why} ({seat.device_uuid or 'device chosen there'})", "grant",
                           participant=p.key, seats=(seat.key,), login=login, text="", from_store=True))  # fmt: skip
            add(self._step("device.grant", seat.device_uuid or seat.key, f"only {login} may open it", "grant",
                           seats=(seat.key,), path="", logins=[login], from_store=True))  # fmt: skip
            access = self._access(dict(course.access.get(seat.key) or {}), login, p.key, seat.device_uuid)
            add(self._step("seat.record", seat.key, f"{p.key} can log in as {login}", "record",
                           participant=p.key, seats=(seat.key,), access=access.to_dict()))  # fmt: skip
            if not p.ssh_key:
                changes.notes.append(f"{p.key} has no SSH key in the roster: they cannot log in until they add one")
        if self.settings.ssh_host is None and not any((course.access.get(s.key) or {}).get("host") for s in seats):
            changes.notes.append(f"no way in is set: {delivery.address_advice('SEAT', self.name)}")
        return changes

    def _known_logins(self, course: CourseState, *, deleted: bool) -> set[str]:
        """The logins this course may have here: its participants' and those the engine last found
        holding access (a deleted course has no roster left); for a course being deleted, the logins its
        participants had before a new ``unix_user`` too (locked, they held nothing, and their accounts and
        homes were left behind when the course went). Another store's course of the same key on this host,
        or an account made by hand, is never touched."""
        known = {self.login_of(p) for p in course.people.values()}
        known |= {h["login"] for h in self.store.agents.holdings(self.course) if h["engine"] == self.name}
        if deleted and course.course is not None:
            known |= self.store.roster.logins_left(self.course).keys()
        return known

    def reset_mark(self, request: int) -> Path:
        """Where a reset of seat request ``request`` is marked done on this machine (root-only, with the probe key;
        removed with the course)."""
        return state_dir(self.course) / "resets" / str(request)

    def _probe_public(self) -> str | None:
        """The probe key's public line (made now, unless this is a dry run: then read if it exists)."""
        if not self.runner.dry_run:
            return self.machine.ensure_probe_key(state_dir(self.course))[1]
        pub = state_dir(self.course) / "probe_ed25519.pub"
        return pub.read_text().strip() if pub.exists() else None

    def _plan_shared_files(self, *, remove: bool, changes: Changes) -> list[str]:
        if remove and self.profile_d.exists():
            changes.steps.append(
                self._step("profile.remove", str(self.profile_d), "nobody holds a seat here", "revoke")
            )
        return []

    def _record_steps(
        self,
        course: CourseState,
        seats: list[SeatView],
        holders: dict[str, ParticipantView],
        login_of: dict[str, str],
        adopted: dict[str, str],
        changes: Changes,
    ) -> None:
        if course.course is None or course.archived:
            return  # nothing to record on a course that is gone or read-only
        for seat in seats:
            if seat.key in adopted:
                changes.steps.append(
                    self._step(
                        "seat.adopt",
                        seat.key,
                        f"device {adopted[seat.key]} on {self.host}",
                        "record",
                        seats=(seat.key,),
                        uuid=adopted[seat.key],
                    )
                )
            old = dict(course.access.get(seat.key) or {})
            p = holders.get(seat.key)
            if p is None:
                if old.get("holder") or old.get("user"):
                    base = {k: old.get(k) for k in ("kind", "host", "port", "jump_host", "device_uuid")}
                    changes.steps.append(self._clear_step(seat.key, access=base))
                continue
            uuid = seat.device_uuid or adopted.get(seat.key)
            access = self._access(old, login_of[seat.key], p.key, uuid).to_dict()
            if old != access or seat.state != "running":
                why = f"{p.key} can log in as {login_of[seat.key]}"
                changes.steps.append(self._record_step(seat.key, p.key, why, access=access))

    def _allow(self, files: Sequence[str], mine: Sequence[str]) -> list[tuple[str, str]]:
        """The slice's DeviceAllow= lines: the seat's own ``files``, the others of ``mine`` (every file the
        seat uses, a MIG parent GPU too) and the shared nodes."""
        root = self.settings.dev_root.rstrip("/")
        shared = [f for f in mine if f not in files]
        nodes = [f"{root}/{n}" for n in SHARED_NODES]
        return [(_char_path(f), "rw") for f in (*files, *sorted(shared), *nodes) if os.path.exists(f)]

    def _slice(self, uid: int) -> Path:
        return Path(self.settings.systemd_dir) / f"user-{uid}.slice.d" / "50-gpuseat.conf"

    def _access(self, old: dict[str, Any], login: str, holder: str, uuid: str | None) -> Access:
        s = self.settings
        host = s.ssh_host or old.get("host")
        port = s.ssh_port or old.get("port")
        jump = s.jump_host or old.get("jump_host")
        return ssh_access(host, login, holder, uuid, port, jump)

    # -- apply -----------------------------------------------------------------------------------------

    def do(self, step: Step) -> str | None:
        """Carry out one planned step (each is a no-op when the machine already is so)."""
        m, d, s = self.machine, step.data, self.settings
        login = str(d.get("login") or step.target)
        if d.get("from_store"):  # a dry run away from the server: the plan's note says so once
            return None
        match step.action:
            case "group.add":
                m.ensure_group(s.group)
            case "sshd.set":
                if m.put_file(Path(s.sshd_dropin), d["text"]):
                    return m.reload_sshd()
            case "account.add":
                m.ensure_group(s.group)
                m.add_account(login, self.course, s.group)
            case "account.unlock":
                m.set_locked(login, False)
            case "account.lock":
                m.set_locked(login, True)
            case "account.remove":
                m.remove_account(login, self.course)
            case "key.set":
                m.put_file(self.keys_dir / login, d["text"])
            case "key.remove":
                m.remove_file(self.keys_dir / login)
            case "slice.set":
                found = m.account(login)
                if found is None:
                    raise InputError(f"no account {login}", where=step.target)
                m.put_file(self._slice(found.uid), d["text"])
            case "slice.remove":
                m.remove_file(self._slice(int(d["uid"])))
            case "processes.end":
                if "pids" in d:
                    m.end_processes(set(d["pids"]))
                else:
                    gone = m.account(login)
                    left: dict[int, int] = {}
                    # SIGKILL is asynchronous: give the kernel a moment. A login being set up as the kill ran
                    # (sshd forks, then the child becomes the user) comes after it: the user must have no
                    # process for a short while, killed again as often as one shows up (the account is locked
                    # and its key gone by now, so no new session starts)
                    quiet = 0
                    for _ in range(60 if gone and not self.runner.dry_run else 0):
                        left = m.processes({gone.uid}) if gone else {}
                        quiet = 0 if left else quiet + 1
                        if quiet >= 4:  # none for 0.2 s
                            break
                        if left:
                            m.end_user(login)
                        time.sleep(0.05)
                    if self.runner.dry_run:
                        m.end_user(login)
                    if left:
                        raise InputError(f"{len(left)} process(es) of {login} survived SIGKILL", where=step.target)
            case "device.revoke" | "device.grant":
                uids = set()
                for x in d["logins"]:
                    found = m.account(x)
                    if found is not None:
                        uids.add(found.uid)
                m.set_acl(Path(d["path"]), uids)
            case "profile.set":
                m.put_file(self.profile_d, d["text"])
            case "profile.remove":
                m.remove_file(self.profile_d)
            case "probe.remove":
                if not self.runner.dry_run:
                    shutil.rmtree(state_dir(self.course), ignore_errors=True)
            case "seat.adopt":
                seat = self.store.seats.get_seat(self.course, step.target)
                self.store.seats.set_seat_state(
                    self.course,
                    step.target,
                    seat.state,
                    reason=f"device {d['uuid']} on {self.host}",
                    device_uuid=d["uuid"],
                    actor=AGENT_ACTOR,
                )
            case "seat.record" | "seat.clear":
                self.record_way_in(step)
            case "seat.device":  # planned so that apply names the seat and fails it (exit 2); the rest goes on
                raise InputError(step.why, where=f"seat {step.target}", fix=d.get("fix") or None)
            case (
                "request.record" | "seat.stop" | "seat.warn" | "seat.check" | "seat.connected" | "home.reset"
                | "session.report"
            ):  # fmt: skip
                return self._do_request(step)
            case _:
                raise InputError(f"the host engine has no step {step.action!r}", where="plan")
        return None

    # -- observe, check, connect -----------------------------------------------------------------------

    def observe(self, course: CourseState) -> list[Holding]:
        """Accounts of this course that can log in, their key files and running processes."""
        out = []
        deleted = course.course is None or self.course in self.store.agents.pending_deletions()
        known = self._known_logins(course, deleted=deleted)
        accounts = [a for a in self.machine.course_accounts() if a.course == self.course and a.login in known]
        procs = self.machine.processes({a.uid for a in accounts})
        seat_of = {delivery.login_name(p.key, p.unix_user): (p.key, p.seat) for p in course.people.values()}
        for a in accounts:
            who, seat = seat_of.get(a.login, (None, None))
            if not a.locked:
                out.append(Holding(self.name, "account", a.login, who, seat, self.host))
            elif deleted:  # a deleted course waits until its accounts are removed, not only locked
                out.append(Holding(self.name, "account", a.login, who, seat, self.host, "locked, to be removed"))
            if (self.keys_dir / a.login).exists():
                out.append(Holding(self.name, "key", a.login, who, seat, self.host))
            n = sum(1 for u in procs.values() if u == a.uid)
            if n:
                out.append(Holding(self.name, "process", a.login, who, seat, self.host, f"{n} process(es)"))
        return out

    def probe(self, seat: SeatView, participant: ParticipantView) -> Readiness:
        """Log in as the participant (gpuseat's loopback probe key) and list what they can see; first, as root, that
        nobody else can open the seat's device files or holds them open (module ``sole``)."""
        login = self.login_of(participant)
        now = datetime.now(UTC)
        where = f" on {seat.host}" if seat.host else ""

        def broken(reason: str, evidence: str = "", visible: tuple[str, ...] = ()) -> Readiness:
            return Readiness(self.course, seat.key, participant.key, "broken", reason, evidence, visible, now, "host")

        here = self.runner.which(self.settings.nvidia_smi) is not None  # else: "run this check on the server"
        held = self._held() if here else []
        yielded = others.shared(self.course, held)[0].get(seat.key)
        if yielded is not None:  # what apply says: another course's older holder keeps this GPU
            return broken(others.refusal(seat.key, participant.key, yielded)[0])
        account = self.machine.account(login)
        if account is None:
            run_on = seat.host or "the GPU server"
            return broken(f"no account {login}{where}: not applied yet, or run this check on {run_on}")
        if account.locked:
            return broken(f"account {login} is locked{where} (outside an access window, or not applied yet)")
        keys_file = self.keys_dir / login
        installed = keys_file.read_text() if keys_file.exists() else ""
        if not participant.ssh_key:
            return broken(f"{participant.key} has no SSH key: add one on their page or in the roster")
        if participant.ssh_key.split()[1] not in installed:
            return broken(f"account {login} has no SSH key installed yet (the agent applies it)", installed)
        want = seat.device_uuid
        note = ""
        if want:
            try:
                files = self._seat_files(seat, want)[0]
                others_too = sole.intruders(self.machine, files, sole.granted(held, files) | {account.uid}, self.course)
            except InputError as exc:
                if "does not exist on this host" in exc.what:
                    note = f"device {want} is not on this host"
                else:
                    return broken(exc.what)
            else:
                if others_too:  # the adversary's side: nobody but root and the holder may open the seat
                    return broken(f"seat {seat.key} is {others_too}")
        with self._lock:  # probes run in parallel; the key pair is made once
            key, _pub = self.machine.ensure_probe_key(state_dir(self.course))
        script = delivery.PROBE_SCRIPT.replace("NVIDIA_SMI", shlex.quote(self.settings.nvidia_smi))
        stored = self.store.delivery.access_of(self.course).get(seat.key) or {}
        port = self.settings.probe_port or self.settings.ssh_port or int(stored.get("port") or 22)
        done = self.machine.ssh_run(key, login, self.settings.probe_host, port, script, timeout=self.settings.timeout)
        evidence = (done.stdout + done.stderr).strip()[-4000:]
        if done.returncode == 124:
            return broken(f"the probe as {login} did not answer within {self.settings.timeout:g} s", evidence)
        if done.returncode == 255:
            return broken(f"SSH login as {login} failed: {done.stderr.strip()[:200]}", evidence)
        seen = delivery.parse_probe(done.stdout)
        state, reason = judge(want, seen.visible)
        if state == "ready" and want and seen.cuda_visible != want:
            state, reason = "broken", f"CUDA_VISIBLE_DEVICES is {seen.cuda_visible or 'unset'}, not the seat's {want}"
        if state == "broken" and note:
            reason = f"{reason}; {note}"
        return Readiness(self.course, seat.key, participant.key, state, reason, evidence, seen.visible, now, "host")

    def refused(self, participant: ParticipantView) -> str | None:
        """Exclusivity: None when ``participant`` (a previous or released holder) cannot log in here;
        else what still lets them in."""
        login = self.login_of(participant)
        a = self.machine.account(login)
        if a is None or a.locked:
            return None
        if (self.keys_dir / login).exists():
            return f"{login} still has a key and an unlocked account"
        return None

    # -- seat requests (issue 40): start, stop, restart, reset, a new key; a stop at 0 seat hours -------
    # Kept apart from the access plan above: it only reads the requests and the run state from the
    # store, adds its own steps and drops the unlock of a seat that is stopped.

    def _request_steps(self, course: CourseState, changes: Changes, refused: dict[str, str]) -> None:
        from gpuseat.engines.host import requests

        requests.plan_requests(self, course, changes, refused)

    def _do_request(self, step: Step) -> str | None:
        from gpuseat.engines.host import requests

        return requests.do_request(self, step)


def _group_exists(name: str) -> bool:
    import grp

    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def _members(group: str) -> frozenset[str]:
    """The logins in ``group`` (none when there is no such group), read once a plan."""
    import grp

    try:
        return frozenset(grp.getgrnam(group).gr_mem)
    except KeyError:
        return frozenset()


def _char_path(path: str) -> str:
    """``/dev/char/MAJOR:MINOR`` for a device file: what systemd's DeviceAllow= resolves without udev."""
    st = os.stat(path)
    return f"/dev/char/{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
