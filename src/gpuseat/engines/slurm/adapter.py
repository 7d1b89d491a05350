"""The Slurm adapter: ``scontrol``, ``squeue``, ``sbatch``, ``srun``, ``scancel`` and ``sacctmgr`` called with
argument lists, every call through the engine's Runner.

Nothing here builds a shell string: every call is a list of words, each word checked by
:mod:`.names` before it gets here. Failures become :class:`EngineError` with Slurm's own
message and what it means for a seat (:func:`explain`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuseat.core import logins
from gpuseat.engines.runner import Completed, Runner, default_runner
from gpuseat.engines.slurm import names
from gpuseat.engines.slurm.config import Reservation
from gpuseat.errors import EngineError

TIMEOUT_S = 30
#: job states that hold or wait for a GPU (scancel ends them; COMPLETING still holds it a moment)
#: a job that holds its GPU, waits for one, or may take one again once released (a held requeue, a job
#: stopped or being signalled): what a release cancels
LIVE_STATES = (
    "PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING",
    "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT", "STOPPED", "SIGNALING",
)  # fmt: skip

# Slurm's refusals and what they mean for a participant's seat (matched in sbatch/srun stderr).
_REASONS: tuple[tuple[str, str], ...] = (
    (
        "Access denied to requested reservation",
        "the user is not on this session's reservation (not in the roster, or their seat is stopped?)",
    ),
    ("Requested reservation is invalid", "there is no such reservation (the session is over or not created yet)"),
    (
        "Access/permission denied",
        "the course partition takes jobs only inside a session reservation (add --reservation=<session>)",
    ),
    (
        "Requested node configuration is not available",
        "no node has that many GPUs of that type, or that many CPUs or that much memory for them",
    ),
    ("Invalid partition name specified", "there is no such partition (run `gpuseat apply --engine slurm`)"),
    ("Invalid generic resource (gres) specification", "the GRES type is unknown on this cluster"),
    ("gpuseat: ", "the request is outside the participant's seat"),
    ("AssocMaxSubmitJobLimit", "the participant's seat is stopped: their association takes no job until a start"),
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
        re.sub(r"^(sbatch|srun|scontrol): (error|fatal): ", "", ln).strip() for ln in stderr.splitlines() if ln.strip()
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
    account: str = ""
    #: the leader's job id of a heterogeneous job's component (``squeue`` shows ``LEADER+N``): scancel takes
    #: the leader only ("Operation not permitted on individual component of heterogeneous job")
    het_leader: int | None = None

    @property
    def cancel_id(self) -> int:
        """The id ``scancel`` ends this job by: its own, or its heterogeneous job's leader."""
        return self.het_leader if self.het_leader is not None else self.job_id

    @property
    def live(self) -> bool:
        """Still holds or waits for resources (not ending or ended)."""
        return self.state in LIVE_STATES

    def gres_types(self) -> set[str]:
        """The GPU types its request names (``gres:gpu:m60.seat-01:1`` → ``m60.seat-01``)."""
        return set(re.findall(r"gpu:([A-Za-z0-9_.+-]+):\d", self.gres))


@dataclass(frozen=True)
class Submitted:
    """What a probe job saw: the GPU variables, or Slurm's refusal."""

    ok: bool
    job_id: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    refusal: str = ""


