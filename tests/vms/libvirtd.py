"""A real libvirtd for the tests, started without systemd (platform.md B2) and stopped by pid.

The daemon listens on a private socket (``unix_sock_dir`` in its own config file); a machine-wide
lock lets only one test process run it at a time (libvirt's QEMU driver keeps its state under
/run/libvirt, which two daemons cannot share). Needs root, as on CI.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from .conftest import require_tool

LOCK = Path(tempfile.gettempdir()) / "gpuseat-test-libvirtd.lock"


def _wait_gone(pid: int, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def _stop(pidfile: Path) -> None:
    if not pidfile.exists():
        return
    text = pidfile.read_text().strip()
    if text.isdigit():
        pid = int(text)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        _wait_gone(pid, 15)


def _listening(path: str) -> bool:
    """Whether a daemon answers on this unix socket (a stale socket file does not count)."""
    with socket.socket(socket.AF_UNIX) as sock:
        try:
            sock.connect(path)
        except OSError:
            return False
    return True


def traversable_tmp() -> str:
    """A temp folder base that libvirt's QEMU user (not root) can traverse.

    ``TMPDIR`` may point into a private folder (a clone under ``mktemp -d`` is 0700): QEMU then fails
    with "Permission denied" on the kernel, disks and console logs. Fall back to /var/tmp or /tmp.
    """
    for base in (tempfile.gettempdir(), "/var/tmp", "/tmp"):
        path = Path(base).resolve()
        if all(os.stat(p).st_mode & 0o001 for p in (path, *path.parents)):
            return str(path)
    raise RuntimeError("no temp folder that QEMU's user can traverse")


def remove_pools(uri: str, prefix: str) -> None:
    """Destroy and undefine the storage pools a test made (their definitions outlive the daemon)."""
    import libvirt

    conn = libvirt.open(uri)
    try:
        for pool in conn.listAllStoragePools(0):
            if pool.name().startswith(prefix):
                if pool.isActive():
                    pool.destroy()
                pool.undefine()
    finally:
        conn.close()


def _reap_leftovers() -> None:
    """Stop the test libvirtd of a run that died before its cleanup (kill -9, a timeout), with the domains,
    pools and networks of ours it still runs: a second system-mode libvirtd cannot start beside it, so every
    later libvirtd test failed to connect. Called under the machine-wide lock, which a live run holds for as
    long as its daemon runs: any test daemon still running then is such a leftover."""
    import libvirt

    bases = {Path(b).resolve() for b in (tempfile.gettempdir(), "/var/tmp", "/tmp") if Path(b).is_dir()}
    for work in sorted(w for base in bases for w in base.glob("gpuseat-libvirtd-*") if w.is_dir()):
        sock = work / "sock" / "libvirt-sock"
        if _listening(str(sock)):
            try:
                conn = libvirt.open(f"qemu:///system?socket={sock}")
            except libvirt.libvirtError:
                conn = None
            if conn is not None:
                try:
                    for dom in conn.listAllDomains(0):
                        if dom.name().startswith("gpuseat-"):
                            if dom.isActive():
                                dom.destroy()
                            dom.undefine()
                    for pool in conn.listAllStoragePools(0):
                        if pool.name().startswith("gpuseat-"):
                            if pool.isActive():
                                pool.destroy()
                            pool.undefine()
                    for net in conn.listAllNetworks(0):
                        if net.name().startswith("gpuseat-tnet-") and net.isActive():
                            net.destroy()
                finally:
                    conn.close()
        _stop(work / "libvirtd.pid")
        _stop(work / "virtlogd.pid")
        shutil.rmtree(work, ignore_errors=True)


@contextmanager
def libvirtd() -> Iterator[tuple[str, Path]]:
    """Yield ``(uri, workdir)`` of a running private libvirtd; the workdir is readable by QEMU's user."""
    daemon = require_tool("libvirtd")
    logd = require_tool("virtlogd")
    if os.geteuid() != 0:
        require_tool("root (the test libvirtd runs QEMU as root's system instance)")
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _reap_leftovers()
        work = Path(tempfile.mkdtemp(prefix="gpuseat-libvirtd-", dir=traversable_tmp()))
        work.chmod(0o755)
        (work / "sock").mkdir()
        conf = work / "libvirtd.conf"
        conf.write_text(
            f'unix_sock_dir = "{work / "sock"}"\nunix_sock_rw_perms = "0700"\n'
            'auth_unix_rw = "none"\nauth_unix_ro = "none"\n'
        )
        Path("/run/libvirt").mkdir(parents=True, exist_ok=True)
        started_logd = not _listening("/run/libvirt/virtlogd-sock")
        try:
            if started_logd:
                subprocess.run([logd, "-d", "-p", str(work / "virtlogd.pid")], check=True, timeout=30)
            subprocess.run([daemon, "-d", "-f", str(conf), "-p", str(work / "libvirtd.pid")], check=True, timeout=30)
            uri = f"qemu:///system?socket={work / 'sock' / 'libvirt-sock'}"
            import libvirt

            libvirt.registerErrorHandler(lambda _c, _e: None, None)
            deadline = time.monotonic() + 60
            while True:
                try:
                    libvirt.open(uri).close()
                    break
                except libvirt.libvirtError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            yield uri, work
        finally:
            _stop(work / "libvirtd.pid")
            if started_logd:
                _stop(work / "virtlogd.pid")
            shutil.rmtree(work, ignore_errors=True)


