"""Seat delivery, pure parts: what a shared GPU host must look like for a course, and how to tell
a participant the way in.

Text in, text out (no files, no processes): the device files a seat needs (from
``/proc/driver/nvidia-caps/mig-minors`` for MIG), the files ``gpuseat host up`` writes (authorized
keys, the sshd drop-in, ``/etc/profile.d``, per-user systemd slices), the ready-to-paste SSH command
and ``~/.ssh/config`` block, and the parse of the probe's output. The service layer applies these to
the machine; tests check them without root.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from gpuseat.core.hosts import bare_label
from gpuseat.core.logins import SYSTEM_LOGINS
from gpuseat.errors import InputError
from gpuseat.safe_text import clean

_MIG_MINOR = re.compile(r"^(?:gpu([0-9]{1,3})/gi([0-9]{1,3})(?:/ci([0-9]{1,3}))?/access|config|monitor) ([0-9]{1,7})$")


# -- hosts and the way in ------------------------------------------------------------------------
# the one host rule lives in gpuseat.core.hosts; its checks are re-exported here for the callers of old


@dataclass(frozen=True, slots=True)
class Instruction:
    """What a participant page shows: a command to paste, a URL, a ``~/.ssh/config`` block, notes."""

    command: str | None
    url: str | None
    ssh_config: str | None
    device_uuid: str | None
    notes: tuple[str, ...]
    missing: str | None  # set when there is no way in yet: what the organizer must set
    out_of_order: bool = False  # the seat is failed: nothing appears until the organizer acts (:func:`out_of_order`)


def not_yours(
    access: Mapping[str, object] | None, *, holder: str | None, login: str | None, others: Collection[str] = ()
) -> bool:
    """True when a stored way in was made for someone other than the seat's holder (a move or release
    the engine has not carried out yet): it is shown to nobody, never as another person's login.

    Made for someone else means: it names another holder, or its user is the login of another
    participant (``others``). A shared account the organizer set (``ubuntu@…``) is nobody's login."""
    if not access:
        return False
    made_for = access.get("holder")
    if made_for and made_for != holder:
        return True
    user = access.get("user")
    return bool(user and user != login and user in others)


def being_prepared(login: str | None) -> str:
    """What the holder sees while the engine hands the seat over to them."""
    tail = f"; you will log in as {login}" if login else ""
    return f"being prepared: your seat is being set up for you and appears here within a minute{tail}"


def out_of_order(seat: str, reason: str | None) -> str:
    """What the holder of a failed seat sees instead of "being prepared", which would never come true: an
    engine refused the seat for good (a Kubernetes seat whose host names no node) or someone took it out of
    service. The reason's first part says what is wrong; its fix (after ``To fix:``, the organizer's
    commands) is left to the organizer's views."""
    what = clean(" ".join((reason or "").partition("\nTo fix: ")[0].split()), one_line=True)
    what = f"{what[:300]}…" if len(what) > 300 else what
    return (
        f"your seat {seat} is out of order{f' ({what})' if what else ''}: it cannot be set up as it is and will "
        "not appear here on its own; your organizer has to fix the seat or move you to another one"
    )


def for_participant(missing: str) -> str:
    """What a participant's page says for a way in that is ``missing``: what is missing, not the organizer's
    commands that set it (a message naming a `` `gpuseat …` `` command says so after its first ": "); those
    are in the organizer's views (docs/participant.md)."""
    if "`gpuseat " not in missing:
        return missing
    return f"{missing.partition(': ')[0]}: your organizer has to set it; reload this page later"


def withheld(way: Instruction) -> bool:
    """True when no stored way in may be shown with ``way``: one made for someone else, or for a failed seat."""
    return way.out_of_order or (way.missing or "").startswith("being prepared")


def ssh_command(host: str, user: str | None, port: int | None = None, jump: str | None = None) -> str:
    """``ssh [-p PORT] [-J JUMP] user@host``, each part checked (it is pasted into a terminal)."""
    parts = ["ssh"]
    if port and port != 22:
        parts += ["-p", str(port)]
    if jump:
        parts += ["-J", shlex.quote(jump)]
    parts.append(f"{user}@{host}" if user else host)
    return " ".join(parts)


