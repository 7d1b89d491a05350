"""``python -m gpuseat`` runs the CLI."""

from gpuseat.cli import run

run()
