"""CLI for `gpuseat monitor` (filled in by its issue)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the command(s) of this group to the app."""
