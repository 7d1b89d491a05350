"""What the per-router tests share: the course file, the organizer's password, and :class:`Served`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fastapi.testclient import TestClient

COURSE = """name = "Lab"
participants = 2

[needs]
min_gpu_memory_gb = 16
isolation = "partitioned"

[schedule]
start = 2026-09-07
days = 21

[policy]
quota_hours = 40
"""
PASSWORD = "a long enough passphrase"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Served:
    """The store, the app's client, each participant's link token, and how to log the organizer in."""

    store: Any
    client: TestClient
    links: dict[str, str]

    def csrf(self, path: str) -> str:
        """The CSRF token of the form on ``path`` (which binds it: the session, a link, the pre-login cookie)."""
        page = self.client.get(path)
        assert page.status_code == 200, page.text[:300]
        found = CSRF.search(page.text)
        assert found, page.text[:300]
        return found.group(1)

    def login(self, password: str = PASSWORD) -> Any:
        """Log the organizer in through the login form (the session cookie stays on the client)."""
        return self.client.post(
            "/login",
            data={"csrf": self.csrf("/login"), "username": "admin", "password": password},
            follow_redirects=False,
        )
