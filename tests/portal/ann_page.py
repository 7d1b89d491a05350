"""Ann's page in Chromium against a live ``gpuseat serve``: the set-up the open-page browser tests share (a
SQLite store with ann holding a seat and her link, the server, and a page whose clock the test moves and
whose console errors and polls it watches)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuseat.store import Store, open_store

from .live import Server, start
from .routes.served import COURSE
from .test_browser import ARGS, CHROMIUM


def ann_store(
    tmp_path: Path, seats: Iterable[dict[str, str]], roster: str = "name,email\nAnn,ann@example.org\n"
) -> tuple[Store, str, str]:
    """A SQLite store whose course ``lab`` has ``seats`` and ann (from ``roster``) on the first: the store,
    its URL and ann's link."""
    url = f"sqlite:///{tmp_path / 'course.db'}"
    store = open_store(url, create=True)
    (tmp_path / "lab.toml").write_text(COURSE)
    store.courses.create_course(tmp_path / "lab.toml", key="lab")
    (tmp_path / "r.csv").write_text(roster)
    store.roster.import_roster("lab", tmp_path / "r.csv")
    specs = list(seats)
    store.seats.add_seats("lab", specs)
    store.seats.assign("lab", "ann", specs[0]["key"])
    return store, url, store.tokens.issue_tokens("lab")[0].token


def ann_served(tmp_path: Path, seats: Iterable[dict[str, str]]) -> tuple[Store, str, Server]:
    """A store whose course ``lab`` has ``seats`` and ann on the first, her link, and the server on it."""
    store, url, token = ann_store(tmp_path, seats)
    return store, token, start(["--db", url, "--links-expire", "never"], tmp_path / "serve.log")


@dataclass
class Watched:
    """A page with its own clock installed, the console errors it logged and the statuses of ``polled``."""

    browser: Any
    page: Any
    errors: list[str] = field(default_factory=list)
    polls: list[int] = field(default_factory=list)


def watched_page(pw: Any, polled: str) -> Watched:
    """A new Chromium page watched for console errors and for the answers to URLs ending in ``polled``."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    w = Watched(browser, browser.new_context().new_page())
    # the page's own clock, still ticking, moved on by a poll's interval where the test would wait one
    w.page.clock.install()
    w.page.on("console", lambda m: w.errors.append(m.text) if m.type == "error" else None)
    w.page.on("response", lambda r: w.polls.append(r.status) if r.url.endswith(polled) else None)
    return w
