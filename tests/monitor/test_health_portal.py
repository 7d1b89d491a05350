"""Issue 26: an Xid alert from a capture shows in the portal and in the course report.

The monitor runs (the real CLI) over telegraf's A100 ``-q -x`` and a real dmesg with Xid 32/32/31 on the same
PCI bus, into the demo course's store; the portal app is then rendered in-process with the organizer's login.
"""

from __future__ import annotations

import re
import warnings

from gpuseat.catalog.bundle import load_catalog
from gpuseat.services.demo import seed_demo
from gpuseat.store import open_store
from gpuseat.web.app import Portal, create_app

from .conftest import FIXTURES

with warnings.catch_warnings():  # starlette asks for httpx2 (not packaged here); httpx is what it uses today
    warnings.simplefilter("ignore", DeprecationWarning)
    from starlette.testclient import TestClient


def test_an_xid_from_a_capture_reaches_the_alerts_page_and_the_report(cli, tmp_path, monkeypatch):
    demo = seed_demo(tmp_path / "demo")
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(demo.folder))
    got = cli(
        "monitor",
        "--from-xml", FIXTURES / "telegraf__a100-sxm4-v12.xml",
        "--kernel-log", FIXTURES / "bumblebee-677__xid-dmesg.txt",
        "--db", demo.db_url, "--course", demo.course, "--ticks", "1", "--interval", "0.1",
    )  # fmt: skip
    assert got.code == 0, got.err
    store = open_store(demo.db_url)
    try:
        portal = Portal(store, load_catalog(), demo.course, clock=demo.now, bench_path=demo.bench_path)
        with TestClient(create_app(portal)) as client:
            page = client.get("/login")
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
            r = client.post("/login", data={"csrf": csrf, "username": "admin", "password": demo.password})
            assert r.status_code in (200, 303), r.text[:300]
            alerts = client.get("/alerts")
            assert alerts.status_code == 200
            assert "Xid 31, 3 so far" in alerts.text and "NVIDIA A100-SXM4-80GB" in alerts.text
            assert "xid" in client.get("/overview").text
    finally:
        store.close()
    out = tmp_path / "report.html"
    assert cli("report", "--db", demo.db_url, "--out", out).code == 0
    assert "xid: GPU 0 NVIDIA A100-SXM4-80GB" in out.read_text(encoding="utf-8")
