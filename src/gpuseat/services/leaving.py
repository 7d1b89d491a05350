"""What taking participants off the course takes with them, in words: ``gpuseat roster remove`` (without
``--yes``) and the portal's Roster page (before its confirm button) say it from the store's dry run
(:meth:`gpuseat.store.roster.Roster.remove_participants` with ``dry_run=True``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def what_goes(r: dict[str, Any]) -> str:
    """``ann (holds seat-03, 2 past seats, 1 survey answer)``: what a removal takes with a participant."""

    def n(count: int, what: str) -> str:
        return f"{count} {what}{'' if count == 1 else 's'}"

    parts = [f"holds {r['seat']}" if r["seat"] else "no seat"]
    parts += [n(r[k], what) for k, what in (("past_seats", "past seat"), ("survey_answers", "survey answer"),
                                            ("requests", "pending request")) if r[k]]  # fmt: skip
    return f"{r['participant']} ({', '.join(parts)})"


def removal_preview(found: Sequence[dict[str, Any]], course: str) -> str:
    """One sentence: who would go from ``course``, with what (the store's dry-run rows)."""
    return (
        f"would remove {', '.join(what_goes(r) for r in found)} from course {course}, with their access links and "
        "survey answers; the agents take their access away at their next pass"
    )
