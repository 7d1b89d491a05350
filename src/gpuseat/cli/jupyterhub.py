"""CLI for ``gpuseat jupyterhub config`` and ``gpuseat jupyterhub cull``: parse flags, call the library, print."""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

import typer

from gpuseat.cli._options import Commands, CourseOption, DbOption
from gpuseat.cli._output import Format, FormatOption, print_rows
from gpuseat.errors import InputError

hub_app = typer.Typer(
    name="jupyterhub", help="GPU seats through JupyterHub: hub config and GPU-aware culling.", cls=Commands
)


def _course_key(db: str | None, course: str | None) -> tuple[str, str]:
    """The database URL and the course key, checked against the store."""
    from gpuseat.db import resolve_url
    from gpuseat.store import open_store

    url = resolve_url(db)
    with open_store(url) as store:
        return url, store.courses.get_course(course).key


def _offline(db: str | None, course: str | None) -> tuple[str, str]:
    """The database URL and course key as given, checked for form only: nothing connects."""
    from gpuseat.db import database_url, resolve_url

    if not course:
        raise InputError("--no-check needs the course key", where="--course", fix="pass --course KEY")
    if not db and not os.environ.get("GPUSEAT_DB_URL"):
        raise InputError(
            "--no-check needs the hub's database URL", where="--db", fix="pass --db URL (or set GPUSEAT_DB_URL)"
        )
    url = database_url(resolve_url(db), where="--db")  # checked for form only (gpuseat.db owns SQLAlchemy)
    return url, course


_FLAGS = {"cull_every_s": "--cull-every", "session_lead_min": "--session-lead", "db_url": "--db"}


@hub_app.command("config")
def hub_config(
    spawner: str = typer.Option("local", "--spawner", help="local, systemd, docker or kubernetes."),
    course: CourseOption = None,
    db: DbOption = None,
    mode: str = typer.Option("assigned", "--mode", help="assigned (each user's own seat) or pool (first free)."),
    match_by: str = typer.Option(
        "key", "--match-by", help="JupyterHub user name = participant key, email or unix_user."
    ),
    contact: str = typer.Option("the course organizer", "--contact", help="Whom users should ask (one line)."),
    mig_strategy: str = typer.Option("mixed", "--mig-strategy", help="Kubernetes device plugin: mixed or single."),
    cull_idle_hours: float = typer.Option(
        2.0, "--cull-idle-hours", help="Stop servers whose GPU idled this long (0: off)."
    ),
    cull_every: int = typer.Option(300, "--cull-every", help="Seconds between culler rounds."),
    sessions_only: bool = typer.Option(
        False, "--sessions-only/--any-time", help="Refuse starts outside the course's lab sessions."
    ),
    session_lead: int = typer.Option(10, "--session-lead", help="Minutes before a session when starts open."),
    spawner_class: bool = typer.Option(
        True, "--set-spawner-class/--keep-spawner-class", help="Keep the hub's own spawner class (TLJH, z2jh)."
    ),
    check: bool = typer.Option(
        True,
        "--check/--no-check",
        help="Check the course in the database (--no-check: render offline, e.g. for an in-cluster URL).",
    ),
    engine_token_file: str | None = typer.Option(
        None,
        "--engine-token-file",
        help="Add the gpuseat engine's hub service, its token read from this root-only file (absolute path).",
    ),
) -> None:
    """Print a ready jupyterhub_config.py wiring gpuseat's hooks, the culler service and the database."""
    from pydantic import ValidationError

    from gpuseat.jupyterhub.config import SPAWNER_CLASSES, HubSettings, render

    if spawner not in SPAWNER_CLASSES:
        raise InputError(f"unknown spawner {spawner!r}", where="--spawner", fix=f"one of {', '.join(SPAWNER_CLASSES)}")
    if engine_token_file is not None and (
        not engine_token_file.startswith("/") or any(ord(ch) < 32 for ch in engine_token_file)
    ):
        raise InputError(
            f"{engine_token_file!r} is not an absolute path",
            where="--engine-token-file",
            fix="e.g. /etc/gpuseat/hub-token",
        )
    url, key = _course_key(db, course) if check else _offline(db, course)
    try:
        settings = HubSettings(
            course=key,
            db_url=url,
            mode=mode,
            match_by=match_by,
            contact=contact,
            mig_strategy=mig_strategy,
            cull_idle_hours=cull_idle_hours,
            cull_every_s=cull_every,
            sessions_only=sessions_only,
            session_lead_min=session_lead,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
        raise InputError(f"{err['msg']} (got {err.get('input')!r})", where=flag, fix="see --help") from None
    text = render(settings, spawner, set_spawner_class=spawner_class, engine_token_file=engine_token_file)  # type: ignore[arg-type]
    sys.stdout.write(text)


@hub_app.command("cull")
def cull(
    course: CourseOption = None,
    db: DbOption = None,
    idle_hours: float = typer.Option(2.0, "--idle-hours", help="Stop a server whose GPU did no compute this long."),
    every: float = typer.Option(300.0, "--every", min=1.0, max=86_400.0, help="Seconds between rounds."),
    once: bool = typer.Option(False, "--once", help="Judge once, print the verdicts and exit."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Judge but stop nothing."),
    api_url: str | None = typer.Option(
        None, "--api-url", help="Hub API URL (default: JUPYTERHUB_API_URL, set by the hub for its services)."
    ),
    fmt: FormatOption = Format.table,
) -> None:
    """Stop hub servers whose seat's GPU did no compute for --idle-hours (a JupyterHub service).

    The token comes from JUPYTERHUB_API_TOKEN (the hub sets it for a managed service), never from a flag.
    """
    from gpuseat.jupyterhub.cull import Culler
    from gpuseat.store import open_store

    url = api_url or os.environ.get("JUPYTERHUB_API_URL")
    token = os.environ.get("JUPYTERHUB_API_TOKEN")
    if not url:
        raise InputError("no Hub API URL", where="--api-url", fix="run as a hub service or pass --api-url")
    from gpuseat.urls import http_url

    # a port of other digits was an internal error (²) or another port (١٢ was 12) where the culler first called
    http_url(url, where="--api-url" if api_url else "JUPYTERHUB_API_URL", example="http://127.0.0.1:8081/hub/api")
    if not token:
        raise InputError(
            "no Hub API token", where="JUPYTERHUB_API_TOKEN", fix="run as a hub service (the hub sets it) or export it"
        )
    if not (token.isascii() and token.isprintable()):  # it goes into an HTTP header: other text was an internal error
        raise InputError(
            "the Hub API token is not printable ASCII text",
            where="JUPYTERHUB_API_TOKEN",
            fix="export the token as the hub issued it (letters and digits)",
        )
    from gpuseat.safe_text import log_handler

    logging.basicConfig(
        level=logging.INFO, handlers=[log_handler("%(asctime)s gpuseat-cull %(levelname)s %(message)s")]
    )
    with open_store(db) as store:
        key = store.courses.get_course(course).key
        culler = Culler(store, key, api_url=url, token=token, idle_hours=idle_hours, dry_run=dry_run)
        if once:
            rows = [v.to_dict() for v in culler.run_once()]
            print_rows(rows, ("server", "seat", "stop", "reason"), fmt, title="GPU-aware culling")
            return
        stopping: list[bool] = []

        def _stop(*_args: Any) -> None:
            stopping.append(True)

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        culler.run(every, stop=lambda: bool(stopping))


def register(app: typer.Typer) -> None:
    """Add ``jupyterhub config`` and ``jupyterhub cull``."""
    app.add_typer(hub_app, name="jupyterhub")
