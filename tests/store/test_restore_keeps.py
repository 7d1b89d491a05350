"""``db restore --force`` over a live store keeps what keeps people out: a link revoked or rotated since the
backup stays revoked, a password changed since stays the new one, every portal login ends; a restore into an
empty store changes nothing (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuseat.cli import main
from gpuseat.core.roster import RosterText
from gpuseat.store import open_store
from gpuseat.store.sessions import open_session, session_user

from .conftest import EXAMPLES
from .test_backup import restore_target

ROSTER = "name,email,unix_user\nAnn,ann@example.org,ann\nBen,ben@example.org,ben\nCid,cid@example.org,cid\n"


def test_restore_force_keeps_revoked_links_and_newer_passwords_and_ends_logins(
    url: str, tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(url, create=True) as store:
        store.courses.create_course(EXAMPLES / "course-2016.toml", key="lab")
        store.roster.import_roster("lab", RosterText(ROSTER, where="r.csv"))
        links = {t.participant: t.token for t in store.tokens.issue_tokens("lab")}
        store.accounts.set_password("org", "old-leaked-password")
        login = open_session(store, "org", 3600)
    ann, ben, cid = sorted(links)
    backup = tmp_path / "last-night.backup"
    assert main(["db", "backup", "--to", str(backup), "--db", url]) == 0
    with open_store(url) as store:  # after the backup: the leaks are closed
        store.tokens.revoke_tokens("lab", [ann])
        (new_ben,) = store.tokens.rotate_tokens("lab", [ben])
        store.accounts.set_password("org", "new-secret-password")
    capsys.readouterr()

    assert main(["db", "restore", str(backup), "--force", "--db", url]) == 0
    out = capsys.readouterr().out
    assert "kept 2 revoked access link(s) and 1 newer password from the replaced store; portal logins ended" in out
    with open_store(url) as store:
        for old in (links[ann], links[ben]):  # found, but opens nothing: the portal's "revoked" page
            hit = store.tokens.find_token(old)
            assert hit is not None and hit.participant is None and not hit.archived
            assert store.tokens.participant_for_token(old) is None
        assert store.tokens.find_token(new_ben.token) is None  # issued after the backup: not in it
        kept = store.tokens.participant_for_token(links[cid], touch=False)
        assert kept is not None and kept.key == cid  # a link nobody revoked opens as before
        assert not store.accounts.verify("org", "old-leaked-password")
        assert store.accounts.verify("org", "new-secret-password")
        assert session_user(store, login) is None  # the backup's login ended: log in again
        revoked = [e for e in store.events.events("lab") if e.action == "token.revoke"]
        assert [(e.actor, e.detail["participants"], e.detail["tokens"]) for e in revoked] == [
            ("gpuseat db restore", [ann, ben], 2)
        ]

    # into an empty store (no --force needed): the backup as it is, nothing kept, nothing printed about it (the
    # same path on both databases, read_kept finds no gpuseat store: SQLite only, PostgreSQL's is a new database)
    if not url.startswith("sqlite"):
        return
    target = restore_target(url, tmp_path, request)
    assert main(["db", "restore", str(backup), "--db", target]) == 0
    assert "kept" not in capsys.readouterr().out
    with open_store(target) as store:
        again = store.tokens.participant_for_token(links[ann], touch=False)
        assert again is not None and again.key == ann
        assert session_user(store, login) == "org"  # the backup's login, as it was
