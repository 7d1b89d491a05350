"""A host-engine seat whose server has no address but its label: what ``seats connect`` says to set works
for a seat that exists. Followed, the engine's next pass records the holder's way in, and the seat shows its
ssh line (the advice named the inventory file, which ``seats add`` alone reads)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .hostlab import MIG_AND_WHOLE, Lab

MIG0 = MIG_AND_WHOLE[0]["mig"][0]["uuid"]  # type: ignore[index]


def test_the_host_engines_setting_followed_gives_the_seat_its_ssh_line(
    hostcourse: tuple[Lab, str], cli: Callable[..., Any]
) -> None:
    lab, db = hostcourse
    login = lab.people["ann"].user
    seats = json.loads(cli("seats", "export", "--format", "json", "--db", db).out)
    seat = next(s["key"] for s in seats if s["device_uuid"] == MIG0)
    assert cli("seats", "assign", "--participant", "ann", "--seat", seat, "--db", db).code == 0
    flags = [x for k, v in lab.settings().items() if k != "ssh_host" for x in (f"--{k.replace('_', '-')}", v)]
    up = cli("host", "up", "--course", "lab", "--db", db, *flags)  # no --ssh-host: the server's label only
    assert up.code == 0, up.out + up.err
    assert "no way in is set: participant pages cannot say where to connect; set `gpuseat engines" in up.out, up.out
    assert "inventory file" not in up.out.replace("an inventory file's ssh_host is read only by", ""), up.out
    # the pass recorded ann's login, with no host to put it on
    shown = cli("seats", "connect", seat, "--db", db).out
    assert shown.startswith(f"{seat}: no host is set for this seat yet: set `gpuseat engines settings host "), shown
    assert f"or run `gpuseat seats connect {seat} --ssh USER@HOST`" in shown, shown
    # followed: the setting, then the engine's next pass
    assert cli("engines", "settings", "host", "ssh_host=127.0.0.1", "--course", "lab", "--db", db).code == 0
    waiting = cli("seats", "connect", seat, "--db", db).out  # set: nothing more to set, the pass records it
    assert waiting.startswith(f"{seat}: being prepared: ") and "engines settings" not in waiting, waiting
    applied = cli("apply", "--course", "lab", "--db", db)
    assert applied.code == 0, applied.out + applied.err
    assert cli("seats", "connect", seat, "--db", db).out == f"{seat}: ssh -p {lab.port} {login}@127.0.0.1\n"
    # and a way in cleared comes back the same way, on the next pass
    assert "being prepared" in cli("seats", "connect", seat, "--clear", "--db", db).out
    assert cli("apply", "--course", "lab", "--db", db).code == 0
    assert cli("seats", "connect", seat, "--db", db).out == f"{seat}: ssh -p {lab.port} {login}@127.0.0.1\n"
