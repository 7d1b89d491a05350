"""The one check of the portal's public base URL (access links are ``BASE/t/TOKEN``).

``roster links``, ``serve --base-url`` and :class:`gpuseat.web.app.Portal` all call it, so a link that
reaches a participant's mail or a page is always plain ``http(s)://host[:port][/path]``: never
``javascript:``, credentials, a query or a fragment, nor characters that need escaping.
"""

from __future__ import annotations

import re

from gpuseat.errors import InputError

_BASE_URL = re.compile(
    r"https?://(?:[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[[0-9A-Fa-f:.]{2,45}\])(?::(?P<port>\d{1,5}))?(?:/[A-Za-z0-9._~/-]*)?"
)


def check_base_url(url: str) -> str:
    """``url`` when it is ``http(s)://host[:port][/path]`` with a port up to 65535; an InputError otherwise."""
    m = _BASE_URL.fullmatch(url) if isinstance(url, str) else None
    if m is None or (m["port"] is not None and not 0 < int(m["port"]) < 65536):
        raise InputError(
            f"{str(url)[:200]!r} is not a base URL",
            where="base_url",
            fix="give http(s)://host[:port][/path], e.g. https://gpu.example.org",
        )
    return url
