"""Printing results as a Rich table, JSON or CSV: the one place that formats for the terminal."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

import typer


class Format(StrEnum):
    """Output formats every data command accepts.

    ``table`` fits the terminal (80 columns when it is not one): long cells wrap between words and,
    when that is not enough, the least needed columns are hidden (the table says which). ``wide``
    is a table with every column, as wide as it needs.
    """

    table = "table"
    wide = "wide"
    json = "json"
    csv = "csv"


#: set by ``-f wide`` for the command being run: its tables show every column
_wide = False


def _choose_format(value: Format | str | None) -> Format | str | None:
    """Remember ``-f wide`` for :func:`print_table`; the command itself sees ``table``."""
    global _wide
    _wide = value == Format.wide
    return Format.table if _wide else value


def wide_tables() -> bool:
    """True when the command runs with ``-f wide`` (its tables show every column)."""
    return _wide


#: ``-f/--format`` of every data command: ``fmt: FormatOption = Format.table``
FormatOption = Annotated[
    Format,
    typer.Option(
        "--format",
        "-f",
        callback=_choose_format,
        help="Output format: table (fits the terminal), wide (a table with every column), json or csv.",
    ),
]


def print_json(obj: Any) -> None:
    """Pretty JSON on stdout (``default=str`` keeps dates and paths printable)."""
    import json  # here, as csv below: a table run does not load them

    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def print_csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> None:
    """CSV with a header on stdout."""
    import csv

    from gpuseat.safe_text import csv_cell

    writer = csv.DictWriter(sys.stdout, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: csv_cell(v) for k, v in row.items()})


#: Above this many rows a table is printed as plain aligned text in one pass: Rich lays out every
#: cell (measure, wrap, borders), which takes minutes for a 150,000-row catalog.
RICH_TABLE_MAX_ROWS = 500


def print_table(
    rows: Iterable[Mapping[str, Any]],
    columns: Sequence[str],
    title: str | None = None,
    *,
    drop: Sequence[str] | None = None,
    wide: bool | None = None,
) -> None:
    """A table on stdout: Rich for a screenful, plain aligned columns for long listings.

    The table fits the terminal: cells wrap between words (never inside one), and when even that is
    too wide, columns are hidden: first those empty in every row, then ``drop`` in its order (default:
    from the right, never the first column); a caption names them. ``wide`` (or ``-f wide``) shows
    every column, however wide.
    """
    from gpuseat.safe_text import clean

    cells = [["" if row.get(c) is None else clean(str(row.get(c)), one_line=True) for c in columns] for row in rows]
    heads = [clean(col, one_line=True) for col in columns]
    if len(cells) > RICH_TABLE_MAX_ROWS:
        _plain_table(cells, heads, None if title is None else clean(title, one_line=True))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # every cell, head and title as plain Text: a value is printed as typed, never read as Rich markup
    # ("[/bold]" in a name would stop the command) or as an emoji code (":fire:")
    console = Console()
    layout = fit_columns(heads, cells, console.width, drop=drop, wide=_wide if wide is None else wide)
    caption = None
    if layout.hidden:
        caption = Text(f"columns hidden to fit {console.width}: {', '.join(layout.hidden)} (-f wide shows all)")
    named = None if title is None else Text(clean(title, one_line=True))
    table = Table(title=named, caption=caption)
    if layout.compact:
        table = Table(title=named, caption=caption, box=None, show_edge=False, pad_edge=False, header_style="bold")
    for i in layout.shown:
        if layout.widths is None:
            table.add_column(Text(heads[i]))
        else:
            table.add_column(Text(heads[i]), width=layout.widths[i], overflow="fold")
    for line in cells:
        table.add_row(*(Text(line[i]) for i in layout.shown))
    if layout.total > console.width:  # wider than the terminal (-f wide, or a word too long): never cut
        console = Console(width=layout.total)
    console.print(table)


@dataclass(frozen=True)
class TableLayout:
    """Which columns a table shows (indexes), their widths (None: as Rich measures them), its width,
    and whether it is drawn without rules (``compact``: when the ruled table cannot fit)."""

    shown: list[int]
    hidden: list[str]
    widths: dict[int, int] | None
    total: int
    compact: bool = False


def _frame(widths: Iterable[int], n: int, compact: bool = False) -> int:
    """A Rich table's width for these content widths: one space each side of a cell and n + 1 rules,
    or (compact) two spaces between cells and nothing around them."""
    return sum(widths) + (2 * (n - 1) if compact else 3 * n + 1)


def fit_columns(
    heads: Sequence[str], cells: Sequence[Sequence[str]], width: int, *, drop: Sequence[str] | None, wide: bool
) -> TableLayout:
    """Lay a table out in ``width`` columns (see :func:`print_table`).

    First as it is; else with cells wrapped between words so that the longest word of each column
    fits, with rules or else without, hiding only columns that are empty in every row; else the same
    hiding ``drop`` (default: from the right, never the first column) in its order. A word is never
    cut: when even that does not fit, the table is wider than ``width``.
    """
    from rich.cells import cell_len

    n = len(heads)
    natural = [max([cell_len(heads[i])] + [cell_len(line[i]) for line in cells]) for i in range(n)]
    if wide or _frame(natural, n) <= width:
        return TableLayout(list(range(n)), [], None, _frame(natural, n))
    words = [
        max(cell_len(w) for text in [heads[i]] + [line[i] for line in cells] for w in (text.split() or [""]))
        for i in range(n)
    ]
    empty = [i for i in range(1, n) if not any(line[i] for line in cells)]
    order = [heads.index(c) for c in drop if c in heads] if drop is not None else list(range(n - 1, 0, -1))
    # columns with something in them are hidden only when the table fits neither way without hiding them
    for compact, droppable in ((False, empty), (True, empty), (False, order), (True, order)):
        shown = list(range(n))
        for i in empty + [i for i in droppable if i not in empty]:
            if _frame((words[j] for j in shown), len(shown), compact) <= width:
                break
            if i in shown and len(shown) > 1:
                shown.remove(i)
        if _frame((words[j] for j in shown), len(shown), compact) <= width:
            break
    widths = {i: natural[i] for i in shown}
    excess = _frame(widths.values(), len(shown), compact) - width
    while excess > 0:
        slack = [i for i in shown if widths[i] > words[i]]
        if not slack:
            break
        widest = max(slack, key=lambda i: (widths[i], -i))
        widths[widest] -= 1
        excess -= 1
    hidden = [heads[i] for i in range(n) if i not in shown]
    return TableLayout(shown, hidden, widths, _frame(widths.values(), len(shown), compact), compact)


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
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    fmt: Format,
    title: str | None = None,
    *,
    drop: Sequence[str] | None = None,
) -> None:
    """Rows in the chosen format: JSON (all fields), CSV or a table (``columns``; ``drop``: the columns
    a narrow terminal hides first, see :func:`print_table`)."""
    if fmt is Format.json:
        print_json(list(rows))
    elif fmt is Format.csv:
        print_csv(rows, columns)
    else:
        print_table(rows, columns, title=title, drop=drop, wide=True if fmt is Format.wide else None)


def stderr_console() -> Any:
    """A Rich console on stderr, for warnings and progress that must not mix with JSON on stdout."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True, emoji=False)  # ":fire:" in a message stays as typed
