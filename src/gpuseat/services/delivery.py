"""What the portal shows about delivery: each participant's way in, and the course's readiness checklist.

Read-only views over the store (access details, last checks, token use, GPU activity), so the
web layer only renders them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gpuseat.core.delivery import (
    Instruction,
    address_advice,
    being_prepared,
    instruction,
    login_name,
    not_yours,
    out_of_order,
)
from gpuseat.core.hosts import bad_stored_host, bare_label, host_problem
from gpuseat.core.readiness import Access
from gpuseat.engines import registry
from gpuseat.errors import InputError
from gpuseat.safe_text import check_note

if TYPE_CHECKING:
    from gpuseat.store import CourseStore, ParticipantView, SeatView


def way_in(
    store: CourseStore,
    seat: SeatView,
    participant: ParticipantView | None,
    *,
    logins: Collection[str] | None = None,
    stored: Mapping[str, Any] | Literal["read"] | None = "read",
) -> Instruction:
    """The seat's way in for its participant: stored access first, else the older one-line ``connect``.

    A way in made for another participant (a hand-over not applied yet) is never shown: "being
    prepared" instead. ``logins``: every participant's login name (read once by callers of many seats);
    ``stored``: the seat's stored access when the caller read it with its other rows (the participant page)."""
    access: dict[str, Any] | None
    if stored == "read":
        access = store.delivery.access_of(seat.course).get(seat.key)
    else:
        access = dict(stored) if stored else None
    if access is None and seat.connect:
        text = seat.connect.strip()
        web = text.startswith(("http://", "https://"))
        access = {"kind": "web" if web else "ssh", "url": text if web else None, "command": None if web else text}
    on_host = _login_on_host(seat)
    if access is None and seat.host and not bare_label(seat.host) and on_host:
        # a host given as a DNS name or address (seats add --host gpu1.example.org, 2001:db8::5) is a
        # way in; a bare label (the inventory's name, h200-2x) never is
        access = {"kind": "ssh", "host": seat.host, "device_uuid": seat.device_uuid}
    login = login_name(participant.key, participant.unix_user) if participant else None
    if logins is None:
        logins = {login_name(p.key, p.unix_user) for p in store.roster.participants(seat.course)}
    viewer = participant.key if participant else seat.participant
    stale = participant is not None and seat.participant not in (None, participant.key)  # a cached page after a move
    delivered = seat.engine in registry.delivering()
    mine = not stale and not not_yours(access, holder=viewer, login=login, others=logins)
    mine = mine and not _old_login(access, viewer, login)
    if delivered and seat.state == "failed" and seat.kind != "cloud" and not stale and (access is None or not mine):
        # an engine refused the seat for good (or it was taken out of service): "being prepared" never comes true.
        # A cloud seat is not here: its engine launches it again, and says so in its own reason (below)
        missing = out_of_order(seat.key, seat.state_reason)
        return Instruction(None, None, None, seat.device_uuid, (), missing, out_of_order=True)
    if delivered and not mine:
        return Instruction(None, None, None, seat.device_uuid, (), being_prepared(login))
    if delivered and access is None and not on_host and seat.kind != "cloud":
        # its host is a hub's GPU host, a hypervisor or a node, never where its holder logs in: the engine
        # records their way in when it sets the seat up (a cloud seat says why it has none, below)
        why = being_prepared(login) if viewer else f"no way in yet: the {seat.engine} engine records it for a holder"
        return Instruction(None, None, None, seat.device_uuid, (), why)
    host = str(access.get("host") or "") if access else ""
    if host and (problem := host_problem(host)) is not None:
        # stored before the one host rule (a seat's host, seats connect --ssh): never pasted into a terminal
        return Instruction(None, None, None, seat.device_uuid, (), bad_stored_host(seat.key, host, problem))
    if access and access.get("jump_host"):
        stored_jump = _stored_jump(seat.key, access)
        if isinstance(stored_jump, str):  # what to fix
            return Instruction(None, None, None, seat.device_uuid, (), stored_jump)
        access = stored_jump
    engine = _address_engine(seat)
    way = instruction(access, seat=seat.key, unix_user=login, server_name=seat.host, engine=engine)
    unrecorded = access is None and bool(seat.host)  # its server known only by its inventory label
    hostless = access is not None and not host and bool(way.missing)  # a pass recorded a login, no address yet
    if (unrecorded or hostless) and delivered and (address := _engine_ssh_host(store, seat)):
        # its engine's ssh_host makes it reachable on the engine's next pass (a way in cleared, none recorded
        # yet, or one recorded before the setting was set): nothing to set
        unheld = f"no way in yet: the {seat.engine} engine records it at {address} for a holder"
        why = being_prepared(login) if viewer else unheld
        return Instruction(None, None, None, seat.device_uuid, (), why)
    if unrecorded:
        # the seat exists: its inventory file is read no more (seats add read it), so the fix is its engine's
        # ssh_host setting where that engine takes one, or the seat's own way in
        missing = f"the server has no reachable address yet: {address_advice(seat.key, engine)}"
        return Instruction(None, None, None, seat.device_uuid, (), missing)
    if way.missing and not way.command and seat.kind == "cloud" and seat.engine in registry.delivering():
        # a cloud seat has an address only while its cluster is up: say why it has none (the engine's
        # honest state in the seat's reason: not launched, launching, stopped), never "set ssh_host"
        why = seat.state_reason or ""
        if not why.startswith(("not launched", "launching", "stopped")):
            why = "not launched yet: the agent launches your seat while the course's access window is open"
        return Instruction(None, way.url, None, seat.device_uuid, (), why)
    return way


