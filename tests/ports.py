"""One free loopback TCP port for a daemon a test starts (slurmctld, sshd, a hub, Prometheus, a portal).

A port drawn with a bind to port 0 and closed again comes from the kernel's ephemeral range, the same range
that every other bind to port 0 and every outgoing connection of the machine draws from: on a loaded
machine with three xdist workers it was taken again before the daemon bound it (slurmd: "Unable to bind
listen port", clean-clone CI at 4aedacf; a JupyterHub server, 27cdeba). Ports below that range are handed
out by nobody; this draws one at random there, checked free by binding it. Two tests drawing the same one
at the same moment is the only race left: one in several thousand draws' worth of the range at once.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: the lowest port a draw takes (below it: well-known services and what a site runs)
LOWEST = 10000


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (``net.ipv4.ip_local_port_range``; 32768 if unread)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago and that the kernel does not hand out by itself."""
    top = ephemeral_start() - 1
    if top - LOWEST >= 1000:
        for _ in range(200):
            port = random.randint(LOWEST, top)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    with socket.socket() as s:  # no room below the ephemeral range: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
