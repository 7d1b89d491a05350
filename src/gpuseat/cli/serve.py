"""CLI for ``gpuseat serve`` (the course portal) and ``gpuseat admin set-password``: parse flags, call, print.

FastAPI, uvicorn and argon2 are imported inside the commands (the ``portal`` extra).
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpuseat.cli._options import StoreCourseOption, StoreDbOption, add_group
from gpuseat.core.numbers import plain_number
from gpuseat.errors import InputError, MissingDependency

if TYPE_CHECKING:
    from gpuseat.web.portal import Portal

MAX_WORKERS = 64
WORKER_SETTINGS = "GPUSEAT_SERVE_SETTINGS"  # the parent's settings, as JSON, for its worker processes


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
        course: StoreCourseOption = None,
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (loopback by default)."),
        port: int = typer.Option(8000, "--port", help="TCP port."),
        db: StoreDbOption = None,
        demo: bool = typer.Option(
            False, "--demo", help="Seed the 2016 demo course in a temporary folder and serve it."
        ),
        base_url: str | None = typer.Option(
            None, "--base-url", help="Public URL for access links (default: http://HOST:PORT)."
        ),
        secure_cookies: bool = typer.Option(
            False, "--secure-cookies", help="Mark cookies Secure with the __Host- prefix (behind HTTPS)."
        ),
        root_path: str = typer.Option(
            "", "--root-path", help="Sub-path a reverse proxy serves the portal under, e.g. /gpuseat."
        ),
        forwarded_allow_ips: str = typer.Option(
            "",
            "--forwarded-allow-ips",
            help="Proxy addresses whose X-Forwarded-For/-Proto are believed (comma-separated, e.g. 127.0.0.1).",
        ),
        idle_timeout: float = typer.Option(
            5.0, "--idle-timeout", help="Seconds a connection may stay silent before it is closed."
        ),
        receive_timeout: float = typer.Option(
            30.0, "--receive-timeout", help="Seconds a client may pause inside a request body (then 408)."
        ),
        links_expire: str = typer.Option(
            "0",
            "--links-expire",
            help="Days after the course's end that access links stop working, or 'never'.",
        ),
        workers: int | None = typer.Option(
            None,
            "--workers",
            help="Server processes (default: one per CPU core for PostgreSQL, 1 for SQLite).",
        ),
    ) -> None:
        """Serve the course portal: organizer dashboard, participant pages, survey, report."""
        need_portal()
        import ipaddress

        from gpuseat.web.app import create_app

        _check_port(port)
        log_level()
        root = _check_root_path(root_path)
        proxies = _check_proxies(forwarded_allow_ips)
        expire_days = _check_expiry(links_expire)
        if workers is not None and not 1 <= workers <= MAX_WORKERS:
            raise InputError(f"{workers} workers", where="--workers", fix=f"give 1 to {MAX_WORKERS} processes")
        for flag, value in (("--idle-timeout", idle_timeout), ("--receive-timeout", receive_timeout)):
            if not 0.5 <= value <= 3600:
                raise InputError(f"{value} s", where=flag, fix="give 0.5 to 3600 seconds")
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if host != "localhost":
                raise InputError(
                    f"not an IP address: {host!r}", where="--host", fix="e.g. 127.0.0.1 or 0.0.0.0"
                ) from None
        from gpuseat.urls import base_url as check_base_url

        url = check_base_url(base_url or f"http://{host if ':' not in host else f'[{host}]'}:{port}").rstrip("/")
        shown = url if base_url else url + root
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
                print(f"organizer:   {shown}/login   user admin   password {seeded.password}")
                print(f"participant: {shown}/t/{seeded.links[first]}   ({first})")
                sys.stdout.flush()
            settings = PortalSettings(
                db=db,
                course=course,
                base_url=url,
                base_url_given=base_url is not None,
                root_path=root,
                secure_cookies=secure_cookies,
                link_days_after_end=expire_days,
                receive_timeout_s=receive_timeout,
                clock=clock.isoformat() if clock else None,
                bench_path=str(bench_path) if bench_path else None,
            )
            portal = settings.portal()
            served = portal.store.courses.get_course(course)  # a missing or ambiguous course fails here
            if served.ends_on is not None and portal.link_expired_on(served.key):
                print(
                    f"note: course {served.key} ended on {served.ends_on}: its access links answer 'expired' "
                    "(--links-expire DAYS or --links-expire never keeps them working)",
                    file=sys.stderr,
                )
            processes = workers or default_workers(portal.store.url)
            if processes > 1 and portal.store.in_memory:
                raise InputError(
                    "an in-memory database lives in one process", where="--workers", fix="use --workers 1 or a file"
                )
            if processes > 1:
                portal.store.close()  # each worker opens its own store from the settings
                os.environ[WORKER_SETTINGS] = json.dumps(dataclasses.asdict(settings))
            asgi = create_app(portal) if processes == 1 else f"{__name__}:worker_app"
            _run(asgi, host, port, root_path=root, proxies=proxies, idle_timeout=idle_timeout, workers=processes)
            portal.store.close()
        finally:
            os.environ.pop(WORKER_SETTINGS, None)
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    admin = add_group(app, "admin", "Portal organizer accounts.")

    @admin.command("set-password")
    def set_password(
        user: str = typer.Option("admin", "--user", help="Organizer user name."),
        db: StoreDbOption = None,
        password_stdin: bool = typer.Option(False, "--password-stdin", help="Read the password from standard input."),
    ) -> None:
        """Create an organizer or change their password (asked twice, never echoed)."""
        need_portal()
        from gpuseat.store import open_store
        from gpuseat.store.accounts import check_username
        from gpuseat.store.sessions import end_user_sessions

        check_username(user)
        if password_stdin:
            try:  # bytes that are not UTF-8 came through as surrogates and failed in the hasher (exit 70)
                password = sys.stdin.readline().rstrip("\n")
                password.encode("utf-8")
            except UnicodeError:
                raise InputError(
                    "the password on standard input is not UTF-8 text",
                    where="--password-stdin",
                    fix="give the password as one line of UTF-8 text",
                ) from None
        else:
            password = getpass.getpass(f"password for {user}: ")
            if getpass.getpass("again: ") != password:
                raise InputError("the two passwords differ", where="password", fix="type the same password twice")
        with open_store(db, create=True) as store:
            created = store.accounts.set_password(user, password)
            ended = 0 if created else end_user_sessions(store, user)  # a copied cookie dies with the old password
        print(
            f"{'created' if created else 'updated'} organizer {user}" + (f"; ended {ended} session(s)" if ended else "")
        )


#: the log levels uvicorn knows (its ``LOG_LEVELS``)
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def log_level() -> str:
    """``GPUSEAT_LOG_LEVEL`` (default info) as uvicorn takes it: any other value was an internal error
    (uvicorn's KeyError) after the portal had been set up."""
    value = os.environ.get("GPUSEAT_LOG_LEVEL", "info").strip().lower()
    if value not in LOG_LEVELS:
        raise InputError(
            f"{os.environ['GPUSEAT_LOG_LEVEL'][:20]!r} is not a log level",
            where="GPUSEAT_LOG_LEVEL",
            fix=f"set it to one of {', '.join(LOG_LEVELS)}, or unset it for info",
        )
    return value


def _check_root_path(value: str) -> str:
    value = value.strip()
    if value in ("", "/"):
        return ""
    if not re.fullmatch(r"(/[A-Za-z0-9._~-]+)+/?", value):
        raise InputError(
            f"not a URL path: {value[:80]!r}", where="--root-path", fix="e.g. /gpuseat (letters, digits, . _ ~ -)"
        )
    return value.rstrip("/")


def _check_proxies(value: str) -> str:
    import ipaddress

    items = [v.strip() for v in value.split(",") if v.strip()]
    for item in items:
        if item == "*":
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise InputError(
                f"not an IP address or network: {item[:60]!r}",
                where="--forwarded-allow-ips",
                fix="list the proxy's addresses, e.g. 127.0.0.1,10.0.0.0/8",
            ) from None
    return ",".join(items)


def _check_expiry(value: str) -> int | None:
    if value.strip().lower() == "never":
        return None
    fix = "give days after the course ends (0-36500) or never"
    try:
        days = plain_number(value, whole=True, what="a whole number of days", example="30")
    except ValueError as exc:
        raise InputError(str(exc), where="--links-expire", fix=fix) from None
    if not 0 <= days <= 36500:
        raise InputError(f"{value[:20]!r}", where="--links-expire", fix=fix)
    return days


def default_workers(db_url: str) -> int:
    """Server processes when ``--workers`` is not given: one per core for PostgreSQL (a portal process
    spends most of a page in Python, holding its GIL, so one process uses one core), 1 for SQLite (one
    writer at a time anyway, and the writers' fair queue is tuned for few processes)."""
    if not db_url.startswith("postgresql"):
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores))


