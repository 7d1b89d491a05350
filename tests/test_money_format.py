"""One money format: the plan's text (core/cost.money) and the portal's pages and report (web/formats.money_or_dash)."""

from __future__ import annotations

import pytest

from gpuseat.core.cost import money
from gpuseat.web import formats


@pytest.mark.parametrize(
    ("usd", "text"),
    [
        (3744, "$3,744.00"),
        (1143.375, "$1,143.38"),
        (0, "$0.00"),
        (-0.0, "$0.00"),
        (-3, "-$3.00"),
        (-1234.5, "-$1,234.50"),
    ],
)
def test_plan_and_portal_write_money_alike(usd: float, text: str) -> None:
    assert money(usd) == text
    assert formats.money_or_dash(usd) == text
    assert formats.money_or_dash(str(usd)) == text  # a numeric string from a stored JSON document


@pytest.mark.parametrize("empty", [None, ""])
def test_the_portal_shows_no_amount_as_a_dash(empty: object) -> None:
    assert formats.money_or_dash(empty) == "—"
