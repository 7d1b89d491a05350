"""The JupyterHub engine: a hub whose spawn hooks give each server its participant's seat; the engine
keeps the hub and the seats true to the store through the hub's REST API (httpx), and probes each
seat *as its participant*.

The hooks (:mod:`gpuseat.jupyterhub.hooks`) hand a server its seat when it starts and refuse, with a
503 that says why, anyone the store gives no seat. What they cannot do is take a seat back from a
server that is already running. :meth:`JupyterHubEngine.plan` does that:

* ``hub.server.stop`` (revoke): a running (or starting) server of a course user who holds no seat now
  (released, moved elsewhere, course archived or deleted, access window shut), or whose server holds a
  seat that is no longer theirs (a move), or whose running server no held seat names any more (its seat
  removed with ``seats remove --force``: it still has that seat's GPU), is stopped through
  ``DELETE /hub/api/users/{name}/server`` (``…/servers/{name}`` for a named one), and the step waits until
  the hub shows it gone;
* ``seat.free`` (record, after the stop): a seat still marked as held by a server of someone who no
  longer holds it (the hooks record a stop only for the seat's holder) becomes ``planned`` again, so
  the seat's next holder can start (until then the hooks refuse them: "in use by another server");
* ``hub.user.add`` (grant): each seat holder has a hub account (the probe's token needs one);
* ``seat.record`` / ``seat.clear`` (record): the holder's way in (``/user/NAME/``, made for them) is
  stored; a seat nobody holds names no one;
* the participants' seat requests (stop, start, restart, reset; a key is refused):
  :mod:`gpuseat.engines.jupyterhub.requests`.

A second plan right after an apply is empty. :meth:`JupyterHubEngine.probe` gets a short-lived token
*for the participant* (admin API), starts their server with it (so the spawn goes through the hooks
exactly as when they click "Start"), runs a GPU-listing probe in a kernel there, judges it with
:func:`~gpuseat.core.readiness.judge`, then stops the server again if it was not running before.

The engine's token is a secret and never stored: it is read from a root-only file (``token_file``)
or an environment variable (``token_env``, default ``JUPYTERHUB_API_TOKEN``). Its role
(:data:`gpuseat.jupyterhub.config.ENGINE_SCOPES`, which ``gpuseat jupyterhub config --engine-token-file``
adds to the hub) needs ``list:users``, ``read:users``, ``admin:users`` (create accounts),
``admin:servers`` (stop servers), ``tokens`` (the participant's short-lived probe token) and
``access:servers`` (a token can only carry what its issuer holds).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuseat.core.delivery import parse_probe
from gpuseat.core.devices import DEVICE_UUID
from gpuseat.core.readiness import Access, Readiness, judge
from gpuseat.core.seating import AGENT_ACTOR
from gpuseat.engines import other_courses
from gpuseat.engines import sessions as session_checks
from gpuseat.engines.base import Changes, CourseState, Holding, Step, StepEngine
from gpuseat.engines.host import others
from gpuseat.engines.jupyterhub.requests import do_request, plan_requests
from gpuseat.engines.setting_types import AbsolutePath
from gpuseat.errors import EngineError, InputError
from gpuseat.jupyterhub.hooks import ENGINE, HELD

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx

    from gpuseat.store import ParticipantView, SeatView

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# What runs in the participant's kernel: the spawner's device selection and, where there is a driver,
# the driver's own list; one marker line each so that kernel chatter never parses as a device.
PROBE_CODE = """
import os, shutil, subprocess
print("GPUSEAT-CVD=" + os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
smi = shutil.which("nvidia-smi")
if smi:
    out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    for line in out.stdout.splitlines():
        print("GPUSEAT-SMI=" + line)
else:
    print("GPUSEAT-SMI-MISSING")
""".strip()
# a hub user name as JupyterHub (Authenticator.validate_username) and the hooks take it: any characters but '/',
# not only dots; gpuseat also refuses white space and control characters. Every use quotes it (URL path, JSON).
_NAME = re.compile(r"^(?!\.+$)[^/\s\x00-\x1f\x7f]{1,255}$")
# scheme, host (a DNS name, IPv4 or [IPv6]), optional port and path: no user:password@ (it would be shown to every
# participant in their way in), no backslash or control character that parsers read differently
_HUB_URL = re.compile(
    r"(?P<scheme>https?)://(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?"
    r"(?:/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*)?"
)


def _loopback(host: str) -> bool:
    """True for this machine: localhost, 127.0.0.0/8, [::1]."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def kernel_devices(printed: str) -> tuple[tuple[str, ...], str]:
    """The devices CUDA would use, from the probe's output, and how that was decided.

    With ``nvidia-smi``: its MIG devices (or, without MIG, its GPUs), narrowed to ``CUDA_VISIBLE_DEVICES``
    when that names UUIDs. Without a driver in the server's environment only ``CUDA_VISIBLE_DEVICES``
    can tell, and the evidence says so.
    """
    cvd = next((ln.split("=", 1)[1] for ln in printed.splitlines() if ln.startswith("GPUSEAT-CVD=")), "<unset>")
    chosen = tuple(x.strip() for x in cvd.split(",") if x.strip()) if cvd != "<unset>" else ()
    smi = [ln.split("=", 1)[1] for ln in printed.splitlines() if ln.startswith("GPUSEAT-SMI=")]
    if smi:
        # the one reading of nvidia-smi -L: per GPU its MIG devices, else the GPU itself
        devices = list(parse_probe("\n".join(smi)).visible)
        if chosen and all(c.startswith(("GPU-", "MIG-")) for c in chosen):
            devices = [d for d in chosen if d in devices]
        return tuple(devices), "nvidia-smi -L in the participant's server" + (f", CUDA_VISIBLE_DEVICES={cvd}")
    uuids = tuple(c for c in chosen if DEVICE_UUID.fullmatch(c))
    return uuids, f"no nvidia-smi in the participant's server: CUDA_VISIBLE_DEVICES={cvd} only"


class JupyterHubSettings(BaseModel):
    """The JupyterHub engine's settings (stored per course: ``gpuseat engines settings jupyterhub k=v``).

    The API token is never a setting: it is read from ``token_file`` (readable by its owner only) or
    the environment variable ``token_env``.
    """

    model_config = ConfigDict(extra="forbid")

    hub_url: str | None = Field(
        None,
        description="the hub's public URL (what participants open), e.g. https://hub.example.edu",
    )
    token_env: str = Field("JUPYTERHUB_API_TOKEN", description="the environment variable holding the API token")
    token_file: AbsolutePath | None = Field(
        None, description="a file holding the API token (owner-only, e.g. mode 600), read instead of token_env"
    )
    match_by: Literal["key", "email", "unix_user"] = Field(
        "key", description="which participant field is the hub user name (as gpuseat jupyterhub config --match-by)"
    )
    timeout: float = Field(180.0, gt=0, le=3600, description="seconds a server may take to start or stop")

    @field_validator("hub_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        m = _HUB_URL.fullmatch(v)
        if not m:
            raise ValueError(
                "must be an http(s):// URL of the hub (host, optional port and path prefix; no user:password@)"
            )
        if m["scheme"] == "http" and not _loopback(m["host"]):
            # the engine sends its admin token with every call: in clear text to another machine it is anyone's
            raise ValueError(
                f"http:// sends the engine's admin token unencrypted to {m['host']}: use https://{v[7:]} "
                "(http:// only for the hub on this machine: 127.0.0.1, localhost, [::1])"
            )
        return v.rstrip("/")

    # The agent (root) sends the token to ``hub_url``, which the same settings name: a token source must
    # say it is a token, so that settings cannot send another secret of the agent's (a cloud key in its
    # environment, a one-line secret file) to a host of their choosing.
    @field_validator("token_env")
    @classmethod
    def _env(cls, v: str) -> str:
        if not _ENV_NAME.fullmatch(v):
            raise ValueError("must be an environment variable name like JUPYTERHUB_API_TOKEN")
        if "TOKEN" not in v.upper():
            raise ValueError(f"{v} does not name a token: use a variable like JUPYTERHUB_API_TOKEN for the hub's")
        return v

    @field_validator("token_file")
    @classmethod
    def _token_file(cls, v: str | None) -> str | None:
        if v is not None and "token" not in Path(v).name.lower():
            name = Path(v).name
            raise ValueError(f"{name} does not name a token: keep the hub's in a file like /etc/gpuseat/hub-token")
        return v


def read_token(settings: JupyterHubSettings) -> str:
    """The hub API token from ``token_file`` (refused when others may read it) or ``token_env``."""
    if settings.token_file:
        path = Path(settings.token_file)
        try:
            st = path.stat()
            text = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise InputError(
                f"cannot read the hub token file {path}: {exc.strerror}",
                where="jupyterhub token_file",
                fix="write the service token there (mode 600) or unset token_file to use token_env",
            ) from None
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise InputError(
                f"the hub token file {path} may be read by others (mode {stat.S_IMODE(st.st_mode):o})",
                where="jupyterhub token_file",
                fix=f"chmod 600 {path}",
            )
        if not text or any(c.isspace() for c in text):
            raise InputError(f"the hub token file {path} holds no token", where="jupyterhub token_file")
        return text
    token = os.environ.get(settings.token_env, "").strip()
    if not token:
        raise InputError(
            f"no hub API token: {settings.token_env} is not set",
            where=settings.token_env,
            fix="export the engine service's token there, or set token_file=PATH (a file readable by root only)",
        )
    return token


class JupyterHubEngine(StepEngine[JupyterHubSettings]):
    """One course's seats on one hub (see the module docstring)."""

    name = ENGINE
    settings_model = JupyterHubSettings

    def setup(self) -> None:
        """The engine's own parts, from its settings."""
        self.timeout = self.settings.timeout
        self._client: httpx.Client | None = None
        self._token: str | None = None

    def use(self, client: httpx.Client) -> None:
        """Talk to the hub through this client (a test hands in one bound to its hub)."""
        self._client = client

    # -- the hub -----------------------------------------------------------------------------------

    @property
    def hub_url(self) -> str:
        """The hub's URL (a clear error when it is not set)."""
        if not self.settings.hub_url:
            raise InputError(
                f"course {self.course}: the jupyterhub engine has no hub_url (set hub_url=https://HUB)",
                where="jupyterhub settings",
                fix=f"gpuseat engines settings jupyterhub hub_url=https://HUB --course {self.course}",
            )
        return self.settings.hub_url

    @property
    def api(self) -> str:
        """The hub's REST API base."""
        return self.hub_url + "/hub/api"

    @property
    def client(self) -> httpx.Client:
        """The HTTP client (made on first use)."""
        if self._client is None:
            import httpx

            self._client = httpx.Client(timeout=min(60.0, self.timeout))
        return self._client

    def user_of(self, p: ParticipantView) -> str | None:
        """The participant's hub user name (``match_by``), or None when the roster has no such field."""
        value = {"key": p.key, "email": p.email, "unix_user": p.unix_user}[self.settings.match_by]
        if not value:
            return None
        return value if _NAME.fullmatch(value) else None

    def _user(self, p: ParticipantView) -> str:
        user = self.user_of(p)
        if user is None:
            raise InputError(
                f"{p.key} has no hub user name ({self.settings.match_by} is empty or not a hub name)",
                where=f"participant {p.key}",
                fix="fill in that roster field, or change the engine's match_by",
            )
        return user

    def _call(self, method: str, path: str, *, token: str | None = None, **kw: Any) -> httpx.Response:
        import httpx

        api = self.api  # no hub_url: that is the first thing to say
        if self._token is None and token is None:
            self._token = read_token(self.settings)
        headers = {"Authorization": f"token {token or self._token}", **kw.pop("headers", {})}
        try:
            r = self.client.request(method, api + path, headers=headers, **kw)
        except httpx.HTTPError as exc:
            raise EngineError(
                f"the hub did not answer at {self.api}: {exc}", where=self.api, fix="is the hub up?"
            ) from None
        if r.status_code in (401, 403) and token is None:
            raise EngineError(
                f"the hub refused the engine's token ({r.status_code} {_message(r)})",
                where=self.api,
                fix="give the engine's service the role in gpuseat's docs (list:users, read:users, admin:users, "
                "admin:servers, tokens, access:servers)",
            )
        return r

    def users(self) -> dict[str, dict[str, Any]]:
        """Every hub user's model by name (servers included), page by page."""
        out: dict[str, dict[str, Any]] = {}
        offset = 0
        for _page in range(10_000):
            r = self._call(
                "GET",
                "/users",
                params={"offset": offset, "limit": 200},
                headers={"Accept": "application/jupyterhub-pagination+json"},
            )
            if r.status_code != 200:
                raise EngineError(f"the hub would not list its users: {r.status_code} {_message(r)}", where=self.api)
            body = r.json()
            items = body.get("items", []) if isinstance(body, dict) else body
            for u in items:
                out[str(u["name"])] = u
            nxt = body.get("_pagination", {}).get("next") if isinstance(body, dict) else None
            if not nxt or not items:
                break
            offset = int(nxt.get("offset", offset + len(items)))
        return out

    # -- plan ----------------------------------------------------------------------------------------

    def _course_users(self, state: CourseState) -> dict[str, ParticipantView | None]:
        """Hub user name → participant for the course's people; and, participant unknown (None), the hub users
        whose servers the engine last saw or a held hub seat names that no participant has now: a course gone
        from the store, or a participant renamed in the roster (their old hub user's server still runs on the
        seat's GPU, and is stopped as holding no seat)."""
        out: dict[str, ParticipantView | None] = {}
        for p in state.people.values():
            user = self.user_of(p)
            if user:
                out[user] = p
        for s in state.seats:
            if s.engine == ENGINE and s.state in HELD and s.engine_ref:
                out.setdefault(s.engine_ref.split("/", 1)[0], None)
        for h in self.store.agents.holdings(state.key):
            if h["engine"] == ENGINE:
                out.setdefault(str(h["login"]), None)
        return out

    def plan(self, course: CourseState) -> Changes:
        """Every step that makes the hub and the seats match the store (see the module docstring)."""
        state = course
        changes = Changes(self.name, self.course, self.host)
        add = changes.steps.append
        hub_seats = [s for s in state.seats if s.engine == ENGINE]
        people = self._course_users(state)
        if not hub_seats and not any(p is None for p in people.values()) and not self._held_before(state):
            return changes  # nothing of this course is on a hub
        models = self.users()
        seat_of = {s.participant: s for s in state.seats if s.participant}
        # another course's older holder keeps the GPU (module other_courses): this holder's server stops
        yielded = other_courses.yielded(self.store, self.course, hub_seats) if state.active else {}
        gone = (
            "the course is deleted" if state.course is None else ("the course is archived" if state.archived else None)
        )
        stopping: set[str] = set()
        lost = self._lost_seats(state, hub_seats)
        named = self._named_now()
        for user, p in sorted(people.items()):
            servers = (models.get(user) or {}).get("servers") or {}
            for name in sorted(servers):
                ref = f"{user}/{name}"
                mine = seat_of.get(p.key) if p is not None else None
                held = [s for s in hub_seats if s.engine_ref == ref and s.state in HELD]
                why: str | None
                if gone:
                    why = gone
                elif state.closed:
                    why = f"access is closed: {state.closed}"
                elif mine is None:
                    why = f"{p.key if p else user} holds no seat in course {self.course} now"
                elif mine.key in yielded and p is not None:
                    why = others.refusal(mine.key, p.key, yielded[mine.key])[0]
                elif held and mine not in held:
                    why = f"{p.key if p else user} moved to {mine.key}: the server still holds {held[0].key}"
                elif not held and not (servers[name] or {}).get("pending") and not named(ref):
                    why = _unseated(p.key if p else user, mine.key, lost.get(user), {s.key for s in state.seats})
                else:
                    continue
                stopping.add(ref)
                seats = tuple(sorted({s.key for s in held} | ({mine.key} if mine else set())))
                label = f"{user}/{name}" if name else f"{user}/"
                add(self._step("hub.server.stop", label, why, "revoke", participant=p.key if p else None,
                               seats=seats, user=user, server=name))  # fmt: skip
        if state.course is None or state.archived:
            return changes
        for seat in hub_seats:  # fails apply (exit 2); the way in is cleared below, the rest goes on
            if seat.key in yielded and seat.participant:
                what, fix = others.refusal(seat.key, seat.participant, yielded[seat.key])
                add(self._step("seat.device", seat.key, what, "grant", fix=fix))
        running = {
            f"{u}/{n}" for u, m in models.items() for n in ((m.get("servers") or {}) if u in people else {})
        } - stopping
        for seat in hub_seats:
            p = state.people.get(seat.participant or "")
            holder_user = self.user_of(p) if p else None
            ref = seat.engine_ref or ""
            if seat.state in HELD and ref and ref.split("/", 1)[0] != holder_user and ref not in running:
                add(self._step("seat.free", seat.key, f"server {ref} is stopped and {ref.split('/', 1)[0]} no longer "
                               "holds the seat: free for its holder's next start", "record", seats=(seat.key,),
                               ref=ref, was=seat.state))  # fmt: skip
            elif seat.state == "released" and p is None:
                add(self._step("seat.free", seat.key, "nobody holds it: free for its next holder", "record",
                               seats=(seat.key,), ref=ref, was=seat.state))  # fmt: skip
        for seat in hub_seats:
            p = state.people.get(seat.participant or "")
            old = dict(state.access.get(seat.key) or {})
            if p is None or seat.key in yielded:
                if old.get("holder") or old.get("user"):
                    add(self._clear_step(seat.key))
                continue
            name = self.user_of(p)
            if name is None:
                changes.notes.append(
                    f"{p.key} has no hub user name ({self.settings.match_by} is empty): fill it in the roster"
                )
                continue
            if name not in models:
                add(self._step("hub.user.add", name, f"{p.key} holds {seat.key}", "grant", participant=p.key,
                               seats=(seat.key,), user=name))  # fmt: skip
            access = self._access(name, seat, p.key).to_dict()
            if old != access:
                add(self._step("seat.record", seat.key, f"{p.key} starts their server at /user/{name}/", "record",
                               participant=p.key, seats=(seat.key,), access=access))  # fmt: skip
        plan_requests(self, state, changes, models)
        return changes

    def _lost_seats(self, state: CourseState, hub_seats: list[SeatView]) -> dict[str, str]:
        """Hub user → the seat their server held when the engine last looked (its holdings) that no server of
        theirs holds now: one removed with ``seats remove --force`` (or removed and added again). The server
        still runs on that seat's GPU, where no move or release of the store will stop it."""
        out = {}
        for h in self.store.agents.holdings(state.key):
            user, seat = str(h["login"]), h.get("seat")
            if h["engine"] != ENGINE or h["what"] != "server" or not seat:
                continue
            if not any(s.key == seat and s.state in HELD and (s.engine_ref or "").split("/")[0] == user
                       for s in hub_seats):  # fmt: skip
                out[user] = str(seat)
        return out

    def _named_now(self) -> Callable[[str], bool]:
        """Whether a server (``user/name``) is the one a held hub seat names, read from the store at the first
        question, after the hub's servers were listed: the hook records a server's seat before it starts, so a
        server that started after the pass read its seats is named by then."""
        refs: set[str] | None = None

        def named(ref: str) -> bool:
            nonlocal refs
            if refs is None:
                seats = self.store.seats.seats(self.course)
                refs = {s.engine_ref or "" for s in seats if s.engine == ENGINE and s.state in HELD}
            return ref in refs

        return named

    def _held_before(self, state: CourseState) -> bool:
        """True when the engine last saw servers of this course (its seats may have moved to another engine)."""
        return any(h["engine"] == ENGINE for h in self.store.agents.holdings(state.key))

    def _access(self, user: str, seat: SeatView, holder: str | None = None) -> Access:
        url = f"{self.hub_url}/user/{quote(user, safe='')}/"
        return Access(
            kind="jupyter",
            user=user,
            url=url,
            device_uuid=seat.device_uuid,
            notes=(f"seat {seat.key}",),
            holder=holder,
        )

    # -- apply -----------------------------------------------------------------------------------------

    def do(self, step: Step) -> str | None:
        """Carry out one planned step (each is a no-op when the hub or the store already is so)."""
        d = step.data
        dry = self.runner.dry_run
        match step.action:
            case "hub.server.stop":
                path = _server_path(d["user"], d["server"])
                if dry:
                    return f"would DELETE {self.api}{path}"
                self._stop_server(d["user"], d["server"])
            case "hub.user.add":
                if dry:
                    return f"would POST {self.api}/users/{d['user']}"
                r = self._call("POST", f"/users/{quote(d['user'], safe='')}")
                if r.status_code not in (201, 409):
                    raise EngineError(f"the hub did not create user {d['user']}: {r.status_code} {_message(r)}",
                                      where=self.api)  # fmt: skip
            case "seat.free":
                if not dry:
                    self._free(step.target, str(d.get("ref") or ""))
            case "seat.device":  # planned so that apply names the seat and fails it (exit 2); the rest goes on
                raise InputError(step.why, where=f"seat {step.target}", fix=d.get("fix") or None)
            case "seat.record" | "seat.clear":
                self.record_way_in(step, running=False)
            case (
                "hub.server.start"
                | "hub.server.restart"
                | "seat.stop"
                | "seat.warn"
                | "seat.connected"
                | "request.record"
            ):
                return do_request(self, step)
            case "seat.check" | "session.report":
                return session_checks.do(self, step)
            case _:
                raise InputError(f"the jupyterhub engine has no step {step.action!r}", where="plan")
        return None

    def _stop_server(self, user: str, server: str) -> None:
        """Stop one server and wait until the hub shows it gone (a pending start is interrupted)."""
        path = _server_path(user, server)
        r = self._call("DELETE", path)
        if r.status_code not in (202, 204, 400, 404):
            raise EngineError(f"DELETE {path} answered {r.status_code}: {_message(r)}", where=self.api)
        deadline = time.monotonic() + self.timeout
        while True:
            model = self._model(user)
            left = (model or {}).get("servers") or {}
            if server not in left:
                return
            if time.monotonic() > deadline:
                raise EngineError(f"{user}'s server {server or '(default)'} did not stop in {self.timeout:g} s",
                                  where=self.api, fix="look at the hub's log; apply again")  # fmt: skip
            if r.status_code == 400 and not (left[server] or {}).get("pending"):
                r = self._call("DELETE", path)  # e.g. refused while a rename was pending: ask again
            time.sleep(0.2)

    def _free(self, seat_key: str, ref: str) -> None:
        """The seat goes back to ``planned`` if it is still marked as held by a server that is gone."""
        seat = self.store.seats.get_seat(self.course, seat_key)
        if (seat.engine_ref or "") != ref:
            return  # a server took it since the plan: the hooks own it now
        if seat.state in HELD:
            user, _, name = ref.partition("/")
            if name in ((self._model(user) or {}).get("servers") or {}):
                raise EngineError(f"server {ref} still runs: seat {seat_key} stays held", where=self.api)
            self.store.seats.set_seat_state(
                self.course, seat_key, "released", reason=f"server {ref} stopped", actor=AGENT_ACTOR
            )
            seat = self.store.seats.get_seat(self.course, seat_key)
        if seat.state == "released":
            self.store.seats.set_seat_state(
                self.course, seat_key, "planned", reason="free for its holder's next start", actor=AGENT_ACTOR
            )

    def _model(self, user: str) -> dict[str, Any] | None:
        r = self._call("GET", f"/users/{quote(user, safe='')}")
        if r.status_code == 404:
            return None
        if r.status_code != 200:
            raise EngineError(f"the hub would not show user {user}: {r.status_code} {_message(r)}", where=self.api)
        model: dict[str, Any] = r.json()
        return model

    # -- observe, connect, check -----------------------------------------------------------------------

    def observe(self, course: CourseState) -> list[Holding]:
        """The running (or starting) servers of the course's users."""
        people = self._course_users(course)
        if not people:
            return []
        if not self.settings.hub_url:
            return []
        models = self.users()
        held = {s.engine_ref: s.key for s in course.seats if s.engine == ENGINE and s.state in HELD}
        out = []
        for user, p in sorted(people.items()):
            for name, server in sorted(((models.get(user) or {}).get("servers") or {}).items()):
                ref = f"{user}/{name}"
                pending = (server or {}).get("pending")
                detail = (name or "default server") + (f" ({pending} pending)" if pending else "")
                out.append(Holding(self.name, "server", user, p.key if p else None, held.get(ref), self.host, detail))
        return out

    def refused(self, participant: ParticipantView) -> str | None:
        """Exclusivity: None when ``participant`` (a previous or released holder) has no server running."""
        user = self.user_of(participant)
        if user is None:
            return None
        servers = sorted((self._model(user) or {}).get("servers") or {})
        if servers:
            return f"{user}'s server {servers[0] or '(default)'} still runs on the hub"
        return None

    def probe(self, seat: SeatView, participant: ParticipantView) -> Readiness:
        """Start the participant's server as them, list the GPUs in a kernel there, judge what they see."""
        user = self._user(participant)
        now = datetime.now(UTC)
        other = other_courses.yielded(self.store, self.course, [seat]).get(seat.key)
        if other is not None:  # what apply says: another course's older holder keeps this GPU
            said = others.refusal(seat.key, participant.key, other)[0]
            return self._readiness(seat, participant, "broken", said, "", (), now)
        token, token_id = self._participant_token(user)
        was_running = bool(((self._model(user) or {}).get("servers") or {}).get(""))
        printed, reason = "", None
        try:
            r = self._call("POST", f"/users/{quote(user, safe='')}/server", token=token)
            if r.status_code not in (201, 202, 400):  # 400: already running
                reason = f"the hub refused to start {user}'s server: {_message(r)}"
            else:
                self._wait(user, ready=True)
                printed = self._run_in_kernel(user, token, PROBE_CODE)
        except EngineError as exc:
            reason = exc.message
        finally:
            if not was_running:
                self._stop_all(user)
            self._call("DELETE", f"/users/{quote(user, safe='')}/tokens/{token_id}")
        if reason is not None:
            return self._readiness(seat, participant, "broken", reason, reason, (), now)
        visible, how = kernel_devices(printed)
        state, why = judge(seat.device_uuid, visible)
        evidence = f"{how}\n{printed.strip()}"
        return self._readiness(seat, participant, state, why, evidence, visible, now)

    # -- the probe's REST calls ------------------------------------------------------------------------

    def _participant_token(self, user: str) -> tuple[str, str]:
        """A token owned by the participant (their own permissions), valid for the probe only."""
        scopes = [f"servers!user={user}", f"access:servers!user={user}", f"read:users!user={user}"]
        body = {"note": "gpuseat probe", "expires_in": int(self.timeout) + 300, "scopes": scopes}
        r = self._call("POST", f"/users/{quote(user, safe='')}/tokens", json=body)
        if r.status_code == 404:
            raise EngineError(f"{user} has no hub account", where=self.api, fix="gpuseat apply --engine jupyterhub")
        if r.status_code not in (200, 201):
            raise EngineError(
                f"the hub would not issue a token for {user}: {r.status_code} {_message(r)}",
                where=self.api,
                fix="the engine's role needs admin:users, tokens, admin:servers and access:servers",
            )
        data = r.json()
        return str(data["token"]), str(data["id"])

    def _wait(self, user: str, *, ready: bool) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            model = self._model(user) or {}
            server = (model.get("servers") or {}).get("")
            if ready and server and server.get("ready"):
                return
            if ready and not server and model.get("pending") is None:
                raise EngineError(f"{user}'s server stopped while starting", where=self.api)
            if not ready and not model.get("servers") and model.get("pending") is None:
                return
            time.sleep(0.3)
        raise EngineError(
            f"{user}'s server did not {'start' if ready else 'stop'} in {self.timeout:g} s", where=self.api
        )

    def _stop_all(self, user: str) -> None:
        """Stop every server of ``user`` and wait until they are gone."""
        for name in sorted((self._model(user) or {}).get("servers") or {}):
            self._stop_server(user, name)

    def _run_in_kernel(self, user: str, token: str, code: str) -> str:
        """Start a kernel on the participant's server with their token, run ``code``, return its output."""
        base = f"{self.hub_url}/user/{quote(user, safe='')}/api/kernels"
        headers = {"Authorization": f"token {token}"}
        r = self.client.post(base, json={"name": "python3"}, headers=headers)
        if r.status_code != 201:
            raise EngineError(f"no kernel on {user}'s server: {r.status_code} {r.text[:200]}", where=base)
        kernel = r.json()["id"]
        try:
            return asyncio.run(
                _execute(base.replace("http", "ws", 1) + f"/{kernel}/channels", token, code, self.timeout)
            )
        finally:
            self.client.delete(f"{base}/{kernel}", headers=headers)

    def _readiness(
        self,
        seat: SeatView,
        participant: ParticipantView,
        state: Any,
        reason: str | None,
        evidence: str,
        visible: tuple[str, ...],
        at: datetime,
    ) -> Readiness:
        return Readiness(
            course=self.course,
            seat=seat.key,
            participant=participant.key,
            state=state,
            reason=reason,
            evidence=evidence[:4000],
            visible=visible,
            checked_at=at,
            engine=ENGINE,
        )


def _unseated(who: str, mine: str, last: str | None, seats: set[str]) -> str:
    """Why a running server that no held hub seat names is stopped: it still has the GPU the hook gave it at
    its start, of ``last`` (the seat the engine last saw it hold) or of a seat changed or removed since."""
    if last is None or last == mine:  # started after the engine's last look
        where = "holds no seat (the seat it started on was removed or changed since: it may still have its GPU)"
    else:
        where = f"still runs on seat {last} ({'not theirs' if last in seats else 'removed from the course'} now)"
    return f"{who}'s server {where}: {mine} is theirs from their next start"


def _server_path(user: str, server: str) -> str:
    base = f"/users/{quote(user, safe='')}/server"
    return base + (f"s/{quote(server, safe='')}" if server else "")


async def _execute(url: str, token: str, code: str, timeout: float) -> str:
    """One ``execute_request`` over the kernel's websocket (Jupyter messaging protocol 5.3)."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    ws = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"}))
    try:
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "username": "gpuseat", "session": uuid.uuid4().hex, "version": "5.3"}
        content = {"code": code, "silent": False, "store_history": False, "allow_stdin": False}
        await ws.write_message(
            json.dumps(
                {
                    "header": {**header, "msg_type": "execute_request"},
                    "parent_header": {},
                    "metadata": {},
                    "content": content,
                    "channel": "shell",
                    "buffers": [],
                }
            )
        )
        printed: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            raw = await asyncio.wait_for(ws.read_message(), timeout=max(1.0, deadline - time.monotonic()))
            if raw is None:
                break
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            if kind == "stream":
                printed.append(msg["content"]["text"])
            elif kind == "error":
                raise EngineError(f"the probe failed in the kernel: {msg['content'].get('evalue')}", where=url)
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                return "".join(printed)
        raise EngineError("the probe did not finish in the kernel", where=url)
    finally:
        ws.close()


def _message(r: httpx.Response) -> str:
    try:
        return str(r.json().get("message", r.text))[:300]
    except ValueError:
        return r.text[:300]
