"""Cloud seats' SkyPilot tasks: one task per seat, a start/stop schedule, hours run to date.

The SkyPilot engine (:mod:`gpuseat.engines.skypilot.engine`) launches each seat's :func:`task` through
SkyPilot's Python API; ``gpuseat seats skypilot`` writes the same tasks as files, with a schedule, for
organizers who run ``sky`` themselves.

* :func:`task` — a SkyPilot task per cloud seat: cloud, region and instance type from the chosen plan
  option's offer, disk size, and a setup step (:func:`setup_script`) that creates the seat's participant
  as a Unix user with their SSH key, installs gpuseat from a wheel built from this checkout and shipped
  with ``file_mounts`` (never a bare name from a package index, where anyone could register it), and
  runs ``gpuseat bench`` once when PyTorch is there (setup re-runs on every ``sky launch``; a marker file
  keeps the benchmark to one run). The task sets no idle ``autostop``: its idle clock also runs inside a
  session, and a stopped seat cannot be started again by its participant; the engine stops seats at each
  access window's end (and sets a hard-limit autostop at launch), the written schedule at each
  session's end (a 24/7 course: at the course's end).
* :func:`windows` / :func:`crontab` / :func:`systemd_units` — one ``sky start`` before and one ``sky stop``
  after each lab session (the schedule's merged intervals, :meth:`gpuseat.core.course.Schedule.intervals`).
* :func:`hours_to_date` — what each seat has run so far: the scheduled windows up to now, corrected by
  ``sky status`` when given (a cluster still UP after its stop counts until now). The portal's
  "cost so far" prices these runs with :func:`cost_to_date` (the offer's own billing rule).

Cluster names carry the course and seat keys and are checked against SkyPilot's name rule; every value
that reaches YAML goes through a YAML dumper, every word that reaches a shell line through ``shlex.quote``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

from gpuseat.catalog.offers import Offer
from gpuseat.core.cost import billed_seconds, hourly_usd
from gpuseat.core.delivery import login_name
from gpuseat.core.logins import UNIX_USER
from gpuseat.engines.base import record_machine
from gpuseat.errors import InputError, did_you_mean

if TYPE_CHECKING:
    from gpuseat.store import CourseStore

# gpuseat provider → SkyPilot cloud name (clouds SkyPilot can launch that gpuseat has hourly offers for)
SKY_CLOUDS: dict[str, str] = {"aws": "aws", "gcp": "gcp", "azure": "azure", "lambda": "lambda", "runpod": "runpod"}
# SkyPilot's cluster name rule (sky/utils/common_utils.py: check_cluster_name_is_valid), kept shorter
# than GCP's 35-character limit on instance names.
CLUSTER_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,33}[a-z0-9])?$")
_KEY = re.compile(r"^[a-z0-9][a-z0-9-]*$")
# a direct reference only (PEP 508 ``name[extras] @ URL`` or a bare https/git+https URL): a bare name would
# come from a package index, where gpuseat is not published and anyone could register the name
PIP_SPEC = re.compile(r"^(gpuseat(\[[a-z]+(,[a-z]+)*\])? @ )?(https|git\+https)://[A-Za-z0-9_./@%+:=#-]{1,300}$")
_WHEEL = re.compile(r"^gpuseat-[0-9][A-Za-z0-9_.+!]*-py3-none-any\.whl$")
# where file_mounts puts the wheelhouse on the VM (SkyPilot expands ~ to the cluster user's home)
REMOTE_WHEELS = "~/.gpuseat/wheels"
_GCP_ATTACHED = re.compile(r"^(?P<host>[a-z0-9-]+)\+(?P<count>\d+)x(?P<gpu>[A-Za-z0-9-]+)$")
MAX_DISK_GB = 65536


def cluster_name(course: str, seat: str) -> str:
    """``gs-<course>-<seat>``: lower case, SkyPilot's rule, 35 characters at most."""
    for what, key in (("course", course), ("seat", seat)):
        if not _KEY.fullmatch(key.lower()):
            raise InputError(
                f"{what} key {key!r} cannot be part of a cluster name",
                where=f"{what} key",
                fix="use letters, digits and '-'",
            )
    name = f"gs-{course.lower()}-{seat.lower()}"
    if not CLUSTER_NAME.fullmatch(name):
        raise InputError(
            f"cluster name {name!r} is longer than 35 characters or malformed",
            where="course/seat key",
            fix="use shorter course or seat keys",
        )
    return name