#: the ways in whose ``user`` is the holder's login (a JupyterHub one names the hub's user, matched by its own rule)
_LOGIN_KINDS = ("ssh", "vm", "slurm", "kubernetes")


def _old_login(access: Mapping[str, Any] | None, holder: str | None, login: str | None) -> bool:
    """True when the stored way in was made for ``holder`` under a login they have no more: a roster re-import
    gave them a new ``unix_user``, and until the engine's next pass makes it the page says "being prepared"
    as the new login instead of the old one's ``ssh`` command (that pass locks the old account)."""
    if not access or not login or not holder or access.get("holder") != holder:
        return False
    user = access.get("user")
    return bool(user) and user != login and str(access.get("kind") or "ssh") in _LOGIN_KINDS


def _engine_ssh_host(store: CourseStore, seat: SeatView) -> str | None:
    """The ``ssh_host`` setting of the seat's engine in its course (the host engine's): the address that
    engine records as the holder's way in on its next pass."""
    if not seat.engine:
        return None
    return str(store.agents.engine_settings(seat.course, seat.engine).get("ssh_host") or "") or None


def _address_engine(seat: SeatView) -> str:
    """The seat's engine when its ``ssh_host`` setting makes the seat reachable (the host engine's: its holder
    logs in to the server itself), else ``""``: a seat set up by hand gets its way in from ``seats connect``."""
    spec = registry.specs().get(seat.engine)
    if spec is None or not spec.login_on_host:
        return ""
    model = spec.settings_model()
    return seat.engine if model is not None and "ssh_host" in model.model_fields else ""


def _login_on_host(seat: SeatView) -> bool:
    """Whether the seat's holder logs in to the seat's host itself: a seat set up by hand, or one of an
    engine that says so (the host engine's ``login_on_host``). A hub's GPU host, a hypervisor, a Slurm or
    Kubernetes node, a cloud seat's host are never the participant's way in."""
    if seat.kind in ("cloud", "slurm", "vm"):
        return False
    spec = registry.specs().get(seat.engine)
    return spec is None or spec.target is None or spec.login_on_host


