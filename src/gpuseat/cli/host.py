"""CLI for ``gpuseat host up|status|down``: the shared-host engine, run as root on the GPU server."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuseat.cli._options import CourseOption, DbOption, ProbeTimeoutOption, add_group, shared_flags
from gpuseat.cli._output import Format, FormatOption, print_rows
from gpuseat.cli.course import actor

HOST_COLUMNS = ("seat", "participant", "engine", "state", "reason", "checked_at")


#: ``--host`` of ``host up`` and ``host down``
HostOption = Annotated[
    str | None, typer.Option("--host", help="This server's name in the seats (default: the only one).")
]


def host_settings(
    ssh_host: str | None = typer.Option(None, "--ssh-host", help="The name participants connect to (DNS name or IP)."),
    ssh_port: str | None = typer.Option(None, "--ssh-port", help="sshd's port when not 22."),
    jump_host: str | None = typer.Option(None, "--jump-host", help="Jump host participants go through (ssh -J)."),
    dev_root: str | None = typer.Option(None, "--dev-root", help="Where the device files are (default /dev)."),
    proc_root: str | None = typer.Option(None, "--proc-root", help="Where /proc is (mig-minors; default /proc)."),
    nvidia_smi: str | None = typer.Option(None, "--nvidia-smi", help="The nvidia-smi to run (default: from PATH)."),
    keys_dir: str | None = typer.Option(None, "--keys-dir", help="Root-owned authorized keys per user."),
    sshd_dropin: str | None = typer.Option(None, "--sshd-dropin", help="sshd drop-in gpuseat writes."),
    profile_d: str | None = typer.Option(None, "--profile-d", help="/etc/profile.d file gpuseat writes."),
    systemd_dir: str | None = typer.Option(None, "--systemd-dir", help="Where user slice drop-ins go."),
    group: str | None = typer.Option(None, "--group", help="Unix group of course accounts (default gpuseat)."),
    probe_port: str | None = typer.Option(None, "--probe-port", help="sshd port for the loopback probe."),
) -> dict[str, str]:
    """The host engine settings ``gpuseat host up`` takes as flags (see
    :func:`~gpuseat.cli._options.shared_flags`): those given, by setting name."""
    flags = locals()  # the parameters, and only they: nothing else is defined yet
    return {name: str(value) for name, value in flags.items() if value not in (None, "")}


def register(app: typer.Typer) -> None:
    """Add the ``host`` group."""
    host_app = add_group(
        app, "host", "Shared GPU host: accounts, keys and device access per seat (run as root on the server)."
    )

    @host_app.command("up")
    @shared_flags("settings", host_settings)
    def up(
        course: CourseOption = None,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
        host: HostOption = None,
        *,
        settings: dict[str, str],
    ) -> None:
        """Same as ``gpuseat apply --engine host``: flags are stored as the course's host settings first
        (so the agent uses them too), then this server is made to match the course."""
        _apply(course, db, host, fmt, settings, revoke_all=False)

    @host_app.command("down")
    def down(
        course: CourseOption = None,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
        host: HostOption = None,
    ) -> None:
        """Course end on this server: every holder loses keys and login, device files go back to root only."""
        _apply(course, db, host, fmt, {}, revoke_all=True)

    @host_app.command("status")
    def status(
        course: CourseOption = None,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
        timeout: ProbeTimeoutOption = 20.0,
    ) -> None:
        """Probe every host seat as its participant (the same check as ``gpuseat seats check``)."""
        from gpuseat.services.checks import check_seats
        from gpuseat.store import open_store

        with open_store(db, create=False) as store:
            results = [r for r in check_seats(store, course, timeout=timeout, actor=actor()) if r.engine == "host"]
        rows = [r.to_dict() for r in results]
        print_rows(rows, HOST_COLUMNS, fmt, title=f"{sum(r.ready for r in results)}/{len(results)} ready")


def _apply(course: str | None, db: str | None, host: str | None, fmt: Format, settings: dict[str, str], *,
           revoke_all: bool) -> None:  # fmt: skip
    from gpuseat.cli.apply import apply_engine

    apply_engine(
        course,
        db,
        "host",
        settings,
        fmt,
        where="gpuseat host up",
        missing="course {key!r} has no seats on the host engine",
        fix="add them: gpuseat seats add --inventory SERVER.toml --engine host (or --from-nvidia-smi)",
        host=host,
        revoke_all=revoke_all,
        headline=True,
    )