@dataclass(frozen=True)
class CloudSeat:
    """One cloud seat: its course, key, the offer the chosen plan option rents for it, and its holder's
    Unix login and SSH public key (None while nobody holds the seat)."""

    course: str
    seat: str
    offer: Offer
    user: str | None = None
    ssh_key: str | None = None

    def __post_init__(self) -> None:
        if self.user is not None and not UNIX_USER.match(self.user):
            raise InputError(
                f"{self.user!r} is not a Unix user name",
                where=f"seat {self.seat}: participant's unix_user",
                fix="lowercase letters, digits, '_' and '-', at most 32, not starting with a digit or '-'",
            )
        if self.ssh_key is not None:
            from gpuseat.core.roster import check_ssh_key

            if any(ch in self.ssh_key.strip() for ch in "\r\n\x00'"):
                raise InputError("the SSH key has a line break or quote", where=f"seat {self.seat}", fix="one line")
            try:
                object.__setattr__(self, "ssh_key", check_ssh_key(self.ssh_key))
            except ValueError as exc:
                raise InputError(
                    f"bad SSH key: {exc}", where=f"seat {self.seat}: participant's ssh_key", fix="one public key line"
                ) from None

    @property
    def cluster(self) -> str:
        """The SkyPilot cluster name."""
        return cluster_name(self.course, self.seat)

    @property
    def cloud(self) -> str:
        """SkyPilot's name of the offer's cloud; offers SkyPilot cannot launch are input errors."""
        if self.offer.kind != "cloud" or self.offer.provider not in SKY_CLOUDS:
            raise InputError(
                f"offer {self.offer.id} ({self.offer.provider}, {self.offer.kind}) is not a cloud SkyPilot launches",
                where=f"seat {self.seat}",
                fix=f"cloud seats need an offer from {', '.join(SKY_CLOUDS)}",
            )
        return SKY_CLOUDS[self.offer.provider]


@dataclass(frozen=True)
class TaskOptions:
    """Settings of every seat's task.

    ``wheelhouse`` is a local folder with exactly one ``gpuseat-*.whl`` (``pip wheel --no-deps -w DIR .``
    in this checkout), plus, for ``offline`` installs (``pip --no-index``), the wheels of its
    dependencies; ``file_mounts`` ships it to the VM. ``gpuseat_spec`` is the alternative: a direct
    reference such as ``gpuseat[bench] @ https://…/gpuseat-0.1.0-py3-none-any.whl``. With neither, the
    setup only creates the participant's login.
    """

    disk_gb: int = 50
    wheelhouse: str | None = None
    offline: bool = False
    gpuseat_spec: str | None = None
    bench_iterations: int = 10000

    def __post_init__(self) -> None:
        if not 1 <= self.disk_gb <= MAX_DISK_GB:
            raise InputError(f"disk size {self.disk_gb} GB out of range", where="--disk-gb", fix="1 to 65536 GB")
        if self.gpuseat_spec is not None and not PIP_SPEC.fullmatch(self.gpuseat_spec):
            raise InputError(
                f"{self.gpuseat_spec!r} is not a pip requirement gpuseat accepts",
                where="--gpuseat-spec",
                fix="a direct reference such as 'gpuseat[bench] @ https://host/gpuseat-0.1.0-py3-none-any.whl'"
                " (or ship a wheel with --wheelhouse); a bare name would come from a package index",
            )
        if self.wheelhouse is not None and self.gpuseat_spec is not None:
            raise InputError("both a wheelhouse and a pip spec", where="--gpuseat-spec", fix="give one of them")
        if self.offline and self.wheelhouse is None:
            raise InputError("--offline installs from the wheelhouse", where="--offline", fix="add --wheelhouse DIR")
        if not 1 <= self.bench_iterations <= 1_000_000:
            raise InputError("bench iterations out of range", where="--bench-iterations", fix="1 to 1000000")


