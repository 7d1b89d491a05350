"""The ``gpuseat`` command line: a thin layer that parses flags, calls the library, prints.

Each command group lives in its own module with a ``register(app)`` function. Those modules import
heavy libraries (scipy, torch, SQLAlchemy) inside the command functions only, so ``gpuseat --help``
stays fast.
"""

from __future__ import annotations

import sys

import click
import typer

from gpuseat.errors import GpuseatError

app = typer.Typer(
    name="gpuseat",
    help="One GPU seat per course participant: plan, carve, doctor, bench, top/monitor.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        from gpuseat import __version__

        print(f"gpuseat {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """One GPU seat per course participant: plan, carve, doctor, bench, top/monitor."""


def _register_all() -> None:
    from gpuseat.cli import bench, carve, doctor, monitor, plan

    for module in (plan, carve, doctor, bench, monitor):
        module.register(app)


_register_all()


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every ``GpuseatError`` becomes one message on stderr and its exit code."""
    try:
        result = app(args=argv, standalone_mode=False)
    except GpuseatError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        print("aborted", file=sys.stderr)
        return 130
    return result if isinstance(result, int) else 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
