"""The Slurm engine's plan and apply against a recording stand-in cluster (no daemons): what it plans for
a fresh course, a release, a hand-over, a move, accounting and an archive; revoke before grant, a
failed cancel holding the new holder back, and a second plan that is empty.

The stand-in answers ``scontrol``, ``squeue``, ``scancel`` and ``sacctmgr`` from a little state that the
engine's own commands change, through :class:`~gpuseat.engines.runner.RecordingRunner`, so each test
also sees the exact commands in the order they ran. The real cluster runs the same flows in
``tests/conformance/test_slurm.py`` and ``tests/slurm/test_accounting.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpuseat.engines.apply import one_pass, plan_all
from gpuseat.engines.runner import RecordingRunner
from gpuseat.engines.slurm import config
from gpuseat.engines.slurm import course as service

from .conftest import make_store

pytest.importorskip("gpuseat.store")
SEATS = ("seat-01", "seat-02", "seat-03", "seat-04")


@dataclass
class FakeSlurm:
    """What the stand-in cluster holds: partitions, reservations (name → users), jobs, associations."""

    conf: Path
    accounting: bool = False
    partitions: set[str] = field(default_factory=lambda: {"debug"})
    reservations: dict[str, list[str]] = field(default_factory=dict)
    jobs: dict[int, dict[str, str]] = field(default_factory=dict)
    assocs: dict[str, str] = field(default_factory=dict)
    accounts: set[str] = field(default_factory=set)
    stuck: set[int] = field(default_factory=set)  # jobs scancel cannot end
    cores: dict[str, int] = field(default_factory=dict)  # reservation -> CoreCnt (shown once known)
    cores_per_socket: int = 1  # the node as slurmctld runs it

    def answer(self, argv: tuple[str, ...]) -> tuple[int, str, str]:
        cmd, args = argv[0], argv[1:]
        if cmd == "scontrol":
            return self._scontrol(args)
        if cmd == "squeue":
            rows = [
                f"{i}|{j['user']}|{j['state']}|None|{j['gres']}|{j['partition']}|{j['resv'] or '(null)'}|localhost|"
                f"{j.get('account', '(null)')}|{i}"
                for i, j in sorted(self.jobs.items())
            ]
            return 0, "\n".join(rows) + "\n", ""
        if cmd == "scancel":
            for a in args:
                if a.isdigit() and int(a) not in self.stuck:
                    self.jobs.pop(int(a), None)
            return 0, "", ""
        if cmd == "sacctmgr":
            return self._sacctmgr(args)
        return 127, "", f"{cmd}: not in the stand-in"

    def _scontrol(self, args: tuple[str, ...]) -> tuple[int, str, str]:
        words = dict(a.split("=", 1) for a in args if "=" in a)
        if args[:1] == ("show",) and args[1] == "config":
            storage = "accounting_storage/slurmdbd" if self.accounting else "accounting_storage/none"
            return 0, f"AccountingStorageType = {storage}\nJobSubmitPlugins = lua\nSLURM_CONF = {self.conf}\n", ""
        if args[:3] == ("-o", "show", "partition"):
            return 0, "".join(f"PartitionName={p} State=UP\n" for p in sorted(self.partitions)), ""
        if args[:3] == ("-o", "show", "reservation"):
            rows = [f"ReservationName={n}{f' CoreCnt={self.cores[n]}' if n in self.cores else ''} Users={','.join(u)}\n"
                    for n, u in self.reservations.items()]  # fmt: skip
            return 0, "".join(rows), ""
        if args[:3] == ("-o", "show", "node"):
            return 0, f"NodeName=gpu01 CPUTot=8 CoresPerSocket={self.cores_per_socket}\n", ""
        if args[:1] == ("-d",):
            return 0, "", ""
        if args[:1] == ("create",) and "PartitionName" in words and args[1] != "reservation":
            self.partitions.add(words["PartitionName"])
        elif args[:1] == ("update",) and "CoreCnt" in words:  # what Slurm 22.05 answers
            return 1, "", "Error updating the reservation: Core-based reservation can not be updated\n"
        elif args[:2] == ("create", "reservation") or (args[:1] == ("update",) and "ReservationName" in words):
            self.reservations[words["ReservationName"]] = words["Users"].split(",")
            if "CoreCnt" in words:
                self.cores[words["ReservationName"]] = sum(int(c) for c in words["CoreCnt"].split(","))
        elif args[:1] == ("delete",) and "ReservationName" in words:
            self.reservations.pop(words["ReservationName"], None)
            self.cores.pop(words["ReservationName"], None)
        elif args[:1] == ("delete",) and "PartitionName" in words:
            self.partitions.discard(words["PartitionName"])
        return 0, "", ""

    def _sacctmgr(self, args: tuple[str, ...]) -> tuple[int, str, str]:
        if args[:4] == ("-n", "-P", "show", "assoc"):
            return 0, "".join(f"{u}|{t}|{t}\n" for u, t in sorted(self.assocs.items())), ""
        if args[:4] == ("-n", "-P", "show", "account"):
            return 0, "".join(f"{a}\n" for a in self.accounts), ""
        words = dict(a.split("=", 1) for a in args if "=" in a)
        if args[1:3] == ("add", "account"):
            self.accounts.add(args[3])
        elif args[1:3] == ("add", "user"):
            self.assocs[args[3]] = words["GrpTRES"]
        elif args[1:3] == ("delete", "user"):
            self.assocs.pop(args[3], None)
        elif args[1:3] == ("delete", "account"):
            self.accounts.discard(args[3])
        return 0, "", ""


@dataclass
class Lab:
    store: object
    fake: FakeSlurm
    runner: RecordingRunner
    etc: Path
    people: dict[str, str]  # name -> participant key

    def plan(self):
        (p,) = plan_all(self.store, course="c1", engine="slurm", runner=self.runner)  # type: ignore[arg-type]
        assert p.error is None, p.error
        return p.changes

    def apply(self):
        self.runner.take()
        done = one_pass(self.store, course="c1", engine="slurm", runner=self.runner)  # type: ignore[arg-type]
        return done

    def job(self, job_id: int, user: str, seat: str, *, state: str = "RUNNING") -> None:
        self.fake.jobs[job_id] = {
            "user": user,
            "state": state,
            "gres": f"gres:gpu:m60.{seat}:1",
            "partition": "gpuseat-c1",
            "resv": next(iter(self.fake.reservations), ""),
        }


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    etc = tmp_path / "etc"
    etc.mkdir()
    conf = etc / "slurm.conf"
    conf.write_text(f"ClusterName=x\nPartitionName=debug Nodes=gpu01\nInclude {etc / 'gpuseat-partitions.conf'}\n")
    service.write_job_submit([], etc)
    devices = config.bind_cores(
        [config.GresDevice(node="gpu01", gres_type="m60", files=(f"/dev/nvidia{i}",), core=0, seat=s)
         for i, s in enumerate(SEATS)]
    )  # fmt: skip
    people = {"alice": ("alice", "seat-01"), "bob": ("bob", "seat-02"), "carol": ("carol", None)}
    st, _url = make_store(tmp_path, "c1", people, devices)
    st.agents.set_engine_settings("c1", "slurm", {"slurm_conf": str(conf), "cancel_wait_s": 1})  # type: ignore[attr-defined]
    fake = FakeSlurm(conf)
    runner = RecordingRunner(answers={(c,): fake.answer for c in ("scontrol", "squeue", "scancel", "sacctmgr")})
    by_user = {p.unix_user: p.key for p in st.roster.participants("c1")}  # type: ignore[attr-defined]
    yield Lab(st, fake, runner, etc, {n: by_user[n] for n in people})
    st.close()  # type: ignore[attr-defined]


def _lines(done) -> list[str]:
    return [c.line for r in done.reports for o in r.outcomes for c in o.commands]


def _actions(changes) -> list[tuple[str, str, str]]:
    return [(s.phase, s.action, s.target) for s in changes.ordered()]


def test_a_fresh_course_is_granted_then_nothing_is_left_to_do(lab: Lab) -> None:
    changes = lab.plan()
    acts = _actions(changes)
    assert all(phase != "revoke" for phase, _a, _t in acts), acts
    assert ("grant", "partition.create", "gpuseat-c1") in acts
    assert ("grant", "limits.set", str(lab.etc / "job_submit.lua")) in acts
    assert [a for _p, a, _t in acts].count("reservation.create") == 2
    assert {t for _p, a, t in acts if a == "seat.record"} == {"seat-01", "seat-02"}
    done = lab.apply()
    assert not done.failed, done.failed
    assert set(lab.fake.reservations) == {n for _p, a, n in acts if a == "reservation.create"}
    assert all(sorted(u) == ["alice", "bob"] for u in lab.fake.reservations.values())
    include = (lab.etc / "gpuseat-partitions.conf").read_text()
    assert "PartitionName=gpuseat-c1 Nodes=gpu01 ReqResv=YES MaxTime=INFINITE State=UP" in include
    limits = {(x.user, x.seat_type) for x in config.job_submit_limits((lab.etc / "job_submit.lua").read_text())}
    assert limits == {("alice", "m60.seat-01"), ("bob", "m60.seat-02")}
    assert lab.plan().steps == []
    access = lab.store.delivery.access_of("c1")  # type: ignore[attr-defined]
    assert access["seat-01"]["holder"] == lab.people["alice"] and access["seat-01"]["user"] == "alice"
    assert access["seat-01"]["command"].startswith("srun -p gpuseat-c1 --reservation=gpuseat-c1-")


def test_a_hand_over_revokes_and_cancels_before_the_new_holder_is_let_in(lab: Lab) -> None:
    lab.apply()
    lab.job(41, "alice", "seat-01")
    lab.job(42, "bob", "seat-02")
    lab.store.seats.release("c1", participant=lab.people["alice"])  # type: ignore[attr-defined]
    lab.store.seats.assign("c1", lab.people["carol"], "seat-01")  # type: ignore[attr-defined]
    changes = lab.plan()
    acts = _actions(changes)
    revoke = [(a, t) for p, a, t in acts if p == "revoke"]
    assert [a for a, _t in revoke] == ["reservation.revoke", "reservation.revoke", "limits.set", "jobs.cancel"]
    assert ("jobs.cancel", "alice") in revoke
    cancel = next(s for s in changes.steps if s.action == "jobs.cancel")
    assert cancel.data["job_ids"] == [41] and cancel.seats == ("seat-01",) and "alice holds no Slurm seat" in cancel.why
    grants = [s for s in changes.steps if s.phase == "grant"]
    assert {s.action for s in grants} == {"reservation.set"} and all(s.seats == ("seat-01",) for s in grants)
    done = lab.apply()
    assert not done.failed, done.failed
    lines = _lines(done)
    first_grant = next(i for i, ln in enumerate(lines) if "Users=bob,carol" in ln)
    assert lines.index("scancel 41") < first_grant
    assert 41 not in lab.fake.jobs and 42 in lab.fake.jobs  # bob's job is his own seat's: kept
    assert all(sorted(u) == ["bob", "carol"] for u in lab.fake.reservations.values())
    assert lab.plan().steps == []


def test_a_job_that_does_not_end_keeps_the_new_holder_waiting(lab: Lab) -> None:
    lab.apply()
    lab.job(51, "alice", "seat-01")
    lab.fake.stuck.add(51)
    lab.store.seats.release("c1", participant=lab.people["alice"])  # type: ignore[attr-defined]
    lab.store.seats.assign("c1", lab.people["carol"], "seat-01")  # type: ignore[attr-defined]
    done = lab.apply()
    (report,) = done.reports
    state = {(o.step.action, o.step.target): (o.state, o.message or "") for o in report.outcomes}
    assert state[("jobs.cancel", "alice")][0] == "failed"
    assert "51" in state[("jobs.cancel", "alice")][1] and "still hold their GPU" in state[("jobs.cancel", "alice")][1]
    waiting = [k for k, (s, m) in state.items() if s == "skipped"]
    assert ("seat.record", "seat-01") in waiting and any(a == "reservation.set" for a, _t in waiting)
    assert all("carol" not in u for u in lab.fake.reservations.values())
    assert lab.store.delivery.access_of("c1")["seat-01"].get("holder") != lab.people["carol"]  # type: ignore[attr-defined]
    lab.fake.stuck.clear()
    done = lab.apply()
    assert not done.failed and all(sorted(u) == ["bob", "carol"] for u in lab.fake.reservations.values())


def test_a_move_cancels_the_movers_jobs_on_the_old_seat_only(lab: Lab) -> None:
    lab.apply()
    lab.job(61, "alice", "seat-01")
    lab.store.seats.move("c1", lab.people["alice"], "seat-03")  # type: ignore[attr-defined]
    changes = lab.plan()
    acts = _actions(changes)
    assert ("revoke", "jobs.cancel", "alice") in acts and (
        "revoke",
        "limits.set",
        str(lab.etc / "job_submit.lua"),
    ) in acts
    cancel = next(s for s in changes.steps if s.action == "jobs.cancel")
    assert "alice moved to seat-03: the job is on seat-01" in cancel.why
    assert not any(a.startswith("reservation") for _p, a, _t in acts)  # still a holder: still in the sessions
    done = lab.apply()
    assert not done.failed and 61 not in lab.fake.jobs
    lab.job(62, "alice", "seat-03")
    assert lab.plan().steps == []  # a job on her own new seat stays


def test_with_accounting_associations_follow_the_holders(lab: Lab) -> None:
    lab.fake.accounting = True
    done = lab.apply()
    assert not done.failed, done.failed
    lines = _lines(done)
    assert "sacctmgr -i add account gpuseat-c1 Description=gpuseat-c1 Organization=gpuseat-c1" in lines
    assert "sacctmgr -i add user alice Account=gpuseat-c1 GrpTRES=gres/gpu=1 MaxTRESPerJob=gres/gpu=1" in lines
    assert lab.fake.assocs == {"alice": "gres/gpu=1", "bob": "gres/gpu=1"}
    assert lab.plan().steps == []
    lab.fake.jobs[71] = {"user": "alice", "state": "PENDING", "gres": "gres:gpu:2", "partition": "gpuseat-c1",
                         "resv": "", "account": "gpuseat-c1"}  # fmt: skip
    lab.store.seats.release("c1", participant=lab.people["alice"])  # type: ignore[attr-defined]
    done = lab.apply()
    lines = _lines(done)
    assert lines.index("scancel 71") < lines.index("sacctmgr -i delete user alice account=gpuseat-c1")
    assert lab.fake.assocs == {"bob": "gres/gpu=1"} and not lab.fake.jobs
    assert lab.plan().steps == []


def test_an_archived_course_loses_everything_and_observe_is_empty(lab: Lab) -> None:
    lab.apply()
    lab.job(81, "bob", "seat-02")
    lab.store.lifecycle.archive_course("c1")  # type: ignore[attr-defined]
    changes = lab.plan()
    assert {p for p, _a, _t in _actions(changes)} == {"revoke"}
    done = lab.apply()
    assert not done.failed, done.failed
    assert not lab.fake.reservations and not lab.fake.jobs and "gpuseat-c1" not in lab.fake.partitions
    assert "gpuseat-c1" not in (lab.etc / "gpuseat-partitions.conf").read_text()
    assert not config.job_submit_limits((lab.etc / "job_submit.lua").read_text())
    assert lab.store.agents.holdings("c1") == []  # type: ignore[attr-defined]
    assert lab.plan().steps == []


def test_a_dry_run_lists_the_commands_and_changes_nothing(lab: Lab) -> None:
    lab.runner.dry_run = True
    done = lab.apply()
    dry = [c for r in done.reports for o in r.outcomes for c in o.commands if c.dry]
    assert any(c.argv[:3] == ("scontrol", "create", "reservation") for c in dry)
    assert lab.fake.reservations == {} and lab.fake.partitions == {"debug"}
    assert not (lab.etc / "gpuseat-partitions.conf").exists()


def test_slurm_conf_without_the_include_says_which_line_to_add(lab: Lab) -> None:
    lab.fake.conf.write_text("ClusterName=x\n")
    notes = lab.plan().notes
    assert any(f"Include {lab.etc / 'gpuseat-partitions.conf'}" in n and "scontrol reconfigure" in n for n in notes)


def test_observe_names_what_each_person_holds(lab: Lab) -> None:
    lab.apply()
    lab.job(91, "alice", "seat-01")
    held = {(h["what"], h["login"]) for h in lab.store.agents.holdings("c1")}  # type: ignore[attr-defined]
    assert {("limit", "alice"), ("limit", "bob"), ("reservation", "alice"), ("reservation", "bob")} <= held
    from gpuseat.engines import registry
    from gpuseat.engines.apply import course_state

    eng = registry.build("slurm", lab.store, "c1", settings={"slurm_conf": str(lab.fake.conf)}, runner=lab.runner)  # type: ignore[arg-type]
    now = eng.observe(course_state(lab.store, "c1"))  # type: ignore[arg-type]
    job = next(h for h in now if h.what == "job")
    assert job.login == "alice" and job.seat == "seat-01" and re.match(r"job 91 RUNNING", job.detail)


def test_bad_settings_and_a_site_job_submit_lua_are_one_clear_message(lab: Lab, cli) -> None:
    url = f"sqlite:///{lab.etc.parent / 'c1.db'}"
    r = cli("engines", "settings", "slurm", "slurm_conf=etc/slurm.conf", "--course", "c1", "--db", url)
    assert r.code == 2 and "absolute path" in r.err and "Traceback" not in r.err
    (lab.etc / "job_submit.lua").write_text("function slurm_job_submit(j, p, u) return slurm.SUCCESS end\n")
    r = cli("slurm", "enroll", "--course", "c1", "--db", url, "--conf-dir", lab.etc, "--no-accounting")
    assert r.code == 2 and "gpuseat did not write it" in r.err and "Traceback" not in r.err
    assert (lab.etc / "job_submit.lua").read_text().startswith("function slurm_job_submit")


def test_course_delete_waits_for_the_cluster_then_finishes(lab: Lab, tmp_path: Path) -> None:
    lab.apply()
    lab.job(95, "alice", "seat-01")
    lab.apply()  # the agent's observe: the job and the limits are held
    asked = lab.store.lifecycle.delete_course("c1", export_to=tmp_path / "c1-export.json")  # type: ignore[attr-defined]
    assert asked["deferred"] and "slurm" in asked["held_by"]
    done = lab.apply()
    assert not done.failed, done.failed
    assert done.deleted == ["c1"]
    assert not lab.fake.jobs and not lab.fake.reservations and "gpuseat-c1" not in lab.fake.partitions
    assert not config.job_submit_limits((lab.etc / "job_submit.lua").read_text())


def _plan_error(lab: Lab) -> str | None:
    (p,) = plan_all(lab.store, course="c1", engine="slurm", runner=lab.runner)  # type: ignore[arg-type]
    return p.error


@pytest.mark.parametrize("setting", [False, True], ids=["the-default-include", "partitions_conf"])
def test_a_partitions_include_gpuseat_did_not_write_is_never_rewritten(lab: Lab, setting: bool) -> None:
    # the agent (root) rewrote whatever file the include named, at mode 0644: a site file, or /etc/shadow
    site = lab.etc / ("site-partitions.conf" if setting else "gpuseat-partitions.conf")
    site.write_text("PartitionName=physics Nodes=gpu01 AllowAccounts=physics\n")
    site.chmod(0o600)
    if setting:
        lab.store.agents.set_engine_settings("c1", "slurm", {"partitions_conf": str(site)})  # type: ignore[attr-defined]
    error = _plan_error(lab)
    assert error is not None and "gpuseat did not write it" in error and str(site) in error, error
    done = lab.apply()
    assert not any(o.step.action == "partition.create" for r in done.reports for o in r.outcomes)
    assert site.read_text() == "PartitionName=physics Nodes=gpu01 AllowAccounts=physics\n"
    assert site.stat().st_mode & 0o777 == 0o600
    assert "gpuseat-c1" not in lab.fake.partitions
    # gpuseat's own include (its mark on the first line, or empty) is still kept up to date
    site.write_text("")
    lab.apply()
    assert "PartitionName=gpuseat-c1 " in site.read_text() and site.read_text().startswith(config.INCLUDE_MARK)
    assert _plan_error(lab) is None


def test_a_slurm_conf_that_another_user_can_change_is_refused_before_scontrol_reads_it(lab: Lab) -> None:
    # scontrol runs as root with SLURM_CONF=<slurm_conf>: a PluginDir= in a file others can write loads their code
    lab.fake.conf.chmod(0o666)
    error = _plan_error(lab)
    assert error is not None and "slurm_conf" in error and "can be changed by another user" in error, error
    assert lab.runner.take() == []  # nothing ran, not even scontrol show config
    lab.fake.conf.chmod(0o644)
    assert _plan_error(lab) is None


@pytest.mark.parametrize("login", ["root", "slurm", "daemon"])
def test_a_seat_holder_whose_login_is_a_system_account_is_refused(lab: Lab, login: str) -> None:
    # root is the placeholder user of a reservation whose last holder is replaced: a participant whose login
    # was root kept their place in every session reservation after release; slurm and daemon are the
    # cluster's own (their jobs would be limited to one seat, and cancelled as a released holder's)
    from sqlalchemy import text

    from gpuseat.core.roster import RosterText

    lab.store.roster.import_roster("c1", RosterText("name,email,group,unix_user\nOps,ops@example.edu,participants,ops\n", where="r.csv"))  # type: ignore[attr-defined]  # fmt: skip
    ops = next(p.key for p in lab.store.roster.participants("c1") if p.unix_user == "ops")  # type: ignore[attr-defined]
    with lab.store.database.engine.begin() as conn:  # type: ignore[attr-defined]  # as an older roster import stored it
        conn.execute(text("UPDATE participants SET unix_user = :u WHERE key = :k"), {"u": login, "k": ops})
    lab.store.seats.assign("c1", ops, "seat-03")  # type: ignore[attr-defined]
    error = _plan_error(lab)
    assert error is not None and f"login {login}" in error and "system account" in error and ops in error, error
    lab.apply()
    assert all(login not in users for users in lab.fake.reservations.values()), lab.fake.reservations
    lua = lab.etc / "job_submit.lua"
    assert all(x.user != login for x in config.job_submit_limits(lua.read_text()))


def test_a_course_whose_key_extends_this_ones_keeps_its_reservations_and_jobs(lab: Lab) -> None:
    # course c1's reservations were every name starting gpuseat-c1-: course c1-x's sessions
    # (gpuseat-c1-x-<start>) lost their users to c1's revokes and were deleted with c1, and the jobs of
    # c1-x's participants in them were cancelled as c1's people without a seat
    theirs = "gpuseat-c1-x-20260907T0900"
    lab.fake.partitions.add("gpuseat-c1-x")
    lab.fake.reservations[theirs] = ["zed"]
    lab.fake.jobs[77] = {"user": "zed", "state": "RUNNING", "gres": "gres:gpu:1", "partition": "gpuseat-c1-x",
                         "resv": theirs}  # fmt: skip
    done = lab.apply()
    assert not done.failed, done.failed
    assert lab.fake.reservations[theirs] == ["zed"] and 77 in lab.fake.jobs
    touched = [o.step for r in done.reports for o in r.outcomes if theirs in o.step.target or "zed" in o.step.target]
    assert touched == []
    from gpuseat.engines import registry
    from gpuseat.engines.apply import course_state

    eng = registry.build("slurm", lab.store, "c1", runner=lab.runner)  # type: ignore[arg-type]
    assert all(h.login != "zed" for h in eng.observe(course_state(lab.store, "c1")))  # type: ignore[arg-type]
    lab.store.lifecycle.archive_course("c1")  # type: ignore[attr-defined]
    lab.apply()
    assert lab.fake.reservations == {theirs: ["zed"]} and 77 in lab.fake.jobs


@pytest.mark.parametrize("state", ["REQUEUE_HOLD", "STOPPED", "RESV_DEL_HOLD", "REQUEUE_FED", "SIGNALING"])
def test_a_released_holders_held_or_stopped_job_is_cancelled_too(lab: Lab, state: str) -> None:
    # squeue lists these jobs, which still hold (STOPPED, SIGNALING) or may take again (a held requeue,
    # released later) the seat's GPU: a released holder who put their job on hold kept it past the release
    lab.apply()
    lab.job(51, "alice", "seat-01", state=state)
    lab.store.seats.release("c1", participant=lab.people["alice"])  # type: ignore[attr-defined]
    done = lab.apply()
    assert not done.failed, done.failed
    assert "scancel 51" in _lines(done) and 51 not in lab.fake.jobs


# The `nvidia-smi -L` section of a real H100 in MIG mode (one GPU line, four MIG lines), and a second
# GPU's line for "another participant's whole GPU": the lines are taken from the fixtures, not typed.
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
_H100_MIG = (FIXTURES / "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-mig__590.48.01.txt").read_text().splitlines()
_AT = _H100_MIG.index("# $ nvidia-smi -L") + 2
GPU_LINE, MIG_LINES = _H100_MIG[_AT], _H100_MIG[_AT + 1 : _AT + 5]
OTHER_GPU_LINE = (FIXTURES / "rtxpro6000__L.txt").read_text().splitlines()[0]


def _uuid(line: str) -> str:
    m = re.search(r"\(UUID: ((?:GPU|MIG)-[0-9a-f-]+)\)", line)
    assert m, line
    return m.group(1)


def test_the_probe_reads_a_mig_slice_by_the_one_parser(lab: Lab, tmp_path: Path) -> None:
    """``SlurmEngine.probe``: the stand-in ``srun`` runs the engine's real job script under ``sh`` on a
    stand-in node (its CUDA_VISIBLE_DEVICES, its nvidia-smi or none). A job on one MIG slice lists the
    parent GPU line and its MIG line: ready for that slice, broken for another's (it counted as two GPUs,
    every Slurm MIG seat broken). Without nvidia-smi only Slurm's index is there; an nvidia-smi that
    fails is no GPU seen (it fell back to the index: ready)."""
    import dataclasses
    import shlex
    import shutil
    import subprocess

    from gpuseat.engines import registry

    sh = shutil.which("sh")
    assert sh is not None
    node: dict[str, str] = {}

    def srun(argv: tuple[str, ...]) -> tuple[int, str, str]:
        assert "--gres=gpu:1" in argv and argv[-3:-1] == ("sh", "-c"), argv
        done = subprocess.run([sh, "-c", argv[-1]], env=node, capture_output=True, text=True, timeout=30)
        return done.returncode, done.stdout, done.stderr

    def on_node(cvd: str, listing: list[str] | None, *, smi_exit: int = 0) -> None:
        bin_dir = tmp_path / f"node-{len(list(tmp_path.glob('node-*')))}"
        bin_dir.mkdir()
        if listing is not None:
            lines = " ".join(shlex.quote(ln) for ln in listing)
            (bin_dir / "nvidia-smi").write_text(f"#!{sh}\nprintf '%s\\n' {lines}\nexit {smi_exit}\n")
            (bin_dir / "nvidia-smi").chmod(0o755)
        node.clear()
        node.update(PATH=str(bin_dir), CUDA_VISIBLE_DEVICES=cvd, SLURM_JOB_GPUS="2")

    lab.runner.answers[("srun",)] = srun
    engine = registry.build("slurm", lab.store, "c1", runner=lab.runner)
    alice = next(p for p in lab.store.roster.participants("c1") if p.key == lab.people["alice"])  # type: ignore[attr-defined]
    seat = lab.store.seats.get_seat("c1", "seat-01")  # type: ignore[attr-defined]
    mine, theirs = _uuid(MIG_LINES[2]), _uuid(MIG_LINES[3])
    cases = [
        # (CUDA_VISIBLE_DEVICES, nvidia-smi -L lines or None: not installed, seat UUID, state, reason or visible)
        ("0", [GPU_LINE, MIG_LINES[2]], mine, "ready", (mine,)),
        ("0", [GPU_LINE, MIG_LINES[2]], theirs, "broken", f"sees {mine}, not the seat's {theirs}"),
        ("0", [GPU_LINE, *MIG_LINES], mine, "broken", "4 GPUs visible"),
        ("0", [GPU_LINE], _uuid(GPU_LINE), "ready", (_uuid(GPU_LINE),)),
        ("0", [GPU_LINE], _uuid(OTHER_GPU_LINE), "broken", f"not the seat's {_uuid(OTHER_GPU_LINE)}"),
        ("0", [GPU_LINE, OTHER_GPU_LINE], _uuid(GPU_LINE), "broken", "2 GPUs visible"),
        ("0", None, mine, "ready", ("0",)),
        ("0,1", None, mine, "broken", "2 GPUs visible"),
        ("NoDevFiles", None, mine, "broken", "no GPU visible"),
        ("", None, None, "broken", "no GPU visible"),
    ]
    for cvd, listing, want, state, expect in cases:
        on_node(cvd, listing)
        lab.runner.take()
        got = engine.probe(dataclasses.replace(seat, device_uuid=want), alice)  # type: ignore[attr-defined]
        where = (cvd, listing, want, got.reason, got.evidence)
        assert got.state == state, where
        assert got.visible == expect if isinstance(expect, tuple) else expect in (got.reason or ""), where
        assert [r.user for r in lab.runner.take() if r.argv[0] == "srun"] == ["alice"], where
        if listing:
            assert listing[-1] in got.evidence, where
    # nvidia-smi there but failing (no driver): nothing seen, whatever Slurm's index says
    on_node("0", ["No devices were found"], smi_exit=6)
    got = engine.probe(dataclasses.replace(seat, device_uuid=mine), alice)  # type: ignore[attr-defined]
    assert (got.state, got.reason, got.visible) == ("broken", "no GPU visible to the participant", ()), got
    assert "No devices were found" in got.evidence


def test_a_holders_job_off_their_seat_is_cancelled_only_where_the_seat_ties_them() -> None:
    """``off_seat``: Slurm's own GRES listing of an untyped job names every type, those not given with 0.
    Tied by job_submit.lua, a job on another seat is a mover's (cancelled); untied (accounting alone), Slurm
    placed it and it is kept within the seat's one GPU, only the GPUs over it are cancelled, newest first."""
    from gpuseat.engines.slurm.adapter import Job

    types = {f"m60.seat-0{i}" for i in range(1, 5)}

    def job(i: int, state: str = "RUNNING") -> Job:
        return Job(i, "carol", state, "None", "gres:gpu:1", "gpuseat-c1", "", "localhost")

    def given(*seats: int) -> str:  # as `scontrol -d show job` lists an untyped job's GRES
        return ",".join(f"gpu:m60.seat-0{i}:{int(i in seats)}(IDX:{i - 1 if i in seats else ''})" for i in range(1, 5))

    cases = [  # (jobs, their GRES, tied, the job ids cancelled)
        ([job(1)], {1: given(1)}, False, []),  # Slurm gave seat-01 to carol of seat-03: hers to keep
        ([job(1)], {1: given(1)}, True, [1]),  # job_submit.lua ties her to seat-03: a mover's job
        ([job(1)], {1: given(3)}, True, []),  # her own seat's GPU (the 0 entries are no GPU held)
        ([job(1), job(2)], {1: given(3), 2: given(1)}, False, [2]),  # her seat's GPU and one more: over it
        ([job(1), job(2)], {1: given(2), 2: given(1)}, False, [2]),  # two GPUs elsewhere: the newer goes
        ([job(1)], {1: given(1, 2)}, False, [1]),  # one job on two GPUs: over the seat
        ([job(1, "PENDING")], {}, False, []),  # waiting: Slurm's association limit decides
    ]
    for jobs, idx, tied, want in cases:
        got = service.off_seat(jobs, idx, "m60.seat-03", types, 1, tied=tied)
        assert [j.job_id for j in got] == want, (idx, tied)
    assert service.seat_types_of(job(1), given(2)) == {"m60.seat-02"}


