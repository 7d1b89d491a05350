"""The SQLite writers' queue: first come, first served across processes, and the writer whose turn it is
may do the writes of those queued behind it.

SQLite lets one writer at a time in (``BEGIN IMMEDIATE``) and makes the others poll with growing sleeps
(1, 2, 5 … 100 ms), so under load one writer can wait many times as long as the rest. A blocking
``flock`` in front of it hands the lock on as soon as it is free, but to whichever process asks first
after the release: often the one that has just let go, before the waiter the kernel woke gets a CPU.
With 10,000 claims by 16 processes on 2 cores that re-taking made the p99 2.3× SQLite's own
(docs/results.md, 2026-12-04).

Here each writer takes a ticket and waits its turn in ticket order (a queue lock in the manner of CLH
locks, built from what the kernel offers every process). Waiting only for the writer right before, as
CLH does, made the queue convoy once more processes wanted the CPU than there were cores: a served
writer let go of its byte only when it was scheduled again, and the next turn waited for a chain of
such wake-ups (16 writers on 2 cores beside 4 busy processes: 995–1,466 claims/s against plain SQL's
2,000–2,300; docs/results.md, 2026-12-06). So:

* the ticket is the offset of one byte appended to the queue file (``O_APPEND`` makes appends atomic, so
  every writer gets its own offset, in order);
* the writer holds an open-file-description lock on the byte at its ticket while it waits and writes;
  on leaving it marks its byte done and unlocks, which wakes those waiting for it. It waits for the
  nearest writer before it that will not be served (one that asked nothing), looking past those that
  asked (a claim is an asker from its first byte): the writer whose turn it is may serve them, and a
  served asker must not hold up the queue until it is scheduled again. When no such writer is left
  before the askers, it waits for the first asker (whose turn it is). The writer next in line watches
  the mark instead of sleeping, for at most :data:`SPIN_S`: a wake-up costs more than a short write;
* handing the turn from process to process costs more than the write itself: the new writer's
  connection reads every page afresh (SQLite drops a connection's page cache when another connection
  has written) and its process starts on cold CPU caches, so a write took twice the CPU of the same
  write by the process that wrote last. So a writer may put its request in the box file (one slot per
  ticket) while it waits; the writer whose turn it is does the requests of those queued right behind
  it in its own transaction (:meth:`Turns.asking`), and after its commit marks them served with the
  answer in their slots (:meth:`Turns.deliver`): one turn, one commit, many writes (group commit);
* the kernel drops the locks of a process that dies, so a writer killed while waiting or writing
  passes the turn on, as a killed ``flock`` holder did. A predecessor whose byte is unlocked but not
  done (it was killed, or it has taken its ticket and not yet locked) is given :data:`STALE_S`, then
  passed over: the writer waits for the one that predecessor was waiting for. A request whose writer
  was killed may still be done (the process asked for it); an answer that never comes (its writer was
  killed before the commit, or after it and before marking) leaves the asker to write for itself.

The queue orders writers; it does not guard the data: ``BEGIN IMMEDIATE`` and the database's own
constraints do, so a writer that skips the queue (another program, a stale predecessor passed over)
only waits in SQLite's busy handler.

A writer may be given a deadline (:meth:`Turns.take`): its wait in the queue ends there with
:class:`TimeoutError`, however many writers are before it (the store then says it is busy). Each writer
notes its deadline in the box file; a writer waits in the kernel for a predecessor that gives up no later
than itself (one that came before with the same bound: its wait ends first, and wakes this one), and
otherwise looks again every few milliseconds until its own deadline. So while another program holds the
write lock, the k-th queued writer waits its own bound, not k bounds. An asker whose deadline comes while the
writer before it is doing its request (that writer took it on when it read it: a second lock byte per ticket)
waits for that writer's commit or rollback and takes the answer: it left at once, and the writer before
committed a seat for a participant who was told the store was busy. A writer whose wait is longer (a
JupyterHub's or the CLI's claim behind a held lock, with the portal's claims queued behind it) made that
happen when the lock was let go as the portal claim's wait ended.

The queue file grows a byte per turn and starts over past :data:`RESTART_AT` (the writers queued at
that moment go on without waiting for each other, once).
Linux only (open-file-description locks); elsewhere the queue is a plain ``flock``.
"""

from __future__ import annotations

import fcntl
import math
import os
import struct
import time
from collections.abc import Callable

__all__ = ["Turns"]

