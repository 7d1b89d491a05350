"""gpuseat's own folders on Linux follow the XDG Base Directory rule exactly as platformdirs applies it
(gpuseat reads the rule itself to keep platformdirs off every command's start-up)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import platformdirs
import pytest

from gpuseat import paths

CASES = [
    {},
    {"XDG_CACHE_HOME": "/srv/cache", "XDG_DATA_HOME": "/srv/data"},
    {"XDG_CACHE_HOME": "  ", "XDG_DATA_HOME": ""},
    {"XDG_CACHE_HOME": "relative/cache", "XDG_DATA_HOME": "relative/data"},
    {"HOME": "/home/someone else"},
]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the XDG rule is Linux's")
@pytest.mark.parametrize("env", CASES, ids=lambda e: ",".join(e) or "none")
def test_the_cache_and_data_folders_are_platformdirs_own(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name in ("XDG_CACHE_HOME", "XDG_DATA_HOME", "GPUSEAT_CACHE_DIR", "GPUSEAT_DATA_DIR", "SUDO_USER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert paths.cache_dir() == Path(platformdirs.user_cache_dir("gpuseat", appauthor=False))
    assert paths.data_dir() == Path(platformdirs.user_data_dir("gpuseat", appauthor=False))


def test_gpuseat_plan_does_not_load_platformdirs(tmp_path: Path) -> None:
    course = Path(__file__).resolve().parents[1] / "examples" / "course-2016.toml"
    code = (
        "import sys; from gpuseat.cli import main; main(['plan', sys.argv[1]]); "
        "print('platformdirs' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(course)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(Path(paths.__file__).parents[1])},
        check=False,
    )
    assert done.stderr.strip().splitlines()[-1] == "False", done.stderr
