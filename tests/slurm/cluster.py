"""A real one-node Slurm for the tests: munged, slurmctld and slurmd from Debian's packages.

Recipe from ``shared/reference/slurm.md``: configs in a temp dir, ``mknod`` character devices stand
in for GPUs, the daemons run in the foreground under our own pids (so they are stopped by pid), and
``sinfo`` (wrapped in a timeout) is polled until the node is idle. Its own munge socket and free
ports keep it apart from any Slurm already on the machine.
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

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sinfo")


def missing_binaries() -> list[str]:
    """Which of the Slurm/MUNGE programs this machine lacks (setup.sh installs them)."""
    return [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


@dataclass
class Cluster:
    """A running one-node cluster: its config dir, environment and daemon processes."""

    root: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

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
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
AccountingStorageType=accounting_storage/none
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
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SlurmdParameters=config_overrides
"""
        self.conf.parent.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(base + extra + node_and_partitions)
        (self.conf.parent / "gres.conf").write_text(gres_conf)

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
        """SIGTERM to each daemon by pid (slurmd first), SIGKILL if it lingers."""
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
