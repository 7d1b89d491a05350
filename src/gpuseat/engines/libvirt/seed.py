"""The NoCloud seed of one VM: cloud-init ``user-data`` and ``meta-data`` on an ISO9660 image labelled ``cidata``.

Pure: text and bytes in, bytes out (the adapter uploads them). The YAML goes through a YAML dumper, so
no participant-supplied value can add keys; the ISO is written with pycdlib (Joliet and Rock Ridge, so
cloud-init finds the lower-case file names whatever the guest's mount options).
"""

from __future__ import annotations

import base64
import hashlib
import io
from dataclasses import dataclass, field

import yaml

from gpuseat.core.roster import check_ssh_key
from gpuseat.errors import InputError

VOLUME_LABEL = "cidata"  # what cloud-init's NoCloud datasource looks for
#: the GECOS field of every login a seed makes: how the next seed finds the logins gpuseat made in the guest
GECOS = "gpuseat participant"
#: run once per instance id (``cloud-init-per instance``), as ``bootcmd``: before cloud-init's
#: ``users_groups`` adds the seed's user and keys (cloud-init only ever *adds* keys, and never removes a
#: former user). Every other login a seed made is expired (sshd refuses each of its keys), its keys file
#: removed and its processes ended, its home folder kept; the seed's own login is unexpired (it may be a
#: login the participant had before), given the GECOS (an account an earlier seed made without it) and its
#: keys file emptied, so the seed's keys become the only ones.
#: ``$1`` is the seed's login (checked by the login rule), passed as data; one line, no single quote.
REVOKE_SCRIPT = (
    'me="$1"; while IFS=: read -r u _ _ _ gecos home _; do'
    f' if [ "$u" = "$me" ] || [ "$gecos" = "{GECOS}" ]; then'
    ' rm -f "$home/.ssh/authorized_keys" "$home/.ssh/authorized_keys2";'
    f' if [ "$u" = "$me" ]; then usermod --expiredate "" --comment "{GECOS}" "$u";'
    ' else usermod --expiredate 1 "$u"; pkill -KILL -u "$u" || true; fi;'
    " fi; done < /etc/passwd"
)


@dataclass(frozen=True)
class Guest:
    """What the seed tells cloud-init: the hostname, the participant's login and key, extra set-up.

    ``packages`` and ``commands`` come from the course file's ``[vm]`` table (checked there).
    """

    hostname: str
    instance_id: str
    user: str
    ssh_keys: tuple[str, ...]
    packages: tuple[str, ...] = ()
    commands: tuple[str, ...] = field(default=())


def ssh_key_blob(key: str, *, where: str) -> bytes:
    """The decoded blob of an OpenSSH public key line, checked by the roster's rule; else an input error."""
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise InputError(
            "the key has a line break or control character (it would add a second line to authorized_keys)",
            where=where,
            fix="give one key per line, as the .pub file has it",
        )
    try:
        check_ssh_key(key)
    except ValueError as exc:
        raise InputError(str(exc), where=where, fix="paste the one-line public key (the .pub file)") from None
    return base64.b64decode(key.split()[1])


def key_fingerprint(key: str) -> str:
    """``SHA256:…`` as ``ssh-keygen -lf`` prints it (unpadded base64 of the blob's SHA-256)."""
    digest = hashlib.sha256(ssh_key_blob(key, where="ssh key")).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def user_data(guest: Guest) -> str:
    """The ``#cloud-config`` document: hostname, the earlier seeds' logins and keys revoked (``bootcmd``, once
    per instance), one sudo user with the participant's keys, packages, commands."""
    for i, key in enumerate(guest.ssh_keys):
        ssh_key_blob(key, where=f"seat {guest.hostname}: ssh key {i + 1}")
    user: dict[str, object] = {
        "name": guest.user,
        "gecos": GECOS,
        "shell": "/bin/bash",
        "sudo": "ALL=(ALL) NOPASSWD:ALL",
        "lock_passwd": True,
    }
    if guest.ssh_keys:  # cloud-init's schema refuses an empty list
        user["ssh_authorized_keys"] = list(guest.ssh_keys)
    doc: dict[str, object] = {
        "hostname": guest.hostname,
        "preserve_hostname": False,
        # a new login or key on the same disk: the logins and keys of the seeds before this one go
        "bootcmd": [
            ["cloud-init-per", "instance", "gpuseat-logins", "sh", "-c", REVOKE_SCRIPT, "gpuseat-logins", guest.user]
        ],
        "users": [user],
        "ssh_pwauth": False,
    }
    if guest.packages:
        doc["package_update"] = True
        doc["packages"] = list(guest.packages)  # checked by the course file
    if guest.commands:
        doc["runcmd"] = list(guest.commands)
    return "#cloud-config\n" + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1 << 16)


def meta_data(guest: Guest) -> str:
    """NoCloud ``meta-data``: a stable instance id (a new one makes cloud-init run again) and the hostname."""
    return yaml.safe_dump({"instance-id": guest.instance_id, "local-hostname": guest.hostname}, sort_keys=False)


def seed_iso(guest: Guest) -> bytes:
    """The seed image: ``user-data`` and ``meta-data`` on an ISO9660 volume labelled ``cidata``."""
    import pycdlib

    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident=VOLUME_LABEL)
    for name, text in (("user-data", user_data(guest)), ("meta-data", meta_data(guest))):
        data = text.encode()
        iso_name = name.upper().replace("-", "_") + ".;1"
        iso.add_fp(io.BytesIO(data), len(data), f"/{iso_name}", rr_name=name, joliet_path=f"/{name}")
    out = io.BytesIO()
    iso.write_fp(out)
    iso.close()
    return out.getvalue()
