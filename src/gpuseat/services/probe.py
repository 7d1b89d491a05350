"""``gpuseat probe``: one bundle of what the driver says about this host, and reading it back.

A bundle is a folder (or a ``.tar.gz`` of one) holding the raw prints of ``nvidia-smi -q -x``, ``-q``,
``-L``, the plain table, ``mig -lgip``/``-lgipp``/``-lgi``/``-lci``, ``vgpu -s -v``/``-c``, the SR-IOV/vGPU
sysfs layout (``sysfs.json``: mdev or NVIDIA's vendor-specific VFIO), Xid lines of the kernel log when
readable, the doctor's capture of /proc and /sys, and ``probe.json`` (driver version, what ran, exit codes).
Reading needs no root; commands that fail (no MIG, no vGPU manager) are recorded, not fatal.

``carve``, ``doctor``, ``monitor`` and ``top`` take ``--from-probe BUNDLE``: carve plans against the
driver's own profile table (ids, placements, usable memory), the monitor names MIG devices from
``-lgi``/``-lci`` and raises Xid alerts from the kernel log.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuseat.errors import EngineError, InputError

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog
    from gpuseat.core.inventory import Server
    from gpuseat.readings import Snapshot

BUNDLE_VERSION = 1
PROBE_MANIFEST = "probe.json"
#: File in the bundle → nvidia-smi arguments.
PROBE_COMMANDS: dict[str, tuple[str, ...]] = {
    "nvidia-smi-q.xml": ("-q", "-x"),
    "nvidia-smi-q.txt": ("-q",),
    "nvidia-smi-L.txt": ("-L",),
    "nvidia-smi.txt": (),
    "mig-lgip.txt": ("mig", "-lgip"),
    "mig-lgipp.txt": ("mig", "-lgipp"),
    "mig-lgi.txt": ("mig", "-lgi"),
    "mig-lci.txt": ("mig", "-lci"),
    "vgpu-s-v.txt": ("vgpu", "-s", "-v"),
    "vgpu-c.txt": ("vgpu", "-c"),
}
SYSFS_FILE = "sysfs.json"
XID_FILE = "kernel-xid.txt"
DOCTOR_FILE = "doctor-capture.tar.gz"
PROBE_MAX_MEMBER_BYTES = 64 * 1024 * 1024
MAX_MEMBERS = 64
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class Bundle:
    """A read probe bundle: file name → bytes, and the manifest."""

    where: str
    files: dict[str, bytes] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)

    def text(self, name: str) -> str | None:
        """A member as text, or None when the bundle lacks it (or its command failed)."""
        data = self.files.get(name)
        if data is None:
            return None
        ran = self.manifest.get("commands", {}).get(name)
        if isinstance(ran, dict) and ran.get("exit") not in (0, None):
            return None
        return data.decode("utf-8", errors="replace")

    @property
    def driver_version(self) -> str | None:
        """The driver version the probe saw."""
        value = self.manifest.get("driver_version")
        return value if isinstance(value, str) else None

    @property
    def vgpu_layout(self) -> str:
        """``vfio`` (vendor-specific VFIO), ``mdev`` or ``none``, from the sysfs layout."""
        data = self.files.get(SYSFS_FILE)
        try:
            layout = json.loads(data.decode()).get("layout") if data else None
        except (ValueError, AttributeError):
            layout = None
        return layout if layout in ("vfio", "mdev", "none") else "none"


# -- writing ---------------------------------------------------------------------------------------


def _run(exe: str, args: tuple[str, ...], timeout_s: float) -> tuple[int | None, bytes, str]:
    from gpuseat.engines.runner import default_runner

    try:
        proc = default_runner().run([exe, *args], timeout=timeout_s, check=False, mutates=False, where="probe")
    except EngineError as exc:
        return None, b"", f"{exe} not found" if "not found" in exc.what else f"no answer in {timeout_s:g} s"
    except OSError as exc:
        return None, b"", str(exc.strerror)
    return proc.returncode, proc.stdout.encode(), proc.stderr.strip()[:300]


def sysfs_layout(root: Path) -> dict[str, Any]:
    """The vGPU layout of each NVIDIA GPU under ``root/sys/bus/pci/devices``: mdev types or VF vGPU types."""
    devices = root / "sys" / "bus" / "pci" / "devices"
    gpus: dict[str, Any] = {}
    layouts = set()
    try:
        entries = sorted(devices.iterdir()) if devices.is_dir() else []
    except OSError:
        entries = []
    for dev in entries[:4096]:
        vendor = _read(dev / "vendor")
        klass = _read(dev / "class")
        if vendor != "0x10de" or not (klass or "").startswith("0x03") or (dev / "physfn").exists():
            continue
        info: dict[str, Any] = {
            "sriov_totalvfs": _int(_read(dev / "sriov_totalvfs")),
            "sriov_numvfs": _int(_read(dev / "sriov_numvfs")),
            "mdev_types": _mdev(dev),
            "vfs": [],
        }
        if info["mdev_types"]:
            layouts.add("mdev")
        for n in range(512):
            vf = dev / f"virtfn{n}"
            if not vf.exists():
                break
            entry: dict[str, Any] = {"vf": vf.resolve().name}
            creatable = _read(vf / "nvidia" / "creatable_vgpu_types", strip=False)
            if creatable is not None:
                from gpuseat.doctor.parse import creatable_vgpu_types

                layouts.add("vfio")
                entry["current_vgpu_type"] = _int(_read(vf / "nvidia" / "current_vgpu_type"))
                entry["creatable"] = list(creatable_vgpu_types(creatable))
            if _mdev(vf):
                layouts.add("mdev")
                entry["mdev_types"] = _mdev(vf)
            info["vfs"].append(entry)
        gpus[dev.name] = info
    layout = "vfio" if "vfio" in layouts else "mdev" if "mdev" in layouts else "none"
    return {"layout": layout, "gpus": gpus}


def _read(path: Path, *, strip: bool = True) -> str | None:
    try:
        with path.open("rb") as fh:
            data = fh.read(256 * 1024).decode("utf-8", errors="replace")
    except OSError:
        return None
    return data.strip() if strip else data


def _int(text: str | None) -> int | None:
    """A sysfs number in the digits 0-9 (``isdigit`` alone passes ``²``, which ``int`` refuses: an internal error)."""
    return int(text) if text is not None and text.isascii() and text.isdigit() else None


def _mdev(dev: Path) -> list[dict[str, Any]]:
    folder = dev / "mdev_supported_types"
    if not folder.is_dir():
        return []
    out = []
    for t in sorted(folder.iterdir())[:512]:
        out.append({"id": t.name, "name": _read(t / "name"), "available": _int(_read(t / "available_instances"))})
    return out


def _xid_lines(root: Path, dmesg: str | None) -> bytes | None:
    """Xid lines of the kernel log: ``dmesg`` when readable (often root-only), else None."""
    if dmesg is None:
        return None
    code, out, _ = _run(dmesg, (), 20)
    if code != 0:
        return None
    lines = [line for line in out.decode(errors="replace").splitlines() if "NVRM: Xid" in line]
    return ("\n".join(lines) + "\n").encode() if lines else b""


def write_bundle(
    out: Path,
    *,
    root: Path = Path("/"),
    nvidia_smi: str = "nvidia-smi",
    dmesg: str | None = "dmesg",
    timeout_s: float = 30.0,
    doctor: bool = True,
) -> dict[str, Any]:
    """Run the probe and write the bundle to ``out`` (a new folder, or ``.tar.gz``); returns the manifest."""
    import shutil

    tar = out.name.endswith((".tar.gz", ".tgz"))
    if not root.is_dir():
        raise InputError("directory not found", where=f"--root {root}", fix="give the host's root folder (default /)")
    if out.exists():
        raise InputError("already exists", where=str(out), fix="give a new folder or .tar.gz name")
    if not out.parent.is_dir():
        raise InputError("folder does not exist", where=str(out.parent), fix="create it first")
    exe = shutil.which(nvidia_smi) or nvidia_smi
    files: dict[str, bytes] = {}
    ran: dict[str, Any] = {}
    for name, args in PROBE_COMMANDS.items():
        code, data, err = _run(exe, args, timeout_s)
        ran[name] = {"args": ["nvidia-smi", *args], "exit": code, **({"stderr": err} if err and code else {})}
        if code is not None:
            files[name] = data
    driver = None
    if ran["nvidia-smi-q.xml"]["exit"] == 0:
        match = re.search(rb"<driver_version>([^<]{1,32})</driver_version>", files["nvidia-smi-q.xml"])
        driver = match.group(1).decode(errors="replace") if match else None
    if driver is None and ran["nvidia-smi-q.txt"]["exit"] == 0:  # no -q -x: the plain -q says it too
        match = re.search(rb"Driver Version\s*:\s*([0-9][0-9.]{0,31})", files["nvidia-smi-q.txt"])
        driver = match.group(1).decode() if match else None
    files[SYSFS_FILE] = json.dumps(sysfs_layout(root), indent=1, sort_keys=True).encode()
    xid = _xid_lines(root, dmesg)
    if xid is not None:
        files[XID_FILE] = xid
    if doctor:
        files[DOCTOR_FILE] = _doctor_capture(root)
    manifest = {
        "bundle_version": BUNDLE_VERSION,
        "created": time.time(),
        "driver_version": driver,
        "vgpu_layout": json.loads(files[SYSFS_FILE])["layout"],
        "commands": ran,
        "kernel_log": "dmesg" if xid is not None else "not readable (run as root for Xid lines)",
    }
    files[PROBE_MANIFEST] = json.dumps(manifest, indent=1, sort_keys=True).encode()
    if tar:
        with tarfile.open(out, "w:gz") as archive:
            for name, data in sorted(files.items()):
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
                archive.addfile(info, io.BytesIO(data))
    else:
        out.mkdir()
        for name, data in files.items():
            (out / name).write_bytes(data)
    return manifest


def _doctor_capture(root: Path) -> bytes:
    """The doctor's record of the /proc and /sys files it read, as a .tar.gz (root-relative)."""
    import tempfile

    from gpuseat.doctor import diagnose

    _report, view = diagnose(root, None)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "capture.tar.gz"
        view.write_capture(path)
        return path.read_bytes()


