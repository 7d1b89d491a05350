"""The only module that talks to libvirt (libvirt-python): domains, storage volumes, addresses.

Every libvirt failure leaves here as an :class:`~gpuseat.errors.EngineError` that names the seat (or
the connection) and says how to fix it; the messages of the common failures (no VFIO, no IOMMU, a
missing mediated device, a base image libvirt cannot read) get a specific fix.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

from gpuseat.engines.libvirt.domain import DomainOwner, owner
from gpuseat.errors import EngineError, InputError, MissingDependency

#: libvirt's virDomainState numbers → the words ``vms status`` shows
DOMAIN_STATES = {0: "no state", 1: "running", 2: "blocked", 3: "paused", 4: "shutting down", 5: "shut off",
                 6: "crashed", 7: "suspended"}  # fmt: skip

# (what libvirt says, how to fix it): the first match gives the fix of a failed start.
_FIXES: tuple[tuple[str, str], ...] = (
    ("VFIO", "the host has no working VFIO: enable the IOMMU (intel_iommu=on / amd_iommu=on), load vfio-pci "
             "and reboot; `gpuseat doctor --for passthrough` on the host lists each step"),
    ("passthrough of host PCI devices", "the host cannot pass PCI devices through (no IOMMU or no KVM): "
             "`gpuseat doctor --for passthrough` on the host lists what to change"),
    ("IOMMU", "enable the IOMMU in the BIOS and on the kernel command line; see `gpuseat doctor --for passthrough`"),
    ("mediated device", "create the vGPU first: run the mdev-create.sh that `gpuseat carve --render libvirt` "
             "wrote, then `gpuseat doctor --for vgpu`"),
    ("mdev", "create the vGPU first: run carve's mdev-create.sh, then `gpuseat doctor --for vgpu`"),
    ("KVM is not available", "use --virt-type qemu (TCG, slow) or enable KVM on the host (`gpuseat doctor`)"),
    ("Permission denied", "libvirt's QEMU user cannot read a file: put the image under the storage pool's folder"),
    ("No such file", "a file the domain names does not exist on the host: check --image and the pool folder"),
)  # fmt: skip


def libvirt_fix(message: str) -> str:
    """The fix for a libvirt error message (a general one when no known pattern matches)."""
    for pattern, fix in _FIXES:
        if pattern.lower() in message.lower():
            return fix
    return "read libvirt's message above; `virsh -c URI dumpxml NAME` shows the domain gpuseat defined"


@dataclass(frozen=True)
class Address:
    """A guest's IP address and where libvirt learnt it (``lease`` from DHCP, ``agent`` from the guest agent)."""

    ip: str
    source: str


