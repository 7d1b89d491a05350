"""CLI for ``gpuseat seat``: the organizer acts on one participant's seat, as the participant can on
their page (start, stop, restart, reset, a new SSH key), and keeps their seat hours (top-ups, quota).

Each action is a request row in the store; the seat's agent (or ``gpuseat apply``) carries it out and
marks it done or failed. Nothing here touches a machine.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer

from gpuseat.cli._options import CourseOption, DbOption, RequiredParticipantOption, add_group
from gpuseat.cli._output import Format, FormatOption, print_json, print_rows
from gpuseat.cli.course import actor

REQUEST_COLUMNS = ("id", "participant", "seat", "action", "state", "reason", "actor", "requested_at", "done_at")
HOURS_COLUMNS = ("participant", "quota", "topups", "used", "left", "running", "runs_out_at")


def register(app: typer.Typer) -> None:
    """Add the ``seat`` command group."""
    seat = add_group(
        app, "seat", "Start, stop, restart or reset one participant's seat, set their key, keep their seat hours."
    )

    def _ask(
        action: str, participant: str, course: str | None, db: str | None, fmt: Format, key: str | None = None
    ) -> None:
        from gpuseat.store import open_store

        with open_store(db) as store:
            done = store.requests.request_seat(
                course, participant, action, actor=actor(), key=key, by_participant=False
            )
        if fmt == "json":
            print_json(done.to_dict())
            return
        where = f"seat {done.seat}" if done.seat else "no seat"
        if done.state == "pending":
            print(f"request {done.id}: {action} of {done.participant}'s {where} is pending; the agent carries it out")
        else:
            print(f"request {done.id}: {action} for {done.participant}: {done.state} ({done.reason})")

    def _asker(action: str) -> Callable[..., None]:
        """The command of a seat action that needs nothing but the participant (start, stop, restart)."""

        def ask(
            participant: RequiredParticipantOption,
            course: CourseOption = None,
            db: DbOption = None,
            fmt: FormatOption = Format.table,
        ) -> None:
            _ask(action, participant, course, db, fmt)

        return ask

    for action, text in (
        (
            "start",
            "Start the participant's seat again (logins allowed; their VM, hub server or cloud machine "
            "started; their Kubernetes namespace bound again); refused with no seat hours left.",
        ),
        (
            "stop",
            "Stop the participant's seat (logins refused and their processes ended; their VM, hub server or "
            "cloud machine stopped, a cloud disk kept; their Kubernetes access revoked, pods ended); hours stop "
            "counting.",
        ),
        (
            "restart",
            "Restart the participant's seat (their processes or Kubernetes pods ended, or their VM, hub server "
            "or cloud machine restarted); files kept.",
        ),
    ):
        seat.command(action, help=text, short_help=text.split(" (")[0] + ".")(_asker(action))

    @seat.command("reset")
    def reset(
        participant: RequiredParticipantOption,
        confirm: str = typer.Option(
            "", "--confirm", help="Type the participant's key to confirm: everything they wrote on the seat is lost."
        ),
        course: CourseOption = None,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """Reset the participant's seat: their home restored from the course skeleton (host), their VM's disk made
        afresh, their hub server restarted, a fresh cloud machine, or their Kubernetes namespace made afresh; what
        they wrote there is lost."""
        from gpuseat.errors import InputError

        if confirm != participant:
            raise InputError(
                "a reset deletes what the participant wrote on the seat (home, VM or cloud disk, namespace)",
                where="--confirm",
                fix=f"type the participant's key to confirm: --confirm {participant}",
            )
        _ask("reset", participant, course, db, fmt)

    @seat.command("key")
    def key(
        participant: RequiredParticipantOption,
        key_file: Path = typer.Option(..., "--key-file", help="The participant's public key file (one line)."),
        course: CourseOption = None,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """Add or replace the participant's SSH key (ed25519, ECDSA or RSA ≥ 3072 bits)."""
        from gpuseat.files import read_text

        _ask("key", participant, course, db, fmt, key=read_text(key_file, max_bytes=16_384))

    @seat.command("requests")
    def requests(
        participant: str | None = typer.Option(None, "--participant", "-p", help="Only this participant."),
        pending: bool = typer.Option(False, "--pending", help="Only requests not carried out yet."),
        course: CourseOption = None,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """The latest seat requests and what became of them."""
        from gpuseat.store import open_store

        with open_store(db) as store:
            rows = [r.to_dict() for r in store.requests.seat_requests(course, participant=participant, pending=pending)]
        print_rows(rows, REQUEST_COLUMNS, fmt)  # json: every field of each row

    @seat.command("hours")
    def hours(course: CourseOption = None, db: DbOption = None, fmt: FormatOption = Format.table) -> None:
        """Seat hours per participant: quota, top-ups, used, left, and when the seat stops at this rate."""
        from gpuseat.store import open_store

        with open_store(db) as store:
            rows = [{"participant": k, **h.to_dict()} for k, h in sorted(store.requests.seat_hours(course).items())]
        print_rows(rows, HOURS_COLUMNS, fmt)  # json: every field of each row

    @seat.command("topup")
    def topup(
        participant: RequiredParticipantOption,
        add: float = typer.Option(..., "--hours", help="Hours to add to the participant's quota."),
        note: str = typer.Option("", "--note", help="Why (kept in the ledger)."),
        course: CourseOption = None,
        db: DbOption = None,
    ) -> None:
        """Give the participant more seat hours (a stopped seat can then be started again)."""
        from gpuseat.core.amounts import hours_text
        from gpuseat.store import open_store

        with open_store(db) as store:
            store.requests.add_seat_hours(course, participant, add, kind="topup", actor=actor(), note=note)
            left = store.requests.seat_hours(course)[store.roster.find_participant(course, participant).key].left
        shown = "no quota" if left is None else f"{left:.1f} h left"  # as the portal's "X of Y h left"
        print(f"{participant}: {hours_text(add)} h added; {shown}")

    @seat.command("quota")
    def quota(
        participant: RequiredParticipantOption,
        value: float = typer.Option(..., "--hours", help="The participant's own quota (replaces the course's)."),
        course: CourseOption = None,
        db: DbOption = None,
    ) -> None:
        """Set one participant's own quota of seat hours (instead of the course's or their group's)."""
        from gpuseat.core.amounts import hours_text
        from gpuseat.store import open_store

        with open_store(db) as store:
            store.requests.add_seat_hours(course, participant, value, kind="quota", actor=actor())
        print(f"{participant}: quota {hours_text(value)} h")
