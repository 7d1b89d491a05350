"""The portal behind a real nginx, at a sub-path (``/gpuseat/``) and at the root, opened in Chromium.

The nginx profile is the one docs/portal.md recommends; the portal runs with ``--root-path`` and
``--forwarded-allow-ips 127.0.0.1``. Clients come from different loopback addresses (127.0.0.2,
127.0.0.3, ...), so the portal sees each one's own address through ``X-Forwarded-For``.
"""

from __future__ import annotations

import re
import secrets

import httpx
import pytest

from .live import csrf_of, demo_credentials, free_port, start
from .nginx import start_nginx
from .test_browser import ARGS, CHROMIUM, _need_browser

#: the tests behind nginx run on one xdist worker, so each prefix's portal and nginx start once
SHARED = pytest.mark.xdist_group(name="portal-proxy")


@pytest.fixture(scope="module", params=["/gpuseat", ""], ids=["sub-path", "root"])
def proxied(request, tmp_path_factory):
    """The demo portal behind nginx, one per prefix for the module's tests (which use their own client
    addresses and a fresh browser, so neither sees the other's rate-limit counts or cookies)."""
    prefix = request.param
    tmp_path = tmp_path_factory.mktemp("proxied")
    port = free_port()
    args = ["--demo", "--forwarded-allow-ips", "127.0.0.1", "--base-url", f"http://127.0.0.1:{port}{prefix}"]
    if prefix:
        args += ["--root-path", prefix]
    server = start(args, tmp_path / "serve.log")
    upstream = int(server.url.rsplit(":", 1)[1])
    try:
        proxy = start_nginx(tmp_path / "nginx", port, upstream, prefix)
    except BaseException:
        server.stop()
        raise
    password, token = demo_credentials(server.printed)
    yield proxy.url, password, token, server, prefix
    proxy.stop()
    assert server.stop() == 0


def client(url: str, address: str) -> httpx.Client:
    """An HTTP client whose connections come from ``address`` (any 127.x.y.z is this machine)."""
    return httpx.Client(base_url=url, transport=httpx.HTTPTransport(local_address=address), timeout=30)


