"""How amounts of seat hours print, everywhere a person reads them (pages, the CLI, reasons the agent stores).

A module of its own, with no imports, because ``gpuseat plan`` prints seat hours too and loads nothing it
does not use (its start-up is measured: benchmarks/bench_startup.py)."""

from __future__ import annotations


def hours_text(hours: float) -> str:
    """Seat hours as people write them, the one format of quotas and totals on the portal's pages and in the
    CLI: ``1000000``, ``1234567.5``, ``0.33`` (to the hundredth, no trailing zeros, never an exponent: ``%g``
    wrote a million hours as ``1e+06``); an amount under 0.005 h keeps two digits (``0.00001``), so a quota
    above 0 never reads 0 h."""
    text = f"{hours:.2f}".rstrip("0").rstrip(".")
    if text in ("0", "-0") and hours:
        from decimal import Decimal

        text = format(Decimal(f"{hours:.2g}"), "f")
    return "0" if text == "-0" else text
