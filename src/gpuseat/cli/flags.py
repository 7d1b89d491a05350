"""Library errors name fields (``course``, ``participant``, ``seat``…); on the command line they are flags.

The library is called from Python, the portal and the CLI, so its errors say which *field* is wrong
(``where="course"``); this module is where the CLI says which *flag* that is (``--course``) before
printing, so a message always points at what the user typed. A command that takes the field as a
positional argument instead (``gpuseat course delete COURSE``) wraps its body in :func:`named_argument`,
so that its errors name the argument, not a flag the command does not have.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def named_argument(field: str, metavar: str) -> Iterator[None]:
    """Inside it, an error about ``field`` names the positional argument ``metavar`` (``COURSE``, as the
    command's usage line writes it) rather than the flag that sets the field in other commands."""
    try:
        yield
    except GpuseatError as exc:
        if exc.where != field:
            raise
        raise _named(exc, metavar) from exc


def as_flags(exc: GpuseatError) -> GpuseatError:
    """The same error with its field named as the CLI flag (the error itself is left unchanged)."""
    flag = FIELD_FLAGS.get(exc.where or "")
    return exc if flag is None else _named(exc, flag)


def _named(exc: GpuseatError, where: str) -> GpuseatError:
    """A copy of ``exc`` whose ``where`` is what the user typed (the library's error is left unchanged)."""
    shown = copy.copy(exc)
    shown.where = where
    return shown
