"""The probe test's guest: the boot guest's Debian kernel and busybox, plus a NIC and OpenSSH's sshd.

Its /init stands in for cloud-init on a cloud image: it reads the ``cidata`` seed gpuseat attached,
sets the seed's hostname, adds the seed's user (the participant's login) with every key of the seed's
``ssh_authorized_keys`` (the participant's and the organiser's probe key), takes a DHCP lease on the
VM's NIC from libvirt's network, starts the host's own sshd (copied in with the libraries ``ldd``
names) on port 22 and stays up until the test destroys the VM.

``nvidia-smi`` in the guest stands in for NVIDIA's: a TCG guest has no GPU, so it lists the GPU(s)
the test says were passed through to the VM of this seat (``gpus``: seat key → device UUIDs, read by
the hostname gpuseat's seed gave the VM), in the driver's ``nvidia-smi -L`` format. A real cloud
image on a passthrough seat sees the GPU itself.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from .conftest import require_tool
from .guest import MODULES, build_initramfs

NET_MODULES = (*MODULES, "virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
               "failover", "net_failover", "virtio_net")  # fmt: skip
MARKER = "GPUSEAT-SSH"

INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in MODULES; do insmod /lib/modules/$m.ko; done
i=0
while { [ ! -b /dev/sr0 ] || [ ! -e /sys/class/net/eth0 ]; } && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
mount -t iso9660 -o ro /dev/sr0 /mnt || echo "MARKER-ERROR no cidata CD-ROM"
host=$(awk '/^local-hostname:/ {print $2}' /mnt/meta-data)
user=$(awk '/^- name:/ {print $3; exit}' /mnt/user-data)
hostname "$host"
echo "$user:*:1000:1000::/home/$user:/bin/sh" >> /etc/passwd
echo "$user:x:1000:" >> /etc/group
mkdir -p "/home/$user/.ssh"
awk '/^  ssh_authorized_keys:/ {on=1; next} on && /^  - / {print $2, $3; next} on {exit}' /mnt/user-data \
  > "/home/$user/.ssh/authorized_keys"
chmod 700 "/home/$user/.ssh"
chmod 600 "/home/$user/.ssh/authorized_keys"
chown -R 1000:1000 "/home/$user"
grep "^$host " /etc/gpuseat-gpus | cut -d' ' -f2- | tr ' ' '\n' | grep . > /run/gpus
ip link set lo up
ip link set eth0 up
udhcpc -i eth0 -s /etc/udhcpc.sh -t 30 -T 2 -n -q >/dev/null 2>&1 || echo "MARKER-ERROR no DHCP lease"
mkdir -p /run/sshd
chmod 755 /run/sshd
/usr/sbin/sshd -D -e -f /etc/ssh/sshd_config &
echo "MARKER up hostname=$host user=$user keys=$(wc -l < /home/$user/.ssh/authorized_keys) ip=$(ip -4 -o addr show eth0 | awk '{print $4}')"
while :; do sleep 3600; done
""".replace("MODULES", " ".join(NET_MODULES)).replace("MARKER", MARKER)

# The hand-over guest: like INIT, but its accounts live on the VM's disk (/dev/vda, the first 4 KiB as
# text lines ``AUTH <user> <key type> <key>``), as a cloud image's do: at each boot the seed's user and
# keys are *added* to the accounts already on the disk (cloud-init never removes a former user), every
# account on the disk gets its keys, and the guest prints which users the disk held before this boot.
DISK_MODULES = (*NET_MODULES, "virtio_blk")
DISK_INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in MODULES; do insmod /lib/modules/$m.ko; done
i=0
while { [ ! -b /dev/sr0 ] || [ ! -b /dev/vda ] || [ ! -e /sys/class/net/eth0 ]; } && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
mount -t iso9660 -o ro /dev/sr0 /mnt || echo "MARKER-ERROR no cidata CD-ROM"
[ -b /dev/vda ] || echo "MARKER-ERROR no disk"
host=$(awk '/^local-hostname:/ {print $2}' /mnt/meta-data)
user=$(awk '/^- name:/ {print $3; exit}' /mnt/user-data)
hostname "$host"
dd if=/dev/vda bs=4096 count=1 2>/dev/null | tr -d '\000' | grep '^AUTH ' > /tmp/auth
before=$(awk '{print $2}' /tmp/auth | sort -u | paste -sd, -)
awk '/^  ssh_authorized_keys:/ {on=1; next} on && /^  - / {print $2, $3; next} on {exit}' /mnt/user-data > /tmp/seed
while read t k; do grep -q " $k\$" /tmp/auth || echo "AUTH $user $t $k" >> /tmp/auth; done < /tmp/seed
dd if=/tmp/auth of=/dev/vda bs=4096 count=1 conv=sync,notrunc 2>/dev/null
sync
uid=1000
for u in $(awk '{print $2}' /tmp/auth | sort -u); do
  echo "$u:*:$uid:$uid::/home/$u:/bin/sh" >> /etc/passwd
  echo "$u:x:$uid:" >> /etc/group
  mkdir -p "/home/$u/.ssh"
  awk -v u="$u" '$2 == u {print $3, $4}' /tmp/auth > "/home/$u/.ssh/authorized_keys"
  chmod 700 "/home/$u/.ssh"
  chmod 600 "/home/$u/.ssh/authorized_keys"
  chown -R $uid:$uid "/home/$u"
  uid=$((uid+1))
