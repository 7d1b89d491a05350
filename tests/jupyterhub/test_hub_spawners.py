"""The hook's effect on real spawner objects: KubeSpawner's pod manifest, DockerSpawner's Docker API call,
LocalProcessSpawner's environment. No cluster and no Docker engine: KubeSpawner builds its manifest
offline (a kube-config pointing nowhere is enough), and DockerSpawner talks to a loopback HTTP listener
that records the ``POST /containers/create`` body the Docker engine would receive.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

pytest.importorskip("jupyterhub")

from jupyterhub import orm
from jupyterhub.objects import Hub
from jupyterhub.user import User
from traitlets.config import Config

from gpuseat.jupyterhub.spawners import HOSTNAME_LABEL, Grant, apply, flavour, kube_resource, missing_for
from gpuseat.render.k8s import check_manifest

# Device UUIDs as an H100 in MIG mode reports them (tests/fixtures/nvidia_gpu_exporter__…h100-mig…).
MIG = Grant(
    seat="seat-03",
    kind="mig",
    device_uuid="MIG-8c9a5e4a-6a7c-5b0e-9d2f-0c6b9e1f2a33",
    host="gpu-node-2",
    profile="1g.10gb",
)
GPU = Grant(
    seat="seat-01", kind="gpu", device_uuid="GPU-4f1d6a52-9c0e-2d5b-8a41-7e3c2b1a9f08", host="gpu-node-1", profile=None
)
#: hosts gpuseat's host rule takes that no node can be selected by (kubernetes.io/hostname is a lower-case name)
BAD_NODES = ("2001:db8::5", "GPU-Node-1")

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
users: [{name: none, user: {token: unused}}]
"""


