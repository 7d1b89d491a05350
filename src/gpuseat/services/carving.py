"""Carving as a service: a server description + a request + the catalog → a layout, its rendered
files written safely into a folder, and the check of a live host against a planned layout.

The CLI (``gpuseat carve``), the course store (``seats add --inventory FILE --mode …``) and the portal
call these functions; they only parse and print.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuseat.core.carve import SCHEMA_VERSION, CarveRequest, Layout, carve
from gpuseat.core.inventory import (
    Server,
    mig_parted_assignment,
    model_for_device_ids,
    parse_mig_parted,
    server_from_gpu_flag,
    server_from_snapshot,
    server_from_toml,
)
from gpuseat.core.needs import SeatNeed
from gpuseat.errors import InputError
from gpuseat.files import read_text, read_toml, recover_folder, replace_folder
from gpuseat.render.base import FILE_NAME, Artifact, RenderOptions, render

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

CARVE_MANIFEST = ".gpuseat-manifest.json"

__all__ = [
    "CARVE_MANIFEST",
    "CarveRequest",
    "Layout",
    "RenderOptions",
    "Written",
    "assert_layout",
    "carve_inventory",
    "carve_layout",
    "load_server",
    "need_for",
    "render_layout",
    "server_from_nvidia_smi",
    "write_artifacts",
]


def need_for(min_mem: float = 0.0, *, cuda: bool = True, guest: str = "linux") -> SeatNeed:
    """The seat need carving answers: finite memory, CUDA (never for Windows desktops), any isolation."""
    if not math.isfinite(min_mem) or not 0 <= min_mem <= 10_000:
        raise InputError(f"{min_mem!r} is not a memory size", where="--min-mem", fix="give GB, e.g. --min-mem 16")
    if guest not in ("linux", "windows"):
        raise InputError(f"unknown guest '{guest}'", where="--guest", fix="use linux or windows")
    return SeatNeed(min_gpu_memory_gb=min_mem, cuda=cuda and guest == "linux", guest_os=guest, isolation="shared")


def server_from_nvidia_smi(text: str, catalog: Catalog, *, where: str) -> Server:
    """A server from ``nvidia-smi -q -x`` (XML) or plain ``nvidia-smi -q`` text, parsed by the one adapter.

    The plain ``-q`` is what people paste from a VM or an issue, so both are taken; MIG devices the capture
    does not name get the profile they match in the catalog (flagged as guessed).
    """
    from gpuseat.nvsmi import name_mig_profiles, parse_xml
    from gpuseat.nvsmi_text import parse_q_text

    if text.lstrip().startswith("<"):
        snap = parse_xml(text, host="capture", where=where)
    else:
        snap = parse_q_text(text, host="capture", where=where)
    if any(m.profile is None for g in snap.gpus for m in g.mig):
        snap = name_mig_profiles(snap, catalog)
    return server_from_snapshot(snap, catalog, where=where)


def live_mig_notes(server: Server) -> list[str]:
    """What each chip's MIG devices are now, and whether the names are the driver's or guessed.

    Why: a guessed name can be wrong (equal memory, different slices), so the plan says which it is.
    """
    notes = []
    for chip in server.chips:
        live = chip.mig
        if live is None or not live.enabled or not live.devices:
            continue
        names = Counter(p or "unnamed" for p in live.profiles)
        held = ", ".join(f"{n} ×{c}" if c > 1 else n for n, c in sorted(names.items()))
        how = (
            "names guessed from memory and SM counts, no `nvidia-smi mig -lgip`/`-lgi` captured;"
            " `gpuseat probe` records them for the driver's names"
            if live.guessed or None in live.profiles
            else "names from the driver"
        )
        notes.append(f"GPU {chip.index} holds MIG devices {held} ({how})")
    return notes


def load_server(
    catalog: Catalog, *, inventory: Path | None = None, gpu: str | None = None, nvidia_smi: Path | None = None
) -> Server | None:
    """The server from exactly one of: a TOML inventory, ``--gpu MODEL[:BOARDS]``, an ``nvidia-smi -q -x`` file."""
    given = [x for x in (inventory, gpu, nvidia_smi) if x is not None]
    if len(given) > 1:
        raise InputError(
            "more than one server description",
            where="gpuseat carve",
            fix="give one of SERVER (a TOML inventory), --gpu or --from-nvidia-smi",
        )
    if inventory is not None:
        return server_from_toml(read_toml(inventory), catalog, where=str(inventory))
    if gpu is not None:
        return server_from_gpu_flag(gpu, catalog)
    if nvidia_smi is not None:
        return server_from_nvidia_smi(read_text(nvidia_smi), catalog, where=str(nvidia_smi))
    return None


def from_mig_parted(
    path: Path, config: str | None, server: Server | None, catalog: Catalog
) -> tuple[Server, dict[int, tuple[str, ...]]]:
    """The server and per-chip MIG profiles of a mig-parted config (entries filtered by ``device-filter``)."""
    name, entries = parse_mig_parted(read_text(path), where=str(path), config=config)
    if server is None:
        model = next((m for e in entries if (m := model_for_device_ids(e.device_filter, catalog))), None)
        indices = [i for e in entries if e.devices != "all" for i in e.devices]
        if model is None or not indices:
            raise InputError(
                f"config '{name}' does not say which GPUs (device-filter and device indices)",
                where=str(path),
                fix="add --gpu MODEL:COUNT",
            )
        server = server_from_gpu_flag(f"{model.id}:{max(indices) + 1}", catalog)
    by_chip = mig_parted_assignment(
        entries, server.gpu, catalog.partitions, chips=len(server.chips), where=f"{path}: config '{name}'"
    )
    if not any(by_chip.values()):
        raise InputError(
            f"config '{name}' creates no MIG instance on {server.gpu.id}",
            where=str(path),
            fix="choose a config with mig-devices for this GPU",
        )
    return server, by_chip


def profiles_from_flags(values: list[str]) -> tuple[str, ...]:
    """``--profile a,b --profile c`` → ``(a, b, c)``; an empty item (``","``) is an error, not "no profile"."""
    out: list[str] = []
    for value in values:
        for item in value.split(","):
            if not item.strip():
                raise InputError(
                    f"empty profile name in {value!r}", where="--profile", fix="list names like 1g.10gb,1g.10gb"
                )
            out.append(item.strip())
    return tuple(out)


def carve_layout(server: Server, request: CarveRequest, catalog: Catalog) -> Layout:
    """The layout of ``request`` on ``server`` (the pure carve, here so front ends need one import)."""
    return carve(server, request, catalog)


def carve_inventory(
    path: Path,
    catalog: Catalog,
    *,
    mode: str = "auto",
    seats: int | None = None,
    min_mem: float = 0.0,
    profiles: tuple[str, ...] = (),
    cuda: bool = True,
    guest: str = "linux",
) -> Layout:
    """A TOML inventory carved by mode/options: what ``seats add --inventory FILE --mode …`` needs."""
    server = load_server(catalog, inventory=path)
    assert server is not None
    request = CarveRequest(
        seats=seats,
        mode=mode,
        need=need_for(min_mem, cuda=cuda, guest=guest),
        profiles=profiles,
    )
    return carve(server, request, catalog)


def render_layout(
    layout: Layout, renderer: str, catalog: Catalog, options: RenderOptions | None = None
) -> list[Artifact]:
    """The files of one renderer, ``APPLY.md`` included."""
    return render(layout, renderer, catalog, options)


# --- writing into --out ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    """What :func:`write_artifacts` did: files written and stale gpuseat files removed."""

    paths: tuple[Path, ...]
    removed: tuple[Path, ...]
    runbook: Path | None


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_manifest(out: Path) -> dict[str, str]:
    path = out / CARVE_MANIFEST
    if not path.exists() and not path.is_symlink():
        return {}
    if path.is_symlink() or not path.is_file():
        raise InputError(
            f"{CARVE_MANIFEST} is not a regular file", where=str(out), fix="remove it, or use another --out"
        )
    try:
        data = json.loads(read_text(path))
        files = data["files"]
        if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            raise TypeError("files")
    except (ValueError, KeyError, TypeError):
        raise InputError(
            f"{CARVE_MANIFEST} is not gpuseat's manifest", where=str(out), fix="remove it, or use another --out"
        ) from None
    return {k: v for k, v in files.items() if FILE_NAME.fullmatch(k)}


def _current_sha(path: Path) -> str | None:
    """The file's hash, or None when it is absent; a link or special file is never gpuseat's."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:
        return "not-a-regular-file"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not-a-regular-file"
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return _sha(handle.read(64 << 20))
    finally:
        os.close(fd)


