"""The Slurm seat engine (:class:`SlurmEngine`, ``gpuseat.services.slurm:SlurmEngine`` in the registry).

A participant's seat is their own GRES type in the course partition: ``provision`` enrols the course
and creates its session reservations, ``probe`` runs ``srun`` *as the participant* in the running
session and judges what the job saw, ``revoke`` cancels their course jobs and takes them out of the
limits and reservations.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuseat.errors import InputError
from gpuseat.services.slurm import SlurmCourse, courses_from_store, enroll, plan_sessions, sessions, write_job_submit
from gpuseat.slurm import names
from gpuseat.slurm.config import Reservation
from gpuseat.slurm.engine import Slurm, explain

if TYPE_CHECKING:
    from gpuseat.services.courses import CourseStore


def current_session(course: SlurmCourse, now: datetime) -> Reservation | None:
    """The session reservation running at ``now``, else the next one (None: no session left)."""
    plan = plan_sessions(course) if course.limits() else []
    running = [r for r in plan if r.start <= now < r.end]
    if running:
        return running[0]
    coming = [r for r in plan if r.start > now]
    return coming[0] if coming else None


def parse_probe(text: str) -> tuple[tuple[str, ...], bool]:
    """What a probe job printed: the GPU UUIDs of ``nvidia-smi -L`` when it ran, else the
    ``CUDA_VISIBLE_DEVICES`` entries; and whether the UUIDs are real ones."""
    uuids = tuple(re.findall(r"\(UUID: ((?:GPU|MIG)-[0-9A-Za-z/-]+)\)", text))
    if uuids:
        return uuids, True
    m = re.search(r"^CVD=(.*)$", text, re.M)
    cvd = m.group(1).strip() if m else ""
    return tuple(x for x in cvd.split(",") if x and x != "NoDevFiles"), False


PROBE_SCRIPT = (
    'echo "CVD=${CUDA_VISIBLE_DEVICES:-}"; echo "JOB_GPUS=${SLURM_JOB_GPUS:-}"; nvidia-smi -L 2>/dev/null; true'
)


class SlurmEngine:
    """The Slurm seat engine: a participant's seat is their own GRES type in the course partition.

    Settings (plain strings): ``slurm_conf`` (the cluster's slurm.conf), ``conf_dir`` (where
    job_submit.lua goes; default slurm.conf's folder), ``accounting`` ("yes"/"no"; default: what the
    cluster runs), ``wait_s`` (how long a probe job may wait for its GPU).
    """

    name = "slurm"

    def __init__(
        self,
        store: CourseStore,
        course: str,
        *,
        slurm_conf: str | None = None,
        conf_dir: str | None = None,
        accounting: str | None = None,
        wait_s: str = "60",
    ) -> None:
        self.store = store
        self.course = store.get_course(course).key
        self.slurm = Slurm(conf=Path(slurm_conf) if slurm_conf else None)
        self.conf_dir = Path(conf_dir) if conf_dir else (Path(slurm_conf).parent if slurm_conf else None)
        self.accounting = None if accounting is None else accounting.lower() in ("yes", "true", "1")
        try:
            self.wait_s = max(1, min(600, int(wait_s)))
        except ValueError:
            raise InputError(
                f"wait_s {wait_s!r} is not a number", where="slurm engine", fix="seconds, 1 to 600"
            ) from None

    def _courses(self, without: str | None = None) -> list[SlurmCourse]:
        """Every course with Slurm seats from the store; ``without`` (a participant key) left out of ours."""
        out = []
        for c in courses_from_store(self.store):
            if c.key == self.course and without is not None:
                members = tuple(m for m in c.members if m.participant != without)
                c = SlurmCourse(c.key, c.intervals, members, c.devices)
            out.append(c)
        return out

    def _this(self, courses: Sequence[SlurmCourse]) -> SlurmCourse:
        this = next((c for c in courses if c.key == self.course), None)
        if this is None:
            raise InputError(
                f"course {self.course} has no Slurm seats",
                where="slurm engine",
                fix="gpuseat slurm config --inventory FILE --node NAME --course KEY --record",
            )
        return this

    def provision(self, seat: Any, participant: Any) -> Any:
        """Enrol the course (limits, partition) and create its session reservations; how to connect."""
        courses = self._courses()
        this = self._this(courses)
        if participant is not None and this.limits():
            enroll(self.slurm, courses, self.course, conf_dir=self.conf_dir, accounting=self.accounting)
            sessions(self.slurm, this, now=datetime.now())
        access = self.connect(seat)
        if access is not None:  # the structured way in, through the one seat write
            self.store.record_delivery(self.course, seat.key, access=access, actor="gpuseat slurm")
        return access

    def connect(self, seat: Any) -> Any:
        """``srun`` in the course partition and the current (or next) session, for the seat's holder."""
        from gpuseat.core.readiness import Access

        this = self._this(self._courses())
        member = next((m for m in this.members if m.seat == seat.key), None)
        dev = this.device_of(seat.key)
        if member is None or member.unix_user is None or dev is None:
            return None
        session = current_session(this, datetime.now())
        resv = f" --reservation={session.name}" if session else ""
        return Access(
            kind="slurm",
            host=dev.node,
            user=member.unix_user,
            command=f"srun -p {this.partition}{resv} --gres=gpu:1 --pty bash",
            device_uuid=seat.device_uuid,
            notes=(
                f"your seat is Slurm GRES gpu:{dev.slurm_type} on {dev.node}; jobs asking for more are refused",
                "sbatch works the same way: sbatch -p PARTITION --reservation=SESSION --gres=gpu:1 job.sh",
            ),
        )

    def probe(self, seat: Any, participant: Any) -> Any:
        """Run ``srun`` as the participant in the course partition and session; judge what the job saw."""
        from gpuseat.core.readiness import Readiness, judge

        this = self._this(self._courses())
        now = datetime.now()
        session = current_session(this, now)
        user = participant.unix_user

        def result(state: Any, reason: str | None, evidence: str, visible: tuple[str, ...] = ()) -> Readiness:
            return Readiness(
                course=self.course,
                seat=seat.key,
                participant=participant.key,
                state=state,
                reason=reason,
                evidence=evidence[-4000:],
                visible=visible,
                checked_at=datetime.now().astimezone(),
                engine=self.name,
            )

        if user is None:
            return result("broken", "the participant has no unix user (roster column unix_user)", "")
        if session is None or session.start > now:
            return result("broken", f"no session of course {self.course} is running now", "")
        args = [
            f"--partition={this.partition}",
            f"--reservation={session.name}",
            "--gres=gpu:1",
            f"--immediate={self.wait_s}",
            "--job-name=gpuseat-probe",
            "--",
            "sh",
            "-c",
            PROBE_SCRIPT,
        ]
        # srun waits up to wait_s for the GPU (--immediate): give the call that long and then some
        waiting = Slurm(conf=self.slurm.conf, bin_dir=self.slurm.bin_dir, timeout_s=self.wait_s + 30)
        proc = waiting.run("srun", args, as_user=names.unix_user(user), check=False)
        evidence = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0:
            return result("broken", f"srun failed: {explain(proc.stderr or proc.stdout)}", evidence)
        visible, real = parse_probe(proc.stdout)
        state, reason = judge(seat.device_uuid if real else None, visible)
        return result(state, reason, evidence, visible)

    def revoke(self, seat: Any, participant: Any) -> None:
        """Cancel the participant's jobs in the course partition and take them out of the limits and sessions."""
        courses = self._courses(without=participant.key)
        this = self._this(courses)
        if participant.unix_user:
            user = names.unix_user(participant.unix_user)
            self.slurm.run("scancel", ["-u", user, "-p", this.partition], check=False)
            if self._accounting():
                self.slurm.run("sacctmgr", ["-i", "delete", "user", user, f"account={this.partition}"], check=False)
        self._refresh(courses, this)

    def teardown(self, seat: Any) -> None:
        """Cancel jobs holding the seat's GPU; the limits and sessions follow the store."""
        courses = self._courses()
        this = self._this(courses)
        dev = this.device_of(seat.key)
        if dev is not None:
            for job in self.slurm.jobs():
                if job.state in ("RUNNING", "PENDING") and f"gpu:{dev.slurm_type}" in (
                    job.gres + " " + self.slurm.job_gres_index(job.job_id)
                ):
                    self.slurm.run("scancel", [str(job.job_id)], check=False)
        self._refresh(courses, this)

    def _accounting(self) -> bool:
        if self.accounting is None:
            self.accounting = (self.slurm.config_value("AccountingStorageType") or "").endswith("slurmdbd")
        return self.accounting

    def _refresh(self, courses: Sequence[SlurmCourse], this: SlurmCourse) -> None:
        if not self._accounting() and self.conf_dir is not None:
            write_job_submit(courses, self.conf_dir)
        users = this.users()
        if users:
            for name, fields in self.slurm.reservations().items():
                if name.startswith(f"gpuseat-{this.key}-") and fields.get("Users", "") != ",".join(users):
                    self.slurm.update_reservation_users(name, users)
