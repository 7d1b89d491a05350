"""The host engine reads a device file's ACL from its ``system.posix_acl_access`` attribute, not with a getfacl
process per file (an agent's pass reads every seat's files): what it reads is what getfacl lists, for a file
without an ACL, with named users and a mask, with a named group, and after a chmod that moves the mask."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpuseat.engines.host.machine import Machine
from gpuseat.engines.runner import Runner


@pytest.mark.skipif(shutil.which("setfacl") is None or shutil.which("getfacl") is None, reason="needs the acl tools")
def test_the_acl_read_from_the_attribute_is_what_getfacl_lists(tmp_path: Path) -> None:
    f = tmp_path / "nvidia-cap7"
    f.write_text("")
    runner = Runner()
    machine = Machine(runner)
    states = [
        ["chmod", "0640"],
        ["setfacl", "--set", "u::rw,g::-,o::-,m::rw,u:1001:rw,u:1002:rw"],
        ["setfacl", "--modify", "g:4:r,u:1003:r"],
        ["chmod", "0704"],  # the mask follows the group bits
        ["setfacl", "--remove-all"],
    ]
    for change in states:
        subprocess.run([*change, str(f)], check=True)
        runner.log.clear()
        read = machine.acl_lines(f)
        assert not runner.log, "a getfacl ran"
        assert read == machine._getfacl(f), change
    assert machine.acl_lines(f) == {"user::rwx", "group::---", "other::r--"}
