"""What many commands share, declared once: ``--course``, ``--db``, groups of flags, command groups.

A command declares ``course: CourseOption = None`` instead of repeating the flag's name and help. The
help texts differ between command groups (``gpuseat serve --help`` says "the only course in the store",
``gpuseat course --help`` "the only course"); each wording has its own alias here, so ``--help`` stays as
it is while a change of wording is made in one place.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
from collections.abc import Callable
from typing import Annotated, Any

import click
import typer
from typer.core import TyperGroup

from gpuseat.core.numbers import plain_number
from gpuseat.errors import InputError

#: an in-memory SQLite URL (``sqlite://``, ``sqlite:///``, ``sqlite:///:memory:``, a driver or a query after it)
_IN_MEMORY = re.compile(r"sqlite(?:\+\w+)?://(?:/(?::memory:)?)?(?:\?.*)?", re.IGNORECASE)


def on_disk(value: str | None) -> str | None:
    """``--db`` (or ``GPUSEAT_DB_URL``) unless it is an in-memory SQLite store: a command's process ends
    with the command, so every course, roster and seat written there would be lost without a word."""
    url = (value or os.environ.get("GPUSEAT_DB_URL") or "").strip()
    if _IN_MEMORY.fullmatch(url):
        raise InputError(
            f"{url!r} is an in-memory database: what this command stores would be gone when it ends",
            where="--db / GPUSEAT_DB_URL",
            fix="give a file, e.g. sqlite:///gpuseat.db, or leave --db out for the data dir's database",
        )
    return value


class _Plain(click.ParamType):
    """A number flag's type that reads the text typed by :func:`gpuseat.core.numbers.plain_number`, the rule
    of the portal's forms too, before Click's own type checks the range (its messages stay as they were)."""

    whole = False

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):  # a default comes as the number it is
            try:
                value = plain_number(value, whole=self.whole)
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        return super().convert(value, param, ctx)


class _PlainInt(_Plain, click.types.IntParamType):
    whole = True


class _PlainIntRange(_Plain, click.IntRange):
    whole = True


class _PlainFloat(_Plain, click.types.FloatParamType):
    pass


class _PlainFloatRange(_Plain, click.FloatRange):
    pass


class _Text(click.types.StringParamType):
    """A text flag's type that refuses bytes that are not UTF-8: Python hands them over as lone surrogates
    (``gpuseat seat start -p $'\\xff'``), which no store, file or message can encode (an internal error)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = super().convert(value, param, ctx)
        if isinstance(text, str) and not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raw = text[exc.start : exc.end].encode("utf-8", "surrogateescape")[:8]
                self.fail(f"not UTF-8 text (bytes {ascii(raw)[1:]} at character {exc.start + 1}): type it in UTF-8")
        return text


def _plain_numbers(command: click.Command) -> None:
    """Make each int and float flag and argument of ``command`` read its number by the one rule (plain
    digits 0-9, an optional sign and point: no ``١٢``, ``1_000``, ``1e3``, `` 12``, ``nan``, ``inf``),
    keeping its range, name and ``--help``; and each text flag and argument refuse bytes that are not UTF-8
    (:class:`_Text`). :class:`Commands` does it for every command of the app."""
    for param in command.params:
        kind = param.type
        if type(kind) is click.types.StringParamType:
            param.type = _Text()
            continue
        if isinstance(kind, _Plain):
            continue
        if isinstance(kind, click.IntRange | click.FloatRange):
            plain: click.ParamType = (_PlainIntRange if isinstance(kind, click.IntRange) else _PlainFloatRange)(
                kind.min, kind.max, min_open=kind.min_open, max_open=kind.max_open, clamp=kind.clamp
            )
        elif isinstance(kind, click.types.IntParamType | click.types.FloatParamType):
            plain = _PlainInt() if isinstance(kind, click.types.IntParamType) else _PlainFloat()
        else:
            continue
        param.type = plain