STALE_S = 0.02  # how long a predecessor that is not in the queue yet (or was killed) is waited for
SPIN_S = 0.002  # next in line: how long it watches for its turn before it sleeps
RESTART_AT = 1 << 24  # the queue file starts over past 16 MiB (16 million turns)
SLOTS, SLOT = 512, 2048  # the box file: one slot per ticket (modulo SLOTS) for a request, then its answer
POLL_S = 0.005  # a writer that may not wait in the kernel (its predecessor's deadline is later) looks this often
_OFD = hasattr(fcntl, "F_OFD_SETLKW")
_FLOCK = struct.Struct("hhqqi4x")  # struct flock on Linux: type, whence, start, len, pid (0 for OFD locks)
_HEAD = struct.Struct(">qI")  # a box slot: the ticket it is for, the length of what follows
_DUE = struct.Struct(">qd")  # after the slots: a ticket and its writer's deadline (time.monotonic(), inf: none)
# a ticket's byte: waiting or writing; done; waiting with a request in the box; served (done by the
# writer before it, the answer in the box)
_WAITING, _DONE, _ASKING, _SERVED = b"\x00", b"\x01", b"\x04", b"\x05"
_GO = (_DONE, _SERVED, b"")  # the predecessor is done (past the end: the file started over)
# a ticket's second lock byte, this far past its mark: held by the writer serving its request, from reading it
# (:meth:`Turns.asking`) to the answer or the rollback, and by the asker itself when its deadline ends its wait
_SERVING_AT = 1 << 40


def _lock(fd: int, kind: int, at: int, wait: bool = True) -> None:
    cmd = fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK
    fcntl.fcntl(fd, cmd, _FLOCK.pack(kind, os.SEEK_SET, at, 1, 0))


def _held(fd: int, at: int) -> bool:
    """Whether the byte at ``at`` is locked by its writer (or a writer serving it), without waiting."""
    got = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _FLOCK.pack(fcntl.F_RDLCK, os.SEEK_SET, at, 1, 0))
    return bool(_FLOCK.unpack(got)[0] != fcntl.F_UNLCK)


def _locked(fd: int, at: int) -> None:
    """Return once the byte at ``at`` is not locked by its writer (at once when it is not)."""
    _lock(fd, fcntl.F_RDLCK, at)
    _lock(fd, fcntl.F_UNLCK, at)


