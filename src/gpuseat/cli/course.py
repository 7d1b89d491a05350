"""CLI for ``gpuseat course create|update|list|show|export|import|archive|delete``: parse flags, call the store,
print."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuseat.cli._options import CourseOption, DbOption, ForceReplaceOption, add_group
from gpuseat.cli._output import Format, FormatOption, print_json, print_rows, print_table
from gpuseat.cli.flags import named_argument

if TYPE_CHECKING:
    from gpuseat.services.planning import CourseFileRead

ACTOR = "cli"

#: the course ``archive`` and ``delete`` act on (named: no default course for them)
CourseKeyArgument = Annotated[str, typer.Argument(help="Course key.")]

COURSE_COLUMNS = ("key", "name", "starts_on", "ends_on", "timezone", "participants", "seats", "assigned")
#: what an 80-column terminal hides first (``-f wide`` shows every column)
COURSE_DROP = ("timezone", "ends_on", "starts_on", "name")


def actor() -> str:
    """Who is acting, for the events log: ``cli:<login>``."""
    import getpass

    try:
        return f"{ACTOR}:{getpass.getuser()}"
    except (KeyError, OSError):
        return ACTOR


def _read(path: Path, rank: int | None) -> tuple[CourseFileRead, dict[str, Any] | None]:
    """The course file as ``create`` and ``update`` store it, and option ``rank`` of ``gpuseat plan`` on it
    (``--plan-option``; None without one), on one load of the catalog."""
    from gpuseat.services.planning import plan_option_for, read_course_file

    if rank is None:
        return read_course_file(path), None
    from gpuseat.catalog.bundle import load_catalog

    catalog = load_catalog()
    return read_course_file(path, catalog), plan_option_for(path, rank, catalog)


def _shown(value: object) -> str:
    """A changed field's value on one line (JSON; a long one cut)."""
    import json

    text = "(none)" if value is None else value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 120 else text[:119] + "…"


