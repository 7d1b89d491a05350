"""CLI for ``gpuseat carve``: split one server into seats and render each engine's config."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpuseat.cli._output import FORMAT_OPTION, Format

if TYPE_CHECKING:
    from gpuseat.core.carve import Layout
    from gpuseat.core.inventory import Server


class ModeChoice(StrEnum):
    """``--mode`` values."""

    auto = "auto"
    passthrough = "passthrough"
    vgpu = "vgpu"
    mig = "mig"
    timeslice = "timeslice"
    mps = "mps"


class GuestChoice(StrEnum):
    """``--guest`` values."""

    linux = "linux"
    windows = "windows"


def _server(server_file: Path | None, gpu: str | None, nvidia_smi: Path | None) -> Server | None:
    from gpuseat.core.inventory import server_from_gpu_flag, server_from_nvidia_smi, server_from_toml
    from gpuseat.errors import InputError
    from gpuseat.files import read_text, read_toml

    given = [x for x in (server_file, gpu, nvidia_smi) if x is not None]
    if len(given) > 1:
        raise InputError("more than one server description", where="gpuseat carve",
                         fix="give one of SERVER (a TOML inventory), --gpu or --from-nvidia-smi")
    if server_file is not None:
        return server_from_toml(read_toml(server_file), where=str(server_file))
    if gpu is not None:
        return server_from_gpu_flag(gpu)
    if nvidia_smi is not None:
        return server_from_nvidia_smi(read_text(nvidia_smi), where=str(nvidia_smi))
    return None


def _from_mig_parted(path: Path, config: str | None, server: Server | None) -> tuple[Server, dict]:
    from gpuseat.catalog.partitions import partition_catalog
    from gpuseat.core.inventory import (
        mig_parted_assignment,
        model_for_device_ids,
        parse_mig_parted,
        server_from_gpu_flag,
    )
    from gpuseat.errors import InputError
    from gpuseat.files import read_text

    name, entries = parse_mig_parted(read_text(path), where=str(path), config=config)
    if server is None:
        model = next((m for e in entries if (m := model_for_device_ids(e.device_filter, partition_catalog()))), None)
        indices = [i for e in entries if e.devices != "all" for i in e.devices]
        if model is None or not indices:
            raise InputError(f"config '{name}' does not say which GPUs (device-filter and device indices)",
                             where=str(path), fix="add --gpu MODEL:COUNT")
        server = server_from_gpu_flag(f"{model.id}:{max(indices) + 1}")
    return server, mig_parted_assignment(entries, chips=len(server.chips), where=str(path))


def _print_layout(layout: Layout, fmt: Format) -> None:
    from gpuseat.cli._output import print_csv, print_json, print_table

    doc = layout.to_json()
    rows = [
        {**s, "placement": f"{s['placement']['start']}:{s['placement']['size']}" if s["placement"] else None}
        for s in doc["seats"]
    ]
    columns = ["seat", "gpu_index", "pci", "mode", "profile", "placement", "memory_gb"]
    if fmt is Format.json:
        print_json(doc)
    elif fmt is Format.csv:
        print_csv(rows, columns)
    else:
        print_table(rows, columns, title=f"{len(rows)} seats on {layout.server.name} ({layout.mode})")
        if doc["rejected"]:
            print_table(doc["rejected"], ["mode", "profile", "reason"], title="Not chosen")


def _emit(layout: Layout, engine_name: str, out: Path | None) -> None:
    from gpuseat.errors import InputError
    from gpuseat.render.base import render

    artifacts = render(layout, engine_name)
    if out is None:
        for art in artifacts:
            if len(artifacts) > 1:
                print(f"==> {art.path} <==")
            print(art.text, end="")
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        for art in artifacts:
            (out / art.path).write_text(art.text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror}", where=str(out), fix="choose a writable --out") from None
    for art in artifacts:
        print(out / art.path)


def register(app: typer.Typer) -> None:
    """Add ``gpuseat carve``."""

    @app.command("carve")
    def carve_command(
        server_file: Path | None = typer.Argument(None, metavar="[SERVER]", help="TOML server inventory."),
        gpu: str | None = typer.Option(None, "--gpu", help="Inline server: MODEL[:BOARDS], e.g. M60:2."),
        from_nvidia_smi: Path | None = typer.Option(None, "--from-nvidia-smi", help="An `nvidia-smi -q -x` capture."),
        from_mig_parted: Path | None = typer.Option(None, "--from-mig-parted", help="A mig-parted config to read."),
        config: str | None = typer.Option(None, "--config", help="Config name inside --from-mig-parted."),
        seats: int | None = typer.Option(None, "--seats", min=1, help="Seats wanted (default: as many as fit)."),
        min_mem: float = typer.Option(0.0, "--min-mem", min=0, help="GPU memory per seat, GB."),
        mode: ModeChoice = typer.Option(ModeChoice.auto, "--mode", help="Partition mode; auto = most isolated."),
        profile: list[str] = typer.Option([], "--profile", help="MIG/vGPU profiles, one per seat (comma list)."),
        no_cuda: bool = typer.Option(False, "--no-cuda", help="Seats do not need CUDA (desktop/streaming)."),
        guest: GuestChoice = typer.Option(GuestChoice.linux, "--guest", help="Guest OS; windows implies --no-cuda."),
        render_engine: str | None = typer.Option(None, "--render", help="Engine: mig-parted, nvidia-smi, libvirt, "
                                                 "proxmox, xen, vsphere, k8s, jupyterhub."),
        out: Path | None = typer.Option(None, "--out", help="Write rendered files here instead of stdout."),
        fmt: Format = FORMAT_OPTION,
    ) -> None:
        """Split a server into seats by passthrough, vGPU, MIG, time-slicing or MPS; explain the rest."""
        from gpuseat.core.carve import CarveRequest, carve
        from gpuseat.core.needs import SeatNeed
        from gpuseat.errors import InputError

        server = _server(server_file, gpu, from_nvidia_smi)
        by_chip = None
        if from_mig_parted is not None:
            server, by_chip = _from_mig_parted(from_mig_parted, config, server)
        if server is None:
            raise InputError("no server given", where="gpuseat carve",
                             fix="give SERVER (TOML inventory), --gpu MODEL[:BOARDS] or --from-nvidia-smi FILE")
        need = SeatNeed(min_gpu_memory_gb=min_mem, cuda=not no_cuda and guest is GuestChoice.linux,
                        guest_os=guest.value, isolation="shared")
        names = tuple(p.strip() for item in profile for p in item.split(",") if p.strip())
        request = CarveRequest(seats=seats, mode=mode.value, need=need, profiles=names, by_chip=by_chip)
        layout = carve(server, request)
        if render_engine is None:
            _print_layout(layout, fmt)
        else:
            _emit(layout, render_engine, out)