def gpuseat_wheel(wheelhouse: str) -> str:
    """The one gpuseat wheel's file name in ``wheelhouse`` (an input error when there is none or several)."""
    folder = Path(wheelhouse)
    found = sorted(p.name for p in folder.glob("gpuseat-*.whl")) if folder.is_dir() else []
    if len(found) != 1 or not _WHEEL.fullmatch(found[0]):
        raise InputError(
            f"{wheelhouse} holds {len(found)} gpuseat wheels{': ' + ', '.join(found) if found else ''}",
            where="--wheelhouse",
            fix="a folder with exactly one gpuseat-VERSION-py3-none-any.whl: pip wheel --no-deps -w DIR .",
        )
    return found[0]


def _resources(seat: CloudSeat, opts: TaskOptions) -> dict[str, Any]:
    res: dict[str, Any] = {"cloud": seat.cloud}
    if seat.offer.region:
        res["region"] = seat.offer.region
    m = _GCP_ATTACHED.fullmatch(seat.offer.instance_type)
    if m:  # GCP host + attachable GPU ("n1-standard-4+1xT4"): SkyPilot wants both fields
        res["instance_type"] = m.group("host")
        res["accelerators"] = {m.group("gpu"): int(m.group("count"))}
    else:
        res["instance_type"] = seat.offer.instance_type
    res["disk_size"] = opts.disk_gb
    return res


def _login_lines(seat: CloudSeat) -> list[str]:
    """Create the holder's account (if new) and make their key the only one in authorized_keys.

    Everything is under ``$ROOT`` (empty on the VM), and ids and home come from ``$ROOT/etc/passwd``, so
    the same lines run against a throw-away root (``useradd --prefix``) in tests.
    """
    if seat.user is None:
        return ["echo 'gpuseat: nobody holds this seat yet: no participant login created'"]
    lines = [
        f"P_USER={seat.user}",
        f"P_KEY={shlex.quote(seat.ssh_key or '')}",
        "# a hand-over: earlier holders of this seat lose their key, their account expires, their processes end",
        'HOLDERS="$ROOT/etc/gpuseat-holders"',
        '$SUDO touch "$HOLDERS"',
        "# an account the image already has (its admin with sudo, a system account) is never handed to a participant",
        'if grep -q "^$P_USER:" "$ROOT/etc/passwd" && ! grep -qx "$P_USER" "$HOLDERS"; then',
        '  echo "gpuseat: $P_USER is an account of this image, not one gpuseat made: not given to a participant'
        ' (give them another unix_user in the roster)" >&2',
        "  exit 1",
        "fi",
        'for OLD in $(cat "$HOLDERS"); do',
        '  if [ "$OLD" != "$P_USER" ]; then',
        '    OLD_HOME=$(awk -F: -v u="$OLD" \'$1 == u {print $6}\' "$ROOT/etc/passwd")',
        '    if [ -n "$OLD_HOME" ]; then $SUDO rm -f "$ROOT$OLD_HOME/.ssh/authorized_keys"; fi',
        '    $SUDO usermod ${ROOT:+--prefix "$ROOT"} --expiredate 1 "$OLD" || true',
        '    if [ -z "$ROOT" ]; then $SUDO pkill -KILL -u "$OLD" || true; fi',
        "  fi",
        "done",
        'if ! grep -q "^$P_USER:" "$ROOT/etc/passwd"; then',
        '  $SUDO useradd ${ROOT:+--prefix "$ROOT"} --create-home --shell /bin/bash "$P_USER"',
        "fi",
        '$SUDO usermod ${ROOT:+--prefix "$ROOT"} --expiredate "" "$P_USER"  # a returning holder',
        'grep -qx "$P_USER" "$HOLDERS" || echo "$P_USER" | $SUDO tee -a "$HOLDERS" > /dev/null',
        'P_UID=$(awk -F: -v u="$P_USER" \'$1 == u {print $3}\' "$ROOT/etc/passwd")',
        'P_GID=$(awk -F: -v u="$P_USER" \'$1 == u {print $4}\' "$ROOT/etc/passwd")',
        'P_HOME=$(awk -F: -v u="$P_USER" \'$1 == u {print $6}\' "$ROOT/etc/passwd")',
        '$SUDO install -d -m 700 -o "$P_UID" -g "$P_GID" "$ROOT$P_HOME/.ssh"',
    ]
    if seat.ssh_key:
        lines += [
            'printf \'%s\\n\' "$P_KEY" | $SUDO tee "$ROOT$P_HOME/.ssh/authorized_keys" > /dev/null',
            '$SUDO chown "$P_UID:$P_GID" "$ROOT$P_HOME/.ssh/authorized_keys"',
            '$SUDO chmod 600 "$ROOT$P_HOME/.ssh/authorized_keys"',
        ]
    else:  # a key taken out of the roster (leaked, lost) lets nobody in any more
        lines += [
            '$SUDO rm -f "$ROOT$P_HOME/.ssh/authorized_keys"',
            'echo "gpuseat: $P_USER has no SSH key in the roster: add one, then sky launch again"',
        ]
    return lines


