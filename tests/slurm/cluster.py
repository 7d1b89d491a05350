"""A real one-node Slurm for the tests: munged, slurmctld and slurmd from Debian's packages.

Recipe from ``shared/reference/slurm.md``: configs in a temp dir, ``mknod`` character devices stand
in for GPUs, the daemons run in the foreground under our own pids (so they are stopped by pid), and
``sinfo`` (wrapped in a timeout) is polled until the node is idle. Its own munge socket and free
ports keep it apart from any Slurm already on the machine.

The scheduling settings are the ones gpuseat ships (``slurm.conf.gpuseat``: ``GresTypes``,
``SelectType``, ``SelectTypeParameters``, ``SchedulerParameters``), so the tests run the configuration
users get; only the cgroup plugins stay off (no cgroup delegation here: ``proctrack/linuxproc``,
``task/none``). slurm.conf includes ``gpuseat-partitions.conf``, where gpuseat keeps the course
partitions it creates at run time (as docs/slurm.md tells sites to).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from gpuseat.engines.slurm import config as gpuseat_config
from ports import free_port as _free_port

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sinfo")
ACCOUNTING_BINARIES = ("slurmdbd", "sacctmgr", "mariadbd", "mariadb-install-db")


def missing_binaries(names: tuple[str, ...] = BINARIES) -> list[str]:
    """Which of the Slurm/MUNGE (or accounting: slurmdbd, MariaDB) programs this machine lacks."""
    return [b for b in names if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


#: the lines of gpuseat's generated slurm.conf.gpuseat the test cluster takes as they are
SHIPPED = ("GresTypes=", "SelectType=", "SelectTypeParameters=", "SchedulerParameters=")


def shipped_settings() -> str:
    """gpuseat's scheduling settings, from the file it generates (``slurm config``)."""
    lines = gpuseat_config.cluster_settings().splitlines()
    return "".join(ln + "\n" for ln in lines if ln.startswith(SHIPPED))


