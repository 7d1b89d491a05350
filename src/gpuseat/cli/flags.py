"""Library errors name fields (``course``, ``participant``, ``seat``…); on the command line they are flags.

The library is called from Python, the portal and the CLI, so its errors say which *field* is wrong
(``where="course"``); this module is where the CLI says which *flag* that is (``--course``) before
printing, so a message always points at what the user typed.
"""

from __future__ import annotations

import copy

from gpuseat.errors import GpuseatError

#: error field (``GpuseatError.where``) → the flag that sets it
FIELD_FLAGS: dict[str, str] = {
    "apps": "--apps",
    "course": "--course",
    "db_url": "--db / GPUSEAT_DB_URL",
    "hours": "--hours",
    "key": "--key",
    "listen": "--listen",
    "participant": "--participant",
    "plan_option": "--plan-option",
    "reason": "--reason",
    "seat": "--seat",
    "since": "--since",
    "template": "--template",
    "timeout": "--timeout",
    "timezone": "--timezone",
    "user": "--user",
    "workers": "--workers",
    "base_url": "--base-url",
}


def as_flags(exc: GpuseatError) -> GpuseatError:
    """The same error with its field named as the CLI flag (the error itself is left unchanged)."""
    flag = FIELD_FLAGS.get(exc.where or "")
    if flag is None:
        return exc
    shown = copy.copy(exc)
    shown.where = flag
    return shown