def ssh_config_block(alias: str, host: str, user: str | None, port: int | None, jump: str | None) -> str:
    """A ``~/.ssh/config`` entry so that ``ssh ALIAS`` just works."""
    lines = [f"Host {alias}", f"    HostName {host}"]
    if user:
        lines.append(f"    User {user}")
    if port and port != 22:
        lines.append(f"    Port {port}")
    if jump:
        lines.append(f"    ProxyJump {jump}")
    return "\n".join(lines) + "\n"


def address_advice(seat: str, engine: str | None = None) -> str:
    """What gives a seat that exists a reachable address: its own way in (``seats connect SEAT --ssh``), or the
    ``ssh_host`` setting of its ``engine`` (the host engine's), which that engine's next pass records for the
    seat's holder. ``engine``: the seat's engine when it takes ``ssh_host``; ``""`` when it takes none (only
    the seat's own way in then); None when not known (both, the setting for a seat of the host engine).

    An inventory file's ``ssh_host`` is never the fix: ``seats add --inventory`` reads the file once, for the
    seats it adds, and an edit of it afterwards changes no seat; the advice says so."""
    own = f"`gpuseat seats connect {seat} --ssh USER@HOST`"
    setting = (
        f"`gpuseat engines settings {engine or 'host'} ssh_host=HOST` (or --ssh-host HOST of `gpuseat host up`), "
        "which the engine's next pass (the agent's, or `gpuseat apply`) records for the seat's holder"
    )
    inventory = "an inventory file's ssh_host is read only by `gpuseat seats add --inventory`, for the seats it adds"
    if engine is None:
        return f"run {own}, or for a seat of the host engine set {setting}; {inventory}"
    if engine:
        return f"set {setting}, or run {own}; {inventory}"
    return f"run {own}; {inventory}"


def no_way_in(seat: str, engine: str | None = None) -> str:
    """What to set when a seat has no way in: the command, the setting (``engine``: as :func:`address_advice`)."""
    return f"no way in is set for this seat yet: {address_advice(seat, engine)}"


def instruction(
    access: Mapping[str, object] | None,
    *,
    seat: str,
    unix_user: str | None,
    server_name: str | None = None,
    engine: str | None = None,
) -> Instruction:
    """The way in for one seat from its stored access (``Access.to_dict`` form).

    An SSH access without a user takes the participant's Unix user. A host equal to the inventory's
    ``name`` (``server_name``) is never printed: it names a file, not a machine. ``engine``: the seat's
    engine where its ``ssh_host`` setting gives the seat an address, for what to set (:func:`address_advice`).
    """
    if not access:
        return Instruction(None, None, None, None, (), no_way_in(seat, engine))
    kind = str(access.get("kind") or "ssh")
    notes = tuple(str(n) for n in (access.get("notes") or ()))  # type: ignore[attr-defined]
    uuid = access.get("device_uuid")
    device = str(uuid) if uuid else None
    url = str(access["url"]) if access.get("url") else None
    host = str(access["host"]) if access.get("host") else None
    if host and server_name and host == server_name and bare_label(host):
        label = f"{host!r} is the inventory's name, not a reachable host: {address_advice(seat, engine)}"
        return Instruction(None, url, None, device, notes, label)
    given = str(access["command"]) if access.get("command") else None
    if kind in ("jupyter", "web") or (url and not host):
        return Instruction(given, url, None, device, notes, None)
    if not host:
        if given:
            return Instruction(given, url, None, device, notes, None)
        # an engine's pass recorded the holder's login before any address was set (a way in cleared)
        return Instruction(
            None, url, None, device, notes, f"no host is set for this seat yet: {address_advice(seat, engine)}"
        )
    user = str(access["user"]) if access.get("user") else unix_user
    port = int(str(access["port"])) if access.get("port") else None
    jump = str(access["jump_host"]) if access.get("jump_host") else None
    command = given or ssh_command(host, user, port, jump)
    config = ssh_config_block(f"gpuseat-{seat}", host, user, port, jump) if kind in ("ssh", "vm") else None
    return Instruction(command, url, config, device, notes, None)


