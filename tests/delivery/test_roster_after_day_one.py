"""The roster changes after day one and the machine follows, seen from the participant's and the adversary's
side: a real sshd, real accounts, stand-in device files, the host engine's ``gpuseat apply``.

A new ``unix_user``: the old login is out (key gone, account locked, processes ended), the new one gets in on
the seat's GPU alone. A new SSH key: the old key is refused, the new one accepted. A participant the file no
longer lists is kept with their seat (docs/course.md) until the organizer releases it. A move to a group with
another policy: that group's seat hours apply. Logins are never passed between participants (a swap, or a
newcomer given a login someone else had): refused at import, naming the line and column.

One stand-in host and one sshd serve the whole module; each test has its own course, store and people.
"""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuseat.core import delivery
from gpuseat.engines.host.machine import Machine
from gpuseat.engines.runner import Runner

from .hostlab import MIG_AND_WHOLE, Lab, Person, have_tools, new_lab

MIG = [m["uuid"] for m in MIG_AND_WHOLE[0]["mig"]]  # type: ignore[index]
WHOLE = str(MIG_AND_WHOLE[1]["uuid"])
COURSE = """name = "Roster lab"
[schedule]
start = 2026-09-07
days = 5

[[group]]
name = "students"
count = 3
min_gpu_memory_gb = 16

[[group]]
name = "tutors"
count = 3
min_gpu_memory_gb = 16

[groups.students.policy]
quota_hours = 0
"""
_COURSES = itertools.count(1)


@pytest.fixture(scope="module")
def box() -> Iterator[Lab]:
    """One stand-in GPU host with its sshd for the module (the sshd drop-in written before it starts)."""
    why = have_tools()
    if why:
        pytest.skip(why)
    lab = new_lab()
    try:
        lab.build(MIG_AND_WHOLE)
        lab.dropin_dir.mkdir()
        (lab.dropin_dir / "gpuseat.conf").write_text(delivery.sshd_dropin(str(lab.keys_dir), lab.group))
        lab.start_sshd()
        yield lab
    finally:
        lab.close()


@dataclass
class Course:
    """One test's course on the shared host: its key, store and roster rows (person key → group, login)."""

    lab: Lab
    key: str
    db: str
    folder: Path
    cli: Callable[..., Any]
    rows: dict[str, dict[str, str]]

    def login(self, who: str) -> str:
        return self.lab.people[who].user

    def person(self, who: str, *, login_of: str | None = None) -> Person:
        """A participant of this course (unique on the host); ``login_of``: the same person under a new login."""
        if login_of is None:
            return self.lab.person(f"{self.key}{who}")
        same = self.lab.people[login_of]
        self.lab.people[who] = Person(who, f"g{self.lab.tag}{who}"[:32], same.private_key, same.public_key)
        return self.lab.people[who]

    def roster(self, *, drop: tuple[str, ...] = ()) -> Any:
        """Import the rows (``drop``: leave these out of the file); the command's result."""
        lines = ["key,name,email,group,unix_user,ssh_key"]
        for who, r in self.rows.items():
            if who not in drop:
                lines.append(f"{who},{who},{who}@example.org,{r['group']},{r['login']},{r['ssh_key']}")
        path = self.folder / f"roster-{len(list(self.folder.glob('roster-*')))}.csv"
        path.write_text("\n".join(lines) + "\n")
        return self.cli("roster", "import", path, "--course", self.key, "--db", self.db)

    def run(self, *args: object) -> Any:
        r = self.cli(*args, "--course", self.key, "--db", self.db)
        assert r.code == 0, (args, r.out, r.err)
        return r

    def apply(self) -> Any:
        """``gpuseat apply`` for this course on the host: every step done."""
        return self.run("apply", "--engine", "host")

    def seat_of(self, uuid: str) -> str:
        from gpuseat.store import open_store

        with open_store(self.db) as store:
            return next(s.key for s in store.seats.seats(self.key) if s.device_uuid == uuid)


