"""The portal's security rules, proved with real HTTP requests against a running uvicorn server (``serve --demo``)."""

from __future__ import annotations

import os
import re
import secrets
import signal
from pathlib import Path

import httpx
import pytest

from .live import SRC, csrf_of, demo_credentials, login, start

#: the tests on the module's demo server run on one xdist worker, so the server starts once
SHARED = pytest.mark.xdist_group(name="portal-security-demo")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    server = start(["--demo"], log)
    password, token = demo_credentials(server.printed)
    server.extra.update(password=password, token=token)
    yield server
    code = server.stop(signal.SIGTERM)
    assert code == 0, server.output()
    folder = re.search(r"in (\S+gpuseat-demo-\S+)", server.printed).group(1)
    assert not Path(folder).exists()  # the demo cleans up after SIGTERM


@pytest.fixture
def organizer(demo):
    with httpx.Client(base_url=demo.url) as client:
        assert login(client, demo.url, demo.extra["password"]).status_code == 303
        yield client


def fresh_links(organizer: httpx.Client, *participants: str) -> dict[str, str]:
    """Rotate the links of some participants through the links page; returns participant → token."""
    out = {}
    for who in participants:
        page = organizer.get("/links")
        r = organizer.post("/links", data={"csrf": csrf_of(page.text), "action": "rotate", "participant": who})
        assert r.status_code == 200
        out[who] = re.search(r"/t/([A-Za-z0-9_-]{40,})", r.text).group(1)
    return out


@SHARED
def test_demo_answers_quickly_and_logs_no_token(demo):
    print(f"serve --demo answered / after {demo.startup_s:.1f} s")
    r = httpx.get(demo.url + "/")
    assert r.status_code == 303 and r.headers["location"] == "/login"
    assert httpx.get(f"{demo.url}/t/{demo.extra['token']}").status_code == 200
    log = demo.output()
    assert "/t/[token]" in log
    assert demo.extra["token"] not in log.split("participant:")[1].split("\n", 1)[1]  # only the banner shows it


@SHARED
@pytest.mark.parametrize("path", ["/login", "/static/portal.js", "/nope", "/t/TOKEN"])
def test_security_headers_on_every_response(demo, path):
    r = httpx.get(demo.url + path.replace("TOKEN", demo.extra["token"]))
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"
    assert "server" not in r.headers


@SHARED
def test_pages_have_no_inline_scripts_or_styles(organizer):
    for path in ("/overview", "/seats", "/survey", "/links", "/bench", "/report"):
        html = organizer.get(path).text
        assert not re.search(r"<script(?![^>]*\bsrc=)", html), path
        assert " style=" not in html and "javascript:" not in html, path
        assert not re.search(r"""(src|href)=["']https?://""", html), path


@SHARED
@pytest.mark.parametrize("path", ["/overview", "/seats", "/roster", "/links", "/survey", "/report", "/alerts"])
def test_organizer_pages_need_a_session(demo, path):
    r = httpx.get(demo.url + path)
    assert r.status_code == 303 and r.headers["location"] == f"/login?next={path}"


@SHARED
def test_api_and_forms_need_a_session(demo):
    assert httpx.get(demo.url + "/seats/live.json").status_code == 401
    assert httpx.get(demo.url + "/survey.csv").status_code == 401
    assert httpx.post(demo.url + "/seats/action", data={"action": "assign-all"}).status_code == 401


@SHARED
def test_session_cookie_is_signed_httponly_samesite(demo):
    with httpx.Client(base_url=demo.url) as client:
        r = login(client, demo.url, demo.extra["password"])
        cookie = next(v for k, v in r.headers.multi_items() if k == "set-cookie" and v.startswith("gpuseat_session="))
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Max-Age=" in cookie
        assert client.get("/overview").status_code == 200
        value = client.cookies["gpuseat_session"]
        forged = value[:-2] + ("AA" if not value.endswith("AA") else "BB")
        client.cookies.set("gpuseat_session", forged)
        assert client.get("/overview").status_code == 303  # a tampered cookie is no session
        client.cookies.set("gpuseat_session", "eyJ1IjoiYWRtaW4ifQ")  # unsigned {"u":"admin"}
        assert client.get("/overview").status_code == 303


@SHARED
def test_wrong_password_is_refused(demo):
    with httpx.Client(base_url=demo.url) as client:
        r = login(client, demo.url, "not-the-password")
        assert r.status_code == 401 and "gpuseat_session" not in client.cookies