# -- the shared host: device files -----------------------------------------------------------------


def parse_mig_minors(text: str, *, where: str = "mig-minors") -> dict[tuple[int, int, int | None], int]:
    """``/proc/driver/nvidia-caps/mig-minors`` (``gpu0/gi7/access 66`` per line) → ``(gpu, gi, ci or
    None)`` → capability minor, the one parser of it (host engine, Slurm's gres.conf). The ``config``
    and ``monitor`` lines are passed over; any other line is refused, as the file was not the driver's."""
    out: dict[tuple[int, int, int | None], int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _MIG_MINOR.match(line.strip())
        if m is None:
            raise InputError(
                f"mig-minors line {number} is not 'NAME MINOR': {line[:60]!r}",
                where=where,
                fix="give the unmodified /proc/driver/nvidia-caps/mig-minors file",
            )
        if m.group(1) is not None:
            ci = None if m.group(3) is None else int(m.group(3))
            out[(int(m.group(1)), int(m.group(2)), ci)] = int(m.group(4))
    return out


@dataclass(frozen=True, slots=True)
class SeatDevice:
    """Where a seat's GPU lives: the parent GPU's minor, and the MIG GI/CI ids for a MIG seat."""

    uuid: str
    minor: int
    gi: int | None = None
    ci: int | None = None
    profile: str | None = None  # MIG profile (``1g.18gb``) as nvidia-smi -L names it
    split: bool = False  # a whole GPU that has MIG devices (never a seat of its own)


def adopt(
    wanted: list[tuple[str, str, str | None]], devices: Mapping[str, SeatDevice], taken: set[str]
) -> dict[str, str]:
    """Seat key → device UUID for seats planned without one: ``(key, kind, profile)`` in key order.

    A MIG seat takes the next free MIG device of its profile, a whole-GPU seat the next free GPU
    without MIG devices, in the host's order; seats left without a match are not in the result.
    """
    free = [d for d in sorted(devices.values(), key=lambda d: (d.minor, d.gi or -1)) if d.uuid not in taken]
    out: dict[str, str] = {}
    for key, kind, profile in wanted:
        for d in free:
            fits = d.gi is not None and d.profile == profile if kind == "mig" else d.gi is None and not d.split
            if fits:
                out[key] = d.uuid
                free.remove(d)
                break
    return out


def device_files(dev: SeatDevice, minors: Mapping[tuple[int, int, int | None], int], dev_root: str) -> tuple[str, ...]:
    """The device files only this seat's holder may open (besides the shared control nodes).

    Whole GPU: ``/dev/nvidiaN``. MIG: the GI and CI capability files; the parent ``/dev/nvidiaN``
    is shared by every MIG seat of that GPU (see :func:`shared_files`).
    """
    root = dev_root.rstrip("/")
    if dev.gi is None:
        return (f"{root}/nvidia{dev.minor}",)
    gi = minors.get((dev.minor, dev.gi, None))
    ci = minors.get((dev.minor, dev.gi, dev.ci if dev.ci is not None else 0))
    if gi is None or ci is None:
        raise InputError(
            f"MIG device {dev.uuid} (GPU {dev.minor}, GI {dev.gi}, CI {dev.ci}) has no capability minor",
            where="/proc/driver/nvidia-caps/mig-minors",
            fix="check that the MIG instance exists (nvidia-smi mig -lgi) and that nvidia-caps is loaded",
        )
    return (f"{root}/nvidia-caps/nvidia-cap{gi}", f"{root}/nvidia-caps/nvidia-cap{ci}")


def shared_files(dev: SeatDevice, dev_root: str) -> tuple[str, ...]:
    """Files a MIG seat's holder shares with the GPU's other MIG seats (the parent GPU)."""
    return () if dev.gi is None else (f"{dev_root.rstrip('/')}/nvidia{dev.minor}",)


# -- the shared host: files gpuseat writes ---------------------------------------------------------

MARK = "# managed by gpuseat host up: rewritten on every run, do not edit"


def authorized_keys(user_key: str | None, probe_key: str | None, uuid: str) -> str:
    """The participant's root-owned authorized keys file: their key and gpuseat's loopback probe key.

    Both lines set ``CUDA_VISIBLE_DEVICES`` (sshd honours it with ``PermitUserEnvironment``); the
    probe key only works from loopback and cannot forward or open a terminal.
    """
    env = f'environment="CUDA_VISIBLE_DEVICES={uuid}"'
    lines = [MARK]
    if user_key:
        lines.append(f"{env} {user_key.strip()}")
    if probe_key:
        lines.append(f'from="127.0.0.1,::1",restrict,{env} {probe_key.strip()}')
    return "\n".join(lines) + "\n"


def sshd_dropin(keys_dir: str, group: str) -> str:
    """sshd settings: CUDA_VISIBLE_DEVICES from key options; course accounts use only gpuseat's keys."""
    return (
        f"{MARK}\n"
        "PermitUserEnvironment CUDA_VISIBLE_DEVICES\n"
        f"Match Group {group}\n"
        f"    AuthorizedKeysFile {keys_dir.rstrip('/')}/%u\n"
    )


def profile_script(pins: Mapping[str, str]) -> str:
    """``/etc/profile.d`` snippet: CUDA_VISIBLE_DEVICES for each seat holder's login shells."""
    lines = [MARK, 'case "$(id -un)" in']
    for user, uuid in sorted(pins.items()):
        lines.append(f"  {user}) export CUDA_VISIBLE_DEVICES={uuid} ;;")
    lines.append("esac")
    return "\n".join(lines) + "\n"


def slice_dropin(
    allow: Iterable[tuple[str, str]], *, cpu_quota: str | None = None, memory_max: str | None = None
) -> str:
    """A ``user-UID.slice.d`` drop-in: closed device policy, the seat's devices, CPU and memory caps."""
    lines = [MARK, "[Slice]", "DevicePolicy=closed"]
    lines += [f"DeviceAllow={path} {mode}" for path, mode in allow]
    if cpu_quota:
        lines.append(f"CPUQuota={cpu_quota}")
    if memory_max:
        lines.append(f"MemoryMax={memory_max}")
    return "\n".join(lines) + "\n"


def login_name(key: str, unix_user: str | None) -> str:
    """The participant's one login name on every engine: the roster's ``unix_user``, else a safe slug
    of their key (:func:`safe_user`). Shown on their page and by ``seats connect`` from the moment they
    hold a seat, whichever engine delivers it."""
    return unix_user or safe_user(key)


def safe_user(key: str) -> str:
    """A Unix user name for a participant without one: ``[a-z_][a-z0-9_-]``, at most 32 characters; the
    key itself when it is one and no system account (a participant keyed ``root`` gets ``root-<hash>``)."""
    base = re.sub(r"[^a-z0-9_-]+", "", key.lower())
    if not base or not (base[0].isalpha() or base[0] == "_"):
        base = "p" + base
    if len(base) <= 32 and base == key and base not in SYSTEM_LOGINS:
        return base
    return f"{base[:23]}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


# -- the probe -------------------------------------------------------------------------------------

PROBE_SCRIPT = 'printf "CUDA_VISIBLE_DEVICES=%s\\n" "${CUDA_VISIBLE_DEVICES-}"; exec NVIDIA_SMI -L'


@dataclass(frozen=True, slots=True)
class ProbeSeen:
    """What the participant saw: their CUDA_VISIBLE_DEVICES and the devices they can open."""

    cuda_visible: str | None
    visible: tuple[str, ...]


def parse_probe(text: str) -> ProbeSeen:
    """The probe's output → CUDA_VISIBLE_DEVICES and the devices ``nvidia-smi -L`` lists (per GPU its MIG
    devices, else the GPU: :func:`gpuseat.core.listing.visible_devices`)."""
    from gpuseat.core.listing import parse_list, visible_devices

    cvd: str | None = None
    for line in text.splitlines():
        if line.startswith("CUDA_VISIBLE_DEVICES="):
            cvd = line.partition("=")[2].strip() or None
    return ProbeSeen(cvd, visible_devices(parse_list(text)))
