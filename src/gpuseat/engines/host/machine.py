"""The operating-system side of the shared-host engine: accounts, files, ACLs, nvidia-smi, ssh.

Every call here runs a well-known tool (``useradd``, ``usermod``, ``setfacl``, ``nvidia-smi``,
``ssh``) with an argument list (never a shell) or writes one file atomically; each returns whether
it changed anything, so ``gpuseat host up`` can be re-run and report "nothing to change".
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from gpuseat.core.delivery import SeatDevice
from gpuseat.errors import EngineError, InputError

GECOS_PREFIX = "gpuseat course "


def run(argv: list[str], *, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a tool; a missing tool or a failure is one :class:`EngineError` with its stderr."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise EngineError(f"{argv[0]} not found", where="host", fix=f"install {argv[0]} on this host") from None
    except subprocess.TimeoutExpired:
        raise EngineError(f"{argv[0]} did not finish within {timeout:g} s", where="host") from None
    if check and done.returncode != 0:
        raise EngineError(f"{' '.join(argv[:3])} failed: {done.stderr.strip()[:400]}", where="host")
    return done


# -- accounts --------------------------------------------------------------------------------------


def user(name: str) -> pwd.struct_passwd | None:
    """The account called ``name`` (None when there is none)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def managed_by(entry: pwd.struct_passwd) -> str | None:
    """The course that created this account (its GECOS says ``gpuseat course COURSE``), else None."""
    return entry.pw_gecos[len(GECOS_PREFIX) :] if entry.pw_gecos.startswith(GECOS_PREFIX) else None


def ensure_group(name: str) -> bool:
    """Create the group when missing."""
    try:
        grp.getgrnam(name)
        return False
    except KeyError:
        run(["groupadd", "--system", name])
        return True


def ensure_user(name: str, course: str, group: str) -> bool:
    """Create the account (home, bash, in ``group``, GECOS ``gpuseat course COURSE``) when missing."""
    entry = user(name)
    if entry is None:
        run(["useradd", "--create-home", "--shell", "/bin/bash", "--comment", f"{GECOS_PREFIX}{course}", name])
        run(["usermod", "--append", "--groups", group, "--password", "*", name])  # keys only, never a password
        return True
    if managed_by(entry) != course:
        raise InputError(
            f"account {name!r} already exists and gpuseat did not create it for this course",
            where="roster: unix_user",
            fix="give the participant another unix_user in the roster, or remove that account",
        )
    changed = False
    if name not in grp.getgrnam(group).gr_mem:
        run(["usermod", "--append", "--groups", group, name])
        changed = True
    return changed


def expired(name: str) -> bool:
    """True when the account's expiry date is set and in the past (sshd then refuses every login)."""
    for line in Path("/etc/shadow").read_text().splitlines():
        parts = line.split(":")
        if parts[0] == name and len(parts) > 7:
            return parts[7].strip() not in ("", "-1") and int(parts[7]) <= 1
    return False


def set_expired(name: str, value: bool) -> bool:
    """Lock (expire) or unlock an account; True when it changed."""
    if expired(name) == value:
        return False
    run(["usermod", "--expiredate", "1" if value else "", name])
    return True


def remove_user(name: str) -> bool:
    """Delete an account gpuseat created, with its home."""
    if user(name) is None:
        return False
    run(["userdel", "--remove", name], check=False)
    return True


# -- files -----------------------------------------------------------------------------------------


def write_file(path: Path, text: str, mode: int = 0o644) -> bool:
    """Write ``text`` atomically (root-owned, ``mode``) unless the file already holds exactly it."""
    try:
        st = path.lstat()
        if not path.is_symlink() and path.read_text() == text and (st.st_mode & 0o777) == mode and st.st_uid == 0:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def remove_file(path: Path) -> bool:
    """Remove a file gpuseat wrote; True when there was one."""
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False


# -- device access ---------------------------------------------------------------------------------


def _acl_lines(path: Path) -> set[str]:
    out = run(["getfacl", "--omit-header", "--numeric", "--absolute-names", str(path)]).stdout
    return {line.split("#", 1)[0].strip() for line in out.splitlines() if line.strip()}


def acl_users(path: Path) -> set[int]:
    """The uids with a named ACL entry on ``path``."""
    found = set()
    for line in _acl_lines(path):
        kind, uid, _perm = [*line.split(":"), "", ""][:3]
        if kind == "user" and uid:
            found.add(int(uid))
    return found


def set_acl(path: Path, uids: set[int]) -> bool:
    """Only root and ``uids`` may open ``path`` (owner root, no group/other bits); True when changed."""
    if shutil.which("setfacl") is None:
        raise EngineError("setfacl not found", where="host", fix="install the acl package (apt install acl)")
    want = {"user::rw-", "group::---", "other::---"} | {f"user:{u}:rw-" for u in uids}
    if uids:
        want.add("mask::rw-")
    st = path.stat()
    if st.st_uid == 0 and st.st_gid == 0 and _acl_lines(path) == want:
        return False
    os.chown(path, 0, 0)
    if uids:
        spec = ["u::rw", "g::-", "o::-", "m::rw"] + [f"u:{u}:rw" for u in sorted(uids)]
        run(["setfacl", "--set", ",".join(spec), str(path)])
    else:
        run(["setfacl", "--remove-all", str(path)])
        os.chmod(path, 0o600)
    return True


# -- nvidia-smi ------------------------------------------------------------------------------------


def discover(nvidia_smi: str, *, where: str = "nvidia-smi -q -x") -> dict[str, SeatDevice]:
    """UUID → where it lives (GPU minor, MIG GI/CI), from ``nvidia-smi -q -x`` run as root."""
    text = run([nvidia_smi, "-q", "-x"], timeout=120).stdout
    if "<!ENTITY" in text:
        raise InputError("XML entity declarations are not allowed", where=where, fix="check the nvidia-smi binary")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise EngineError(f"not nvidia-smi XML: {exc}", where=where) from None
    from gpuseat.nvsmi import parse_list

    listed = run([nvidia_smi, "-L"], timeout=120).stdout
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
            gi, ci = (m.findtext("gpu_instance_id") or "").strip(), (m.findtext("compute_instance_id") or "").strip()
            if muuid and gi.isdigit() and ci.isdigit():
                profile = profiles.get(muuid) or (m.findtext("profile") or "").strip() or None
                out[muuid] = SeatDevice(muuid, minor, int(gi), int(ci), profile)
    return out


# -- ssh -------------------------------------------------------------------------------------------


def ensure_probe_key(folder: Path) -> tuple[Path, str]:
    """gpuseat's probe key pair (made once, private key 0600): path of the private key, public line."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = folder / "probe_ed25519"
    if not key.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuseat-probe", "-f", str(key)])
    return key, key.with_suffix(".pub").read_text().strip()


def ssh_run(
    key: Path, user_name: str, host: str, port: int, command: str, *, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` over SSH as ``user_name`` with gpuseat's probe key (no agent, no prompts)."""
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
        f"{user_name}@{host}",
        command,
    ]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"no answer within {timeout:g} s")
