"""CLI for ``gpuseat seats add|assign|release|move|remove|status|export``: parse flags, call the store, print."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpuseat.cli._options import CourseOption, DbOption, OptionalParticipantOption, add_group
from gpuseat.cli._output import Format, FormatOption, print_csv, print_json, print_rows
from gpuseat.cli.course import actor
from gpuseat.errors import InputError

if TYPE_CHECKING:
    from gpuseat.store import CourseStore, SeatSpec, SeatView

#: the table of the seats ``seats add`` stored; ``seats status`` has its own, the seats CSV is services/seats_csv.py
ADDED_COLUMNS = ("key", "kind", "host", "profile", "memory_gb", "participant", "engine", "state", "connect")
STATUS_COLUMNS = (
    "seat", "kind", "participant", "engine", "state", "note", "reason", "since", "last_gpu_activity", "connect",
)  # fmt: skip
#: what an 80-column terminal hides first (``-f wide`` shows every column)
ADDED_DROP = ("connect", "participant", "engine", "state", "memory_gb", "host")
STATUS_DROP = ("last_gpu_activity", "since", "kind", "engine", "connect", "reason", "note")


class ExportFormat(StrEnum):
    """``seats export`` formats (``toml`` is the ``--seats`` file of ``top``/``monitor``)."""

    csv = "csv"
    json = "json"
    toml = "toml"


def _toml_string(value: str) -> str:
    import json

    return json.dumps(value)  # a JSON string is a valid TOML basic string


def seats_toml(seats: list[SeatView], users: dict[str, str | None]) -> str:
    """The seats file of ``gpuseat top|monitor --seats`` (only seats with a device UUID can be watched).

    Seats left out are counted in a comment at the top (and by ``seats export``, on stderr).
    """
    lines = ["# gpuseat seats file, exported from the course store (gpuseat seats export --format toml)"]
    left_out = without_device(seats)
    if left_out:
        lines.append(f"# {left_out_note(left_out)}")
    for s in seats:
        if not s.device_uuid:
            continue
        lines += ["", "[[seat]]", f"id = {_toml_string(s.key)}", f"device = {_toml_string(s.device_uuid)}"]
        for name, value in (("host", s.host), ("profile", s.profile), ("participant", s.participant)):
            if value:
                lines.append(f"{name} = {_toml_string(value)}")
        user = users.get(s.participant or "")
        if user and user != s.participant:
            lines.append(f"user = {_toml_string(user)}")
    return "\n".join(lines) + "\n"


def without_device(seats: list[SeatView]) -> list[str]:
    """Keys of the seats a seats file cannot hold: no device UUID (yet)."""
    return [s.key for s in seats if not s.device_uuid]


def left_out_note(keys: list[str]) -> str:
    """Why seats are missing from the seats file, and how they get a device UUID."""
    named = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
    return (
        f"{len(keys)} seat(s) left out, without a device UUID: {named}. top/monitor watch a seat by its "
        "GPU or MIG device UUID, which a seat gets when it is delivered (gpuseat host up) or added with "
        "--from-nvidia-smi; cloud seats get none until their machine runs"
    )


def _print_seats(seats: list[Any], fmt: Format, title: str) -> None:
    print_rows([s.to_dict() for s in seats], ADDED_COLUMNS, fmt, title=title, drop=ADDED_DROP)


def _specs(
    store: CourseStore,
    course: str | None,
    *,
    inventory: Path | None,
    mode: str,
    count: int | None,
    profile: list[str],
    cloud: bool,
    nvidia_smi: Path | None,
    engine: str,
    host: str | None,
    group: list[str],
    notes: list[str],
) -> list[SeatSpec]:
    """The seats to add; ``notes`` gets what to print once they are stored (how many fit)."""
    from gpuseat.errors import did_you_mean
    from gpuseat.services import seat_sources

    known = [str(g["name"]) for g in store.courses.get_course(course).summary.get("groups", [])] if group else []
    for g in group:  # named by flag before any carving (it was "seat 1 (seat-01): unknown group …")
        if g not in known:
            raise InputError(
                f"unknown group {g!r}.{did_you_mean(g, known)}",
                where="--group",
                fix=f"use one of the course's groups: {', '.join(known)}",
            )
    given = [x for x in (inventory, nvidia_smi) if x is not None] + ([True] if cloud else [])
    if len(given) != 1:
        raise InputError(
            "say where the seats come from",
            where="gpuseat seats add",
            fix="give one of --inventory, --cloud, --from-nvidia-smi",
        )
    if inventory is not None:
        from gpuseat.catalog.bundle import load_catalog
        from gpuseat.services import carving

        view = store.courses.get_course(course)
        needs = view.summary.get("groups", [])
        chosen = [g for g in needs if not group or g["name"] in group]
        min_mem = max((float(g["min_gpu_memory_gb"]) for g in chosen), default=0.0)
        guest = "windows" if any(g["guest_os"] == "windows" for g in chosen) else "linux"
        layout = seat_sources.carve_counted(
            inventory,
            load_catalog(),
            mode=mode,
            count=count,
            min_mem=min_mem,
            profiles=carving.profiles_from_flags(profile),
            guest=guest,
            notes=notes,
        )
        # a second server's slices are named seat-01 … again: its seats number on after the course's
        have = store.seats.seats(course)
        start = seat_sources.next_number([s.key for s in have])
        specs = seat_sources.seats_from_layout(layout, engine=engine, host=host, groups=group, start=start)
        seat_sources.refuse_carved_again(have, specs, where=f"--inventory {inventory}")
        return specs
    if cloud:
        # the course's offers, its own stored offers files included: those its plan option was chosen from
        made = seat_sources.cloud_seats(store, course, seat_sources.course_offers(store, course), count=count)
        warning = seat_sources.cloud_over_plan(store, course, len(made))
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
        return made
    assert nvidia_smi is not None
    from gpuseat import nvsmi
    from gpuseat.core.listing import parse_list
    from gpuseat.files import read_text

    text = read_text(nvidia_smi, max_bytes=nvsmi.MAX_XML_BYTES)
    existing = seat_sources.next_number([s.key for s in store.seats.seats(course)]) - 1
    if text.lstrip().startswith("<"):
        snapshot = nvsmi.parse_xml(text, host=host or "localhost", where=str(nvidia_smi))
        found = seat_sources.seats_from_nvidia_smi(snapshot, host=host, start=existing + 1)
    else:
        found = seat_sources.seats_from_nvidia_smi(None, parse_list(text), host=host, start=existing + 1)
    if engine == "manual":
        return found
    from gpuseat.files import validate
    from gpuseat.store import SeatSpec

    # an engine delivers these seats: they are planned until it has set them up (gpuseat host up)
    return [
        validate(SeatSpec, {**f.model_dump(), "engine": engine, "state": "planned"}, where="--engine") for f in found
    ]


def _next_steps(course: str, engines: list[str]) -> None:
    """After a change of holder: the agent carries it out; say so, and how to do it now without one."""
    from gpuseat.engines import registry

    delivering = sorted(set(engines) & set(registry.delivering()))
    if delivering:
        print(
            f"  the agent applies this within seconds (gpuseat agent status); without an agent: "
            f"gpuseat apply --course {course}"
        )


def _move_from_host(
    host: str, to_host: str | None, *, partial: bool, dry_run: bool, course: str | None, db: str | None, fmt: Format
) -> None:
    """``seats move --from-host``: everyone on a dead server to the best suitable free seats elsewhere."""
    from gpuseat.cli.flags import named_argument
    from gpuseat.store import open_store

    with open_store(db) as store, named_argument("from_host", "--from-host"), named_argument("to_host", "--to-host"):
        report = store.seats.move_from_host(
            course, host, to_host=to_host, partial=partial, dry_run=dry_run, actor=actor()
        )
        touched = {m.from_seat for m in report.moved} | {m.seat for m in report.moved}
        engines = [s.engine for s in store.seats.seats(report.course) if s.key in touched]
    if fmt is Format.json:
        print_json(report.to_dict())
        return
    if not report.moved and not report.stayed:
        print(f"nobody holds a seat on {host}")
        return
    if report.moved:
        print(f"{'would move' if dry_run else 'moved'} {len(report.moved)} holder(s) off {host}:")
    for m in report.moved:
        print(f"{m.participant}: {m.from_seat} ({m.from_host}) -> {m.seat} ({m.host or 'no host'})")
    if report.stayed:
        where = f"on {to_host}" if to_host else "elsewhere"
        print(f"stayed on {host} (no suitable free seat {where}): {', '.join(report.stayed)}")
    if dry_run:
        print("dry run: nothing was stored")
    if dry_run or not report.moved:
        return
    _next_steps(report.course, engines)
    seats = f"the seats they left on {host} are" if report.stayed else f"{host}'s seats are"
    print(f"{seats} free now; `gpuseat seats remove SEAT...` if the server is gone for good")


def register(app: typer.Typer) -> None:
    """Add the ``seats`` group."""
    seats_app = add_group(app, "seats", "Seats of a course: add, assign, release, move, remove, status, export.")

    @seats_app.command("add")
    def add(
        inventory: Path | None = typer.Option(None, "--inventory", help="Carve this server inventory (TOML)."),
        mode: str = typer.Option("auto", "--mode", help="Carve mode: auto, passthrough, mig, vgpu, timeslice, mps."),
        count: int | None = typer.Option(None, "--seats", "--count", help="How many seats (default: all that fit)."),
        profile: list[str] = typer.Option([], "--profile", help="Carve these MIG/vGPU profiles (comma-separated)."),
        cloud: bool = typer.Option(False, "--cloud", help="Cloud seats from the course's plan option."),
        nvidia_smi: Path | None = typer.Option(
            None, "--from-nvidia-smi", help="`nvidia-smi -q -x` or `-L` output: one seat per GPU/MIG, UUIDs filled."
        ),
        engine: str = typer.Option("manual", "--engine", help="Engine that will provision them (libvirt, …)."),
        host: str | None = typer.Option(None, "--host", help="The seats' host name (default: the server's name)."),
        group: list[str] = typer.Option([], "--group", help="Reserve the seats for these course groups."),
        course: CourseOption = None,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """Add seats from a carve layout, a plan's cloud option or nvidia-smi; all or nothing.

        With one ``--profile`` and no ``--count``, as many instances as fit are carved (the number is
        printed); ``--count N`` asks for exactly N.
        """
        from gpuseat.services import seat_sources
        from gpuseat.store import open_store

        notes: list[str] = []  # said only once the seats are stored, of the seats added
        with open_store(db) as store:
            specs = _specs(
                store,
                course,
                inventory=inventory,
                mode=mode,
                count=count,
                profile=profile,
                cloud=cloud,
                nvidia_smi=nvidia_smi,
                engine=engine,
                host=host,
                group=group,
                notes=notes,
            )
            if not specs:
                print("no seats to add: every participant has a suitable seat already")
                return
            if inventory is not None:  # its ssh_host and jump_host checked before any seat is stored (all or nothing)
                seat_sources.inventory_access(inventory)
            added = store.seats.add_seats(course, specs, actor=actor())
            if inventory is not None:
                seat_sources.record_inventory_access(store, added, inventory, actor=actor())
        for note in notes:
            span = added[0].key if len(added) == 1 else f"{added[0].key} … {added[-1].key}"
            print(f"{note}: {span} (use --count N for fewer)", file=sys.stderr if fmt is Format.json else sys.stdout)
        _print_seats(added, fmt, f"{len(added)} seat(s) added")

    @seats_app.command("assign")
    def assign(
        participant: OptionalParticipantOption = None,
        seat: str | None = typer.Option(None, "--seat", help="The seat to give (with --participant)."),
        partial: bool = typer.Option(False, "--partial", help="Assign what fits when seats run short."),
        course: CourseOption = None,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """Give every participant without a seat a suitable one (stable), or one participant a chosen seat."""
        from gpuseat.store import open_store

        with open_store(db) as store:
            if participant is not None and seat is not None:
                made = store.seats.assign(course, participant, seat, actor=actor())
                print_json(made.to_dict()) if fmt is Format.json else print(f"{made.participant} → {made.seat}")
                return
            if participant is not None:
                got = store.claims.claim_seat(course, participant, actor=actor())
                print_json(got.to_dict()) if fmt is Format.json else print(f"{got.participant} → {got.key}")
                return
            if seat is not None:
                raise InputError("--seat needs --participant", where="--seat", fix="add --participant P")
            report = store.seats.assign_all(course, partial=partial, actor=actor())
        if fmt is Format.json:
            print_json(report.to_dict())
            return
        print(f"course {report.course}: {len(report.assigned)} assigned, {report.kept} kept")
        for a in report.assigned:
            print(f"  {a.participant} → {a.seat}")
        if report.unassigned:
            print(f"  without a seat: {', '.join(report.unassigned)}")

    @seats_app.command("release")
    def release(
        participant: OptionalParticipantOption = None,
        seat: str | None = typer.Option(None, "--seat", help="Seat key."),
        reason: str = typer.Option(
            "released", "--reason", help="Why (kept in the history: one line, at most 32 characters)."
        ),
        course: CourseOption = None,
        db: DbOption = None,
    ) -> None:
        """End a participant's (or a seat's) assignment; the history keeps it."""
        from gpuseat.store import open_store

        with open_store(db) as store:
            done = store.seats.release(course, participant=participant, seat=seat, reason=reason, actor=actor())
            engines = [] if done is None else [store.seats.get_seat(done.course, done.seat).engine]
        print("nothing to release" if done is None else f"released {done.seat} from {done.participant}")
        _next_steps(done.course if done else "", engines)

    @seats_app.command("move")
    def move(
        participant: OptionalParticipantOption = None,
        seat: str | None = typer.Option(None, "--seat", help="The free seat to move to (with --participant)."),
        from_host: str | None = typer.Option(
            None, "--from-host", help="Move everyone on this host (a dead server) to suitable free seats elsewhere."
        ),
        to_host: str | None = typer.Option(None, "--to-host", help="With --from-host: only to seats on this host."),
        partial: bool = typer.Option(False, "--partial", help="With --from-host: move who fits when seats run short."),
        dry_run: bool = typer.Option(False, "--dry-run", help="With --from-host: print the moves, store nothing."),
        course: CourseOption = None,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """Move a participant to another free seat (the old assignment is closed, not deleted), or with
        --from-host everyone on a host to the best suitable free seats elsewhere (the rule of seats assign)."""
        from gpuseat.store import open_store

        if from_host is not None:
            if participant is not None or seat is not None:
                raise InputError(
                    "it moves everyone on a host; --participant and --seat move one person",
                    where="--from-host",
                    fix="give either --from-host H or --participant P --seat S",
                )
            _move_from_host(from_host, to_host, partial=partial, dry_run=dry_run, course=course, db=db, fmt=fmt)
            return
        host_only = [
            f for f, given in (("--to-host", to_host), ("--partial", partial), ("--dry-run", dry_run)) if given
        ]
        if host_only:
            raise InputError(
                "it goes with --from-host only",
                where=host_only[0],
                fix="add --from-host H, or leave it out",
            )
        if participant is None or seat is None:
            given = "--participant" if participant is not None else "--seat" if seat is not None else None
            raise InputError(
                f"it needs {'--seat' if seat is None else '--participant'}" if given else "name who moves where",
                where=given or "gpuseat seats move",
                fix="give --participant P --seat S, or --from-host H to move everyone on a host",
            )
        with open_store(db) as store:
            before = store.seats.seat_of(course, participant)
            made = store.seats.move(course, participant, seat, actor=actor())
            engines = [store.seats.get_seat(made.course, made.seat).engine] + ([before.engine] if before else [])
        print_json(made.to_dict()) if fmt is Format.json else print(f"{made.participant} → {made.seat}")
        if fmt is not Format.json:
            _next_steps(made.course, engines)

    @seats_app.command("remove")
    def remove(
        seats: list[str] = typer.Argument(..., help="Seat keys (planned, released or failed, held by nobody)."),
        force: bool = typer.Option(
            False,
            "--force",
            help="Also a requested or running seat nobody holds: its engine takes down what it made for it.",
        ),
        course: CourseOption = None,
        db: DbOption = None,
    ) -> None:
        """Remove seats nobody holds (added by mistake, failed for good): planned, released or failed ones,
        any state with --force (all or nothing)."""
        from gpuseat.store import open_store

        with open_store(db) as store:
            gone = store.lifecycle.remove_seats(course, seats, actor=actor(), force=force)
        print(f"removed {len(gone)} seat(s): {', '.join(gone)}")

    @seats_app.command("status")
    def status(course: CourseOption = None, db: DbOption = None, fmt: FormatOption = Format.table) -> None:
        """Seat, participant, engine, state (with its reason and a note when the holder gets no access: closed
        hours, another course's older holder) and the last GPU activity the monitor saw."""
        from datetime import UTC, datetime

        from gpuseat.store.lite import full_status, seat_status

        # the light read (the DB-API driver, no ORM) when the database is at the newest schema; else the store
        found = seat_status(db, course)
        if found is None:
            from gpuseat.store import open_store

            with open_store(db) as store:
                found = full_status(store, course)
        seats, last = found.seats, found.last_active
        notes = found.notes()
        rows = []
        for s in seats:
            ts = last.get(s.id)
            rows.append(
                {
                    "seat": s.key,
                    "kind": s.kind,
                    "participant": s.participant,
                    "engine": s.engine,
                    "state": s.state,
                    "note": notes.get(s.key),  # what the engines do that the state does not say
                    "reason": s.state_reason,  # an engine's honest state: not launched, launching, stopped …
                    "since": s.state_at.isoformat(timespec="seconds") if s.state_at else None,
                    "last_gpu_activity": datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds") if ts else None,
                    "connect": s.connect,
                }
            )
        title = f"seats of {seats[0].course}" if seats else "seats"
        columns: tuple[str, ...] = STATUS_COLUMNS  # a table without a note has no note column (json, csv: always)
        if fmt in (Format.table, Format.wide) and not any(r["note"] for r in rows):
            columns = tuple(c for c in STATUS_COLUMNS if c != "note")
        print_rows(rows, columns, fmt, title=title, drop=STATUS_DROP)

    @seats_app.command("export")
    def export(
        fmt: ExportFormat = typer.Option(ExportFormat.csv, "--format", "-f", help="csv, json or toml (seats file)."),
        course: CourseOption = None,
        db: DbOption = None,
    ) -> None:
        """Every seat with its current participant; ``toml`` is the ``--seats`` file of top/monitor."""
        from gpuseat.store import open_store

        with open_store(db) as store:
            seats = store.seats.seats(course)
            users = {p.key: p.unix_user for p in store.roster.participants(course)}
        if fmt is ExportFormat.toml:
            print(seats_toml(seats, users), end="")
            left_out = without_device(seats)
            if left_out:
                print(f"note: {left_out_note(left_out)}", file=sys.stderr)
        elif fmt is ExportFormat.json:
            print_json([s.to_dict() for s in seats])
        else:
            from gpuseat.services.seats_csv import SEATS_CSV_COLUMNS, seats_csv_rows

            print_csv(seats_csv_rows(seats), SEATS_CSV_COLUMNS)

    from gpuseat.cli.cloud import add_cloud_commands
    from gpuseat.cli.delivery import add_delivery_commands

    add_cloud_commands(seats_app)
    add_delivery_commands(seats_app)
