"""One login rule (gpuseat/core/logins.py) for the roster, the way in and every engine: a participant never
gets an account the machines have for themselves, whether the roster names it or gpuseat derives it."""

from __future__ import annotations

import pytest

from gpuseat.core.delivery import login_name
from gpuseat.core.hosts import split_user_host
from gpuseat.core.logins import SYSTEM_LOGINS, UNIX_USER
from gpuseat.core.roster import parse_roster
from gpuseat.engines.libvirt.names import guest_login
from gpuseat.engines.slurm.names import participant_login
from gpuseat.errors import InputError

HEADER = "name,email,unix_user\n"


@pytest.mark.parametrize("login", sorted(SYSTEM_LOGINS))
def test_the_roster_refuses_every_system_account_as_a_login(login: str) -> None:
    with pytest.raises(InputError) as refused:
        parse_roster(f"{HEADER}Ann,ann@example.org,{login}\n", groups=(), where="roster.csv")
    text = str(refused.value)
    assert "roster.csv:2" in text and "unix_user" in text and f"{login!r} is an account the machines have" in text


@pytest.mark.parametrize("email", ["root@example.org", "daemon@example.org", "slurm@example.org", "www-data@x.org"])
def test_a_participant_whose_key_is_a_system_account_gets_a_login_of_their_own(email: str) -> None:
    (row,) = parse_roster(f"{HEADER}Ann,{email},\n", groups=(), where="roster.csv")
    assert row.key == email.split("@")[0]  # the key stays what the email says
    login = login_name(row.key, row.unix_user)
    assert login not in SYSTEM_LOGINS and UNIX_USER.match(login) and login.startswith(f"{row.key}-"), login
    assert login == login_name(row.key, None)  # the same login every time (every engine derives it alike)


def test_an_ordinary_key_is_its_own_login() -> None:
    assert login_name("alice", None) == "alice" and login_name("ann.lee", "annl") == "annl"


@pytest.mark.parametrize("value", ["alice\n", "root", "", "Alice", "a b", "-rf", "a" * 33])
def test_the_engines_and_the_way_in_refuse_what_the_rule_refuses(value: str) -> None:
    with pytest.raises(InputError):
        guest_login(value, where="unix_user")
    with pytest.raises(InputError):
        participant_login(value)
    if value and value not in SYSTEM_LOGINS:  # ssh user@host checks the name only (root@host is an admin's way)
        with pytest.raises(InputError):
            split_user_host(f"{value}@gpu1.example.org")


def test_a_trailing_newline_is_not_part_of_a_login() -> None:
    # ``$`` matches before a final newline: "alice\n" passed the old patterns and reached files and commands
    assert UNIX_USER.match("alice") and not UNIX_USER.match("alice\n")


def test_a_trailing_newline_is_not_part_of_a_vm_name() -> None:
    # the libvirt engine's name check took "lab\n" (a domain, volume and file name)
    from gpuseat.engines.libvirt.names import is_key, key

    assert is_key("lab") and not is_key("lab\n")
    with pytest.raises(InputError):
        key("lab\n", where="course")