@SHARED
def test_login_participant_page_and_survey_in_chromium(proxied):
    url, password, token, server, _ = proxied
    assert f"{url}/t/{token}" in server.printed  # links name the public address and sub-path
    sync_playwright = _need_browser()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page()
        bad: list[str] = []
        page.on("response", lambda r: bad.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        page.on("console", lambda m: bad.append(m.text) if m.type == "error" else None)
        page.goto(url + "/")
        assert page.url == url + "/login"
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_url(url + "/overview")
        # the style sheet arrived through the proxy (a 404 would leave the page unstyled)
        assert page.evaluate("getComputedStyle(document.querySelector('header.top')).display") == "flex"
        for tab in ("Seats", "Survey", "Access links", "Roster"):
            page.click(f"nav >> text={tab}")
            assert page.url.startswith(url + "/")
        page.click("nav >> text=Seats")
        with page.expect_response(lambda r: r.url == url + "/seats/live.json") as live:
            page.reload()
        assert live.value.status == 200  # portal.js polls under the sub-path

        who = browser.new_page()
        with who.expect_response(lambda r: r.url == f"{url}/t/{token}/live") as polled:
            who.goto(f"{url}/t/{token}")
        assert polled.value.status == 200
        who.check("fieldset[data-question=expectations] input[value='7']")
        who.check("fieldset[data-question=format] input[value='6']")
        who.check("fieldset[data-question=recommend] input[value='9']")
        who.click("#survey-send")
        assert "your answers are saved" in who.inner_text(".notice")
        assert who.url == f"{url}/t/{token}/survey"
        who.click("#back")
        assert who.is_checked("fieldset[data-question=recommend] input[value='9']")  # stored, shown again
        browser.close()
    assert bad == []


@SHARED
def test_one_clients_failures_never_lock_out_another(proxied):
    url, password, token, server, prefix = proxied
    with client(url, "127.0.0.2") as mallory:
        csrf = csrf_of(mallory.get("/login").text)
        # mallory also claims to be 127.0.0.3: nginx appends the real address, which the portal believes
        spoof = {"x-forwarded-for": "127.0.0.3"}
        codes = [
            mallory.post(
                "/login", data={"csrf": csrf, "username": "admin", "password": f"guess-{i}"}, headers=spoof
            ).status_code
            for i in range(12)
        ]
        assert codes == [401] * 10 + [429] * 2
        guesses = [mallory.get(f"/t/{secrets.token_urlsafe(32)}", headers=spoof).status_code for _ in range(22)]
        assert guesses == [404] * 20 + [429] * 2
        assert mallory.get(f"/t/{token}").status_code == 200  # a valid link is never refused, even to mallory
    with client(url, "127.0.0.3") as alice:
        page = alice.get("/login").text
        r = alice.post("/login", data={"csrf": csrf_of(page), "username": "admin", "password": password})
        assert r.status_code == 303 and r.headers["location"] == prefix + "/overview"
        assert alice.get("/overview").status_code == 200
        assert alice.get(f"/t/{token}").status_code == 200
        assert alice.get(f"/t/{secrets.token_urlsafe(32)}").status_code == 404  # her own count starts at 0
    # and mallory's address still gets in with the right password (counts are per address and account)
    with client(url, "127.0.0.2") as mallory:
        page = mallory.get("/login").text
        r = mallory.post("/login", data={"csrf": csrf_of(page), "username": "admin", "password": password})
        assert r.status_code == 303
    assert re.search(r"127\.0\.0\.3:\d+ - \"POST \S*/login", server.output())  # the log names the real client


def test_over_https_cookies_are_host_prefixed_and_secure(tmp_path):
    """Behind a TLS proxy (X-Forwarded-Proto from a trusted address): __Host- cookies, Secure, HSTS."""
    server = start(["--demo", "--forwarded-allow-ips", "127.0.0.1"], tmp_path / "serve.log")
    password, _ = demo_credentials(server.printed)
    https = {"x-forwarded-proto": "https", "x-forwarded-for": "203.0.113.7"}
    try:
        with httpx.Client(base_url=server.url, headers=https) as c:  # http to the portal, https to the browser
            page = c.get("/login")
            assert page.headers["strict-transport-security"].startswith("max-age=")
            pre = page.headers["set-cookie"]
            assert pre.startswith("__Host-gpuseat_csrf=") and "Secure" in pre and "Path=/" in pre
            assert "Domain" not in pre
            # the client's jar keeps Secure cookies for https: send them as a browser behind TLS would
            jar = {"cookie": pre.split(";", 1)[0]}
            form = {"csrf": csrf_of(page.text), "username": "admin", "password": password}
            r = c.post("/login", data=form, headers=jar)
            session = r.headers["set-cookie"]
            assert r.status_code == 303 and session.startswith("__Host-gpuseat_session=") and "Secure" in session
            value = session.split(";", 1)[0].split("=", 1)[1]
            assert c.get("/overview", headers={"cookie": f"__Host-gpuseat_session={value}"}).status_code == 200
            # a bare-named cookie (as a sibling sub-domain could set) is no session here
            assert c.get("/overview", headers={"cookie": f"gpuseat_session={value}"}).status_code == 303
        # plain http from the same trusted proxy: no HSTS, bare names (browsers refuse __Host- without TLS)
        plain = httpx.get(server.url + "/login")
        assert "strict-transport-security" not in plain.headers
        assert plain.headers["set-cookie"].startswith("gpuseat_csrf=")
        # a client the flag does not name cannot claim https
        other = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.5"), headers=https)
        with other:
            assert "strict-transport-security" not in other.get(server.url + "/login").headers
    finally:
        assert server.stop() == 0
