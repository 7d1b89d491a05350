"""CLI for ``gpuseat serve`` (the course portal) and ``gpuseat admin set-password``: parse flags, call, print.

FastAPI, uvicorn and argon2 are imported inside the commands (the ``portal`` extra).
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import typer

from gpuseat.errors import InputError, MissingDependency

COURSE = typer.Option(None, "--course", help="Course key (default: the only course in the store).")
DB = typer.Option(None, "--db", help="Database URL (default: GPUSEAT_DB_URL or SQLite in the data dir).")


def need_portal() -> None:
    """Fail with one clear message when the ``portal`` extra is missing."""
    try:
        import argon2  # noqa: F401
        import fastapi  # noqa: F401
        import itsdangerous  # noqa: F401
        import jinja2  # noqa: F401
        import python_multipart  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise MissingDependency(
            f"the portal needs {exc.name}", where="gpuseat serve", fix="pip install 'gpuseat[portal]'"
        ) from None


def _check_port(port: int) -> int:
    if not 1 <= port <= 65535:
        raise InputError(f"port {port} is out of range", where="--port", fix="use 1-65535 (e.g. 8000)")
    return port


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``admin`` to the CLI."""

    @app.command()
    def serve(
        course: str | None = COURSE,
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (loopback by default)."),
        port: int = typer.Option(8000, "--port", help="TCP port."),
        db: str | None = DB,
        demo: bool = typer.Option(
            False, "--demo", help="Seed the 2016 demo course in a temporary folder and serve it."
        ),
        base_url: str | None = typer.Option(
            None, "--base-url", help="Public URL for access links (default: http://HOST:PORT)."
        ),
        secure_cookies: bool = typer.Option(False, "--secure-cookies", help="Mark cookies Secure (behind HTTPS)."),
    ) -> None:
        """Serve the course portal: organizer dashboard, participant pages, survey, report."""
        need_portal()
        import ipaddress

        from gpuseat.catalog.bundle import load_catalog
        from gpuseat.services.courses import open_store
        from gpuseat.web.app import Portal, create_app

        _check_port(port)
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if host != "localhost":
                raise InputError(
                    f"not an IP address: {host!r}", where="--host", fix="e.g. 127.0.0.1 or 0.0.0.0"
                ) from None
        from gpuseat.urls import base_url as check_base_url

        url = check_base_url(base_url or f"http://{host if ':' not in host else f'[{host}]'}:{port}")
        folder = None
        clock = bench_path = None
        try:
            if demo:
                from gpuseat.services.demo import seed_demo

                folder = Path(tempfile.mkdtemp(prefix="gpuseat-demo-"))
                seeded = seed_demo(folder)
                db, course, clock, bench_path = seeded.db_url, seeded.course, seeded.now, seeded.bench_path
                first = sorted(seeded.links)[0]
                print(f"demo course {seeded.course} in {folder} (its clock stands at {seeded.now:%Y-%m-%d %H:%M} UTC)")
                print(f"organizer:   {url}/login   user admin   password {seeded.password}")
                print(f"participant: {url}/t/{seeded.links[first]}   ({first})")
                sys.stdout.flush()
            store = open_store(db)
            store.get_course(course)  # a missing or ambiguous course fails here, before listening
            portal = Portal(
                store,
                load_catalog(),
                course,
                base_url=url,
                secure_cookies=secure_cookies,
                clock=clock,
                bench_path=bench_path,
            )
            _run(create_app(portal), host, port)
            store.close()
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    admin = typer.Typer(help="Portal organizer accounts.", no_args_is_help=True)
    app.add_typer(admin, name="admin")

    @admin.command("set-password")
    def set_password(
        user: str = typer.Option("admin", "--user", help="Organizer user name."),
        db: str | None = DB,
        password_stdin: bool = typer.Option(False, "--password-stdin", help="Read the password from standard input."),
    ) -> None:
        """Create an organizer or change their password (asked twice, never echoed)."""
        need_portal()
        from gpuseat.services.accounts import Accounts, check_username
        from gpuseat.services.courses import open_store

        check_username(user)
        if password_stdin:
            password = sys.stdin.readline().rstrip("\n")
        else:
            password = getpass.getpass(f"password for {user}: ")
            if getpass.getpass("again: ") != password:
                raise InputError("the two passwords differ", where="password", fix="type the same password twice")
        store = open_store(db, create=True)
        try:
            created = Accounts(store).set_password(user, password)
        finally:
            store.close()
        print(f"{'created' if created else 'updated'} organizer {user}")


def _run(app: object, host: str, port: int) -> None:
    """uvicorn with token-redacted access logs; SIGTERM/SIGINT stop it cleanly."""
    import uvicorn

    from gpuseat.web.security import install_log_redaction

    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=host,
        port=port,
        log_level=os.environ.get("GPUSEAT_LOG_LEVEL", "info"),
        access_log=True,
        server_header=False,
        proxy_headers=False,
    )
    server = uvicorn.Server(config)
    install_log_redaction()
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it to the previous handler: make that
    # handler a normal exit so the caller's cleanup (the demo's temporary folder) runs.
    previous = signal.signal(signal.SIGTERM, _exit_cleanly)
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)
