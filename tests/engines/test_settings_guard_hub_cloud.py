"""Settings and stored values of the JupyterHub and SkyPilot engines that reach a URL, a shell or Python code.

Each row is a value an organizer (or a roster) can store and what gpuseat did with it before:

* ``hub_url=http://hub.example.edu``: the engine sent its admin token (admin:users, admin:servers, tokens)
  in clear text to another machine; ``https://user:pw@hub…`` showed the password in every participant's
  way in. Both are refused when stored (``gpuseat engines settings``), loopback http stays allowed;
* skypilot ``ssh=bin/ssh`` (or ``ssh=/home/me/tool``) and ``wheelhouse=wheels/`` depended on the agent's working folder (the agent ran
  that program, shipped that folder to every seat): the first is refused, the second stored as the folder it
  names where it is set; ``gpuseat_spec=gpuseat`` (a bare name from a package index) was stored and failed
  only at the first launch: it is refused when stored;
* a roster login that is an account the cloud image already has (Debian's ``admin`` with sudo, a system
  account): the setup gave the participant's key to that account; now it refuses (run in a throw-away root);
* ``gpuseat.jupyterhub.render`` pasted ``engine_token_file`` into a comment line: a line break there became
  hub code. The CLI refused it; the renderer now does too.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuseat.catalog.bundle import load_catalog
from gpuseat.cli import main
from gpuseat.engines import registry
from gpuseat.engines.skypilot import tasks
from gpuseat.errors import InputError
from gpuseat.jupyterhub.config import HubSettings, render
from gpuseat.store import open_store

COURSE = 'name = "lab"\nparticipants = 2\n[schedule]\nstart = 2026-09-07\ndays = 5\n'


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://hub.example.edu", "unencrypted to hub.example.edu: use https://hub.example.edu"),
        ("http://10.0.0.5:8000/prefix", "unencrypted to 10.0.0.5"),
        ("http://127.0.0.1.evil.example:8000", "unencrypted"),
        ("http://localhost.evil.example", "unencrypted"),
        ("http://[::ffff:10.0.0.5]", "unencrypted"),
        ("https://admin:hunter2@hub.example.edu", "no user:password@"),
        ("https://hub.example.edu\\@evil.example", "no user:password@"),
        ("https://hub.example.edu/\x1b[2J", "http(s)://"),
    ],
)
def test_a_hub_url_that_would_leak_the_token_or_a_password_is_refused(url, says):
    with pytest.raises(InputError, match="jupyterhub setting hub_url") as info:
        registry.validate_settings("jupyterhub", {"hub_url": url})
    assert says in info.value.message


@pytest.mark.parametrize(
    "url",
    [
        "https://hub.example.edu",
        "https://hub.example.edu:8443/jupyter/",
        "http://127.0.0.1:8000",
        "http://127.0.1.1:8000",
        "http://localhost:8000/hub-prefix",
        "http://[::1]:8000",
        "https://[2001:db8::5]",
    ],
)
def test_a_https_hub_or_a_hub_on_this_machine_is_taken(url):
    assert registry.validate_settings("jupyterhub", {"hub_url": url}).hub_url == url.rstrip("/")


@pytest.mark.parametrize(
    ("values", "field", "says"),
    [
        ({"token_env": "AWS_SECRET_ACCESS_KEY"}, "token_env", "does not name a token"),
        ({"token_env": "PGPASSWORD"}, "token_env", "does not name a token"),
        ({"token_file": "/root/.config/some-secret"}, "token_file", "does not name a token"),
        ({"token_file": "/etc/gpuseat/db-password"}, "token_file", "does not name a token"),
    ],
)
def test_a_token_source_that_names_another_secret_is_refused(values, field, says):
    """The agent sends the token to ``hub_url``, which the same settings choose: a token source must be one,
    else the settings could send one of the agent's other secrets (a cloud key in its environment, a one-line
    secret file of root's) to a host of their choosing. Before, any variable and any root-only file went."""
    with pytest.raises(InputError, match=f"jupyterhub setting {field}") as info:
        registry.validate_settings("jupyterhub", {"hub_url": "https://hub.example.edu", **values})
    assert says in info.value.message


def test_token_sources_that_name_a_token_are_taken():
    for values in ({"token_env": "JUPYTERHUB_API_TOKEN"}, {"token_env": "MY_HUB_TOKEN"},
                   {"token_file": "/etc/gpuseat/hub-token"}, {"token_file": "/run/secrets/engine-token"}):  # fmt: skip
        registry.validate_settings("jupyterhub", {"hub_url": "https://hub.example.edu", **values})


def _course(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'course.db'}"
    store = open_store(url, create=True)
    (tmp_path / "lab.toml").write_text(COURSE)
    store.courses.create_course(tmp_path / "lab.toml", key="lab")
    store.close()
    return url


def test_the_cli_refuses_a_plain_http_hub_and_stores_nothing(tmp_path, capsys):
    url = _course(tmp_path)
    code = main(["engines", "settings", "jupyterhub", "hub_url=http://hub.example.edu", "--course", "lab", "--db", url])
    err = capsys.readouterr().err
    assert code == 2 and "hub_url" in err and "https://" in err and "Traceback" not in err
    store = open_store(url)
    try:
        assert not (store.agents.engine_settings("lab", "jupyterhub") or {}).get("hub_url")
    finally:
        store.close()


