"""The SQLite writers' queue: first come, first served across processes, the turn handed to the next writer.

SQLite lets one writer at a time in (``BEGIN IMMEDIATE``) and makes the others poll with growing sleeps
(1, 2, 5 … 100 ms), so under load one writer can wait many times as long as the rest. A blocking
``flock`` in front of it hands the lock on as soon as it is free, but to whichever process asks first
after the release: often the one that has just let go, before the waiter the kernel woke gets a CPU.
With 10,000 claims by 16 processes on 2 cores that re-taking made the p99 2.3× SQLite's own
(docs/results.md, 2026-12-04).

Here each writer takes a ticket and waits for the writer before it, and no one else (a queue lock in the
manner of CLH locks, built from what the kernel offers every process):

* the ticket is the offset of one byte appended to the queue file (``O_APPEND`` makes appends atomic, so
  every writer gets its own offset, in order);
* the writer holds an open-file-description lock on the byte at its ticket while it waits and writes,
  and waits for the lock on its predecessor's byte; on leaving it marks its byte done and unlocks,
  which wakes its successor alone. The writer next in line (its predecessor's predecessor done) watches
  the mark instead of sleeping, for at most :data:`SPIN_S`: a wake-up costs more than a short write;
* a writer that comes straight back (a process claiming seat after seat) may keep its turn for
  :data:`STREAK` writes: it lends the turn (mark 2, byte unlocked) and takes it back if it returns
  within :data:`LEASE_S`; the next writer waits for a lent turn at most twice that. A new writer's first
  write after another's reads every page afresh (SQLite drops a connection's page cache when another
  connection has written), so handing on every single write cost a third of the claims/s;
* the kernel drops the locks of a process that dies, so a writer killed while waiting or writing
  passes the turn on, as a killed ``flock`` holder did. A predecessor whose byte is unlocked but not
  done (it was killed, or it has taken its ticket and not yet locked) is given :data:`STALE_S`, then
  passed over: the writer waits for the one that predecessor was waiting for.

The queue orders writers; it does not guard the data: ``BEGIN IMMEDIATE`` does, so a writer that skips
the queue (another program, a stale predecessor passed over) only waits in SQLite's busy handler. The
file grows a byte per write and starts over past :data:`RESTART_AT` (the writers queued at that moment
go on without waiting for each other, once). Linux only (open-file-description locks); elsewhere the
queue is a plain ``flock``.
"""

from __future__ import annotations

import fcntl
import os
import struct
import time

__all__ = ["Turns"]

STALE_S = 0.02  # how long a predecessor that is not in the queue yet (or was killed) is waited for
SPIN_S = 0.002  # next in line: how long it watches for its turn before it sleeps
LEASE_S = 0.001  # a writer that comes back within this keeps its turn …
STREAK = 3  # … for at most this many writes in a row
RESTART_AT = 1 << 24  # the queue file starts over past 16 MiB (16 million writes)
_OFD = hasattr(fcntl, "F_OFD_SETLKW")
_FLOCK = struct.Struct("hhqqi4x")  # struct flock on Linux: type, whence, start, len, pid (0 for OFD locks)
# a ticket's byte: 0 waiting or writing, 1 done, 2 lent (its writer may come back for another write;
# the byte unlocked), 3 writing again after a lend
_WAITING, _DONE, _LENT, _AGAIN = b"\x00", b"\x01", b"\x02", b"\x03"


def _lock(fd: int, kind: int, at: int, wait: bool = True) -> None:
    cmd = fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK
    fcntl.fcntl(fd, cmd, _FLOCK.pack(kind, os.SEEK_SET, at, 1, 0))


def _locked(fd: int, at: int) -> None:
    """Return once the byte at ``at`` is not locked by its writer (at once when it is not)."""
    _lock(fd, fcntl.F_RDLCK, at)
    _lock(fd, fcntl.F_UNLCK, at)


