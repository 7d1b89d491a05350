"""Where gpuseat keeps its own files: the one data-dir resolver (database, bench results, captures)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def data_dir() -> Path:
    """``$GPUSEAT_DATA_DIR`` when set, else the user data folder (platformdirs, e.g. ``~/.local/share/gpuseat``).

    Under ``sudo`` it is the invoking user's folder, not root's: ``sudo gpuseat host up`` after the
    README's set-up works on the organizer's own course store (files it creates there are handed back
    to that user, :func:`hand_back`)."""
    override = os.environ.get("GPUSEAT_DATA_DIR")
    if override:
        return Path(override)
    invoker = sudo_user()
    if invoker is not None:
        return Path(invoker.pw_dir) / ".local" / "share" / "gpuseat"
    return _user_dir("XDG_DATA_HOME", ".local/share", "user_data_dir")


def cache_dir() -> Path:
    """``$GPUSEAT_CACHE_DIR`` when set, else the user cache folder (platformdirs, e.g. ``~/.cache/gpuseat``):
    what gpuseat can rebuild at any time (the converted MNIST file, the validated bundled catalog)."""
    override = os.environ.get("GPUSEAT_CACHE_DIR")
    if override:
        return Path(override)
    return _user_dir("XDG_CACHE_HOME", ".cache", "user_cache_dir")


def _user_dir(variable: str, default: str, elsewhere: str) -> Path:
    """``gpuseat`` in the user's folder of one kind. On Linux that is the XDG Base Directory rule, the one
    platformdirs applies there (``$XDG_…_HOME`` when set and absolute, else the folder under home), read
    directly: importing platformdirs costs every command a few milliseconds of start-up (``gpuseat plan``
    looks up its catalog cache here). Other systems ask platformdirs (``elsewhere`` names its function)."""
    if sys.platform.startswith("linux"):
        base = os.environ.get(variable, "").strip()
        return Path(base if os.path.isabs(base) else os.path.expanduser(f"~/{default}")) / "gpuseat"
    import platformdirs

    return Path(getattr(platformdirs, elsewhere)("gpuseat", appauthor=False))


def sudo_user() -> Any:
    """The ``pwd`` entry of the user who ran ``sudo gpuseat …`` (None when not run through sudo as root)."""
    name = os.environ.get("SUDO_USER")
    if not name or name == "root" or os.geteuid() != 0:
        return None
    import pwd

    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def hand_back(path: Path) -> None:
    """Give a file root just made in the sudo user's data folder back to that user (else their next
    command, not run as root, could not write the course store)."""
    invoker = sudo_user()
    if invoker is None:
        return
    try:
        home = Path(invoker.pw_dir).resolve()
        inside = path.resolve()
        if path.stat().st_uid == 0 and inside != home and inside.is_relative_to(home):
            os.chown(path, invoker.pw_uid, invoker.pw_gid)
    except OSError:
        pass
