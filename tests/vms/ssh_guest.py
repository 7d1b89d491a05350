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

import re
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
read -r flags < /etc/ssh/sshd_flags
/usr/sbin/sshd -D -e $flags -f /etc/ssh/sshd_config &
echo "MARKER up hostname=$host user=$user keys=$(wc -l < /home/$user/.ssh/authorized_keys) ip=$(ip -4 -o addr show eth0 | awk '{print $4}')"
while :; do sleep 3600; done
""".replace("MODULES", " ".join(NET_MODULES)).replace("MARKER", MARKER)

# The hand-over guest: like INIT, but its accounts live on the VM's disk, as a cloud image's do: /etc/passwd,
# /etc/shadow, /etc/group, /home and cloud-init's per-instance marks, as a tar at the start of /dev/vda (a
# fresh disk has none). Like cloud-init's init stage it runs the seed's ``bootcmd`` at each boot (through a
# stand-in ``cloud-init-per``, once per instance id, and a stand-in ``usermod --expiredate``) and then, on a
# new instance id, adds the seed's user (when new, with the seed's GECOS) and *adds* the seed's keys to the
# ones the account has (cloud-init never removes a former user nor a key). sshd (UsePAM no) refuses an
# account whose shadow entry has expired. It prints which users the disk held before this boot.
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
iid=$(awk '/^instance-id:/ {print $2}' /mnt/meta-data)
user=$(awk '/^- name:/ {print $3; exit}' /mnt/user-data)
hostname "$host"
dd if=/dev/vda bs=1M count=4 2>/dev/null | tar -x -f - -C / 2>/dev/null
awk -F: '$3 >= 1000 {print $1, $3, $4, $6}' /etc/passwd | while read u id gid h; do chown -R "$id:$gid" "$h"; done
before=$(awk -F: '$3 >= 1000 {print $1}' /etc/passwd | sort | paste -sd, -)
awk '/^bootcmd:/ {on=1; next} on && /^[^ -]/ {exit} on {sub(/^-? *- /, ""); print}' /mnt/user-data > /tmp/bootcmd
q="'"
set --
while IFS= read -r item; do
  case "$item" in "$q"*"$q") item="${item#"$q"}"; item="${item%"$q"}" ;; esac
  set -- "$@" "$item"
done < /tmp/bootcmd
if [ $# -gt 0 ]; then "$@" || echo "MARKER-ERROR bootcmd failed"; fi
if [ ! -e "/var/lib/cloud/sem/users.$iid" ]; then
  if ! grep -q "^$user:" /etc/passwd; then
    uid=$(awk -F: 'BEGIN {n = 999} $3 > n && $3 < 60000 {n = $3} END {print n + 1}' /etc/passwd)
    gecos=$(awk '/^  gecos: / {sub(/^  gecos: /, ""); print; exit}' /mnt/user-data)
    echo "$user:*:$uid:$uid:$gecos:/home/$user:/bin/sh" >> /etc/passwd
    echo "$user:x:$uid:" >> /etc/group
    echo "$user:*:19000:0:99999:7:::" >> /etc/shadow
  fi
  id=$(awk -F: -v u="$user" '$1 == u {print $3}' /etc/passwd)
  mkdir -p "/home/$user/.ssh"
  touch "/home/$user/.ssh/authorized_keys"
  awk '/^  ssh_authorized_keys:/ {on=1; next} on && /^  - / {print $2, $3; next} on {exit}' /mnt/user-data |
    while read t k; do grep -q " $k\$" "/home/$user/.ssh/authorized_keys" || echo "$t $k" >> "/home/$user/.ssh/authorized_keys"; done
  chmod 700 "/home/$user/.ssh"
  chmod 600 "/home/$user/.ssh/authorized_keys"
  chown -R "$id:$id" "/home/$user"
  mkdir -p /var/lib/cloud/sem
  touch "/var/lib/cloud/sem/users.$iid"
fi
chmod 600 /etc/shadow
(cd / && tar -c -f - etc/passwd etc/shadow etc/group home var/lib/cloud) | dd of=/dev/vda bs=1M conv=notrunc 2>/dev/null
sync
grep "^$host " /etc/gpuseat-gpus | cut -d' ' -f2- | tr ' ' '\n' | grep . > /run/gpus
ip link set lo up
ip link set eth0 up
udhcpc -i eth0 -s /etc/udhcpc.sh -t 30 -T 2 -n -q >/dev/null 2>&1 || echo "MARKER-ERROR no DHCP lease"
mkdir -p /run/sshd
chmod 755 /run/sshd
read -r flags < /etc/ssh/sshd_flags
/usr/sbin/sshd -D -e $flags -f /etc/ssh/sshd_config &
echo "MARKER up hostname=$host user=$user disk=$before accounts=$(awk -F: '$3 >= 1000 {print $1}' /etc/passwd | sort | paste -sd, -)"
while :; do sleep 3600; done
""".replace("MODULES", " ".join(DISK_MODULES)).replace("MARKER", MARKER)

