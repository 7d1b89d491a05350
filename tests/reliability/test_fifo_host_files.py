"""``host up`` compares each file it manages (sshd drop-in, profile.d script, keys) with what it would
write before writing it: a FIFO there must not be read (the read blocks forever); it is then refused by
the writer like every other non-regular output (issue 38, item 4). Run in a thread with a timeout guard:
``host up`` itself changes the machine (accounts, sshd), so the host's file step is tested directly."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from gpuseat.engines.host.machine import Machine
from gpuseat.errors import InputError


def _within(seconds: float, fn: object) -> object:
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()  # type: ignore[operator]
        except Exception as exc:  # the assertion below names it
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pytest.fail(f"blocked for {seconds} s on a FIFO")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


def test_a_fifo_is_not_read_when_comparing(tmp_path: Path) -> None:
    fifo = tmp_path / "gpuseat.conf"
    os.mkfifo(fifo, 0o644)
    assert _within(10, lambda: Machine.file_is(fifo, "Match Group gpuseat\n")) is False


def test_a_fifo_is_refused_as_an_output(tmp_path: Path) -> None:
    from gpuseat.files import write_file

    fifo = tmp_path / "gpuseat.sh"
    os.mkfifo(fifo, 0o644)
    with pytest.raises(InputError, match="not a regular file"):
        _within(10, lambda: write_file(fifo, "export X=1\n"))
