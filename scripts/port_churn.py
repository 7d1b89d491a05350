"""Keep ~900 loopback listeners on kernel-chosen ports, renewed all the time, each answering any request with 200.

A stress for the tests' port handling (docs/results.md, 2026-12-07): a port drawn by binding port 0 and closing
it is soon taken by this, as by a loaded machine's other processes. Run it beside one test once that test's
daemons are up, e.g. ``(sleep 4.6; exec .venv/bin/python scripts/port_churn.py) & .venv/bin/python -m pytest
tests/jupyterhub/test_hub_real.py -k twenty_rounds; pkill -f port_churn.py``. It binds nothing below the
kernel's ephemeral range, where ``tests/ports.py`` draws.
"""

from __future__ import annotations

import collections
import socket
import threading
import time

HELD = 900  # under the usual 1,024 open files


def _answer(listener: socket.socket) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        try:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        except OSError:
            pass
        conn.close()


def main() -> None:
    held: collections.deque[socket.socket] = collections.deque()
    while True:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        threading.Thread(target=_answer, args=(listener,), daemon=True).start()
        held.append(listener)
        if len(held) > HELD:
            held.popleft().close()
        time.sleep(0.0005)


if __name__ == "__main__":
    main()
