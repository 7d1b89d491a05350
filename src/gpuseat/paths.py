"""Where gpuseat keeps its own files: the one data-dir resolver (database, bench results, captures)."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    """``$GPUSEAT_DATA_DIR`` when set, else the user data folder (platformdirs, e.g. ``~/.local/share/gpuseat``)."""
    override = os.environ.get("GPUSEAT_DATA_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_data_dir("gpuseat", appauthor=False))
