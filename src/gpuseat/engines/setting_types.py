"""Setting types that more than one engine's settings use, so each is checked (and refused) the same way."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator


def _absolute(value: str) -> str:
    """A file this machine reads must not depend on the folder gpuseat runs in, nor hide a line break."""
    if not value.startswith("/") or any(ord(c) < 32 for c in value):
        raise ValueError("must be an absolute path")
    return value


#: the path of a file on this machine (a kubeconfig, a token file)
AbsolutePath = Annotated[str, AfterValidator(_absolute)]
