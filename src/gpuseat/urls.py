"""URLs from flags and environment variables, checked when a command starts, never at first use.

A webhook URL that cannot be posted to, a base URL that is really ``javascript:``, a database URL
with a broken IPv6 host: each is one clear :class:`~gpuseat.errors.InputError` (exit 2) before a
monitor runs for hours or a link is printed.
"""

from __future__ import annotations

import urllib.parse

from gpuseat.errors import InputError
from gpuseat.safe_text import has_control


def http_url(value: str, *, where: str, example: str = "https://hooks.example.org/gpu") -> str:
    """``value`` when it is an absolute http(s) URL with a host (and a valid port); else an input error."""
    fix = f"give an http:// or https:// URL, e.g. {example}"
    if not value or len(value) > 2048 or has_control(value) or any(c.isspace() for c in value):
        raise InputError("not a URL (empty, too long, or with spaces or control characters)", where=where, fix=fix)
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port  # raises on a bad port
        host = parts.hostname
    except ValueError as exc:
        raise InputError(f"not a valid URL: {exc}", where=where, fix=fix) from None
    if parts.scheme not in ("http", "https"):
        raise InputError(f"scheme {parts.scheme or '(none)'!r} is not http or https", where=where, fix=fix)
    if not host:
        raise InputError("the URL has no host", where=where, fix=fix)
    if port == 0:
        raise InputError("port 0 is not a port", where=where, fix=fix)
    return value


def database_url(value: str, *, where: str = "--db / GPUSEAT_DB_URL") -> str:
    """``value`` when SQLAlchemy can read it as a database URL with a usable host; else an input error."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    fix = "use sqlite:///path/gpuseat.db or postgresql+psycopg://user@host/dbname"
    if has_control(value) or "\n" in value:
        raise InputError("the database URL holds control characters", where=where, fix=fix)
    try:
        parsed = make_url(value)
        host = parsed.host
        if parsed.port is not None and not 0 < parsed.port < 65536:
            raise ValueError(f"port {parsed.port} is out of range")
    except (ArgumentError, ValueError, TypeError) as exc:
        raise InputError(f"not a database URL: {exc}", where=where, fix=fix) from None
    if host and (host.startswith("[") != host.endswith("]") or "[" in host.strip("[]") or "]" in host.strip("[]")):
        raise InputError(f"malformed host {host!r} (unbalanced brackets)", where=where, fix=fix)
    return value
