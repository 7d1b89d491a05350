"""Where gpuseat keeps its own files: the one data-dir resolver (database, bench results, captures)."""

from __future__ import annotations

import os
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
    import platformdirs

    return Path(platformdirs.user_data_dir("gpuseat", appauthor=False))


def cache_dir() -> Path:
    """``$GPUSEAT_CACHE_DIR`` when set, else the user cache folder (platformdirs, e.g. ``~/.cache/gpuseat``):
    what gpuseat can rebuild at any time (the converted MNIST file, the validated bundled catalog)."""
    override = os.environ.get("GPUSEAT_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("gpuseat", appauthor=False))


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