@pytest.mark.parametrize(
    ("values", "field", "says"),
    [
        ({"ssh": "bin/ssh"}, "ssh", "absolute path of an ssh"),
        ({"ssh": "/home/organizer/tool"}, "ssh", "must be ssh"),
        ({"ssh": "sh"}, "ssh", "must be ssh"),
        ({"ssh": "/usr/bin/../../tmp/ssh"}, "ssh", "must be ssh"),
        ({"wheelhouse": "/srv/wheels\nx"}, "wheelhouse", "on one line"),
        ({"gpuseat_spec": "gpuseat"}, "gpuseat_spec", "direct reference"),
        ({"gpuseat_spec": "gpuseat @ http://example.org/gpuseat-0.1-py3-none-any.whl"}, "gpuseat_spec", "https"),
    ],
)
def test_skypilot_settings_the_agent_acts_on_are_refused_when_stored(values, field, says):
    with pytest.raises(InputError, match=f"skypilot setting {field}") as info:
        registry.validate_settings("skypilot", values)
    assert says in info.value.message


def test_skypilot_settings_that_are_fine_are_taken():
    ok = {"ssh": "/usr/bin/ssh", "wheelhouse": "/srv/gpuseat/wheels", "disk_gb": 80}
    assert registry.validate_settings("skypilot", ok).wheelhouse == "/srv/gpuseat/wheels"
    assert registry.validate_settings("skypilot", {"ssh": "ssh"}).ssh == "ssh"
    spec = "gpuseat[bench] @ https://example.org/gpuseat-0.1.0-py3-none-any.whl"
    assert registry.validate_settings("skypilot", {"gpuseat_spec": spec}).gpuseat_spec == spec


def test_a_relative_wheelhouse_is_stored_as_the_folder_it_names_where_it_is_set(tmp_path, monkeypatch, capsys):
    """``wheelhouse=wheels/`` (docs/cloud.md, in the checkout) was stored as typed, so the agent shipped
    whatever ``wheels`` its own working folder held to every seat."""
    url = _course(tmp_path)
    monkeypatch.chdir(tmp_path)
    code = main(["engines", "settings", "skypilot", "wheelhouse=wheels/", "--course", "lab", "--db", url])
    assert code == 0, capsys.readouterr().err
    store = open_store(url)
    try:
        assert store.agents.engine_settings("lab", "skypilot")["wheelhouse"] == str(tmp_path / "wheels")
    finally:
        store.close()


def _image_root(out: Path) -> Path:
    """A cloud image's user database: root and Debian's admin user (in sudo), as ``useradd --prefix`` reads it."""
    etc = out / "root" / "etc"
    (out / "root" / "home" / "admin").mkdir(parents=True)
    files = {
        "passwd": "root:x:0:0:root:/root:/bin/bash\nadmin:x:1000:1000:Debian:/home/admin:/bin/bash\n",
        "group": "root:x:0:\nsudo:x:27:admin\nadmin:x:1000:\n",
        "shadow": "root:*:19000:0:99999:7:::\nadmin:*:19000:0:99999:7:::\n",
        "gshadow": "root:*::\nsudo:*::admin\nadmin:!::\n",
        "login.defs": "",
    }
    etc.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (etc / name).write_text(text, encoding="utf-8")
    return out / "root"


def _run_setup(root: Path, home: Path, seat: tasks.CloudSeat) -> subprocess.CompletedProcess[str]:
    script = tasks.setup_script(tasks.TaskOptions(), seat)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(home)}
    return subprocess.run(["bash", "-c", script], env={**env, "GPUSEAT_ROOT": str(root)}, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def _key(out: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", out / "k"], check=True)
    return (out / "k.pub").read_text().strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="useradd --prefix needs root (CI runs as root)")
def test_the_setup_never_hands_an_account_of_the_image_to_a_participant(tmp_path):
    root, home = _image_root(tmp_path), tmp_path / "sky-home"
    home.mkdir()
    offer = next(o for o in load_catalog().offers if o.id == "aws:g4dn.xlarge")
    key = _key(tmp_path)
    done = _run_setup(root, home, tasks.CloudSeat("lab", "cloud-1", offer, user="admin", ssh_key=key))
    assert done.returncode != 0
    assert "admin is an account of this image" in done.stderr and "another unix_user" in done.stderr
    assert not (root / "home" / "admin" / ".ssh" / "authorized_keys").exists()
    # a participant login gpuseat makes, and the same holder again on the next launch, are fine
    seat = tasks.CloudSeat("lab", "cloud-1", offer, user="ann", ssh_key=key)
    for _launch in range(2):
        done = _run_setup(root, home, seat)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (root / "home" / "ann" / ".ssh" / "authorized_keys").read_text().strip() == key


@pytest.mark.parametrize("path", ["/etc/hub-token\nimport os; os.system('id')", "relative/token", "/tok\x00en"])
def test_render_refuses_an_engine_token_file_that_would_become_hub_code(path):
    settings = HubSettings(course="lab", db_url="sqlite:////srv/gpuseat.db")
    with pytest.raises(InputError, match="engine_token_file"):
        render(settings, engine_token_file=path)


def test_render_writes_a_token_file_with_quotes_as_data(tmp_path):
    path = str(tmp_path / 'it\'s "the" token')
    text = render(HubSettings(course="lab", db_url="sqlite:////srv/gpuseat.db"), engine_token_file=path)
    compile(text, "jupyterhub_config.py", "exec")
    assert f"with open({path!r}, encoding='utf-8') as _token:" in text
