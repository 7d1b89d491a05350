"""URLs from flags and environment variables, checked when a command starts, never at first use.

A webhook URL that cannot be posted to, a base URL that is really ``javascript:``: each is one clear
:class:`~gpuseat.errors.InputError` (exit 2) before a monitor runs for hours or a link is printed.
Database URLs are checked by :func:`gpuseat.db.database_url` (it needs SQLAlchemy, which only
``gpuseat.db`` and ``gpuseat.store`` import).
"""

from __future__ import annotations

import re
import urllib.parse

from gpuseat.errors import InputError
from gpuseat.safe_text import has_control


def http_url(value: str, *, where: str, example: str = "https://hooks.example.org/gpu") -> str:
    """``value`` when it is an absolute http(s) URL with a host (and a valid port); else an input error."""
    fix = f"give an http:// or https:// URL, e.g. {example}"
    if not value or len(value) > 2048 or has_control(value) or any(c.isspace() for c in value):
        raise InputError("not a URL (empty, too long, or with spaces or control characters)", where=where, fix=fix)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # bytes that are not UTF-8 (an environment variable): an internal error on use
            raise InputError("not a URL: it holds bytes that are not UTF-8 text", where=where, fix=fix) from None
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


_BASE_URL = re.compile(
    r"https?://(?:[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[[0-9A-Fa-f:.]{2,45}\])(?::(?P<port>\d{1,5}))?(?:/[A-Za-z0-9._~/-]*)?",
    re.ASCII,  # \d alone also matches ١٢, which int() reads as port 12
)


def base_url(value: str, *, where: str = "base_url") -> str:
    """The portal's public address: plain ``http(s)://host[:port][/path]`` (access links are ``BASE/t/TOKEN``).

    The one check behind ``roster links``, ``serve --base-url`` and :class:`gpuseat.web.app.Portal`:
    never ``javascript:``, credentials, a query or a fragment, nor characters a page or a mail must escape.
    """
    m = _BASE_URL.fullmatch(value) if isinstance(value, str) else None
    if m is None or (m["port"] is not None and not 0 < int(m["port"]) < 65536):
        raise InputError(
            f"{str(value)[:200]!r} is not a base URL",
            where=where,
            fix="give http(s)://host[:port][/path], e.g. https://gpu.example.org",
        )
    return value
