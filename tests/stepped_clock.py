"""A process's clock stepped by a given time while a test runs: ``time.time`` and the ``datetime.now`` of
every loaded gpuseat module (an NTP correction, or a machine whose clock is wrong), while SQLite's
``'now'`` and the PostgreSQL server keep the true time, as the database's clock does when one machine's
clock is off. Shared by the seat-hours clock tests and the host engine's idle-stop test."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

# loaded before the clock steps, so that their datetime steps too (the engine loads them lazily)
import gpuseat.engines.apply
import gpuseat.engines.host.engine
import gpuseat.engines.host.requests
import gpuseat.store.requests
import gpuseat.store.rows

REAL_DATETIME = datetime
_REAL_TIME = time.time


class _SteppedMeta(type):
    """A real datetime is an instance of the stepped class too (``isinstance`` checks keep working)."""

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, REAL_DATETIME)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, REAL_DATETIME)


@contextlib.contextmanager
def stepped(by: timedelta) -> Iterator[None]:
    """This process's clock stepped by ``by`` (an NTP correction, a wrong clock on one machine) while
    inside: ``time.time`` and the ``datetime.now`` of every loaded gpuseat module."""

    class Stepped(REAL_DATETIME, metaclass=_SteppedMeta):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:
            return REAL_DATETIME.now(tz) + by

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(time, "time", lambda: _REAL_TIME() + by.total_seconds())
        for name, module in list(sys.modules.items()):
            if name.split(".")[0] == "gpuseat" and getattr(module, "datetime", None) is REAL_DATETIME:
                mp.setattr(module, "datetime", Stepped)
        assert abs((gpuseat.store.requests.datetime.now(UTC) - REAL_DATETIME.now(UTC)) - by) < timedelta(seconds=5)
        yield