def _prepare(out: Path) -> None:
    if out.is_symlink():
        raise InputError("is a symbolic link", where=f"--out {out}", fix="give a real folder")
    if out.exists() and not out.is_dir():
        raise InputError("is a file, not a folder", where=f"--out {out}", fix="give a folder (new or gpuseat-made)")
    parent = out.parent
    if not out.exists() and not parent.is_dir():
        raise InputError(
            f"the parent folder {parent} does not exist", where=f"--out {out}", fix=f"create {parent} first"
        )
    recover_folder(out)


def check_artifacts(out: Path, artifacts: list[Artifact], *, force: bool = False) -> tuple[dict[str, str], set[str]]:
    """Refuse, writing nothing, what :func:`write_artifacts` would refuse: a command checks its ``--out``
    with it before it changes the store. Returns the folder's manifest and its entries."""
    _prepare(out)
    manifest = _read_manifest(out)
    # stray temporary files of an older writer killed mid-write are not the user's files
    entries = (
        {p.name for p in out.iterdir() if not p.name.startswith(".gpuseat-")} - {CARVE_MANIFEST}
        if out.exists()
        else set()
    )
    if not manifest and entries and not force:
        raise InputError(
            f"the folder is not empty and gpuseat did not write it ({len(entries)} entries, no {CARVE_MANIFEST})",
            where=f"--out {out}",
            fix="choose a new or empty folder, or add --force to write into it anyway",
        )
    conflicts = []
    for name in sorted({a.path for a in artifacts} | set(manifest)):
        current = _current_sha(out / name)
        if current is not None and current != manifest.get(name):
            conflicts.append(name)
    if conflicts and not force:
        raise InputError(
            f"would replace or remove files gpuseat did not write (or that were edited since): {', '.join(conflicts)}",
            where=f"--out {out}",
            fix="move them away, choose another folder, or add --force",
        )
    return manifest, entries