@dataclasses.dataclass(frozen=True)
class PortalSettings:
    """What a portal process is built from: the parent's own, or each worker's (sent as JSON)."""

    db: str | None
    course: str | None
    base_url: str
    base_url_given: bool
    root_path: str
    secure_cookies: bool
    link_days_after_end: int | None
    receive_timeout_s: float
    clock: str | None  # ISO time (the demo's fixed "now")
    bench_path: str | None

    def portal(self) -> Portal:
        """The portal on a store of its own."""
        from datetime import datetime

        from gpuseat.catalog.bundle import load_catalog
        from gpuseat.store import open_store
        from gpuseat.web.portal import Portal

        return Portal(
            open_store(self.db),
            load_catalog(),
            self.course,
            base_url=self.base_url,
            base_url_given=self.base_url_given,
            root_path=self.root_path,
            secure_cookies=self.secure_cookies,
            link_days_after_end=self.link_days_after_end,
            receive_timeout_s=self.receive_timeout_s,
            clock=datetime.fromisoformat(self.clock) if self.clock else None,
            bench_path=Path(self.bench_path) if self.bench_path else None,
        )


def worker_app() -> Any:
    """The app of one worker process (uvicorn's app factory with ``--workers`` above 1)."""
    from gpuseat.web.app import create_app

    _process_settings()
    return create_app(PortalSettings(**json.loads(os.environ[WORKER_SETTINGS])).portal())


