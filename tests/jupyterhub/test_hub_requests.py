"""Participants' seat requests on a real JupyterHub (gpuseat's config, the tiny single-user server): the
engine's pass stops, starts and restarts the asker's server through the hub's REST API, marks each
request done, refuses a new SSH key with the reason, never touches the other participant's server, and
plans nothing more afterwards."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from hubcourse import make_course
from realhub import HubMissing, find_hub, find_proxy, running_hub

from gpuseat.engines.apply import one_pass
from gpuseat.engines.jupyterhub.requests import KEY_REFUSED
from gpuseat.engines.runner import Runner

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(name="jupyterhub")]
REPO = Path(__file__).resolve().parents[2]
KEY = (REPO / "tests" / "vms" / "keys" / "alice.pub").read_text(encoding="utf-8").strip()


def test_stop_start_restart_and_reset_act_on_the_askers_server_only(tmp_path):
    try:
        find_hub(), find_proxy()
    except HubMissing as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    url = f"sqlite:///{tmp_path / 'course.db'}"
    store = make_course(url, tmp_path, key="lab", people=["ada", "ben"], seats=2, assign=2)
    for seat in store.seats.seats("lab"):  # what `seats add --engine jupyterhub` records
        store.seats.set_seat_state("lab", seat.key, seat.state, engine="jupyterhub", reason="a hub seat")
    token_file = tmp_path / "engine-token"
    token_file.write_text(secrets.token_hex(32) + "\n", encoding="utf-8")
    token_file.chmod(0o600)
    pythonpath = os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    text = subprocess.run(
        [sys.executable, "-m", "gpuseat", "jupyterhub", "config", "--db", url, "--course", "lab", "--spawner",
         "local", "--cull-idle-hours", "0", "--engine-token-file", str(token_file)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": pythonpath}, timeout=120, check=True,
    ).stdout  # fmt: skip
    env = {"PYTHONPATH": pythonpath, "GPUSEAT_DB_URL": url}
    with running_hub(text, tmp_path / "hub", env=env, tiny=True, http_timeout=20) as hub:
        hub.add_users("ada", "ben")
        for name in ("ada", "ben"):
            assert hub.start(name).status_code in (201, 202)
        bens = hub.wait_ready("ben")
        first = hub.wait_ready("ada")["started"]
        store.agents.set_engine_settings("lab", "jupyterhub", {"hub_url": hub.url, "token_file": str(token_file)},
                                         actor="test")  # fmt: skip

        def ask(*actions: str) -> dict[str, tuple[str, str | None]]:
            """Ada asks for ``actions``; one engine pass; what became of each (a second pass plans nothing)."""
            for action in actions:
                store.requests.request_seat("lab", "ada", action, actor="ada", key=KEY if action == "key" else None)
            result = one_pass(store, course="lab", engine="jupyterhub", runner=Runner())
            assert not result.failed, result.failed
            again = one_pass(store, course="lab", engine="jupyterhub", runner=Runner())
            assert again.planned[0].changes.empty, again.planned[0].changes.to_dict()
            return {r.action: (r.state, r.reason) for r in store.requests.seat_requests("lab", participant="ada")}

        assert ask("stop")["stop"][0] == "done" and "ada" not in hub.servers()
        # the hub's own Start is refused while the seat is stopped: a stop cannot be bypassed
        assert hub.start("ada").status_code >= 400 and "ada" not in hub.servers()
        assert ask("start")["start"][0] == "done" and hub.servers()["ada"]["ready"]
        assert ask("key")["key"] == ("failed", KEY_REFUSED)
        done = ask("restart")["restart"]
        assert done[0] == "done" and done[1] is not None and done[1].startswith("restarted")
        assert hub.servers()["ada"]["started"] > first
        state, reason = ask("reset")["reset"]
        assert state == "done" and "a reset restarts your server" in (reason or "")
        assert hub.servers()["ben"]["started"] == bens["started"]  # ben's server was never touched
    store.close()
