"""A stand-in ``nvidia-smi`` for the host-engine tests (copied next to a ``devices.json``).

It lists only the devices the *calling user* can open, as the real tool does under device cgroups
and file permissions: a GPU when ``/dev/nvidiaN`` opens, a MIG device when its GI and CI capability
files open. The files are ``mknod`` character devices without a driver, so an open that passes the
permission check fails with ENXIO; only EACCES/EPERM mean "not yours". Supports ``-L`` and ``-q -x``.
"""

import errno
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONF = json.loads((HERE / "devices.json").read_text())


def can_open(path: str, flags: int) -> bool:
    if os.geteuid() == 0:  # root (CAP_SYS_ADMIN) holds every capability: it sees all devices
        return True
    try:
        os.close(os.open(path, flags))
    except OSError as exc:
        return exc.errno not in (errno.EACCES, errno.EPERM, errno.ENOENT)
    return True


def visible() -> list[tuple[dict, list[dict]]]:
    dev = CONF["dev_root"]
    minors = {}
    for line in Path(CONF["proc_root"], "driver/nvidia-caps/mig-minors").read_text().splitlines():
        name, _, minor = line.partition(" ")
        minors[name] = minor.strip()
    out = []
    for gpu in CONF["gpus"]:
        if not can_open(f"{dev}/nvidia{gpu['minor']}", os.O_RDWR):
            continue
        migs = []
        for m in gpu.get("mig", []):
            gi = minors.get(f"gpu{gpu['minor']}/gi{m['gi']}/access")
            ci = minors.get(f"gpu{gpu['minor']}/gi{m['gi']}/ci{m['ci']}/access")
            if gi and ci and all(can_open(f"{dev}/nvidia-caps/nvidia-cap{x}", os.O_RDONLY) for x in (gi, ci)):
                migs.append(m)
        out.append((gpu, migs))
    return out


def main(argv: list[str]) -> int:
    import pwd
    import time

    if pwd.getpwuid(os.getuid()).pw_name in CONF.get("hang_users", []):
        time.sleep(3600)  # a driver call that never returns, for one participant
    shown = visible()
    if argv[:1] == ["-L"]:
        for gpu, migs in shown:
            print(f"GPU {gpu['minor']}: {gpu['name']} (UUID: {gpu['uuid']})")
            for i, m in enumerate(migs):
                print(f"  MIG {m['profile']:<11} Device  {i}: (UUID: {m['uuid']})")
        return 0
    if argv[:2] == ["-q", "-x"]:
        print('<?xml version="1.0" ?>\n<nvidia_smi_log>')
        for gpu, migs in shown:
            print(f'<gpu id="{gpu["pci"]}"><product_name>{gpu["name"]}</product_name>')
            print(f"<uuid>{gpu['uuid']}</uuid><minor_number>{gpu['minor']}</minor_number>")
            print(f"<mig_mode><current_mig>{'Enabled' if gpu.get('mig') else 'Disabled'}</current_mig></mig_mode>")
            print("<mig_devices>")
            for i, m in enumerate(migs):
                print(
                    f"<mig_device><index>{i}</index><gpu_instance_id>{m['gi']}</gpu_instance_id>"
                    f"<compute_instance_id>{m['ci']}</compute_instance_id><uuid>{m['uuid']}</uuid>"
                    f"<profile>{m['profile']}</profile></mig_device>"
                )
            print("</mig_devices></gpu>")
        print("</nvidia_smi_log>")
        return 0
    print("stand-in nvidia-smi: only -L and -q -x", file=sys.stderr)
    return 2


sys.exit(main(sys.argv[1:]))
