"""Self-service after day one from the participant's and the adversary's side, through the ASGI app and the
real store (SQLite and PostgreSQL): a login renamed by a roster re-import, and key lines a participant pastes.

A new ``unix_user`` (the person's key kept) leaves the seat's stored way in naming the old login until the
engine's next pass makes the new one: the page says *being prepared … you will log in as NEW*, never the old
login's ``ssh`` command (its account is locked at that pass) and never ``ssh HOST`` without a user.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuseat.engines.base import ssh_access

from .test_participant_controls import _csrf, _post, served  # noqa: F401 (a fixture)

SSH = re.compile(r"\bssh [^<\n]*")
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def test_a_new_unix_user_shows_being_prepared_as_the_new_login_until_the_engine_records_it(
    served: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    store, client, links = served
    # the way in the host engine records for ann's login (engines/host: ssh_access)
    access = ssh_access("gpu1.example.org", "ann", "ann", "MIG-1")
    store.delivery.record_delivery("lab", "mig-01", access=access, state="running")
    page = client.get(f"/t/{links['ann']}").text
    assert SSH.findall(page) == ["ssh ann@gpu1.example.org"], SSH.findall(page)
    roster = "key,name,email,unix_user\nann,Ann,ann@example.org,ann2\nben,Ben,ben@example.org,ben\n"
    (tmp_path / "r2.csv").write_text(roster)
    changed = store.roster.import_roster("lab", tmp_path / "r2.csv")
    assert [(c.key, c.fields) for c in changed.changes if c.fields] == [("ann", ("unix_user",))]
    page = client.get(f"/t/{links['ann']}").text
    assert SSH.findall(page) == [], SSH.findall(page)  # neither the old login nor a bare host
    assert "being prepared" in page and "you will log in as ann2" in page, page
    assert client.get(f"/t/{links['ann']}/ssh_config").status_code == 404
    # the engine's next pass records the new login: the page shows it
    store.delivery.record_delivery("lab", "mig-01", access=ssh_access("gpu1.example.org", "ann2", "ann", "MIG-1"))
    page = client.get(f"/t/{links['ann']}").text
    assert SSH.findall(page) == ["ssh ann2@gpu1.example.org"], SSH.findall(page)
    assert "User ann2\n" in client.get(f"/t/{links['ann']}/ssh_config").text


def test_key_lines_a_participant_pastes_are_refused_once_each_or_stored_as_one_bare_line(
    served: Any,  # noqa: F811
) -> None:
    """Two keys on one line were stored whole: authorized_keys read the second as the first's comment, so it
    never logged in while the page said *done*. Each bad paste is one 400 naming what is wrong, and changes
    nothing; a line with Windows line ends or a byte-order mark is stored as the bare line."""
    store, client, links = served
    ann, csrf = links["ann"], _csrf(client, links["ann"])
    private = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----\n"
    bad = {
        f"{KEY} ann@laptop {KEY} ann@desk": "this line holds 2 keys: give one key only",
        f"{KEY} a\r\n{KEY} b\r\n": "give one key line only",
        private: "this is a private key",
        f'command="/bin/sh -i" {KEY}': "key options (from=, command=, restrict …) are not allowed",
        f"restrict {KEY}": "key options",
    }
    for pasted, says in bad.items():
        r = _post(client, ann, csrf=csrf, seat="mig-01", action="key", key=pasted)
        assert r.status_code == 400 and says in r.text, (pasted, r.status_code, r.text[-600:])
    huge = _post(client, ann, csrf=csrf, seat="mig-01", action="key", key=f"{KEY} {'x' * 100_000}")
    assert huge.status_code == 413 and "64 KiB" in huge.text, huge.text
    assert store.roster.find_participant("lab", "ann").ssh_key is None
    assert store.requests.seat_requests("lab") == []
    ok = _post(client, ann, csrf=csrf, seat="mig-01", action="key", key=f"\ufeff{KEY} ann@laptop\r\n")
    assert ok.status_code == 303, ok.text
    stored = store.roster.find_participant("lab", "ann").ssh_key
    assert stored == f"{KEY} ann@laptop"
    from gpuseat.core.delivery import authorized_keys

    lines = authorized_keys(stored, None, "MIG-1").splitlines()  # the host engine's keys file for her login
    assert lines[1:] == [f'environment="CUDA_VISIBLE_DEVICES=MIG-1" {KEY} ann@laptop'], lines


def test_the_organizers_requests_for_a_participant_leave_them_their_own_ten(served: Any) -> None:  # noqa: F811
    """The organizer restarting ann's seat ten times (``gpuseat seat restart``, by_participant=False) used up her
    ten requests in ten minutes, though the rule counts only hers: her Stop then answered 429."""
    store, client, links = served
    for _ in range(10):
        done = store.requests.request_seat("lab", "ann", "restart", actor="admin", by_participant=False)
        store.requests.finish_request("lab", done.id, ok=True)  # as an agent that keeps up would
    csrf = _csrf(client, links["ann"])
    assert _post(client, links["ann"], csrf=csrf, seat="mig-01", action="stop").status_code == 303
    pending = store.requests.seat_requests("lab", participant="ann", pending=True)
    assert [(r.action, r.actor) for r in pending] == [("stop", "participant:ann")]


def test_a_new_key_for_a_seat_set_up_by_hand_says_the_organizer_installs_it(served: Any) -> None:  # noqa: F811
    """A ``manual`` seat is set up by hand: no engine installs a key there, yet the page said *done (stored:
    the manual engine installs it)* and ann waited for a key that never came."""
    store, client, links = served
    store.seats.add_seats("lab", [{"key": "box-01", "kind": "gpu", "engine": "manual", "connect": "ssh ann@box"}])
    store.seats.release("lab", participant="ann")
    store.seats.assign("lab", "ann", "box-01")
    page = client.get(f"/t/{links['ann']}").text
    assert 'id="seat-stop"' not in page and 'id="save-key"' in page
    r = _post(client, links["ann"], csrf=_csrf(client, links["ann"]), action="key", key=f"{KEY} ann@new")
    assert r.status_code == 303, r.text
    [done] = store.requests.seat_requests("lab", participant="ann")
    assert (done.action, done.state, done.seat) == ("key", "done", "box-01")
    assert done.reason is not None and "installs it" not in done.reason, done.reason
    assert "set up by hand" in done.reason and "organizer" in done.reason, done.reason
    assert store.roster.find_participant("lab", "ann").ssh_key == f"{KEY} ann@new"  # kept for a seat gpuseat sets up


K1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAfeUCKfFCV4ndM6fgkbF7ih3s3g6KpI2c4hLmpLIvX5 ann@old"
K2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBLdlyU0JqJz6w6wJTwXwdGDHf+pb3HBJ3kR+nS54ZOs ann@new"
K4 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFC3y0qZ3CJQ2iQ2y0SJmGJt8mgmUZqMFEDXz2ILU1YM ann@organizer"


def _roster(path: Path, ann: str, ben: str = "", *, late: bool = False) -> Path:
    rows = [
        "key,name,email,unix_user,ssh_key",
        f"ann,Ann,ann@example.org,ann,{ann}",
        f"ben,Ben,ben@example.org,ben,{ben}",
    ]
    path.write_text("\n".join(rows + (["cy,Cy,cy@example.org,cy,"] if late else [])) + "\n")
    return path


def test_a_re_import_of_the_old_roster_keeps_the_key_a_participant_set_on_their_page(
    served: Any,  # noqa: F811
    tmp_path: Path,
    cli: Callable[..., Any],
) -> None:
    """Ann lost the key the roster gave (K1) and set K2 on her page; Ben, who had none, added one. The organizer
    then imports the same file again with a late registrant: K1 came back over K2 and Ben's key was erased
    (the next pass installs what is stored: both locked out). A file that still has the key a key request
    replaced, or none, keeps the newer one and says so; a key the file changes wins (the organizer's)."""
    store, client, links = served
    store.roster.import_roster("lab", _roster(tmp_path / "day1.csv", K1))
    for who, key in (("ann", K2), ("ben", K4.replace("ann@organizer", "ben@laptop"))):
        r = _post(client, links[who], csrf=_csrf(client, links[who]), action="key", key=key)
        assert r.status_code == 303, r.text
    late = cli("roster", "import", _roster(tmp_path / "late.csv", K1, late=True), "--course", "lab", "--db", store.url)
    assert late.code == 0 and "1 added, 0 updated, 2 unchanged" in late.out, late.out + late.err
    assert "kept the key each set since (the file has the one it replaced): ann, ben" in late.out, late.out
    assert store.roster.find_participant("lab", "ann").ssh_key == K2
    assert store.roster.find_participant("lab", "ben").ssh_key == K4.replace("ann@organizer", "ben@laptop")
    # the organizer gives ann another key in the file: it wins, as a key request of theirs would
    report = store.roster.import_roster("lab", _roster(tmp_path / "k4.csv", K4, late=True))
    assert store.roster.find_participant("lab", "ann").ssh_key == K4
    assert [(c.key, c.fields) for c in report.changes if c.fields] == [("ann", ("ssh_key",))], report


def test_a_page_of_a_seat_since_moved_from_and_removed_says_reload_not_attack(served: Any) -> None:  # noqa: F811
    """Ann's page shows mig-01; its GPU breaks, the organizer moves her to mig-03 and removes mig-01 (its
    assignments go with it). Her open page's Stop answered 403 *you can act on your own seat only* and was logged
    as an attempt on another's seat; it is her stale page: 409 *reload*, nothing stored or logged as refused.
    A seat she never held is still refused (403)."""
    store, client, links = served
    store.seats.add_seats(
        "lab", [{"key": "mig-03", "kind": "mig", "host": "gpu1", "engine": "host", "device_uuid": "MIG-3"}]
    )
    csrf = _csrf(client, links["ann"])
    store.seats.move("lab", "ann", "mig-03")
    assert store.lifecycle.remove_seats("lab", ["mig-01"], force=True) == ["mig-01"]
    stale = _post(client, links["ann"], csrf=csrf, action="stop", seat="mig-01")
    assert stale.status_code == 409, stale.text
    assert "seat mig-01, which you no longer hold; you now hold mig-03: reload the page" in stale.text
    assert store.requests.seat_requests("lab") == []
    assert not any(e.action == "portal.refused" for e in store.events.events("lab"))
    assert _post(client, links["ann"], csrf=csrf, action="stop", seat="mig-02").status_code == 403  # ben's
