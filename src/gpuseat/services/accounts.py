"""Organizer accounts of the portal: the rows live in :mod:`gpuseat.store.accounts` (re-exported here)."""

from __future__ import annotations

from gpuseat.store.accounts import MAX_PASSWORD, MIN_PASSWORD, Accounts, check_username, generate_password

__all__ = ["MAX_PASSWORD", "MIN_PASSWORD", "Accounts", "check_username", "generate_password"]