def _install_lines(opts: TaskOptions) -> list[str]:
    pip = "python3 -m pip install --user --disable-pip-version-check"
    if opts.wheelhouse is not None:
        wheel = gpuseat_wheel(opts.wheelhouse)
        index = " --no-index" if opts.offline else ""
        return [
            f'W="$HOME/{REMOTE_WHEELS.removeprefix("~/")}"  # file_mounts copies the wheelhouse here',
            f'{pip}{index} --find-links "$W" "$W/{wheel}"',
        ]
    if opts.gpuseat_spec is not None:
        return [f"{pip} {shlex.quote(opts.gpuseat_spec)}"]
    return []


def setup_script(opts: TaskOptions, seat: CloudSeat | None = None) -> str:
    """The participant's login, then gpuseat from the shipped wheel, then its benchmark once (when PyTorch
    is there: a missing PyTorch or a failing benchmark never fails the setup)."""
    lines = [
        "set -eu",
        'ROOT="${GPUSEAT_ROOT:-}"  # empty on the VM; a throw-away root when the script is tested',
        'SUDO=""',
        'if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi',
    ]
    if seat is not None:
        lines += _login_lines(seat)
    install = _install_lines(opts)
    if not install:
        lines.append("echo 'gpuseat: no gpuseat wheel shipped (--wheelhouse): benchmark skipped'")
        return "\n".join(lines) + "\n"
    lines += install
    lines += [
        'export PATH="$HOME/.local/bin:$PATH"',
        'mkdir -p "$HOME/.gpuseat"',
        'if [ ! -f "$HOME/.gpuseat/bench.done" ]; then',
        "  if python3 -c 'import torch' > /dev/null 2>&1; then",
        f'    if gpuseat bench --iterations {int(opts.bench_iterations)} > "$HOME/.gpuseat/bench.txt" 2>&1; then',
        '      cat "$HOME/.gpuseat/bench.txt"',
        '      touch "$HOME/.gpuseat/bench.done"',
        "    else",
        "      echo 'gpuseat: the benchmark failed (see ~/.gpuseat/bench.txt); setup goes on'",
        "    fi",
        "  else",
        "    echo 'gpuseat: no PyTorch on this image: benchmark skipped (use an image with PyTorch)'",
        "  fi",
        "fi",
    ]
    return "\n".join(lines) + "\n"


def task(seat: CloudSeat, opts: TaskOptions) -> dict[str, Any]:
    """The SkyPilot task of one seat, as data (see :func:`task_yaml`)."""
    doc: dict[str, Any] = {
        "name": seat.cluster,
        "resources": _resources(seat, opts),
        "envs": {"GPUSEAT_COURSE": seat.course, "GPUSEAT_SEAT": seat.seat, "GPUSEAT_OFFER": seat.offer.id},
    }
    if opts.wheelhouse is not None:
        doc["file_mounts"] = {REMOTE_WHEELS: str(Path(opts.wheelhouse).resolve())}
    doc["setup"] = setup_script(opts, seat)
    return doc


