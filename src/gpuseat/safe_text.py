"""Text from user data made safe for a terminal, a CSV file or a log line.

A roster, a course file, a capture or a database row can carry control characters: an escape
sequence printed raw can rewrite the organizer's terminal (clear it, change its title, hide lines),
and a CSV cell starting with ``=`` runs as a formula in a spreadsheet. Every string from user data
passes :func:`clean` before it is printed and :func:`csv_cell` before it is written to a CSV file.
"""

from __future__ import annotations

import re
from typing import Any

# C0 controls except tab and newline, DEL, C1 controls, and the bidirectional overrides that can
# reorder what a reader sees (U+202A–U+202E, U+2066–U+2069).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# ASCII controls, tab and newline included, and DEL: what a stored one-line value (a roster cell) may not hold.
_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
REPLACEMENT = "\ufffd"
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def clean(value: str, *, one_line: bool = False) -> str:
    """``value`` with every control character replaced by U+FFFD (newlines kept unless ``one_line``)."""
    pattern = _UNSAFE_ONE_LINE if one_line else _UNSAFE
    return pattern.sub(REPLACEMENT, value)


def has_control(value: str) -> bool:
    """True when ``value`` holds a character :func:`clean` would replace (newlines allowed)."""
    return _UNSAFE.search(value) is not None


def check_note(note: str, *, where: str = "--note") -> str:
    """``note`` when it is one line under 500 characters without control characters (a way in's note, a top-up's):
    it is shown on a participant's page and in terminals, so no escape sequence and no bidi override; else an
    input error, never a note cut or cleaned unsaid."""
    from gpuseat.errors import InputError

    if len(note) > 500 or clean(note, one_line=True) != note:
        raise InputError(
            "a note must be one line under 500 characters, without control characters",
            where=where,
            fix="shorten it to one line of plain text",
        )
    return note


def has_ascii_control(value: str) -> bool:
    """True when ``value`` holds an ASCII control character (tab and newline too) or DEL: the check for a
    value that is stored as one line (non-ASCII controls are cleaned by :func:`clean` where it is shown)."""
    return _ASCII_CONTROL.search(value) is not None


def csv_cell(value: Any, *, one_line: bool = True) -> Any:
    """A CSV cell that a spreadsheet shows as text: formulas defused (a leading ``'``), controls cleaned
    (line breaks too, unless ``one_line`` is False: a survey's free-text answer keeps its lines, quoted)."""
    if not isinstance(value, str):
        return value
    text = clean(value, one_line=one_line)
    if text.lstrip(" ").startswith(_FORMULA_START) and not _is_number(text):  # " =1+1" runs too
        return "'" + text
    return text


def csv_value(cell: str) -> str:
    """A cell of a CSV gpuseat wrote, read back as the value it was: the apostrophe :func:`csv_cell` put
    before a formula is taken off, so a roster downloaded, edited and imported again keeps ``-Ann`` (it
    became ``'-Ann``). Only that apostrophe: one :func:`csv_cell` would not have written stays."""
    rest = cell[1:]
    return rest if cell.startswith("'") and csv_cell(rest) == cell else cell


def _is_number(text: str) -> bool:
    """``-3.5`` is a number, not a formula: keep negative amounts readable."""
    try:
        float(text)
    except ValueError:
        return False
    return True


class CleanLogRecords:
    """A :mod:`logging` filter that cleans every record's message: a log line is one line of text."""

    def filter(self, record: Any) -> bool:
        """Render the message once, cleaned, so a participant's name cannot forge or hide log lines."""
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a bad format string: log it as it came
            return True
        record.msg, record.args = clean(message, one_line=True), ()
        return True


def log_handler(fmt: str) -> Any:
    """A stderr handler with ``fmt`` whose records are cleaned (:class:`CleanLogRecords`)."""
    import logging

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(fmt))
    handler.addFilter(CleanLogRecords())
    return handler