def shared_libvirtd(config: pytest.Config) -> tuple[str, Path]:
    """``libvirtd()``'s ``(uri, workdir)``, one daemon for the whole pytest run of this process: started at the
    first call, stopped (and the lock let go) when pytest ends (``config.add_cleanup``).

    The libvirtd tests are one xdist group, run in turn on one worker: one daemon serves every module,
    instead of a start and a stop per module (the stop alone is seconds: libvirtd, then virtlogd). Each
    test still makes and removes its own domains, pools, networks and files (names of its own). Kept on
    ``config`` (not in this module): however this file is imported, a second daemon would wait forever
    on the lock the first one holds.
    """
    running: tuple[str, Path] | None = getattr(config, "_gpuseat_test_libvirtd", None)
    if running is None:
        stack = ExitStack()
        running = stack.enter_context(libvirtd())
        config._gpuseat_test_libvirtd = running  # type: ignore[attr-defined]
        config.add_cleanup(stack.close)
    return running


DNSMASQ_NS = "http://libvirt.org/schemas/network/dnsmasq/1.0"


@contextmanager
def private_network(uri: str) -> Iterator[str]:
    """A transient NAT-less libvirt network of its own (name, bridge, /24 with DHCP), destroyed after.

    Its dnsmasq offers an address without pinging it first (``no-ping``): nothing else is on the bridge, and
    the ping's 3 s wait, with the guest's DHCP retries, made each lease take about 6 s of a guest's boot."""
    import secrets

    import libvirt

    conn = libvirt.open(uri)
    token = secrets.token_hex(4)
    net = None
    try:
        for _ in range(8):  # a /24 another interface already uses: libvirt refuses it, try another
            a, b = 100 + secrets.randbelow(100), secrets.randbelow(250)
            xml = (
                f"<network xmlns:dnsmasq='{DNSMASQ_NS}'><name>gpuseat-tnet-{token}</name>"
                f"<bridge name='gst{token}' stp='off' delay='0'/><ip address='10.{a}.{b}.1' netmask='255.255.255.0'>"
                f"<dhcp><range start='10.{a}.{b}.10' end='10.{a}.{b}.200'/></dhcp></ip>"
                "<dnsmasq:options><dnsmasq:option value='no-ping'/></dnsmasq:options></network>"
            )
            try:
                net = conn.networkCreateXML(xml)
                break
            except libvirt.libvirtError as exc:
                if "in use" not in str(exc):
                    raise
        assert net is not None, "no free /24 for the test network"
        yield net.name()
    finally:
        if net is not None:
            net.destroy()
        conn.close()
