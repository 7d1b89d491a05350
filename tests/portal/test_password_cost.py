"""The organizer's password is stored as gpuseat ships it: argon2id with argon2-cffi's default profile (RFC 9106
low-memory: 64 MiB, 3 passes, 4 lanes), whatever the tests' cheaper hasher (``tests/conftest.py``) does."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from argon2 import PasswordHasher
from argon2.profiles import RFC_9106_LOW_MEMORY

from gpuseat.store import open_store

pytestmark = pytest.mark.shipped_argon2


def test_a_password_is_stored_as_argon2id_with_the_shipped_cost_and_verifies(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'c.db'}", create=True) as store:
        store.accounts.set_password("org", "a long enough secret")
        assert store.accounts.verify("org", "a long enough secret")
        assert not store.accounts.verify("org", "a long enough secreT")
    with sqlite3.connect(tmp_path / "c.db") as conn:
        (stored,) = conn.execute("SELECT password_hash FROM portal_users WHERE username = 'org'").fetchone()
    p = RFC_9106_LOW_MEMORY
    assert stored.startswith(f"$argon2id$v=19$m={p.memory_cost},t={p.time_cost},p={p.parallelism}$"), stored
    assert not PasswordHasher.from_parameters(p).check_needs_rehash(stored)
