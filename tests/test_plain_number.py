"""The one rule for a number a person types (gpuseat.core.numbers.plain_number): the CLI's number flags and
the portal's course settings form both read their numbers by it (tests/test_cli_bad_input_sweep.py and
tests/portal/test_bad_bodies_sweep.py check them from the outside)."""

from __future__ import annotations

import math

import pytest

from gpuseat.core.numbers import plain_number


@pytest.mark.parametrize(
    ("text", "whole", "value"),
    [("12", True, 12), ("+12", True, 12), ("-3", True, -3), ("007", True, 7), ("12", False, 12.0), ("0.5", False, 0.5),
     (".5", False, 0.5), ("5.", False, 5.0), ("-1.25", False, -1.25), ("0." + "0" * 300 + "1", False, 1e-301)],
)  # fmt: skip
def test_plain_digits_are_read(text: str, whole: bool, value: float) -> None:
    got = plain_number(text, whole=whole)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("text", ["-0", "-0.0", "+0"])
def test_minus_zero_is_zero(text: str) -> None:
    assert math.copysign(1, plain_number(text, whole="." not in text)) == 1


@pytest.mark.parametrize(
    ("text", "whole", "says"),
    [
        ("١٢", False, "not a number in plain digits 0-9 (got ١٢): type 12"),
        ("１２.５", False, "not a number in plain digits 0-9 (got １２.５): type 12.5"),
        ("1_000", True, "not a whole number in plain digits 0-9 (got 1_000): type 1000"),
        ("1E3", True, "not a whole number in plain digits 0-9 (got 1E3): type 1000"),
        (" 12", False, "not a number in plain digits 0-9 (got ' 12'): type 12"),
        ("12\n", True, "not a whole number in plain digits 0-9 (got '12\\n'): type 12"),
        ("1.5", True, "not a whole number (got 1.5): type one such as 12"),
        ("nan", False, "not a finite number (got nan): type one such as 12 or 0.5"),
        ("-inf", True, "not a finite number (got -inf): type one such as 12"),
        ("1e400", False, "not a finite number (got 1e400): type one such as 12 or 0.5"),
        ("9" * 400, False, f"not a finite number (got {'9' * 40}…): type one such as 12 or 0.5"),  # defect: read as inf
        ("0x10", True, "not a whole number (got 0x10): type one such as 12"),
        ("", False, "not a number (got ''): type one such as 12 or 0.5"),
        ("1" * 41, True, "41 characters, not a whole number: type one such as 12"),
    ],
)
def test_other_spellings_are_refused_with_what_to_type(text: str, whole: bool, says: str) -> None:
    with pytest.raises(ValueError) as refused:
        plain_number(text, whole=whole)
    assert str(refused.value) == says


def test_the_caller_names_the_kind_of_number_and_an_example() -> None:
    with pytest.raises(ValueError, match=r"^not a whole number of days \(got x\): type one such as 30$"):
        plain_number("x", whole=True, what="a whole number of days", example="30")
