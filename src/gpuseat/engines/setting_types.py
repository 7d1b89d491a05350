"""Setting types that more than one engine's settings use, so each is checked (and refused) the same way."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator

from gpuseat.errors import InputError


def _absolute(value: str) -> str:
    """A file this machine reads must not depend on the folder gpuseat runs in, nor hide a line break,
    nor climb out of the folder it names (``/etc/slurm/../../root``)."""
    if not value.startswith("/") or any(ord(c) < 32 for c in value):
        raise ValueError("must be an absolute path")
    if ".." in value.split("/"):
        raise ValueError("must be an absolute path without '..' (name the folder itself)")
    return value


#: the path of a file on this machine (a kubeconfig, a token file)
AbsolutePath = Annotated[str, AfterValidator(_absolute)]


def tool(value: str, name: str, *, example: str, article: str = "a", versioned: bool = False) -> str:
    """A program the agent runs with its credentials (kubectl, ssh): ``name`` from PATH, or a ``name`` by its
    absolute path (``versioned``: ``kubectl-1.30`` too); never a program of another name, nor one found from
    the agent's working folder (``bin/ssh``)."""
    version = r"(-?[0-9][0-9.]*)?" if versioned else ""
    if not re.fullmatch(rf"(/(?:[A-Za-z0-9._+-]+/)*)?{re.escape(name)}{version}", value) or ".." in value.split("/"):
        raise ValueError(f"{value}: must be {name}, or the absolute path of {article} {name} (e.g. {example})")
    return value


def trusted_file(path: str | Path, *, setting: str) -> None:
    """Refuse a file the agent reads with its own rights (root, or the cluster's admin) when another user
    could have written it: a kubeconfig's ``exec`` credential plugin, or a slurm.conf's ``PluginDir``, is a
    program the reader runs. Owned by root or by the agent's own user, and writable by nobody else (its
    folder too, unless sticky, as /tmp); a system account (uid below 1000) may own them, as the slurm user
    does its slurm.conf on some sites. A file that is not there is left to the tool that reads it."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return
    me = {os.geteuid()} | set(range(1000))  # the agent's user, root, or a system account (slurm owns its conf)
    fix = f"make {p} (and its folder) owned by root and writable by its owner only (chmod go-w), or name another file"
    where = f"setting {setting}"
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{setting} {p} is not a regular file", where=where, fix=f"name the file itself in {setting}")
    if st.st_uid not in me or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InputError(
            f"{setting} {p} can be changed by another user than the agent's (owner uid {st.st_uid}, "
            f"mode {stat.S_IMODE(st.st_mode):o}): the agent would run what it names",
            where=where,
            fix=fix,
        )
    folder = p.parent.stat()
    if folder.st_uid not in me or (
        folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not folder.st_mode & stat.S_ISVTX
    ):
        raise InputError(
            f"{setting} {p}: its folder {p.parent} can be changed by another user than the agent's "
            f"(owner uid {folder.st_uid}, mode {stat.S_IMODE(folder.st_mode):o}): the file could be swapped",
            where=where,
            fix=fix,
        )