def register(app: typer.Typer) -> None:
    """Add the ``course`` group."""
    course_app = add_group(app, "course", "Courses: create, update, list, show, export, import, archive, delete.")

    @course_app.command("create")
    def create(
        path: Path = typer.Argument(..., help="Course file (TOML), e.g. examples/course-2016.toml."),
        key: str | None = typer.Option(None, "--key", help="Course key (slug); default: the file name."),
        timezone: str = typer.Option("UTC", "--timezone", help="IANA time zone of the course's sessions."),
        plan_option: int | None = typer.Option(
            None, "--plan-option", help="Store option N of `gpuseat plan` (1 = cheapest) as the chosen plan."
        ),
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """Store a course file (text and summary) and the offers files it names as a new course; creates the
        database if needed."""
        from gpuseat.store import open_store

        read, option = _read(path, plan_option)
        own = read.offers  # checked as plan reads them, stored with the course
        with open_store(db, create=True) as store:
            view = store.courses.create_course(
                path, key=key, timezone=timezone, plan_option=option, offers_files=own, actor=actor()
            )
        if fmt is Format.json:
            print_json(view.to_dict())
            return
        from gpuseat.safe_text import clean  # the name and group names are the course file's text

        name = clean(view.name, one_line=True)
        print(f"course {view.key}: {name}, {view.starts_on} to {view.ends_on} ({view.timezone})")
        for g in view.summary["groups"]:
            need = f"≥ {g['min_gpu_memory_gb']:g} GB, {g['isolation']}, {g['guest_os']}"
            print(f"  group {clean(str(g['name']), one_line=True)}: {g['count']} × {need}")
        if own:
            print(f"  offers files stored with it: {clean(', '.join(name for name, _text in own), one_line=True)}")
        if option:
            offers = ", ".join(f"{o['count']} × {o['offer']}" for o in option.get("offers", ()))
            print(f"  plan option {option.get('rank')}: {offers}, ${option.get('total_usd')}")
        print(f"next: gpuseat roster import participants.csv --course {view.key}")

    @course_app.command("update")
    def update(
        path: Path = typer.Argument(..., help="The edited course file (TOML)."),
        key: str | None = typer.Option(None, "--key", help="Course key (slug); default: the file name."),
        timezone: str | None = typer.Option(None, "--timezone", help="A new IANA time zone (default: the stored one)."),
        plan_option: int | None = typer.Option(
            None, "--plan-option", help="Store option N of `gpuseat plan` on this file as the chosen plan."
        ),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print what would change; store nothing."),
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """Store an edited course file over a course's (dates, sessions, groups, policy, offers files), read and
        checked as create reads it; prints each field that changed. The agents follow at their next pass."""
        from gpuseat.store import open_store
        from gpuseat.store.courses import course_key_of

        read, option = _read(path, plan_option)
        file, who = (key or course_key_of(path), read.course, read.text, read.offers), actor()
        with named_argument("course", "--key"), open_store(db) as store:
            done = store.courses.update_course(*file, timezone=timezone, plan_option=option, dry_run=dry_run, actor=who)
        if fmt is Format.json:
            print_json({"course": done.view.key, "changes": done.changes, "replan": done.replan, "dry_run": dry_run})
            return
        from gpuseat.safe_text import clean  # the values are the course file's text

        if not done.changes:
            print(f"course {done.view.key}: nothing changed")
            return
        n = len(done.changes)
        print(f"course {done.view.key}: " + (f"would change {n} field(s) (--dry-run: nothing stored)" if dry_run
              else f"{n} field(s) changed"))  # fmt: skip
        for c in done.changes:
            print(clean(f"  {c['field']}: {_shown(c['from'])} → {_shown(c['to'])}", one_line=True))
        named = f" --key {done.view.key}" if done.view.key != course_key_of(path) else ""
        if done.replan:
            print(
                f"  the stored plan option {done.view.plan_option and done.view.plan_option.get('rank')} priced the "
                f"file before this change ({', '.join(done.replan[:5])}): look at gpuseat plan {path} again, and "
                f"store an option with gpuseat course update {path}{named} --plan-option N"
            )
        if not dry_run:
            print(f"next: the agents plan the course again at once (or run: gpuseat apply --course {done.view.key})")

    @course_app.command("list")
    def list_(db: DbOption = None, fmt: FormatOption = Format.table) -> None:
        """Every course with its counts."""
        from gpuseat.store import open_store

        with open_store(db) as store:
            views = store.courses.list_courses()
        print_rows([v.to_dict() for v in views], COURSE_COLUMNS, fmt, title="courses", drop=COURSE_DROP)

    @course_app.command("show")
    def show(course: CourseOption = None, db: DbOption = None, fmt: FormatOption = Format.table) -> None:
        """One course: dates, groups, plan option, counts."""
        from gpuseat.store import open_store

        with open_store(db) as store:
            view = store.courses.get_course(course)
            own = store.courses.offers_texts(view.key) or []
        if fmt is not Format.table:
            print_json(view.to_dict())
            return
        print_table([view.to_dict()], COURSE_COLUMNS, title=view.name, drop=COURSE_DROP)
        print_table(
            view.summary.get("groups", []),
            ("name", "count", "min_gpu_memory_gb", "isolation", "guest_os"),
            title="groups",
        )
        if view.plan_option:
            print(f"plan option {view.plan_option.get('rank')}: ${view.plan_option.get('total_usd')}")
        if own:
            from gpuseat.safe_text import clean

            print(f"offers files stored with it: {clean(', '.join(name for name, _text in own), one_line=True)}")

    @course_app.command("export")
    def export(
        to: Path = typer.Option(..., "--to", help="The archive to write (a zip of JSON files, see docs/course.md)."),
        course: CourseOption = None,
        force: ForceReplaceOption = False,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """Write one course (roster, seats, history, events, tokens' hashes, survey) to one file."""
        from gpuseat.store import open_store

        with open_store(db) as store:
            done = store.lifecycle.export_course(course, to, force=force, actor=actor())
        if fmt is Format.json:
            print_json({**done, "path": str(done["path"])})
            return
        print(
            f"course {done['course']} exported to {done['path']}: {done['participants']} participants, "
            f"{done['seats']} seats, {done['assignments']} assignments, {done['events']} events "
            f"(sha256 {done['sha256']})"
        )

    @course_app.command("import")
    def import_(
        path: Path = typer.Argument(..., help="An archive written by gpuseat course export."),
        key: str | None = typer.Option(None, "--key", help="Store it under this course key (default: its own)."),
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """Store the course of an export (all or nothing; an existing course key is refused)."""
        from gpuseat.store import open_store

        with open_store(db, create=True) as store:
            done = store.lifecycle.import_course(path, key=key, actor=actor())
        if fmt is Format.json:
            print_json(done)
            return
        print(
            f"course {done['course']} imported: {done['participants']} participants, {done['seats']} seats, "
            f"{done['assignments']} assignments, {done['events']} events, {done['survey_responses']} survey answers"
        )
        if done["tokens_skipped"]:
            print(f"  {done['tokens_skipped']} access link(s) not imported: used by another course in this store")
        if done["requests_failed"]:
            print(f"  {done['requests_failed']} seat request(s) pending at export stored as failed, never carried out")

    @course_app.command("archive")
    def archive(
        course: CourseKeyArgument,
        db: DbOption = None,
    ) -> None:
        """Make a course read-only (every change is refused from then on) and revoke its access links."""
        from gpuseat.store import open_store

        with named_argument("course", "COURSE"), open_store(db) as store:
            done = store.lifecycle.archive_course(course, actor=actor())
        if done["already"]:
            print(f"course {done['course']} was archived already ({done['archived_at']})")
            return
        print(
            f"course {done['course']} archived: read-only from now on, {done['tokens_revoked']} access link(s) revoked"
        )

    @course_app.command("delete")
    def delete(
        course: CourseKeyArgument,
        yes: bool = typer.Option(False, "--yes", help="Confirm: delete the course and all its rows."),
        export_to: Path | None = typer.Option(
            None, "--export-to", help="Where the export written first goes (default: the data dir's exports/)."
        ),
        db: DbOption = None,
    ) -> None:
        """Delete a course after writing an export of it (needs --yes); the events log keeps its lines."""
        from datetime import UTC, datetime

        from gpuseat.errors import InputError
        from gpuseat.store import open_store

        with named_argument("course", "COURSE"), open_store(db) as store:
            view = store.courses.get_course(course)
            if not yes:
                raise InputError(
                    f"this deletes course {view.key} ({view.participants} participants, {view.seats} seats, "
                    f"{view.assigned} assigned) after writing an export of it; the agents then take its seats back "
                    "from the machines (on host servers its accounts and their home folders are removed)",
                    where="gpuseat course delete",
                    fix=f"confirm with: gpuseat course delete {view.key} --yes",
                )
            if export_to is not None:  # checked here too, so that the message names this command's flag
                from gpuseat.store.export import check_archive_target

                check_archive_target(export_to, force=False, flag="--export-to")
            else:
                from gpuseat.paths import data_dir

                folder = data_dir() / "exports"
                folder.mkdir(parents=True, exist_ok=True)
                export_to = folder / f"{view.key}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.gpuseat.zip"
            done = store.lifecycle.delete_course(view.key, export_to=export_to, actor=actor())
        print(f"export written: {done['export']}")
        if done.get("deferred"):
            print(
                f"course {done['course']} archived; it is deleted once the engines have taken every access away "
                f"({len(done['logins'])} login(s) still held by {', '.join(done['held_by'])}). "
                "The agent does that within seconds (gpuseat agent status), or run: "
                f"gpuseat apply --course {done['course']}"
            )
            return
        print(
            f"course {done['course']} deleted ({done['participants']} participants, {done['seats']} seats); "
            f"gpuseat course import {done['export']} brings it back"
        )