@dataclass
class Slurm:
    """Runs Slurm's commands through the one :class:`~gpuseat.engines.runner.Runner`; ``conf``
    (SLURM_CONF) points at a cluster other than /etc/slurm. Reads pass ``mutates=False`` (a dry run
    still sees the cluster as it is)."""

    runner: Runner = field(default_factory=default_runner)
    conf: Path | None = None
    bin_dir: Path | None = None
    timeout_s: float = TIMEOUT_S

    def _env(self) -> dict[str, str] | None:
        return {"SLURM_CONF": str(self.conf)} if self.conf is not None else None

    def _exe(self, name: str) -> str:
        return str(self.bin_dir / name) if self.bin_dir is not None else name

    def run(
        self,
        cmd: str,
        args: Sequence[str],
        *,
        as_user: str | None = None,
        check: bool = True,
        mutates: bool = True,
        timeout: float | None = None,
    ) -> Completed[str]:
        """Run ``cmd args…`` (optionally as a unix user); never through a shell. A missing program or a
        time-out is one :class:`EngineError`; with ``check`` so is a non-zero exit, with Slurm's reason."""
        user = logins.unix_user(as_user) if as_user is not None else None
        try:
            proc = self.runner.run(
                [self._exe(cmd), *args],
                timeout=self.timeout_s if timeout is None else timeout,
                user=user,
                env=self._env(),
                check=False,
                mutates=mutates,
                where=cmd,
            )
        except KeyError:
            raise EngineError(
                f"no unix user {user} on this machine", where=cmd, fix="create the participant's account first"
            ) from None
        except PermissionError:
            raise EngineError(
                f"running {cmd} as {user} needs root", where=cmd, fix="run this command as root on the controller"
            ) from None
        except EngineError as exc:
            fix = (
                "install Slurm's client commands (Debian: slurm-client)"
                if "not found" in exc.what
                else "check that slurmctld is running (scontrol ping)"
            )
            raise EngineError(exc.what, where=cmd, fix=fix) from None
        if check and proc.returncode != 0:
            said = proc.stderr or proc.stdout
            if "Unable to process configuration file" in said or "Parse error in file" in said:
                from gpuseat.errors import InputError  # the slurm.conf given is the input at fault, not the cluster

                conf = self.conf or "slurm.conf"
                raise InputError(
                    f"{cmd} cannot read {conf}: {explain(said)}",
                    where=f"slurm_conf {conf}",
                    fix="give the cluster's slurm.conf (--slurm-conf, or the slurm_conf setting), or correct the lines "
                    f"{cmd} names",
                )
            raise EngineError(
                f"{cmd} {' '.join(args[:3])} failed: {explain(said)}",
                where=cmd,
                fix="check that slurmctld runs (scontrol ping) and slurm_conf (or SLURM_CONF) names its slurm.conf",
            )
        return proc

    # -- configuration -------------------------------------------------------------------------------

    def config(self) -> dict[str, str]:
        """``scontrol show config`` as key → value (AccountingStorageType, JobSubmitPlugins, SLURM_CONF …)."""
        out = self.run("scontrol", ["show", "config"], mutates=False).stdout
        return {m.group(1): m.group(2).strip() for m in re.finditer(r"^(\w+)\s*=\s*(.*)$", out, re.M)}

    def config_value(self, key: str) -> str | None:
        """One value of ``scontrol show config`` (e.g. AccountingStorageType)."""
        return self.config().get(key)

    def reconfigure(self) -> None:
        """``scontrol reconfigure``: re-read slurm.conf and the job_submit script."""
        self.run("scontrol", ["reconfigure"])

    # -- partitions and reservations ----------------------------------------------------------------

    def partition_fields(self) -> dict[str, dict[str, str]]:
        """Every partition as its ``key=value`` fields (``scontrol -o show partition``)."""
        return self._listed("partition", "PartitionName")

    def _listed(self, what: str, key: str, pairs: tuple[str, str] | None = None) -> dict[str, dict[str, str]]:
        """``scontrol -o show WHAT``: each line's ``key=value`` fields, by its ``KEY`` field; ``pairs`` (A, B):
        each ``A=x B=y`` of a line also as ``B@x`` = ``y`` (a field Slurm repeats, once per x)."""
        out = self.run("scontrol", ["-o", "show", what], mutates=False).stdout
        found: dict[str, dict[str, str]] = {}
        for line in out.splitlines():
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            if pairs is not None:
                fields |= {f"{pairs[1]}@{x}": y for x, y in re.findall(rf"\b{pairs[0]}=(\S+) {pairs[1]}=(\S*)", line)}
            if key in fields:
                found[fields[key]] = fields
        return found

    def partitions(self) -> set[str]:
        """Names of the cluster's partitions."""
        return set(self.partition_fields())

    def create_partition(self, words: Sequence[str]) -> bool:
        """``scontrol create PartitionName=…`` unless it exists (then ``update``); True when created."""
        name = words[0].removeprefix("PartitionName=")
        if name in self.partitions():
            self.run("scontrol", ["update", *words])
            return False
        self.run("scontrol", ["create", *words])
        return True

    def delete_partition(self, name: str) -> None:
        """``scontrol delete PartitionName=…`` (gone already is fine)."""
        proc = self.run("scontrol", ["delete", f"PartitionName={names.slurm_name(name)}"], check=False)
        if proc.returncode != 0 and name in self.partitions():
            raise EngineError(f"scontrol delete partition {name} failed: {explain(proc.stderr)}", where="scontrol")

    def node_fields(self) -> dict[str, dict[str, str]]:
        """Every node as its ``key=value`` fields (``scontrol -o show node``: CoresPerSocket …)."""
        return self._listed("node", "NodeName")

    def reservations(self) -> dict[str, dict[str, str]]:
        """Every reservation as its ``key=value`` fields (``scontrol -o show reservation``), and the cores it
        holds on each node as ``CoreIDs@NODE``: Slurm prints ``NodeName=NODE CoreIDs=0-3`` once per node."""
        return self._listed("reservation", "ReservationName", pairs=("NodeName", "CoreIDs"))

    def create_reservation(self, res: Reservation) -> None:
        """Create one session's reservation (the caller skips the ones that exist)."""
        self.run("scontrol", ["create", "reservation", *res.words()])

    def update_reservation_users(self, name: str, users: Sequence[str]) -> None:
        """Set a reservation's users to exactly ``users`` (after a roster or seat change)."""
        self.update_reservation(name, [f"Users={','.join(logins.unix_user(u) for u in users)}", "Flags=IGNORE_JOBS"])

    def update_reservation(self, name: str, words: Sequence[str]) -> None:
        """``scontrol update ReservationName=NAME WORDS`` (its users, its end)."""
        names.slurm_name(name)
        args = ["update", f"ReservationName={name}", *words]
        # slurmctld re-checks the reservation's nodes on an update and answers "Requested nodes are busy"
        # while a job it is ending still holds them (a cancel a moment ago): try again for a few seconds
        for _ in range(20):
            proc = self.run("scontrol", args, check=False)
            if proc.returncode == 0 or "nodes are busy" not in (proc.stderr + proc.stdout):
                break
            time.sleep(0.25)
        if proc.returncode != 0:
            raise EngineError(f"scontrol update reservation {name} failed: {explain(proc.stderr)}", where="scontrol")

    def delete_reservation(self, name: str) -> None:
        """Delete one reservation (gone already is fine)."""
        proc = self.run("scontrol", ["delete", f"ReservationName={names.slurm_name(name)}"], check=False)
        if proc.returncode != 0 and name in self.reservations():
            raise EngineError(f"scontrol delete reservation {name} failed: {explain(proc.stderr)}", where="scontrol")

    # -- accounting (slurmdbd) ----------------------------------------------------------------------

    def associations(self, account: str) -> dict[str, dict[str, str]]:
        """User → {grptres, maxtresperjob, maxsubmitjobs} of the user associations under ``account``
        (``maxsubmitjobs`` is "" when unset; ``0`` while the holder's seat is stopped)."""
        which = f"account={names.slurm_name(account)}"
        args = ["-n", "-P", "show", "assoc", which, "format=user,grptres,maxtresperjob,maxsubmitjobs"]
        out = self.run("sacctmgr", args, mutates=False).stdout
        found = {}
        for line in out.splitlines():
            user, grp, per_job, submit = [*line.split("|"), "", "", ""][:4]
            if user:
                found[user] = {"grptres": grp, "maxtresperjob": per_job, "maxsubmitjobs": submit}
        return found

    def account_exists(self, account: str) -> bool:
        """Whether slurmdbd knows ``account``."""
        args = ["-n", "-P", "show", "account", names.slurm_name(account), "format=account"]
        return account in self.run("sacctmgr", args, mutates=False).stdout.split()

    def sacctmgr(self, args: Sequence[str]) -> None:
        """``sacctmgr -i ARGS``; "Nothing new added" / "Nothing deleted" / "Nothing modified" are fine."""
        proc = self.run("sacctmgr", ["-i", *args], check=False)
        said = proc.stdout + proc.stderr
        if proc.returncode != 0 and not re.search(r"Nothing (new added|deleted|modified)", said):
            raise EngineError(
                f"sacctmgr {' '.join(args[:3])} failed: {said.strip()[:300]}",
                where="sacctmgr",
                fix="check that slurmdbd runs (sacctmgr show cluster)",
            )

    # -- jobs ---------------------------------------------------------------------------------------

    def jobs(self, users: Sequence[str] | None = None) -> list[Job]:
        """The queue (all states squeue still lists), optionally only some users' jobs.

        Each job by its own id (``%A``): an array's running task (``%i`` shows ``7_0``) and its pending rest
        (``7_[1-3]``, id 7: scancel 7 ends the whole array), a heterogeneous job's components (``8+0``,
        ``8+1``, with their leader) are jobs too, not lines to skip."""
        args = ["-h", "-o", "%A|%u|%T|%r|%b|%P|%v|%N|%a|%i"]
        if users:
            args += ["-u", ",".join(logins.unix_user(u) for u in users)]
        out = self.run("squeue", args, mutates=False).stdout
        jobs = []
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) != 10 or not parts[0].isdigit():
                continue
            jid, user, state, reason, gres, part, resv, nodes, account, shown = parts
            leader = shown.split("+", 1)[0] if "+" in shown else ""
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
                    "" if account == "(null)" else account,
                    int(leader) if leader.isdigit() else None,
                )
            )
        return jobs

    def job_gres_index(self, job_id: int) -> str:
        """The GRES a job holds with device indices (``gpu:m60:1(IDX:2)``) from ``scontrol -d show job``."""
        out = self.run("scontrol", ["-d", "show", "job", str(int(job_id))], check=False, mutates=False).stdout
        m = re.search(r"\bGRES=(\S+\(IDX:[^)]*\))", out)
        return m.group(1) if m else ""

    def cancel(self, job_ids: Sequence[int], *, wait_s: float = 30.0) -> list[int]:
        """``scancel`` the jobs, then wait until none of them holds anything (COMPLETING included);
        returns those still there after ``wait_s`` (SIGKILLed once on the way)."""
        want = {int(j) for j in job_ids}
        if not want:
            return []
        by_leader = {j.job_id: j.cancel_id for j in self.jobs()}  # a heterogeneous job ends through its leader
        ids = [str(i) for i in sorted({by_leader.get(i, i) for i in want})]
        self.run("scancel", ids, check=False)
        if self.runner.dry_run:
            return []
        deadline = time.monotonic() + wait_s
        killed = False
        while True:
            still = [j for j in self.jobs() if j.job_id in want]
            left = [j.job_id for j in still]
            if not left or time.monotonic() > deadline:
                return left
            if not killed and time.monotonic() > deadline - wait_s / 2:
                kill = sorted({j.cancel_id for j in still})
                self.run("scancel", ["--signal=KILL", "--full", *map(str, kill)], check=False)
                killed = True
            time.sleep(0.2)

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
        logins.unix_user(user)
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
            out = self.run("scontrol", ["-o", "show", "job", str(job_id)], check=False, mutates=False).stdout
            m = re.search(r"\bJobState=(\S+)", out)
            if m is None or m.group(1) not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"):
                return m.group(1) if m else "GONE"
            time.sleep(0.2)
        raise EngineError(
            f"job {job_id} still not done after {wait_s:.0f} s",
            where="sbatch",
            fix="see `gpuseat slurm status` for its reason",
        )
