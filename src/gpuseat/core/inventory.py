"""The server being carved: its GPU chips, PCI addresses, UUIDs and BAR sizes.

Built from a TOML inventory, an inline ``--gpu MODEL[:COUNT]`` (COUNT = boards), an
``nvidia-smi -q -x`` capture (parsed by :mod:`gpuseat.nvsmi`), or a mig-parted config. Every parser
takes text or parsed data (no file I/O here) and raises :class:`~gpuseat.errors.InputError` only.
The catalog is passed in.

A server ``name`` is free text (it may come from someone else's file): renderers quote it with each
target's own quoting, and :attr:`Server.slug` is the identifier form (libvirt/k8s names, file names).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from gpuseat.catalog import GpuModel
from gpuseat.catalog.partitions import PartitionCatalog
from gpuseat.errors import InputError, did_you_mean
from gpuseat.files import validate

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog
    from gpuseat.readings import Snapshot

IDENTIFIER = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def slug(text: str) -> str:
    """A DNS-1123 label (libvirt and Kubernetes names, file names): lower case, digits, single dashes."""
    out = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40].strip("-") or "server"
    assert IDENTIFIER.match(out), out
    return out


_PCI = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def normalise_pci(address: str) -> str:
    """``00000000:01:00.0`` or ``01:00.0`` → ``0000:01:00.0`` (what libvirt, Proxmox and Xen expect)."""
    match = _PCI.match(address.strip())
    if not match:
        raise ValueError(f"'{address}' is not a PCI address like 0000:86:00.0")
    domain, bus, slot, func = match.groups()
    return f"{int(domain or '0', 16):04x}:{bus.lower()}:{slot.lower()}.{func}"


class LiveMig(BaseModel):
    """MIG as a capture shows it on one chip: mode, each MIG device's memory (GiB) and SM count, and its
    profile name: the driver's (``-L``, ``-lgi``/``-lgip``) unless ``guessed`` says some were inferred."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    enabled: bool
    devices: tuple[tuple[float, int], ...] = ()
    profiles: tuple[str | None, ...] = ()
    guessed: bool = Field(False, description="some names were inferred from memory/SMs, not read from the driver")


class Chip(BaseModel):
    """One physical GPU chip (an M60 board has two): the unit a seat is carved from."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    index: int = Field(ge=0)
    gpu: GpuModel
    board: int = Field(ge=0)
    pci: str | None = None
    uuid: str | None = None
    bars_mib: tuple[float, ...] = Field((), description="sizes of the chip's PCI BARs, MiB")
    mig: LiveMig | None = Field(None, description="MIG state read from a capture (None: not captured)")


class Server(BaseModel):
    """A server's GPU chips, in nvidia-smi index order."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    name: str = Field(max_length=200)
    chips: tuple[Chip, ...] = Field(min_length=1)

    @property
    def slug(self) -> str:
        """The name as an identifier: ``[a-z0-9-]``, at most 40 characters, never empty."""
        return slug(self.name)

    @property
    def gpu(self) -> GpuModel:
        """The one GPU model of this server (carve works on one model at a time)."""
        return self.chips[0].gpu

    @property
    def boards(self) -> int:
        """Number of boards."""
        return len({c.board for c in self.chips})


# --- TOML inventory -------------------------------------------------------------------------------


