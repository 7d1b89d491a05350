"""A sweep of every portal route with bad and hostile requests, through the real ASGI app on a real SQLite store.

Each row is one request: missing, extra, duplicated or wrongly typed fields, bodies that are not a form
(JSON, non-UTF-8 bytes, broken multipart), a wrong or missing CSRF token, another participant's seat or
token, a participant's token on the organizer's routes, methods a route does not take, odd paths, and the
participant's own controls sent twice, for a released participant, after a move and for a seat not theirs.
Every answer must be a 4xx (or the one expected success) with a clear message in the route's own format,
never a 500 or a traceback, never another participant's data, and the store must be exactly as before
unless the request was valid. The server never raises into the test (``raise_server_exceptions=False``):
a 500 is an answer the row sees and fails on.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuseat.catalog.bundle import Catalog, load_catalog
from gpuseat.store import open_store
from gpuseat.web.app import Portal, create_app
from gpuseat.web.security import SESSION_COOKIE

from .routes.served import COURSE, PASSWORD

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ann@new"
FORM = "application/x-www-form-urlencoded"


@dataclass
class Sweep:
    """The served course: ann on mig-01, ben on mig-02, cid without a seat, mig-03 free; an organizer client
    logged in, one anonymous client per participant (each with their page's form token)."""

    store: Any
    portal: Portal
    org: TestClient
    anon: TestClient
    links: dict[str, str]
    csrf: dict[str, str]  # "org" → the session's form token; a participant's key → their link's

    def client(self, who: str) -> TestClient:
        return self.org if who == "org" else self.anon

    def fill(self, text: str) -> str:
        """``{ann}`` … ``{zed}`` → their link tokens; ``{csrf:org}``, ``{csrf:ann}`` … → form tokens."""
        for k, v in self.links.items():
            text = text.replace("{" + k + "}", v)
        for k, v in self.csrf.items():
            text = text.replace("{csrf:" + k + "}", v)
        return text


@pytest.fixture(scope="module")
def course_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The course's database, made once (each test works on its own copy): ann on mig-01, ben on mig-02,
    cid without a seat, mig-03 free, everyone's link, the organizer's password; and course oth, whose zed
    has a link of his own."""
    folder = tmp_path_factory.mktemp("sweep")
    store = open_store(f"sqlite:///{folder / 'course.db'}", create=True)
    (folder / "lab.toml").write_text(COURSE.replace("participants = 2", "participants = 3"))
    store.courses.create_course(folder / "lab.toml", key="lab")
    (folder / "r.csv").write_text(
        "name,email,unix_user\nAnn,ann@example.org,ann\nBen,ben@example.org,ben\nCid,cid@example.org,cid\n"
    )
    store.roster.import_roster("lab", folder / "r.csv")
    seats = [
        {"key": f"mig-0{i}", "kind": "mig", "host": "gpu1", "engine": "host", "device_uuid": f"MIG-{i}"}
        for i in (1, 2, 3)
    ]
    store.seats.add_seats("lab", seats)
    store.seats.assign("lab", "ann", "mig-01")
    store.seats.assign("lab", "ben", "mig-02")
    links = {t.participant: t.token for t in store.tokens.issue_tokens("lab")}
    # another course in the same store (its own portal serves it): zed on oth-01, with a link
    (folder / "oth.toml").write_text(COURSE.replace('name = "Lab"', 'name = "Other"'))
    store.courses.create_course(folder / "oth.toml", key="oth")
    (folder / "o.csv").write_text("name,email,unix_user\nZed,zed@example.org,zed\n")
    store.roster.import_roster("oth", folder / "o.csv")
    store.seats.add_seats("oth", [{"key": "oth-01", "kind": "mig", "host": "gpu9", "engine": "host"}])
    store.seats.assign("oth", "zed", "oth-01")
    links |= {t.participant: t.token for t in store.tokens.issue_tokens("oth")}
    store.accounts.set_password("admin", PASSWORD)
    store.close()
    return folder / "course.db", links


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    """The bundled catalog, validated once for the module (each test has its own empty cache folder, so
    load_catalog would validate it again per row); a frozen value, shared safely."""
    return load_catalog()


@pytest.fixture
def sweep(course_db: tuple[Path, dict[str, str]], catalog: Catalog, tmp_path: Path) -> Iterator[Sweep]:
    """The served course on this test's own copy of the database, the organizer logged in."""
    made, links = course_db
    shutil.copyfile(made, tmp_path / "course.db")
    store = open_store(f"sqlite:///{tmp_path / 'course.db'}")
    portal = Portal(store, catalog, "lab", link_days_after_end=None)
    app = create_app(portal)
    org = TestClient(app, base_url="http://testserver", raise_server_exceptions=False)
    anon = TestClient(app, base_url="http://testserver", raise_server_exceptions=False)
    # a session as the login form opens one, and the form tokens the pages carry (signed by the app's own
    # key; the login form and the pages' tokens have their own tests): no password hash per row
    sessions = app.state.sessions
    secret = sessions.issue("admin")
    org.cookies.set(SESSION_COOKIE, secret)
    csrf = {"org": sessions.csrf_token("s:" + secret)}
    csrf |= {who: sessions.csrf_token("t:" + tok) for who, tok in links.items()}
    assert _token(org.get("/overview").text) == csrf["org"]
    yield Sweep(store, portal, org, anon, links, csrf)
    org.close()
    anon.close()
    store.close()


def _token(html: str) -> str:
    found = CSRF.search(html)
    assert found, html[:300]
    return found.group(1)


def stored(store: Any) -> dict[str, Any]:
    """Everything a bad request must leave as it was (the events log may gain a refusal: it is the audit)."""
    return {
        "seats": [(s.key, s.participant, s.state) for s in store.seats.seats("lab")],
        "people": [(p.key, p.name, p.email, p.seat, p.ssh_key) for p in store.roster.participants("lab")],
        "requests": [(r.participant, r.seat, r.action, r.state) for r in store.requests.seat_requests("lab")],
        "access": store.delivery.access_of("lab"),
        "links": [(t["participant"], t["active"], t["created_at"]) for t in store.tokens.token_status("lab")],
        "course": store.courses.course_text("lab"),
        "survey": store.courses.get_course("lab").survey_state,
        "template": store.survey.template("lab"),
    }


@dataclass(frozen=True)
class Case:
    """One hostile request and what it must get."""

    who: str  # "org" (logged in), "anon" (no session; participant rows name their link in the path)
    method: str
    path: str
    form: dict[str, Any] | None = None  # a urlencoded form (values: str or list of str); ``{…}`` filled in
    body: bytes | None = None  # a raw body instead (with ``ctype``)
    ctype: str = FORM
    json: Any = None
    files: dict[str, tuple[str, bytes]] | None = None
    status: int | tuple[int, ...] = 400
    says: str = ""  # a part of the answer's text
    kind: str = "html"  # the answer's format: html, json or text
    changes: bool = False  # True: a valid request (stored data may change)


def case(id_: str, *args: Any, **kw: Any) -> Any:
    return pytest.param(Case(*args, **kw), id=id_)


ORG = "{csrf:org}"
ANN = "{csrf:ann}"

ROWS = [
    # -- the organizer's forms: fields missing, wrong, duplicated, out of range, hostile -------------------
    case("seats-action-missing", "org", "POST", "/seats/action", {"csrf": ORG}, says="unknown action"),
    case("seats-action-lookalike", "org", "POST", "/seats/action", {"csrf": ORG, "action": "ａssign"}),
    case("seats-assign-unknown-who", "org", "POST", "/seats/action",
         {"csrf": ORG, "action": "assign", "participant": "nobody", "seat": "mig-03"}),
    case("seats-assign-nul-seat", "org", "POST", "/seats/action",
         {"csrf": ORG, "action": "assign", "participant": "cid", "seat": "mig-03\x00"}),
    case("seats-assign-taken-seat", "org", "POST", "/seats/action",
         {"csrf": ORG, "action": "assign", "participant": "cid", "seat": "mig-02"}),
    case("seats-assign-huge-name", "org", "POST", "/seats/action",
         {"csrf": ORG, "action": "assign", "participant": "x" * 20_000, "seat": "mig-03"}),
    case("seats-move-unknown-seat", "org", "POST", "/seats/action",
         {"csrf": ORG, "action": "move", "participant": "ann", "seat": "../mig-02"}),
    case("seats-release-someone-elses-seat", "org", "POST", "/seats/action",
         {"csrf": ORG, "action": "release", "participant": "ann", "seat": "mig-02"}, status=409, says="held by ben"),
    case("seats-release-unknown", "org", "POST", "/seats/action", {"csrf": ORG, "action": "release", "seat": "nope"}),
    case("seats-action-file-field", "org", "POST", "/seats/action", {"csrf": ORG},
         files={"action": ("a.txt", b"assign-all")}, says="unknown action"),
    case("seats-action-json", "org", "POST", "/seats/action", json={"csrf": "x", "action": "assign-all"},
         status=403, kind="text", says="CSRF"),
    case("seats-action-non-utf8", "org", "POST", "/seats/action",
         body=b"csrf=" + b"{csrf:org}" + b"&action=assign\xff-all"),
    case("seats-action-no-csrf", "org", "POST", "/seats/action", {"action": "assign-all"}, status=403, kind="text"),
    case("seats-action-wrong-csrf", "org", "POST", "/seats/action", {"csrf": "0" * 64, "action": "assign-all"},
         status=403, kind="text"),
    case("seats-action-participant-csrf", "org", "POST", "/seats/action", {"csrf": ANN, "action": "assign-all"},
         status=403, kind="text"),
    case("seats-action-two-csrf", "org", "POST", "/seats/action", {"csrf": ["0" * 64, ORG], "action": "release"},
         status=(400, 403)),
    case("seats-action-non-ascii-csrf", "org", "POST", "/seats/action", {"csrf": "é" * 64, "action": "assign-all"},
         status=403, kind="text", says="CSRF"),
    case("seats-action-too-many-fields", "org", "POST", "/seats/action",
         body=("&".join(f"f{i}=1" for i in range(300))).encode(), says="Too many fields"),
    case("seats-action-broken-multipart", "org", "POST", "/seats/action", body=b"--zz\r\nbroken",
         ctype="multipart/form-data; boundary=zz", status=403, kind="text"),
    case("seats-action-no-boundary", "org", "POST", "/seats/action", body=b"x", ctype="multipart/form-data",
         says="boundary"),
    case("seats-action-huge-body", "org", "POST", "/seats/action", {"csrf": ORG, "note": "x" * 70_000},
         status=413, kind="text", says="larger than"),
    case("connect-bad-ipv6-url", "org", "POST", "/seats/connect", {"csrf": ORG, "seat": "mig-03", "url": "http://[::1"},
         says="--url"),
    case("connect-url-bad-port", "org", "POST", "/seats/connect",
         {"csrf": ORG, "seat": "mig-03", "url": "http://hub.example.org:99999/"}, says="--url"),
    case("connect-url-word-port", "org", "POST", "/seats/connect",
         {"csrf": ORG, "seat": "mig-03", "url": "http://hub.example.org:abc/"}, says="--url"),
    case("connect-ssh-and-url", "org", "POST", "/seats/connect",
         {"csrf": ORG, "seat": "mig-03", "ssh": "ann@gpu1.example.org", "url": "javascript:alert(1)"},
         says="one of them"),
    case("connect-ssh-injection", "org", "POST", "/seats/connect",
         {"csrf": ORG, "seat": "mig-03", "ssh": "ann@gpu1;rm -rf /"}),
    case("connect-ssh-option", "org", "POST", "/seats/connect",
         {"csrf": ORG, "seat": "mig-03", "ssh": "-oProxyCommand=sh@gpu1"}),
    case("connect-javascript-url", "org", "POST", "/seats/connect",
         {"csrf": ORG, "seat": "mig-03", "url": "javascript:alert(1)"}),
    case("connect-note-newline", "org", "POST", "/seats/connect", {"csrf": ORG, "seat": "mig-03", "note": "a\nb"}),
    case("connect-note-bidi", "org", "POST", "/seats/connect", {"csrf": ORG, "seat": "mig-03", "note": "a\u202eb"},
         says="control characters"),
    case("connect-note-c1-csi", "org", "POST", "/seats/connect",
         {"csrf": ORG, "seat": "mig-03", "note": "ok\x9b2J"}, says="control characters"),
    case("connect-unknown-seat", "org", "POST", "/seats/connect", {"csrf": ORG, "seat": "nope", "ssh": "a@b.example"}),
    case("connect-nothing", "org", "POST", "/seats/connect", {"csrf": ORG, "seat": "mig-03"}, says="nothing to set"),
    case("links-unknown-action", "org", "POST", "/links", {"csrf": ORG, "action": "delete"}, says="unknown action"),
    case("links-unknown-participant", "org", "POST", "/links", {"csrf": ORG, "action": "rotate", "participant": "x"},
         status=404),
    case("links-nul-participant", "org", "POST", "/links", {"csrf": ORG, "action": "revoke", "participant": "a\x00"},
         status=404),
    case("survey-unknown-action", "org", "POST", "/survey", {"csrf": ORG, "action": "delete"}),
    case("survey-no-action", "org", "POST", "/survey", {"csrf": ORG}),
    case("survey-template-empty-title", "org", "POST", "/survey/template", {"csrf": ORG, "title": " "}),
    case("survey-template-huge-title", "org", "POST", "/survey/template", {"csrf": ORG, "title": "x" * 60_000}),
    case("survey-template-escape-title", "org", "POST", "/survey/template", {"csrf": ORG, "title": "\x1b]0;owned\x07"},
         says="control character"),
    case("survey-template-bell-question", "org", "POST", "/survey/template",
         {"csrf": ORG, "recommend.text": "How likely\x07?"}, says="control character"),
    case("survey-template-bidi-intro", "org", "POST", "/survey/template", {"csrf": ORG, "intro": "a\u202eb"},
         says="control character"),
    case("survey-template-title-two-lines", "org", "POST", "/survey/template", {"csrf": ORG, "title": "a\r\nb"},
         says="one line"),
    *(
        case(f"settings-{name}", "org", "POST", "/course/settings", {"csrf": ORG, "policy.quota_hours": value},
             says="nothing was saved")
        for name, value in [("abc", "abc"), ("1e309", "1e309"), ("negative", "-1"), ("10e30", str(10**30)),
                            ("nan", "nan"), ("inf", "inf")]
    ),
    case("settings-minutes-fraction", "org", "POST", "/course/settings", {"csrf": ORG, "policy.idle_minutes": "1.5"},
         says="whole number"),
    # digits Python's int() and float() read but the form's own do not: ١٢ and １２ were stored as 12; each field
    # names what to type instead, as does a number in a spelling the form does not show (exponent, underscore)
    *(
        case(f"settings-{name}", "org", "POST", "/course/settings", {"csrf": ORG, f"policy.{field}": value},
             says=says)
        for name, field, value, says in [
            ("arabic-indic-hours", "quota_hours", "١٢", "quota_hours: not a number in plain digits 0-9 (got ١٢): type 12"),
            ("fullwidth-hours", "quota_hours", "１２.５", "(got １２.５): type 12.5"),
            ("arabic-indic-percent", "idle_gpu_percent", "٥", "idle_gpu_percent: not a number in plain digits 0-9 (got ٥): type 5"),
            ("arabic-indic-minutes", "idle_minutes", "٣٠", "idle_minutes: not a whole number of minutes in plain digits 0-9 (got ٣٠): type 30"),
            ("fullwidth-grace", "grace_minutes", "５", "grace_minutes: not a whole number of minutes in plain digits 0-9 (got ５): type 5"),
            ("devanagari-lead", "lead_minutes", "१५", "lead_minutes: not a whole number of minutes in plain digits 0-9 (got १५): type 15"),
            ("bengali-never-connected", "never_connected_hours", "৪৮", "never_connected_hours: not a number in plain digits 0-9 (got ৪৮): type 48"),
            ("exponent", "quota_hours", "1e3", "quota_hours: not a number in plain digits 0-9 (got 1e3): type 1000"),
            ("minutes-exponent", "idle_minutes", "1E1", "(got 1E1): type 10"),
            ("underscore", "idle_minutes", "1_0", "(got 1_0): type 10"),
            ("hex", "quota_hours", "0x10", "quota_hours: not a number (got 0x10): type one such as 40 or 2.5"),
            ("inner-space", "quota_hours", "1 2", "quota_hours: not a number (got 1 2): type one such as 40 or 2.5"),
            ("minus-sign", "quota_hours", "\u22125", "quota_hours: not a number (got −5): type one such as 40 or 2.5"),
            ("long-digits", "lead_minutes", "0" * 59 + "5", "lead_minutes: 60 characters, not a whole number of minutes: type one such as 30"),
            ("long-junk-hours", "quota_hours", "1" * 60 + "x", f"quota_hours: not a number (got {'1' * 40}…): type one such as 40"),
        ]
    ),
    # a field the form has no input for, one sent twice, a file: each was dropped without a word (200)
    case("settings-unknown-field", "org", "POST", "/course/settings", {"csrf": ORG, "<b>policy</b>.quota_hours": "5"},
         says="&#39;&lt;b&gt;policy&lt;/b&gt;.quota_hours&#39;: no such field"),
    case("settings-unknown-group", "org", "POST", "/course/settings", {"csrf": ORG, "groups.night.quota_hours": "5"},
         says="no group &#39;night&#39; in this course"),
    case("settings-field-twice", "org", "POST", "/course/settings", {"csrf": ORG, "policy.quota_hours": ["1", "2"]},
         says="policy.quota_hours: given more than once"),
    case("settings-file-field", "org", "POST", "/course/settings", {"csrf": ORG},
         files={"policy.quota_hours": ("q.txt", b"5")}, says="a file, not a number"),
    case("roster-no-file", "org", "POST", "/roster/import", {"csrf": ORG}, says="choose a CSV file"),
    case("roster-not-utf8", "org", "POST", "/roster/import", {"csrf": ORG},
         files={"file": ("r.csv", b"name,email\n\xff\xfe,x@example.org\n")}, says="not UTF-8"),
    case("roster-nul", "org", "POST", "/roster/import", {"csrf": ORG},
         files={"file": ("r.csv", b"name,email\nZ\x00ed,z@example.org\n")}),
    case("roster-empty", "org", "POST", "/roster/import", {"csrf": ORG}, files={"file": ("r.csv", b"")}),
    case("roster-path-name", "org", "POST", "/roster/import", {"csrf": ORG},
         files={"file": ("../../etc/passwd", b"nope\n")}),
    case("roster-as-json", "org", "POST", "/roster/import", json={"file": "name,email\n"}, status=403, kind="text"),
    # -- methods and paths ---------------------------------------------------------------------------------
    case("put-seats-action", "org", "PUT", "/seats/action", status=405, says="Method Not Allowed"),
    case("delete-links", "org", "DELETE", "/links", status=405, says="Method Not Allowed"),
    case("patch-participant", "anon", "PATCH", "/t/{ann}", status=405, says="Method Not Allowed"),
    case("get-participant-seat", "anon", "GET", "/t/{ann}/seat", status=405, says="Method Not Allowed"),
    case("get-claim", "anon", "GET", "/t/{ann}/claim", status=405, says="Method Not Allowed"),
    case("post-live", "anon", "POST", "/t/{ann}/live", {"csrf": ANN}, status=405, kind="json",
         says="Method Not Allowed"),
    case("unknown-path", "org", "GET", "/nope", status=404, says="Not Found"),
    case("dotdot-encoded", "anon", "GET", "/t/%2e%2e/overview", status=404, says="Not Found"),
    case("static-dotdot", "anon", "GET", "/static/..%2fapp.py", status=404, says="Not Found"),
    case("token-nul", "anon", "GET", "/t/{ann}%00", status=404, says="not valid"),
    case("token-long", "anon", "GET", "/t/" + "a" * 8000, status=404, says="not valid"),
    case("token-lookalike", "anon", "GET", "/t/ａｎｎ", status=404, says="not valid"),
    case("token-bad-utf8", "anon", "GET", "/t/%ff%fe", status=404, says="not valid"),
    case("token-live-unknown", "anon", "GET", "/t/" + "z" * 43 + "/live", status=404, kind="json", says="not valid"),
    case("token-seat-json-unknown", "anon", "GET", "/t/" + "z" * 43 + "/seat.json", status=404, kind="json",
         says="not valid"),
    case("trailing-slash", "org", "GET", "/overview/", status=404, says="Not Found"),
    case("csv-nul", "org", "GET", "/seats.csv%00", status=404, says="Not Found"),
    # -- a participant's token where it opens nothing ------------------------------------------------------
    case("token-as-session", "anon", "GET", "/seats/live.json", status=401, kind="json", says="log in again"),
    case("participant-on-org-form", "anon", "POST", "/seats/action", {"csrf": ANN, "action": "assign-all"},
         status=401, kind="text"),
    case("participant-on-settings", "anon", "POST", "/course/settings", {"csrf": ANN, "policy.quota_hours": "1"},
         status=401, kind="text"),
    case("org-csrf-on-link", "org", "POST", "/t/{ann}/seat", {"csrf": ORG, "action": "stop"}, status=403,
         kind="text"),
    # -- the participant's own controls ----------------------------------------------------------------------
    case("seat-no-action", "anon", "POST", "/t/{ann}/seat", {"csrf": ANN}, says="unknown seat action"),
    case("seat-extend", "anon", "POST", "/t/{ann}/seat", {"csrf": ANN, "action": "extend"}, says="one of"),
    case("seat-other-seat", "anon", "POST", "/t/{ann}/seat", {"csrf": ANN, "action": "stop", "seat": "mig-02"},
         status=403, kind="text", says="own seat only"),
    case("seat-other-seat-case", "anon", "POST", "/t/{ann}/seat", {"csrf": ANN, "action": "stop", "seat": "MIG-01"},
         status=403, kind="text", says="own seat only"),
    case("seat-other-person", "anon", "POST", "/t/{ann}/seat", {"csrf": ANN, "action": "stop", "participant": "ben"},
         status=403, kind="text", says="own seat only"),
    case("seat-two-seats", "anon", "POST", "/t/{ann}/seat",
         {"csrf": ANN, "action": "stop", "seat": ["mig-01", "mig-02"]}, status=403, kind="text"),
    # of a field sent twice the last counted: another's seat or name before one's own passed, and so did a
    # reset whose typed word came second; a file was read as its Python repr ("key options … not allowed")
    case("seat-other-seat-then-own", "anon", "POST", "/t/{ann}/seat",
         {"csrf": ANN, "action": "stop", "seat": ["mig-02", "mig-01"]}, status=403, kind="text", says="own seat only"),
    case("seat-other-person-then-self", "anon", "POST", "/t/{ann}/seat",
         {"csrf": ANN, "action": "stop", "participant": ["ben", "ann"]}, status=403, kind="text", says="own seat only"),
    case("seat-reset-confirm-twice", "anon", "POST", "/t/{ann}/seat",
         {"csrf": ANN, "action": "reset", "confirm": ["no", "reset"]}, says="confirm: sent 2 times"),
    case("seat-action-twice", "anon", "POST", "/t/{ann}/seat", {"csrf": ANN, "action": ["reset", "stop"]},
         says="action: sent 2 times"),
    case("seat-key-as-file", "anon", "POST", "/t/{ann}/seat", {"csrf": ANN, "action": "key"},
         files={"key": ("id_ed25519.pub", KEY.encode())}, says="key: sent as a file"),
    case("seat-bens-link-anns-csrf", "anon", "POST", "/t/{ben}/seat", {"csrf": ANN, "action": "stop"}, status=403,
         kind="text"),
    case("seat-non-ascii-csrf", "anon", "POST", "/t/{ann}/seat", {"csrf": "é" * 64, "action": "stop"}, status=403,
         kind="text", says="CSRF"),
    case("login-non-ascii-csrf", "anon", "POST", "/login", {"csrf": "ü" * 64, "username": "admin", "password": "x"},
         status=403, kind="text", says="CSRF"),
    case("seat-reset-lookalike", "anon", "POST", "/t/{ann}/seat", {"csrf": ANN, "action": "reset", "confirm": "ｒeset"},
         says="type reset"),
    case("seat-key-two-lines", "anon", "POST", "/t/{ann}/seat",
         {"csrf": ANN, "action": "key", "key": KEY + "\n" + KEY}),
    case("seat-key-escape-in-comment", "anon", "POST", "/t/{ann}/seat",
         {"csrf": ANN, "action": "key", "key": KEY.replace("ann@new", "ann\x1b]0;owned\x07@new")},
         says="control characters"),
    case("seat-key-nul", "anon", "POST", "/t/{ann}/seat", {"csrf": ANN, "action": "key", "key": "\x00"}),
    case("seat-json", "anon", "POST", "/t/{ann}/seat", json={"csrf": "x", "action": "stop"}, status=403, kind="text"),
    case("seat-non-utf8", "anon", "POST", "/t/{ann}/seat", body=b"csrf={csrf:ann}&action=st%ffop",
         says="unknown seat action"),
    case("seat-two-files", "anon", "POST", "/t/{ann}/seat", {"csrf": ANN},
         files={"a": ("a", b"1"), "b": ("b", b"2")}, says="Too many files"),
    case("seat-seatless", "anon", "POST", "/t/{cid}/seat", {"csrf": "{csrf:cid}", "action": "start"},
         says="holds no seat"),
    case("seat-seatless-names-free-seat", "anon", "POST", "/t/{cid}/seat",
         {"csrf": "{csrf:cid}", "action": "start", "seat": "mig-03"}, status=403, kind="text"),
    case("claim-no-csrf", "anon", "POST", "/t/{cid}/claim", {}, status=403, kind="text"),
    case("claim-anns-csrf", "anon", "POST", "/t/{cid}/claim", {"csrf": ANN}, status=403, kind="text"),
    case("survey-closed", "anon", "POST", "/t/{ann}/survey", {"csrf": ANN, "q_recommend": "7"}, status=422),
    case("survey-other-link", "anon", "POST", "/t/{ben}/survey", {"csrf": ANN, "q_recommend": "7"}, status=403,
         kind="text"),
]  # fmt: skip


def send(sw: Sweep, c: Case) -> Any:
    """The row's request, with its placeholders filled in."""
    client = sw.client(c.who)
    path = sw.fill(c.path)
    if c.json is not None:
        return client.request(c.method, path, json=c.json, follow_redirects=False)
    if c.body is not None:
        content = sw.fill(c.body.decode("latin-1")).encode("latin-1")
        return client.request(c.method, path, content=content, headers={"content-type": c.ctype},
                              follow_redirects=False)  # fmt: skip
    form = {k: [sw.fill(x) for x in v] if isinstance(v, list) else sw.fill(v) for k, v in (c.form or {}).items()}
    if c.files is not None:
        return client.request(c.method, path, data=form, files=c.files, follow_redirects=False)
    if form or c.method == "POST":
        return client.request(c.method, path, data=form, follow_redirects=False)
    return client.request(c.method, path, follow_redirects=False)


def judge(r: Any, c: Case, sw: Sweep) -> None:
    """A 4xx (or the row's status) in the route's format, with its message, and nobody else's data."""
    wanted = c.status if isinstance(c.status, tuple) else (c.status,)
    assert r.status_code in wanted, (r.status_code, r.text[:400])
    assert "Traceback" not in r.text and 'File "/' not in r.text
    ctype = r.headers.get("content-type", "")
    assert ctype.startswith({"html": "text/html", "json": "application/json", "text": "text/plain"}[c.kind]), ctype
    if c.kind == "html":
        assert "<html" in r.text
    if c.says:
        assert c.says in r.text, r.text[:600]
    if c.who == "anon":  # a participant's answer never shows another's seat, name or link
        for other in ("Ben", sw.links["ben"], "mig-02"):
            if "{ben}" not in c.path:
                assert other not in r.text, other


@pytest.mark.parametrize("c", ROWS)
def test_a_bad_request_gets_one_clear_4xx_and_changes_nothing(sweep: Sweep, c: Case) -> None:
    before = stored(sweep.store)
    r = send(sweep, c)
    judge(r, c, sweep)
    assert stored(sweep.store) == before


def _seat(sw: Sweep, who: str, **form: str) -> Any:
    data = {"csrf": sw.csrf[who], **form}
    return sw.anon.post(f"/t/{sw.links[who]}/seat", data=data, follow_redirects=False)


def _pending(sw: Sweep) -> list[tuple[str, str | None, str]]:
    return [(r.participant, r.seat, r.action) for r in sw.store.requests.seat_requests("lab", pending=True)]


def test_a_control_sent_twice_is_one_request(sweep: Sweep) -> None:
    assert _seat(sweep, "ann", action="restart").status_code == 303
    again = _seat(sweep, "ann", action="restart")
    assert again.status_code == 400 and "already pending" in again.text
    assert _pending(sweep) == [("ann", "mig-01", "restart")]


def test_a_released_participant_acts_on_nothing(sweep: Sweep) -> None:
    sweep.store.seats.release("lab", participant="ben")
    for form in ({"action": "stop"}, {"action": "reset", "confirm": "reset"}):
        r = _seat(sweep, "ben", **form)
        assert r.status_code == 400 and "holds no seat" in r.text, r.text[:300]
    named = _seat(sweep, "ben", action="stop", seat="mig-02")  # the seat ben held before (a page of before)
    assert named.status_code == 409 and "you hold no seat now: reload the page" in named.text, named.text
    live = sweep.anon.get(f"/t/{sweep.links['ben']}/live").json()
    assert live["seat"] is None and live["participant"] == "ben"
    assert _pending(sweep) == []


def test_after_a_move_the_controls_act_on_the_new_seat(sweep: Sweep) -> None:
    """A stop still pending on the seat ann left must not refuse her stop of the seat she holds now
    (the old one's agent refuses the stale one; a removed seat has no agent to do even that)."""
    assert _seat(sweep, "ann", action="stop").status_code == 303
    form = {"csrf": sweep.csrf["org"], "action": "move", "participant": "ann", "seat": "mig-03"}
    assert sweep.org.post("/seats/action", data=form).status_code == 200
    assert sweep.store.lifecycle.remove_seats("lab", ["mig-01"]) == ["mig-01"]
    old = _seat(sweep, "ann", action="stop", seat="mig-01")  # the seat she left (removed since): her page is stale
    assert old.status_code == 409 and "reload the page" in old.text
    new = _seat(sweep, "ann", action="stop")
    assert new.status_code == 303, new.text[:300]
    assert ("ann", "mig-03", "stop") in _pending(sweep)
    again = _seat(sweep, "ann", action="stop")  # still one request per seat and action
    assert again.status_code == 400 and "already pending" in again.text


def test_a_claim_sent_twice_is_one_seat(sweep: Sweep) -> None:
    for _ in range(2):
        r = sweep.anon.post(f"/t/{sweep.links['cid']}/claim", data={"csrf": sweep.csrf["cid"]}, follow_redirects=False)
        assert r.status_code == 303
    assert sweep.store.seats.seat_of("lab", "cid").key == "mig-03"
    assert [s.participant for s in sweep.store.seats.seats("lab")] == ["ann", "ben", "cid"]


@pytest.mark.parametrize("value", ["²", "①", "--3", "-²", "3.0", "1e309", str(10**30), "٣٣٣٣", "٣", "３"])
def test_a_survey_answer_that_is_no_whole_number_is_one_message(sweep: Sweep, value: str) -> None:
    """A scale answer is a whole number: digits Python's ``isdigit`` takes but ``int`` does not (superscripts,
    circled digits, a doubled minus) were a 500; digits of other scripts that ``int`` reads (``٣``, ``３``)
    were stored as 3."""
    opened = sweep.org.post("/survey", data={"csrf": sweep.csrf["org"], "action": "open"}, follow_redirects=False)
    assert opened.status_code == 303
    form = {"csrf": sweep.csrf["ann"], "q_expectations": value}
    r = sweep.anon.post(f"/t/{sweep.links['ann']}/survey", data=form, follow_redirects=False)
    assert r.status_code == 422 and "is not a whole number" in r.text, (r.status_code, r.text[:300])
    assert sweep.store.survey.count("lab") == 0


def test_the_survey_editor_keeps_a_textareas_line_breaks(sweep: Sweep) -> None:
    """A browser sends a textarea's line breaks as CR LF: they are line breaks, not control characters."""
    form = {"csrf": sweep.csrf["org"], "recommend.text": "Would you recommend it?\r\nSay why below.", "intro": "Hi\r\n"}
    assert sweep.org.post("/survey/template", data=form, follow_redirects=False).status_code == 303
    template = sweep.portal.surveys.template("lab")
    assert template.intro == "Hi"
    assert next(q.text for q in template.question if q.id == "recommend") == "Would you recommend it?\nSay why below."


@pytest.mark.parametrize("other", ["\x1b[2J\x1b[Hall fine", "x\x07", "left\u202eright", "a\x9bb"])
def test_a_free_text_answer_with_control_characters_is_one_message(sweep: Sweep, other: str) -> None:
    """The organizer reads free-text answers in a terminal (``gpuseat report``): no escape sequence gets stored."""
    opened = sweep.org.post("/survey", data={"csrf": sweep.csrf["org"], "action": "open"}, follow_redirects=False)
    assert opened.status_code == 303
    form = {"csrf": sweep.csrf["ann"], "q_expectations": "8", "q_format": "7", "q_recommend": "9"}
    form |= {"q_result": "other", "q_result_other": other}
    r = sweep.anon.post(f"/t/{sweep.links['ann']}/survey", data=form, follow_redirects=False)
    assert r.status_code == 422 and "control character" in r.text and "q_result_other" in r.text, r.text[:300]
    assert sweep.store.survey.count("lab") == 0
    form["q_result_other"] = "all fine"
    assert sweep.anon.post(f"/t/{sweep.links['ann']}/survey", data=form, follow_redirects=False).status_code == 200
    assert sweep.store.survey.count("lab") == 1


def test_a_release_from_a_page_out_of_date_releases_nobody_else(sweep: Sweep) -> None:
    """The Seats page said "release seat mig-02 of ben"; meanwhile ben moved and cid took mig-02: the click
    that was meant for ben must not take cid's seat."""
    html = sweep.org.get("/seats").text
    form = re.search(
        r'<form[^>]*seats/action[^>]*>((?:(?!</form>).)*value="mig-02"(?:(?!</form>).)*)</form>', html, re.S
    )
    assert form, html
    fields = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', form.group(1)))
    assert fields["action"] == "release" and fields["seat"] == "mig-02"
    sweep.store.seats.move("lab", "ben", "mig-03")
    sweep.store.seats.assign("lab", "cid", "mig-02")
    r = sweep.org.post("/seats/action", data=fields)
    assert r.status_code == 409 and "held by cid" in r.text, r.text[:300]
    assert [(s.key, s.participant) for s in sweep.store.seats.seats("lab")] == [
        ("mig-01", "ann"),
        ("mig-02", "cid"),
        ("mig-03", "ben"),
    ]
    # the page as it is now releases the seat it shows
    fresh = sweep.org.get("/seats").text
    form = re.search(
        r'<form[^>]*seats/action[^>]*>((?:(?!</form>).)*value="mig-02"(?:(?!</form>).)*)</form>', fresh, re.S
    )
    assert form
    done = sweep.org.post("/seats/action", data=dict(re.findall(r'name="([^"]+)" value="([^"]*)"', form.group(1))))
    assert done.status_code == 200 and "released seat mig-02 of cid" in done.text
    assert sweep.store.seats.seat_of("lab", "cid") is None and sweep.store.seats.seat_of("lab", "ben").key == "mig-03"


def test_an_uploaded_file_name_is_stored_without_control_characters(sweep: Sweep) -> None:
    """The roster's file name is the import's label in the events log and on the page: no escape sequence."""
    from gpuseat.safe_text import has_control

    csv = b"name,email,unix_user\nAnn,ann@example.org,ann\nBen,ben@example.org,ben\nCid,cid@example.org,cid\n"
    files = {"file": ("../x\x1b[2J\u202eclass.csv", csv)}
    r = sweep.org.post("/roster/import", data={"csrf": sweep.csrf["org"]}, files=files)
    assert r.status_code == 200 and "3 unchanged" in r.text, r.text[:300]
    logged = [e.detail["file"] for e in sweep.store.events.events("lab") if e.action == "roster.import"][-1]
    assert not has_control(logged) and "/" not in logged and "class.csv" in logged, logged


def test_a_link_of_another_course_opens_its_own_participants_page_only(sweep: Sweep) -> None:
    """One server serves the links of every course in its store (a registration rush of several courses,
    benchmarks/bench_rush.py): zed's link, of course oth, opens zed's own page, live reading and seat
    controls, with his course and seat, and nothing of the course lab's organizer pages serve."""
    zed = sweep.links["zed"]
    page = sweep.anon.get(f"/t/{zed}")
    assert page.status_code == 200 and "oth-01" in page.text and "Zed" in page.text, page.text[:300]
    for other in ("Ann", "Ben", "Cid", "mig-0", "ann@example.org"):
        assert other not in page.text, other
    live = sweep.anon.get(f"/t/{zed}/seat.json")
    assert live.status_code == 200 and "mig-0" not in live.text, live.text[:300]
    r = sweep.anon.post(f"/t/{zed}/seat", data={"csrf": sweep.csrf["zed"], "action": "restart"}, follow_redirects=False)
    assert r.status_code == 303, r.text[:300]
    assert [x.participant for x in sweep.store.requests.seat_requests("oth")] == ["zed"]
    assert sweep.store.requests.seat_requests("lab") == []
    # and lab's links cannot act on zed's seat: a form token is bound to its own link
    ann = sweep.links["ann"]
    r = sweep.anon.post(f"/t/{ann}/seat", data={"csrf": sweep.csrf["zed"], "action": "stop"}, follow_redirects=False)
    assert r.status_code == 403, r.text[:300]


@pytest.mark.parametrize("gone", ["archived", "deleted"])
def test_a_link_whose_course_went_while_it_was_cached_answers_as_the_link_now_does(
    sweep: Sweep, gone: str, tmp_path: Path
) -> None:
    """A link's lookup is cached for seconds: a seat control sent in them answered with the store's words for
    the organizer ("export it (gpuseat course export)", "create one: gpuseat course create"), a 400, and the
    page's JSON poll got an HTML page. Now the link answers as it does once the cache expires."""
    ann = sweep.links["ann"]
    assert sweep.anon.get(f"/t/{ann}").status_code == 200  # the link's lookup is cached
    key_before = sweep.store.roster.participants("lab")[0].ssh_key
    if gone == "archived":
        sweep.store.lifecycle.archive_course("lab")
    else:
        sweep.store.lifecycle.delete_course("lab", export_to=tmp_path / "lab.zip")
    status, says = (410, "archived: its links no longer open anything") if gone == "archived" else (404, "not valid")
    for form in ({"action": "stop"}, {"action": "reset", "confirm": "reset"}, {"action": "key", "key": KEY}):
        r = _seat(sweep, "ann", **form)
        assert r.status_code == status and says in r.text and "gpuseat course" not in r.text, (form, r.text[:400])
    if gone == "archived":
        assert sweep.store.requests.seat_requests("lab") == []
        assert sweep.store.roster.participants("lab")[0].ssh_key == key_before
        return
    for path in ("", "/ssh_config"):
        r = sweep.anon.get(f"/t/{ann}{path}")
        assert r.status_code == 404 and "not valid" in r.text and "gpuseat course" not in r.text, r.text[:300]
    for path in ("/live", "/seat.json"):  # the page's polls read JSON
        r = sweep.anon.get(f"/t/{ann}{path}")
        assert r.status_code == 404 and "not valid" in r.json()["error"], r.text[:300]


def test_the_settings_form_sends_back_what_it_shows(sweep: Sweep) -> None:
    """A stored 0.00001 was shown as 1e-05, which the form refuses: saving any other field then failed on that
    one ("not a number (got 1e-05)"); -0 was stored and shown as -0.0."""
    fields = re.compile(r'name="(policy\.[a-z_]+)" value="([^"]*)"')
    tiny = "0." + "0" * 299 + "1"  # 1e-300, as the form writes a course file's 1e-300 (every later save failed)
    for typed, stored, shown in (("0.00001", "1e-05", "0.00001"), ("-0", "0.0", "0.0"), (" +7.50 ", "7.5", "7.5"),
                                 (tiny, "1e-300", tiny)):  # fmt: skip
        r = sweep.org.post("/course/settings", data={"csrf": sweep.csrf["org"], "policy.quota_hours": typed})
        assert r.status_code == 200 and "saved 1 change" in r.text, r.text[:300]
        assert f"quota_hours = {stored}\n" in sweep.store.courses.course_text("lab")
        page = sweep.org.get("/course/settings").text
        form = dict(fields.findall(page))
        assert form["policy.quota_hours"] == shown, form
        again = sweep.org.post("/course/settings", data={"csrf": sweep.csrf["org"], **form})
        assert again.status_code == 200 and "nothing changed" in again.text, again.text[:300]


def test_a_settings_form_without_a_field_keeps_that_field(sweep: Sweep) -> None:
    """A field the form does not carry keeps its stored value: a script that sets one field (or a page older
    than the course file) wiped every other one (quota_hours 40 was dropped by a form naming idle_minutes)."""
    form = {"csrf": sweep.csrf["org"], "policy.idle_minutes": "30"}
    r = sweep.org.post("/course/settings", data=form, follow_redirects=False)
    assert r.status_code == 200 and "saved 1 change" in r.text, r.text[:300]
    policy = sweep.store.courses.course_file("lab").policy
    assert (policy.quota_hours, policy.idle_minutes) == (40, 30)
    # a blank field is still "not set", as the page sends it
    form = {"csrf": sweep.csrf["org"], "policy.quota_hours": ""}
    assert "saved 1 change" in sweep.org.post("/course/settings", data=form).text
    assert sweep.store.courses.course_file("lab").policy.quota_hours is None
