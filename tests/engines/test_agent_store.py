"""What agents keep in the store (leases, status, settings, the events head) on SQLite and PostgreSQL,
and the agent's systemd unit as systemd itself reads it."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gpuseat.store import CourseStore


def test_one_lease_holder_at_a_time(store: CourseStore) -> None:
    t = 1_000.0
    assert store.agents.take_lease("agent:host:gpu1", "a", 15, now=t)
    assert not store.agents.take_lease("agent:host:gpu1", "b", 15, now=t + 1)  # a holds it
    assert store.agents.take_lease("agent:host:gpu1", "a", 15, now=t + 10)  # a renews
    assert not store.agents.take_lease("agent:host:gpu1", "b", 15, now=t + 20)  # renewed: still a's
    assert store.agents.holds_lease("agent:host:gpu1", "a", now=t + 20)
    assert store.agents.take_lease("agent:host:gpu1", "b", 15, now=t + 26)  # a stopped renewing: b takes it
    assert not store.agents.holds_lease("agent:host:gpu1", "a", now=t + 26)  # a must stop applying
    store.agents.drop_lease("agent:host:gpu1", "a")  # not a's to drop any more: nothing changes
    assert store.agents.holds_lease("agent:host:gpu1", "b", now=t + 27)
    store.agents.drop_lease("agent:host:gpu1", "b")
    assert store.agents.take_lease("agent:host:gpu1", "c", 15, now=t + 28)  # given back: taken at once
    assert store.agents.take_lease("agent:slurm:gpu1", "a", 15, now=t + 28)  # one lease per engine and host


def test_settings_live_in_the_store_with_an_event(store: CourseStore, cli: Any, url: str) -> None:
    r = cli(
        "engines", "settings", "host", "ssh_host=gpu1.lab.example.org", "ssh_port=2222", "--course", "lab", "--db", url
    )
    assert r.code == 0, r.err
    assert store.agents.engine_settings("lab", "host") == {"ssh_host": "gpu1.lab.example.org", "ssh_port": 2222}
    assert [e.detail["changed"] for e in store.events.events("lab") if e.action == "engine.settings"] == [
        ["ssh_host", "ssh_port"]
    ]
    again = cli("engines", "settings", "host", "ssh_port=2222", "--course", "lab", "--db", url)
    assert again.code == 0
    assert len([e for e in store.events.events("lab") if e.action == "engine.settings"]) == 1  # no change, no event
    for bad, says in (
        (["ssh_port=99999"], "ssh_port"),
        (["ssh_hots=x"], "ssh_hots"),
        (["ssh_host=gpu1;rm -rf /"], "ssh_host"),
        (["keys_dir=/etc/with space"], "keys_dir"),
        (["noequals"], "SETTING=VALUE"),
    ):
        r = cli("engines", "settings", "host", *bad, "--course", "lab", "--db", url)
        assert r.code == 2 and says in r.err and "Traceback" not in r.err, (bad, r.err)
    assert store.agents.engine_settings("lab", "host") == {"ssh_host": "gpu1.lab.example.org", "ssh_port": 2222}
    removed = cli("engines", "settings", "host", "ssh_port=", "--course", "lab", "--db", url)
    assert removed.code == 0 and store.agents.engine_settings("lab", "host") == {"ssh_host": "gpu1.lab.example.org"}
    assert cli("engines", "settings", "nomad", "x=1", "--course", "lab", "--db", url).code == 2


def test_the_events_head_and_the_postgresql_wake_up(store: CourseStore, url: str) -> None:
    before = store.agents.events_head()
    listener = store.agents.listener("gpuseat_events")
    if url.startswith("sqlite"):
        assert listener is None  # SQLite: agents poll the head
        store.events.log("lab", "seat.check")
        assert store.agents.events_head() > before
        return
    assert listener is not None, "PostgreSQL: agents LISTEN"
    try:
        store.events.log("lab", "seat.check")  # no agent holds a lease: nobody listens, nothing is notified
        assert list(listener.notifies(timeout=1, stop_after=1)) == []
        store.agents.take_lease("agent:host:gpu1", "a", 15)
        store.events.log("lab", "seat.check")
        got = list(listener.notifies(timeout=5, stop_after=1))
        assert got and int(got[0].payload) == store.agents.events_head()
    finally:
        listener.close()


def test_a_store_in_another_schema_of_the_database_never_wakes_this_ones_agents(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Two stores in one PostgreSQL database, a schema each, both with a running agent: events of one
    notify only its own listener, with its own event id."""
    from gpuseat.store import open_store
    from pg_schema import pg_schema_url

    ours, theirs = (open_store(pg_schema_url(request), create=True) for _ in range(2))
    listener = ours.agents.listener("gpuseat_events")
    try:
        (tmp_path / "lab.toml").write_text('name = "lab"\nparticipants = 2\n[schedule]\nstart = 2026-09-07\ndays = 5\n')
        for s in (ours, theirs):
            s.courses.create_course(tmp_path / "lab.toml", key="lab")
            assert s.agents.take_lease("agent:host:gpu1", "a", 60)
        for _ in range(3):
            theirs.events.log("lab", "seat.check")
        assert list(listener.notifies(timeout=1, stop_after=1)) == []  # the other store's events: no wake-up
        ours.events.log("lab", "seat.check")
        got = list(listener.notifies(timeout=5, stop_after=1))
        assert [int(n.payload) for n in got] == [ours.agents.events_head()]
    finally:
        listener.close()
        ours.close()
        theirs.close()


