"""The Slurm adapter: ``scontrol``, ``squeue``, ``sbatch`` and ``sacctmgr`` called with argument lists.

Nothing here builds a shell string: every call is a list of words, each word checked by
:mod:`gpuseat.slurm.names` before it gets here. Failures become :class:`EngineError` with Slurm's own
message and what it means for a seat (:func:`explain`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuseat.errors import EngineError
from gpuseat.slurm import names
from gpuseat.slurm.config import Reservation

TIMEOUT_S = 30

# Slurm's refusals and what they mean for a participant's seat (matched in sbatch/srun stderr).
_REASONS: tuple[tuple[str, str], ...] = (
    ("Access denied to requested reservation", "the user is not on this session's reservation (not in the roster?)"),
    ("Requested reservation is invalid", "there is no such reservation (the session is over or not created yet)"),
    (
        "Access/permission denied",
        "the course partition takes jobs only inside a session reservation (add --reservation=<session>)",
    ),
    ("Requested node configuration is not available", "no node has that many GPUs of that type"),
    ("Invalid partition name specified", "there is no such partition (run `gpuseat slurm enroll`)"),
    ("Invalid generic resource (gres) specification", "the GRES type is unknown on this cluster"),
    ("gpuseat: ", "the request is outside the participant's seat"),
    ("Job violates accounting/QOS policy", "the request is over the association's GRES limit"),
)


# Why a job waits (squeue %r) and what it means for a seat.
_PENDING: dict[str, str] = {
    "AssocGrpGRES": "over the participant's seat: their association's GPU limit is in use or too small",
    "AssocMaxGRESPerJob": "over the participant's seat: more GPUs than their association allows per job",
    "AssocGrpGRESRunMinutes": "the association's GPU-minutes are used up",
    "Reservation": "waiting for the session's reservation to start",
    "ReqNodeNotAvail": "the node is reserved or down (outside a session?)",
    "Resources": "the GPUs it may use are busy",
    "Priority": "queued behind other jobs",
}


def pending_meaning(reason: str) -> str:
    """What a pending job's reason means for the seat ("" for an unknown or no reason)."""
    head = reason.split(",")[0].split("(")[0].strip()
    return _PENDING.get(head, "")


def explain(stderr: str) -> str:
    """Slurm's reason, cleaned up, plus what it means for the seat ("" when nothing matched)."""
    lines = [
        ln.removeprefix("sbatch: error: ").removeprefix("srun: error: ").strip()
        for ln in stderr.splitlines()
        if ln.strip()
    ]
    said = "; ".join(ln for ln in lines if ln) or "no message"
    for needle, meaning in _REASONS:
        if needle in stderr:
            return f"{said} ({meaning})"
    return said


@dataclass(frozen=True)
class Job:
    """One job as ``squeue`` lists it."""

    job_id: int
    user: str
    state: str
    reason: str
    gres: str
    partition: str
    reservation: str
    nodes: str


@dataclass(frozen=True)
class Submitted:
    """What a probe job saw: the GPU variables, or Slurm's refusal."""

    ok: bool
    job_id: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    refusal: str = ""


