"""Printing results as a Rich table, JSON or CSV: the one place that formats for the terminal."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any

import typer


class Format(StrEnum):
    """Output formats every data command accepts."""

    table = "table"
    json = "json"
    csv = "csv"


FORMAT_OPTION = typer.Option(Format.table, "--format", "-f", help="Output format.")


def print_json(obj: Any) -> None:
    """Pretty JSON on stdout (``default=str`` keeps dates and paths printable)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def print_csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> None:
    """CSV with a header on stdout."""
    from gpuseat.safe_text import csv_cell

    writer = csv.DictWriter(sys.stdout, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: csv_cell(v) for k, v in row.items()})


#: Above this many rows a table is printed as plain aligned text in one pass: Rich lays out every
#: cell (measure, wrap, borders), which takes minutes for a 150,000-row catalog.
RICH_TABLE_MAX_ROWS = 500


def print_table(rows: Iterable[Mapping[str, Any]], columns: Sequence[str], title: str | None = None) -> None:
    """A table on stdout: Rich for a screenful, plain aligned columns for long listings."""
    from gpuseat.safe_text import clean

    cells = [["" if row.get(c) is None else clean(str(row.get(c)), one_line=True) for c in columns] for row in rows]
    heads = [clean(col, one_line=True) for col in columns]
    if len(cells) > RICH_TABLE_MAX_ROWS:
        _plain_table(cells, heads, None if title is None else clean(title, one_line=True))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=None if title is None else clean(title, one_line=True))
    for col in heads:
        table.add_column(col)
    for line in cells:
        table.add_row(*line)
    Console().print(table)


def _plain_table(cells: list[list[str]], heads: list[str], title: str | None) -> None:
    widths = [len(h) for h in heads]
    for line in cells:
        for i, cell in enumerate(line):
            if len(cell) > widths[i]:
                widths[i] = len(cell)
    out = sys.stdout
    if title:
        out.write(title + "\n")
    out.write("  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    out.writelines("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n" for line in cells)


def print_rows(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], fmt: Format, title: str | None = None
) -> None:
    """Rows in the chosen format: JSON (all fields), CSV or a table (``columns``)."""
    if fmt is Format.json:
        print_json(list(rows))
    elif fmt is Format.csv:
        print_csv(rows, columns)
    else:
        print_table(rows, columns, title=title)


def stderr_console() -> Any:
    """A Rich console on stderr, for warnings and progress that must not mix with JSON on stdout."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)