done
grep "^$host " /etc/gpuseat-gpus | cut -d' ' -f2- | tr ' ' '\n' | grep . > /run/gpus
ip link set lo up
ip link set eth0 up
udhcpc -i eth0 -s /etc/udhcpc.sh -t 30 -T 2 -n -q >/dev/null 2>&1 || echo "MARKER-ERROR no DHCP lease"
mkdir -p /run/sshd
chmod 755 /run/sshd
/usr/sbin/sshd -D -e -f /etc/ssh/sshd_config &
echo "MARKER up hostname=$host user=$user disk=$before accounts=$(awk '{print $2}' /tmp/auth | sort -u | paste -sd, -)"
while :; do sleep 3600; done
""".replace("MODULES", " ".join(DISK_MODULES)).replace("MARKER", MARKER)

UDHCPC = """#!/bin/sh
case "$1" in bound|renew) ip addr flush dev "$interface"; ip addr add "$ip/$mask" dev "$interface" ;; esac
"""

NVIDIA_SMI = """#!/bin/sh
# stands in for NVIDIA's `nvidia-smi -L` on the GPU(s) passed through to this VM (see ssh_guest.py)
i=0
for uuid in $(cat /run/gpus); do echo "GPU $i: Tesla M60 (UUID: $uuid)"; i=$((i+1)); done
"""

SSHD_CONFIG = """Port 22
HostKey /etc/ssh/ssh_host_ed25519_key
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AuthorizedKeysFile .ssh/authorized_keys
StrictModes yes
UseDNS no
PidFile /run/sshd.pid
"""


def _libraries(binary: str) -> list[Path]:
    """The shared libraries (and the loader) ``ldd`` says the binary needs."""
    out = subprocess.run([require_tool("ldd"), binary], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if path.startswith("/"):
            found.append(Path(path))
    return found


def build(out: Path, gpus: Mapping[str, Sequence[str]], *, disk: bool = False) -> Path:
    """The initramfs (gzipped newc cpio) of the SSH guest; ``gpus``: seat key → UUIDs its stand-in lists;
    ``disk``: the hand-over guest whose accounts live on the VM's disk (``DISK_INIT``)."""
    sshd = require_tool("sshd")
    keygen = require_tool("ssh-keygen")
    hostkey = out.parent / f"{out.name}-hostkey"
    hostkey.unlink(missing_ok=True)
    subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)], check=True)
    files: dict[str, Path | str] = {
        "/usr/sbin/sshd": Path(sshd),
        "/etc/ssh/sshd_config": SSHD_CONFIG,
        "/etc/ssh/ssh_host_ed25519_key": hostkey,
        "/etc/passwd": "root:x:0:0:root:/root:/bin/sh\nsshd:x:100:65534::/run/sshd:/usr/sbin/nologin\n",
        "/etc/group": "root:x:0:\nnogroup:x:65534:\n",
        "/etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\n",
        "/etc/udhcpc.sh": UDHCPC,
        "/usr/bin/nvidia-smi": NVIDIA_SMI,
        "/etc/gpuseat-gpus": "".join(f"{seat} {' '.join(uuids)}\n" for seat, uuids in gpus.items()),
        "/run/.keep": "",
        "/root/.keep": "",
    }
    files.update({str(lib): lib for lib in _libraries(sshd)})
    init, modules = (DISK_INIT, DISK_MODULES) if disk else (INIT, NET_MODULES)
    return build_initramfs(out, init_text=init, modules=modules, files=files)
