"""The SkyPilot seat engine: one cluster per cloud seat, the participant's login made by the task's setup.

* :meth:`SkyPilotEngine.provision` writes the seat's task (:func:`gpuseat.services.cloud.task_yaml`, with
  its holder's Unix user and key) and runs ``sky launch``; the seat becomes ``running`` with the cluster
  as its engine reference;
* :meth:`SkyPilotEngine.connect` asks ``sky status --ip`` and returns the participant's ``ssh`` line;
* :meth:`SkyPilotEngine.probe` runs ``nvidia-smi -L`` on the cluster *as the participant*
  (``ssh CLUSTER sudo -n -u USER -- nvidia-smi -L``; SkyPilot writes the ssh alias) and judges what it
  lists with :func:`~gpuseat.core.readiness.judge`;
* :meth:`SkyPilotEngine.revoke` runs :func:`revoke_script` there (their key removed, their account
  expired, their processes ended) and drops their seat;
* :meth:`SkyPilotEngine.teardown` runs ``sky down``.

Every command is an argument list; the one line a remote shell reads is built with ``shlex``, from a
user name checked against the Unix pattern. ``runner`` (tests) replaces :func:`subprocess.run`.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from gpuseat.core.readiness import Access, Readiness, judge
from gpuseat.errors import EngineError, InputError
from gpuseat.services import cloud

if TYPE_CHECKING:
    from gpuseat.services.courses import CourseStore, ParticipantView, SeatView

ENGINE: Final[Literal["skypilot"]] = "skypilot"
ACTOR = "engine:skypilot"
Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def revoke_script(user: str) -> str:
    """What runs on the VM to take a holder's access away (``$GPUSEAT_ROOT`` as in the setup)."""
    if not cloud.UNIX_USER.fullmatch(user):
        raise InputError(f"{user!r} is not a Unix user name", where="participant", fix="a roster unix_user")
    return "\n".join(
        [
            "set -eu",
            'ROOT="${GPUSEAT_ROOT:-}"',
            'SUDO=""',
            'if [ "$(id -u)" != 0 ]; then SUDO="sudo -n"; fi',
            f"OLD={user}",
            'OLD_HOME=$(awk -F: -v u="$OLD" \'$1 == u {print $6}\' "$ROOT/etc/passwd")',
            'if [ -z "$OLD_HOME" ]; then echo "gpuseat: no user $OLD here"; exit 0; fi',
            '$SUDO rm -f "$ROOT$OLD_HOME/.ssh/authorized_keys"',
            '$SUDO usermod ${ROOT:+--prefix "$ROOT"} --expiredate 1 "$OLD"',
            'if [ -z "$ROOT" ]; then $SUDO pkill -KILL -u "$OLD" || true; fi',
            'echo "gpuseat: $OLD has no access any more"',
        ]
    )


def _default_runner(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=3600, check=False)
    except FileNotFoundError:
        raise EngineError(f"{argv[0]} is not installed", where=argv[0], fix="pip install skypilot") from None