def _stored_jump(seat: str, access: dict[str, Any]) -> dict[str, Any] | str:
    """A stored way in with its jump host as ``ssh -J`` takes it: one an older gpuseat stored bare
    (``2001:db8::1``, which ssh reads as host ``2001``) in brackets, its generated command made again; one
    the host rule refuses is never pasted: what to fix instead."""
    from gpuseat.core.delivery import ssh_command
    from gpuseat.core.hosts import jump_target

    jump = str(access["jump_host"])
    try:
        fixed = jump_target(jump, field="jump_host")
    except InputError as exc:
        return (
            f"seat {seat}'s jump host {jump[:100]!r} is not one ssh -J takes ({exc.what}): run `gpuseat seats "
            f"connect {seat} --ssh USER@HOST --jump [USER@]HOST[:PORT]` with the gateway's DNS name or IP address"
        )
    if fixed == jump:
        return access
    host, user = str(access.get("host") or ""), access.get("user")
    port = int(str(access["port"])) if access.get("port") else None
    made = access.get("command") == ssh_command(host, str(user) if user else None, port, jump)
    return {**access, "jump_host": fixed, **({"command": None} if made else {})}


def ways_in(store: CourseStore, course: str | None = None) -> list[dict[str, Any]]:
    """Per seat: its way in for its holder (or what is missing) and its last check, for the seats page."""
    people = {p.key: p for p in store.roster.participants(course)}
    checks = store.delivery.readiness_of(course)
    out = []
    logins = {login_name(p.key, p.unix_user) for p in people.values()}
    for seat in store.seats.seats(course):
        way = way_in(store, seat, people.get(seat.participant or ""), logins=logins)
        check = checks.get(seat.key) or {}
        # a failed seat: the organizer reads the whole reason, with its fix
        missing = f"out of order: {seat.state_reason or 'marked failed'}" if way.out_of_order else way.missing
        out.append(
            {
                "seat": seat.key,
                "participant": seat.participant,
                "way": way.command or way.url,
                "missing": missing,
                "check": check.get("state"),
                "reason": check.get("reason"),
            }
        )
    return out


@dataclass(frozen=True, slots=True)
class Checklist:
    """Before day one: seats ready N/M, links opened K/M, participants who used their GPU J/M."""

    seats_ready: int
    seats_assigned: int
    links_opened: int
    links_total: int
    gpu_used: int
    participants: int
    broken: tuple[tuple[str, str], ...]  # (seat, reason) of seats whose last check failed, or that are failed
    unchecked: tuple[str, ...]
    checked_at: str | None
    agents: tuple[dict[str, Any], ...] = ()  # each agent's last apply, pending and failed steps (this course's)
    preparing: tuple[str, ...] = ()  # held seats whose way in the engine has not made for their holder yet

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "agents": [dict(a) for a in self.agents],
            "preparing": list(self.preparing),
            "seats_ready": self.seats_ready,
            "seats_assigned": self.seats_assigned,
            "links_opened": self.links_opened,
            "links_total": self.links_total,
            "gpu_used": self.gpu_used,
            "participants": self.participants,
            "broken": [list(b) for b in self.broken],
            "unchecked": list(self.unchecked),
            "checked_at": self.checked_at,
        }


def checklist(store: CourseStore, course: str | None = None) -> Checklist:
    """The readiness checklist of a course (from stored checks, token use and monitor samples)."""

    seats = [s for s in store.seats.seats(course) if s.participant]
    checks = store.delivery.readiness_of(course)
    ready = [s.key for s in seats if checks.get(s.key, {}).get("state") == "ready"]
    broken = tuple(
        (s.key, str(checks[s.key].get("reason") or "broken"))
        if checks.get(s.key, {}).get("state") == "broken"
        else (s.key, f"out of order: {s.state_reason or 'marked failed'}")  # never checked since it failed
        for s in seats
        if checks.get(s.key, {}).get("state") == "broken" or _out_of_order(s)
    )
    unchecked = tuple(s.key for s in seats if s.key not in checks)
    access = store.delivery.access_of(course)
    tokens = store.tokens.token_status(course)
    last = store.activity.last_active(seat_ids=[s.id for s in seats])
    times = sorted(str(c.get("checked_at")) for c in checks.values() if c.get("checked_at"))
    return Checklist(
        seats_ready=len(ready),
        seats_assigned=len(seats),
        links_opened=sum(1 for t in tokens if t["last_used_at"]),
        links_total=len(tokens),
        gpu_used=sum(1 for s in seats if last.get(s.id)),
        participants=len(tokens),
        broken=broken,
        unchecked=unchecked,
        checked_at=times[-1] if times else None,
        agents=_agents(store, seats[0].course if seats else store.courses.get_course(course).key),
        preparing=tuple(s.key for s in seats if _preparing(store, s, access)),
    )


