"""CLI for ``gpuseat seats skypilot``: SkyPilot task files and the start/stop schedule of a course's cloud seats."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuseat.cli._options import CourseOption, ForceFolderOption, ShortDbOption
from gpuseat.cli._output import Format, FormatOption, print_json, stderr_console


def skypilot_command(
    out: Path = typer.Option(..., "--out", help="Folder for the task files, launch.sh, crontab and systemd units."),
    course: CourseOption = None,
    db: ShortDbOption = None,
    disk_gb: int = typer.Option(50, "--disk-gb", help="Disk per seat, GB."),
    lead: int = typer.Option(10, "--lead", help="Start the seats this many minutes before each session."),
    wheelhouse: Path | None = typer.Option(
        None, "--wheelhouse", help="Folder with one gpuseat wheel (pip wheel --no-deps -w DIR .), shipped to each VM."
    ),
    offline: bool = typer.Option(
        False, "--offline", help="pip --no-index: the wheelhouse also holds every dependency's wheel."
    ),
    gpuseat_spec: str | None = typer.Option(
        None, "--gpuseat-spec", help="Instead of a wheelhouse: 'gpuseat[bench] @ https://…/gpuseat-….whl'."
    ),
    force: ForceFolderOption = False,
    fmt: FormatOption = Format.table,
) -> None:
    """Write one SkyPilot task per cloud seat and a schedule, for running sky yourself (the agent launches seats)."""
    from gpuseat.engines.skypilot import tasks as cloud
    from gpuseat.services.seat_sources import course_offers
    from gpuseat.store import open_store

    opts = cloud.TaskOptions(
        disk_gb=disk_gb,
        wheelhouse=str(wheelhouse) if wheelhouse is not None else None,
        offline=offline,
        gpuseat_spec=gpuseat_spec,
    )
    with open_store(db) as store:
        offers = course_offers(store, course)  # the catalog's and the course's own stored offers files'
        written = cloud.write_for_course(store, course, out, offers, opts, lead_min=lead, force=force)
    if fmt is Format.json:
        print_json(written.to_dict())
        return
    err = stderr_console()
    for w in written.warnings:
        err.print(f"warning: {w}", markup=False, highlight=False)
    err.print(
        "note: the agent launches and stops these seats itself (gpuseat agent --engine skypilot); "
        "use these files only where no agent runs for this course",
        markup=False,
        highlight=False,
    )
    print(f"{len(written.tasks)} task file(s) in {out}; {written.windows} session window(s)")
    for path in written.schedule:
        print(path)


def add_cloud_commands(seats_app: typer.Typer) -> None:
    """Add ``skypilot`` to the ``gpuseat seats`` group."""
    seats_app.command("skypilot")(skypilot_command)
