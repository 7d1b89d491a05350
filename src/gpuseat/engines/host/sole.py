"""Whether a held host seat's device files are its holder's alone: what ``seats check`` adds to the participant's probe.

The probe logs in as the participant and sees what they can open; this looks from everyone else's side, as root.
Only root and whom the pass itself grants may open the seat's own device files (``/dev/nvidiaN`` for a whole GPU,
the GI and CI capability files for MIG): the holder, and the holder of another compute instance of the same GPU
instance, which shares its GI file (the parent GPU of a MIG seat is shared by its GPU's MIG seats and not looked
at; module ``others`` decides which course keeps a device). Nobody else's process may hold them open. A named ACL
entry, a group or other mode bit, an owner other than root, or another user's process makes the seat broken,
with who, how and the fix: the pass (``gpuseat apply``) sets the files right again, and ends a course account's
process on a seat that is not theirs.
"""

from __future__ import annotations

import grp
import pwd
from collections.abc import Sequence
from pathlib import Path

from gpuseat.engines.host import others
from gpuseat.engines.host.machine import Machine


def granted(held: Sequence[others.Holder], files: Sequence[str]) -> set[int]:
    """The uids the pass itself lets open any of ``files``: the holders, in any course, of the seats that use them and
    keep their device (``held``: module ``others``; two compute instances of one GPU instance share its file)."""
    lost = others.beaten(list(held))
    logins = {h.login for h in held if (h.course, h.seat) not in lost and set(h.files) & set(files)}
    return {u for u in map(_uid, logins) if u is not None}


def intruders(machine: Machine, files: Sequence[str], allowed: set[int], course: str) -> str | None:
    """None when only root and ``allowed`` (the holder, and whom :func:`granted` names) can open ``files`` and no
    other user's process holds one open; else one line: who else, how, and how to fix it."""
    allowed = allowed | {0}
    who: list[str] = []
    fixes: list[str] = []
    for f in files:
        found = _openers(machine, Path(f), allowed)
        who += [f"{name} ({how} on {f})" for name, how, _fix in found]
        fixes += [fix for _name, _how, fix in found]
    kills: list[str] = []
    procs = {pid: uid for pid, uid in machine.processes(None).items() if uid not in allowed}
    for pid, held in sorted(machine.open_files(set(procs), set(files)).items()):
        who += [f"{_user(procs[pid])} (process {pid} holds {f})" for f in sorted(held)]
        kills.append(str(pid))
    if not who:
        return None
    how = [f"run gpuseat apply --course {course}, or {'; '.join(fixes)}"] if fixes else []
    how += [f"end {'it' if len(kills) == 1 else 'them'}: kill {' '.join(kills)}"] if kills else []
    return f"also open to {', '.join(who)}: {'; '.join(how)}"


def _openers(machine: Machine, path: Path, allowed: set[int]) -> list[tuple[str, str, str]]:
    """(who, how, fix) for everyone but ``allowed`` who may open ``path`` (its ACL, mode and owner)."""
    entries: dict[tuple[str, str], str] = {}
    for line in machine.acl_lines(path):
        kind, ident, perm = [*line.split(":"), "", ""][:3]
        entries[(kind, ident)] = perm
    mask = entries.get(("mask", ""), "rwx")

    def opens(perm: str, *, masked: bool = True) -> str:
        """The letters of ``perm`` that open the file (r, w), after the mask where it applies."""
        return "".join(c for c in "rw" if c in perm and (not masked or c in mask))

    st = path.stat()
    out = []
    if st.st_uid != 0:  # the owner may always change the mode back
        out.append((_user(st.st_uid), "owner", f"chown root:root {path}"))
    for (kind, ident), perm in sorted(entries.items()):
        bits = opens(perm, masked=kind != "other")
        if not bits or (kind in ("mask", "user") and not ident):
            continue
        if kind == "user" and int(ident) not in allowed:
            name = _user(int(ident))
            out.append((name, "ACL", f"setfacl -x u:{ident if name.startswith('uid ') else name} {path}"))
        elif kind == "group" and ident:
            name = _group(int(ident))
            out.append((f"group {name}", "ACL", f"setfacl -x g:{ident if name.startswith('gid ') else name} {path}"))
        elif kind == "group":
            out.append((f"group {_group(st.st_gid)}", f"mode g+{bits}", f"setfacl -m g::- {path}"))
        elif kind == "other":
            out.append(("everyone", f"mode o+{bits}", f"setfacl -m o::- {path}"))
    return out


def _uid(login: str) -> int | None:
    try:
        return pwd.getpwnam(login).pw_uid
    except KeyError:
        return None


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"
