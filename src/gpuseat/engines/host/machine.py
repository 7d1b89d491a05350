"""The host engine's machine: accounts, files, device ACLs, processes, nvidia-smi and ssh on one Linux
GPU server.

Reads look at the machine directly (``pwd``, ``/etc/shadow``, ``/proc``) or run a read-only tool;
every change runs a well-known tool (``useradd``, ``usermod``, ``setfacl``, ``kill``) through the
engine's :class:`~gpuseat.engines.runner.Runner` with an argument list, never a shell, or writes one
file atomically. Each change is a no-op when the machine already is as asked, so a step done twice
(an agent killed mid-apply and restarted) does nothing the second time.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat
import struct
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from gpuseat.core.delivery import SeatDevice
from gpuseat.engines.runner import Completed, Ran, Runner
from gpuseat.errors import EngineError, InputError
from gpuseat.files import write_file

GECOS_PREFIX = "gpuseat course "


@dataclass(frozen=True)
class Account:
    """A Unix account as the engine sees it."""

    login: str
    uid: int
    course: str | None  # the course that made it (GECOS ``gpuseat course KEY``), else None
    locked: bool


class Machine:
    """One host's operating system, changed through ``runner`` (see the module docstring)."""

    def __init__(self, runner: Runner, *, shadow: Path = Path("/etc/shadow")) -> None:
        self.runner = runner
        self.shadow = shadow

    # -- accounts --------------------------------------------------------------------------------------

    def account(self, login: str) -> Account | None:
        """The account ``login`` (None when there is none)."""
        try:
            entry = pwd.getpwnam(login)
        except KeyError:
            return None
        return Account(login, entry.pw_uid, managed_by(entry), self.locked(login))

    def course_accounts(self) -> list[Account]:
        """Every account gpuseat made for some course."""
        expired = self._expired()
        return [
            Account(e.pw_name, e.pw_uid, managed_by(e), e.pw_name in expired)
            for e in pwd.getpwall()
            if managed_by(e) is not None
        ]

    def _expired(self) -> set[str]:
        out: set[str] = set()
        try:
            text = self.shadow.read_text()
        except FileNotFoundError:
            return out
        for line in text.splitlines():
            parts = line.split(":")
            if len(parts) > 7 and parts[7].strip() not in ("", "-1") and int(parts[7]) <= 1:
                out.add(parts[0])
        return out

    def locked(self, login: str) -> bool:
        """True when the account's expiry date is set and past: sshd refuses every login, keys too."""
        return login in self._expired()

    def ensure_group(self, name: str) -> bool:
        """Create the group when missing. An existing group is used only when every member is an account
        gpuseat made: course accounts must not share what a group of other people's grants."""
        try:
            found = grp.getgrnam(name)
        except KeyError:
            self.runner.run(["groupadd", "--system", name], where="host")
            return True
        people = {e.pw_name: e for e in pwd.getpwall()}
        others = {m for m in found.gr_mem if m not in people or managed_by(people[m]) is None}
        others |= {e.pw_name for e in people.values() if e.pw_gid == found.gr_gid and managed_by(e) is None}
        if found.gr_gid == 0 or others:
            who = ", ".join(sorted(others)[:5]) or "root"
            raise InputError(
                f"group {name!r} already holds accounts gpuseat did not make ({who})",
                where="host setting group",
                fix="give the course accounts a group of their own (the default: gpuseat)",
            )
        return False

    def add_account(self, login: str, course: str, group: str) -> bool:
        """Create the account (home, bash, in ``group``, keys only, GECOS ``gpuseat course COURSE``)."""
        fix = "give the participant another unix_user in the roster, or remove that account"
        found = self._course_account(login, course, where="roster: unix_user", fix=fix)
        if found is None:
            self.runner.run(
                ["useradd", "--create-home", "--shell", "/bin/bash", "--comment", f"{GECOS_PREFIX}{course}", login],
                where="host",
            )
            self.runner.run(["usermod", "--append", "--groups", group, "--password", "*", login], where="host")
            return True
        if login not in grp.getgrnam(group).gr_mem:
            self.runner.run(["usermod", "--append", "--groups", group, login], where="host")
            return True
        return False

    def remove_account(self, login: str, course: str) -> bool:
        """Remove the account gpuseat made for ``course`` and its home folder (the course is deleted: a
        later course of the same key must not find the old participant's files under the same login).
        An account made by hand or for another course is never removed."""
        if self._course_account(login, course, where="host", fix="remove it by hand if it should go") is None:
            return False
        self.runner.run(["userdel", "--remove", login], where="host")
        return True

    def _course_account(self, login: str, course: str, *, where: str, fix: str) -> Account | None:
        """The account ``login`` when gpuseat made it for ``course``, None when there is none; one made by
        hand or for another course is refused (gpuseat never changes or removes it)."""
        found = self.account(login)
        if found is not None and found.course != course:
            raise InputError(
                f"account {login!r} already exists and gpuseat did not create it for course {course!r}",
                where=where,
                fix=fix,
            )
        return found

    def set_locked(self, login: str, value: bool) -> bool:
        """Lock (expire: sshd then refuses keys too) or unlock an account; True when it changed."""
        if self.locked(login) == value:
            return False
        self.runner.run(["usermod", "--expiredate", "1" if value else "", login], where="host")
        return True

    # -- processes -------------------------------------------------------------------------------------

    def processes(self, uids: set[int] | None, proc_root: str = "/proc") -> dict[int, int]:
        """pid → uid of every live process of ``uids`` (None: of every user)."""
        out: dict[int, int] = {}
        if uids is not None and not uids:
            return out
        for entry in os.scandir(proc_root):
            if not entry.name.isdigit():
                continue
            try:
                uid = os.stat(entry.path).st_uid
                mine = uids is None or uid in uids
                if mine and _state(entry.path) != "Z":  # a zombie holds nothing: its parent reaps it
                    out[int(entry.name)] = uid
            except OSError:
                continue
        return out

    def open_files(self, pids: set[int], paths: set[str], proc_root: str = "/proc") -> dict[int, set[str]]:
        """pid → which of ``paths`` it holds open (its file descriptors, read as root)."""
        out: dict[int, set[str]] = {}
        for pid in pids:
            try:
                fds = os.scandir(f"{proc_root}/{pid}/fd")
            except OSError:
                continue
            with fds:
                for fd in fds:
                    try:
                        target = os.readlink(fd.path)
                    except OSError:
                        continue
                    if target in paths:
                        out.setdefault(pid, set()).add(target)
        return out

    def end_processes(self, pids: set[int]) -> bool:
        """SIGKILL ``pids`` (those already gone are fine); True when any was alive."""
        alive = sorted(p for p in pids if Path(f"/proc/{p}").exists())
        if not alive:
            return False
        self.runner.run(["kill", "-KILL", *map(str, alive)], check=False, where="host")
        return True

    def end_user(self, login: str) -> bool:
        """End every session and process of ``login``: logind first where it runs, then ``kill -KILL -1``
        run as ``login``, which the kernel sends to all of the user's processes in one sweep that no fork
        escapes (a pid-by-pid ``pkill`` misses a chain of processes that fork and exit)."""
        found = self.account(login)
        if found is None or not self.processes({found.uid}):
            return False
        if Path("/run/systemd/system").exists() and self.runner.which("loginctl"):
            self.runner.run(["loginctl", "terminate-user", login], check=False, where="host")
        self.runner.run(["kill", "-KILL", "-1"], user=login, check=False, where="host")
        return True

    def reload_sshd(self) -> str:
        """Check sshd's configuration and reload it (systemd hosts); say what was done or what to do."""
        sshd = self.runner.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
        if sshd is not None:
            test = self.runner.try_run([sshd, "-t"], mutates=False, where="sshd")
            if test.returncode != 0:
                return f"sshd -t refuses the configuration: {test.stderr.strip()[:200]}; fix it, then reload sshd"
        if Path("/run/systemd/system").exists() and self.runner.which("systemctl"):
            for unit in ("ssh", "sshd"):
                if self.runner.try_run(["systemctl", "reload", unit], where="sshd").returncode == 0:
                    return f"sshd reloaded (systemctl reload {unit})"
        return "reload sshd once so it reads the drop-in: systemctl reload ssh (or kill -HUP its pid)"

    # -- files -----------------------------------------------------------------------------------------

    @staticmethod
    def file_is(path: Path, text: str, mode: int = 0o644) -> bool:
        """True when ``path`` is a plain root-owned file holding exactly ``text`` with ``mode``."""
        try:
            st = path.lstat()
            return (  # a FIFO or device is never read (it would block): write_file then refuses it
                stat.S_ISREG(st.st_mode)
                and st.st_uid == 0
                and (st.st_mode & 0o777) == mode
                and path.read_text() == text
            )
        except (FileNotFoundError, NotADirectoryError):
            return False

    def put_file(self, path: Path, text: str, mode: int = 0o644) -> bool:
        """Make ``path`` hold exactly ``text`` (root-owned, ``mode``), written by
        :func:`gpuseat.files.write_file` only when it differs; True when it was written (or would be)."""
        if self.file_is(path, text, mode):
            return False
        if self.runner.dry_run:
            self.runner.log.append(_dry_write(path))
            return True
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, text, mode=mode)
        return True

    def remove_file(self, path: Path) -> bool:
        """Remove a file gpuseat wrote; True when there was one."""
        if not path.exists() and not path.is_symlink():
            return False
        if self.runner.dry_run:
            self.runner.log.append(_dry_write(path, remove=True))
            return True
        path.unlink(missing_ok=True)
        return True

    # -- device access ---------------------------------------------------------------------------------

    def acl_lines(self, path: Path) -> set[str]:
        """The file's access ACL as ``getfacl --numeric`` lists it (``user::rw-``, ``user:1001:rw-`` …), read
        from its ``system.posix_acl_access`` attribute: a pass reads every seat's device files, and a getfacl
        each was thousands of processes a pass on a big server. getfacl reads what this cannot parse."""
        try:
            raw = os.getxattr(path, "system.posix_acl_access")
        except OSError as exc:
            if exc.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
                raise
            mode = path.stat().st_mode  # no ACL: the mode bits are the whole of it
            return {f"user::{_perm(mode >> 6)}", f"group::{_perm(mode >> 3)}", f"other::{_perm(mode)}"}
        if len(raw) >= 4 and (len(raw) - 4) % 8 == 0 and struct.unpack_from("<I", raw)[0] == _ACL_VERSION:
            lines = set()
            for tag, perm, ident in struct.iter_unpack("<HHI", raw[4:]):
                kind, named = _ACL_TAGS.get(tag, ("?", True))
                lines.add(f"{kind}:{ident if named else ''}:{_perm(perm)}")
            return lines
        return self._getfacl(path)

    def _getfacl(self, path: Path) -> set[str]:
        out = self.runner.run(
            ["getfacl", "--omit-header", "--numeric", "--absolute-names", str(path)], mutates=False, where="host"
        ).stdout
        return {line.split("#", 1)[0].strip() for line in out.splitlines() if line.strip()}

    def acl_users(self, path: Path) -> set[int] | None:
        """The uids with a named ACL entry on ``path``; None when the file is not yet root-only plus ACL
        (someone else could open it: its mode or owner must be fixed too)."""
        lines = self.acl_lines(path)
        found = set()
        for line in lines:
            kind, uid, _perm = [*line.split(":"), "", ""][:3]
            if kind == "user" and uid:
                found.add(int(uid))
        st = path.stat()
        want = {"user::rw-", "group::---", "other::---"} | {f"user:{u}:rw-" for u in found}
        if found:
            want.add("mask::rw-")
        if st.st_uid != 0 or st.st_gid != 0 or lines != want:
            return None
        return found

    def set_acl(self, path: Path, uids: set[int]) -> bool:
        """Only root and ``uids`` may open ``path`` (owner root, no group/other bits); True when changed."""
        if self.runner.which("setfacl") is None:
            raise EngineError("setfacl not found", where="host", fix="install the acl package (apt install acl)")
        if self.acl_users(path) == uids:
            return False
        if uids:
            spec = ["u::rw", "g::-", "o::-", "m::rw"] + [f"u:{u}:rw" for u in sorted(uids)]
            self.runner.run(["chown", "0:0", str(path)], where="host")
            self.runner.run(["setfacl", "--set", ",".join(spec), str(path)], where="host")
        else:
            self.runner.run(["chown", "0:0", str(path)], where="host")
            self.runner.run(["setfacl", "--remove-all", str(path)], where="host")
            self.runner.run(["chmod", "0600", str(path)], where="host")
        return True

    # -- nvidia-smi ------------------------------------------------------------------------------------

    def discover(self, nvidia_smi: str, *, where: str = "nvidia-smi -q -x") -> dict[str, SeatDevice]:
        """UUID → where it lives (GPU minor, MIG GI/CI), from ``nvidia-smi -q -x`` run as root."""
        text = self.runner.run([nvidia_smi, "-q", "-x"], timeout=120, mutates=False, where="host").stdout
        if "<!ENTITY" in text:
            raise InputError("XML entity declarations are not allowed", where=where, fix="check the nvidia-smi binary")
        try:
            root = ET.fromstring(text)
        except ET.ParseError as exc:
            raise EngineError(f"not nvidia-smi XML: {exc}", where=where) from None
        from gpuseat.core.listing import parse_list

        listed = self.runner.run([nvidia_smi, "-L"], timeout=120, mutates=False, where="host").stdout
        profiles = {m.uuid: m.profile for g in parse_list(listed) for m in g.mig}
        out: dict[str, SeatDevice] = {}
        for i, gpu in enumerate(root.iterfind("gpu")):
            uuid = (gpu.findtext("uuid") or "").strip()
            minor_text = (gpu.findtext("minor_number") or str(i)).strip()
            minor = int(minor_text) if minor_text.isdigit() else i
            migs = list(gpu.iterfind("mig_devices/mig_device"))
            if uuid:
                out[uuid] = SeatDevice(uuid, minor, split=bool(migs))
            for m in migs:
                muuid = (m.findtext("uuid") or "").strip()
                gi, ci = (
                    (m.findtext("gpu_instance_id") or "").strip(),
                    (m.findtext("compute_instance_id") or "").strip(),
                )
                if not muuid and f"MIG-{uuid}/{gi}/{ci}" in profiles:  # drivers R450-R460: -q -x has no MIG UUID,
                    muuid = f"MIG-{uuid}/{gi}/{ci}"  # -L names it MIG-GPU-<uuid>/<gi>/<ci> (core.devices)
                if muuid and gi.isdigit() and ci.isdigit():
                    profile = profiles.get(muuid) or (m.findtext("profile") or "").strip() or None
                    out[muuid] = SeatDevice(muuid, minor, int(gi), int(ci), profile)
        return out

    # -- ssh -------------------------------------------------------------------------------------------

    def ensure_probe_key(self, folder: Path) -> tuple[Path, str]:
        """gpuseat's probe key pair (made once, private key 0600): path of the private key, public line."""
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = folder / "probe_ed25519"
        if not key.exists():
            self.runner.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuseat-probe", "-f", str(key)],
                mutates=False,
                where="host",
            )
        return key, key.with_suffix(".pub").read_text().strip()

    def ssh_run(self, key: Path, login: str, host: str, port: int, command: str, *, timeout: float) -> Completed[str]:
        """Run ``command`` over SSH as ``login`` with gpuseat's probe key (no agent, no prompts)."""
        argv = [
            "ssh",
            "-F",
            "none",
            "-i",
            str(key),
            "-p",
            str(port),
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"ConnectTimeout={max(1, int(timeout))}",
            "-o",
            "StrictHostKeyChecking=no",  # loopback to this very host: nothing to spoof on the way
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            f"{login}@{host}",
            command,
        ]
        return self.runner.try_run(argv, timeout=timeout, mutates=False, where="host")


#: ``system.posix_acl_access``: a little-endian version, then (tag, perm, id) entries (linux/posix_acl_xattr.h)
_ACL_VERSION = 2
_ACL_TAGS = {1: ("user", False), 2: ("user", True), 4: ("group", False), 8: ("group", True), 16: ("mask", False),
             32: ("other", False)}  # fmt: skip


def _perm(bits: int) -> str:
    """``rw-`` for the low three bits, as getfacl writes them."""
    return "".join(c if bits & b else "-" for c, b in (("r", 4), ("w", 2), ("x", 1)))


def _state(proc_dir: str) -> str:
    """The process state letter from ``/proc/PID/stat`` (after the command name, which may hold spaces)."""
    with open(f"{proc_dir}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def managed_by(entry: pwd.struct_passwd) -> str | None:
    """The course that created this account (its GECOS says ``gpuseat course COURSE``), else None."""
    return entry.pw_gecos[len(GECOS_PREFIX) :] if entry.pw_gecos.startswith(GECOS_PREFIX) else None


def _dry_write(path: Path, *, remove: bool = False) -> Ran:
    return Ran(("rm", str(path)) if remove else ("write", str(path)), None, None, 0.0, dry=True)
