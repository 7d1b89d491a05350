"""The one way gpuseat runs an external command (ssh, useradd, usermod, setfacl, virsh, scontrol,
scancel, sacctmgr, kubectl, systemctl, nvidia-smi, pg_dump …).

Every call goes through a :class:`Runner` so that one place sets the timeout, runs as another user,
passes the environment, records what ran (the apply report lists each command with its exit code
and time) and, with ``dry_run``, only lists the commands that would change something. Tests use
:class:`RecordingRunner`, which answers from a table and records the calls, for unit tests of an
engine's plan and apply; the integration tests run the real tools through a real :class:`Runner`.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from gpuseat.errors import EngineError

DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Ran:
    """One command as it ran (or, in a dry run, would have run)."""

    argv: tuple[str, ...]
    user: str | None
    returncode: int | None
    seconds: float
    stdout: str = ""
    stderr: str = ""
    dry: bool = False

    @property
    def line(self) -> str:
        """The command as a shell line (quoted), with who ran it."""
        text = shlex.join(self.argv)
        return f"{text}   (as {self.user})" if self.user else text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for the apply report (output tails only)."""
        return {
            "command": self.line,
            "user": self.user,
            "returncode": self.returncode,
            "seconds": round(self.seconds, 4),
            "stderr": self.stderr[-400:],
            "dry": self.dry,
        }


Completed = subprocess.CompletedProcess


@dataclass
class Runner:
    """Runs commands with a timeout, as a user, with an environment; records each call.

    ``dry_run``: commands that change something (``mutates=True``, the default) are recorded and not
    run; reads (``mutates=False``: ``nvidia-smi``, ``squeue``, ``getent``) still run, so a dry plan
    sees the machine as it is.
    """

    dry_run: bool = False
    timeout: float = DEFAULT_TIMEOUT_S
    env: Mapping[str, str] | None = None
    log: list[Ran] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        user: str | None = None,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        cwd: str | None = None,
        check: bool = True,
        mutates: bool = True,
        where: str = "engine",
    ) -> Completed[str]:
        """Run ``argv`` (never through a shell); a missing tool, a time-out or (with ``check``) a
        non-zero exit is one :class:`EngineError` that names the command and its stderr."""
        args = tuple(str(a) for a in argv)
        if not args:
            raise ValueError("empty command")
        if self.dry_run and mutates:
            self._record(Ran(args, user, None, 0.0, dry=True))
            return subprocess.CompletedProcess(list(args), 0, "", "")
        limit = self.timeout if timeout is None else timeout
        started = time.monotonic()
        try:
            done = self._execute(args, limit, user, self._env(env), input, cwd)
        except FileNotFoundError:
            self._record(Ran(args, user, 127, time.monotonic() - started, "", "not found"))
            raise EngineError(f"{args[0]} not found", where=where, fix=f"install {args[0]} on this machine") from None
        except subprocess.TimeoutExpired as exc:
            self._record(Ran(args, user, 124, time.monotonic() - started, _text(exc.stdout), _text(exc.stderr)))
            raise EngineError(f"{args[0]} did not finish within {limit:g} s", where=where) from None
        self._record(Ran(args, user, done.returncode, time.monotonic() - started, done.stdout, done.stderr))
        if check and done.returncode != 0:
            detail = (done.stderr or done.stdout).strip()[:400]
            raise EngineError(f"{shlex.join(args[:4])} failed (exit {done.returncode}): {detail}", where=where)
        return done

    def try_run(self, argv: Sequence[str], **kwargs: Any) -> Completed[str]:
        """Like :meth:`run` with ``check=False``, and a missing tool or a time-out as exit 127 / 124."""
        try:
            return self.run(argv, check=False, **kwargs)
        except EngineError as exc:
            code = 124 if "did not finish" in exc.what else 127
            return subprocess.CompletedProcess(list(argv), code, "", exc.what)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdout: int | IO[Any] | None = subprocess.PIPE,
        stderr: int | IO[Any] | None = subprocess.PIPE,
        text: bool = True,
        **popen: Any,
    ) -> subprocess.Popen[Any]:
        """Start a long-running command (a benchmark worker, a daemon in a test lab); recorded, not waited."""
        args = tuple(str(a) for a in argv)
        self._record(Ran(args, None, None, 0.0))
        return subprocess.Popen(args, env=self._env(env), stdout=stdout, stderr=stderr, text=text, **popen)

    @staticmethod
    def which(name: str) -> str | None:
        """The path of a tool on PATH (None when it is not installed)."""
        return shutil.which(name)

    def take(self) -> list[Ran]:
        """The calls recorded since the last ``take`` (and forget them)."""
        with self._lock:
            out, self.log = self.log, []
        return out

    # -- internals ---------------------------------------------------------------------------------

    def _record(self, ran: Ran) -> None:
        with self._lock:
            self.log.append(ran)
            if len(self.log) > 10_000:  # a long-running agent takes the log after every apply; cap it anyway
                del self.log[:5_000]

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str] | None:
        if self.env is None and extra is None:
            return None
        return {**os.environ, **(self.env or {}), **(extra or {})}

    def _execute(
        self,
        args: tuple[str, ...],
        timeout: float,
        user: str | None,
        env: dict[str, str] | None,
        input: str | None,
        cwd: str | None,
        /,
    ) -> Completed[str]:
        extra: dict[str, Any] = {}
        if user is not None:
            import pwd

            entry = pwd.getpwnam(user)
            extra = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": os.getgrouplist(user, entry.pw_gid)}
            env = {**(env or os.environ), "HOME": entry.pw_dir, "USER": user, "LOGNAME": user}
            cwd = cwd or (entry.pw_dir if os.path.isdir(entry.pw_dir) else "/")
        # its own process group, so a time-out ends everything the command started (ssh, runuser, srun …)
        with subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=env,
            cwd=cwd,
            start_new_session=True,
            **extra,
        ) as proc:
            try:
                out, err = proc.communicate(input, timeout=timeout)
            except subprocess.TimeoutExpired as exc:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
                raise subprocess.TimeoutExpired(args, timeout, out, err) from exc
        return subprocess.CompletedProcess(list(args), proc.returncode, out, err)


Answer = tuple[int, str, str] | Callable[[tuple[str, ...]], tuple[int, str, str]]


@dataclass
class RecordingRunner(Runner):
    """A fake for unit tests: records every call and answers from ``answers`` (command prefix →
    ``(returncode, stdout, stderr)`` or a function of the argv); unknown commands exit 0 silently."""

    answers: dict[tuple[str, ...], Answer] = field(default_factory=dict)

    def _execute(self, args: tuple[str, ...], *_call: Any) -> Completed[str]:
        """The answer for ``args``; the rest of the call (timeout, user, env, input, cwd) does not change it."""
        for n in range(len(args), 0, -1):
            answer = self.answers.get(args[:n])
            if answer is not None:
                code, out, err = answer(args) if callable(answer) else answer
                return subprocess.CompletedProcess(list(args), code, out, err)
        return subprocess.CompletedProcess(list(args), 0, "", "")


_DEFAULT = Runner()


def default_runner() -> Runner:
    """The process-wide runner for commands outside an apply (probes, backups, benchmarks)."""
    return _DEFAULT


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
