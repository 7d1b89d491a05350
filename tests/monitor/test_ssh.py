"""Issue 15 items 2 and 3: ``--ssh HOST`` is checked and passed after ``--``, and the users of remote
pids come from the remote host's own process table (``ps`` in the same SSH way), never from this one's.

The remote side is a stand-in ``ssh`` on PATH that records its arguments and runs the remote command
with stand-in ``nvidia-smi`` (a real capture) and ``ps`` (the remote host's users).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from gpuseat.core.hosts import ssh_target
from gpuseat.errors import InputError

from .conftest import FIXTURES

SSH = """#!/bin/sh
echo "$@" >> "{log}"
while [ "$1" != "--" ]; do shift; done
shift; shift  # '--' and the host
PATH="{remote}:$PATH" exec "$@"
"""
NVIDIA_SMI = """#!/bin/sh
[ "$1" = "-q" ] && exec cat "{capture}"
exit 3
"""
PS = """#!/bin/sh
printf '  675 root\\n 5762 alice\\n'
"""


@pytest.fixture
def remote(tmp_path, monkeypatch):
    """A stand-in ssh whose 'remote host' has the T4 capture and users root (pid 675), alice (5762)."""
    bin_dir, remote_dir = tmp_path / "bin", tmp_path / "remote"
    bin_dir.mkdir()
    remote_dir.mkdir()
    log = tmp_path / "ssh.log"
    scripts = {
        bin_dir / "ssh": SSH.format(log=log, remote=remote_dir),
        remote_dir / "nvidia-smi": NVIDIA_SMI.format(capture=FIXTURES / "telegraf__tesla-t4.xml"),
        remote_dir / "ps": PS,
    }
    for path, body in scripts.items():
        path.write_text(body)
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


@pytest.mark.parametrize(
    "host", ["-oProxyCommand=touch X", "-oX", "gpu01 -oProxyCommand=x", "a;touch X", "$(touch X)", "a\nb", "", "a..b"]
)
def test_bad_hosts_are_refused(host):
    with pytest.raises(InputError):
        ssh_target(host)


@pytest.mark.parametrize("host", ["gpu01", "gpu01.lab.example", "admin@10.0.0.5", "fe80::1", "node-7"])
def test_good_hosts_pass(host):
    assert ssh_target(host) == host


def test_ssh_option_injection_is_refused_with_exit_2_and_nothing_runs(cli, tmp_path, remote, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = cli("top", "--ssh", "-oProxyCommand=touch X", "--once")
    assert r.code == 2 and "--ssh" in r.err and "Traceback" not in r.err
    assert cli("top", "--ssh", "-oX", "--once").code == 2
    assert not remote.exists()  # ssh was never started
    assert not (tmp_path / "X").exists()


@pytest.mark.skipif(shutil.which("ssh") is None, reason="OpenSSH client not installed")
def test_ssh_option_injection_with_the_real_ssh_client(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "X"
    r = cli("top", "--ssh", f"-oProxyCommand=touch {marker}", "--once")
    assert r.code == 2 and not marker.exists()


def test_remote_users_come_from_the_remote_host(cli, tmp_path, remote):
    (tmp_path / "seats.csv").write_text(
        "id,device,participant,user\nt4,GPU-d37e67a5-91dd-3774-a5cb-99096249601a,p1,bob\n"
    )
    r = cli("top", "--ssh", "gpu01", "--seats", tmp_path / "seats.csv", "--once", "--format", "json")
    assert r.code == 0, r.err
    procs = {p["pid"]: p for p in json.loads(r.out)["processes"]}
    assert procs[675]["user"] == "root" and procs[5762]["user"] == "alice"
    assert procs[5762]["foreign"] and procs[5762]["seat"] == "t4"
    calls = remote.read_text().splitlines()
    assert calls[0] == "-o BatchMode=yes -o ConnectTimeout=10 -- gpu01 nvidia-smi -q -x"
    assert calls[1] == "-o BatchMode=yes -o ConnectTimeout=10 -- gpu01 ps -o pid=,user= -p 675,5762"


def test_a_capture_never_looks_pids_up_on_this_machine(cli, tmp_path):
    """A local process with the same pid as one in a capture is not its owner."""
    text = (FIXTURES / "telegraf__tesla-t4.xml").read_text(encoding="utf-8")
    (tmp_path / "cap.xml").write_text(text.replace("<pid>5762</pid>", f"<pid>{os.getpid()}</pid>"))
    (tmp_path / "seats.csv").write_text("id,device,participant\nt4,GPU-d37e67a5-91dd-3774-a5cb-99096249601a,nobody\n")
    r = cli("top", "--from-xml", tmp_path / "cap.xml", "--seats", tmp_path / "seats.csv", "--once", "--format", "json")
    assert r.code == 0, r.err
    mine = [p for p in json.loads(r.out)["processes"] if p["pid"] == os.getpid()]
    assert mine[0]["user"] is None and mine[0]["foreign"] is False


def test_nvidia_smi_failure_on_the_host_is_an_engine_error(cli, tmp_path, remote):
    (Path(remote).parent / "remote" / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    r = cli("top", "--ssh", "gpu01", "--once")
    assert r.code == 1 and "NVIDIA-SMI has failed" in r.err and "Traceback" not in r.err
