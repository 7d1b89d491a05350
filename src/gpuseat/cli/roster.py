"""CLI for ``gpuseat roster import|links``: parse flags, call the course store, print."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuseat.cli._output import FORMAT_OPTION, Format, print_json, print_rows
from gpuseat.cli.course import COURSE, DB, actor

LINK_COLUMNS = ("participant", "link", "status")


def register(app: typer.Typer) -> None:
    """Add the ``roster`` group."""
    roster_app = typer.Typer(
        help="The participants of a course: import a CSV, hand out access links.", no_args_is_help=True
    )
    app.add_typer(roster_app, name="roster")

    @roster_app.command("import")
    def import_(
        path: Path = typer.Argument(..., help="CSV with a header: name,email,group,unix_user,ssh_key (BOM ok)."),
        course: str | None = COURSE,
        db: str | None = DB,
        fmt: Format = FORMAT_OPTION,
    ) -> None:
        """Import (or re-import) participants in one transaction; prints what changed, matched by email."""
        from gpuseat.services.courses import open_store

        with open_store(db) as store:
            report = store.import_roster(course, path, actor=actor())
        if fmt is Format.json:
            print_json(report.to_dict())
            return
        print(f"course {report.course}: {report.added} added, {report.updated} updated, {report.unchanged} unchanged")
        for c in report.changes:
            if c.action == "updated":
                print(f"  updated {c.key}: {', '.join(c.fields)}")
        if report.absent:
            print(f"  not in the file (kept): {', '.join(report.absent)}")

    @roster_app.command("links")
    def links(
        base_url: str = typer.Option(
            "http://127.0.0.1:8000", "--base-url", help="The portal's address; links are BASE/t/TOKEN."
        ),
        participant: list[str] = typer.Option([], "--participant", help="Only these participants (key, email, user)."),
        rotate: bool = typer.Option(False, "--rotate", help="Revoke current links and issue new ones."),
        revoke: list[str] = typer.Option([], "--revoke", help="Revoke the links of these participants."),
        course: str | None = COURSE,
        db: str | None = DB,
        fmt: Format = FORMAT_OPTION,
    ) -> None:
        """Issue access links (each shown once: only a hash is stored); --rotate or --revoke them."""
        from gpuseat.services.courses import open_store
        from gpuseat.urls import base_url as check_base_url

        base = check_base_url(base_url)
        who = participant or None
        with open_store(db) as store:
            if revoke:
                count = store.revoke_tokens(course, revoke, actor=actor())
                print(f"revoked {count} link(s) of {', '.join(revoke)}")
                return
            issued = (
                store.rotate_tokens(course, who, actor=actor())
                if rotate
                else store.issue_tokens(course, who, actor=actor())
            )
            status = store.token_status(course)
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
        print_rows(rows, LINK_COLUMNS, fmt, title="access links (shown once)")
