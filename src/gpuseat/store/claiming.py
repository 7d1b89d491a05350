"""``store.claims``: the claim itself is one SQL statement (:mod:`gpuseat.store.claims`)."""

from __future__ import annotations

from gpuseat.core.seating import CLAIM_MODES, ClaimMode
from gpuseat.errors import InputError
from gpuseat.store.base import Concern
from gpuseat.store.rows import DEFAULT_ACTOR
from gpuseat.store.views import SeatView


class Claims(Concern):
    """The participant's seat: the one they hold, else the best free seat that suits their group."""

    def claim_seat(
        self, course: str | None, participant: str, *, mode: ClaimMode = "assigned", actor: str = DEFAULT_ACTOR
    ) -> SeatView:
        """The participant's seat: the one they hold, else the best free seat that suits their group.

        Safe under any number of concurrent callers (see :mod:`gpuseat.store.claims`); raises
        :class:`NoFreeSeat` when no suitable seat is free. ``mode``: ``assigned`` (kept until released)
        or ``pool`` (handed back when the participant's server stops).
        """
        if mode not in CLAIM_MODES:
            raise InputError(f"unknown mode {mode!r}", where="mode", fix=f"one of {', '.join(CLAIM_MODES)}")
        from gpuseat.store.claims import claim  # the claim is one SQL statement (see that module)

        return claim(self._database, course, participant, mode=mode, actor=actor).view()

    def warm_claims(self, course: str | None) -> None:
        """Have the claim ready before the first participant asks (a connection open, the statement
        planned by the database); claims nothing and writes nothing. Raises :class:`NotFound` for an
        unknown course. The JupyterHub hooks call it while the hub starts."""
        from gpuseat.store.claims import warm

        warm(self._database, course)
