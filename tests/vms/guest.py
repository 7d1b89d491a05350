"""The boot test's guest: a Debian kernel (fetched by scripts/setup.sh) and a busybox initramfs built here.

Both are handed to QEMU uncompressed: the kernel as the ELF inside Debian's bzImage (QEMU boots it
through its PVH entry), the initramfs as a plain cpio. Under TCG a boot spent about 4 s in the bzImage's
xz decompressor and about 1.5 s gunzipping the initramfs, of 5 to 10 s in all; every VM test boots
guests, several of them more than once.

The initramfs stands in for cloud-init: its /init loads the modules that read the SATA CD-ROM, mounts
the ``cidata`` seed gpuseat attached, and prints one line on the serial console with the seed's
hostname and the SHA256 fingerprint of the first authorized key (computed in the guest with busybox's
base64/sha256sum/xxd, as ``ssh-keygen -lf`` would), then powers off.
"""

from __future__ import annotations

import lzma
import os
import shutil
import struct
import subprocess
from collections.abc import Mapping
from pathlib import Path

from .conftest import require_tool

ROOT = Path(__file__).resolve().parents[2]
GUEST = ROOT / ".cache" / "vms-guest"
MODULES = ("scsi_common", "scsi_mod", "libata", "libahci", "ahci", "cdrom", "sr_mod", "isofs")
MARKER = "GPUSEAT-SEED"

INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in MODULES; do insmod /lib/modules/$m.ko; done
i=0
while [ ! -b /dev/sr0 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
mount -t iso9660 -o ro /dev/sr0 /mnt || echo "MARKER-ERROR no cidata CD-ROM"
label=$(dd if=/dev/sr0 bs=1 skip=32808 count=32 2>/dev/null | tr -d ' ')
host=$(awk '/^local-hostname:/ {print $2}' /mnt/meta-data)
key=$(awk '/^  ssh_authorized_keys:/ {getline; print $3; exit}' /mnt/user-data)
fp=$(echo "$key" | base64 -d | sha256sum | cut -d' ' -f1 | xxd -r -p | base64 | tr -d '=')
echo "MARKER label=$label hostname=$host fingerprint=SHA256:$fp"
poweroff -f
""".replace("MODULES", " ".join(MODULES)).replace("MARKER", MARKER)


def kernel(copy_to: Path | None = None) -> Path:
    """The cached Debian kernel, as its uncompressed ELF (:func:`elf_kernel`); missing, it fails on CI and
    skips elsewhere.

    ``copy_to`` (a folder QEMU's user can reach) gets a copy: the checkout itself may sit under a
    private folder (``mktemp -d`` is 0700) that libvirt's QEMU user cannot traverse.
    """
    path = GUEST / "vmlinuz"
    if not path.exists():
        require_tool("gpuseat-guest-kernel (run scripts/setup.sh)")
    path = elf_kernel(path)
    if copy_to is not None:
        target = copy_to / path.name
        shutil.copy(path, target)
        os.chmod(target, 0o644)
        return target
    return path


def elf_kernel(bzimage: Path) -> Path:
    """The ELF kernel inside ``bzimage`` (its xz payload), kept next to it as ``vmlinux``; ``bzimage`` itself
    when the payload is not xz or the ELF has no PVH entry (QEMU boots an ELF kernel only through that)."""
    elf = bzimage.with_name("vmlinux")
    if elf.exists() and elf.stat().st_mtime >= bzimage.stat().st_mtime:
        return elf
    data = bzimage.read_bytes()
    setup_sects = data[0x1F1] or 4  # the boot protocol's header: the payload follows the real-mode setup
    start = (setup_sects + 1) * 512 + int.from_bytes(data[0x248:0x24C], "little")
    payload = data[start : start + int.from_bytes(data[0x24C:0x250], "little")]
    if not payload.startswith(b"\xfd7zXZ\x00"):
        return bzimage
    image = lzma.LZMADecompressor(lzma.FORMAT_XZ).decompress(payload)  # the payload ends with its size: ignored
    if not _has_pvh_entry(image):
        return bzimage
    partial = elf.with_name(f"vmlinux.{os.getpid()}")  # xdist workers may write it at once: each its own, renamed
    partial.write_bytes(image)
    partial.replace(elf)
    return elf


def _has_pvh_entry(image: bytes) -> bool:
    """Whether ELF64 ``image`` has the Xen PVH entry note (``XEN_ELFNOTE_PHYS32_ENTRY``, type 18)."""
    if not image.startswith(b"\x7fELF\x02\x01"):  # 64-bit, little-endian
        return False
    (phoff,) = struct.unpack_from("<Q", image, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", image, 0x36)
    for i in range(phnum):
        kind, _flags, offset, _vaddr, _paddr, size = struct.unpack_from("<IIQQQQ", image, phoff + i * phentsize)
        if kind != 4:  # PT_NOTE
            continue
        at, end = offset, offset + size
        while at + 12 <= end:
            namesz, descsz, note = struct.unpack_from("<III", image, at)
            if image[at + 12 : at + 12 + namesz] == b"Xen\x00" and note == 18:
                return True
            at += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


# The hand-over guest: its /init stands in for cloud-init and sshd on a persistent disk. Like
# cloud-init on a new instance id, it adds the seed's user and key to the accounts already on the disk
# (cloud-init never removes a former user), keeps them on the VM's disk (/dev/vda, the first 4 KiB as
# text lines ``AUTH <user> <fingerprint>``), and prints what was on the disk before and every key the
# guest now accepts, then powers off.
DISK_MODULES = (*MODULES, "virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
                "virtio_blk")  # fmt: skip
HOLDER = "GPUSEAT-HOLDER"
HOLDER_INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in MODULES; do insmod /lib/modules/$m.ko; done
i=0
while { [ ! -b /dev/sr0 ] || [ ! -b /dev/vda ]; } && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
mount -t iso9660 -o ro /dev/sr0 /mnt || echo "MARKER-ERROR no cidata CD-ROM"
[ -b /dev/vda ] || echo "MARKER-ERROR no disk"
user=$(awk '/^- name:/ {print $3; exit}' /mnt/user-data)
key=$(awk '/^  ssh_authorized_keys:/ {getline; print $3; exit}' /mnt/user-data)
fp=SHA256:$(echo "$key" | base64 -d | sha256sum | cut -d' ' -f1 | xxd -r -p | base64 | tr -d '=')
dd if=/dev/vda bs=4096 count=1 2>/dev/null | tr -d '\000' | grep '^AUTH ' > /tmp/auth
echo "MARKER disk=$(awk '{print $3}' /tmp/auth | paste -sd, -)"
grep -q " $fp\$" /tmp/auth || echo "AUTH $user $fp" >> /tmp/auth
dd if=/tmp/auth of=/dev/vda bs=4096 count=1 conv=sync,notrunc 2>/dev/null
sync
echo "MARKER accepts=$(awk '{print $3}' /tmp/auth | paste -sd, -)"
poweroff -f
""".replace("MODULES", " ".join(DISK_MODULES)).replace("MARKER", HOLDER)


def build_initramfs(
    out: Path,
    *,
    init_text: str = INIT,
    modules: tuple[str, ...] = MODULES,
    files: Mapping[str, Path | str] | None = None,
) -> Path:
    """A newc cpio (uncompressed: see the module's docstring) with static busybox, the guest modules and an /init
    (the seed printer above).

    ``files`` adds more: a path in the guest → a host file to copy (its mode kept) or a text (a
    script, starting with ``#!``, is made executable).
    """
    busybox = Path(require_tool("busybox"))
    cpio = require_tool("cpio")
    tree = out.parent / f"{out.name}-tree"
    for d in ("bin", "dev", "proc", "sys", "mnt", "tmp", "lib/modules"):
        (tree / d).mkdir(parents=True, exist_ok=True)
    for where, what in (files or {}).items():
        target = tree / where.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(what, Path):
            shutil.copy(what, target)
        else:
            target.write_text(what)
            target.chmod(0o755 if what.startswith("#!") else 0o644)
    shutil.copy(busybox, tree / "bin" / "busybox")
    for m in modules:
        if not (GUEST / "modules" / f"{m}.ko").exists():
            require_tool(f"guest kernel module {m} (re-run scripts/setup.sh)")
        shutil.copy(GUEST / "modules" / f"{m}.ko", tree / "lib" / "modules" / f"{m}.ko")
    init = tree / "init"
    init.write_text(init_text)
    init.chmod(0o755)
    for d in (tree, *(p for p in tree.rglob("*") if p.is_dir())):
        d.chmod(0o1777 if d == tree / "tmp" else 0o755)  # whatever the test's umask: users need /bin
    names = sorted(str(p.relative_to(tree)) for p in tree.rglob("*"))
    proc = subprocess.run(
        [cpio, "-o", "-H", "newc", "--quiet"],
        input="\n".join(names).encode(),
        cwd=tree,
        capture_output=True,
        check=True,
    )
    out.write_bytes(proc.stdout)
    os.chmod(out, 0o644)
    return out