def task_yaml(seat: CloudSeat, opts: TaskOptions) -> str:
    """The task file's text (``yaml.safe_dump``: values are quoted by the dumper, never by hand)."""
    head = f"# gpuseat: SkyPilot task of seat {seat.seat} ({seat.offer.id}); sky launch -c {seat.cluster} THIS_FILE\n"
    return head + yaml.safe_dump(task(seat, opts), sort_keys=False, default_flow_style=False)


# -- schedule --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """When the seats run around one lab session: started ``lead`` before it, stopped at its end."""

    session_start: datetime
    start: datetime
    stop: datetime


def windows(intervals: Iterable[tuple[datetime, datetime]], *, lead_min: int = 10) -> list[Window]:
    """One window per lab session (merged intervals); the start moves ``lead_min`` earlier for booting."""
    if not 0 <= lead_min <= 240:
        raise InputError(f"lead {lead_min} min out of range", where="--lead", fix="0 to 240 minutes")
    out: list[Window] = []
    for begin, end in intervals:
        start = begin - timedelta(minutes=lead_min)
        if out and start <= out[-1].stop:  # the lead would overlap the previous window: keep running
            out[-1] = Window(out[-1].session_start, out[-1].start, end)
        else:
            out.append(Window(begin, start, end))
    return out


