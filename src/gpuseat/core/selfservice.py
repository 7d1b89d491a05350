"""Participant self-service rules (pure): which requests exist, a new SSH key's checks, and seat hours.

A seat's *run state* is a timeline: running from the moment its holder got it, stopped by a ``stop``
(the participant's, the organizer's or the agent's own at 0 hours or when idle), running again after a
``start``, ``restart`` or ``reset``. Seat hours count the running time that is inside the course's
access hours and outside its lab sessions (sessions are exempt); see docs/policy.md.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise

from gpuseat.core.intervals import Interval
from gpuseat.core.roster import check_ssh_key
from gpuseat.safe_text import has_control

#: what a participant (or the organizer on their behalf) may ask of their seat
ACTIONS: tuple[str, ...] = ("start", "stop", "restart", "reset", "key")
#: actions that change whether the seat runs (the timeline's events)
RUN_ACTIONS: dict[str, bool] = {"start": True, "restart": True, "reset": True, "stop": False}
#: longest key line accepted (an RSA 16384-bit key is about 2.8 kB)
MAX_KEY_CHARS = 4096
MIN_RSA_BITS = 3072
#: key types accepted from a participant (ed25519, ECDSA and their security-key forms, RSA ≥ 3072 bits)
KEY_TYPES: tuple[str, ...] = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
    "ssh-rsa",
)


def check_new_key(text: str) -> str:
    """A participant's new public key: one line ``TYPE BASE64 [comment]``, no options, an accepted type,
    RSA at least 3072 bits. Returns the normalised line; ValueError says what is wrong, once."""
    if len(text) > MAX_KEY_CHARS:
        raise ValueError(
            f"the key is {len(text):,} characters; a public key line is under {MAX_KEY_CHARS:,} "
            "(paste the one line of your .pub file)"
        )
    stripped = text.strip().removeprefix("\ufeff").strip()  # a byte-order mark: a file saved by Notepad
    if not stripped:
        raise ValueError("no key given: paste the one line of your .pub file (e.g. ~/.ssh/id_ed25519.pub)")
    if "PRIVATE KEY" in stripped:  # before the one-line check: a private key file has many lines
        raise ValueError("this is a private key: never share it; paste the .pub file's line instead")
    if "\n" in stripped or "\r" in stripped:
        raise ValueError("give one key line only (the one line of your .pub file)")
    if has_control(stripped):  # a participant's line goes into keys files and onto pages: no escape sequences
        raise ValueError("the key line holds control characters (escape sequences): paste the .pub file's line")
    first = stripped.split()[0]
    if first not in KEY_TYPES:
        if "=" in first or "," in first or first in ("restrict", "no-pty", "cert-authority"):
            raise ValueError("key options (from=, command=, restrict …) are not allowed: give the bare key line")
        raise ValueError(f"key type {first!r} is not accepted (use ed25519: ssh-keygen -t ed25519)")
    words = stripped.split()
    keys = 1 + sum(1 for w, nxt in pairwise(words[2:]) if w in KEY_TYPES and nxt.startswith("AAAA"))
    if keys > 1:  # the comment holds another key, which authorized_keys would take for words: it never logs in
        raise ValueError(f"this line holds {keys} keys: give one key only (the one line of one .pub file)")
    line = check_ssh_key(stripped)
    if first == "ssh-rsa":
        bits = rsa_bits(line.split()[1])
        if bits < MIN_RSA_BITS:
            raise ValueError(
                f"this RSA key has {bits} bits; at least {MIN_RSA_BITS} are needed (better: ssh-keygen -t ed25519)"
            )
    return line


def rsa_bits(blob: str) -> int:
    """The modulus size of an ``ssh-rsa`` key blob (string type, mpint e, mpint n)."""
    try:
        raw = base64.b64decode(blob, validate=True)
        fields = []
        at = 0
        for _ in range(3):
            (n,) = struct.unpack(">I", raw[at : at + 4])
            fields.append(raw[at + 4 : at + 4 + n])
            at += 4 + n
    except (binascii.Error, ValueError, struct.error):
        raise ValueError("the RSA key's data does not decode") from None
    return int.from_bytes(fields[2], "big").bit_length()


@dataclass(frozen=True)
class RunState:
    """Whether a participant's seat should run now, and why not."""

    running: bool
    reason: str | None = None
    since: datetime | None = None