def test_agent_status_is_kept_and_shown(store: CourseStore, cli: Any, url: str) -> None:
    store.agents.take_lease("agent:host:gpu1", "gpu1:42:abc", 15)
    store.agents.save_agent_status("agent:host:gpu1", holder="gpu1:42:abc", role="leader", cursor=7, applied=True,
                            pending=2, failed=[{"course": "lab", "engine": "host", "step": "host:gpu1:key.set:ann",
                                                "error": "disk full", "exit_code": 1}])  # fmt: skip
    r = cli("agent", "status", "--format", "json", "--db", url)
    assert r.code == 0, r.err
    [row] = json.loads(r.out)
    assert row["role"] == "leader" and row["pending"] == 2 and row["lease_holder"] == "gpu1:42:abc"
    assert row["last_apply_at"] and row["failed"][0]["error"] == "disk full"
    table = cli("agent", "status", "--db", url)
    assert "agent:host:gpu1" in table.out and "disk full" in table.out


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_agent_install_writes_a_unit_systemd_accepts(tmp_path: Path, cli: Any) -> None:
    r = cli(
        "agent",
        "--install",
        "--engine",
        "host",
        "--host",
        "gpu1",
        "--unit-dir",
        tmp_path,
        "--db",
        "sqlite:////srv/c.db",
    )
    assert r.code == 0, r.err
    unit = tmp_path / "gpuseat-agent-host.service"
    text = unit.read_text()
    assert "ExecStart=/" in text and " agent --engine host --host gpu1" in text and "Restart=always" in text
    assert (tmp_path / "agent.env").read_text() == "GPUSEAT_DB_URL=sqlite:////srv/c.db\n"
    assert (tmp_path / "agent.env").stat().st_mode & 0o077 == 0  # the URL may hold a password
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert done.returncode == 0 and str(unit) not in done.stderr, done.stderr


def test_agent_install_elsewhere_reads_the_store_url_it_wrote(tmp_path: Path, cli: Any) -> None:
    """A unit written to another --unit-dir names the agent.env written beside it: it named
    /etc/gpuseat/agent.env, which systemd skips when missing ('-'), so the agent ran on another store."""
    r = cli("agent", "--install", "--engine", "host", "--unit-dir", tmp_path, "--db", "sqlite:////srv/c.db")
    assert r.code == 0, r.err
    text = (tmp_path / "gpuseat-agent-host.service").read_text()
    assert f"EnvironmentFile=-{tmp_path / 'agent.env'}\n" in text, text


def test_apply_exit_codes(store: CourseStore, cli: Any, url: str, tmp_path: Path) -> None:
    """Nothing to do: 0. A setting the engine refuses: 2, with the field named."""
    empty = cli("apply", "--course", "lab", "--db", url)
    assert empty.code == 0, empty.err
    assert cli("apply", "--set", "host.ssh_port=0", "--course", "lab", "--db", url).code == 2
    assert cli("apply", "--set", "nonsense", "--db", url).code == 2
    started = time.monotonic()
    assert cli("apply", "--dry-run", "--db", url).code == 0
    assert time.monotonic() - started < 60


