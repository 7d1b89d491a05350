"""Alerts posted to a webhook from a background thread, with retries: a slow or broken receiver
never delays a tick and never stops the monitor.

Each alert is tried up to :data:`ATTEMPTS` times with exponential backoff; what could not be
delivered is counted (``failed``), and a full queue drops the oldest alert (``dropped``).
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from gpuseat.readings import Alert

log = logging.getLogger("gpuseat.monitor")

ATTEMPTS = 4
FIRST_BACKOFF_S = 1.0
QUEUE_LIMIT = 1000


class WebhookSender:
    """Posts alerts as JSON (``state`` = ``firing``/``resolved``), or any JSON object (:meth:`post`), in
    order, in the background."""

    def __init__(
        self, url: str, *, timeout_s: float = 5.0, attempts: int = ATTEMPTS, backoff_s: float = FIRST_BACKOFF_S
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.sent = 0
        self.failed = 0
        self.dropped = 0
        self._queue: deque[dict[str, Any]] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._abort = False
        self._thread = threading.Thread(target=self._run, name="gpuseat-webhook", daemon=True)
        self._thread.start()

    def submit(self, alert: Alert) -> None:
        """Queue one alert (never blocks, never raises)."""
        self.post({**asdict(alert), "state": "firing" if alert.raised else "resolved"})

    def post(self, payload: Mapping[str, Any]) -> None:
        """Queue one JSON object (never blocks, never raises)."""
        with self._cond:
            if len(self._queue) >= QUEUE_LIMIT:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append(dict(payload))
            self._cond.notify()

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued (at most ``timeout_s`` more), then stop."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout_s)
        with self._cond:  # out of time: stop retrying, count what is left as dropped
            self._abort = True
            self.dropped += len(self._queue)
            self._queue.clear()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                body = self._queue.popleft()
            if self._deliver(json.dumps(body).encode()):
                self.sent += 1
            else:
                self.failed += 1
                what = body.get("message") or body.get("event")
                log.warning("webhook %s: gave up on %r after %d attempts", self.url, what, self.attempts)

    def _deliver(self, payload: bytes) -> bool:
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            try:
                request = urllib.request.Request(
                    self.url, data=payload, headers={"Content-Type": "application/json"}, method="POST"
                )
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    if 200 <= response.status < 300:
                        return True
                    reason = f"HTTP {response.status}"
            except urllib.error.HTTPError as exc:
                reason = f"HTTP {exc.code}"
            except Exception as exc:  # any failure of the receiver or the network is retried, never raised
                reason = f"{type(exc).__name__}: {exc}"
            log.warning("webhook %s attempt %d/%d failed: %s", self.url, attempt, self.attempts, reason)
            if attempt < self.attempts:
                with self._cond:
                    if self._abort:
                        return False
                    self._cond.wait(delay)
                delay *= 2
        return False
