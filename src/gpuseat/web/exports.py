"""CSV downloads of the portal (access links, roster, seats): every cell passes
:func:`gpuseat.safe_text.csv_cell`, the one rule the CLI's CSV output follows too.

A spreadsheet runs a cell that starts with ``= + - @`` (or a tab / carriage return before one) as a
formula; names, emails and seat keys come from rosters and must never do that. Such a cell gets a
leading apostrophe, which spreadsheets show as text and drop from the value; a number such as ``-3.5``
stays a number.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import Any

from gpuseat.safe_text import csv_cell


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A CSV document (header first), every cell defused."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([csv_cell(h) for h in header])
    for row in rows:
        writer.writerow([csv_cell(v) for v in row])
    return out.getvalue()
