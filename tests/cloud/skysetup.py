"""Run a generated SkyPilot task's ``setup`` as SkyPilot would on a fresh VM, but in a throw-away root.

* the wheel is built from this checkout (a copy of ``src/`` and ``pyproject.toml``, ``pip wheel --no-deps
  --no-build-isolation --no-index``), into a wheelhouse folder;
* the VM's ``python3`` is a fresh virtual environment that sees the project's dependencies (a folder of
  links to the dev environment's packages, without gpuseat itself and without PyTorch) the way an image
  sees its preinstalled packages;
* ``file_mounts`` is done as SkyPilot does it (source folder copied to the destination, ``~`` = the
  cluster user's home), the user database is a temp ``etc/`` (``useradd --prefix``), and the package
  index is a dead address, so any install that is not ``--no-index`` from the wheelhouse fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DEAD_INDEX = "http://127.0.0.1:9/simple"
_LEAVE_OUT = ("gpuseat", "__editable__", "torch", "torchvision", "torchgen", "functorch", "nvidia", "triton")


def build_wheel(out: Path) -> Path:
    """A wheel of this checkout in ``out`` (built from a copy, so the checkout gets no build folders)."""
    src = out / "src-copy"
    shutil.copytree(REPO / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, src / name)
    wheels = out / "wheelhouse"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--no-cache-dir",  # the shell's ~/.cache stays untouched
            "-q",
            "-w",
            wheels,
            src,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.rmtree(src)
    (wheel,) = wheels.glob("gpuseat-*.whl")
    return wheel


def vm_python(out: Path) -> Path:
    """The image's ``python3``: a venv (with system site packages, so ``pip --user`` works as on a VM)
    that sees the project's dependencies but neither gpuseat nor PyTorch."""
    venv = out / "image-python"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True, timeout=300)
    farm = out / "image-packages"
    farm.mkdir()
    dev = Path(sysconfig.get_paths()["purelib"])
    for entry in dev.iterdir():
        if entry.name.startswith(_LEAVE_OUT) or entry.suffix == ".pth":
            continue
        (farm / entry.name).symlink_to(entry)
    site = Path(
        subprocess.run(
            [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "image-packages.pth").write_text(f"{farm}\n", encoding="utf-8")
    return venv / "bin"


def fresh_root(out: Path) -> Path:
    """An ``etc/`` with only root in it, for ``useradd --prefix``."""
    root = out / "root"
    (root / "etc").mkdir(parents=True)
    (root / "home").mkdir()
    files = {
        "passwd": "root:x:0:0:root:/root:/bin/bash\n",
        "group": "root:x:0:\n",
        "shadow": "root:*:19000:0:99999:7:::\n",
        "gshadow": "root:*::\n",
        "login.defs": "",
    }
    for name, text in files.items():
        (root / "etc" / name).write_text(text, encoding="utf-8")
    (root / "etc" / "shadow").chmod(0o600)
    (root / "etc" / "gshadow").chmod(0o600)
    return root


@dataclass
class Vm:
    """A throw-away VM: the cluster user's home, the root for the user database, the image's Python."""

    home: Path
    root: Path
    python_bin: Path

    def mount(self, task: dict) -> None:
        """``file_mounts`` as SkyPilot does it: each local folder copied to its destination (``~`` = home)."""
        for dest, source in (task.get("file_mounts") or {}).items():
            target = self.home / dest.removeprefix("~/") if dest.startswith("~/") else self.root / dest.lstrip("/")
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(source, target)

    def env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TERM")}
        return {
            **keep,
            "HOME": str(self.home),
            "PATH": f"{self.python_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "GPUSEAT_ROOT": str(self.root),
            "PIP_INDEX_URL": DEAD_INDEX,
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_NO_CACHE_DIR": "1",
            "PYTHONNOUSERSITE": "",
        }

    def setup(self, task: dict) -> subprocess.CompletedProcess[str]:
        """Mount, then run the task's setup with bash, as SkyPilot runs it."""
        self.mount(task)
        return subprocess.run(
            ["bash", "-c", task["setup"]],
            env=self.env(),
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    def passwd(self, user: str) -> list[str] | None:
        for line in (self.root / "etc" / "passwd").read_text(encoding="utf-8").splitlines():
            fields = line.split(":")
            if fields[0] == user:
                return fields
        return None

    def shadow(self, user: str) -> list[str] | None:
        for line in (self.root / "etc" / "shadow").read_text(encoding="utf-8").splitlines():
            fields = line.split(":")
            if fields[0] == user:
                return fields
        return None


def new_vm(out: Path, python_bin: Path) -> Vm:
    home = out / "sky-home"
    home.mkdir(parents=True)
    return Vm(home=home, root=fresh_root(out), python_bin=python_bin)


def ssh_key(out: Path, name: str) -> str:
    """A real ed25519 public key (ssh-keygen)."""
    path = out / f"{name}_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@laptop", "-f", path], check=True)
    return path.with_suffix(".pub").read_text(encoding="utf-8").strip()


def load_task(path: Path | str) -> dict:
    text = Path(path).read_text(encoding="utf-8")
    doc: dict = yaml.safe_load(text)
    return doc