#: ``--course`` and ``--db`` of the course store's commands (course, roster, seats, seat, host, vms …)
CourseOption = Annotated[str | None, typer.Option("--course", help="Course key (default: the only course).")]
DbOption = Annotated[
    str | None,
    typer.Option(
        "--db", help="Course database URL (default: GPUSEAT_DB_URL or SQLite in the data dir).", callback=on_disk
    ),
]
#: ``--db`` in the words of ``gpuseat slurm`` and ``gpuseat seats skypilot``
ShortDbOption = Annotated[
    str | None,
    typer.Option("--db", help="Course database URL (default: GPUSEAT_DB_URL or the data dir).", callback=on_disk),
]
#: ``--course`` and ``--db`` in the words of ``serve``, ``admin``, ``report`` and ``survey`` (``--db``
#: also of ``top``, ``monitor`` and ``usage``)
StoreCourseOption = Annotated[
    str | None, typer.Option("--course", help="Course key (default: the only course in the store).")
]
StoreDbOption = Annotated[
    str | None,
    typer.Option("--db", help="Database URL (default: GPUSEAT_DB_URL or SQLite in the data dir).", callback=on_disk),
]

#: ``--force`` of the commands that write one file, and of those that write into a folder
ForceReplaceOption = Annotated[bool, typer.Option("--force", help="Replace an existing file.")]
ForceFolderOption = Annotated[bool, typer.Option("--force", help="Write into a folder gpuseat did not write.")]
#: ``--timeout`` of ``seats check`` and ``host status`` (each with its own default)
ProbeTimeoutOption = Annotated[float, typer.Option("--timeout", help="Seconds each seat's probe may take.")]
#: ``--participant``/``-p`` of ``gpuseat seat``'s actions, each for one participant (required)
RequiredParticipantOption = Annotated[
    str, typer.Option("--participant", "-p", help="The participant (key, email or Unix user).")
]
#: ``--participant`` of ``seats assign`` and ``seats release``: one participant, or left out for all or by ``--seat``
OptionalParticipantOption = Annotated[str | None, typer.Option("--participant", help="Key, email or Unix user.")]


def shared_flags(name: str, group: Callable[..., object]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command the flags of ``group`` (a function whose parameters are Typer options), declared once
    for every command that takes them.

    ``group``'s parameters stand in the command's signature, and so in its ``--help``, where its
    parameter ``name`` stands; the command is called with ``name=group(**those flags)``, the one value
    the flags make together, built before the command runs (so ``group`` may refuse a bad flag first).
    """

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        flags = inspect.signature(group, eval_str=True).parameters
        own = inspect.signature(command, eval_str=True).parameters
        params = [q for p in own.values() for q in (flags.values() if p.name == name else [p])]

        @functools.wraps(command)
        def run(**given: Any) -> None:
            grouped = group(**{flag: given.pop(flag) for flag in flags})
            command(**given, **{name: grouped})

        # keyword-only: Typer calls with keywords, and so the shared flags may stand before or after the command's own
        run.__signature__ = inspect.Signature([p.replace(kind=p.KEYWORD_ONLY) for p in params])  # type: ignore[attr-defined]
        return run

    return decorate


def changed(*names: str) -> list[tuple[str, Any]]:
    """(flag, value) of each of the running command's parameters ``names`` whose value is not the default
    its option declares, in that order: the defaults stay where the options declare them."""
    ctx = click.get_current_context()
    params = {p.name: p for p in ctx.command.params}
    return [(params[n].opts[0], ctx.params[n]) for n in names if ctx.params.get(n) != params[n].default]


class Commands(TyperGroup):
    """A command group that says "No such command" (exit 2) for every name it lacks.

    Click takes a name that starts with a character other than a letter or digit (``./roster.csv``,
    ``/tmp/course.toml``, ``+x``) for an option and parses again; with no argument left, a group printed
    its help and exited 0, so ``gpuseat roster ./roster.csv`` (``import`` left out) looked done to a script.

    Its commands' number flags and arguments (and its own) read their numbers by the one rule of
    :func:`gpuseat.core.numbers.plain_number`: every group of the app is one of these, so every number is.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for command in (self, *self.commands.values()):
            _plain_numbers(command)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if not name.startswith("-") and not ctx.resilient_parsing and self.get_command(ctx, name) is None:
            ctx.fail(f"No such command {name!r}.")
        return super().resolve_command(ctx, args)


def add_group(parent: typer.Typer, name: str, help: str) -> typer.Typer:
    """A command group ``name`` under ``parent`` (run without a subcommand, it shows its help)."""
    group = typer.Typer(help=help, no_args_is_help=True, cls=Commands)
    parent.add_typer(group, name=name)
    return group