@pytest.fixture
def course(box: Lab, tmp_path: Path, cli: Callable[..., Any]) -> Course:
    """A fresh course on the shared host: ann and bob (tutors), four host seats; nobody seated yet."""
    key = f"r{next(_COURSES)}"
    c = Course(box, key, f"sqlite:///{tmp_path / 'course.db'}", tmp_path, cli, {})
    for who in ("ann", "bob"):
        p = c.person(who)
        c.rows[p.key] = {"group": "tutors", "login": p.user, "ssh_key": p.public_key}
    (tmp_path / "course.toml").write_text(COURSE)
    listing = subprocess.run([str(box.nvidia_smi), "-L"], capture_output=True, text=True, check=True).stdout
    (tmp_path / "smi.txt").write_text(listing)
    settings = {**box.settings(), "profile_d": str(box.root / "profile.d" / f"{key}.sh")}
    r = cli("course", "create", tmp_path / "course.toml", "--key", key, "--db", c.db)
    assert r.code == 0, r.out + r.err
    assert c.roster().code == 0
    c.run("seats", "add", "--from-nvidia-smi", tmp_path / "smi.txt", "--engine", "host", "--host", "gpu1")
    c.run("engines", "settings", "host", *(f"{k}={v}" for k, v in settings.items()))
    return c


def _seated(c: Course) -> tuple[str, str]:
    """ann on the first MIG seat, bob on the second, applied; their person keys."""
    ann, bob = f"{c.key}ann", f"{c.key}bob"
    c.run("seats", "assign", "--participant", ann, "--seat", c.seat_of(MIG[0]))
    c.run("seats", "assign", "--participant", bob, "--seat", c.seat_of(MIG[1]))
    c.apply()
    assert c.lab.ssh(ann, "true").returncode == 0, c.lab.sshd_log()[-2000:]
    return ann, bob


def _uid(login: str) -> int:
    import pwd

    return pwd.getpwnam(login).pw_uid


def _sees(c: Course, who: str) -> tuple[str, list[str]]:
    """What ``who`` gets on login: CUDA_VISIBLE_DEVICES and the devices nvidia-smi lists for them."""
    env = c.lab.ssh(who, "env")
    assert env.returncode == 0, env.stderr + c.lab.sshd_log()[-2000:]
    cuda = next((x.split("=", 1)[1] for x in env.stdout.splitlines() if x.startswith("CUDA_VISIBLE_DEVICES=")), "")
    listed = c.lab.ssh(who, f"{c.lab.nvidia_smi} -L").stdout
    return cuda, [u for u in [*MIG, WHOLE] if u in listed]


def _refused(c: Course, who: str, *, key: Path | None = None) -> bool:
    done = c.lab.ssh(who, "true", key=key)
    return done.returncode == 255 and "denied" in done.stderr.lower()


def _settled(c: Course) -> None:
    """A second pass has nothing left to do."""
    assert "nothing to change" in c.apply().out


def test_a_new_unix_user_takes_the_old_login_out_and_the_new_one_in(course: Course) -> None:
    c = course
    ann, _bob = _seated(c)
    old = c.login(ann)
    running = subprocess.Popen(["sleep", "600"], user=_uid(old))  # her training loop, left running
    try:
        new = c.person(f"{ann}2", login_of=ann)
        c.rows[ann]["login"] = new.user
        changed = c.roster()
        assert changed.code == 0 and f"updated {ann}: unix_user" in changed.out, changed.out + changed.err
        # until the pass makes the new login, its way in is being prepared as it (not the old login's ssh line)
        before = c.run("seats", "connect", c.seat_of(MIG[0])).out
        assert f"{old}@" not in before and f"you will log in as {new.user}" in before, before
        c.apply()
        # the old login: refused, its key file gone, its account locked, its process ended
        assert _refused(c, ann)
        assert not (c.lab.keys_dir / old).exists()
        assert Machine(Runner()).locked(old)
        assert running.wait(10) is not None
        # the new login: in, on exactly the seat's GPU; only it may open the seat's device files
        assert _sees(c, new.key) == (MIG[0], [MIG[0]])
        mine = {_uid(new.user)}
        for f in (c.lab.cap_file(0, 7), c.lab.cap_file(0, 7, 0)):
            assert Machine(Runner()).acl_users(f) == mine, f
        way_in = c.run("seats", "connect", c.seat_of(MIG[0])).out
        assert f"ssh -p {c.lab.port} {new.user}@127.0.0.1" in way_in and f"{old}@" not in way_in, way_in
        _settled(c)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()


