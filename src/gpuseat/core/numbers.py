"""The one spelling of a number that a person types into gpuseat: every number flag and argument of the CLI
and every number field of the portal's forms is read by :func:`plain_number`.

Python's ``int()`` and ``float()`` (and so Click's and Typer's number flags) also take digits of other
scripts (``١٢``, full-width ``１２``), ``1_000``, ``1e3``, spaces around the number, ``nan``, ``inf`` and
``1e400`` (which is ``inf``): a value typed by mistake was read as some other number, and ``nan`` passes
every min/max check. Here a number is the ASCII digits 0-9 with an optional sign and, where a fraction is
allowed, one decimal point; anything else is refused with the number to type instead.
"""

from __future__ import annotations

import math
import re
from typing import Literal, overload

#: the ASCII digits 0-9 only (``\d`` also matches ``١٢`` and ``１２``), an optional sign, and for a
#: decimal an optional point: no exponent, no underscore, no space
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)", re.ASCII)
#: longer than any number gpuseat takes as it writes them: a whole number is short, but a course file may
#: hold ``never_connected_hours = 1e-300`` (above 0, as the field asks), which the portal's form shows in
#: about 300 digits and must read back
_MAX_CHARS, _MAX_DECIMAL_CHARS = 40, 400


def _shown(text: str) -> str:
    """``text`` as a message quotes it: as typed, cut at 40 characters; in quotes where it is empty, has a space
    at either end or a character that does not print (``' 12'``, ``'1\\n'``), so the reader sees why."""
    cut = text if len(text) <= _MAX_CHARS else f"{text[:_MAX_CHARS]}…"
    return cut if cut and cut.isprintable() and cut.strip() == cut else repr(cut)


def _plain_of(text: str, whole: bool) -> str | None:
    """What ``text`` means in the digits 0-9 when Python reads it as a finite number of the right kind
    (``١٢`` → ``12``, ``１２`` → ``12``, ``1e3`` → ``1000``, `` 12`` → ``12``); else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value) or abs(value) >= 1e15 or (whole and not value.is_integer()):
        return None
    if value.is_integer():
        return str(int(value))
    from decimal import Decimal

    return format(Decimal(repr(value)), "f")


@overload
def plain_number(text: str, *, whole: Literal[True], what: str = "", example: str = "") -> int: ...
@overload
def plain_number(text: str, *, whole: Literal[False], what: str = "", example: str = "") -> float: ...
@overload
def plain_number(text: str, *, whole: bool, what: str = "", example: str = "") -> int | float: ...
def plain_number(text: str, *, whole: bool, what: str = "", example: str = "") -> int | float:
    """``text`` as a number: an ``int`` if ``whole``, else a finite ``float`` (``-0`` is 0).

    :class:`ValueError` if it is not spelt in plain digits 0-9 (see the module's docstring), with a
    message that names what was given and what to type: the number Python would have read, in plain
    digits, where there is one (*not a number in plain digits 0-9 (got ١٢): type 12*), else an example.
    ``what`` names the kind of number (default "a whole number" or "a number"), ``example`` is what the
    message offers to type (default "12" or "12 or 0.5").
    """
    what = what or ("a whole number" if whole else "a number")
    example = example or ("12" if whole else "12 or 0.5")
    longest = _MAX_CHARS if whole else _MAX_DECIMAL_CHARS
    if len(text) <= longest and (_INTEGER if whole else _DECIMAL).fullmatch(text):
        value = int(text) if whole else float(text)
        if math.isfinite(value):  # 400 nines are a decimal too, and float() makes them inf
            return value if value else abs(value)  # -0 is 0: "-0.0" in a course file reads as a typo
    if len(text) > longest:
        raise ValueError(f"{len(text)} characters, not {what}: type one such as {example}")
    meant = _plain_of(text, whole)
    if meant is not None:  # a number Python reads, in other digits or another spelling: say it in plain digits
        raise ValueError(f"not {what} in plain digits 0-9 (got {_shown(text)}): type {meant}")
    try:
        finite = math.isfinite(float(text))
    except ValueError:
        finite = True
    kind = what if finite else "a finite number"
    raise ValueError(f"not {kind} (got {_shown(text)}): type one such as {example}")
