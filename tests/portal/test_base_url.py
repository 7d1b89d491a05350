"""One validator for the portal's base URL: ``serve``, ``roster links`` and the library refuse the same URLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuseat.catalog.bundle import load_catalog
from gpuseat.errors import InputError
from gpuseat.store import open_store
from gpuseat.urls import base_url as check_base_url

EXAMPLES = Path(__file__).parents[2] / "examples"
BAD = [
    "javascript:alert(1)",
    "http://user@host",
    "https://h/?next=x",
    "http://h:70000",
    "data:text/html,x",
    "http://h/<b>",
]
GOOD = ["http://127.0.0.1:8000", "https://gpu.example.org/portal", "http://[::1]:8000"]


@pytest.mark.parametrize("url", GOOD)
def test_plain_urls_pass(url: str) -> None:
    assert check_base_url(url) == url


@pytest.mark.parametrize("url", BAD)
def test_serve_and_roster_links_refuse_the_same_urls(url: str, cli, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'c.db'}"
    with open_store(db, create=True) as store:
        store.courses.create_course(EXAMPLES / "course-2016.toml", key="dl-2016")
        with pytest.raises(InputError) as info:
            from gpuseat.web.app import Portal

            Portal(store, load_catalog(), "dl-2016", base_url=url)
        assert info.value.where == "base_url"
    # serve: the course does not exist either, so a serve that skipped the check fails (on --course), never listens
    for args in (["serve", "--db", db, "--port", "8000", "--course", "nope"], ["roster", "links", "--db", db]):
        r = cli(*args, "--base-url", url)
        assert r.code == 2, (args, r.err)
        assert "--base-url" in r.err and "not a base URL" in r.err