class LibvirtHost:
    """One libvirt connection (``test:///default``, ``qemu:///system``, ``qemu+ssh://host/system``)."""

    def __init__(self, uri: str) -> None:
        try:
            import libvirt
        except ImportError:
            raise MissingDependency(
                "libvirt-python is not installed", fix="pip install 'gpuseat[engines]' (needs libvirt-dev)"
            ) from None
        self.lv = libvirt
        self.uri = uri
        parsed = urllib.parse.urlsplit(uri)
        if not parsed.scheme or not parsed.scheme.replace("+", "").replace("-", "").isalnum():
            raise InputError(f"'{uri}' is not a libvirt URI", where="--connect", fix="e.g. qemu:///system")
        self.driver = parsed.scheme.split("+")[0]
        self.remote_host = parsed.hostname
        libvirt.registerErrorHandler(lambda _ctx, _err: None, None)  # errors come back as exceptions only
        try:
            self.conn = libvirt.open(uri)
        except libvirt.libvirtError as exc:
            raise EngineError(
                f"cannot connect to libvirt: {exc.get_error_message()}",
                where=f"--connect {uri}",
                fix="start libvirtd (or virtqemud) on the host; for a remote host check `virsh -c URI list`",
            ) from None

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    def __enter__(self) -> LibvirtHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def is_test_driver(self) -> bool:
        """libvirt's mock driver: nothing real starts, storage uploads are not supported."""
        return self.driver == "test"

    # -- domains -----------------------------------------------------------------------------------

    def domains(self) -> Iterator[tuple[Any, DomainOwner | None]]:
        """Every domain on the host with its gpuseat owner (None for domains gpuseat did not create)."""
        for dom in self.conn.listAllDomains(0):
            yield dom, owner(dom.XMLDesc(self.lv.VIR_DOMAIN_XML_INACTIVE))

    def owned(self, course: str) -> dict[str, Any]:
        """The course's gpuseat domains by seat key."""
        return {who.seat: dom for dom, who in self.domains() if who is not None and who.course == course}

    def lookup(self, name: str) -> Any | None:
        """The domain called ``name``, or None."""
        try:
            return self.conn.lookupByName(name)
        except self.lv.libvirtError as exc:
            if exc.get_error_code() == self.lv.VIR_ERR_NO_DOMAIN:
                return None
            raise self._error(exc, "looking up a domain", name) from None

    def inactive_xml(self, dom: Any) -> str:
        """The domain's persistent definition as libvirt stores it."""
        return str(dom.XMLDesc(self.lv.VIR_DOMAIN_XML_INACTIVE))

    def define(self, xml: str, seat: str) -> Any:
        """Define (or redefine) a domain, always with libvirt's schema validation."""
        try:
            return self.conn.defineXMLFlags(xml, self.lv.VIR_DOMAIN_DEFINE_VALIDATE)
        except self.lv.libvirtError as exc:
            raise self._error(exc, "defining the VM", seat) from None

    def start(self, dom: Any, seat: str) -> None:
        """Start a defined domain (nothing when it runs already)."""
        if dom.isActive():
            return
        try:
            dom.create()
        except self.lv.libvirtError as exc:
            raise self._error(exc, "starting the VM", seat) from None

    def stop(self, dom: Any) -> None:
        """Power a domain off at once (``down`` is for the end of a course; disks stay unless asked)."""
        if dom.isActive():
            dom.destroy()

    def undefine(self, dom: Any) -> None:
        """Remove a domain's definition, its UEFI variables and its managed save image."""
        flags = self.lv.VIR_DOMAIN_UNDEFINE_NVRAM | self.lv.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
        try:
            dom.undefineFlags(flags)
        except self.lv.libvirtError:
            dom.undefine()

    def state(self, dom: Any) -> str:
        """``running``, ``shut off``, …"""
        return DOMAIN_STATES.get(dom.state()[0], "unknown")

    def addresses(self, dom: Any) -> list[Address]:
        """The guest's IPv4 addresses: DHCP leases of libvirt's network first, then the guest agent."""
        if not dom.isActive():
            return []
        sources = (
            ("lease", self.lv.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE),
            ("agent", self.lv.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT),
        )
        for label, source in sources:
            try:
                found = dom.interfaceAddresses(source, 0) or {}
            except self.lv.libvirtError:
                continue
            ips = [
                Address(a["addr"], label)
                for iface in found.values()
                for a in (iface.get("addrs") or [])
                if a.get("type") == self.lv.VIR_IP_ADDR_TYPE_IPV4 and not a["addr"].startswith("127.")
            ]
            if ips:
                return ips
        return []

    # -- storage -----------------------------------------------------------------------------------

    def pool(self, name: str, path: str | None) -> Any:
        """The storage pool ``name``; made as a directory pool at ``path`` when it does not exist."""
        try:
            pool = self.conn.storagePoolLookupByName(name)
        except self.lv.libvirtError:
            if path is None:
                raise InputError(
                    f"libvirt has no storage pool '{name}'",
                    where="--pool",
                    fix="give --pool-dir DIR to create it, or name an existing pool (`virsh pool-list --all`)",
                ) from None
            xml = f"<pool type='dir'><name>{escape(name)}</name><target><path>{escape(path)}</path></target></pool>"
            try:
                pool = self.conn.storagePoolDefineXML(xml, 0)
                pool.build(0)
                pool.setAutostart(1)
            except self.lv.libvirtError as exc:
                raise self._error(exc, f"creating storage pool {name} at {path}", None) from None
        if not pool.isActive():
            try:
                pool.create(0)
            except self.lv.libvirtError as exc:
                raise self._error(exc, f"starting storage pool {name}", None) from None
        return pool

    def find_pool(self, name: str) -> Any | None:
        """The storage pool ``name`` when it exists and is active (read-only: a plan changes nothing)."""
        try:
            pool = self.conn.storagePoolLookupByName(name)
        except self.lv.libvirtError:
            return None
        return pool if pool.isActive() else None

    def pool_path(self, pool: Any) -> str:
        """The folder of a directory pool (its ``<target><path>``)."""
        import xml.etree.ElementTree as ET

        return ET.fromstring(pool.XMLDesc(0)).findtext("target/path") or ""

    def volume(self, pool: Any, name: str) -> Any | None:
        """A volume of the pool by name, or None."""
        with contextlib.suppress(self.lv.libvirtError):
            pool.refresh(0)
        try:
            return pool.storageVolLookupByName(name)
        except self.lv.libvirtError:
            return None

    def overlay(self, pool: Any, name: str, base: str, base_format: str, capacity_gb: int, seat: str) -> str:
        """A copy-on-write qcow2 volume on ``base`` (kept when it exists: it holds the participant's work)."""
        vol = self.volume(pool, name)
        if vol is None:
            xml = (
                f"<volume><name>{escape(name)}</name><capacity unit='GiB'>{capacity_gb}</capacity>"
                "<target><format type='qcow2'/></target>"
                f"<backingStore><path>{escape(base)}</path><format type={_q(base_format)}/></backingStore>"
                "</volume>"
            )
            try:
                vol = pool.createXML(xml, 0)
            except self.lv.libvirtError as exc:
                raise self._error(exc, f"creating the disk on {base}", seat) from None
        return str(vol.path())

    def upload(self, pool: Any, name: str, data: bytes, seat: str) -> tuple[str, bool]:
        """A raw volume holding ``data``: the path, and whether the bytes are in it.

        ``name`` carries a hash of the content, so an existing volume of that name is already right
        and is left alone. libvirt's mock driver cannot upload; there the volume stays empty.
        """
        vol = self.volume(pool, name)
        if vol is not None:
            return str(vol.path()), True
        xml = (
            f"<volume><name>{escape(name)}</name><capacity unit='bytes'>{len(data)}</capacity>"
            "<target><format type='raw'/></target></volume>"
        )
        try:
            vol = pool.createXML(xml, 0)
        except self.lv.libvirtError as exc:
            raise self._error(exc, "creating the cloud-init seed volume", seat) from None
        stream = self.conn.newStream(0)
        try:
            vol.upload(stream, 0, len(data), 0)
        except self.lv.libvirtError as exc:
            if exc.get_error_code() == self.lv.VIR_ERR_NO_SUPPORT:
                return str(vol.path()), False
            vol.delete(0)
            raise self._error(exc, "uploading the cloud-init seed", seat) from None
        try:
            view = memoryview(data)
            for start in range(0, len(data), 1 << 18):
                stream.send(bytes(view[start : start + (1 << 18)]))
            stream.finish()
        except self.lv.libvirtError as exc:
            stream.abort()
            vol.delete(0)
            raise self._error(exc, "uploading the cloud-init seed", seat) from None
        return str(vol.path()), True

    def volume_names(self, pool: Any, prefix: str) -> list[str]:
        """Names of the pool's volumes that start with ``prefix``."""
        with contextlib.suppress(self.lv.libvirtError):
            pool.refresh(0)
        return sorted(n for n in pool.listVolumes() if n.startswith(prefix))

    def delete_volume(self, pool: Any, name: str) -> bool:
        """Delete a volume; whether there was one."""
        vol = self.volume(pool, name)
        if vol is None:
            return False
        vol.delete(0)
        return True

    # -- errors ------------------------------------------------------------------------------------

    def _error(self, exc: Any, doing: str, seat: str | None) -> EngineError:
        message = exc.get_error_message() or str(exc)
        return EngineError(
            f"libvirt failed {doing}: {message}",
            where=f"seat {seat} on {self.uri}" if seat else self.uri,
            fix=libvirt_fix(message),
        )


def _q(value: str) -> str:
    """An XML attribute value in single quotes (values are checked names; escape anyway)."""
    return "'" + escape(value, {"'": "&apos;"}) + "'"
