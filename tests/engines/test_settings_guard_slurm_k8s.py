"""Slurm and Kubernetes engine settings that the agent (root, or an admin with the cluster's credentials)
acts on: each row is a value an organizer could store with ``gpuseat engines settings ENGINE K=V`` that
would make the agent run a program of their choosing, rewrite a file that is not gpuseat's, or reach a
namespace the cluster keeps for itself. Each goes through the real CLI into a real SQLite store and must
be refused with one message naming the setting (exit 2), storing nothing; the values gpuseat documents
still pass. The plan-time guards (a file gpuseat did not write, a kubeconfig or slurm.conf that another
user can change, a namespace that is not the course's) are in tests/slurm/test_engine_plan.py and
tests/conformance/test_k8s.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuseat.store import CourseStore, open_store

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[CourseStore, str]]:
    """A real SQLite store with the 2016 course (key ``demo``)."""
    url = f"sqlite:///{tmp_path / 'course.db'}"
    s = open_store(url, create=True)
    s.courses.create_course(EXAMPLES / "course-2016.toml", key="demo")
    yield s, url
    s.close()


BAD = [
    # kubectl is run by the agent with the cluster's credentials: any program named here ran instead
    ("kubernetes", "kubectl=sh", "kubernetes setting kubectl"),
    ("kubernetes", "kubectl=/tmp/evil", "must be kubectl"),
    ("kubernetes", "kubectl=python3", "must be kubectl"),
    ("kubernetes", "kubectl=./kubectl", "must be kubectl"),
    ("kubernetes", "kubectl=/home/org/../../tmp/kubectl", "must be kubectl"),
    # the prefix makes <prefix>-<login>: kube + a login "system" is kube-system, where edit reaches every secret
    ("kubernetes", "namespace=kube", "kube"),
    ("kubernetes", "namespace=kube-node", "kube"),
    # partitions_conf is rewritten as root: /etc/shadow came back 0644 with a partition line in it
    ("slurm", "partitions_conf=/etc/shadow", "partitions_conf"),
    ("slurm", "partitions_conf=/etc/environment", ".conf"),
    ("slurm", "partitions_conf=/etc/slurm/../../root/x.conf", "'..'"),
    ("slurm", "conf_dir=/etc/slurm/../cron.d", "'..'"),
]


@pytest.mark.parametrize(("engine", "value", "message"), BAD, ids=[f"{e}-{v}" for e, v, _ in BAD])
def test_a_setting_that_reaches_beyond_the_course_is_refused(db, cli, engine: str, value: str, message: str) -> None:
    store, url = db
    r = cli("engines", "settings", engine, value, "--course", "demo", "--db", url)
    assert r.code == 2, (r.code, r.out, r.err)
    assert message in r.err and "Traceback" not in r.err, r.err
    assert f"{engine} setting {value.split('=')[0]}" in r.err, r.err  # names the setting
    assert store.agents.engine_settings("demo", engine) == {}  # nothing stored


GOOD = [
    ("kubernetes", "kubectl=kubectl"),
    ("kubernetes", "kubectl=/usr/local/bin/kubectl"),
    ("kubernetes", "kubectl=/opt/k8s/bin/kubectl-1.30"),
    ("kubernetes", "namespace=gpuseat"),
    ("kubernetes", "namespace=lab-kubernetes"),
    ("slurm", "partitions_conf=/etc/slurm/gpuseat-partitions.conf"),
    ("slurm", "conf_dir=/etc/slurm"),
]


@pytest.mark.parametrize(("engine", "value"), GOOD, ids=[f"{e}-{v}" for e, v in GOOD])
def test_the_documented_values_still_pass(db, cli, engine: str, value: str) -> None:
    store, url = db
    r = cli("engines", "settings", engine, value, "--course", "demo", "--db", url)
    assert r.code == 0, r.err
    key, _, want = value.partition("=")
    assert store.agents.engine_settings("demo", engine).get(key, want) == want  # a default is not stored


def test_a_file_owned_by_a_person_is_not_trusted_but_a_system_accounts_is(tmp_path: Path) -> None:
    # an organizer's own kubeconfig (exec: plugin) or slurm.conf (PluginDir=) would run their program as the agent
    import os

    from gpuseat.engines.setting_types import trusted_file
    from gpuseat.errors import InputError

    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    folder = tmp_path / "conf"
    folder.mkdir(mode=0o755)
    conf = folder / "kubeconfig"
    conf.write_text("apiVersion: v1\n")
    conf.chmod(0o600)
    trusted_file(conf, setting="kubeconfig")  # root's, 0600: fine
    os.chown(conf, 4242, 4242)
    with pytest.raises(InputError, match="can be changed by another user"):
        trusted_file(conf, setting="kubeconfig")
    os.chown(conf, 64, 64)  # a system account (as the slurm user owning slurm.conf)
    trusted_file(conf, setting="kubeconfig")
    os.chown(folder, 4242, 4242)  # the file could be swapped in a person's folder
    with pytest.raises(InputError, match="its folder"):
        trusted_file(conf, setting="kubeconfig")