def run_state(timeline: Sequence[tuple[datetime, str, str | None]]) -> RunState:
    """The run state after ``timeline`` (``(when, action, reason)`` of done requests, oldest first)."""
    state = RunState(True)
    for when, action, reason in timeline:
        if action in RUN_ACTIONS:
            running = RUN_ACTIONS[action]
            state = RunState(running, None if running else (reason or "stopped"), when)
    return state


def running_intervals(
    held: Iterable[Interval], timeline: Sequence[tuple[datetime, str, str | None]], now: datetime
) -> list[Interval]:
    """When the seat ran: the times it was held, minus the stretches a ``stop`` left it stopped."""
    out: list[Interval] = []
    for begin, end in held:
        end = min(end, now)
        if end <= begin:
            continue
        running, at = True, begin
        for when, action, _ in timeline:
            if action not in RUN_ACTIONS or when >= end:
                continue
            if when <= begin:
                running = RUN_ACTIONS[action]
                continue
            if running and not RUN_ACTIONS[action]:
                out.append((at, when))
            if not running and RUN_ACTIONS[action]:
                at = when
            running = RUN_ACTIONS[action]
        if running:
            out.append((at, end))
    return out


def _overlap(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    out = []
    for a0, a1 in a:
        for b0, b1 in b:
            lo, hi = max(a0, b0), min(a1, b1)
            if lo < hi:
                out.append((lo, hi))
    return out


def _minus(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    out = list(a)
    for b0, b1 in b:
        nxt = []
        for a0, a1 in out:
            if b1 <= a0 or b0 >= a1:
                nxt.append((a0, a1))
                continue
            if a0 < b0:
                nxt.append((a0, b0))
            if b1 < a1:
                nxt.append((b1, a1))
        out = nxt
    return out


def counted_hours(running: Sequence[Interval], open_: Sequence[Interval] | None, exempt: Sequence[Interval]) -> float:
    """Hours of ``running`` inside ``open_`` (None: always open) and outside ``exempt`` (lab sessions)."""
    inside = list(running) if open_ is None else _overlap(running, open_)
    return sum((b - a).total_seconds() for a, b in _minus(inside, exempt)) / 3600


@dataclass(frozen=True)
class Hours:
    """A participant's seat hours: their quota (None: no quota), top-ups, hours used and left."""

    quota: float | None
    topups: float
    used: float
    left: float | None
    running: bool
    runs_out_at: datetime | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (the hours export, the page)."""
        return {
            "quota": self.quota,
            "topups": round(self.topups, 3),
            "used": round(self.used, 3),
            "left": None if self.left is None else round(self.left, 3),
            "running": self.running,
            "runs_out_at": self.runs_out_at.isoformat() if self.runs_out_at else None,
        }


def hours_of(
    quota: float | None,
    topups: float,
    running: Sequence[Interval],
    open_: Sequence[Interval] | None,
    exempt: Sequence[Interval],
    now: datetime,
    *,
    running_now: bool,
) -> Hours:
    """Seat hours of one participant; ``runs_out_at``: when the quota ends at this rate (running now,
    outside a session; the next session's or window's change is not forecast)."""
    used = counted_hours(running, open_, exempt)
    if quota is None:
        return Hours(None, topups, used, None, running_now)
    left = max(0.0, quota + topups - used)
    counting = running_now and not any(a <= now < b for a, b in exempt)
    if open_ is not None:
        counting = counting and any(a <= now < b for a, b in open_)
    out = now + timedelta(hours=left) if counting and left > 0 else None
    return Hours(quota, topups, used, left, running_now, out)
