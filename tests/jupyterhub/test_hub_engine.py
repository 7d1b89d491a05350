"""What the JupyterHub engine's probe concludes from what it printed in the participant's kernel, with
``nvidia-smi -L`` lines from real captures (tests/fixtures) and the ``CUDA_VISIBLE_DEVICES`` a spawner sets."""

from __future__ import annotations

import pytest
from hubcourse import FIXTURES, mig_devices, section

from gpuseat.core.readiness import judge
from gpuseat.engines import registry
from gpuseat.engines.jupyterhub.engine import JupyterHubSettings, kernel_devices, read_token
from gpuseat.errors import InputError


def printed(cvd: str | None, smi: str | None) -> str:
    lines = [f"GPUSEAT-CVD={cvd if cvd is not None else '<unset>'}"]
    lines += [f"GPUSEAT-SMI={ln}" for ln in smi.splitlines()] if smi is not None else ["GPUSEAT-SMI-MISSING"]
    return "\n".join(lines) + "\n"


LISTING = section("capabilities :: list (-L)")
MIGS = [uuid for uuid, _ in mig_devices()]


def test_the_driver_list_narrowed_to_the_spawners_choice_is_one_device():
    visible, how = kernel_devices(printed(MIGS[2], LISTING))
    assert visible == (MIGS[2],) and "nvidia-smi -L" in how
    assert judge(MIGS[2], visible) == ("ready", None)
    assert judge(MIGS[1], visible)[0] == "broken"


def test_without_a_choice_every_mig_device_is_visible_and_that_is_broken():
    visible, _ = kernel_devices(printed(None, LISTING))
    assert visible == tuple(MIGS) and len(MIGS) > 1
    state, why = judge(MIGS[0], visible)
    assert state == "broken" and f"{len(MIGS)} GPUs visible" in (why or "")


def test_a_whole_gpu_beside_a_mig_gpu_counts_too():
    """Per GPU its MIG devices, else the GPU (the one reading of nvidia-smi -L, core.delivery.parse_probe):
    a server that sees one MIG slice of GPU 0 and all of GPU 1 sees two devices. The engine once kept only
    the MIG devices when any GPU had them, and called that server's seat ready."""
    mig_gpu = "\n".join(LISTING.splitlines()[:2])  # GPU 0 and its first MIG device, as the capture prints them
    # a second board from another real listing (the captures' own UUIDs are all zeros, so one with its own)
    pro = (FIXTURES / "rtxpro6000__L.txt").read_text()
    whole = next(ln for ln in pro.splitlines() if ln.startswith("GPU 0: ")).replace("GPU 0: ", "GPU 1: ", 1)
    visible, _ = kernel_devices(printed(None, f"{mig_gpu}\n{whole}"))
    assert visible == (MIGS[0], whole.rpartition("UUID: ")[2].rstrip(")"))
    assert judge(MIGS[0], visible)[0] == "broken"


def test_a_choice_the_driver_does_not_list_is_no_gpu():
    visible, _ = kernel_devices(printed("MIG-ffffffff-0000-0000-0000-000000000000", LISTING))
    assert visible == () and judge(None, visible) == ("broken", "no GPU visible to the participant")


def test_without_a_driver_only_the_spawners_choice_tells_and_the_evidence_says_so():
    visible, how = kernel_devices(printed(MIGS[0], None))
    assert visible == (MIGS[0],) and "no nvidia-smi" in how
    assert kernel_devices(printed(None, None))[0] == ()
    assert kernel_devices(printed("0,1", None))[0] == ()  # indexes name no seat


@pytest.mark.parametrize("url", ["ftp://hub", "hub.example.org", "http://hub example"])
def test_bad_hub_urls_are_refused_with_one_clear_message(url):
    with pytest.raises(InputError, match=r"jupyterhub setting hub_url: .*http"):
        registry.validate_settings("jupyterhub", {"hub_url": url})


def test_the_token_itself_is_never_a_setting():
    with pytest.raises(InputError, match="jupyterhub setting token"):
        registry.validate_settings("jupyterhub", {"hub_url": "https://hub", "token": "secret"})


def test_no_token_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("JUPYTERHUB_API_TOKEN", raising=False)
    with pytest.raises(InputError, match="JUPYTERHUB_API_TOKEN is not set"):
        read_token(JupyterHubSettings(hub_url="http://127.0.0.1:1"))
    monkeypatch.setenv("MY_HUB_TOKEN", "abc123")
    assert read_token(JupyterHubSettings(token_env="MY_HUB_TOKEN")) == "abc123"


def test_a_token_file_others_may_read_is_refused(tmp_path):
    path = tmp_path / "hub-token"
    path.write_text("abc123\n")
    path.chmod(0o644)
    settings = JupyterHubSettings(token_file=str(path))
    with pytest.raises(InputError, match="may be read by others") as info:
        read_token(settings)
    assert info.value.fix == f"chmod 600 {path}"
    path.chmod(0o600)
    assert read_token(settings) == "abc123"
    with pytest.raises(InputError, match="cannot read the hub token file"):
        read_token(JupyterHubSettings(token_file=str(tmp_path / "missing-token")))


def test_the_settings_table_shows_every_setting_and_no_token(cli, tmp_path):
    from hubcourse import make_course

    url = f"sqlite:///{tmp_path / 'course.db'}"
    make_course(url, tmp_path, key="lab", people=["ada"], seats=1).close()
    r = cli("engines", "settings", "jupyterhub", "hub_url=https://hub.example.edu/prefix",
            "token_file=/etc/gpuseat/hub-token", "--course", "lab", "--db", url)  # fmt: skip
    assert r.code == 0, r.err
    for name in JupyterHubSettings.model_fields:
        assert name in r.out
    assert "https://hub.example.edu/prefix" in r.out and "token_file" in r.out
    bad = cli("engines", "settings", "jupyterhub", "hub_url=ftp://hub", "--course", "lab", "--db", url)
    assert bad.code == 2 and "jupyterhub setting hub_url" in bad.err and "Traceback" not in bad.err
