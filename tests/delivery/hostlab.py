"""A shared GPU host in a temp folder: stand-in device files (``mknod``), a stand-in ``nvidia-smi``,
a real Debian ``sshd`` on a free loopback port with its own config and host key, and real Unix
users with their own SSH keys. Everything it makes (daemon, users, group) is removed by ``close``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ports import free_port

STANDIN = Path(__file__).with_name("standin_nvidia_smi.py")
SSHD = "/usr/sbin/sshd"
GPU_MAJOR, CAPS_MAJOR = 195, 235


def have_tools() -> str | None:
    """Why the lab cannot run here (None when it can): root, sshd, setfacl, useradd."""
    if os.geteuid() != 0:
        return "needs root (creates Unix users and device files)"
    for tool in (SSHD, "setfacl", "useradd", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (scripts/setup.sh --dev installs openssh-server and acl)"
    return None


@dataclass
class Person:
    key: str
    user: str
    private_key: Path
    public_key: str


@dataclass
class Lab:
    """One stand-in GPU host (see the module docstring)."""

    root: Path
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    port: int = 0
    sshd: subprocess.Popen[bytes] | None = None
    people: dict[str, Person] = field(default_factory=dict)
    gpus: list[dict[str, object]] = field(default_factory=list)

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def proc(self) -> Path:
        return self.root / "proc"

    @property
    def nvidia_smi(self) -> Path:
        return self.root / "bin" / "nvidia-smi"

    @property
    def group(self) -> str:
        return f"gs{self.tag}"

    @property
    def keys_dir(self) -> Path:
        """Outside /tmp: sshd's StrictModes refuses keys below a world-writable folder."""
        return Path("/run") / f"gpuseat-hostlab-{self.tag}" / "keys"

    @property
    def dropin_dir(self) -> Path:
        return self.root / "sshd_config.d"

    def settings(self) -> dict[str, str]:
        """The host engine's settings pointing at this lab."""
        return {
            "dev_root": str(self.dev),
            "proc_root": str(self.proc),
            "nvidia_smi": str(self.nvidia_smi),
            "keys_dir": str(self.keys_dir),
            "sshd_dropin": str(self.dropin_dir / "gpuseat.conf"),
            "profile_d": str(self.root / "profile.d" / "gpuseat.sh"),
            "systemd_dir": str(self.root / "systemd"),
            "group": self.group,
            "ssh_host": "127.0.0.1",
            "ssh_port": str(self.port),
        }

    def flags(self) -> list[str]:
        """The same settings as ``gpuseat host up`` flags."""
        return [x for k, v in self.settings().items() for x in (f"--{k.replace('_', '-')}", v)]

    # -- the machine -----------------------------------------------------------------------------

    def build(self, gpus: list[dict[str, object]]) -> None:
        """Device files, mig-minors and the stand-in nvidia-smi for ``gpus``."""
        self.gpus = gpus
        (self.dev / "nvidia-caps").mkdir(parents=True)
        (self.proc / "driver" / "nvidia-caps").mkdir(parents=True)
        (self.root / "bin").mkdir()
        for name, minor in (("nvidiactl", 255), ("nvidia-uvm", 254)):
            os.mknod(self.dev / name, 0o666 | 0o020000, os.makedev(GPU_MAJOR, minor))
        lines, cap = [], 1
        for gpu in gpus:
            os.mknod(self.dev / f"nvidia{gpu['minor']}", 0o666 | 0o020000, os.makedev(GPU_MAJOR, int(gpu["minor"])))  # type: ignore[call-overload]
            for m in gpu.get("mig", []):  # type: ignore[attr-defined]
                for name in (
                    f"gpu{gpu['minor']}/gi{m['gi']}/access",
                    f"gpu{gpu['minor']}/gi{m['gi']}/ci{m['ci']}/access",
                ):
                    lines.append(f"{name} {cap}")
                    os.mknod(
                        self.dev / "nvidia-caps" / f"nvidia-cap{cap}", 0o444 | 0o020000, os.makedev(CAPS_MAJOR, cap)
                    )
                    cap += 1
        (self.proc / "driver" / "nvidia-caps" / "mig-minors").write_text("\n".join(lines) + "\n")
        (self.root / "bin" / "devices.json").write_text(
            json.dumps({"dev_root": str(self.dev), "proc_root": str(self.proc), "gpus": gpus})
        )
        self.nvidia_smi.write_text("#!/usr/bin/python3\n" + STANDIN.read_text())
        self.nvidia_smi.chmod(0o755)
        for p in (self.root, self.dev, self.root / "bin", self.proc):
            p.chmod(0o755)

    def cap_file(self, gpu_minor: int, gi: int, ci: int | None = None) -> Path:
        """The capability file of a MIG GI (or CI)."""
        text = (self.proc / "driver" / "nvidia-caps" / "mig-minors").read_text()
        name = f"gpu{gpu_minor}/gi{gi}" + (f"/ci{ci}" if ci is not None else "") + "/access"
        for line in text.splitlines():
            if line.split()[0] == name:
                return self.dev / "nvidia-caps" / f"nvidia-cap{line.split()[1]}"
        raise KeyError(name)

    def person(self, key: str) -> Person:
        """A participant with a unique Unix user name and their own ed25519 key pair."""
        user = f"g{self.tag}{key}"[:32]
        folder = self.root / "people"
        folder.mkdir(exist_ok=True, mode=0o700)
        private = folder / key
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{key}@laptop", "-f", str(private)], check=True
        )
        self.people[key] = Person(key, user, private, private.with_suffix(".pub").read_text().strip())
        return self.people[key]

    def roster(self) -> str:
        lines = ["key,name,email,unix_user,ssh_key"]
        for p in self.people.values():
            lines.append(f"{p.key},{p.key},{p.key}@example.org,{p.user},{p.public_key}")
        return "\n".join(lines) + "\n"

    # -- sshd --------------------------------------------------------------------------------------

    def start_sshd(self) -> None:
        """Debian's sshd on a free loopback port, own config and host key; waits until it answers."""
        conf = self.root / "sshd"
        conf.mkdir(mode=0o700)
        self.dropin_dir.mkdir(exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(conf / "host_ed25519")], check=True)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation folder
        if not self.port:
            self.port = free_port()
        (conf / "sshd_config").write_text(
            f"Include {self.dropin_dir}/*.conf\n"
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {conf / 'host_ed25519'}\n"
            f"PidFile {conf / 'sshd.pid'}\nUsePAM no\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nStrictModes yes\n"
            "AuthorizedKeysFile .ssh/authorized_keys\nLogLevel VERBOSE\nMaxStartups 100:30:200\n"
        )
        subprocess.run([SSHD, "-t", "-f", str(conf / "sshd_config")], check=True)
        log = open(conf / "sshd.log", "wb")  # noqa: SIM115 - closed with the daemon
        self.sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", str(conf / "sshd_config")], stdout=log, stderr=log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.sshd.poll() is not None:
                raise RuntimeError((conf / "sshd.log").read_text())
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("sshd did not start listening")

    def sshd_log(self) -> str:
        return (self.root / "sshd" / "sshd.log").read_text(errors="replace")

    def ssh(self, who: str, command: str, *, key: Path | None = None) -> subprocess.CompletedProcess[str]:
        """``ssh`` as a participant with their own key (or ``key``), as they would from their laptop."""
        p = self.people[who]
        argv = [
            "ssh", "-F", "none", "-i", str(key or p.private_key), "-p", str(self.port),
            "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10",
            f"{p.user}@127.0.0.1", command,
        ]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    # -- cleanup -----------------------------------------------------------------------------------

    @staticmethod
    def _kill_processes_of(user: str) -> None:
        """End what a test user still runs (a probe left hanging on purpose), by pid."""
        import pwd

        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            return
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if entry.stat().st_uid == uid:
                        os.kill(int(entry.name), signal.SIGKILL)
                except (FileNotFoundError, ProcessLookupError, PermissionError):
                    pass

    def close(self) -> None:
        """Stop sshd (by its pid), remove the users and the group, delete the folder."""
        if self.sshd is not None and self.sshd.poll() is None:
            self.sshd.send_signal(signal.SIGTERM)
            try:
                self.sshd.wait(10)
            except subprocess.TimeoutExpired:
                self.sshd.kill()
                self.sshd.wait()
        for p in self.people.values():
            self._kill_processes_of(p.user)
            subprocess.run(["userdel", "--remove", p.user], capture_output=True, check=False)
        subprocess.run(["groupdel", self.group], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.keys_dir.parent, ignore_errors=True)


def new_lab() -> Lab:
    """A lab in a fresh world-traversable temp folder (participants must reach the stand-ins)."""
    return Lab(Path(tempfile.mkdtemp(prefix="gpuseat-hostlab-", dir="/tmp")))


MIG_AND_WHOLE = [
    {
        "minor": 0,
        "name": "NVIDIA H200",
        "pci": "00000000:1A:00.0",
        "uuid": "GPU-aaaaaaaa-0000-4000-8000-000000000000",
        "mig": [
            {"gi": gi, "ci": 0, "profile": "1g.18gb", "uuid": f"MIG-aaaaaaaa-{gi:04d}-4000-8000-00000000000{gi}"}
            for gi in (7, 8, 9)
        ],
    },
    {"minor": 1, "name": "NVIDIA H200", "pci": "00000000:3D:00.0", "uuid": "GPU-bbbbbbbb-0000-4000-8000-000000000001"},
]
