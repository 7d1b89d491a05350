"""CSV downloads of the portal (access links, roster, seats): every cell defused against formulas.

A spreadsheet runs a cell that starts with ``= + - @`` (or a tab / carriage return before one) as a
formula; names, emails and seat keys come from rosters and must never do that. Such a cell gets a
leading apostrophe, which spreadsheets show as text and drop from the value.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import Any

FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def defuse(value: Any) -> str:
    """One cell as text that no spreadsheet evaluates."""
    text = "" if value is None else str(value)
    return f"'{text}" if text.lstrip(" ")[:1] in FORMULA_START else text


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A CSV document (header first), every cell defused."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([defuse(h) for h in header])
    for row in rows:
        writer.writerow([defuse(v) for v in row])
    return out.getvalue()