def test_a_new_ssh_key_refuses_the_old_one_and_accepts_the_new_one(course: Course) -> None:
    c = course
    ann, bob = _seated(c)
    first = c.lab.people[ann].private_key
    fresh = c.lab.root / "people" / f"{ann}-new"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(fresh)], check=True)
    c.rows[ann]["ssh_key"] = fresh.with_suffix(".pub").read_text().strip()
    changed = c.roster()
    assert changed.code == 0 and f"updated {ann}: ssh_key" in changed.out, changed.out + changed.err
    c.apply()
    assert _refused(c, ann, key=first)
    assert c.lab.ssh(ann, "true", key=fresh).returncode == 0
    assert c.lab.ssh(bob, "true").returncode == 0  # nobody else is touched
    _settled(c)


def test_a_participant_left_out_of_the_file_keeps_the_seat_until_it_is_released(course: Course) -> None:
    """docs/course.md: people no longer listed are kept and named, with their seat: the machine keeps them in
    until the organizer releases the seat."""
    c = course
    ann, bob = _seated(c)
    dropped = c.roster(drop=(bob,))
    assert dropped.code == 0 and f"not in the file (kept): {bob}" in dropped.out, dropped.out
    _settled(c)
    assert _sees(c, bob) == (MIG[1], [MIG[1]])
    c.run("seats", "release", "--participant", bob)
    c.apply()
    assert _refused(c, bob)
    assert c.lab.ssh(ann, "true").returncode == 0


def test_a_move_to_a_group_with_another_policy_applies_that_policy(course: Course) -> None:
    """ann moves from the tutors (no quota) to the students (0 seat hours): the next apply stops her seat;
    moved back, a start lets her in again, which the students' quota refused."""
    c = course
    ann, bob = _seated(c)
    c.rows[ann]["group"] = "students"
    changed = c.roster()
    assert changed.code == 0 and f"updated {ann}: group" in changed.out, changed.out + changed.err
    c.apply()
    assert _refused(c, ann)
    assert c.lab.ssh(bob, "true").returncode == 0
    c.run("seat", "start", "--participant", ann)
    c.apply()
    assert _refused(c, ann)  # the students' policy: no seat hours, no start
    c.rows[ann]["group"] = "tutors"
    assert c.roster().code == 0
    c.run("seat", "start", "--participant", ann)
    c.apply()
    assert _sees(c, ann) == (MIG[0], [MIG[0]])


def test_two_participants_swapping_logins_is_refused_and_neither_gets_the_others_gpu(course: Course) -> None:
    c = course
    ann, bob = _seated(c)
    a, b = c.login(ann), c.login(bob)
    c.rows[ann]["login"], c.rows[bob]["login"] = b, a
    swapped = c.roster()
    assert swapped.code == 2 and "Traceback" not in swapped.err, swapped.out + swapped.err
    assert ":2:5" in swapped.err and "unix_user" in swapped.err and b in swapped.err, swapped.err
    _settled(c)  # nothing was stored
    assert _sees(c, ann) == (MIG[0], [MIG[0]]) and _sees(c, bob) == (MIG[1], [MIG[1]])
    home = c.lab.ssh(ann, "echo $HOME").stdout.strip()
    assert home == f"/home/{a}", home