def check_timezone(name: str) -> ZoneInfo:
    """The course's time zone (IANA name)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError(
            f"unknown time zone {name!r}", where="course time zone", fix="use an IANA name such as Europe/Berlin or UTC"
        ) from None


def _sky(verb: str, clusters: Sequence[str]) -> str:
    for c in clusters:
        if not CLUSTER_NAME.fullmatch(c):
            raise InputError(f"bad cluster name {c!r}", where="schedule", fix="cluster names come from cluster_name()")
    return " ".join(["sky", verb, "--yes", *(shlex.quote(c) for c in clusters)])


def crontab(course: str, clusters: Sequence[str], wins: Sequence[Window], timezone: str) -> str:
    """Crontab lines: one ``sky start`` and one ``sky stop`` per session, each guarded by its year.

    Times are in the course's time zone: ``CRON_TZ`` (cronie) sets it; with a cron that ignores it,
    run the machine in that zone or use the systemd timers.
    """
    check_timezone(timezone)
    lines = [
        f"# gpuseat: start/stop the {len(clusters)} cloud seats of course {course} around each lab session",
        f"CRON_TZ={timezone}",
    ]
    for w in wins:
        for at, verb in ((w.start, "start"), (w.stop, "stop")):
            guard = f'[ "$(date +\\%Y)" = {at.year} ] &&'
            lines.append(f"{at.minute} {at.hour} {at.day} {at.month} * {guard} {_sky(verb, clusters)}")
    return "\n".join(lines) + "\n"


def systemd_units(
    course: str, clusters: Sequence[str], wins: Sequence[Window], timezone: str, *, sky: str = "/usr/local/bin/sky"
) -> dict[str, str]:
    """A start and a stop timer (one ``OnCalendar=`` per session, with year and time zone) and their services."""
    check_timezone(timezone)
    if not re.fullmatch(r"/[A-Za-z0-9_./-]{1,200}", sky):
        raise InputError(f"bad path {sky!r}", where="--sky", fix="an absolute path to the sky program")
    units = {}
    ends: tuple[tuple[str, Callable[[Window], datetime]], ...] = (
        ("start", lambda w: w.start),
        ("stop", lambda w: w.stop),
    )
    for verb, at in ends:
        unit = f"gpuseat-{course}-{verb}"
        cal = "\n".join(f"OnCalendar={at(w).strftime('%Y-%m-%d %H:%M:%S')} {timezone}" for w in wins)
        units[f"{unit}.timer"] = (
            f"[Unit]\nDescription=gpuseat: {verb} the cloud seats of course {course} around each lab session\n\n"
            f"[Timer]\n{cal}\nPersistent=false\n\n[Install]\nWantedBy=timers.target\n"
        )
        units[f"{unit}.service"] = (
            f"[Unit]\nDescription=gpuseat: sky {verb} for course {course}\n\n"
            f"[Service]\nType=oneshot\nExecStart={_sky(verb, clusters).replace('sky', sky, 1)}\n"
        )
    return units


def launch_script(seats: Sequence[CloudSeat]) -> str:
    """Run once before the course: launch each seat (setup + benchmark), then stop it until the first session."""
    lines = [
        "#!/bin/sh",
        "# gpuseat: create every cloud seat once; the schedule then starts and stops them",
        "set -e",
        'cd "$(dirname "$0")"',
    ]
    for s in seats:
        c = shlex.quote(s.cluster)
        lines.append(f"sky launch --yes --cluster {c} {shlex.quote(f'{s.cluster}.yaml')}")
        lines.append(f"sky stop --yes {c}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class SkyPilotFiles:
    """Files written by :func:`write`."""

    tasks: list[str]
    schedule: list[str]
    windows: int
    warnings: list[str]

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return asdict(self)


def write(
    out: Path,
    course: str,
    seats: Sequence[CloudSeat],
    intervals: Iterable[tuple[datetime, datetime]],
    timezone: str,
    opts: TaskOptions,
    *,
    lead_min: int = 10,
    force: bool = False,
) -> SkyPilotFiles:
    """Write ``<cluster>.yaml`` per seat, ``launch.sh``, ``crontab`` and the systemd units into ``out``.

    ``out`` is new, empty or gpuseat's own (its manifest lists the files): files gpuseat did not write are
    never replaced without ``force`` (:func:`gpuseat.services.carving.write_artifacts`).
    """
    if not seats:
        raise InputError(
            "the course has no cloud seats",
            where=f"course {course}",
            fix="add cloud seats from the plan (gpuseat seats add --from-plan)",
        )
    names = [s.cluster for s in seats]
    if len(set(names)) != len(names):
        raise InputError("two seats map to one cluster name", where=f"course {course}", fix="give seats distinct keys")
    wins = windows(intervals, lead_min=lead_min)
    from gpuseat.render.base import Artifact
    from gpuseat.services.carving import write_artifacts

    artifacts = [Artifact(path=f"{s.cluster}.yaml", kind="skypilot-task", text=task_yaml(s, opts)) for s in seats]
    artifacts += [
        Artifact(path="launch.sh", kind="shell", text=launch_script(seats)),
        Artifact(path="crontab", kind="crontab", text=crontab(course, names, wins, timezone)),
        *(Artifact(path=n, kind="systemd", text=t) for n, t in systemd_units(course, names, wins, timezone).items()),
    ]
    done = write_artifacts(out, artifacts, force=force)
    tasks = [str(p) for p in done.paths if p.suffix == ".yaml"]
    schedule = [str(p) for p in done.paths if p.suffix != ".yaml"]
    retired = sorted({s.offer.id for s in seats if "retired" in s.offer.note.lower()})
    warnings = [
        f"{o} is a retired instance type: SkyPilot's catalog no longer lists it, so `sky launch` will "
        "refuse it; choose a current offer for a real course"
        for o in retired
    ]
    return SkyPilotFiles(tasks, schedule, len(wins), warnings)


# -- seats from the store ------------------------------------------------------------------------------


def offer_for(
    seat_profile: str | None,
    plan_option: Mapping[str, Any] | None,
    offers: Sequence[Offer],
    *,
    seat: str,
    unknown_fix: Callable[[], str] | None = None,
) -> Offer:
    """The offer of a cloud seat: its ``profile`` when that is an offer id, else the plan option's one cloud offer
    (a profile that names an offer the course lacks is refused: the seat is never launched on another offer).

    ``offers`` are the course's (:func:`gpuseat.services.seat_sources.course_offers`: the catalog's and its
    own stored offers files'). A plan group on an offer they lack counts as cloud by its mode (``instance``),
    so a seat is never launched on another group's offer; an offer they lack is named, with ``unknown_fix``
    (how the course gets it back) as the fix."""
    by_id = {o.id: o for o in offers}
    if seat_profile and seat_profile in by_id:
        return by_id[seat_profile]
    groups = (plan_option or {}).get("groups", ())
    cloud = sorted(
        {
            str(g["offer"])
            for g in groups
            if g.get("offer")
            and (by_id[g["offer"]].kind == "cloud" if g["offer"] in by_id else g.get("mode") == "instance")
        }
    )
    named = ":" in (seat_profile or "")  # an offer id (provider:name), never a MIG or vGPU profile
    if len(cloud) == 1 and cloud[0] in by_id and not named:
        return by_id[cloud[0]]
    if seat_profile and (named or seat_profile in cloud or not cloud):  # the seat's own offer, gone
        lacking: str | None = seat_profile
    else:
        lacking = cloud[0] if len(cloud) == 1 else None  # the plan's one cloud offer, gone
    if lacking is not None:
        raise InputError(
            f"it rents offer {lacking}, which is neither in gpuseat's catalog nor in the offers files stored with "
            f"its course.{did_you_mean(lacking, by_id)}",
            where=f"seat {seat}",
            fix=unknown_fix() if unknown_fix is not None else "set the seat's profile to an offer id of the course",
        )
    raise InputError(
        f"cannot tell which offer the cloud seat rents ({'several' if cloud else 'no'} cloud offers in the plan "
        f"option).{did_you_mean(seat_profile or '', by_id)}",
        where=f"seat {seat}",
        fix="choose a plan option (gpuseat course create --plan-option N) or set the seat's profile to an offer id",
    )


# -- hours and cost to date ----------------------------------------------------------------------------

_STATUSES = ("UP", "STOPPED", "INIT")


def parse_sky_status(text: str) -> dict[str, str]:
    """``sky status`` output → cluster name → UP | STOPPED | INIT (rows whose first word is a cluster)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        words = line.split()
        if not words or not CLUSTER_NAME.fullmatch(words[0]):
            continue
        state = next((w for w in words[1:] if w in _STATUSES), None)
        if state is not None:
            out[words[0]] = state
    return out