@pytest.fixture
def make_spawner(tmp_path, monkeypatch):
    """Spawners created the way the hub creates them: a jupyterhub User from its ORM, with config."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    db = orm.new_session_factory("sqlite://")()

    def make(spawner_class, name="alice", config=None):
        orm_user = orm.User(name=name)
        db.add(orm_user)
        db.commit()
        user = User(
            orm_user, {"spawner_class": spawner_class, "hub": Hub(), "config": config or Config(), "db": db}, db=db
        )
        return user.spawner

    yield make
    db.close()


def _in_loop(fn):
    """Run ``fn`` inside an event loop (KubeSpawner makes its API client in ``__init__``)."""

    async def run():
        return fn()

    return asyncio.run(run())


def _pod(spawner) -> dict:
    from kubernetes_asyncio.client import ApiClient

    async def build():
        manifest = await spawner.get_pod_manifest()
        return ApiClient().sanitize_for_serialization(manifest)

    return asyncio.run(build())


def _validate_strict(doc: dict, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(doc))
    cli = Path(sys.executable).with_name("kubernetes-validate")
    return subprocess.run([str(cli), "--strict", "--quiet", str(path)], capture_output=True, text=True, timeout=120)


def test_kubespawner_pod_requests_the_mig_resource_on_the_seats_node(make_spawner, tmp_path):
    from kubespawner import KubeSpawner

    config = Config()
    # an admin default that would hand out four whole GPUs and pin another node: both must be replaced
    config.KubeSpawner.extra_resource_limits = {"nvidia.com/gpu": "4"}
    config.KubeSpawner.node_selector = {HOSTNAME_LABEL: "other-node", "pool": "gpu"}
    spawner = _in_loop(lambda: make_spawner(KubeSpawner, config=config))
    assert flavour(spawner) == "kubernetes"
    apply(spawner, MIG, mig_strategy="mixed")
    doc = _pod(spawner)
    container = doc["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    assert doc["spec"]["nodeSelector"] == {HOSTNAME_LABEL: "gpu-node-2", "pool": "gpu"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPUSEAT_SEAT"] == "seat-03"
    assert "CUDA_VISIBLE_DEVICES" not in env  # on Kubernetes the device plugin picks the device
    assert check_manifest(doc) == []
    result = _validate_strict(doc, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    # the negative control: the same validator rejects an unknown field under --strict
    doc["spec"]["containers"][0]["resources"]["limitz"] = {"nvidia.com/gpu": "1"}
    assert _validate_strict(doc, tmp_path).returncode != 0


def test_kubespawner_single_strategy_and_no_leak_between_spawners(make_spawner, tmp_path):
    from kubespawner import KubeSpawner

    config = Config()
    config.KubeSpawner.extra_resource_limits = {"example.com/fpga": "1"}
    alice = _in_loop(lambda: make_spawner(KubeSpawner, "alice", config))
    bob = _in_loop(lambda: make_spawner(KubeSpawner, "bob", config))
    apply(alice, MIG, mig_strategy="single")
    assert alice.extra_resource_limits == {"example.com/fpga": "1", "nvidia.com/gpu": "1"}
    # bob's spawner (same config object) did not get alice's GPU (planetary-computer-hub#66)
    assert bob.extra_resource_limits == {"example.com/fpga": "1"}
    apply(bob, GPU)
    apply(bob, MIG)  # a later spawn on another seat replaces the first seat's resource and node
    assert bob.extra_resource_limits == {"example.com/fpga": "1", "nvidia.com/mig-1g.10gb": "1"}
    assert bob.node_selector == {HOSTNAME_LABEL: "gpu-node-2"}
    doc = _pod(bob)
    assert _validate_strict(doc, tmp_path).returncode == 0
    assert kube_resource(MIG, "mixed") == "nvidia.com/mig-1g.10gb"
    assert kube_resource(GPU, "mixed") == "nvidia.com/gpu"


class _DockerRecorder(BaseHTTPRequestHandler):
    """Answers like the Docker engine to ``POST /containers/create`` and keeps the body it was sent."""

    bodies: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if "/containers/create" in self.path:
            type(self).bodies.append(body)
            self._answer(201, {"Id": "0123456789ab", "Warnings": []})
        else:
            self._answer(404, {"message": "not recorded"})

    def do_GET(self) -> None:
        if "/images/" in self.path and self.path.endswith("/json"):  # DockerSpawner reads the image's command
            self._answer(200, {"Config": {"Cmd": ["start-notebook.py"], "Entrypoint": ["tini", "-g", "--"]}})
        else:
            self._answer(404, {"message": "not recorded"})

    def _answer(self, code: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def docker_api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DockerRecorder)
    _DockerRecorder.bodies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{server.server_address[1]}", _DockerRecorder.bodies
    server.shutdown()
    server.server_close()


def test_dockerspawner_asks_docker_for_exactly_the_seats_device(make_spawner, docker_api):
    from dockerspawner import DockerSpawner

    base_url, bodies = docker_api
    config = Config()
    config.DockerSpawner.client_kwargs = {"base_url": base_url, "version": "1.44"}
    # the admin's own host config (shared memory for PyTorch) survives; their "all GPUs" request does not
    config.DockerSpawner.extra_host_config = {
        "shm_size": "1g",
        "device_requests": [{"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}],
    }
    DockerSpawner._client = None  # the class keeps one client: make it ours
    try:
        spawner = make_spawner(DockerSpawner, config=config)
        assert flavour(spawner) == "docker"
        apply(spawner, MIG)
        asyncio.run(spawner.create_object())
    finally:
        DockerSpawner._client = None
    (body,) = bodies
    host = body["HostConfig"]
    assert host["DeviceRequests"] == [
        {"Driver": "nvidia", "Count": 0, "DeviceIDs": [MIG.device_uuid], "Capabilities": [["gpu"]], "Options": {}}
    ]
    assert host["ShmSize"] == 1024**3
    env = dict(item.split("=", 1) for item in body["Env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == MIG.device_uuid
    assert env["GPUSEAT_SEAT"] == "seat-03"


def test_dockerspawner_callable_host_config_is_wrapped_once(make_spawner):
    from dockerspawner import DockerSpawner

    def site_config(spawner):
        return {"shm_size": "2g"}

    config = Config()
    config.DockerSpawner.extra_host_config = site_config
    spawner = make_spawner(DockerSpawner, config=config)
    apply(spawner, GPU)
    apply(spawner, MIG)
    assert spawner.extra_host_config.gpuseat_original is site_config
    value = asyncio.run(spawner.extra_host_config(spawner))
    assert value == {
        "shm_size": "2g",
        "device_requests": [{"driver": "nvidia", "device_ids": [MIG.device_uuid], "capabilities": [["gpu"]]}],
    }


def test_local_spawner_environment(make_spawner):
    from jupyterhub.spawner import LocalProcessSpawner, SimpleLocalProcessSpawner

    config = Config()
    config.Spawner.environment = {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "SITE": "x"}
    # LocalProcessSpawner runs the server as the Unix user of the same name: use one that exists here
    for cls, name in ((LocalProcessSpawner, "root"), (SimpleLocalProcessSpawner, "alice")):
        spawner = make_spawner(cls, name=name, config=config)
        assert flavour(spawner) == "local"
        apply(spawner, GPU)
        env = spawner.get_env()
        assert env["CUDA_VISIBLE_DEVICES"] == GPU.device_uuid
        assert env["GPUSEAT_SEAT"] == "seat-01"
        assert env["SITE"] == "x"
    assert config.Spawner.environment["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"  # the shared config is untouched


def test_what_a_seat_lacks():
    assert missing_for(Grant("s", "gpu", None, "h", None), "local") == "seat s has no device UUID yet"
    assert missing_for(Grant("s", "gpu", None, "h", None), "kubernetes") is None
    assert "JupyterHub cannot start" in (missing_for(Grant("s", "vm", "GPU-1", "h", None), "local") or "")
    assert "no profile" in (missing_for(Grant("s", "mig", "MIG-1", "h", None), "kubernetes") or "")
    for host in BAD_NODES:  # a host that can name no node: refused on Kubernetes only (ssh and Docker take it)
        assert "cannot be its Kubernetes node" in (missing_for(Grant("s", "gpu", None, host, None), "kubernetes") or "")
        assert missing_for(Grant("s", "gpu", "GPU-1", host, None), "local") is None


def test_a_profile_the_participant_picks_never_replaces_the_seats_gpu_or_node(make_spawner):
    """KubeSpawner loads the chosen profile's ``kubespawner_override`` in ``start()``, after the pre-spawn
    hook: a "4 GPUs" profile replaced the seat's MIG slice and node (JupyterHub: run_pre_spawn_hook, then
    spawner.start(), whose _start calls load_user_options first)."""
    from kubespawner import KubeSpawner

    config = Config()
    config.KubeSpawner.profile_list = [
        {"display_name": "Small", "slug": "small", "default": True},
        {
            "display_name": "Big GPU box",
            "slug": "big",
            "kubespawner_override": {
                "extra_resource_limits": {"nvidia.com/gpu": "4"},
                "extra_resource_guarantees": {"nvidia.com/gpu": "4"},
                "node_selector": {HOSTNAME_LABEL: "other-node"},
                "extra_container_config": {"resources": {"limits": {"nvidia.com/gpu": "2", "memory": "8Gi"}}},
                "environment": {"GPUSEAT_SEAT": "seat-99", "NVIDIA_VISIBLE_DEVICES": "all", "TEAM": "x"},
            },
        },
    ]
    spawner = _in_loop(lambda: make_spawner(KubeSpawner, config=config))
    spawner.user_options = {"profile": "big"}
    for _spawn in range(2):  # the spawner object lives on: the second spawn must not stack wrappers
        apply(spawner, MIG, mig_strategy="mixed")
        asyncio.run(spawner.load_user_options())  # what KubeSpawner._start does first
        doc = _pod(spawner)
        container = doc["spec"]["containers"][0]
        assert container["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1", "memory": "8Gi"}
        assert "nvidia.com/gpu" not in (container["resources"].get("requests") or {})
        assert doc["spec"]["nodeSelector"] == {HOSTNAME_LABEL: "gpu-node-2"}
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["GPUSEAT_SEAT"] == "seat-03" and env["TEAM"] == "x"
        assert "NVIDIA_VISIBLE_DEVICES" not in env  # =all would open every GPU of the node to the container
    assert not hasattr(spawner.load_user_options.gpuseat_original, "gpuseat_original")


def test_kubespawner_refuses_a_seat_whose_host_can_name_no_node_with_the_reason(make_spawner, tmp_path):
    """The seat's host is the pod's ``kubernetes.io/hostname`` selector: an IPv6 address or an upper-case name
    (node names are lower case, the selector case-sensitive) matched no node, and the pod stayed Pending with
    no reason given. The start is refused with the 503 and the reason; a node's name starts as before."""
    from hubcourse import make_course, seat_specs
    from kubespawner import KubeSpawner
    from tornado.web import HTTPError

    from gpuseat.jupyterhub import HubSettings, SeatHooks

    url = f"sqlite:///{tmp_path / 'course.db'}"
    store = make_course(url, tmp_path, key="lab", people=["ada", "ben", "cy"], seats=1, assign=1)  # ada: gpu-node-1
    far = [
        {**s, "key": f"far-{n}", "host": h}
        for n, (s, h) in enumerate(zip(seat_specs(3)[:2], BAD_NODES, strict=True), 1)
    ]
    store.seats.add_seats("lab", far)
    store.seats.assign("lab", "ben", "far-1")
    store.seats.assign("lab", "cy", "far-2")
    hooks = SeatHooks(HubSettings(course="lab", db_url=url, contact="the organizer"))
    for person, seat, host, flaw in [("ben", "far-1", BAD_NODES[0], "IPv6"), ("cy", "far-2", BAD_NODES[1], "upper")]:
        spawner = _in_loop(lambda person=person: make_spawner(KubeSpawner, person))
        with pytest.raises(HTTPError) as caught:
            asyncio.run(hooks.pre_spawn_hook(spawner))
        said = caught.value.log_message
        assert caught.value.status_code == 503 and f"seat {seat}'s host {host!r} cannot be its Kubernetes node" in said
        assert flaw in said and "`kubectl get nodes`" in said and said.endswith("Ask the organizer."), said
        assert store.seats.get_seat("lab", seat).state == "planned"  # not taken by a server that cannot run
        assert HOSTNAME_LABEL not in spawner.node_selector
    ada = _in_loop(lambda: make_spawner(KubeSpawner, "ada"))
    asyncio.run(hooks.pre_spawn_hook(ada))
    assert _pod(ada)["spec"]["nodeSelector"] == {HOSTNAME_LABEL: "gpu-node-1"}
    assert store.seats.get_seat("lab", "mig-1").state == "requested"
    store.close()