def test_a_login_someone_had_is_never_given_to_another_participant(course: Course) -> None:
    """ann's login changes; later a newcomer is given her old one: refused (her old account, home and files
    are still on the machine), and so is a file that gives bob ann's login while ann takes a new one."""
    c = course
    ann, bob = _seated(c)
    old = c.login(ann)
    new = c.person(f"{ann}2", login_of=ann)
    c.rows[ann]["login"] = new.user
    assert c.roster().code == 0
    c.apply()
    dan = c.person("dan")
    c.rows[dan.key] = {"group": "tutors", "login": old, "ssh_key": dan.public_key}
    taken = c.roster()
    assert taken.code == 2 and ":4:5" in taken.err and old in taken.err, taken.out + taken.err
    del c.rows[dan.key]
    c.rows[bob]["login"] = old
    taken = c.roster()
    assert taken.code == 2 and ":3:5" in taken.err and old in taken.err, taken.out + taken.err
    # ann herself may take her old login back
    c.rows[bob]["login"] = c.login(bob)
    c.rows[ann]["login"] = old
    assert c.roster().code == 0
    c.apply()
    assert _sees(c, ann) == (MIG[0], [MIG[0]])
    assert _refused(c, new.key)


def test_the_login_a_new_unix_user_left_goes_with_its_home_when_the_course_is_deleted(course: Course) -> None:
    """docs/course.md: the old login's home stays, locked, until the course is deleted; docs/delivery.md: course
    delete removes the course's accounts with their home folders. Locked and keyless, the old login held nothing,
    so the engine no longer knew it: the course was deleted and its account and files stayed on the machine."""
    import pwd

    from gpuseat.errors import NotFound
    from gpuseat.store import open_store

    c = course
    ann, bob = _seated(c)
    old = c.login(ann)
    (Path(pwd.getpwnam(old).pw_dir) / "notes.txt").write_text("ann's work\n")
    new = c.person(f"{ann}2", login_of=ann)
    c.rows[ann]["login"] = new.user
    assert c.roster().code == 0
    c.apply()
    home = Path(pwd.getpwnam(old).pw_dir)
    assert Machine(Runner()).locked(old) and (home / "notes.txt").exists()  # kept, locked, while the course runs
    gone = c.cli("course", "delete", c.key, "--yes", "--export-to", c.folder / "export.zip", "--db", c.db)
    assert gone.code == 0, gone.out + gone.err
    c.apply()
    for login in (old, new.user, c.login(bob)):
        assert Machine(Runner()).account(login) is None, f"{login}'s account outlived the deleted course"
    assert not home.exists(), "the old login's home folder outlived the deleted course"
    with open_store(c.db) as store, pytest.raises(NotFound):
        store.courses.get_course(c.key)


def test_a_participant_removed_from_the_roster_loses_the_machine_and_their_login_stays_theirs(course: Course) -> None:
    """``roster remove ann --yes`` after day one: the next pass takes her access away as for a release (her login
    refused by sshd, its key file gone, the account locked, her processes ended), bob is untouched; her login is
    never given to a newcomer, and her account and home go when the course is deleted."""
    c = course
    ann, bob = _seated(c)
    old = c.login(ann)
    running = subprocess.Popen(["sleep", "600"], user=_uid(old))  # her training loop, left running
    try:
        done = c.run("roster", "remove", ann, "--yes")
        assert f"removed {ann} (released {c.seat_of(MIG[0])})" in done.out, done.out
        c.apply()
        assert _refused(c, ann)
        assert not (c.lab.keys_dir / old).exists()
        assert Machine(Runner()).locked(old)
        assert running.wait(10) is not None
        assert _sees(c, bob) == (MIG[1], [MIG[1]])
        _settled(c)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    dan = c.person("dan")
    del c.rows[ann]
    c.rows[dan.key] = {"group": "tutors", "login": old, "ssh_key": dan.public_key}
    taken = c.roster()
    assert taken.code == 2 and ":3:5" in taken.err and old in taken.err, taken.out + taken.err
    gone = c.cli("course", "delete", c.key, "--yes", "--export-to", c.folder / "export.zip", "--db", c.db)
    assert gone.code == 0, gone.out + gone.err
    c.apply()
    assert Machine(Runner()).account(old) is None, "the removed participant's account outlived the deleted course"