class Turns:
    """One process's (one connection's) place in the queue of a store file's writers: :meth:`take`
    returns when it is this writer's turn, :meth:`give` hands the turn to the next. Not thread-safe:
    one per connection (each has its own open file, so the locks of two connections of a process
    exclude each other as those of two processes do)."""

    def __init__(self, path: str) -> None:
        flags = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_CREAT
        self._append = os.open(path, flags | os.O_WRONLY | os.O_APPEND, 0o600)
        try:
            self._fd = os.open(path, flags | os.O_RDWR, 0o600)  # locks, and the marks (pread/pwrite)
        except BaseException:
            os.close(self._append)
            raise
        self._ticket = -1  # held or lent
        self._lent_at = 0.0  # when the turn was lent (0: not lent)
        self._gave_at = float("-inf")  # when this writer last ended a turn
        self._busy = False  # this turn's writer came back within LEASE_S of its last one
        self._streak = 0  # writes in this turn

    def take(self) -> None:
        """Wait for this writer's turn (returns at once when the queue is empty)."""
        if not _OFD:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            return
        now = time.monotonic()
        if self._lent_at:
            t, lent_at, self._lent_at = self._ticket, self._lent_at, 0.0
            if now - lent_at < LEASE_S:  # back in time: the turn is still ours
                _lock(self._fd, fcntl.F_WRLCK, t)  # waits only for a reader's glance at the byte
                os.pwrite(self._fd, _AGAIN, t)
                self._streak += 1
                return
            self._end(t)
        self._busy = now - self._gave_at < LEASE_S
        os.write(self._append, _WAITING)
        t = os.lseek(self._append, 0, os.SEEK_CUR) - 1  # this append's offset: the ticket
        try:
            _lock(self._fd, fcntl.F_WRLCK, t, wait=False)  # our byte: free (a ticket is never reused)
        except OSError:
            _lock(self._fd, fcntl.F_WRLCK, t)  # the file started over under a queued writer: wait for it
        self._ticket, self._streak = t, 1
        if t > 0:
            try:
                self._after(t - 1)
            except BaseException:
                self._end(t)
                raise

    def _after(self, prev: int) -> None:
        """Wait until the writer with ticket ``prev`` is done: lent its turn too long ago, or, when it
        is gone (killed, or not coming), until the writer before it is done."""
        if SPIN_S and prev > 0:
            _locked(self._fd, prev - 1)  # the writer before ``prev`` is done: ``prev`` writes now
            end = time.monotonic() + SPIN_S  # next in line: watch for the turn instead of sleeping
            while os.pread(self._fd, 1, prev) not in (_DONE, b"") and time.monotonic() < end:
                os.sched_yield()
        lent_seen = stale_seen = 0.0
        while prev >= 0:
            mark = os.pread(self._fd, 1, prev)
            if mark in (_DONE, b""):  # done, or the file started over (past its end)
                return
            if mark == _LENT:  # its writer may come back for one more write: wait, but not for long
                now = time.monotonic()
                lent_seen = lent_seen or now
                if now - lent_seen > 2 * LEASE_S:
                    return
                os.sched_yield()
                continue
            lent_seen = 0.0
            _locked(self._fd, prev)  # blocks while the predecessor waits or writes
            if os.pread(self._fd, 1, prev) not in (_WAITING, _AGAIN):
                continue
            # unlocked and not done: killed, or between its ticket and its lock
            now = time.monotonic()
            stale_seen = stale_seen or now
            if now - stale_seen > STALE_S:  # gone: wait for the writer it was waiting for
                prev, stale_seen = prev - 1, 0.0
            else:
                time.sleep(0.0001)

    def give(self) -> None:
        """End this writer's turn: the next writer in the queue goes on (or, for a writer that came
        straight back, lend the turn: :meth:`take` within :data:`LEASE_S` keeps it)."""
        if not _OFD:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            return
        t = self._ticket
        if t < 0:
            return
        self._gave_at = time.monotonic()
        if self._busy and self._streak < STREAK:
            try:
                os.pwrite(self._fd, _LENT, t)
            finally:
                _lock(self._fd, fcntl.F_UNLCK, t)
            self._lent_at = self._gave_at
            return
        self._end(t)

    def _end(self, t: int) -> None:
        self._ticket = -1
        try:
            os.pwrite(self._fd, _DONE, t)
            if t >= RESTART_AT:
                os.ftruncate(self._fd, 0)  # queued writers then read past the end: done
        finally:
            _lock(self._fd, fcntl.F_UNLCK, t)

    def close(self) -> None:
        """End a lent turn and close the queue file (a held turn is given up by the kernel)."""
        try:
            if self._lent_at and self._ticket >= 0:
                self._end(self._ticket)
        finally:
            for fd in (self._append, self._fd):
                os.close(fd)