def test_cores_per_seat_sets_the_sessions_core_count_and_each_seats_cpus(lab: Lab) -> None:
    """``cores_per_seat`` 2: each session reserves the 8 cores bound to the 4 seats (``CoreCnt=8``), and
    job_submit.lua lets each holder ask for 2 CPUs; set back to 1, the next plan rewrites the seat limits."""
    conf = str(lab.etc / "slurm.conf")
    lab.store.agents.set_engine_settings("c1", "slurm", {"slurm_conf": conf, "cancel_wait_s": 1, "cores_per_seat": 2})  # type: ignore[attr-defined]
    creates = [s for s in lab.plan().steps if s.action == "reservation.create"]
    assert len(creates) == 2 and all("CoreCnt=8" in s.data["words"] for s in creates)
    assert not lab.apply().failed
    lua = (lab.etc / "job_submit.lua").read_text()
    assert {(x.user, x.cpus) for x in config.job_submit_limits(lua)} == {("alice", 2), ("bob", 2)}
    assert '["alice"] = {type = "m60", seat = "m60.seat-01", count = 1, cpus = 2},' in lua
    assert lab.plan().steps == []
    lab.store.agents.set_engine_settings("c1", "slurm", {"cores_per_seat": None})  # type: ignore[attr-defined]
    (limits,) = [s for s in lab.plan().steps if s.action == "limits.set"]
    assert ", cpus = 2}" not in limits.data["text"] and "count = 1}," in limits.data["text"]