# -- reading ---------------------------------------------------------------------------------------


def read_bundle(path: Path) -> Bundle:
    """A bundle folder or ``.tar.gz``; members are read into memory, never extracted."""
    where = str(path)
    files: dict[str, bytes] = {}
    if path.is_dir():
        for member in sorted(path.iterdir())[: MAX_MEMBERS + 1]:
            if len(files) >= MAX_MEMBERS:
                raise InputError("too many files", where=where, fix="give a bundle written by gpuseat probe")
            if member.is_file() and not member.is_symlink() and _NAME.fullmatch(member.name):
                if member.stat().st_size > PROBE_MAX_MEMBER_BYTES:
                    raise InputError(f"{member.name} is too large", where=where, fix="give a probe bundle")
                files[member.name] = member.read_bytes()
    elif path.is_file():
        try:
            with tarfile.open(path, "r:*") as archive:
                for info in archive.getmembers()[: MAX_MEMBERS + 1]:
                    name = info.name.removeprefix("./")
                    if not info.isfile() or not _NAME.fullmatch(name):
                        continue  # only plain files at the top: no folders, links, devices or ../ names
                    if info.size > PROBE_MAX_MEMBER_BYTES:
                        raise InputError(f"{name} is too large", where=where, fix="give a probe bundle")
                    handle = archive.extractfile(info)
                    if handle is not None:
                        files[name] = handle.read(PROBE_MAX_MEMBER_BYTES)
        except (tarfile.TarError, OSError) as exc:
            raise InputError(
                f"not a probe bundle: {exc}", where=where, fix="give the folder or .tar.gz of gpuseat probe"
            ) from None
    else:
        raise InputError("not found", where=where, fix="give the folder or .tar.gz written by gpuseat probe")
    try:
        manifest = json.loads(files.get(PROBE_MANIFEST, b"{}").decode())
    except ValueError:
        raise InputError(
            f"{PROBE_MANIFEST} is not JSON", where=where, fix="give a bundle written by gpuseat probe"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("bundle_version") != BUNDLE_VERSION:
        raise InputError(
            f"no {PROBE_MANIFEST} with bundle_version {BUNDLE_VERSION}",
            where=where,
            fix="write the bundle with `gpuseat probe OUT` on the host",
        )
    return Bundle(where, files, manifest)


def snapshot(bundle: Bundle) -> Snapshot:
    """What the bundle's prints say about the GPUs: -q -x (or -q), -L names and UUIDs, -lgi/-lci, the table."""
    from gpuseat import nvsmi, nvsmi_mig, nvsmi_text
    from gpuseat.core.listing import parse_list

    xml = bundle.text("nvidia-smi-q.xml")
    if xml is not None:
        snap = nvsmi.parse_xml(xml, host="probe", where=f"{bundle.where}: nvidia-smi-q.xml")
    elif (q := bundle.text("nvidia-smi-q.txt")) is not None:
        snap = nvsmi_text.parse_q_text(q, host="probe", where=f"{bundle.where}: nvidia-smi-q.txt")
    else:
        raise InputError("the bundle has no nvidia-smi -q output", where=bundle.where, fix="probe a host with a driver")
    if (listing := bundle.text("nvidia-smi-L.txt")) is not None:
        snap = nvsmi.merge_list(snap, parse_list(listing))
    gis = nvsmi_mig.parse_lgi(bundle.text("mig-lgi.txt") or "")
    rows = nvsmi_mig.parse_lgip(bundle.text("mig-lgip.txt") or "")
    if (table := bundle.text("nvidia-smi.txt")) is not None:
        snap = nvsmi_text.merge_table(snap, table)
    if gis or rows:  # after the table: it adds the GI ids and SM counts the driver's names are matched by
        snap = nvsmi_mig.name_from_instances(snap, gis, nvsmi_mig.parse_lci(bundle.text("mig-lci.txt") or ""), rows)
    return snap


def profile_table(bundle: Bundle, model_id: str, catalog: Catalog) -> tuple[Any, tuple[Any, ...]] | None:
    """The GPU's MIG table as the driver prints it (``-lgip`` + ``-lgipp``), as catalog rows; None without."""
    from gpuseat.catalog.partitions import MigGpu, MigProfile
    from gpuseat.nvsmi_mig import parse_lgip, parse_lgipp

    rows = [r for r in parse_lgip(bundle.text("mig-lgip.txt") or "") if r.gpu == 0]
    places = parse_lgipp(bundle.text("mig-lgipp.txt") or "")
    if not rows or not places:
        return None
    today = time.strftime("%Y-%m-%d")
    source = f"probe bundle {bundle.where}: nvidia-smi mig -lgip/-lgipp, driver {bundle.driver_version or '?'}"
    profiles = []
    for r in rows:
        starts, size = places.get((r.gpu, r.profile_id), ((), 0))
        compute = re.match(r"^([0-9]+)g\.", r.name)  # not \d: a name of other digits (١g.٢٤gb) is no profile
        memory = re.search(r"\.([0-9]+)gb", r.name)
        if not starts or not compute or not memory:
            continue
        profiles.append(
            MigProfile(
                gpu=model_id,
                name=r.name,
                gi_id=r.profile_id,
                memory_slices=size,
                compute_slices=int(compute.group(1)),
                starts=starts,
                max_count=r.total,
                memory_gb=float(memory.group(1)),
                usable_gb=r.memory_gib,
                copy_engines=r.copy_engines,
                source=source,
                as_of=today,
            )
        )
    if not profiles:
        return None
    old = catalog.partitions.mig_gpus.get(model_id)
    gpu = MigGpu(
        gpu=model_id,
        memory_slices=max(p.memory_slices for p in profiles),
        compute_slices=max(p.compute_slices for p in profiles),
        device_ids=old.device_ids if old else (),
        source=source,
        as_of=today,
    )
    return gpu, tuple(profiles)


_TYPE = re.compile(r"^(?:\d+\s+)?(?:NVIDIA\s+|GRID\s+)?(?P<name>[A-Za-z0-9][A-Za-z0-9-]*)$")


def vgpu_type_name(text: str) -> str | None:
    """``1155 NVIDIA L40S-24Q`` (a ``creatable_vgpu_types`` line as probed) or ``GRID M60-8Q`` → the
    catalog's type name (``L40S-24Q``, ``M60-8Q``); None for anything else."""
    match = _TYPE.match(text.strip())
    return match["name"] if match else None


def offered_vgpu_types(bundle: Bundle) -> tuple[str, ...] | None:
    """The vGPU type names the host offers now, from the bundle's sysfs layout: the VFs'
    ``nvidia/creatable_vgpu_types`` (vendor-specific VFIO, vGPU 17+) or mdev types with an instance
    left. None when the probe saw no vGPU layout (nothing is known, so nothing is restricted)."""
    data = bundle.files.get(SYSFS_FILE)
    try:
        doc = json.loads(data.decode()) if data else {}
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("layout") not in ("vfio", "mdev") or not isinstance(doc.get("gpus"), dict):
        return None  # no vGPU layout recorded (or not one gpuseat wrote): nothing is known, nothing restricted

    def listed(holder: dict[str, Any], key: str) -> list[Any]:
        value = holder.get(key)
        return value if isinstance(value, list) else []

    names: list[str] = []
    for info in doc["gpus"].values():
        if not isinstance(info, dict):
            continue
        for holder in [info, *(v for v in listed(info, "vfs") if isinstance(v, dict))]:
            names += [vgpu_type_name(str(line)) or "" for line in listed(holder, "creatable")]
            names += [
                vgpu_type_name(str(m.get("name") or "")) or ""
                for m in listed(holder, "mdev_types")
                if isinstance(m, dict) and m.get("available") != 0
            ]
    return tuple(dict.fromkeys(n for n in names if n))


def plan_inputs(bundle: Bundle, catalog: Catalog) -> tuple[Server, Catalog, list[str]]:
    """The server of the bundle and a catalog whose MIG table for it is the driver's own, plus notes."""
    from gpuseat.core.inventory import server_from_snapshot
    from gpuseat.nvsmi import name_mig_profiles
    from gpuseat.services.carving import live_mig_notes

    snap = snapshot(bundle)
    if any(m.profile is None for g in snap.gpus for m in g.mig):  # the driver's tables left some unnamed
        snap = name_mig_profiles(snap, catalog)
    server = server_from_snapshot(snap, catalog, where=bundle.where)
    notes = live_mig_notes(server)
    table = profile_table(bundle, server.gpu.id, catalog)
    if table is not None:
        gpu, profiles = table
        parts = catalog.partitions.model_copy(
            update={
                "mig_gpus": {**catalog.partitions.mig_gpus, server.gpu.id: gpu},
                "mig_profiles": {**catalog.partitions.mig_profiles, server.gpu.id: profiles},
            }
        )
        catalog = dataclasses.replace(catalog, partitions=parts)
        notes.append(
            f"MIG profiles from the driver's own table in {bundle.where} (driver {bundle.driver_version or '?'})"
        )
    elif server.gpu.mig:
        notes.append(f"{bundle.where} has no mig -lgip/-lgipp (MIG off?): MIG profiles from the catalog")
    offered = offered_vgpu_types(bundle)
    if offered is not None and server.gpu.vgpu:
        parts = catalog.partitions.model_copy(
            update={"vgpu_offered": {**catalog.partitions.vgpu_offered, server.gpu.id: offered}}
        )
        catalog = dataclasses.replace(catalog, partitions=parts)
        series = sorted({m[1] for n in offered if (m := re.search(r"\d([QBAC])\d*$", n))})
        notes.append(
            f"vGPU types: only those the host offers now ({bundle.vgpu_layout} sysfs in {bundle.where}:"
            f" {len(offered)} types, series {', '.join(series) or 'none'})"
        )
    return server, catalog, notes


def doctor_root(bundle: Bundle, into: Path) -> Path:
    """Unpack the bundle's doctor capture into ``into`` (only folders, files and in-tree links) for ``doctor``."""
    data = bundle.files.get(DOCTOR_FILE)
    if data is None:
        raise InputError(f"the bundle has no {DOCTOR_FILE}", where=bundle.where, fix="probe again without --no-doctor")
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            archive.extractall(into, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise InputError(f"{DOCTOR_FILE} is broken: {exc}", where=bundle.where, fix="probe the host again") from None
    return into