@dataclass
class Slurm:
    """Runs Slurm's commands; ``conf`` (SLURM_CONF) points at a cluster other than /etc/slurm."""

    conf: Path | None = None
    bin_dir: Path | None = None
    timeout_s: float = TIMEOUT_S

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.conf is not None:
            env["SLURM_CONF"] = str(self.conf)
        return env

    def _exe(self, name: str) -> str:
        if self.bin_dir is not None:
            return str(self.bin_dir / name)
        found = shutil.which(name)
        if found is None:
            raise EngineError(
                f"{name} not found",
                where="PATH",
                fix="install Slurm's client commands (Debian: slurm-client) or pass its bin dir",
            )
        return found

    def run(
        self, cmd: str, args: Sequence[str], *, as_user: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cmd args…`` (optionally as a unix user through ``runuser``); never through a shell."""
        argv = [self._exe(cmd), *args]
        if as_user is not None:
            argv = ["runuser", "-u", names.unix_user(as_user), "--", *argv]
        # its own process group: on a timeout the whole group goes (runuser's srun child too, which
        # would otherwise wait for its allocation long after we gave up)
        child = subprocess.Popen(
            argv,
            env=self._env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = child.communicate(timeout=self.timeout_s)
            proc = subprocess.CompletedProcess(argv, child.returncode, out, err)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            raise EngineError(
                f"{cmd} did not answer within {self.timeout_s:.0f} s",
                where=cmd,
                fix="check that slurmctld is running (scontrol ping)",
            ) from None
        if check and proc.returncode != 0:
            raise EngineError(
                f"{cmd} {' '.join(args[:3])} failed: {explain(proc.stderr or proc.stdout)}",
                where=cmd,
                fix="check that slurmctld runs (scontrol ping) and --slurm-conf or SLURM_CONF names its slurm.conf",
            )
        return proc

    # -- partitions and reservations ----------------------------------------------------------------

    def partitions(self) -> set[str]:
        """Names of the cluster's partitions."""
        out = self.run("scontrol", ["-o", "show", "partition"]).stdout
        return set(re.findall(r"^PartitionName=(\S+)", out, re.M))

    def create_partition(self, words: Sequence[str]) -> bool:
        """``scontrol create PartitionName=…`` unless it exists; True when created."""
        name = words[0].removeprefix("PartitionName=")
        if name in self.partitions():
            self.run("scontrol", ["update", *words])
            return False
        self.run("scontrol", ["create", *words])
        return True

    def reservations(self) -> dict[str, dict[str, str]]:
        """Every reservation as its ``key=value`` fields (``scontrol -o show reservation``)."""
        proc = self.run("scontrol", ["-o", "show", "reservation"])
        out: dict[str, dict[str, str]] = {}
        for line in proc.stdout.splitlines():
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            if "ReservationName" in fields:
                out[fields["ReservationName"]] = fields
        return out

    def create_reservation(self, res: Reservation) -> None:
        """Create one session's reservation (the caller skips the ones that exist)."""
        self.run("scontrol", ["create", "reservation", *res.words()])

    def update_reservation_users(self, name: str, users: Sequence[str]) -> None:
        """Set a reservation's users (after a roster change)."""
        names.slurm_name(name)
        self.run(
            "scontrol", ["update", f"ReservationName={name}", f"Users={','.join(names.unix_user(u) for u in users)}"]
        )

    def delete_reservation(self, name: str) -> None:
        """Delete one reservation."""
        self.run("scontrol", ["delete", f"ReservationName={names.slurm_name(name)}"])

    def reconfigure(self) -> None:
        """``scontrol reconfigure``: re-read slurm.conf and the job_submit script."""
        self.run("scontrol", ["reconfigure"])

    def config_value(self, key: str) -> str | None:
        """One value of ``scontrol show config`` (e.g. AccountingStorageType)."""
        out = self.run("scontrol", ["show", "config"]).stdout
        m = re.search(rf"^{re.escape(key)}\s*=\s*(.*)$", out, re.M)
        return m.group(1).strip() if m else None

    # -- jobs ---------------------------------------------------------------------------------------

    def jobs(self, users: Sequence[str] | None = None) -> list[Job]:
        """The queue (all states squeue still lists), optionally only some users' jobs."""
        args = ["-h", "-o", "%i|%u|%T|%r|%b|%P|%v|%N"]
        if users:
            args += ["-u", ",".join(names.unix_user(u) for u in users)]
        out = self.run("squeue", args).stdout
        jobs = []
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) != 8 or not parts[0].isdigit():
                continue
            jid, user, state, reason, gres, part, resv, nodes = parts
            jobs.append(
                Job(
                    int(jid),
                    user,
                    state,
                    reason,
                    "" if gres == "N/A" else gres,
                    part,
                    "" if resv == "(null)" else resv,
                    nodes,
                )
            )
        return jobs

    def job_gres_index(self, job_id: int) -> str:
        """The GRES a job holds with device indices (``gpu:m60:1(IDX:2)``) from ``scontrol -d show job``."""
        out = self.run("scontrol", ["-d", "show", "job", str(int(job_id))], check=False).stdout
        m = re.search(r"\bGRES=(\S+\(IDX:[^)]*\))", out)
        return m.group(1) if m else ""

    def probe(
        self,
        user: str,
        *,
        partition: str | None,
        reservation: str | None,
        gres: str,
        out_dir: Path,
        hold_s: int = 0,
        wait_s: float = 60,
    ) -> Submitted:
        """Submit a tiny batch job as ``user`` that prints its GPU variables; Slurm's refusal if refused.

        Returns once the job has ended, with what it saw (``hold_s`` keeps the GPU that long, to overlap
        probes); ``out_dir`` must be writable by the user.
        """
        names.unix_user(user)
        if not re.fullmatch(r"gpu(:[A-Za-z0-9_.+-]{1,63})?:\d{1,2}", gres):
            raise EngineError(f"bad GRES request {gres!r}", where="gres", fix="use gpu:N or gpu:TYPE:N")
        out = out_dir / f"probe-{user}-%j.out"
        args = [f"--gres={gres}", f"--output={out}", "--job-name=gpuseat-probe"]
        if partition:
            args.append(f"--partition={names.slurm_name(partition)}")
        if reservation:
            args.append(f"--reservation={names.slurm_name(reservation)}")
        hold = int(hold_s)
        if not 0 <= hold <= 600:
            raise EngineError(f"hold {hold} s out of range", where="hold", fix="0 to 600 seconds")
        args += ["--wrap", f"sleep {hold}; env" if hold else "env"]
        proc = self.run("sbatch", args, as_user=user, check=False)
        m = re.search(r"Submitted batch job (\d+)", proc.stdout)
        if m is None:
            return Submitted(ok=False, refusal=explain(proc.stderr or proc.stdout))
        job_id = int(m.group(1))
        state = self._wait_done(job_id, wait_s)
        path = Path(str(out).replace("%j", str(job_id)))
        text = path.read_text(errors="replace") if path.exists() else ""
        env = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln)
        keep = {
            k: v
            for k, v in env.items()
            if k
            in (
                "CUDA_VISIBLE_DEVICES",
                "SLURM_JOB_GPUS",
                "GPU_DEVICE_ORDINAL",
                "SLURM_JOB_PARTITION",
                "SLURM_JOB_RESERVATION",
            )
        }
        if state != "COMPLETED":
            return Submitted(ok=False, job_id=job_id, env=keep, refusal=f"job {job_id} ended {state}")
        return Submitted(ok=True, job_id=job_id, env=keep)

    def _wait_done(self, job_id: int, wait_s: float) -> str:
        """Poll the job's state until it has ended (sbatch --wait polls only every 10 s)."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            out = self.run("scontrol", ["-o", "show", "job", str(job_id)], check=False).stdout
            m = re.search(r"\bJobState=(\S+)", out)
            if m is None or m.group(1) not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"):
                return m.group(1) if m else "GONE"
            time.sleep(0.2)
        raise EngineError(
            f"job {job_id} still not done after {wait_s:.0f} s",
            where="sbatch",
            fix="see `gpuseat slurm status` for its reason",
        )


def sacctmgr_enroll_commands(account: str, users: Mapping[str, str], *, description: str = "") -> list[list[str]]:
    """With accounting (slurmdbd): one account per course, one association per participant with a GRES limit.

    ``users`` maps unix user → their seat's GRES limit, e.g. ``gres/gpu:m60=1``. Each command is a list
    of words for ``sacctmgr -i`` (no prompt).
    """
    names.slurm_name(account, where="course key")
    cmds = [
        ["-i", "add", "account", account, f"Description={_plain(description or account)}", f"Organization={account}"]
    ]
    for user, tres in sorted(users.items()):
        names.unix_user(user)
        if not re.fullmatch(r"gres/gpu(:[A-Za-z0-9_.+-]{1,63})?=\d{1,2}", tres):
            raise EngineError(f"bad GRES limit {tres!r}", where=f"participant {user}", fix="gres/gpu:TYPE=N")
        cmds.append(["-i", "add", "user", user, f"Account={account}", f"GrpTRES={tres}", f"MaxTRESPerJob={tres}"])
    return cmds


def _plain(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9 _.-]", "", text)[:60].strip() or "gpuseat"