def _cores_per_seat(lab: Lab, n: int) -> None:
    conf = str(lab.etc / "slurm.conf")
    lab.store.agents.set_engine_settings("c1", "slurm", {"slurm_conf": conf, "cancel_wait_s": 1, "cores_per_seat": n})  # type: ignore[attr-defined]


def test_a_changed_cores_per_seat_makes_the_sessions_again_and_names_the_config_to_redo(lab: Lab) -> None:
    """A course that ran with one core per seat, set to 2: the next apply alone makes each session again with
    ``CoreCnt=8`` (Slurm 22.05 changes no core reservation's count), and its notes say that gres.conf (as
    ``slurm config`` wrote it for 1) and the node slurmctld runs (one core per socket) bind the seats
    otherwise, and what to run; with both in place the notes are gone."""
    assert not lab.apply().failed
    assert sorted(lab.fake.cores.values()) == [4, 4]
    slots = [config.GresDevice(node="gpu01", gres_type="m60", files=(f"/dev/nvidia{i}",), core=i, seat=s)
             for i, s in enumerate(SEATS)]  # fmt: skip
    (lab.etc / "gres.conf").write_text(config.gres_conf(config.seat_cores(slots, 1)))
    _cores_per_seat(lab, 2)
    changes = lab.plan()
    resized = [s for s in changes.steps if s.action == "reservation.resize"]
    assert len(resized) == 2 and all(s.phase == "grant" and "CoreCnt=8" in s.data["words"] for s in resized)
    assert resized[0].why == "8 cores for its seats (cores_per_seat 2), not 4: made again"
    gres = next(n for n in changes.notes if "gres.conf binds" in n)
    assert "seat-01 to cores 0, not 0-1; seat-02 to cores 1, not 2-3;" in gres and "(cores_per_seat is 2)" in gres
    assert "gpuseat slurm config --course c1 --cpus CPUS --out DIR" in gres and "restart slurmctld and slurmd" in gres
    assert any(n.startswith("slurmctld runs gpu01 (CoresPerSocket=1): a seat's 2 cores") for n in changes.notes)
    done = lab.apply()
    assert not done.failed, done.failed
    lines = _lines(done)
    for name in lab.fake.reservations:
        made = next(
            i for i, ln in enumerate(lines) if ln.startswith(f"scontrol create reservation ReservationName={name} ")
        )
        assert lines.index(f"scontrol delete ReservationName={name}") < made and "CoreCnt=8" in lines[made]
    assert sorted(lab.fake.cores.values()) == [8, 8] and lab.plan().steps == []
    (lab.etc / "gres.conf").write_text(config.gres_conf(config.seat_cores(slots, 2)))
    lab.fake.cores_per_socket = 2  # slurm config's files in place, the daemons restarted
    assert lab.plan().notes == []


