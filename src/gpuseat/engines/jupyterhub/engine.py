"""The JupyterHub seat engine: seats handed out by a hub through gpuseat's spawn hooks, probed through the
hub's REST API *as the participant*.

The hooks (:mod:`gpuseat.jupyterhub.hooks`) give a server its seat when it starts; this engine does what
the seat-engine interface asks around that:

* :meth:`JupyterHubEngine.provision` makes sure the participant has a hub account and says where their
  server is (an :class:`~gpuseat.core.readiness.Access` of kind ``jupyter``);
* :meth:`JupyterHubEngine.probe` gets a short-lived token *for the participant* (admin API), starts their
  server with it (so the spawn goes through the hooks exactly as when they click "Start"), runs a
  GPU-listing probe in a kernel on that server (``nvidia-smi -L`` where there is one, and the
  ``CUDA_VISIBLE_DEVICES`` the spawner set), judges it with :func:`~gpuseat.core.readiness.judge`, then
  stops the server again if it was not running before and deletes the token;
* :meth:`JupyterHubEngine.revoke` stops every server of the participant and drops their seat;
* :meth:`JupyterHubEngine.teardown` stops the server holding the seat (by its engine reference).

The engine's token comes from the ``token`` setting or ``JUPYTERHUB_API_TOKEN``; its role needs
``admin:users``, ``tokens`` (to issue the participant's short-lived token), ``admin:servers``,
``access:servers`` (a token can only carry what its issuer holds) and ``list:users``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gpuseat.core.readiness import Access, Readiness, judge
from gpuseat.errors import EngineError, InputError

if TYPE_CHECKING:
    import httpx

    from gpuseat.services.courses import CourseStore, ParticipantView, SeatView

ENGINE = "jupyterhub"
ACTOR = "engine:jupyterhub"
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
_UUID = re.compile(r"\b((?:GPU|MIG)-[0-9A-Fa-f][0-9A-Fa-f/-]{6,})\b")
_NAME = re.compile(r"^[A-Za-z0-9@._+-]{1,255}$")


def visible_devices(printed: str) -> tuple[tuple[str, ...], str]:
    """The devices CUDA would use, from the probe's output, and how that was decided.

    With ``nvidia-smi``: its MIG devices (or, without MIG, its GPUs), narrowed to ``CUDA_VISIBLE_DEVICES``
    when that names UUIDs. Without a driver in the server's environment only ``CUDA_VISIBLE_DEVICES``
    can tell, and the evidence says so.
    """
    cvd = next((ln.split("=", 1)[1] for ln in printed.splitlines() if ln.startswith("GPUSEAT-CVD=")), "<unset>")
    chosen = tuple(x.strip() for x in cvd.split(",") if x.strip()) if cvd != "<unset>" else ()
    smi = [ln.split("=", 1)[1] for ln in printed.splitlines() if ln.startswith("GPUSEAT-SMI=")]
    if smi:
        from gpuseat.nvsmi import parse_list

        listed = parse_list("\n".join(smi))
        devices = [m.uuid for g in listed for m in g.mig] or [g.uuid for g in listed]
        if chosen and all(c.startswith(("GPU-", "MIG-")) for c in chosen):
            devices = [d for d in chosen if d in devices]
        return tuple(devices), "nvidia-smi -L in the participant's server" + (f", CUDA_VISIBLE_DEVICES={cvd}")
    uuids = tuple(c for c in chosen if _UUID.fullmatch(c))
    return uuids, f"no nvidia-smi in the participant's server: CUDA_VISIBLE_DEVICES={cvd} only"


class JupyterHubEngine:
    """One course's seats on one hub (settings: ``hub_url``, optional ``token``, ``timeout`` seconds)."""

    name = ENGINE

    def __init__(
        self,
        store: CourseStore,
        course: str,
        *,
        hub_url: str,
        token: str | None = None,
        timeout: str = "180",
        client: httpx.Client | None = None,
    ) -> None:
        import httpx

        if not re.fullmatch(r"https?://[^\s]+", hub_url):
            raise InputError(f"{hub_url!r} is not a hub URL", where="hub_url", fix="give http(s)://HOST[:PORT]")
        token = token or os.environ.get("JUPYTERHUB_API_TOKEN")
        if not token:
            raise InputError("no hub API token", where="JUPYTERHUB_API_TOKEN", fix="export an admin service token")
        try:
            self.timeout = float(timeout)
        except ValueError:
            raise InputError(f"timeout {timeout!r} is not a number", where="timeout", fix="seconds, e.g. 180") from None
        self.store, self.course = store, course
        self.hub_url = hub_url.rstrip("/")
        self.api = self.hub_url + "/hub/api"
        self._token = token
        self.client = client or httpx.Client(timeout=60.0)

    # -- the interface -----------------------------------------------------------------------------

    def provision(self, seat: SeatView, participant: ParticipantView | None) -> Access | None:
        """The participant's hub account exists; their seat is handed to their server when it starts."""
        if participant is None:
            return None
        user = self._user(participant.key)
        r = self._call("POST", f"/users/{quote(user, safe='')}")
        if r.status_code not in (201, 409):
            raise EngineError(f"the hub did not create user {user}: {r.status_code} {r.text[:200]}", where=self.api)
        access = self._access(user, seat)
        self.store.record_delivery(self.course, seat.key, access=access, actor="gpuseat jupyterhub")
        return access

    def connect(self, seat: SeatView) -> Access | None:
        """Where the seat's holder opens their server."""
        return self._access(self._user(seat.participant), seat) if seat.participant else None

    def probe(self, seat: SeatView, participant: ParticipantView) -> Readiness:
        """Start the participant's server as them, list the GPUs in a kernel there, judge what they see."""
        user = self._user(participant.key)
        now = datetime.now(UTC)
        token, token_id = self._participant_token(user)
        was_running = self._server(user) is not None
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
                self._stop(user)
            self._call("DELETE", f"/users/{quote(user, safe='')}/tokens/{token_id}")
        if reason is not None:
            return self._readiness(seat, participant, "broken", reason, reason, (), now)
        visible, how = visible_devices(printed)
        state, why = judge(seat.device_uuid, visible)
        evidence = f"{how}\n{printed.strip()}"
        return self._readiness(seat, participant, state, why, evidence, visible, now)

    def revoke(self, seat: SeatView, participant: ParticipantView) -> None:
        """Stop every server of the participant (the hooks record the stop), then drop their seat."""
        user = self._user(participant.key)
        self._stop(user)
        held = self.store.seat_of(self.course, participant.key)
        if held is not None:
            self.store.release(self.course, participant=participant.key, reason="access revoked", actor=ACTOR)
            now = self.store.get_seat(self.course, held.key)
            if now.state == "released":  # stopped cleanly: the seat can go to its next holder
                self.store.set_seat_state(
                    self.course, held.key, "planned", reason=f"access of {participant.key} revoked", actor=ACTOR
                )

    def teardown(self, seat: SeatView) -> None:
        """Stop the server that holds the seat, if any (the hub and its accounts stay)."""
        if seat.engine == ENGINE and seat.engine_ref:
            user = seat.engine_ref.split("/", 1)[0]
            self._stop(user)

    # -- the hub's REST API ------------------------------------------------------------------------

    def _user(self, key: str | None) -> str:
        if not key or not _NAME.fullmatch(key):
            raise InputError(f"{key!r} cannot be a hub user name", where="participant key", fix="a roster key")
        return key

    def _access(self, user: str, seat: SeatView) -> Access:
        url = f"{self.hub_url}/user/{quote(user, safe='')}/"
        return Access(kind="jupyter", user=user, url=url, device_uuid=seat.device_uuid, notes=(f"seat {seat.key}",))

    def _call(self, method: str, path: str, *, token: str | None = None, **kw: Any) -> httpx.Response:
        import httpx

        headers = {"Authorization": f"token {token or self._token}"}
        try:
            return self.client.request(method, self.api + path, headers=headers, **kw)
        except httpx.HTTPError as exc:
            raise EngineError(f"the hub did not answer: {exc}", where=self.api, fix="is the hub up?") from None

    def _participant_token(self, user: str) -> tuple[str, str]:
        """A token owned by the participant (their own permissions), valid for the probe only."""
        scopes = [f"servers!user={user}", f"access:servers!user={user}", f"read:users!user={user}"]
        body = {"note": "gpuseat probe", "expires_in": int(self.timeout) + 300, "scopes": scopes}
        r = self._call("POST", f"/users/{quote(user, safe='')}/tokens", json=body)
        if r.status_code == 404:
            raise EngineError(f"{user} has no hub account", where=self.api, fix="provision the seat first")
        if r.status_code not in (200, 201):
            raise EngineError(
                f"the hub would not issue a token for {user}: {r.status_code} {_message(r)}",
                where=self.api,
                fix="the engine's role needs admin:users, tokens, admin:servers and access:servers",
            )
        data = r.json()
        return str(data["token"]), str(data["id"])

    def _server(self, user: str) -> dict[str, Any] | None:
        r = self._call("GET", f"/users/{quote(user, safe='')}")
        if r.status_code != 200:
            return None
        server: dict[str, Any] | None = (r.json().get("servers") or {}).get("")
        return server

    def _wait(self, user: str, *, ready: bool) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            r = self._call("GET", f"/users/{quote(user, safe='')}")
            model = r.json() if r.status_code == 200 else {}
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

    def _stop(self, user: str) -> None:
        """Stop every server of ``user`` and wait until they are gone."""
        r = self._call("GET", f"/users/{quote(user, safe='')}")
        if r.status_code != 200:
            return
        for name in r.json().get("servers") or {}:
            path = f"/users/{quote(user, safe='')}/server" + (f"s/{quote(name, safe='')}" if name else "")
            done = self._call("DELETE", path)
            if done.status_code not in (202, 204, 400, 404):
                raise EngineError(f"DELETE {path} answered {done.status_code}: {_message(done)}", where=self.api)
        self._wait(user, ready=False)

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
