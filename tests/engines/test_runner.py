"""The one Runner: every external command, with a timeout, as a user, recorded; dry runs change nothing."""

from __future__ import annotations

import ast
import os
import pwd
from pathlib import Path

import pytest

from gpuseat.engines.runner import RecordingRunner, Runner
from gpuseat.errors import EngineError
from pysource import parse_file

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuseat"


def test_no_module_but_the_runner_calls_subprocess() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).as_posix() == "engines/runner.py":
            continue
        for node in ast.walk(parse_file(path)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "subprocess" or n.startswith("subprocess.") for n in names) and not _type_only(
                path, node.lineno
            ):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert offenders == [], "external commands go through gpuseat.engines.runner.Runner"


def _type_only(path: Path, line: int) -> bool:
    tree = parse_file(path)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and "TYPE_CHECKING" in ast.unparse(node.test)
            and any(getattr(n, "lineno", -1) == line for b in node.body for n in ast.walk(b))
        ):
            return True
    return False


def test_runs_records_and_fails_clearly(tmp_path: Path) -> None:
    r = Runner(timeout=5)
    done = r.run(["sh", "-c", "echo out; echo err >&2"], mutates=False)
    assert done.stdout == "out\n" and done.stderr == "err\n"
    with pytest.raises(EngineError) as failed:
        r.run(["sh", "-c", "echo nope >&2; exit 3"])
    assert "exit 3" in failed.value.what and "nope" in failed.value.what
    with pytest.raises(EngineError) as slow:
        r.run(["sleep", "5"], timeout=0.2)
    assert "did not finish within 0.2 s" in slow.value.what
    with pytest.raises(EngineError) as missing:
        r.run(["no-such-tool-gpuseat"])
    assert "not found" in missing.value.what
    log = r.take()
    assert [x.returncode for x in log] == [0, 3, 124, 127]
    assert log[0].line == "sh -c 'echo out; echo err >&2'"  # quoted as a shell would need it
    assert r.take() == []


def test_runs_as_another_user() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to change user")
    nobody = pwd.getpwnam("nobody")
    done = Runner().run(["id", "-u"], user="nobody", mutates=False)
    assert int(done.stdout) == nobody.pw_uid


def test_dry_run_lists_changes_and_still_reads(tmp_path: Path) -> None:
    target = tmp_path / "made"
    r = Runner(dry_run=True)
    r.run(["touch", str(target)])  # a change: listed, not run
    seen = r.run(["echo", "hello"], mutates=False)  # a read: run
    assert not target.exists() and seen.stdout == "hello\n"
    log = r.take()
    assert log[0].dry and log[0].returncode is None and not log[1].dry


def test_recording_runner_answers_by_prefix() -> None:
    r = RecordingRunner(answers={("squeue",): (0, "12 ann RUNNING\n", ""), ("scancel", "-u"): (1, "", "no such user")})
    assert r.run(["squeue", "-h"], mutates=False).stdout.startswith("12 ann")
    assert r.try_run(["scancel", "-u", "ann"]).returncode == 1
    assert r.run(["anything"]).returncode == 0
    assert [x.argv[0] for x in r.take()] == ["squeue", "scancel", "anything"]


def test_a_time_out_ends_everything_the_command_started(tmp_path: Path) -> None:
    """The command's children go too (an ssh or runuser between gpuseat and the hung process)."""
    marker = tmp_path / "child.pid"
    with pytest.raises(EngineError):
        Runner().run(["sh", "-c", f"sleep 60 & echo $! > {marker}; wait"], timeout=0.5)
    child = int(marker.read_text())
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        if Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return
        import time

        time.sleep(0.02)
    raise AssertionError("the command's child outlived its time-out")