class Turns:
    """One process's (one connection's) place in the queue of a store file's writers: :meth:`take`
    returns when it is this writer's turn, :meth:`give` hands the turn to the next. Not thread-safe:
    one per connection (each has its own open file, so the locks of two connections of a process
    exclude each other as those of two processes do).

    A writer may ask to have its write done by the writer before it (:meth:`take` with a request); the
    writer whose turn it is reads the requests of those queued right behind it (:meth:`asking`), does
    them in its own transaction and answers them after its commit (:meth:`answer`, :meth:`deliver`)."""

    def __init__(self, path: str) -> None:
        flags = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_CREAT
        self._box_path = f"{path}.box"
        self._append = os.open(path, flags | os.O_WRONLY | os.O_APPEND, 0o600)
        try:
            self._fd = os.open(path, flags | os.O_RDWR, 0o600)  # locks, and the marks (pread/pwrite)
        except BaseException:
            os.close(self._append)
            raise
        self._box = -1  # opened on first use
        self._ticket = -1  # of the turn held
        self._asked = False  # this writer's request is in the box
        self._answers: list[tuple[int, bytes]] = []  # to deliver after the commit
        self._serving: list[int] = []  # the tickets whose requests this writer took on (their serving bytes)
        self._leaving = False  # this asker holds its own serving byte: its wait ended, nobody serves it now

    def take(self, ask: Callable[[], bytes] | None = None, deadline: float | None = None) -> bytes | None:
        """Wait for this writer's turn (at once when the queue is empty) and return None; or, when
        ``ask`` is given and a writer is before this one, put ``ask()`` (the request, made only then)
        in the box and return the answer when the writer before did it (this turn is then over).
        Past ``deadline`` (a :func:`time.monotonic` value), :class:`TimeoutError`: this writer leaves the
        queue (an asker's request may still have been done by the writer before, in that moment)."""
        if not _OFD:
            while deadline is not None:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return None
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError from None
                    time.sleep(POLL_S)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            return None
        # a claim is an asker from its first byte: those behind look past it (it may be served), never
        # block on it while it writes its request (see _wait)
        os.write(self._append, _WAITING if ask is None else _ASKING)
        t = os.lseek(self._append, 0, os.SEEK_CUR) - 1  # this append's offset: the ticket
        try:
            _lock(self._fd, fcntl.F_WRLCK, t, wait=False)  # our byte: free (a ticket is never reused)
        except OSError:
            _lock(self._fd, fcntl.F_WRLCK, t)  # the file started over under a queued writer: wait for it
        self._ticket, self._asked = t, ask is not None
        try:
            if deadline is not None:  # those behind wait in the kernel for this one only if it ends first
                os.pwrite(self._box_fd(), _DUE.pack(t, deadline), SLOTS * SLOT + (t % SLOTS) * _DUE.size)
            request = ask() if ask is not None and t > 0 and os.pread(self._fd, 1, t - 1) not in _GO else b""
            if request and len(request) <= SLOT - _HEAD.size:  # someone before to ask, and it fits
                at = (t % SLOTS) * SLOT
                os.pwrite(self._box_fd(), request, at + _HEAD.size)  # the request, then the header naming
                os.pwrite(self._box_fd(), _HEAD.pack(t, len(request)), at)  # it: a reader of the header finds it
            elif ask is not None and request:  # too long to be served: it writes itself
                self._asked = False
                os.pwrite(self._fd, _WAITING, t)
            return self._wait(t, deadline)
        except BaseException:
            self._end(t)
            raise

    def _box_fd(self) -> int:
        if self._box < 0:
            flags = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_CREAT | os.O_RDWR
            self._box = os.open(self._box_path, flags, 0o600)
        return self._box

    def _answer(self, t: int) -> bytes | None:
        """The answer in this writer's slot (the writer before did its request: the turn is over)."""
        self._ticket, self._asked = -1, False
        slot = os.pread(self._box_fd(), SLOT, (t % SLOTS) * SLOT)
        self._let_own_go(t)
        _lock(self._fd, fcntl.F_UNLCK, t)  # marked served: done for those after it
        if len(slot) < _HEAD.size:
            return None
        ticket, size = _HEAD.unpack_from(slot)
        return slot[_HEAD.size : _HEAD.size + size] if ticket == t else None

    def _due(self, p: int) -> float:
        """The deadline of the writer with ticket ``p`` (inf: none, or not noted yet)."""
        got = os.pread(self._box_fd(), _DUE.size, SLOTS * SLOT + (p % SLOTS) * _DUE.size)
        if len(got) < _DUE.size:
            return math.inf
        ticket, due = _DUE.unpack(got)
        return float(due) if ticket == p else math.inf

    def _wait(self, t: int, deadline: float | None = None) -> bytes | None:
        """Wait for the turn of the writer with ticket ``t`` (every writer before it done, served, or
        gone); the answer when this writer asked and the writer before did its request.

        It waits for the nearest writer before it that will not be served: one that asked nothing (it
        writes itself, or waits to), looking past those that asked (the writer whose turn it is may serve
        them); when every writer before the askers is done, for the first asker (its turn: nobody before
        it is left to serve it). So no writer waits for a served asker to be scheduled and let go of its
        byte: with 16 writers on 2 busy cores the chain of such wake-ups, one after another behind each
        turn, made the queue convoy (docs/results.md, 2026-12-06). The next in line watches for its turn
        for at most :data:`SPIN_S` instead of sleeping. A writer unlocked and not done (killed, or between
        its ticket and its lock) is passed over after :data:`STALE_S`. With a ``deadline``, the wait for
        a writer that gives up later (or never) is a look every :data:`POLL_S`, and ends at the deadline."""
        seen: dict[int, float] = {}  # tickets found unlocked and not done: when first seen so
        passed: set[int] = set()  # gone: looked past, as past an asker
        while True:
            if self._asked and os.pread(self._fd, 1, t) == _SERVED:
                return self._answer(t)
            if deadline is not None and time.monotonic() >= deadline:
                if self._asked and self._leave(t):
                    return self._answer(t)
                raise TimeoutError
            p, first = t - 1, -1
            while p >= 0:  # back over askers (and writers passed over) to a writer that will not be served
                mark = os.pread(self._fd, 1, p)
                if mark in _GO:
                    break
                if p not in passed:
                    if mark != _ASKING:
                        first = -1
                        break
                    first = p
                p -= 1
            wait_for = p if p >= 0 and first < 0 and os.pread(self._fd, 1, p) not in _GO else first
            if wait_for < 0:  # every writer before is done, served or gone: this writer's turn
                if self._asked and os.pread(self._fd, 1, t) == _SERVED:
                    # served after the look above: the writer before marks its askers served, then
                    # itself done, and the scan saw it done; writing now would be a second turn
                    return self._answer(t)
                if self._asked:  # it writes itself, no longer asking
                    self._asked = False
                    os.pwrite(self._fd, _WAITING, t)
                return None
            if not _held(self._fd, wait_for):  # killed, or between its ticket and its lock
                now = time.monotonic()
                if now - seen.setdefault(wait_for, now) > STALE_S:
                    passed.add(wait_for)
                else:
                    time.sleep(0.0001)
                continue
            if SPIN_S and wait_for == t - 1 and (wait_for == 0 or os.pread(self._fd, 1, wait_for - 1) in _GO):
                end = time.monotonic() + SPIN_S  # next in line: watch for the turn instead of sleeping
                while os.pread(self._fd, 1, wait_for) not in _GO and time.monotonic() < end:
                    os.sched_yield()
                if os.pread(self._fd, 1, wait_for) in _GO:
                    continue
            if deadline is not None and self._due(wait_for) > deadline:  # it may wait longer than this one
                time.sleep(max(0.0, min(POLL_S, deadline - time.monotonic())))
                continue
            _locked(self._fd, wait_for)  # blocks while that writer holds its byte
            seen.clear()

    def _leave(self, t: int) -> bool:
        """An asker's wait ended at its deadline: whether its request was done after all. It takes its serving
        byte, so no writer takes its request on from now on; a writer that holds that byte read the request
        before the deadline and is doing it in its transaction, and this waits for its commit or rollback (a
        short wait: that writer has the write lock). Leaving at once told a participant "busy, try again"
        while the claim before took a seat for them."""
        self._leaving = True
        _lock(self._fd, fcntl.F_WRLCK, _SERVING_AT + t)
        return os.pread(self._fd, 1, t) == _SERVED

    def _let_own_go(self, t: int) -> None:
        if self._leaving:
            self._leaving = False
            _lock(self._fd, fcntl.F_UNLCK, _SERVING_AT + t)

    def _let_serving_go(self) -> None:
        serving, self._serving = self._serving, []
        for u in serving:
            _lock(self._fd, fcntl.F_UNLCK, _SERVING_AT + u)

    def asking(self, limit: int) -> list[tuple[int, bytes]]:
        """During this writer's turn: the requests of the writers queued right behind it, in order
        (at most ``limit``; none past a writer that asked nothing, or one whose wait has ended). Each is
        taken on: its writer waits for :meth:`deliver` or :meth:`give` even past its deadline."""
        t = self._ticket
        if not _OFD or t < 0:
            return []
        out = []
        for i, mark in enumerate(os.pread(self._fd, limit, t + 1)):
            if mark != _ASKING[0]:
                break
            u = t + 1 + i
            slot = os.pread(self._box_fd(), SLOT, (u % SLOTS) * SLOT)
            if len(slot) < _HEAD.size or _HEAD.unpack_from(slot)[0] != u:
                break  # an asker from its first byte whose request is not in the box yet
            try:  # its deadline ended its wait (it holds the byte, or left): it and those after it write themselves
                _lock(self._fd, fcntl.F_WRLCK, _SERVING_AT + u, wait=False)
            except OSError:
                break
            self._serving.append(u)
            if os.pread(self._fd, 1, u) != _ASKING:  # it left between the look at its mark and the lock
                break
            size = _HEAD.unpack_from(slot)[1]
            out.append((u, slot[_HEAD.size : _HEAD.size + size]))
        return out

    def answer(self, ticket: int, answer: bytes) -> bool:
        """Keep the answer to a request of :meth:`asking` for :meth:`deliver` (False: too long for its
        slot, so its writer must write for itself)."""
        if len(answer) > SLOT - _HEAD.size:
            return False
        self._answers.append((ticket, answer))
        return True

    def deliver(self) -> None:
        """After the commit: send the kept answers; each writer answered is done."""
        answers, self._answers = self._answers, []
        try:
            for u, answer in answers:
                os.pwrite(self._box_fd(), _HEAD.pack(u, len(answer)) + answer, (u % SLOTS) * SLOT)
                os.pwrite(self._fd, _SERVED, u)
        finally:
            self._let_serving_go()

    def give(self) -> None:
        """End this writer's turn: the next writer in the queue goes on. Answers not delivered (the
        transaction was rolled back) are dropped: their writers write for themselves."""
        self._answers.clear()
        self._let_serving_go()  # those taken on and not answered (rolled back) write for themselves
        if not _OFD:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            return
        if self._ticket >= 0:
            self._end(self._ticket)

    def _end(self, t: int) -> None:
        self._ticket = -1
        try:
            os.pwrite(self._fd, _DONE, t)
            if t >= RESTART_AT:
                os.ftruncate(self._fd, 0)  # queued writers then read past the end: done
        finally:
            _lock(self._fd, fcntl.F_UNLCK, t)
            self._let_own_go(t)  # after its mark says done: no writer takes on the request of one that left

    def close(self) -> None:
        """Close the queue files (a held turn is given up by the kernel); a second call does nothing
        (a descriptor number closed twice may by then be another file's)."""
        fds, (self._append, self._fd, self._box) = (self._append, self._fd, self._box), (-1, -1, -1)
        for fd in fds:
            if fd >= 0:
                os.close(fd)
