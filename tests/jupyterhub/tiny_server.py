"""The smallest single-user server a hub accepts: it answers every GET with 200 at JUPYTERHUB_SERVICE_URL.

The seat-race rounds and the benchmark start and stop hundreds of servers; a full jupyter_server takes
seconds of CPU to import, which would measure Python imports, not the hub and gpuseat's hook. The
server processes are still real processes started by the real spawner, with the environment the hook set.
A user whose home holds ``.broken`` gets a server that exits at once (a start that fails).
"""

from __future__ import annotations

import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"version": "tiny"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


def main() -> None:
    if os.path.exists(os.path.join(os.environ.get("HOME", "/nonexistent"), ".broken")):
        sys.exit("tiny_server: a broken user environment (~/.broken): exiting before listening")
    url = urlparse(os.environ["JUPYTERHUB_SERVICE_URL"])
    server = ThreadingHTTPServer((url.hostname or "127.0.0.1", url.port or 8888), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


if __name__ == "__main__":
    main()
