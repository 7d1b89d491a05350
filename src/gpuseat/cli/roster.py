"""CLI for ``gpuseat roster import|list|links|remove``: parse flags, call the course store, print."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gpuseat.cli._options import CourseOption, DbOption, add_group
from gpuseat.cli._output import Format, FormatOption, print_csv, print_json, print_rows, wide_tables
from gpuseat.cli.course import actor
from gpuseat.errors import InputError

LINK_COLUMNS = ("participant", "link", "status")
LIST_COLUMNS = ("key", "name", "email", "group", "unix_user", "seat")
LIST_CSV_COLUMNS = ("key", "name", "email", "group", "unix_user", "ssh_key", "seat")
#: what an 80-column terminal hides first (``-f wide`` shows every column)
LIST_DROP = ("email", "unix_user", "name", "group")


def _print_links(rows: list[dict[str, Any]]) -> None:
    """One line per participant: the new link, or why there is none (-f wide: the table).

    A link is never wrapped by the terminal (a pasted link with a line break in it does not open):
    when a line would be wider than the terminal, every link goes under its participant instead.
    """
    from rich.cells import cell_len
    from rich.console import Console

    from gpuseat.safe_text import clean

    width = Console().width
    print("access links (shown once; -f csv or json for a mail merge)")
    pairs = [
        (clean(str(r["participant"]), one_line=True), clean(str(r["link"] or r["status"]), one_line=True)) for r in rows
    ]
    pad = max((cell_len(who) for who, _ in pairs), default=0)
    lines = [f"  {who}{' ' * (pad - cell_len(who))}  {text}" for who, text in pairs]
    if all(cell_len(line) <= width for line in lines):
        for line in lines:
            print(line)
    else:  # the links do not fit beside the names: each under its participant
        for who, text in pairs:
            print(f"  {who}\n    {text}")


def register(app: typer.Typer) -> None:
    """Add the ``roster`` group."""
    roster_app = add_group(
        app, "roster", "The participants of a course: import a CSV, list them, hand out access links, remove who left."
    )

    @roster_app.command("import")
    def import_(
        path: Path = typer.Argument(..., help="CSV with a header: name,email,group,unix_user,ssh_key (BOM ok)."),
        course: CourseOption = None,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """Import (or re-import) participants in one transaction; prints what changed, matched by email."""
        from gpuseat.store import open_store

        with open_store(db) as store:
            report = store.roster.import_roster(course, path, actor=actor())
        if fmt is Format.json:
            print_json(report.to_dict())
            return
        print(f"course {report.course}: {report.added} added, {report.updated} updated, {report.unchanged} unchanged")
        for c in report.changes:
            if c.action == "updated":
                print(f"  updated {c.key}: {', '.join(c.fields)}")
        if report.absent:
            print(f"  not in the file (kept): {', '.join(report.absent)}")
        if report.own_keys:
            print(
                f"  kept the key each set since (the file has the one it replaced): {', '.join(report.own_keys)}; "
                "gpuseat seat key --participant P sets another"
            )

    @roster_app.command("list")
    def list_(
        group: str | None = typer.Option(None, "--group", help="Only the participants of this course group."),
        course: CourseOption = None,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """The participants: key, name, email, group, Unix user and the seat each holds now."""
        from gpuseat.store import open_store

        with open_store(db, create=False) as store:
            view = store.courses.get_course(course)
            people = store.roster.participants(view.key)
        if group is not None:
            groups = sorted({p.group for p in people if p.group})
            if group not in groups:
                raise InputError(
                    f"course {view.key!r} has no participants in group {group!r}",
                    where="--group",
                    fix=f"use one of: {', '.join(groups)}"
                    if groups
                    else "import a roster first (gpuseat roster import)",
                )
            people = [p for p in people if p.group == group]
        rows = [p.to_dict() for p in people]
        title = f"{len(rows)} participant(s) of {view.key}, {sum(1 for p in people if p.seat)} with a seat"
        if fmt is Format.csv:
            print_csv(rows, LIST_CSV_COLUMNS)
        else:
            print_rows(rows, LIST_COLUMNS, fmt, title=title, drop=LIST_DROP)

    @roster_app.command("links")
    def links(
        base_url: str = typer.Option(
            "http://127.0.0.1:8000", "--base-url", help="The portal's address; links are BASE/t/TOKEN."
        ),
        participant: list[str] = typer.Option([], "--participant", help="Only these participants (key, email, user)."),
        rotate: bool = typer.Option(False, "--rotate", help="Revoke current links and issue new ones."),
        revoke: list[str] = typer.Option([], "--revoke", help="Revoke the links of these participants."),
        course: CourseOption = None,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """Issue access links (each shown once: only a hash is stored); --rotate or --revoke them."""
        from gpuseat.store import open_store
        from gpuseat.urls import base_url as check_base_url

        base = check_base_url(base_url)
        who = participant or None
        with open_store(db) as store:
            if revoke:
                count = store.tokens.revoke_tokens(course, revoke, actor=actor())
                print(f"revoked {count} link(s) of {', '.join(revoke)}")
                return
            issued = (
                store.tokens.rotate_tokens(course, who, actor=actor())
                if rotate
                else store.tokens.issue_tokens(course, who, actor=actor())
            )
            status = store.tokens.token_status(course)
        new = {t.participant: t for t in issued}
        wanted = set(participant) if participant else None
        rows = []
        for s in status:
            if wanted is not None and s["participant"] not in wanted and s["participant"] not in new:
                continue
            t = new.get(s["participant"])
            rows.append(
                {
                    "participant": s["participant"],
                    "link": t.link(base) if t else None,
                    "status": "new" if t else ("issued before (use --rotate)" if s["active"] else "none"),
                }
            )
        if fmt is not Format.table or wide_tables():
            print_rows(rows, LINK_COLUMNS, fmt, title="access links (shown once)")
            return
        _print_links(rows)

    @roster_app.command("remove")
    def remove(
        participants: list[str] = typer.Argument(..., metavar="P...", help="Key, email or Unix user of each."),
        reason: str | None = typer.Option(
            None, "--reason", help="Why, kept in the seat history (one line, at most 32 characters)."
        ),
        yes: bool = typer.Option(False, "--yes", help="Confirm: take them off the course."),
        course: CourseOption = None,
        db: DbOption = None,
    ) -> None:
        """Take participants who dropped out off the course (needs --yes): seat released, links revoked,
        their rows deleted; the roster.remove event keeps their rows and past seats."""
        from gpuseat.cli.flags import named_argument
        from gpuseat.cli.seats import _next_steps
        from gpuseat.services.leaving import removal_preview
        from gpuseat.store import open_store

        with named_argument("participant", "P"), open_store(db) as store:
            key = store.courses.get_course(course).key
            if not yes:
                found = store.roster.remove_participants(key, participants, reason=reason, dry_run=True)
                raise InputError(
                    removal_preview(found, key),
                    where="gpuseat roster remove",
                    fix=f"confirm with: gpuseat roster remove {' '.join(participants)} --course {key} --yes",
                )
            done = store.roster.remove_participants(key, participants, reason=reason, actor=actor())
            engines = [store.seats.get_seat(key, r["seat"]).engine for r in done if r["seat"]]
        for r in done:
            print(f"removed {r['participant']}" + (f" (released {r['seat']})" if r["seat"] else ""))
        _next_steps(key, engines)