@dataclass(frozen=True)
class CloudRunHours:
    """How long one cloud seat ran: one entry per run (seconds), and what ``sky status`` said."""

    seat: str
    cluster: str
    runs_s: tuple[int, ...]
    status: str | None
    note: str

    @property
    def hours(self) -> float:
        """Hours run to date."""
        return sum(self.runs_s) / 3600

    def to_dict(self) -> dict[str, Any]:
        """Plain data, with the hours."""
        return {**asdict(self), "runs_s": list(self.runs_s), "hours": round(self.hours, 4)}


def hours_to_date(
    seats: Sequence[CloudSeat], wins: Sequence[Window], now: datetime, status: Mapping[str, str] | None = None
) -> list[CloudRunHours]:
    """Per seat, the runs so far: scheduled windows cut at ``now``; a cluster UP outside its windows ran on."""
    out = []
    for s in seats:
        runs = [int((min(w.stop, now) - w.start).total_seconds()) for w in wins if w.start < now]
        state = (status or {}).get(s.cluster)
        note = "from the schedule"
        in_window = any(w.start <= now < w.stop for w in wins)
        if status is not None and state is None:
            note = "not in sky status (not launched yet, or torn down)"
        elif state == "UP" and not in_window:
            last = max((w.stop for w in wins if w.stop <= now), default=None)
            if last is not None:
                runs.append(int((now - last).total_seconds()))
                note = f"still UP after the stop at {last:%Y-%m-%d %H:%M}: counted until now"
        elif state == "STOPPED" and in_window:
            note = "STOPPED during a session: the schedule's hours are an upper bound"
        elif state is not None:
            note = f"{state}, as scheduled"
        out.append(CloudRunHours(s.seat, s.cluster, tuple(r for r in runs if r > 0), state, note))
    return out


