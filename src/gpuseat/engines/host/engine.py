"""The shared-host engine: one Linux GPU server, each participant on their own GPU or MIG instance.

``gpuseat host up --course C`` (as root, on the GPU server) makes the machine match the store:
each seat holder gets a Unix account (roster ``unix_user``, else a safe slug), their SSH key in a
root-owned keys file that also sets ``CUDA_VISIBLE_DEVICES`` to their seat's UUID, and read/write
access (POSIX ACLs) to exactly their seat's device files: ``/dev/nvidiaN`` for a whole GPU, the GI
and CI capability files ``/dev/nvidia-caps/nvidia-capN`` for MIG (from
``/proc/driver/nvidia-caps/mig-minors``). Per-user systemd slice drop-ins (``DevicePolicy=closed``,
``DeviceAllow=``) add the cgroup layer on systemd hosts. People who no longer hold a seat (release,
move to another host, course end) lose their key and their account is locked.

It is a reconcile: every run computes the whole wanted state and changes only what differs, so a
second run changes nothing. Device and proc roots are settings so the tests run it on stand-in
device files.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuseat.core import delivery
from gpuseat.errors import InputError
from gpuseat.services import host_os
from gpuseat.services.engine import Access, Readiness, judge

if TYPE_CHECKING:
    from gpuseat.services.courses import CourseStore, ParticipantView, SeatView

SETTINGS = (
    "host",
    "dev_root",
    "proc_root",
    "nvidia_smi",
    "keys_dir",
    "sshd_dropin",
    "profile_d",
    "systemd_dir",
    "group",
    "ssh_host",
    "ssh_port",
    "jump_host",
    "probe_host",
    "probe_port",
    "cpu_quota",
    "memory_max",
    "timeout",
)


@dataclass
class HostReport:
    """What one ``host up``/``down`` run did (empty ``changes``: nothing to change)."""

    course: str
    host: str | None
    changes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seats: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "course": self.course,
            "host": self.host,
            "changes": self.changes,
            "warnings": self.warnings,
            "seats": self.seats,
        }


@dataclass(frozen=True)
class _Holder:
    seat: SeatView
    participant: ParticipantView
    user: str
    device: delivery.SeatDevice
    files: tuple[str, ...]
    shared: tuple[str, ...]


def state_dir(course: str) -> Path:
    """Where the engine keeps its probe key and the settings of the last ``host up`` for a course."""
    from gpuseat.paths import data_dir

    return data_dir() / "host" / course


class HostEngine:
    """The ``host`` seat engine (see the module docstring); settings are plain strings."""

    name = "host"

    def __init__(self, store: CourseStore, course: str | None, **settings: str) -> None:
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise InputError(
                f"unknown host engine setting(s): {', '.join(unknown)}",
                where="host engine",
                fix=f"use: {', '.join(SETTINGS)}",
            )
        self.store = store
        self.course = store.get_course(course).key
        saved = self._saved()
        merged = {**saved, **{k: v for k, v in settings.items() if v not in (None, "")}}
        self.settings: dict[str, str] = merged
        s = merged.get
        self.dev_root = s("dev_root") or "/dev"
        self.proc_root = s("proc_root") or "/proc"
        self.nvidia_smi = s("nvidia_smi") or "nvidia-smi"
        self.keys_dir = Path(s("keys_dir") or "/etc/gpuseat/authorized_keys")
        self.sshd_dropin = Path(s("sshd_dropin") or "/etc/ssh/sshd_config.d/gpuseat.conf")
        self.profile_d = Path(s("profile_d") or f"/etc/profile.d/gpuseat-{self.course}.sh")
        self.systemd_dir = Path(s("systemd_dir") or "/etc/systemd/system")
        self.group = s("group") or "gpuseat"
        self.host = s("host")
        self.ssh_host = delivery.check_host(s("ssh_host") or "", field="ssh_host") if s("ssh_host") else None
        self.ssh_port = _int(s("ssh_port"), "ssh_port")
        self.jump_host = s("jump_host")
        self.probe_host = s("probe_host") or "127.0.0.1"
        self.probe_port = _int(s("probe_port"), "probe_port") or self.ssh_port
        self.timeout = float(s("timeout") or 20)
        for name in ("dev_root", "proc_root", "keys_dir", "sshd_dropin", "profile_d", "systemd_dir", "nvidia_smi"):
            value = str(getattr(self, name))
            if not value or any(c.isspace() or ord(c) < 32 for c in value):
                raise InputError(
                    f"{name} {value!r} is empty or has spaces or control characters",
                    where=f"--{name.replace('_', '-')}",
                    fix="give a plain path (it is written into sshd and systemd files)",
                )
        self._lock = threading.Lock()
        self._view: tuple[dict[str, delivery.SeatDevice], dict[tuple[int, int, int | None], int]] | None = None
        if not delivery.USER_RE.match(self.group):
            raise InputError(f"group {self.group!r}", where="group", fix="a Unix group name like gpuseat")

    # -- settings kept between runs ----------------------------------------------------------------

    def _saved(self) -> dict[str, str]:
        path = state_dir(self.course) / "settings.json"
        try:
            data = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return {k: str(v) for k, v in data.items() if k in SETTINGS and v is not None}

    def _save(self) -> None:
        folder = state_dir(self.course)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        host_os.write_file(folder / "settings.json", json.dumps(self.settings, indent=1, sort_keys=True), 0o600)

    # -- what should be --------------------------------------------------------------------------

    def _seats(self) -> list[SeatView]:
        seats = [s for s in self.store.seats(self.course) if s.engine == "host"]
        hosts = sorted({s.host or "" for s in seats})
        if not seats:
            raise InputError(
                f"course {self.course!r} has no seats on the host engine",
                where="--course",
                fix="add them: gpuseat seats add --inventory SERVER.toml --engine host (or --from-nvidia-smi)",
            )
        if self.host is None:
            if len(hosts) > 1:
                raise InputError(
                    f"the course's host seats are on several hosts: {', '.join(hosts)}",
                    where="--host",
                    fix="say which one this server is with --host NAME",
                )
            self.host = hosts[0] or None
        elif self.host not in hosts:
            raise InputError(
                f"host {self.host!r} is not in course {self.course!r} (its host seats are on: {', '.join(hosts)})",
                where="--host",
                fix="give the host name the seats were added with (gpuseat seats status lists them)",
            )
        return [s for s in seats if (s.host or None) == self.host]

    def _holders(
        self, seats: list[SeatView], people: dict[str, ParticipantView]
    ) -> tuple[list[_Holder], dict[str, tuple[str, ...]]]:
        devices = host_os.discover(self.nvidia_smi)
        minors_path = Path(self.proc_root) / "driver" / "nvidia-caps" / "mig-minors"
        minors = delivery.parse_mig_minors(minors_path.read_text()) if minors_path.exists() else {}
        out = []
        every: dict[str, tuple[str, ...]] = {}
        seats = self._adopt(seats, devices)
        for seat in seats:
            if not seat.device_uuid:
                raise InputError(
                    f"seat {seat.key} has no device UUID",
                    where=f"seat {seat.key}",
                    fix="add the seats from the server: gpuseat seats add --from-nvidia-smi FILE --engine host",
                )
            dev = devices.get(seat.device_uuid)
            if dev is None:
                raise InputError(
                    f"seat {seat.key}: device {seat.device_uuid} does not exist on this host "
                    f"(nvidia-smi lists {len(devices)} device(s): {', '.join(sorted(devices)[:6])})",
                    where=f"seat {seat.key}",
                    fix="check the seat's UUID against `nvidia-smi -L` and re-add the seat",
                )
            files = delivery.device_files(dev, minors, self.dev_root)
            shared = delivery.shared_files(dev, self.dev_root)
            for f in (*files, *shared):
                if not os.path.exists(f):
                    raise InputError(
                        f"seat {seat.key}: device file {f} does not exist",
                        where=f"seat {seat.key}",
                        fix="load the driver with nv_cap_enable_devfs=1 and run nvidia-modprobe, then re-run",
                    )
            every[seat.key] = files + shared
            if seat.participant is None:
                continue
            p = people[seat.participant]
            out.append(_Holder(seat, p, self.user_of(p), dev, files, shared))
        return out, every

    def _adopt(self, seats: list[SeatView], devices: dict[str, delivery.SeatDevice]) -> list[SeatView]:
        """Seats carved from an inventory have no UUID yet: give each a free device of its profile."""
        wanted = [(s.key, s.kind, s.profile) for s in seats if not s.device_uuid and s.kind in ("mig", "gpu")]
        if not wanted:
            return seats
        taken = {s.device_uuid for s in seats if s.device_uuid}
        picked = delivery.adopt(wanted, devices, taken)
        for key, uuid in picked.items():
            seat = next(s for s in seats if s.key == key)
            self.store.set_seat_state(
                self.course, key, seat.state, reason=f"device {uuid} on {self.host}", device_uuid=uuid
            )
        return [s for s in self.store.seats(self.course) if s.key in {x.key for x in seats}]

    def user_of(self, p: ParticipantView) -> str:
        """The participant's Unix user: the roster's ``unix_user``, else a safe slug of their key."""
        return p.unix_user or delivery.safe_user(p.key)

    # -- up / down / status ------------------------------------------------------------------------

    def up(self, *, actor: str = "gpuseat") -> HostReport:
        """Make the host match the store (accounts, keys, device ACLs, env, slices); idempotent."""
        seats = self._seats()
        people = {p.key: p for p in self.store.participants(self.course)}
        holders, every = self._holders(seats, people)
        report = HostReport(self.course, self.host)
        ch = report.changes
        if host_os.ensure_group(self.group):
            ch.append(f"group {self.group} created")
        _key, probe_pub = host_os.ensure_probe_key(state_dir(self.course))
        self.keys_dir.mkdir(parents=True, exist_ok=True)
        if host_os.write_file(self.sshd_dropin, delivery.sshd_dropin(str(self.keys_dir), self.group)):
            ch.append(f"wrote {self.sshd_dropin} (reload sshd once: systemctl reload ssh)")
        held_users: set[str] = set()
        uids: dict[str, set[int]] = {}
        pins: dict[str, str] = {}
        for h in holders:
            if host_os.ensure_user(h.user, self.course, self.group):
                ch.append(f"account {h.user} ready")
            if host_os.set_expired(h.user, False):
                ch.append(f"account {h.user} unlocked")
            uid = _uid(h.user)
            held_users.add(h.user)
            pins[h.user] = h.device.uuid
            text = delivery.authorized_keys(h.participant.ssh_key, probe_pub, h.device.uuid)
            if host_os.write_file(self.keys_dir / h.user, text):
                ch.append(f"keys of {h.user} → {h.seat.key} ({h.device.uuid})")
            if not h.participant.ssh_key:
                report.warnings.append(f"{h.participant.key} has no ssh_key in the roster: they cannot log in")
            for f in h.files:
                uids.setdefault(f, set()).add(uid)
            for f in h.shared:
                uids.setdefault(f, set()).add(uid)
            root = self.dev_root.rstrip("/")
            shared_nodes = [f"{root}/{n}" for n in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")]
            allow = [(_char_path(f), "rw") for f in (*h.files, *h.shared, *shared_nodes) if os.path.exists(f)]
            slice_text = delivery.slice_dropin(
                allow, cpu_quota=self.settings.get("cpu_quota"), memory_max=self.settings.get("memory_max")
            )
            if host_os.write_file(self._slice(uid), slice_text):
                ch.append(f"slice user-{uid}.slice: devices of {h.seat.key}")
        for files in every.values():  # every seat device file, held or not: only its holder may open it
            for f in files:
                uids.setdefault(f, set())
        for f, want in sorted(uids.items()):
            if host_os.set_acl(Path(f), want):
                ch.append(f"{f}: open for {', '.join(_names(want)) or 'root only'}")
        ch += self._revoke_others(people, held_users)
        if host_os.write_file(self.profile_d, delivery.profile_script(pins)):
            ch.append(f"wrote {self.profile_d}")
        for h in holders:
            access = self._access(h.seat, h.user)
            if self.store.record_delivery(
                self.course, h.seat.key, access=access, state="running", reason="host up", actor=actor
            ):
                ch.append(f"seat {h.seat.key}: running for {h.participant.key}")
            report.seats.append({"seat": h.seat.key, "participant": h.participant.key, "user": h.user})
        if self.ssh_host is None and not any((self._stored_access(h.seat) or {}).get("host") for h in holders):
            report.warnings.append(
                "no ssh_host: participant pages cannot say where to connect; set ssh_host in the inventory "
                "or pass --ssh-host HOST"
            )
        self.settings.update({"host": self.host or ""})
        self._save()
        return report

    def down(self, *, actor: str = "gpuseat") -> HostReport:
        """Course end: every holder loses keys and account access; device files go back to root only."""
        seats = self._seats()
        people = {p.key: p for p in self.store.participants(self.course)}
        report = HostReport(self.course, self.host)
        report.changes += self._revoke_others(people, set())
        devices = host_os.discover(self.nvidia_smi)
        minors_path = Path(self.proc_root) / "driver" / "nvidia-caps" / "mig-minors"
        minors = delivery.parse_mig_minors(minors_path.read_text()) if minors_path.exists() else {}
        for seat in seats:
            dev = devices.get(seat.device_uuid or "")
            if dev is None:
                continue
            for f in (*delivery.device_files(dev, minors, self.dev_root), *delivery.shared_files(dev, self.dev_root)):
                if os.path.exists(f) and host_os.set_acl(Path(f), set()):
                    report.changes.append(f"{f}: root only")
            if seat.state == "running" and self.store.record_delivery(
                self.course, seat.key, state="released", reason="host down", actor=actor
            ):
                report.changes.append(f"seat {seat.key}: released")
        if host_os.remove_file(self.profile_d):
            report.changes.append(f"removed {self.profile_d}")
        return report

    def _revoke_others(self, people: dict[str, ParticipantView], keep: set[str]) -> list[str]:
        out = []
        for p in people.values():
            name = self.user_of(p)
            if name in keep:
                continue
            entry = host_os.user(name)
            if entry is None or host_os.managed_by(entry) != self.course:
                if host_os.remove_file(self.keys_dir / name):
                    out.append(f"keys of {name} removed")
                continue
            if host_os.remove_file(self.keys_dir / name):
                out.append(f"keys of {name} removed")
            if host_os.set_expired(name, True):
                out.append(f"account {name} locked")
            if host_os.remove_file(self._slice(entry.pw_uid)):
                out.append(f"slice user-{entry.pw_uid}.slice removed")
        return out

    def _slice(self, uid: int) -> Path:
        return self.systemd_dir / f"user-{uid}.slice.d" / "50-gpuseat.conf"

    def _stored_access(self, seat: SeatView) -> dict[str, Any] | None:
        return self.store.access_of(self.course).get(seat.key)

    def _access(self, seat: SeatView, user: str) -> Access:
        old = self._stored_access(seat) or {}
        host = self.ssh_host or old.get("host")
        port = self.ssh_port or old.get("port")
        jump = self.jump_host or old.get("jump_host")
        command = delivery.ssh_command(host, user, port, jump) if host else None
        return Access(
            kind="ssh", host=host, port=port, user=user, jump_host=jump, command=command, device_uuid=seat.device_uuid
        )

    # -- the SeatEngine interface ------------------------------------------------------------------

    def provision(self, seat: SeatView, participant: ParticipantView | None) -> Access | None:
        """Reconcile the whole host (cheap, idempotent) and return the seat's way in."""
        self.up()
        return self.connect(self.store.get_seat(self.course, seat.key))

    def connect(self, seat: SeatView) -> Access | None:
        """The stored way in (``host up`` writes it)."""
        stored = self._stored_access(seat)
        return Access.from_dict(stored) if stored else None

    def revoke(self, seat: SeatView, participant: ParticipantView) -> None:
        """The participant loses this host: their keys go, a gpuseat-made account is locked."""
        self._revoke_others({participant.key: participant}, set())

    def teardown(self, seat: SeatView) -> None:
        """Same as ``down`` for the whole course (one host's seats go together)."""
        self.down()

    def _probe_view(self) -> tuple[dict[str, delivery.SeatDevice], dict[tuple[int, int, int | None], int]]:
        """The host's devices and cap minors, read once per engine (one ``seats check`` run)."""
        with self._lock:
            if self._view is None:
                minors_path = Path(self.proc_root) / "driver" / "nvidia-caps" / "mig-minors"
                minors = delivery.parse_mig_minors(minors_path.read_text()) if minors_path.exists() else {}
                self._view = (host_os.discover(self.nvidia_smi), minors)
            return self._view

    def probe(self, seat: SeatView, participant: ParticipantView) -> Readiness:
        """Log in as the participant (gpuseat's loopback probe key) and list what they can see."""
        user = self.user_of(participant)
        now = datetime.now(UTC)

        def broken(reason: str, evidence: str = "", visible: tuple[str, ...] = ()) -> Readiness:
            return Readiness(self.course, seat.key, participant.key, "broken", reason, evidence, visible, now, "host")

        entry = host_os.user(user)
        if entry is None:
            return broken(f"no account {user} on this host (run gpuseat host up)")
        if host_os.expired(user):
            return broken(f"account {user} is locked (run gpuseat host up)")
        keys_file = self.keys_dir / user
        installed = keys_file.read_text() if keys_file.exists() else ""
        if not participant.ssh_key:
            return broken(f"account {user} has no SSH key: the roster gives {participant.key} no ssh_key")
        if participant.ssh_key.split()[1] not in installed:
            return broken(f"account {user} has no SSH key installed (run gpuseat host up)", installed)
        want = seat.device_uuid
        devices_note = ""
        if want:
            try:
                devices, minors = self._probe_view()
                dev = devices.get(want)
                if dev is None:
                    devices_note = f"device {want} is not on this host"
                else:
                    for f in (
                        *delivery.device_files(dev, minors, self.dev_root),
                        *delivery.shared_files(dev, self.dev_root),
                    ):
                        if not os.path.exists(f):
                            return broken(f"device file {f} of seat {seat.key} is missing")
            except InputError as exc:
                return broken(exc.what)
        with self._lock:  # probes run in parallel; the key pair is made once
            key, _pub = host_os.ensure_probe_key(state_dir(self.course))
        script = delivery.PROBE_SCRIPT.replace("NVIDIA_SMI", _sh_quote(self.nvidia_smi))
        port = self.probe_port or int((self._stored_access(seat) or {}).get("port") or 22)
        done = host_os.ssh_run(key, user, self.probe_host, port, script, timeout=self.timeout)
        evidence = (done.stdout + done.stderr).strip()[-4000:]
        if done.returncode == 124:
            return broken(f"the probe as {user} did not answer within {self.timeout:g} s", evidence)
        if done.returncode == 255:
            return broken(f"SSH login as {user} failed: {done.stderr.strip()[:200]}", evidence)
        seen = delivery.parse_probe(done.stdout)
        state, reason = judge(want, seen.visible)
        if state == "ready" and want and seen.cuda_visible != want:
            state, reason = "broken", f"CUDA_VISIBLE_DEVICES is {seen.cuda_visible or 'unset'}, not the seat's {want}"
        if state == "broken" and devices_note:
            reason = f"{reason}; {devices_note}"
        return Readiness(self.course, seat.key, participant.key, state, reason, evidence, seen.visible, now, "host")


def _int(value: str | None, name: str) -> int | None:
    if value in (None, ""):
        return None
    assert value is not None
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise InputError(f"{name} {value!r} is not a TCP port", where=name, fix="give a port between 1 and 65535")
    return int(value)


def _char_path(path: str) -> str:
    """``/dev/char/MAJOR:MINOR`` for a device file: what systemd's DeviceAllow= resolves without udev."""
    st = os.stat(path)
    return f"/dev/char/{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


def _uid(name: str) -> int:
    entry = host_os.user(name)
    assert entry is not None
    return entry.pw_uid


def _names(uids: set[int]) -> list[str]:
    import pwd

    out = []
    for u in sorted(uids):
        try:
            out.append(pwd.getpwuid(u).pw_name)
        except KeyError:
            out.append(str(u))
    return out


def _sh_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
