"""Which checks run: the ones that matter for ``--for TARGET``, or for what each GPU is set up to do."""

from __future__ import annotations

from gpuseat.catalog.doctor import DoctorCatalog
from gpuseat.doctor.checks import GPU_CHECKS, HOST_CHECKS, TARGETS, Context, Target
from gpuseat.doctor.model import GpuFacts, HostFacts
from gpuseat.doctor.report import NO_GPU, Check, Report


def gpu_targets(gpu: GpuFacts, explicit: Target | None) -> frozenset[Target]:
    """The chosen target, or what the GPU's binding says it is for.

    vfio-pci, nouveau or no driver → passthrough; nvidia → containers, plus MIG on MIG-capable models
    and vGPU where mdev types or SR-IOV VFs show a vGPU Manager.
    """
    if explicit is not None:
        return frozenset({explicit})
    if gpu.driver != "nvidia":
        return frozenset({"passthrough"})
    targets: set[Target] = {"containers"}
    if gpu.model is not None and gpu.model.mig:
        targets.add("mig")
    if gpu.mdev_types or gpu.sriov_numvfs or gpu.vf_vgpu_types:
        targets.add("vgpu")
    return frozenset(targets)


def run_checks(facts: HostFacts, catalog: DoctorCatalog, explicit: Target | None = None) -> Report:
    """Every check that applies, host checks first, then each GPU's; without GPUs the GPU checks ``skip``."""
    per_gpu = {gpu.bdf: gpu_targets(gpu, explicit) for gpu in facts.gpus}
    if explicit is not None:
        wanted: frozenset[Target] = frozenset({explicit})
    elif facts.gpus:
        wanted = frozenset().union(*per_gpu.values())
    else:
        wanted = frozenset(TARGETS)
    ctx = Context(catalog=catalog, explicit=explicit, has_gpus=bool(facts.gpus))
    checks = [fn(facts, ctx) for fn, targets in HOST_CHECKS.values() if targets & wanted]
    if not facts.gpus:
        evidence = f"{NO_GPU} (vendor 0x10de, class 0x03xxxx) under /sys/bus/pci/devices"
        checks += [Check(cid, "skip", None, evidence) for cid, (_, targets) in GPU_CHECKS.items() if targets & wanted]
    for gpu in facts.gpus:
        mine = per_gpu[gpu.bdf]
        checks += [fn(facts, gpu, mine, ctx) for fn, targets in GPU_CHECKS.values() if targets & mine]
    return Report(gpus=tuple((gpu.bdf, gpu.name) for gpu in facts.gpus), checks=tuple(checks))
