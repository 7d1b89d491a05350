"""The one rule for a GPU or MIG device UUID, wherever a seat's device is typed, read or stored.

A device UUID ends up in ``CUDA_VISIBLE_DEVICES`` (an ``authorized_keys`` option in double quotes, an
``/etc/profile.d`` line, a Slurm or Kubernetes setting), so it is one token of ASCII letters, digits and
``-``. Two forms exist, as ``nvidia-smi -L`` prints them:

* ``GPU-<uuid>`` for a GPU and ``MIG-<uuid>`` for a MIG device (drivers R470 and later):
  ``MIG-445da789-865d-5fd1-b2b6-32a48bf66c39``;
* ``MIG-GPU-<gpu uuid>/<GPU instance>/<compute instance>`` for a MIG device on drivers R450–R460, the
  form CUDA's ``CUDA_VISIBLE_DEVICES`` documents for MIG (``MIG-GPU-8932f937-…/1/0``): the only place a
  ``/`` may appear.
"""

from __future__ import annotations

import re

from gpuseat.errors import InputError

#: a GPU or MIG device UUID in either form (use ``fullmatch``)
DEVICE_UUID = re.compile(
    r"(?:GPU|MIG)-[0-9A-Za-z-]{1,90}|MIG-GPU-[0-9A-Za-z-]{1,90}/[0-9]{1,3}/[0-9]{1,3}",
    re.ASCII,
)
#: the fix every refusal gives
UUID_EXAMPLES = (
    "give the UUID as nvidia-smi -L prints it: GPU-4f1d6a52-…, MIG-445da789-… or, from drivers before R470, "
    "MIG-GPU-<gpu uuid>/<gi>/<ci>"
)


def device_problem(text: str) -> str | None:
    """What is wrong with ``text`` as a device UUID, or None when it is one."""
    if DEVICE_UUID.fullmatch(text):
        return None
    if not text.startswith(("GPU-", "MIG-")):
        return "it does not start with GPU- or MIG-"
    if "/" in text:
        return "only the older MIG-GPU-<gpu uuid>/<gi>/<ci> form has '/', with two numbers after it"
    return "it is not one token of letters, digits and '-' (at most 94 characters)"


def check_device_uuid(value: str, *, field: str) -> str:
    """``value`` when it is a GPU or MIG device UUID; else an :class:`InputError` naming ``field``."""
    problem = device_problem(value)
    if problem is not None:
        raise InputError(f"{value[:100]!r} is not a GPU or MIG device UUID: {problem}", where=field, fix=UUID_EXAMPLES)
    return value
