"""CLI for ``gpuseat db backup|restore``: the whole store to one file and back (see gpuseat.store.backup)."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuseat.cli._options import DbOption, ForceReplaceOption, add_group


def register(app: typer.Typer) -> None:
    """Add the ``db`` group."""
    db_app = add_group(app, "db", "The course database: backup and restore.")

    @db_app.command("backup")
    def backup(
        to: Path = typer.Option(..., "--to", help="The backup file (SQLite copy, or pg_dump custom format)."),
        force: ForceReplaceOption = False,
        db: DbOption = None,
    ) -> None:
        """A consistent copy of the whole store, taken while the portal and the monitor keep writing."""
        from gpuseat.store.backup import backup as run

        done = run(db, to, force=force)
        print(f"{done['database']} backup written: {done['path']} ({done['bytes']} bytes)")

    @db_app.command("restore")
    def restore(
        path: Path = typer.Argument(..., help="A file written by gpuseat db backup."),
        force: bool = typer.Option(False, "--force", help="Replace a store that holds courses."),
        db: DbOption = None,
    ) -> None:
        """Restore a backup into the store (refused when it holds courses, unless --force)."""
        from gpuseat.store.backup import restore as run

        done = run(db, path, force=force)
        print(f"restored {done['path']}: courses {', '.join(done['courses']) or '(none)'}")
        kept = done["kept"]
        if kept is not None:  # the replaced store's revoked links and newer passwords stay
            newer = f"{kept['passwords']} newer password{'' if kept['passwords'] == 1 else 's'}"
            links = f"{kept['revoked']} revoked access link(s)"
            print(f"kept {links} and {newer} from the replaced store; portal logins ended")