@SHARED
def test_forms_without_their_csrf_token_are_refused(demo, organizer):
    token = demo.extra["token"]
    before = organizer.get("/survey").text
    assert 'id="survey-close"' in before  # the demo's survey is open
    # replay the organizer's "close survey" form without the token, with a wrong one, with another visitor's
    assert organizer.post("/survey", data={"action": "close"}).status_code == 403
    assert organizer.post("/survey", data={"action": "close", "csrf": "0" * 64}).status_code == 403
    other = csrf_of(httpx.get(demo.url + "/login").text)  # valid for that visitor's cookie, not this one
    assert organizer.post("/survey", data={"action": "close", "csrf": other}).status_code == 403
    assert 'id="survey-close"' in organizer.get("/survey").text  # still open: nothing happened
    # login and the participant's survey form too
    assert (
        httpx.post(demo.url + "/login", data={"username": "admin", "password": demo.extra["password"]}).status_code
        == 403
    )
    with httpx.Client(base_url=demo.url) as p:
        page = p.get(f"/t/{token}")
        assert (
            p.post(f"/t/{token}/survey", data={"q_recommend": "0", "q_expectations": "1", "q_format": "1"}).status_code
            == 403
        )
        ok = p.post(
            f"/t/{token}/survey",
            data={"csrf": csrf_of(page.text), "q_recommend": "7", "q_expectations": "5", "q_format": "6"},
        )
        assert ok.status_code == 200 and "your answers are saved" in ok.text


@SHARED
def test_a_token_opens_only_its_own_page(demo, organizer):
    links = fresh_links(organizer, "ghopper", "aturing")
    a, b = links["ghopper"], links["aturing"]
    page_a = httpx.get(f"{demo.url}/t/{a}").text
    assert "Grace Hopper" in page_a and "Alan Turing" not in page_a
    seat_a = re.search(r'id="seat-key">([^<]+)<', page_a).group(1)
    seat_b = re.search(r'id="seat-key">([^<]+)<', httpx.get(f"{demo.url}/t/{b}").text).group(1)
    assert seat_a != seat_b and seat_b not in page_a
    live = httpx.get(f"{demo.url}/t/{a}/live").json()
    assert live["participant"] == "ghopper" and live["seat"] == seat_a
    # guessing: another participant's key, a near-miss token, a random token, a too-short one
    for guess in ("aturing", a[:-1] + ("A" if a[-1] != "A" else "B"), secrets.token_urlsafe(32), a[:20]):
        r = httpx.get(f"{demo.url}/t/{guess}")
        assert r.status_code == 404 and "Alan Turing" not in r.text
    # a query string naming someone else changes nothing
    assert "Alan Turing" not in httpx.get(f"{demo.url}/t/{a}", params={"participant": "aturing"}).text
    # B answers through A's link? Impossible: answers land on A
    with httpx.Client(base_url=demo.url) as pa:
        form = {"csrf": csrf_of(pa.get(f"/t/{a}").text), "q_recommend": "3", "q_expectations": "2", "q_format": "2"}
        assert pa.post(f"/t/{a}/survey", data=form).status_code == 200
    page_b = httpx.get(f"{demo.url}/t/{b}").text
    assert 'name="q_recommend" value="3" checked' not in page_b
    # rotating A's link kills the old one
    new_a = fresh_links(organizer, "ghopper")["ghopper"]
    assert httpx.get(f"{demo.url}/t/{a}").status_code == 404
    assert httpx.get(f"{demo.url}/t/{new_a}").status_code == 200


@SHARED
def test_revoked_links_open_nothing(demo, organizer):
    token = fresh_links(organizer, "dknuth")["dknuth"]
    assert httpx.get(f"{demo.url}/t/{token}").status_code == 200
    page = organizer.get("/links")
    organizer.post("/links", data={"csrf": csrf_of(page.text), "action": "revoke", "participant": "dknuth"})
    assert httpx.get(f"{demo.url}/t/{token}").status_code == 404
    assert httpx.get(f"{demo.url}/t/{token}/live").status_code == 404


@SHARED
def test_guessing_is_rate_limited_but_never_refuses_the_right_answer(demo):
    """From an address of its own (failures are counted per address), so the module's other tests on the
    same server count for nothing here."""
    password, token = demo.extra["password"], demo.extra["token"]

    def client() -> httpx.Client:
        return httpx.Client(base_url=demo.url, transport=httpx.HTTPTransport(local_address="127.0.0.9"))

    with client() as c:
        codes = [login(c, demo.url, f"guess-{i}").status_code for i in range(12)]
        assert codes == [401] * 10 + [429] * 2  # failures of this address and account are limited ...
        assert login(c, demo.url, password).status_code == 303  # ... the right password still gets in
    with client() as other:  # another account from the same address: not locked
        assert login(other, demo.url, "not-it", user="nobody").status_code == 401
    with client() as c:
        codes = [c.get(f"/t/{secrets.token_urlsafe(32)}").status_code for _ in range(22)]
        assert codes == [404] * 20 + [429] * 2
        assert c.get(f"/t/{token}").status_code == 200  # a valid link is never refused
        assert c.get(f"/t/{token}/live").status_code == 200