class SkyPilotEngine:
    """A course's cloud seats through SkyPilot (settings: ``sky``, ``ssh``, ``out``, ``wheelhouse``, ``offline``)."""

    name = ENGINE

    def __init__(
        self,
        store: CourseStore,
        course: str,
        *,
        sky: str = "sky",
        ssh: str = "ssh",
        out: str | None = None,
        wheelhouse: str | None = None,
        offline: str = "false",
        runner: Runner | None = None,
    ) -> None:
        self.store, self.course = store, course
        self.sky, self.ssh = sky, ssh
        self.out = Path(out) if out else None
        self.options = cloud.TaskOptions(wheelhouse=wheelhouse, offline=offline.lower() in ("1", "true", "yes"))
        self.run = runner or _default_runner

    # -- commands (pure) ---------------------------------------------------------------------------

    def launch_command(self, cluster: str, task_file: Path) -> list[str]:
        """``sky launch`` of one seat's task."""
        return [self.sky, "launch", "--yes", "--cluster", cluster, str(task_file)]

    def remote(self, cluster: str, argv: Sequence[str]) -> list[str]:
        """``ssh CLUSTER 'ARGV'``: the remote line is ``shlex.join`` of the arguments."""
        if not cloud.CLUSTER_NAME.fullmatch(cluster):
            raise InputError(
                f"bad cluster name {cluster!r}", where="seat", fix="cluster names come from cluster_name()"
            )
        return [self.ssh, "-o", "BatchMode=yes", "-o", "ConnectTimeout=30", cluster, shlex.join(argv)]

    def probe_command(self, cluster: str, user: str) -> list[str]:
        """``nvidia-smi -L`` on the cluster, run as the participant (sudo -u, no password prompt)."""
        if not cloud.UNIX_USER.fullmatch(user):
            raise InputError(f"{user!r} is not a Unix user name", where="participant", fix="a roster unix_user")
        return self.remote(cluster, ["sudo", "-n", "-u", user, "--", "nvidia-smi", "-L"])

    # -- the interface -----------------------------------------------------------------------------

    def _seat(self, seat: SeatView) -> cloud.CloudSeat:
        from gpuseat.catalog.bundle import load_catalog

        cc = cloud.course_from_store(self.store, self.course, load_catalog().offers)
        found = next((s for s in cc.seats if s.seat == seat.key), None)
        if found is None:
            raise InputError(f"seat {seat.key} is not a cloud seat", where=f"seat {seat.key}", fix="a kind=cloud seat")
        return found

    def _user(self, participant: ParticipantView) -> str:
        user = participant.unix_user or participant.key
        if not cloud.UNIX_USER.fullmatch(user):
            raise InputError(
                f"participant {participant.key} has no Unix user name", where="roster", fix="add a unix_user column"
            )
        return user

    def provision(self, seat: SeatView, participant: ParticipantView | None) -> Access | None:
        """Write the seat's task (with its holder's login) and ``sky launch`` it."""
        target = self._seat(seat)
        if self.out is None:
            from gpuseat.paths import data_dir

            self.out = data_dir() / "skypilot" / self.course
        out = self.out
        out.mkdir(parents=True, exist_ok=True)
        task_file = out / f"{target.cluster}.yaml"
        task_file.write_text(cloud.task_yaml(target, self.options), encoding="utf-8")
        done = self.run(self.launch_command(target.cluster, task_file))
        if done.returncode != 0:
            reason = f"sky launch failed: {(done.stderr or done.stdout).strip()[-500:]}"
            self.store.set_seat_state(self.course, seat.key, "failed", reason=reason, engine=ENGINE, actor=ACTOR)
            raise EngineError(reason, where=f"seat {seat.key}", fix="see sky launch's output; fix and provision again")
        self.store.set_seat_state(
            self.course,
            seat.key,
            "running",
            reason=f"cluster {target.cluster} up",
            engine=ENGINE,
            engine_ref=target.cluster,
            actor=ACTOR,
        )
        access = self.connect(seat)
        if access is not None:  # the structured way in, through the one seat write
            self.store.record_delivery(self.course, seat.key, access=access, actor=ACTOR)
        return access

    def connect(self, seat: SeatView) -> Access | None:
        """The participant's ssh line, from ``sky status --ip`` (None while the cluster is not up)."""
        cluster = cloud.cluster_name(self.course, seat.key)
        done = self.run([self.sky, "status", "--ip", cluster])
        ip = (done.stdout or "").strip().splitlines()[-1:] if done.returncode == 0 else []
        if not ip or not ip[0] or " " in ip[0]:
            return None
        user = None
        if seat.participant:
            user = self._user(self.store.find_participant(self.course, seat.participant))
        command = f"ssh {user}@{ip[0]}" if user else None
        return Access(kind="ssh", host=ip[0], user=user, command=command, device_uuid=seat.device_uuid)

    def probe(self, seat: SeatView, participant: ParticipantView) -> Readiness:
        """List the GPUs on the cluster as the participant and judge them."""
        from gpuseat.nvsmi import parse_list

        cluster = cloud.cluster_name(self.course, seat.key)
        now = datetime.now(UTC)
        done = self.run(self.probe_command(cluster, self._user(participant)))
        text = (done.stdout or "") + (done.stderr or "")
        if done.returncode != 0:
            visible: tuple[str, ...] = ()
            state: Any = "broken"
            reason: str | None = f"the probe failed on {cluster}: {text.strip()[-300:]}"
        else:
            listed = parse_list(done.stdout)
            visible = tuple(m.uuid for g in listed for m in g.mig) or tuple(g.uuid for g in listed)
            state, reason = judge(seat.device_uuid, visible)
        return Readiness(
            course=self.course,
            seat=seat.key,
            participant=participant.key,
            state=state,
            reason=reason,
            evidence=text[:4000],
            visible=visible,
            checked_at=now,
            engine=ENGINE,
        )

    def revoke(self, seat: SeatView, participant: ParticipantView) -> None:
        """Take the participant's access away on the VM, then drop their seat."""
        cluster = cloud.cluster_name(self.course, seat.key)
        done = self.run(self.remote(cluster, ["bash", "-c", revoke_script(self._user(participant))]))
        if done.returncode != 0:
            raise EngineError(
                f"could not revoke {participant.key} on {cluster}: {(done.stderr or done.stdout).strip()[-300:]}",
                where=f"seat {seat.key}",
                fix="is the cluster up (sky status)? start it and revoke again",
            )
        self.store.release(self.course, participant=participant.key, reason="access revoked", actor=ACTOR)

    def teardown(self, seat: SeatView) -> None:
        """``sky down`` the seat's cluster."""
        cluster = cloud.cluster_name(self.course, seat.key)
        done = self.run([self.sky, "down", "--yes", cluster])
        if done.returncode != 0:
            raise EngineError(f"sky down {cluster} failed: {done.stderr.strip()[-300:]}", where=f"seat {seat.key}")
        self.store.set_seat_state(self.course, seat.key, "released", reason=f"cluster {cluster} down", actor=ACTOR)
