"""gpuseat's entry point in a forked child of a warm process, for the tests that race or kill many runs.

A fresh interpreter per run spends most of a two-core test starting Python, Typer, SQLAlchemy and the
catalog; a fork of one warm process is still a process of its own (its own pid, connections and files,
killed for real with SIGKILL) but starts at once. Imported by the warm scripts of
``tests/monitor/test_multi_writer.py`` and ``tests/reliability/test_crash_safe_out.py`` (``PYTHONPATH``
holds this folder)."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable


def run_main(
    argv: list[str], *, out: str | None = None, err: str | None = None, before: Callable[[], None] | None = None
) -> int:
    """Fork; the child runs ``gpuseat ARGV`` (stdout, stderr to ``out``, ``err``; ``before`` first) and exits
    with its code (70 when it failed before it ran). Returns the child's pid."""
    from gpuseat.cli import main

    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 70
    try:
        for fd, path in ((1, out), (2, err)):
            if path is not None:
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        if before is not None:
            before()
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)


def exit_code(pid: int) -> int:
    """The child's exit code, or minus the signal that ended it."""
    status = os.waitpid(pid, 0)[1]
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