@SHARED
def test_cookie_tossing_from_a_sibling_subdomain_is_refused(demo, organizer):
    """An attacker on notebooks.example.org sets the CSRF cookie for the whole domain and posts its own form."""
    # the attacker visits the portal themself: a pre-login cookie and the form token that goes with it
    with httpx.Client(base_url=demo.url) as attacker:
        token = csrf_of(attacker.get("/login").text)
        tossed = attacker.cookies["gpuseat_csrf"]
    assert 'id="survey-close"' in organizer.get("/survey").text
    # ... tosses the cookie into the organizer's browser (Domain=.example.org reaches every sub-domain)
    organizer.cookies.set("gpuseat_csrf", tossed)
    form = {"action": "close", "csrf": token}
    # a browser marks the cross-site POST; an old one sends neither header: both are refused
    sibling = {"origin": "https://notebooks.example.org", "sec-fetch-site": "same-site"}
    assert organizer.post("/survey", data=form, headers=sibling).status_code == 403
    assert organizer.post("/survey", data=form, headers={"origin": "https://notebooks.example.org"}).status_code == 403
    assert organizer.post("/survey", data=form).status_code == 403  # the token is bound to the session
    seat_form = {"action": "release", "seat": "m60-1", "csrf": token}
    assert organizer.post("/seats/action", data=seat_form).status_code == 403
    assert 'id="survey-close"' in organizer.get("/survey").text  # nothing happened
    # the organizer's own form (same origin) still works
    own = csrf_of(organizer.get("/survey").text)
    same = {"origin": demo.url, "sec-fetch-site": "same-origin"}
    assert organizer.post("/survey", data={"action": "close", "csrf": own}, headers=same).status_code == 303
    assert organizer.post("/survey", data={"action": "open", "csrf": own}, headers=same).status_code == 303


@SHARED
def test_the_host_header_is_never_reflected(demo):
    for path in ("/", "/overview", "/favicon.ico", "/seats/"):
        r = httpx.get(demo.url + path, headers={"host": "evil.example.com"})
        assert "evil.example.com" not in r.headers.get("location", "") + r.text, path


@SHARED
def test_logout_ends_the_session_on_the_server(demo):
    with httpx.Client(base_url=demo.url) as client:
        assert login(client, demo.url, demo.extra["password"]).status_code == 303
        copied = client.cookies["gpuseat_session"]
        assert client.get("/overview").status_code == 200
        r = client.post("/logout", data={"csrf": csrf_of(client.get("/overview").text)})
        assert r.status_code == 303
    # the copied cookie opens nothing any more
    assert httpx.get(demo.url + "/overview", cookies={"gpuseat_session": copied}).status_code == 303


@SHARED
def test_log_out_everywhere_ends_every_session(demo):
    phone, laptop = httpx.Client(base_url=demo.url), httpx.Client(base_url=demo.url)
    with phone, laptop:
        for c in (phone, laptop):
            assert login(c, demo.url, demo.extra["password"]).status_code == 303
            assert c.get("/overview").status_code == 200
        r = laptop.post("/logout/everywhere", data={"csrf": csrf_of(laptop.get("/overview").text)})
        assert r.status_code == 303
        assert phone.get("/overview").status_code == 303
        assert laptop.get("/overview").status_code == 303


def test_set_password_ends_old_sessions(tmp_path):
    import subprocess
    import sys

    from gpuseat.store import open_store

    db = f"sqlite:///{tmp_path / 'course.db'}"
    store = open_store(db, create=True)
    store.courses.create_course(Path(__file__).resolve().parents[2] / "examples" / "course-2016.toml", key="dl-2016")
    store.accounts.set_password("admin", "first password!")  # the organizer exists (test_cli runs the CLI's "created")
    store.close()
    env = {**os.environ, "PYTHONPATH": str(SRC)}

    def set_password(pw: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "gpuseat", "admin", "set-password", "--db", db, "--password-stdin"],
            input=pw + "\n",
            capture_output=True,
            text=True,
            env=env,
        )

    server = start(["--db", db], tmp_path / "serve.log")
    try:
        with httpx.Client(base_url=server.url) as client:
            assert login(client, server.url, "first password!").status_code == 303
            copied = client.cookies["gpuseat_session"]
            assert client.get("/overview").status_code == 200
            done = set_password("second password")
            assert done.returncode == 0 and "ended 1 session" in done.stdout
            assert client.get("/overview").status_code == 303
            assert httpx.get(server.url + "/overview", cookies={"gpuseat_session": copied}).status_code == 303
            assert login(client, server.url, "second password").status_code == 303
    finally:
        assert server.stop() == 0