def write_artifacts(out: Path, artifacts: list[Artifact], *, force: bool = False) -> Written:
    """Write ``artifacts`` into ``out`` — an empty folder or one gpuseat wrote (its manifest lists the files).

    A re-carve replaces gpuseat's own files and removes those it no longer renders. A file gpuseat did not
    write (or that was edited since) is never overwritten or removed without ``force`` (with it, files
    gpuseat did not write are kept). The whole folder is staged beside ``out`` and swapped in at once
    (:func:`gpuseat.files.replace_folder`): a run killed at any point leaves the old folder as it was.
    """
    manifest, entries = check_artifacts(out, artifacts, force=force)
    new = {a.path: a.text.encode("utf-8") for a in artifacts}
    doc = {"schema_version": SCHEMA_VERSION, "writer": "gpuseat carve", "files": {n: _sha(d) for n, d in new.items()}}
    files = {**new, CARVE_MANIFEST: (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")}
    foreign = sorted(entries - set(manifest) - set(new)) if out.exists() else []
    replace_folder(
        out,
        files,
        modes={n: 0o755 for n in new if n.endswith(".sh")},
        keep=foreign,
        last=CARVE_MANIFEST,
        where=f"--out {out}",
    )
    written = [out / name for name in new]
    removed = [out / name for name in sorted(set(manifest) - set(new)) if name in entries]
    runbook = out / "APPLY.md" if "APPLY.md" in new else None
    return Written(paths=tuple(written), removed=tuple(removed), runbook=runbook)


# --- does the host match the plan? --------------------------------------------------------------------


def _planned(doc: Any, where: str) -> dict[str, Any]:
    if (
        not isinstance(doc, dict)
        or doc.get("schema_version") != SCHEMA_VERSION
        or not isinstance(doc.get("slices"), list)
    ):
        raise InputError(
            f"not a gpuseat layout (schema_version {SCHEMA_VERSION})",
            where=where,
            fix="give the output of `gpuseat carve … --format json`",
        )
    return doc


def assert_layout(live: Server, layout_doc: Any, *, where: str = "LAYOUT") -> list[str]:
    """Differences between a live host (an ``nvidia-smi -q -x`` capture) and a planned layout (its JSON);
    empty when the host matches (mig-parted's ``assert`` idea)."""
    plan = _planned(layout_doc, where)
    diffs: list[str] = []
    if plan.get("gpu") != live.gpu.id:
        diffs.append(f"GPU model: planned {plan.get('gpu')}, host has {live.gpu.id}")
    chips = plan.get("chips") or []
    if len(chips) != len(live.chips):
        diffs.append(f"GPU count: planned {len(chips)}, host has {len(live.chips)}")
    for chip in chips:
        index, pci = chip.get("index"), chip.get("pci")
        if pci and isinstance(index, int) and index < len(live.chips) and live.chips[index].pci not in (None, pci):
            diffs.append(f"GPU {index}: planned at {pci}, host has {live.chips[index].pci} there")
    slices = [s for s in plan["slices"] if isinstance(s, dict)]
    if plan.get("mode") != "mig":
        for chip in live.chips:
            if chip.mig is not None and chip.mig.enabled:
                diffs.append(f"GPU {chip.index}: MIG is enabled but the layout is {plan.get('mode')}")
        return diffs
    for chip in live.chips:
        want = sorted(float(s.get("memory_gb") or 0) for s in slices if s.get("gpu_index") == chip.index)
        names = Counter(str(s.get("profile")) for s in slices if s.get("gpu_index") == chip.index)
        planned = ", ".join(f"{n} ×{c}" for n, c in sorted(names.items())) or "none"
        if chip.mig is None:
            diffs.append(f"GPU {chip.index}: the capture shows no MIG state (capture with nvidia-smi -q -x)")
            continue
        if want and not chip.mig.enabled:
            diffs.append(f"GPU {chip.index}: MIG is disabled; planned {planned}")
            continue
        have = sorted(gb for gb, _ in chip.mig.devices)
        named = [p for p in chip.mig.profiles if p]
        by_name = not chip.mig.guessed and len(named) == len(have) and not any("c." in p for p in named)
        if len(have) != len(want):
            diffs.append(f"GPU {chip.index}: {len(have)} MIG device(s) on the host, planned {len(want)} ({planned})")
        elif by_name and Counter(named) != names:
            # the driver's names tell 1g.20gb from 2g.20gb, which memory alone cannot
            held = ", ".join(f"{n} ×{c}" for n, c in sorted(Counter(named).items()))
            diffs.append(f"GPU {chip.index}: MIG devices {held} (the driver's names); planned {planned}")
        elif any(abs(h - w) > 0.12 * max(w, 1) for h, w in zip(have, want, strict=True)):
            got = ", ".join(f"{h:g} GB" for h in have)
            diffs.append(f"GPU {chip.index}: MIG device memory {got}; planned {planned}")
    return diffs
