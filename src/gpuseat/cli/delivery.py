"""CLI for ``gpuseat seats connect`` and ``gpuseat seats check``: parse flags, call the services, print."""

from __future__ import annotations

from typing import Any

import typer

from gpuseat.cli._options import CourseOption, DbOption, ProbeTimeoutOption, changed
from gpuseat.cli._output import Format, FormatOption, print_json, print_rows
from gpuseat.cli.course import actor
from gpuseat.cli.flags import named_argument
from gpuseat.errors import InputError

CHECK_COLUMNS = ("seat", "participant", "engine", "state", "reason", "visible", "checked_at")


def _bench_cell(bench: dict[str, Any] | None) -> str:
    """One table cell for a seat's ``--bench`` result: its seconds, or what went wrong."""
    if not bench:
        return ""
    if bench.get("seconds") is not None and not bench.get("finding"):
        return f"{bench['seconds']:.1f} s"
    return str(bench.get("finding") or bench.get("error") or "")


def parse_settings(values: list[str]) -> dict[str, dict[str, str]]:
    """``--set ENGINE.KEY=VALUE`` flags → engine → settings."""
    out: dict[str, dict[str, str]] = {}
    for raw in values:
        name, eq, value = raw.partition("=")
        engine, dot, key = name.partition(".")
        if not eq or not dot or not engine or not key:
            raise InputError(
                f"--set {raw!r}", where="--set", fix="write it as ENGINE.KEY=VALUE, e.g. host.ssh_port=2222"
            )
        out.setdefault(engine, {})[key] = value
    return out


def add_delivery_commands(seats_app: typer.Typer) -> None:
    """Add ``connect`` and ``check`` to the ``seats`` group."""

    @seats_app.command("connect")
    def connect(
        seat: str = typer.Argument(..., help="Seat key."),
        ssh: str | None = typer.Option(None, "--ssh", help="USER@HOST[:PORT] (USER defaults to the holder's)."),
        jump: str | None = typer.Option(None, "--jump", help="Jump host (ssh -J)."),
        url: str | None = typer.Option(None, "--url", help="A web way in (hub, notebook, portal)."),
        note: list[str] = typer.Option([], "--note", help="A line shown with the instruction (repeatable)."),
        kind: str | None = typer.Option(None, "--kind", help="ssh, jupyter, vm, slurm or web."),
        clear: bool = typer.Option(False, "--clear", help="Forget the seat's access details."),
        course: CourseOption = None,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """Set (or show) how a seat's participant gets in: SSH with port and jump host, a URL, notes."""
        from gpuseat.core.delivery import withheld
        from gpuseat.services.delivery import way_in
        from gpuseat.store import open_store

        changing = clear or ssh or url or note or jump or kind  # any of them alone is a change, never ignored
        with named_argument("seat", "SEAT"), open_store(db, create=False) as store:
            view = store.seats.get_seat(course, seat)
            if ssh and url:
                raise InputError("--ssh and --url both given", where="gpuseat seats connect", fix="give one of them")
            if clear and (ssh or url or note or jump or kind):
                raise InputError(
                    "--clear forgets the seat's way in, and other flags set one",
                    where="gpuseat seats connect",
                    fix="give --clear alone, or leave it out",
                )
            if clear:
                store.delivery.record_delivery(view.course, view.key, clear_access=True, actor=actor())
            elif changing:
                from gpuseat.services.delivery import build_access

                made = build_access(ssh, url, jump, note, kind, view.device_uuid, server_name=view.host)
                store.delivery.record_delivery(view.course, view.key, access=made, actor=actor())
            holder = store.roster.find_participant(view.course, view.participant) if view.participant else None
            current = store.seats.get_seat(view.course, view.key)
            # one read of the stored way in for both what is judged and what is printed: read twice, an
            # agent's hand-over between the reads printed the previous holder's access beside the new way
            stored = store.delivery.access_of(view.course).get(view.key)
            shown = way_in(store, current, holder, stored=stored)
        if fmt is Format.json:
            print_json(
                {
                    "seat": view.key,
                    # a way in made for the previous holder is shown to nobody
                    "access": None if withheld(shown) else stored,
                    "command": shown.command,
                    "url": shown.url,
                    "ssh_config": shown.ssh_config,
                    "missing": shown.missing,
                }
            )
            return
        if shown.missing:
            print(f"{view.key}: {shown.missing}")
            return
        print(f"{view.key}: {shown.command or shown.url}")
        for n in shown.notes:
            print(f"  {n}")

    @seats_app.command("check")
    def check(
        seat: str | None = typer.Option(None, "--seat", help="Only this seat."),
        timeout: ProbeTimeoutOption = 30.0,
        workers: int = typer.Option(16, "--workers", help="Probes at once."),
        setting: list[str] = typer.Option([], "--set", help="Engine setting ENGINE.KEY=VALUE (repeatable)."),
        bench: bool = typer.Option(False, "--bench", help="Also run the LeNet benchmark on ready seats."),
        bench_iterations: int = typer.Option(10_000, "--bench-iterations", help="LeNet iterations with --bench."),
        course: CourseOption = None,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """Probe every seat as its participant: ready = exactly one visible GPU, and it is the seat's; on host seats,
        nobody else can open it either (its device files' ACL, mode and open handles, read as root)."""
        from gpuseat.engines import registry
        from gpuseat.services.checks import check_seats, summary
        from gpuseat.store import open_store

        if not 0 < timeout <= 3600:
            raise InputError(f"{timeout:.10g} s is out of range", where="--timeout", fix="give 1 to 3600 seconds")
        if not 0 < workers <= 256:
            raise InputError(f"{workers} workers is out of range", where="--workers", fix="give 1 to 256 workers")
        if seat is not None and not seat.strip():  # "" was no seat: every seat was probed (and stored)
            raise InputError(
                "empty seat name", where="--seat", fix="name a seat (gpuseat seats status), or leave --seat out"
            )
        if not 0 < bench_iterations <= 10_000_000:
            raise InputError("--bench-iterations out of range", where="--bench-iterations", fix="1 to 10,000,000")
        if changed("bench_iterations") and not bench:  # it was dropped unsaid (and unchecked)
            raise InputError(
                "--bench-iterations is for --bench", where="--bench-iterations", fix="add --bench, or leave it out"
            )
        options = None
        if bench:
            from gpuseat.bench.run import BenchOptions

            options = BenchOptions(iterations=bench_iterations, device="cuda")
        settings = parse_settings(setting)
        with open_store(db, create=False) as store:
            for name, given in settings.items():  # a bad one was each seat's "broken" reason (exit 3)
                registry.validate_settings(name, {**store.agents.engine_settings(course, name), **given})
            results = check_seats(
                store,
                course,
                seat=seat,
                timeout=timeout,
                workers=workers,
                settings=settings,
                actor=actor(),
                bench=options,
            )
        counts = summary(results)
        if fmt is Format.json:
            print_json({"summary": counts, "seats": [r.to_dict() for r in results]})
        else:
            rows = [{**r.to_dict(), "visible": " ".join(r.visible), "bench": _bench_cell(r.bench)} for r in results]
            columns = (*CHECK_COLUMNS, "bench") if bench else CHECK_COLUMNS
            print_rows(rows, columns, fmt, title=f"{counts['ready']}/{counts['total']} ready")
        if counts["broken"]:
            raise typer.Exit(3)
        if any(r.bench and r.bench.get("finding") for r in results):
            raise typer.Exit(1)  # ready, but the benchmark failed or the seat is slow (like bench --all-seats)
