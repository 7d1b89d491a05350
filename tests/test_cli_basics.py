"""The CLI's shared behaviour: help, version, and how errors reach the user."""

from __future__ import annotations

import subprocess
import sys

from gpuseat.errors import InputError, did_you_mean


def test_version(cli):
    r = cli("--version")
    assert r.code == 0
    assert r.out.startswith("gpuseat ")


def test_unknown_command_is_usage_error(cli):
    r = cli("no-such-command")
    assert r.code == 2
    assert "No such command" in r.err


def test_help_runs_as_a_process():
    proc = subprocess.run([sys.executable, "-m", "gpuseat", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert "Usage" in proc.stdout


def test_input_error_message_has_where_and_fix():
    err = InputError("unknown GPU model 'M61'", where="course.toml: field 'gpu'", fix="use M60")
    assert err.message == "course.toml: field 'gpu': unknown GPU model 'M61'\nTo fix: use M60"
    assert err.exit_code == 2


def test_did_you_mean_suggests_close_names():
    assert "M60" in did_you_mean("M61", ["M60", "K2", "H200-141GB"])
    assert did_you_mean("zzzz", ["M60"]) == ""