#: the hand-over guest's stand-ins for cloud-init's ``cloud-init-per`` and shadow's ``usermod --expiredate``
CLOUD_INIT_PER = """#!/bin/sh
# cloud-init-per FREQ NAME CMD...: CMD once per instance id (instance), once ever (once) or every boot (always)
freq=$1; name=$2; shift 2
mark=/var/lib/cloud/sem/bootper.$name.$freq
[ "$freq" = instance ] && mark=$mark.$(awk '/^instance-id:/ {print $2}' /mnt/meta-data)
if [ "$freq" != always ] && [ -e "$mark" ]; then exit 0; fi
mkdir -p /var/lib/cloud/sem
"$@" && touch "$mark"
"""
USERMOD = """#!/bin/sh
# usermod [--expiredate DAYS] [--comment GECOS] USER: the shadow entry's account expiry ("" never, 1: expired
# since 1970-01-02) and the passwd entry's GECOS
set -e
eval "user=\\${$#}"
while [ $# -gt 1 ]; do
  case "$1" in
    --expiredate) f=/etc/shadow; n=8 ;;
    --comment) f=/etc/passwd; n=5 ;;
    *) echo "usermod stand-in: only --expiredate DAYS and --comment GECOS" >&2; exit 2 ;;
  esac
  awk -F: -v OFS=: -v u="$user" -v e="$2" -v n="$n" '$1 == u {$n = e} {print}' "$f" > "$f.new"
  mv "$f.new" "$f"
  shift 2
done
chmod 600 /etc/shadow
chmod 644 /etc/passwd
"""

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


def sshd_flags(sshd: str) -> str:
    """``-r`` where the host's sshd has it (OpenSSH before 9.8): sshd then serves each connection from a fork
    of itself instead of executing itself again, which under TCG loaded sshd and libcrypto anew for every
    login (0.70 → 0.40 s a login, ~10 logins a hand-over test). Authentication is the same either way."""
    said = subprocess.run([sshd, "-V"], capture_output=True, text=True, check=False)
    found = re.search(r"OpenSSH_(\d+)\.(\d+)", said.stdout + said.stderr)
    return "-r" if found and (int(found[1]), int(found[2])) < (9, 8) else ""


def build(out: Path, gpus: Mapping[str, Sequence[str]], *, disk: bool = False) -> Path:
    """The initramfs (newc cpio) of the SSH guest; ``gpus``: seat key → UUIDs its stand-in lists;
    ``disk``: the hand-over guest whose accounts live on the VM's disk (``DISK_INIT``)."""
    sshd = require_tool("sshd")
    keygen = require_tool("ssh-keygen")
    hostkey = out.parent / f"{out.name}-hostkey"
    hostkey.unlink(missing_ok=True)
    subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)], check=True)
    files: dict[str, Path | str] = {
        "/usr/sbin/sshd": Path(sshd),
        "/etc/ssh/sshd_config": SSHD_CONFIG,
        "/etc/ssh/sshd_flags": sshd_flags(sshd) + "\n",
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
    if disk:
        files.update({"/usr/bin/cloud-init-per": CLOUD_INIT_PER, "/usr/sbin/usermod": USERMOD,
                      "/etc/shadow": "root:*:19000:0:99999:7:::\n"})  # fmt: skip
    init, modules = (DISK_INIT, DISK_MODULES) if disk else (INIT, NET_MODULES)
    return build_initramfs(out, init_text=init, modules=modules, files=files)
