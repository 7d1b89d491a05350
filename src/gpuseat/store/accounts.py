"""Organizer accounts of the portal: argon2id password hashes and the shared session-signing key.

Passwords are hashed with argon2-cffi's defaults (argon2id, RFC 9106 low-memory profile) and never
stored or logged in clear. The signing key lives in the store, so every server process (and a
restarted one) accepts the same session cookies.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from gpuseat.db.models import Event, PortalSetting, PortalUser
from gpuseat.errors import InputError
from gpuseat.store.base import Concern

if TYPE_CHECKING:
    from argon2 import PasswordHasher

    from gpuseat.store.facade import Store


USERNAME = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
MIN_PASSWORD = 10
MAX_PASSWORD = 1024  # argon2 hashes any length; a cap keeps a huge body from costing CPU
SESSION_KEY = "session_key"


def _hasher() -> PasswordHasher:
    from argon2 import PasswordHasher

    return PasswordHasher()


def check_username(name: str) -> str:
    """A valid organizer name (lower-case letters, digits, ``._-``)."""
    if not USERNAME.fullmatch(name):
        raise InputError(
            f"invalid user name {name[:64]!r}", where="user", fix="use lower-case letters, digits, '.', '_' or '-'"
        )
    return name


def generate_password() -> str:
    """A random password for ``serve --demo`` (about 96 bits, URL- and shell-safe)."""
    return secrets.token_urlsafe(12)


class Accounts(Concern):
    """Organizer logins of one store."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._dummy: str | None = None

    def set_password(self, username: str, password: str, *, actor: str = "gpuseat") -> bool:
        """Create the organizer or change their password; True when the account was new."""
        check_username(username)
        if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
            raise InputError(
                f"password must be {MIN_PASSWORD} to {MAX_PASSWORD} characters",
                where="password",
                fix=f"choose a passphrase of {MIN_PASSWORD} to {MAX_PASSWORD} characters",
            )
        digest = _hasher().hash(password)
        now = datetime.now(UTC)
        with self._database.engine.begin() as conn:
            changed = conn.execute(
                update(PortalUser).where(PortalUser.username == username).values(password_hash=digest, updated_at=now)
            ).rowcount
            if not changed:
                conn.execute(insert(PortalUser).values(username=username, password_hash=digest, updated_at=now))
            action = "account.password" if changed else "account.create"
            conn.execute(
                insert(Event).values(
                    at=now, course_key=None, actor=actor[:128], action=action, detail={"user": username}
                )
            )
        return not changed

    def verify(self, username: str, password: str) -> bool:
        """True when the password is the organizer's (constant work whether or not the user exists)."""
        from argon2.exceptions import InvalidHashError, VerificationError

        if len(password) > MAX_PASSWORD or len(username) > 64:
            return False
        with self._database.engine.connect() as conn:
            stored = conn.scalar(select(PortalUser.password_hash).where(PortalUser.username == username))
        if stored is None and self._dummy is None:
            # an unknown user costs one verification too, so timing does not tell names apart
            self._dummy = _hasher().hash(secrets.token_urlsafe(16))
        try:
            ok = _hasher().verify(stored or self._dummy or "", password)
        except (VerificationError, InvalidHashError):
            return False
        return ok and stored is not None

    def users(self) -> list[str]:
        """Organizer names."""
        with self._database.engine.connect() as conn:
            return list(conn.scalars(select(PortalUser.username).order_by(PortalUser.username)))

    def session_key(self) -> str:
        """The key that signs session cookies, created once per store."""
        with self._database.engine.connect() as conn:
            found = conn.scalar(select(PortalSetting.value).where(PortalSetting.key == SESSION_KEY))
        if found:
            return found
        key = secrets.token_urlsafe(48)
        try:
            with self._database.engine.begin() as conn:
                conn.execute(insert(PortalSetting).values(key=SESSION_KEY, value=key))
        except IntegrityError:  # another process created it first: use theirs
            with self._database.engine.connect() as conn:
                found = conn.scalar(select(PortalSetting.value).where(PortalSetting.key == SESSION_KEY))
            assert found is not None
            return found
        return key