def _agents(store: CourseStore, course: str) -> tuple[dict[str, Any], ...]:
    """The agents' status, each with only this course's failed steps."""
    out = []
    for a in store.agents.agent_statuses():
        failed = [f for f in a["failed"] if f.get("course") == course]
        out.append({**a, "failed": failed})
    return tuple(out)


def _out_of_order(seat: SeatView) -> bool:
    """A failed seat that its engine will not set up on its own (see :func:`way_in`)."""
    return seat.state == "failed" and seat.kind != "cloud" and seat.engine in registry.delivering()


def _preparing(store: CourseStore, seat: SeatView, access: dict[str, dict[str, Any]]) -> bool:
    made = access.get(seat.key) or {}
    return seat.engine in registry.delivering() and made.get("holder") != seat.participant and not _out_of_order(seat)


def build_access(
    ssh: str | None,
    url: str | None,
    jump: str | None,
    notes: list[str],
    kind: str | None,
    device: str | None,
    *,
    server_name: str | None = None,
) -> Access:
    """The :class:`Access` that ``seats connect`` flags describe, every part checked.

    ``server_name`` is the seat's server as the inventory names it: a label in a file, so it is
    refused as a host unless it is a full DNS name.
    """
    from gpuseat.core.delivery import ssh_command
    from gpuseat.core.hosts import check_host, jump_target, split_user_host
    from gpuseat.core.readiness import ACCESS_KINDS

    if kind is not None and kind not in ACCESS_KINDS:
        raise InputError(f"--kind {kind!r}", where="--kind", fix=f"one of {', '.join(ACCESS_KINDS)}")
    for n in notes:  # shown on the participant's page and in terminals: no escape sequence, no bidi override
        check_note(n)
    jump_host = None
    if jump and not ssh:  # a jump host is part of an SSH way in: with --url it was dropped unsaid
        raise InputError("--jump is the SSH jump host (ssh -J) and needs --ssh", where="--jump", fix="give --ssh too")
    if jump:
        jump_host = jump_target(jump, field="--jump")
    if ssh:
        user, host, port = split_user_host(ssh)
        if server_name and host == server_name and bare_label(host):
            raise InputError(
                f"{host!r} is the inventory's name for the server, not a host participants can reach",
                where="--ssh",
                fix="give the server's DNS name or IP address (for every seat of the host engine: "
                "`gpuseat engines settings host ssh_host=HOST`)",
            )
        return Access(
            kind=kind or "ssh",  # type: ignore[arg-type]
            host=host,
            port=port,
            user=user,
            jump_host=jump_host,
            command=ssh_command(host, user, port, jump_host) if user else None,
            device_uuid=device,
            notes=tuple(notes),
        )
    if url:
        from urllib.parse import urlsplit

        from gpuseat.urls import http_url

        parts = urlsplit(http_url(url, where="--url", example="https://hub.example.org"))  # its port and host too
        if parts.scheme not in ("http", "https") or not parts.hostname or any(ord(c) < 33 for c in url):
            raise InputError(f"--url {url!r}", where="--url", fix="give an http:// or https:// address")
        check_host(parts.hostname, field="--url")
        return Access(kind=kind or "web", host=parts.hostname, url=url, device_uuid=device, notes=tuple(notes))  # type: ignore[arg-type]
    if notes:
        return Access(kind=kind or "ssh", device_uuid=device, notes=tuple(notes))  # type: ignore[arg-type]
    raise InputError(
        "nothing to set", where="gpuseat seats connect", fix="give --ssh USER@HOST[:PORT], --url or --note"
    )