def _process_settings() -> None:
    from gpuseat.web.security import install_log_redaction

    install_log_redaction(log_level())
    # CPU-bound work in worker threads (a 20,000-row roster import) holds the GIL in 5 ms slices by
    # default; 1 ms slices hand the event loop its turn sooner, so other pages keep answering quickly
    sys.setswitchinterval(0.001)


def _run(
    app: Any,
    host: str,
    port: int,
    *,
    root_path: str = "",
    proxies: str = "",
    idle_timeout: float = 5.0,
    workers: int = 1,
) -> None:
    """uvicorn with token-redacted access logs and the portal's limits; SIGTERM/SIGINT stop it cleanly.

    ``workers`` above 1: ``app`` is the import string of :func:`worker_app`; uvicorn's supervisor binds
    the socket once and keeps that many processes serving it (a worker that dies is started again)."""
    import uvicorn

    from gpuseat.web.limits import uvicorn_settings

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level(),
        access_log=True,
        server_header=False,
        root_path=root_path,
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or None,
        factory=workers > 1,
        workers=workers,
        **{**uvicorn_settings(), "timeout_keep_alive": idle_timeout},
    )
    server = uvicorn.Server(config)
    _process_settings()
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it to the previous handler: make that
    # handler a normal exit so the caller's cleanup (the demo's temporary folder) runs.
    previous = signal.signal(signal.SIGTERM, _exit_cleanly)
    try:
        if workers == 1:
            server.run()
        else:
            from uvicorn.supervisors import Multiprocess

            Multiprocess(config, target=server.run, sockets=[config.bind_socket()]).run()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)
