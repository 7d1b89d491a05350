"""The course webhook (the course file's ``webhook = "https://…"``): what the agent tells the organizer
where they already look (a chat, a pager) — an idle warning as it is given, and before each lab
session the seats found broken with the reason.

Bodies are posted as JSON by the monitor's background sender (:mod:`gpuseat.monitor.webhook`): each is
tried up to four times with backoff, a failure is logged, and a pass never waits on the receiver. A
pass that rechecks a broken seat posts the session's list again only when it changed (within one agent
process). Bodies (``event`` says which):

- ``seat.idle``: ``course``, ``seat``, ``participant``, ``minutes_idle``, ``stops_at`` (UTC), ``text``;
- ``session.check``: ``course``, ``engine`` and ``host`` (the engine and agent host that checked: one body
  each), ``session_starts`` (UTC), ``checked`` (seats), ``broken``: a list of ``{seat, participant, reason}``.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping
from typing import Any

from gpuseat.errors import GpuseatError
from gpuseat.monitor.webhook import WebhookSender

_senders: dict[str, WebhookSender] = {}
_posted: dict[tuple[str, str, str], Any] = {}
_lock = threading.Lock()


def webhook_of(store: Any, course: str) -> str | None:
    """The course's webhook URL (None: none set, or the course file is gone)."""
    try:
        url = store.courses.course_file(course).webhook
    except GpuseatError:
        return None
    return str(url) if url else None


def post(url: str, payload: Mapping[str, Any], *, once: tuple[str, str] | None = None) -> bool:
    """Queue ``payload`` for ``url`` (never blocks); ``once`` = (kind, key): not again while what was
    last posted under that key is the same. Whether it was queued."""
    with _lock:
        if once is not None:
            mark = (url, *once)
            if _posted.get(mark) == payload:
                return False
            _posted[mark] = dict(payload)
        sender = _senders.get(url)
        if sender is None:
            if not _senders:
                atexit.register(close_all)
            sender = _senders[url] = WebhookSender(url)
    sender.post(payload)
    return True


def close_all(timeout_s: float = 10.0) -> None:
    """Deliver what is queued (a one-pass ``gpuseat apply`` exits after this), at most ``timeout_s``."""
    with _lock:
        senders = list(_senders.values())
        _senders.clear()
    for sender in senders:
        sender.close(timeout_s)
