"""The NoCloud seed: cloud-init's own schema checker accepts the user-data, the ISO reads back as ``cidata``."""

from __future__ import annotations

import io
import subprocess

import pycdlib
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuseat.engines.libvirt.machine import VmOptions, VmSeat, guest
from gpuseat.engines.libvirt.seed import GECOS, REVOKE_SCRIPT, Guest, key_fingerprint, meta_data, seed_iso, user_data
from gpuseat.errors import InputError

from .conftest import SSH_KEYS, layout, public_key, require_tool


def a_guest(**kw) -> Guest:
    base = dict(hostname="seat-01", instance_id="gpuseat-demo-seat-01-0", user="alice", ssh_keys=(public_key("alice"),))
    return Guest(**{**base, **kw})


def schema_check(tmp_path, text: str) -> subprocess.CompletedProcess:
    path = tmp_path / "user-data"
    path.write_text(text)
    return subprocess.run(
        [require_tool("cloud-init"), "schema", "--config-file", str(path)], capture_output=True, text=True, timeout=120
    )


def test_user_data_passes_cloud_inits_schema(tmp_path):
    text = user_data(
        a_guest(
            ssh_keys=(public_key("alice"), public_key("carol")),
            packages=("nvidia-driver", "nvidia-cuda-toolkit"),
            commands=("nvidia-smi -L",),
        )
    )
    proc = schema_check(tmp_path, text)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Valid schema" in proc.stdout or "Valid cloud-config" in proc.stdout
    doc = yaml.safe_load(text)
    assert doc["users"][0]["ssh_authorized_keys"] == [public_key("alice"), public_key("carol")]
    assert doc["hostname"] == "seat-01" and doc["packages"] == ["nvidia-driver", "nvidia-cuda-toolkit"]


def test_a_seat_nobody_holds_yet_gets_a_valid_seed_without_keys(tmp_path):
    text = user_data(a_guest(user="gpuseat", ssh_keys=()))
    proc = schema_check(tmp_path, text)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ssh_authorized_keys" not in yaml.safe_load(text)["users"][0]


def test_schema_checker_catches_a_broken_document(tmp_path):
    """The negative control: the same checker refuses a wrong type, so the test above can fail."""
    text = user_data(a_guest()).replace("ssh_pwauth: false", "ssh_pwauth: [1, 2]")
    assert schema_check(tmp_path, text).returncode != 0


def test_seed_iso_is_cidata_with_both_files():
    g = a_guest()
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(seed_iso(g)))
    try:
        assert iso.pvd.volume_identifier.decode().strip() == "cidata"
        for name, text in (("user-data", user_data(g)), ("meta-data", meta_data(g))):
            for kw in ({"rr_path": f"/{name}"}, {"joliet_path": f"/{name}"}):
                out = io.BytesIO()
                iso.get_file_from_iso_fp(out, **kw)
                assert out.getvalue().decode() == text
    finally:
        iso.close()
    assert yaml.safe_load(meta_data(g)) == {"instance-id": g.instance_id, "local-hostname": "seat-01"}


@pytest.mark.parametrize("who", ["alice", "bob", "carol"])
def test_fingerprint_matches_ssh_keygen(who):
    proc = subprocess.run(
        [require_tool("ssh-keygen"), "-lf", str(SSH_KEYS / f"{who}.pub")], capture_output=True, text=True, check=True
    )
    assert key_fingerprint(public_key(who)) == proc.stdout.split()[1]


@pytest.mark.parametrize(
    "key",
    [
        "",
        "ssh-ed25519",
        "ssh-dss AAAAB3NzaC1kc3M=",
        "ssh-ed25519 not-base64!",
        "ssh-rsa " + public_key("alice").split()[1],
        "ssh-ed25519 AAAA\nruncmd: [reboot]",
        public_key("alice") + "\n" + public_key("bob"),
    ],
)
def test_bad_keys_are_refused_by_name(key):
    with pytest.raises(InputError) as exc:
        user_data(a_guest(ssh_keys=(key,)))
    assert "seat-01: ssh key 1" in exc.value.message


@settings(max_examples=60, deadline=None)
@given(
    comment=st.text(st.characters(min_codepoint=32, blacklist_characters="\x7f"), max_size=40),
    # any command the course file's [vm] table accepts (one line, no control characters)
    command=st.text(st.characters(blacklist_categories=("Cc", "Zl", "Zp")), min_size=1, max_size=40).filter(str.strip),
)
def test_no_value_can_add_keys_to_user_data(comment, command):
    """Whatever a key comment or a course command holds, the document keeps exactly gpuseat's keys."""
    key = public_key("bob").split()
    text = user_data(a_guest(ssh_keys=(f"{key[0]} {key[1]} {comment}".strip(),), commands=(command,)))
    doc = yaml.safe_load(text)
    assert set(doc) == {"hostname", "preserve_hostname", "bootcmd", "users", "ssh_pwauth", "runcmd"}
    assert doc["runcmd"] == [command] and len(doc["users"]) == 1
    assert doc["bootcmd"] == [["cloud-init-per", "instance", "gpuseat-logins", "sh", "-c", REVOKE_SCRIPT,
                               "gpuseat-logins", "alice"]]  # fmt: skip


def test_a_new_seed_on_the_same_disk_takes_the_earlier_logins_and_keys_away():
    """cloud-init only adds users and keys: once per instance id, before it does, the seed expires every
    login an earlier seed made (its GECOS) and empties its own login's keys file; the login is data ($1)."""
    doc = yaml.safe_load(user_data(a_guest(user="ann2")))
    (cmd,) = doc["bootcmd"]
    assert cmd[:3] == ["cloud-init-per", "instance", "gpuseat-logins"] and cmd[-1] == "ann2"
    assert "ann2" not in cmd[5] and "'" not in cmd[5]
    assert doc["users"][0]["gecos"] == GECOS and f'"$gecos" = "{GECOS}"' in cmd[5]
    assert "usermod --expiredate 1" in cmd[5] and 'usermod --expiredate ""' in cmd[5]


def test_instance_id_changes_with_the_login_only():
    seat = layout("ibm-2xM60.toml", mode="passthrough").slices[0]
    opts = VmOptions()
    a = guest("demo", VmSeat("seat-01", seat, "alice", "alice", (public_key("alice"),)), opts)
    again = guest("demo", VmSeat("seat-01", seat, "alice", "alice", (public_key("alice"),)), opts)
    b = guest("demo", VmSeat("seat-01", seat, "bob", "bob", (public_key("bob"),)), opts)
    assert a.instance_id == again.instance_id != b.instance_id
    assert a.instance_id.startswith("gpuseat-demo-seat-01-")


@pytest.mark.parametrize("command", ["", "  ", "echo a\nreboot", "echo \x85", "echo \u2028"])
def test_course_file_refuses_multi_line_commands(command):
    from pydantic import ValidationError

    from gpuseat.core.course import VmGuest

    with pytest.raises(ValidationError, match="commands"):
        VmGuest(commands=(command,))