def test_a_session_with_a_job_in_it_keeps_its_cores_with_a_note_until_the_job_ends(lab: Lab) -> None:
    """Making a session again would end the jobs in it (and Slurm refuses to delete it while they are there):
    it stays as it is, the apply report's note says why and when it changes; the other session is made again;
    once the job has ended the next apply makes it again too."""
    assert not lab.apply().failed
    lab.job(41, "alice", "seat-01")  # in the first session
    busy, free = sorted(lab.fake.reservations, key=lambda n: n != lab.fake.jobs[41]["resv"])
    _cores_per_seat(lab, 2)
    changes = lab.plan()
    assert [s.target for s in changes.steps if s.action == "reservation.resize"] == [free]
    note = next(n for n in changes.notes if n.startswith(f"session {busy} "))
    assert note == (
        f"session {busy} needs 8 cores for its seats (cores_per_seat 2), not 4; job(s) 41 are in it, so it stays "
        "as it is (making it again would end them): the first apply after they end makes it again"
    )
    assert not lab.apply().failed
    assert lab.fake.cores == {busy: 4, free: 8} and 41 in lab.fake.jobs
    lab.fake.jobs.pop(41)
    assert [s.target for s in lab.plan().steps if s.action == "reservation.resize"] == [busy]
    assert not lab.apply().failed and lab.fake.cores == {busy: 8, free: 8}