def test_the_agent_passes_at_a_schedule_boundary_and_on_store_changes_only(store: CourseStore) -> None:
    """Between store changes the agent is idle; a passed access-window boundary or a new events row of a
    course makes it pass again (its own writes do not)."""
    from datetime import UTC, datetime, timedelta

    from gpuseat.engines.agent import Agent, AgentOptions

    agent = Agent(store, AgentOptions(engine="host", host="gpu1", resync_s=3600), say=lambda _line: None)
    assert agent.tick() is not None  # a new leader passes once
    assert agent.tick() is None  # nothing changed: idle
    store.events.log("lab", "seat.delivery", actor="gpuseat-agent", gone_ok=True)  # an agent's own write
    assert agent.tick() is None
    store.events.log("lab", "seat.check")  # someone else's change to the course
    assert agent.tick() is not None
    assert agent.tick() is None
    agent._next_change = datetime.now(UTC) - timedelta(seconds=1)  # an access window just opened or closed
    assert agent.tick() is not None
    assert agent.role == "leader" and store.agents.agent_statuses()[0]["last_apply_at"]


def _race_lease(url: str, names: list[str], holder: str, start: Any, out: Any) -> None:
    """One agent process: open the store, then for each lease name wait for the others and take it once."""
    from gpuseat.store import open_store

    s = open_store(url)
    try:
        for name in names:
            start.wait(30)
            try:
                out.put((name, holder, repr(s.agents.take_lease(name, holder, 15))))
            except Exception as exc:  # what the agent's loop would have met
                out.put((name, holder, f"{type(exc).__name__}: {exc}"[:200]))
    finally:
        s.close()


def test_agents_starting_at_once_each_get_an_answer_and_one_holds_the_lease(store: CourseStore, url: str) -> None:
    """Four agent processes (more than the cores) ask for a lease nobody has held yet at the same moment,
    eight times over: each gets True or False, never an error, and exactly one holds it each time."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    names = [f"agent:host:race{i}" for i in range(8)]
    start, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_race_lease, args=(url, names, f"h{i}", start, out)) for i in range(4)]
    for p in procs:
        p.start()
    got = [out.get(timeout=120) for _ in range(len(names) * len(procs))]
    for p in procs:
        p.join(30)
    leases = {x["name"]: x["holder"] for x in store.agents.leases()}
    for name in names:
        answers = {holder: said for n, holder, said in got if n == name}
        assert set(answers.values()) <= {"True", "False"}, answers
        assert list(answers.values()).count("True") == 1, answers
        assert answers[leases[name]] == "True"


def test_a_leader_whose_clock_jumped_ahead_holds_the_lease_no_longer_than_its_ttl(
    store: CourseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lease times are the database's clock: an agent whose clock was stepped an hour ahead takes the lease
    and dies; a standby with a true clock takes over once the TTL has run out, not an hour later (it waited
    the size of the step when each agent wrote its own clock's time)."""
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600.0)
    assert store.agents.take_lease("agent:host:skew", "ahead", 3)
    monkeypatch.setattr(time, "time", real)
    assert not store.agents.take_lease("agent:host:skew", "true-clock", 3)  # held, by any clock
    (lease,) = [x for x in store.agents.leases() if x["name"] == "agent:host:skew"]
    assert 0 < lease["expires_in_s"] <= 3, lease
    time.sleep(3.3)
    assert store.agents.take_lease("agent:host:skew", "true-clock", 3)
    assert not store.agents.holds_lease("agent:host:skew", "ahead")


def test_a_standby_keeps_the_leaders_cursor_and_a_new_leader_starts_from_it(store: CourseStore) -> None:
    """A standby that started wrote itself and cursor 0 over its leader's status row (``gpuseat agent status``
    named the standby, at 0), and a new leader wrote its own 0 before it read the last leader's cursor back, so
    it never knew where that leader had stopped (an unchanged store was not a resync, and drift it undid was not
    called drift)."""
    from gpuseat.engines.agent import Agent, AgentOptions

    options = AgentOptions(engine="host", host="gpu1", resync_s=3600)
    first = Agent(store, options, say=lambda _line: None, holder="first")
    assert first.tick() is not None and first.role == "leader"
    (row,) = store.agents.agent_statuses()
    applied = row["cursor"]
    assert applied == store.agents.events_head() > 0
    second = Agent(store, options, say=lambda _line: None, holder="second")
    assert second.tick() is None and second.role == "standby"
    (row,) = store.agents.agent_statuses()  # still the leader's: the standby wrote itself over it
    assert (row["holder"], row["role"], row["cursor"]) == ("first", "leader", applied)
    store.agents.drop_lease(options.lease_name, "first")  # the leader is gone
    assert second.tick() is not None and second.role == "leader"
    assert second._saved == applied  # where the last leader stopped: nothing changed since, a resync
