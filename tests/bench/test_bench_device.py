"""Parsing --device and naming devices."""

from __future__ import annotations

import pytest

from gpuseat.bench.device import cpu_model, parse_device, split_mig_name
from gpuseat.errors import InputError


@pytest.mark.parametrize(
    ("spec", "kind", "index", "uuid"),
    [
        ("cpu", "cpu", 0, None),
        ("CUDA", "cuda", 0, None),
        ("auto", "auto", 0, None),
        ("cuda:3", "cuda", 3, None),
        ("MIG-1d2c3b4a-0000-1111-2222-333344445555", "cuda", 0, "MIG-1d2c3b4a-0000-1111-2222-333344445555"),
        ("GPU-8a7b6c5d-0000-1111-2222-333344445555", "cuda", 0, "GPU-8a7b6c5d-0000-1111-2222-333344445555"),
        # R450–R460's MIG form, the only one with '/' (gpuseat.core.devices)
        (
            "MIG-GPU-8a7b6c5d-0000-1111-2222-333344445555/1/0",
            "cuda",
            0,
            "MIG-GPU-8a7b6c5d-0000-1111-2222-333344445555/1/0",
        ),
    ],
)
def test_parse_device(spec, kind, index, uuid):
    choice = parse_device(spec)
    assert (choice.kind, choice.index, choice.uuid) == (kind, index, uuid)


# the device rule of gpuseat.core.devices: '/' only in MIG-GPU-<uuid>/<gi>/<ci>, one ASCII token
@pytest.mark.parametrize(
    "spec",
    ["gpu", "cuda:", "cuda:-1", "cuda:x", "tpu:0", "", "MIG", "GPU-8a7b6c5d/1", "MIG-1d2c3b4a/gi1", "GPU-" + "a" * 91],
)
def test_unknown_device_is_input_error(spec):
    with pytest.raises(InputError) as err:
        parse_device(spec)
    assert err.value.where == "--device"
    assert "cuda:N" in (err.value.fix or "")


def test_mig_profile_is_split_from_the_cuda_name():
    assert split_mig_name("NVIDIA H200 MIG 1g.18gb") == ("NVIDIA H200", "1g.18gb")
    assert split_mig_name("NVIDIA A100-SXM4-40GB MIG 3g.20gb") == ("NVIDIA A100-SXM4-40GB", "3g.20gb")
    assert split_mig_name("NVIDIA H200") == ("NVIDIA H200", None)


def test_cpu_model_reads_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7R13 Processor\n")
    assert cpu_model(info) == "AMD EPYC 7R13 Processor"
    assert cpu_model(tmp_path / "missing")  # falls back to the platform's name, never empty
