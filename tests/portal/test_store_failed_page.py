"""The portal when the store fails for a reason other than a held lock: a full disk, from the participant's side.

The course's SQLite file lies on a real, small tmpfs inside a private mount namespace (``unshare --mount``,
as in ``tests/reliability/test_store_faults.py``), and the ASGI app runs in that namespace's process. Once
the portal is up the file system is filled to its last byte: reads still work (the link's lookup, the
organizer's session), every write fails. A participant's stop request then gets 503 with the plain
message, never the database's path, SQL or a pid; the organizer, logged in, is told what failed; nothing
is half-written, and once space is freed the same request goes through.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuseat.web.deps import STORE_FAILED

REPO = Path(__file__).resolve().parents[2]

SERVE = r"""
import json, re, sqlite3, sys
from pathlib import Path
from fastapi.testclient import TestClient
from gpuseat.catalog.bundle import load_catalog
from gpuseat.store import open_store
from gpuseat.web.app import Portal, create_app

mnt, out = Path(sys.argv[1]), Path(sys.argv[2])
CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')
PASSWORD = "a long enough passphrase"
db = mnt / "course.db"
store = open_store(f"sqlite:///{db}", create=True)
(mnt / "c.toml").write_text('name = "Lab"\nparticipants = 2\n[needs]\nmin_gpu_memory_gb = 16\n'
                            '[schedule]\nstart = 2026-09-07\ndays = 21\n')
store.courses.create_course(mnt / "c.toml", key="lab")
(mnt / "r.csv").write_text("name,email,unix_user\nAnn,ann@example.org,ann\nBen,ben@example.org,ben\n")
store.roster.import_roster("lab", mnt / "r.csv")
seat = {"key": "h00", "kind": "mig", "host": "gpu1", "engine": "host", "device_uuid": "MIG-0"}
store.seats.add_seats("lab", [seat])  # an engine that carries out a participant's requests
store.seats.assign("lab", "ann", "h00")
token = {t.participant: t.token for t in store.tokens.issue_tokens("lab")}["ann"]
store.accounts.set_password("admin", PASSWORD)
app = create_app(Portal(store, load_catalog(), "lab", link_days_after_end=None))
ann, org = TestClient(app), TestClient(app)
stop = {"csrf": CSRF.search(ann.get(f"/t/{token}").text).group(1), "action": "stop", "seat": "h00"}
login = {"csrf": CSRF.search(org.get("/login").text).group(1), "username": "admin", "password": PASSWORD}
assert org.post("/login", data=login, follow_redirects=False).status_code == 303
release = {"csrf": CSRF.search(org.get("/seats").text).group(1), "action": "release", "participant": "ann",
           "seat": "h00"}
with sqlite3.connect(db) as conn:  # the write-ahead log empty and short: a write needs new blocks
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
filler = mnt / "filler"
with open(filler, "wb", buffering=0) as f:  # the file system full to its last byte
    for size in (1 << 16, 1 << 12, 1):
        try:
            while True:
                f.write(b"\0" * size)
        except OSError:
            pass

def answer(r):
    return {"status": r.status_code, "text": r.text, "headers": dict(r.headers)}

result = {
    "db": str(db),
    "stop": answer(ann.post(f"/t/{token}/seat", data=stop, follow_redirects=False)),
    "release": answer(org.post("/seats/action", data=release, follow_redirects=False)),
    "requests": [r.action for r in store.requests.seat_requests("lab", participant="ann")],
    "seat": getattr(store.seats.seat_of("lab", "ann"), "key", None),
}
filler.unlink()
result["again"] = answer(ann.post(f"/t/{token}/seat", data=stop, follow_redirects=False))
result["after"] = [r.action for r in store.requests.seat_requests("lab", participant="ann")]
with sqlite3.connect(db) as conn:
    result["integrity"] = conn.execute("PRAGMA integrity_check").fetchone()[0]
ann.close(), org.close(), store.close()
out.write_text(json.dumps(result))
"""


def test_a_stop_request_on_a_full_disk_is_the_plain_503_and_the_organizer_sees_why(tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed for the tmpfs fault tests")
    mnt, out = tmp_path / "full", tmp_path / "out.json"
    mnt.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") or k == "GPUSEAT_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [env.get("PYTHONPATH")])])
    script = f'mount -t tmpfs -o size=4m tmpfs "$1" && exec "{sys.executable}" -c "$2" "$1" "$3"'
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-eu", "-c", script, "sh", str(mnt), SERVE]
    done = subprocess.run([*cmd, str(out)], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(out.read_text())

    stop = got["stop"]
    assert stop["status"] == 503, stop["text"][:800]
    assert STORE_FAILED in stop["text"], stop["text"][:800]
    leaks = [w for w in (got["db"], "course.db", "pid", "sqlite", "SQL", "INSERT", "Traceback") if w in stop["text"]]
    assert leaks == [], (leaks, stop["text"][:800])
    assert "retry-after" not in stop["headers"]  # not busy: no minute promised
    assert 'class="logout"' not in stop["text"]  # a link's page never shows the organizer's menu

    release = got["release"]
    assert release["status"] == 503, release["text"][:800]
    assert STORE_FAILED not in release["text"]
    assert "full" in release["text"].lower() or "no space" in release["text"].lower(), release["text"][:800]

    assert got["requests"] == [] and got["seat"] == "h00"  # nothing half-written: no request, no release
    assert got["again"]["status"] == 303, got["again"]["text"][:800]
    assert got["after"] == ["stop"]
    assert got["integrity"] == "ok"
