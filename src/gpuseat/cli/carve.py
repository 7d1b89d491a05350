"""CLI for ``gpuseat carve``: parse flags, call :mod:`gpuseat.services.carving`, print."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpuseat.cli._options import changed
from gpuseat.cli._output import Format, FormatOption

if TYPE_CHECKING:
    from gpuseat.core.carve import Layout
    from gpuseat.core.inventory import Server
    from gpuseat.render.base import RenderOptions


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


def _print_layout(layout: Layout, fmt: Format) -> None:
    from rich.markup import escape

    from gpuseat.cli._output import print_csv, print_json, print_table

    doc = layout.to_dict()
    rows = [
        {**s, "placement": f"{s['placement']['start']}:{s['placement']['size']}" if s["placement"] else None}
        for s in doc["slices"]
    ]
    columns = ["name", "gpu_index", "pci", "mode", "profile", "placement", "memory_gb"]
    if fmt is Format.json:
        print_json(doc)
    elif fmt is Format.csv:
        print_csv(rows, columns)
    else:
        print_table(rows, columns, title=f"{len(rows)} seats on {escape(layout.server.name)} ({layout.mode})")
        if doc["alternatives"]:
            print_table(doc["alternatives"], ["mode", "profile", "slices", "memory_gb", "reason"], title="Alternatives")
        if doc["rejected"]:
            print_table(doc["rejected"], ["mode", "profile", "reason"], title="Not possible")
        for note in doc["notes"]:  # where the facts came from (driver tables or guesses, offered vGPU types)
            print(f"Note: {note}")


def register(app: typer.Typer) -> None:
    """Add ``gpuseat carve``."""

    @app.command("carve")
    def carve_command(
        server_file: Path | None = typer.Argument(None, metavar="[SERVER]", help="TOML server inventory."),
        layout_file: Path | None = typer.Argument(
            None, metavar="[LAYOUT]", help="With --assert: the planned layout (carve --format json)."
        ),
        gpu: str | None = typer.Option(None, "--gpu", help="Inline server: MODEL[:BOARDS], e.g. M60:2."),
        from_nvidia_smi: Path | None = typer.Option(
            None, "--from-nvidia-smi", help="An `nvidia-smi -q -x` (or plain `-q`) capture."
        ),
        from_probe: Path | None = typer.Option(
            None, "--from-probe", help="A `gpuseat probe` bundle: plan from the driver's own profile table."
        ),
        vgpu_backend: str = typer.Option(
            "auto", "--vgpu-backend", help="auto, mdev or vfio (vendor-specific VFIO, vGPU 17+); a probe decides auto."
        ),
        from_mig_parted: Path | None = typer.Option(None, "--from-mig-parted", help="A mig-parted config to read."),
        config: str | None = typer.Option(None, "--config", help="Config name inside --from-mig-parted."),
        seats: int | None = typer.Option(
            None,
            "--seats",
            min=1,
            max=100_000,
            help="Seats wanted (default: one per GPU with auto, as many as fit with a fixed --mode).",
        ),
        min_mem: float = typer.Option(0.0, "--min-mem", help="GPU memory per seat, GB."),
        mode: ModeChoice = typer.Option(
            ModeChoice.auto, "--mode", help="Partition mode; auto = the most isolated mode that seats --seats."
        ),
        profile: list[str] = typer.Option([], "--profile", help="MIG/vGPU profiles, one per seat (comma list)."),
        no_cuda: bool = typer.Option(False, "--no-cuda", help="Seats do not need CUDA (desktop/streaming)."),
        guest: GuestChoice = typer.Option(GuestChoice.linux, "--guest", help="Guest OS; windows implies --no-cuda."),
        render_name: str | None = typer.Option(
            None, "--render", help="mig-parted, nvidia-smi, libvirt, proxmox, xen, vsphere, k8s, jupyterhub."
        ),
        out: Path | None = typer.Option(None, "--out", help="Write rendered files (and APPLY.md) into this folder."),
        force: bool = typer.Option(False, "--force", help="Let --out replace files gpuseat did not write."),
        vcpus: int = typer.Option(4, "--vcpus", min=1, max=512, help="vCPUs per VM."),
        memory: int = typer.Option(16, "--memory", min=1, max=16384, help="Memory per VM, GiB."),
        disk_gb: int = typer.Option(50, "--disk-gb", min=1, max=65536, help="Disk per VM, GB."),
        image: str | None = typer.Option(None, "--image", help="Base disk image (host path) for the VM disks."),
        network: str = typer.Option("default", "--network", help="libvirt network for the VMs' NIC."),
        operator_namespace: str = typer.Option(
            "gpu-operator", "--operator-namespace", help="k8s: the NVIDIA GPU Operator's namespace (its ConfigMaps)."
        ),
        participants: str | None = typer.Option(
            None, "--participants", help="k8s: participant keys in seat order (comma list): a namespace each."
        ),
        catalog_dir: Path | None = typer.Option(None, "--catalog", help="A folder of catalog TOML files to overlay."),
        check: bool = typer.Option(False, "--assert", help="Check a live host (--from-nvidia-smi) against LAYOUT."),
        fmt: FormatOption = Format.table,
    ) -> None:
        """Split a server into seats by passthrough, MIG, vGPU, MPS or time-slicing; explain the rest."""
        import json

        from gpuseat.catalog.bundle import load_catalog
        from gpuseat.core.carve import CarveRequest
        from gpuseat.errors import InputError
        from gpuseat.files import read_text
        from gpuseat.render.base import RenderOptions
        from gpuseat.services import carving

        catalog = load_catalog(catalog_dir)
        if check:
            target = layout_file or server_file
            captured = from_probe or from_nvidia_smi
            if captured is None or target is None:
                raise InputError(
                    "--assert needs the host and the plan",
                    where="--assert",
                    fix="gpuseat carve --assert --from-probe BUNDLE LAYOUT.json (or --from-nvidia-smi live.xml)",
                )
            live: Server | None
            if from_probe is not None:  # the driver's own MIG names (-lgi/-lgip) beat memory sizes
                from gpuseat.services import probe

                live = probe.plan_inputs(probe.read_bundle(from_probe), catalog)[0]
            else:
                live = carving.load_server(catalog, nvidia_smi=from_nvidia_smi)
            assert live is not None
            try:
                doc = json.loads(read_text(target))
            except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
                raise InputError(
                    f"not JSON: {exc}", where=str(target), fix="give the output of `gpuseat carve … --format json`"
                ) from None
            diffs = carving.assert_layout(live, doc, where=str(target))
            for line in diffs:
                print(line)
            if diffs:
                raise typer.Exit(1)
            print(f"{captured} matches {target}")
            return
        if layout_file is not None:
            raise InputError(
                "a second file is only taken with --assert", where=str(layout_file), fix="give one SERVER inventory"
            )
        if config is not None and from_mig_parted is None:  # it was dropped without a word
            raise InputError(
                "--config names a config inside --from-mig-parted",
                where="--config",
                fix="add --from-mig-parted FILE, or leave it out",
            )
        probe_notes: list[str] = []
        server: Server | None
        if vgpu_backend not in ("auto", "mdev", "vfio"):
            raise InputError(f"unknown backend {vgpu_backend!r}", where="--vgpu-backend", fix="use auto, mdev or vfio")
        if from_probe is not None:
            from gpuseat.services import probe

            if server_file or gpu or from_nvidia_smi:
                raise InputError(
                    "--from-probe describes the server", where="--from-probe", fix="give no other server description"
                )
            bundle = probe.read_bundle(from_probe)
            server, catalog, probe_notes = probe.plan_inputs(bundle, catalog)
            if vgpu_backend == "auto" and bundle.vgpu_layout in ("mdev", "vfio"):
                vgpu_backend = bundle.vgpu_layout
        else:
            server = carving.load_server(catalog, inventory=server_file, gpu=gpu, nvidia_smi=from_nvidia_smi)
            probe_notes = carving.live_mig_notes(server) if server is not None else []
        by_chip = None
        if from_mig_parted is not None:
            server, by_chip = carving.from_mig_parted(from_mig_parted, config, server, catalog)
        if server is None:
            raise InputError(
                "no server given",
                where="gpuseat carve",
                fix="give SERVER (TOML inventory), --gpu MODEL[:BOARDS] or --from-nvidia-smi FILE",
            )
        need = carving.need_for(min_mem, cuda=not no_cuda, guest=guest.value)
        names = carving.profiles_from_flags(profile)
        request = CarveRequest(seats=seats, mode=mode.value, need=need, profiles=names, by_chip=by_chip)
        layout = carving.carve_layout(server, request, catalog)
        if probe_notes:
            layout = layout.model_copy(update={"notes": (*layout.notes, *probe_notes)})
        if render_name is None:
            if out is not None:
                raise InputError("--out writes rendered files", where="--out", fix="add --render NAME")
            # each shapes rendered files only: without --render it was dropped without a word
            render_only = (
                "image",
                "network",
                "participants",
                "operator_namespace",
                "vcpus",
                "memory",
                "disk_gb",
                "force",
            )
            given = [flag for flag, _value in changed(*render_only)]
            if given:
                raise InputError(
                    f"{', '.join(given)} only shape(s) rendered files",
                    where=given[0],
                    fix="add --render NAME, or leave it out",
                )
            _print_layout(layout, fmt)
            return
        people = tuple(p.strip() for p in (participants or "").split(",") if p.strip())
        options = _options(
            RenderOptions,
            vcpus=vcpus,
            memory_gb=memory,
            disk_gb=disk_gb,
            image=image,
            network=network,
            vgpu_backend=vgpu_backend,
            operator_namespace=operator_namespace,
            participants=people,
        )
        artifacts = carving.render_layout(layout, render_name, catalog, options)
        if out is None:
            for art in artifacts:
                print(f"==> {art.path} <==")
                print(art.text, end="")
            return
        written = carving.write_artifacts(out, artifacts, force=force)
        for path in written.paths:
            print(path)
        for path in written.removed:
            print(f"removed stale {path}")
        if written.runbook is not None:
            print(f"Next: follow {written.runbook}")


def _options(model: type[RenderOptions], **values: Any) -> RenderOptions:
    """Render options from flags; a bad value names its flag."""
    from pydantic import ValidationError

    from gpuseat.errors import InputError

    flags = {
        "memory_gb": "--memory",
        "disk_gb": "--disk-gb",
        "image": "--image",
        "network": "--network",
        "vcpus": "--vcpus",
        "operator_namespace": "--operator-namespace",
        "participants": "--participants",
    }
    try:
        return model(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else ""
        raise InputError(
            f"{err['msg']}",
            where=flags.get(field, field),
            fix="--image takes an absolute host path; --network a libvirt network name; --operator-namespace and"
            " --participants lowercase letters, digits and '-'",
        ) from None
