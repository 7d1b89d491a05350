"""Issue 15 item 9 / issue 9: bad inputs to top, monitor and usage give one message and exit 2 (input)
or 1 (an outside engine), never a traceback, a hang or a memory blow-up."""

from __future__ import annotations

import os
import socket

import pytest

from gpuseat.monitor.replay import synthetic_snapshot, write_replay

from .conftest import FIXTURES

T4 = FIXTURES / "telegraf__tesla-t4.xml"


@pytest.fixture
def replay(tmp_path):
    path = tmp_path / "r.jsonl"
    write_replay(
        path, [synthetic_snapshot(gpus=1, migs_per_gpu=1, processes=1, taken_at=1_700_000_040.0 + i) for i in range(3)]
    )
    return path


def one_message(r, code: int, *words: str) -> None:
    assert r.code == code, (r.code, r.err)
    assert "Traceback" not in r.err and r.err.startswith("error: ")
    for word in words:
        assert word in r.err, r.err


def test_fifo_and_dev_zero_as_capture_are_refused(cli, tmp_path, data_dir):
    fifo = tmp_path / "fifo.xml"
    os.mkfifo(fifo)
    one_message(cli("top", "--from-xml", fifo, "--once"), 2, "not a regular file")
    (tmp_path / "zero.xml").symlink_to("/dev/zero")
    one_message(cli("top", "--from-xml", tmp_path / "zero.xml", "--once"), 2, "not a regular file")
    (tmp_path / "zero.csv").symlink_to("/dev/zero")
    one_message(cli("top", "--from-csv", tmp_path / "zero.csv", "--once"), 2)
    (tmp_path / "l.txt").symlink_to("/dev/zero")
    one_message(cli("top", "--from-xml", T4, "--list", tmp_path / "l.txt", "--once"), 2)


def test_entity_expansion_in_a_capture_is_refused(cli, tmp_path, data_dir):
    bomb = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa">]><nvidia_smi_log>&a;</nvidia_smi_log>'
    (tmp_path / "b.xml").write_text(bomb)
    one_message(cli("top", "--from-xml", tmp_path / "b.xml", "--once"), 2, "entity")


def test_non_database_db_file(cli, tmp_path, replay):
    (tmp_path / "notes.txt").write_text("not a database\n" * 100)
    one_message(cli("monitor", "--replay", replay, "--db", f"sqlite:///{tmp_path / 'notes.txt'}", "--ticks", "1"), 2)
    one_message(cli("usage", "--db", f"sqlite:///{tmp_path / 'notes.txt'}"), 2)


def test_missing_database_for_usage_is_not_created(cli, tmp_path):
    one_message(cli("usage", "--db", f"sqlite:///{tmp_path / 'typo.db'}"), 2, "no gpuseat database")
    assert not (tmp_path / "typo.db").exists()


def test_unreachable_postgresql(cli, replay):
    r = cli("monitor", "--replay", replay, "--db", "postgresql+psycopg://nobody@127.0.0.1:1/none", "--ticks", "1")
    one_message(r, 1, "database")


def test_unwritable_data_dir(cli, tmp_path, replay, monkeypatch):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path / "file" / "data"))
    monkeypatch.delenv("GPUSEAT_DB_URL", raising=False)
    one_message(cli("monitor", "--replay", replay, "--ticks", "1", "--interval", "0.1"), 2)


def test_busy_listen_port(cli, replay, data_dir):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = cli("monitor", "--replay", replay, "--listen", f"127.0.0.1:{port}", "--ticks", "1", "--interval", "0.1")
    one_message(r, 2, "--listen", "already in use")


@pytest.mark.parametrize(
    "args, words",
    [
        (["--listen", "nope"], ["--listen"]),
        (["--listen", "127.0.0.1:99999"], ["--listen"]),
        (["--listen", "$(id):9400"], ["--listen"]),
        (["--metrics-names", "prom"], ["--metrics-names"]),
        (["--interval", "nan"], ["interval"]),
        (["--interval", "1e999"], ["interval"]),
        (["--ticks", "100000000000"], ["ticks"]),
        (["--idle-hours", "inf"], ["idle-hours"]),
    ],
)
def test_bad_monitor_flags(cli, replay, data_dir, args, words):
    r = (
        cli("monitor", "--replay", replay, "--ticks", "1", *args)
        if "--ticks" not in args
        else cli("monitor", "--replay", replay, *args)
    )
    assert r.code == 2, r.err
    assert "Traceback" not in r.err
    assert any(w in r.err for w in words), r.err


@pytest.mark.parametrize("since", ["last tuesday", "99999999999d", "1e999h", "2026-13-45", "9999999-01-01"])
def test_bad_since(cli, since, tmp_path, replay):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    assert cli("monitor", "--replay", replay, "--db", url, "--ticks", "1", "--interval", "0.1").code == 0
    one_message(cli("usage", "--db", url, "--since", since), 2, "--since")


def test_chart_to_a_missing_folder_or_a_directory(cli, tmp_path, replay):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    assert cli("monitor", "--replay", replay, "--db", url, "--ticks", "1", "--interval", "0.1").code == 0
    one_message(cli("usage", "--db", url, "--chart", tmp_path / "nope" / "u.html"), 2, "--chart")
    one_message(cli("usage", "--db", url, "--chart", tmp_path), 2, "--chart")
    (tmp_path / "mine.html").write_text("my notes")
    one_message(cli("usage", "--db", url, "--chart", tmp_path / "mine.html"), 2, "--force")
    assert (tmp_path / "mine.html").read_text() == "my notes"
    assert cli("usage", "--db", url, "--chart", tmp_path / "u.html").code == 0
    assert cli("usage", "--db", url, "--chart", tmp_path / "u.html").code == 0  # gpuseat's own file: rewritten


def test_huge_integers_in_a_capture(cli, tmp_path, data_dir):
    text = T4.read_text(encoding="utf-8").replace("<pid>5762</pid>", "<pid>" + "9" * 400 + "</pid>")
    (tmp_path / "h.xml").write_text(
        text.replace("<total>15360 MiB</total>", "<total>" + "9" * 5000 + " MiB</total>", 1)
    )
    r = cli("top", "--from-xml", tmp_path / "h.xml", "--once", "--format", "json")
    assert r.code == 0, r.err  # out-of-range values are dropped with a warning
