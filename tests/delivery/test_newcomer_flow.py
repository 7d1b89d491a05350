"""The newcomer's flow from the issue, end to end: 24 participants, 14 MIG seats on a 2× H200
server (stand-in devices, real sshd and accounts) and 10 cloud seats, built with the CLI as
docs/course.md describes. Every participant page names a reachable host, never the inventory's
name; the 14 host seats check ready as their participants."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from portal.live import start

from .hostlab import Lab, free_port

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
H200X2 = [
    {
        "minor": g,
        "name": "NVIDIA H200",
        "pci": f"00000000:{0x1A + g:02X}:00.0",
        "uuid": f"GPU-{g}0000000-0000-4000-8000-000000000000",
        "mig": [
            {"gi": gi, "ci": 0, "profile": "1g.18gb", "uuid": f"MIG-{g}{gi:07d}-0000-4000-8000-000000000000"}
            for gi in range(7, 14)
        ],
    }
    for g in (0, 1)
]
COURSE = """name = "H200 lab, 24 people"
offers_files = ["offers.toml"]
offers = ["example:*", "aws:g5.xlarge"]

[schedule]
start = 2026-09-07
days = 21

[[group]]
name = "server"
count = 14
min_gpu_memory_gb = 16
isolation = "partitioned"

[[group]]
name = "cloud"
count = 10
min_gpu_memory_gb = 16
"""


def test_24_people_14_mig_10_cloud(bare_lab: Lab, tmp_path: Path, cli: Callable[..., Any]) -> None:
    lab = bare_lab
    lab.build(H200X2)
    lab.port = free_port()
    db = f"sqlite:///{tmp_path / 'course.db'}"
    offers = (EXAMPLES / "offers-h200.toml").read_text().replace("available = 2", "available = 1")
    (tmp_path / "offers.toml").write_text(offers.replace("price_usd = 9000", "price_usd = 4000"))
    (tmp_path / "course.toml").write_text(COURSE)
    inv = (EXAMPLES / "h200-2x-server.toml").read_text()
    inv = inv.replace('name = "h200-2x"', f'name = "h200-2x"\nssh_host = "127.0.0.1"\nssh_port = {lab.port}')
    (tmp_path / "h200-2x.toml").write_text(inv)
    people = [lab.person(f"p{i:02d}") for i in range(1, 25)]
    rows = ["name;email;group;unix_user;ssh_key"] + [
        f"Person {p.key};{p.key}@example.org;{'server' if i < 14 else 'cloud'};{p.user};{p.public_key}"
        for i, p in enumerate(people)
    ]
    (tmp_path / "roster.csv").write_text("\n".join(rows) + "\n")  # as German Excel writes it

    def ok(*args: object) -> str:
        r = cli(*args, "--db", db)
        assert r.code == 0, (args, r.out, r.err)
        return str(r.out + r.err)

    ok("course", "create", tmp_path / "course.toml", "--key", "h200", "--plan-option", "1")
    ok("roster", "import", tmp_path / "roster.csv")
    out = ok("seats", "add", "--inventory", tmp_path / "h200-2x.toml", "--mode", "mig", "--profile", "1g.18gb",
             "--engine", "host", "--group", "server")  # fmt: skip
    assert "14 seats of 1g.18gb fit" in out
    out = ok("seats", "add", "--cloud")
    assert "warning" not in out
    seats = json.loads(ok("seats", "export", "--format", "json"))
    assert sum(s["kind"] == "mig" for s in seats) == 14 and sum(s["kind"] == "cloud" for s in seats) == 10
    ok("seats", "assign")
    # the cloud seats' machines are launched by the cloud engine; the organizer records each address
    for n in range(1, 11):
        ok("seats", "connect", f"cloud-{n:02d}", "--ssh", f"ubuntu@cloud-{n:02d}.lab.example.org")
    settings = {k: v for k, v in lab.settings().items() if k not in ("ssh_host", "ssh_port")}
    up = cli("host", "up", "--db", db, *[x for k, v in settings.items() for x in (f"--{k.replace('_', '-')}", v)])
    assert up.code == 0, up.err
    lab.start_sshd()

    check = cli("seats", "check", "--db", db, "--format", "json")
    assert check.out, check.err
    rows_by_seat = {r["seat"]: r for r in json.loads(check.out)["seats"]}
    host_rows = [r for r in rows_by_seat.values() if r["engine"] == "host"]
    assert len(host_rows) == 14 and all(r["state"] == "ready" for r in host_rows), host_rows

    links = json.loads(ok("roster", "links", "--base-url", "http://portal.invalid", "--format", "json"))
    server = start(["--db", db], tmp_path / "serve.log")
    try:
        for link in links:
            page = httpx.get(link["link"].replace("http://portal.invalid", server.url)).text
            command = re.search(r'<pre id="connect">([^<]+)</pre>', page)
            assert command, (link["participant"], page[:3000])
            text = command.group(1)
            assert "h200-2x" not in page, link["participant"]
            assert re.search(r"@(127\.0\.0\.1|cloud-\d\d\.lab\.example\.org)$", text), text
            assert "Your organizer has not set" not in page
    finally:
        assert server.stop() == 0
    # a participant pastes their command (the port is in it) and lands on their own MIG device
    p = people[0]
    env = lab.ssh(p.key, "env").stdout
    seat = next(s for s in json.loads(ok("seats", "export", "--format", "json")) if s["participant"] == p.user)
    assert f"CUDA_VISIBLE_DEVICES={seat['device_uuid']}" in env.splitlines()
    # more cloud seats than the plan option rents: added, with a warning naming the plan's number
    more = cli("seats", "add", "--cloud", "--count", "3", "--db", db)
    assert more.code == 0 and "would make 13, but plan option 1 rents 10" in more.err