def cost_to_date(hours: CloudRunHours, offer: Offer) -> float:
    """USD so far for one seat's runs, each billed by the offer's rule (increment, minimum charge)."""
    if offer.monthly:
        raise InputError(
            f"offer {offer.id} is billed monthly, not per run",
            where=f"seat {hours.seat}",
            fix="cloud seats use hourly offers",
        )
    return float(hourly_usd(offer.price_usd, sum(billed_seconds(r, offer) for r in hours.runs_s)))


# -- the course store ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CloudCourse:
    """A course's cloud seats with their offers, its sessions (course-local times) and time zone."""

    key: str
    timezone: str
    seats: tuple[CloudSeat, ...]
    intervals: tuple[tuple[datetime, datetime], ...]


def cloud_course_from_store(store: CourseStore, course: str | None, offers: Sequence[Offer]) -> CloudCourse:
    """The course's ``cloud`` seats, each with the offer the chosen plan option rents for it, among ``offers``
    (the course's: :func:`gpuseat.services.seat_sources.course_offers`)."""
    from gpuseat.services.seat_sources import unknown_offer_fix

    view = store.courses.get_course(course)
    people = {p.key: p for p in store.roster.participants(view.key)}
    seats = []
    for s in store.seats.seats(view.key):
        if s.kind != "cloud":
            continue
        holder = people.get(s.participant or "")
        user = key = None
        if holder is not None:
            user = login_name(holder.key, holder.unix_user)  # the one login name on every engine
            key = holder.ssh_key
        offer = offer_for(
            s.profile, view.plan_option, offers, seat=s.key, unknown_fix=lambda: unknown_offer_fix(store, view.key)
        )
        seats.append(CloudSeat(view.key, s.key, offer, user=user, ssh_key=key))
    sched = store.courses.course_file(view.key).schedule
    return CloudCourse(view.key, view.timezone, tuple(seats), tuple(sched.intervals()))


def write_for_course(
    store: CourseStore,
    course: str | None,
    out: Path,
    offers: Sequence[Offer],
    opts: TaskOptions,
    *,
    lead_min: int = 10,
    force: bool = False,
) -> SkyPilotFiles:
    """``gpuseat seats skypilot``: write the files and record each seat's cluster (engine skypilot)."""
    cc = cloud_course_from_store(store, course, offers)
    written = write(out, cc.key, cc.seats, cc.intervals, cc.timezone, opts, lead_min=lead_min, force=force)
    current = {s.key: s for s in store.seats.seats(cc.key)}
    for s in cc.seats:
        row = current[s.seat]
        if (row.engine, row.engine_ref) != ("skypilot", s.cluster):
            why = f"not launched yet: SkyPilot task written ({s.offer.id}); launch.sh or the agent launches it"
            record_machine(store, cc.key, row, "skypilot", s.cluster, why)
    return written


@dataclass(frozen=True)
class SeatCost:
    """One cloud seat's hours and cost so far (what the portal shows as "cost so far")."""

    hours: CloudRunHours
    offer: str
    usd: float

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {**self.hours.to_dict(), "offer": self.offer, "usd": round(self.usd, 2)}


def cost_so_far(
    store: CourseStore,
    course: str | None,
    offers: Sequence[Offer],
    now: datetime,
    *,
    sky_status: str | None = None,
    lead_min: int = 10,
) -> list[SeatCost]:
    """Hours each cloud seat ran to ``now`` (an aware time) and their cost, from the schedule and ``sky status``."""
    cc = cloud_course_from_store(store, course, offers)
    if now.tzinfo is None:
        raise InputError("now must carry a time zone", where="now", fix="pass datetime.now(UTC)")
    local_now = now.astimezone(check_timezone(cc.timezone)).replace(tzinfo=None)
    status = parse_sky_status(sky_status) if sky_status is not None else None
    hours = hours_to_date(cc.seats, windows(cc.intervals, lead_min=lead_min), local_now, status)
    return [SeatCost(h, s.offer.id, cost_to_date(h, s.offer)) for h, s in zip(hours, cc.seats, strict=True)]
