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


def test_tables_print_values_as_typed(cli, tmp_path):
    """A value in a table is text, never Rich markup or an emoji code: a participant named with brackets
    and colons is listed as typed (a stray closing tag used to stop the command with a traceback)."""
    from pathlib import Path

    examples = Path(__file__).resolve().parents[1] / "examples"
    assert cli("course", "create", str(examples / "course-2016.toml")).code == 0
    roster = tmp_path / "roster.csv"
    roster.write_text("name,email\nAnn [/bold] :fire: [red]x[/red],ann@example.org\n", encoding="utf-8")
    assert cli("roster", "import", str(roster)).code == 0
    listed = cli("roster", "list", "-f", "wide")
    assert listed.code == 0, listed.err
    assert "Ann [/bold] :fire: [red]x[/red]" in listed.out
    assert "🔥" not in listed.out
