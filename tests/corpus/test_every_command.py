"""Every command of the CLI, found by walking Click's command tree, with bad arguments: one message,
a non-zero exit (2 for bad input), never a traceback, a hang or a raw control character.

Three kinds of bad argument per command: an unknown flag; every typed option (number, choice, range)
with a value that is not of its type; every path option and path argument pointing at a FIFO (a
reader that opens it without checking blocks forever). Each run is a real ``gpuseat`` child process
with a time limit, its own data folder and home, and no GPUSEAT_* variables from the shell.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer

from gpuseat.cli import app

ROOT = Path(__file__).resolve().parents[2]
BAD_VALUE = "nan\x1b[2J\u202e"


def _leaves(group: click.Command, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    if isinstance(group, click.Group):
        out = []
        for name, sub in sorted(group.commands.items()):
            out += _leaves(sub, (*prefix, name))
        return out
    return [(prefix, group)]


COMMANDS = _leaves(typer.main.get_command(app))
# commands that hold the terminal or a port by design when given valid input; bad input must still stop them
LONG_RUNNING = {("serve",), ("monitor",), ("top",)}


def _path_type(param: click.Parameter) -> bool:
    return isinstance(param.type, click.Path) or "path" in type(param.type).__name__.lower()


def _typed(param: click.Parameter) -> bool:
    return isinstance(param.type, click.types.IntParamType | click.types.FloatParamType | click.Choice)


def _required_args(cmd: click.Command, fifo: Path) -> list[str]:
    args = []
    for param in cmd.params:
        if isinstance(param, click.Argument) and param.required:
            args += [str(fifo)] * (param.nargs if param.nargs > 0 else 1)
    return args


def _run(argv: list[str], tmp: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") or k == "GPUSEAT_CACHE_DIR"}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])]),
        GPUSEAT_DATA_DIR=str(tmp / "data"),
        HOME=str(tmp / "home"),
    )
    (tmp / "home").mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "gpuseat", *argv]
    try:
        return subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"gpuseat {' '.join(argv)!r} hung for {timeout} s")


def _clean_failure(result: subprocess.CompletedProcess[str], argv: list[str]) -> None:
    shown = f"gpuseat {' '.join(argv)!r} → {result.returncode}\n{result.stderr[-2000:]}"
    assert result.returncode != 0, shown
    assert result.returncode != 70, shown  # an internal error is a bug
    assert "Traceback" not in result.stderr + result.stdout, shown
    assert "\x1b" not in result.stderr + result.stdout, shown
    assert result.stderr.strip(), shown  # one message says what is wrong


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_unknown_flag_and_bad_typed_values(cli, tmp_path: Path, path: tuple[str, ...], cmd: click.Command) -> None:
    """Parsing fails before the command runs, so these run in-process (the real ``main``)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases = [[*path, *_required_args(cmd, fifo), "--definitely-not-a-flag"]]
    for param in cmd.params:
        if isinstance(param, click.Option) and not param.is_flag and _typed(param):
            cases.append([*path, *_required_args(cmd, fifo), param.opts[0], BAD_VALUE])
    for argv in cases:
        result = cli(*argv)
        shown = f"gpuseat {' '.join(argv)!r} → {result.code}\n{result.err[-2000:]}"
        assert result.code == 2, shown
        assert "Traceback" not in result.err + result.out and "\x1b" not in result.err + result.out, shown
        assert result.err.strip(), shown


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_fifo_for_every_path(tmp_path: Path, path: tuple[str, ...], cmd: click.Command) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    required = _required_args(cmd, fifo)
    cases = []
    if any(_path_type(p) for p in cmd.params if isinstance(p, click.Argument)):
        cases.append([*path, *required])
    for param in cmd.params:
        if isinstance(param, click.Option) and not param.is_flag and _path_type(param):
            cases.append([*path, *required, param.opts[0], str(fifo)])
    for argv in cases:
        result = _run(argv, tmp_path, timeout=20 if tuple(path) in LONG_RUNNING else 60)
        _clean_failure(result, argv)
