"""Names that reach libvirt XML, volume file names, guest hostnames and guest user names.

Every one is checked against a strict pattern before use (XML escaping happens in the renderer as a
second line of defence): a course or seat key may never become an option, a path outside the pool,
or a broken domain definition.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from gpuseat.core.logins import is_participant_login
from gpuseat.errors import InputError

# A DNS label (RFC 1123): what a guest hostname, a libvirt domain name and a volume name all accept.
_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
PREFIX = "gpuseat"
#: the domain types a seat's VM may have (``<domain type=…>``): kvm, or qemu (TCG: no KVM, slow). Declared
#: here, in a module light enough for ``gpuseat vms``'s ``--virt-type`` choice to be built from it.
VirtType = Literal["kvm", "qemu"]
VIRT_TYPES: tuple[VirtType, ...] = get_args(VirtType)


def is_key(value: str) -> bool:
    """Whether ``value`` can name a VM, a volume, a pool or a network (a DNS label)."""
    return bool(_LABEL.fullmatch(value))


def key(value: str, *, where: str) -> str:
    """A course or seat key usable as a hostname and in domain and file names."""
    if not _LABEL.fullmatch(value):
        raise InputError(
            f"'{value}' cannot name a VM: use lower-case letters, digits and single dashes"
            " (at most 63, no dash at either end)",
            where=where,
            fix="rename it, e.g. seat-01",
        )
    return value


def domain_name(course: str, seat: str) -> str:
    """``gpuseat-<course>-<seat>``: unique per course and seat, valid for libvirt and as a file stem."""
    key(course, where="course key")
    key(seat, where=f"seat {seat!r}")
    name = f"{PREFIX}-{course}-{seat}"
    if len(name) > 63:
        raise InputError(
            f"the VM name '{name}' is longer than 63 characters",
            where=f"course {course!r}, seat {seat!r}",
            fix="use a shorter course key or seat key",
        )
    return name


def guest_login(value: str, *, where: str) -> str:
    """A participant's login in their VM: a Unix user name that is no system account (the guest's own)."""
    if not is_participant_login(value):
        raise InputError(
            f"'{value}' is not a usable login name",
            where=where,
            fix="use lower-case letters, digits, '_' or '-', starting with a letter (not root/nobody)",
        )
    return value