class _ChipRow(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    pci: str | None = None
    uuid: str | None = None
    bar_mib: list[float] = Field(default_factory=list)

    @field_validator("pci")
    @classmethod
    def _pci(cls, value: str | None) -> str | None:
        return None if value is None else normalise_pci(value)

    @field_validator("bar_mib")
    @classmethod
    def _bars(cls, value: list[float]) -> list[float]:
        if any(v <= 0 for v in value):
            raise ValueError("BAR sizes must be positive MiB")
        return value


class _GpuRow(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    model: str
    boards: int = Field(1, ge=1, le=64)
    chip: list[_ChipRow] = Field(default_factory=list)


class _InventoryFile(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str = "server"
    description: str | None = None
    gpu: list[_GpuRow] = Field(min_length=1)
    # how participants reach the server (the name above is the file's label, not a host)
    ssh_host: str | None = Field(None, max_length=253)
    ssh_port: StrictInt | None = Field(None, ge=1, le=65535)  # `true` is no port (lax reading made it 1)
    jump_host: str | None = Field(None, max_length=300)


def _chips(model: GpuModel, boards: int, rows: list[_ChipRow], where: str) -> tuple[Chip, ...]:
    count = boards * model.chips_per_board
    if len(rows) > count:
        raise InputError(
            f"{len(rows)} [[gpu.chip]] entries but {boards} × {model.id} has {count} chips",
            where=where,
            fix=f"list at most {count} chips, or raise 'boards'",
        )
    rows = rows + [_ChipRow() for _ in range(count - len(rows))]
    return tuple(
        Chip(
            index=i,
            gpu=model,
            board=i // model.chips_per_board,
            pci=row.pci,
            uuid=row.uuid,
            bars_mib=tuple(row.bar_mib),
        )
        for i, row in enumerate(rows)
    )


def _no_duplicate_pci(chips: tuple[Chip, ...], where: str) -> tuple[Chip, ...]:
    seen: dict[str, int] = {}
    for chip in chips:
        if chip.pci is None:
            continue
        if chip.pci in seen:
            raise InputError(
                f"PCI address {chip.pci} given for GPU {seen[chip.pci]} and GPU {chip.index}",
                where=where,
                fix="give each chip its own address (lspci -d 10de: lists them)",
            )
        seen[chip.pci] = chip.index
    return chips


def server_from_toml(data: dict[str, Any], catalog: Catalog, *, where: str) -> Server:
    """A server from a parsed TOML inventory (``name``, one ``[[gpu]]`` with ``model``, ``boards``, chips)."""
    inv = validate(_InventoryFile, data, where=where)
    models = {catalog.resolve_gpu(g.model, where=f"{where}: field 'gpu.model'").id for g in inv.gpu}
    if len(models) > 1:
        raise InputError(
            f"several GPU models ({', '.join(sorted(models))}) in one inventory",
            where=where,
            fix="carve one GPU model at a time: one inventory per model",
        )
    row = inv.gpu[0]
    if len(inv.gpu) > 1:
        raise InputError("more than one [[gpu]] table", where=where, fix="merge them: raise 'boards'")
    chips = _no_duplicate_pci(_chips(catalog.resolve_gpu(row.model), row.boards, row.chip, where), where)
    return Server(name=inv.name, chips=chips)


def server_from_gpu_flag(spec: str, catalog: Catalog) -> Server:
    """``--gpu MODEL[:COUNT]``: COUNT boards of MODEL (default 1); an M60 board has 2 chips."""
    name, _, count = spec.partition(":")
    model = catalog.resolve_gpu(name.strip(), where="--gpu")
    text = count.strip()  # in the digits 0-9: int() also read M60:٢ as two boards (and isdigit() passes ²)
    boards = 1 if not count else int(text) if text.isascii() and text.isdigit() else 0
    if not 1 <= boards <= 64:
        raise InputError(
            f"'{count}' is not a board count", where="--gpu", fix="write MODEL[:COUNT] with COUNT 1..64, e.g. M60:2"
        )
    return Server(name=f"{boards}x{model.id}", chips=_chips(model, boards, [], "--gpu"))


# --- a vGPU guest ---------------------------------------------------------------------------------

#: A vGPU type as a guest's driver names its GPU: ``GRID P4-1Q``, ``NVIDIA L40S-12Q``, ``GRID A100D-1-10C``
#: (board — may hold spaces, as in ``RTX PRO 6000 Blackwell DC-4-96Q`` —, optional MIG slices, framebuffer GB,
#: series Q/B/A/C, optional heads suffix as in ``M60-2B4``).
_VGPU_TYPE = re.compile(
    r"^(?:GRID\s+|NVIDIA\s+)?(?P<type>(?P<board>[A-Z][A-Za-z0-9 ]*?)-(?:\d+-)?(?P<fb>\d+)(?P<series>[QBAC])\d*)$"
)


def vgpu_guest(product: str, catalog: Catalog, *, memory_mib: float | None = None) -> tuple[str, str | None] | None:
    """What a guest's GPU is when its name is a vGPU type (``GRID V100D-8C``): the profile, the physical
    GPU behind it and what the profile gives, from the catalog's vGPU tables, with the physical GPU's
    catalog id when known; None for a physical GPU.

    Why: inside a VM the driver names the vGPU type, not the board, and carving happens on the host.
    """
    match = _VGPU_TYPE.match(product.strip())
    if match is None:
        return None
    name, board, series = match["type"], match["board"], match["series"]
    cat = catalog.partitions
    row = next((p for rows in cat.vgpu_profiles.values() for p in rows if p.name == name), None)
    same_board = next(
        (p.gpu for rows in cat.vgpu_profiles.values() for p in rows if p.name.startswith(f"{board}-")), None
    )
    by_prefix = next((b for b in cat.vgpu_boards if b.prefix == board), None)
    gpu_id = row.gpu if row else same_board or (by_prefix.gpu if by_prefix else None)
    model = catalog.gpus.get(gpu_id) if gpu_id else catalog.find_gpu(board)
    if by_prefix is not None:
        on = f"on a physical {by_prefix.board} ({by_prefix.gpu})"
    elif model is not None:
        on = f"on a physical {model.name} ({model.id})"
    else:
        on = f"on the {board} board (not in the catalog's vGPU tables)"
    sold_as = catalog.licences.get(row.licence if row else f"nvidia-vgpu-{series.lower()}")
    seen = f"; the guest sees {memory_mib:g} MiB" if memory_mib else ""
    fb = (
        f"{row.framebuffer_mb} MB of framebuffer{seen}"
        if row
        else f"{match['fb']} GB of framebuffer (by its name{seen})"
    )
    if row is not None:
        cuda = "CUDA: yes" if row.cuda else f"CUDA: no ({row.cuda_note})"
    elif series == "C":
        cuda = "CUDA: yes (a C-series compute type)"
    elif series == "Q" and model is not None and float(model.compute_capability) >= 6.0:
        cuda = "CUDA: yes (Q-series on Pascal or later)"
    else:
        cuda = "CUDA: not in the catalog's vGPU tables (check NVIDIA's for this type)"
    sold = f"; licence: {sold_as.name}" if sold_as else ""
    return f"a vGPU guest: profile {name} {on}; it gives {fb}, {cuda}{sold}.", model.id if model else None


# --- nvidia-smi -q -x ------------------------------------------------------------------------------


def server_from_snapshot(snapshot: Snapshot, catalog: Catalog, *, where: str) -> Server:
    """A server from a parsed ``nvidia-smi -q -x`` capture (:func:`gpuseat.nvsmi.parse_xml`): model, PCI
    bus id, UUID, BARs and MIG state per chip. The capture shows BAR1 only; BAR0 + BAR3 are added from the
    catalog (``doctor.toml`` ``[bar] small_bars_bytes``) so MMIO sizing sees every BAR."""
    if not snapshot.gpus:
        raise InputError(
            "no <gpu> element under <nvidia_smi_log>", where=where, fix="capture with `nvidia-smi -q -x > FILE`"
        )
    small = catalog.doctor.bar.small_bars_bytes / (1 << 20)
    chips: list[Chip] = []
    model: GpuModel | None = None
    for i, gpu in enumerate(snapshot.gpus):
        product = (gpu.name or "").strip()
        found = catalog.find_gpu(product)
        guest = vgpu_guest(product, catalog, memory_mib=gpu.memory_total_mib) if found is None else None
        if guest is not None:
            text, host_gpu = guest
            raise InputError(
                f"GPU {i} ({product}) is {text} Carving happens on the host: this guest's seat is this one vGPU",
                where=f"{where}: gpu {i}",
                fix="run `gpuseat probe` and `gpuseat carve --from-probe` on the vGPU host (the hypervisor)"
                + (f", or plan it with --gpu {host_gpu}:BOARDS" if host_gpu else ""),
            )
        if found is None:
            raise InputError(
                f"GPU {product!r} is not in the catalog.{did_you_mean(product, catalog.gpus)}",
                where=f"{where}: gpu {i}",
                fix=f"carve with --gpu MODEL:COUNT using one of: {', '.join(catalog.gpus)}",
            )
        if model is not None and found.id != model.id:
            raise InputError(
                f"mixed GPU models ({model.id}, {found.id})", where=where, fix="carve one GPU model at a time"
            )
        model = found
        pci = (gpu.pci_bus_id or "").strip()
        mig = None
        if gpu.mig_enabled is not None:
            devices = tuple((round((m.memory_total_mib or 0) / 1024, 2), m.multiprocessors or 0) for m in gpu.mig)
            mig = LiveMig(
                enabled=gpu.mig_enabled,
                devices=devices,
                profiles=tuple(m.profile for m in gpu.mig),
                guessed=any(m.profile_inferred for m in gpu.mig),
            )
        chips.append(
            Chip(
                index=i,
                gpu=found,
                board=i // found.chips_per_board,
                pci=normalise_pci(pci) if _PCI.match(pci) else None,
                uuid=gpu.uuid if gpu.uuid and gpu.uuid != "N/A" else None,
                bars_mib=(small, gpu.bar1_total_mib) if gpu.bar1_total_mib else (),
                mig=mig,
            )
        )
    assert model is not None
    return Server(name=f"{len(chips)}x{model.id}", chips=_no_duplicate_pci(tuple(chips), where))


# --- mig-parted config -----------------------------------------------------------------------------


class MigPartedEntry(BaseModel):
    """One item of a mig-parted config: which devices, MIG on/off, and profile → count."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, defer_build=True)

    devices: Literal["all"] | tuple[int, ...]
    device_filter: tuple[str, ...] = Field((), alias="device-filter")
    mig_enabled: bool = Field(alias="mig-enabled")
    mig_devices: dict[str, int] = Field(default_factory=dict, alias="mig-devices")

    @field_validator("device_filter", mode="before")
    @classmethod
    def _one_or_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("mig_devices")
    @classmethod
    def _counts(cls, value: dict[str, int]) -> dict[str, int]:
        if any(n < 1 or n > 64 for n in value.values()):
            raise ValueError("each count must be 1..64 (mig-parted rejects a count of 0)")
        return value

    @model_validator(mode="after")
    def _as_mig_parted_checks(self) -> MigPartedEntry:
        # mig-parted's own validation (pkg/mig/config): no devices when MIG is off, at least one when on
        if not self.mig_enabled and self.mig_devices:
            raise ValueError("mig-devices given but mig-enabled is false")
        return self


class _MigPartedFile(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

    version: Literal["v1"]
    mig_configs: dict[str, list[MigPartedEntry]] = Field(alias="mig-configs", min_length=1)


MAX_YAML_ALIASES = 1000
MAX_YAML_CHARS = 4 * 1024 * 1024


def parse_mig_parted(
    yaml_text: str, *, where: str, config: str | None = None
) -> tuple[str, tuple[MigPartedEntry, ...]]:
    """The named (or only) config of a mig-parted ``version: v1`` file."""
    import yaml

    class _Loader(yaml.SafeLoader):
        """The safe loader, with a cap on aliases: a few anchors can otherwise expand to billions of nodes."""

        aliases = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_YAML_ALIASES:
                    raise InputError(
                        f"more than {MAX_YAML_ALIASES} YAML aliases (*name)",
                        where=where,
                        fix="write the mig-parted config out without anchor/alias chains",
                    )
            return super().compose_node(parent, index)

    if len(yaml_text) > MAX_YAML_CHARS:
        raise InputError(
            f"{len(yaml_text):,} characters: more than a mig-parted config needs",
            where=where,
            fix="check that this is the right file",
        )
    try:
        data = yaml.load(yaml_text, Loader=_Loader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise InputError(f"malformed YAML: {exc}", where=where, fix="correct the YAML syntax") from None
    spec = validate(_MigPartedFile, data, where=where)
    names = list(spec.mig_configs)
    if config is None:
        if len(names) > 1:
            raise InputError(
                f"{len(names)} configs in the file ({', '.join(names)})", where=where, fix="choose one with --config"
            )
        config = names[0]
    if config not in spec.mig_configs:
        raise InputError(
            f"no config '{config}'.{did_you_mean(config, names)}", where=where, fix=f"use one of: {', '.join(names)}"
        )
    return config, tuple(spec.mig_configs[config])


def _device_id(text: str) -> str:
    return text.strip().lower().removeprefix("0x")


def filter_matches(entry: MigPartedEntry, model: GpuModel, partitions: PartitionCatalog) -> bool:
    """Whether a mig-parted entry applies to GPUs of ``model``: no ``device-filter``, or one of its PCI
    device ids is the model's (mig-parted applies an entry only to devices its filter matches)."""
    if not entry.device_filter:
        return True
    mig_gpu = partitions.mig_gpus.get(model.id)
    own = {_device_id(d) for d in mig_gpu.device_ids} if mig_gpu else set()
    return bool(own & {_device_id(d) for d in entry.device_filter})


def model_for_device_ids(ids: tuple[str, ...], catalog: Catalog) -> GpuModel | None:
    """The GPU model a mig-parted ``device-filter`` names, if the catalog knows the ids."""
    wanted = {_device_id(i) for i in ids}
    for gpu in catalog.partitions.mig_gpus.values():
        if wanted & {_device_id(d) for d in gpu.device_ids}:
            return catalog.resolve_gpu(gpu.gpu)
    return None


def mig_parted_assignment(
    entries: tuple[MigPartedEntry, ...], model: GpuModel, partitions: PartitionCatalog, *, chips: int, where: str
) -> dict[int, tuple[str, ...]]:
    """Chip index → the MIG profiles a config asks for on it. Only entries whose ``device-filter``
    matches ``model`` apply; among those, later entries win, as in mig-parted."""
    out: dict[int, tuple[str, ...]] = {}
    applying = [e for e in entries if filter_matches(e, model, partitions)]
    if not applying:
        raise InputError(
            f"no entry of this config applies to {model.id} (its device-filter ids do not match)",
            where=where,
            fix="choose a config with an entry for this GPU, or the right --gpu",
        )
    for entry in applying:
        targets = range(chips) if entry.devices == "all" else entry.devices
        for index in targets:
            if index >= chips:
                raise InputError(
                    f"device {index} but the server has {chips} GPUs",
                    where=where,
                    fix="give the GPU count with --gpu MODEL:COUNT",
                )
            profiles = [p for p, n in entry.mig_devices.items() for _ in range(n)] if entry.mig_enabled else []
            out[index] = tuple(profiles)
    return out