@dataclass
class Cluster:
    """A running one-node cluster: its config dir, environment and daemon processes."""

    root: Path
    accounting: bool = False  # MariaDB + slurmdbd, AccountingStorageEnforce=associations,limits
    dbd_port: int = 0
    db_port: int = 0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def partitions_conf(self) -> Path:
        return self.root / "etc" / "gpuseat-partitions.conf"

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def mknod_gpus(self, names: list[str]) -> None:
        """Character devices (major 195, like /dev/nvidia*) that slurmd accepts as GPU files."""
        for minor, name in enumerate(names):
            path = self.dev / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                os.mknod(path, 0o666 | 0o020000, os.makedev(195, minor))

    def write_config(self, gres_conf: str, node_and_partitions: str, extra: str = "") -> None:
        """slurm.conf (the reference's, with our ports, paths and munge socket) plus gres.conf."""
        r = self.root
        ctld_port, slurmd_port = _free_port(), _free_port()
        if self.accounting:
            self.dbd_port, self.db_port = _free_port(), _free_port()
            extra = (
                "AccountingStorageType=accounting_storage/slurmdbd\n"
                f"AccountingStorageHost=localhost\nAccountingStoragePort={self.dbd_port}\n"
                f"AccountingStoragePass={r}/munge/munge.socket\n"  # the munge socket for slurmdbd
                "AccountingStorageTRES=gres/gpu\nAccountingStorageEnforce=associations,limits,safe\n" + extra
            )
        base = f"""ClusterName=gpuseattest
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
AuthInfo=socket={r}/munge/munge.socket
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MailProg=/bin/true
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmdParameters=config_overrides
"""
        base += shipped_settings()
        if not self.accounting:
            base += "AccountingStorageType=accounting_storage/none\n"
        self.conf.parent.mkdir(parents=True, exist_ok=True)
        if not self.partitions_conf.exists():
            self.partitions_conf.write_text(gpuseat_config.INCLUDE_MARK + "\n")
        self.conf.write_text(base + extra + node_and_partitions + f"Include {self.partitions_conf}\n")
        (self.conf.parent / "gres.conf").write_text(gres_conf)
        if self.accounting:
            dbd = self.conf.parent / "slurmdbd.conf"
            dbd.write_text(
                f"AuthType=auth/munge\nAuthInfo=socket={r}/munge/munge.socket\nDbdHost=localhost\n"
                f"DbdPort={self.dbd_port}\nSlurmUser=root\nStorageType=accounting_storage/mysql\n"
                f"StorageHost=127.0.0.1\nStoragePort={self.db_port}\nStorageUser=root\nStorageLoc=slurm_acct_db\n"
                f"PidFile={r}/slurmdbd.pid\nLogFile={r}/log/slurmdbd.log\nDebugLevel=info\n"
            )
            dbd.chmod(0o600)  # slurmdbd refuses a readable config

    def start(self, timeout: float = 60) -> None:
        """munged, slurmctld, slurmd in the foreground; returns once the node is idle."""
        r = self.root
        for d in ("state", "spool", "log", "munge", "out"):
            (r / d).mkdir(parents=True, exist_ok=True)
        os.chmod(r / "munge", 0o755)
        os.chmod(r / "out", 0o1777)
        os.chmod(r, 0o755)
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> None:
        r = self.root
        log = (r / "log" / "daemons.out").open("ab")
        self.procs["munged"] = subprocess.Popen(
            [
                _which("munged"),
                "-F",
                "--force",
                f"--socket={r}/munge/munge.socket",
                f"--pid-file={r}/munge/munged.pid",
                f"--log-file={r}/log/munged.log",
                f"--seed-file={r}/munge/munged.seed",
            ],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._wait_for(lambda: (r / "munge" / "munge.socket").exists(), timeout, "munged")
        if self.accounting:
            self._start_accounting(log, timeout)
        self.procs["slurmctld"] = subprocess.Popen(
            [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)],
            env=self.env,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.procs["slurmd"] = subprocess.Popen(
            [_which("slurmd"), "-D", "-N", "localhost", "-f", str(self.conf)],
            env=self.env,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._wait_for(self._idle, timeout, "slurm node idle")

    def _start_accounting(self, log: IO[bytes], timeout: float) -> None:
        """MariaDB (own data dir, loopback port, no grant tables) and slurmdbd; the cluster registered."""
        r = self.root
        # no native AIO: InnoDB's io_setup() takes slots from the machine-wide fs.aio-max-nr, which other tests'
        # daemons share (once on CI, beside the whole suite, mariadb-install-db exited 1 with nothing kept to say why)
        slow_io = "--innodb-use-native-aio=0"
        installed = subprocess.run(
            [_which("mariadb-install-db"), "--no-defaults", f"--datadir={r}/db", "--user=root", "--skip-test-db",
             "--auth-root-authentication-method=normal", slow_io],
            stdout=log, stderr=log, check=False, timeout=timeout,
        )  # fmt: skip
        if installed.returncode != 0:
            log.flush()
            raise RuntimeError(f"mariadb-install-db exited with {installed.returncode}:\n{self.logs()}")
        self.procs["mariadbd"] = subprocess.Popen(
            [_which("mariadbd"), "--no-defaults", f"--datadir={r}/db", f"--socket={r}/db.sock",
             f"--port={self.db_port}", "--bind-address=127.0.0.1", "--user=root", "--skip-grant-tables",
             f"--pid-file={r}/db.pid", f"--log-error={r}/log/mariadb.log", slow_io],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self._wait_for(lambda: _listening(self.db_port), timeout, "mariadbd")
        self.procs["slurmdbd"] = subprocess.Popen(
            [_which("slurmdbd"), "-D"], env=self.env, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        self._wait_for(lambda: _listening(self.dbd_port), timeout, "slurmdbd")
        self._wait_for(lambda: self._register(log), timeout, "the cluster registered in slurmdbd")

    def _register(self, log: IO[bytes]) -> bool:
        """Add the cluster, and say whether slurmdbd lists it. A slurmdbd that has just started to listen
        may still be making its tables: the add can fail then ("database is busy", once on CI sacctmgr
        aborted), so it is tried again until the cluster is there (``_wait_for``'s deadline)."""
        for proc in ("mariadbd", "slurmdbd"):
            if self.procs[proc].poll() is not None:
                raise RuntimeError(f"{proc} exited with {self.procs[proc].returncode}:\n{self.logs()}")
        try:
            subprocess.run(["sacctmgr", "-i", "add", "cluster", "gpuseattest"], env=self.env, stdout=log,
                           stderr=log, check=False, timeout=30)  # fmt: skip
            listed = subprocess.run(
                ["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"],
                env=self.env, capture_output=True, text=True, check=False, timeout=30,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return False
        return "gpuseattest" in listed.stdout.split()

    def _idle(self) -> bool:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}; logs in {self.root / 'log'}:\n{self.logs()}")
        try:
            out = subprocess.run(
                ["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True, timeout=3
            ).stdout
        except subprocess.TimeoutExpired:
            return False
        return out.strip().splitlines()[:1] == ["idle"]

    def _wait_for(self, ok: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ok():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}; logs:\n{self.logs()}")

    def logs(self) -> str:
        out = []
        for p in sorted((self.root / "log").glob("*")):
            out.append(f"== {p.name}\n" + p.read_text(errors="replace")[-3000:])
        return "\n".join(out)

    def stop(self) -> None:
        """Every job still queued or running cancelled first (a job's ``slurmstepd`` and its processes outlive
        slurmd), then SIGTERM to each daemon by pid (slurmd first), SIGKILL if it lingers."""
        self._cancel_jobs()
        for name in ("slurmd", "slurmctld", "slurmdbd", "mariadbd", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def _cancel_jobs(self, timeout: float = 15) -> None:
        """``scancel`` each job the controller still knows, and wait until none is left (or ``timeout``)."""
        ctld = self.procs.get("slurmctld")
        if ctld is None or ctld.poll() is not None:
            return

        def jobs() -> list[str]:
            try:
                out = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env, capture_output=True, text=True,
                                     timeout=5, check=False)  # fmt: skip
            except subprocess.TimeoutExpired:
                return []
            return out.stdout.split()

        ids = jobs()
        if not ids:
            return
        subprocess.run(["scancel", "--full", *ids], env=self.env, capture_output=True, timeout=10, check=False)
        deadline = time.monotonic() + timeout
        while jobs() and time.monotonic() < deadline:
            time.sleep(0.2)
