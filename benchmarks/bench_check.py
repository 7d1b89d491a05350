"""``seats check`` on 24 host-engine seats against the floor, a plain parallel ``ssh … env`` loop.

Both sides run in one process on one machine, against the same real sshd (loopback), the same 24
Unix accounts and the same stand-in GPU devices (``tests/delivery/hostlab.py``: ``mknod`` device
files, a stand-in ``nvidia-smi``). The floor logs in as each participant with their own key and
runs ``env`` (16 at a time); ``seats check`` does what it always does: per seat, root-side checks
(account, key, device files), SSH as the participant with gpuseat's probe key, ``nvidia-smi -L``,
the judgement, and one store write for all results. Prints the median of ``--rounds`` runs of each
and the ratio; goal: within 2× the floor and under 30 s.

Run as root: ``.venv/bin/python benchmarks/bench_check.py [--seats 24] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "delivery"))

import hostlab  # noqa: E402  (the tests' stand-in host: one harness for tests and benchmark)
from gpuseat.services.host_engine import HostEngine  # noqa: E402

from gpuseat.services.checks import check_seats  # noqa: E402
from gpuseat.store import open_store  # noqa: E402

COURSE = 'name = "bench check"\nparticipants = {n}\n[schedule]\nstart = 2026-09-07\ndays = 5\n'


def gpus(seats: int) -> list[dict[str, object]]:
    """Enough stand-in GPUs with 6 MIG devices each for ``seats`` seats."""
    out = []
    for g in range((seats + 5) // 6):
        migs = [
            {"gi": gi, "ci": 0, "profile": "1g.18gb", "uuid": f"MIG-{g:02d}{gi:06d}-0000-4000-8000-000000000000"}
            for gi in range(1, 7)
        ]
        out.append(
            {
                "minor": g,
                "name": "NVIDIA H200",
                "pci": f"00000000:{g + 16:02X}:00.0",
                "uuid": f"GPU-{g:08d}-0000-4000-8000-000000000000",
                "mig": migs,
            }
        )
    return out


def floor(lab: hostlab.Lab, workers: int) -> float:
    """A plain parallel loop: ssh as each participant with their own key, run env."""
    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        done = list(pool.map(lambda who: lab.ssh(who, "env"), list(lab.people)))
    took = time.perf_counter() - started
    bad = [d for d in done if d.returncode != 0 or "CUDA_VISIBLE_DEVICES=" not in d.stdout]
    assert not bad, bad[0].stderr
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seats", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=16)
    args = ap.parse_args()
    why = hostlab.have_tools()
    if why:
        print(f"cannot run: {why}")
        return 2
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    tmp = Path(tempfile.mkdtemp(prefix="bench-check-"))
    os.environ["GPUSEAT_DATA_DIR"] = str(tmp / "data")
    lab = hostlab.new_lab()
    try:
        lab.build(gpus(args.seats))
        lab.port = hostlab.free_port()
        url = f"sqlite:///{tmp / 'bench.db'}"
        (tmp / "course.toml").write_text(COURSE.format(n=args.seats))
        for i in range(args.seats):
            lab.person(f"p{i:02d}")
        (tmp / "roster.csv").write_text(lab.roster())
        listing = subprocess.run([str(lab.nvidia_smi), "-L"], capture_output=True, text=True, check=True).stdout
        from gpuseat import nvsmi
        from gpuseat.services.seat_sources import seats_from_nvidia_smi

        with open_store(url, create=True) as store:
            store.courses.create_course(tmp / "course.toml", key="bench")
            store.roster.import_roster("bench", tmp / "roster.csv")
            specs = seats_from_nvidia_smi(None, nvsmi.parse_list(listing), host="gpu1")[: args.seats]
            store.seats.add_seats("bench", [s.model_copy(update={"engine": "host", "state": "planned"}) for s in specs])
            store.seats.assign_all("bench")
            t0 = time.perf_counter()
            report = HostEngine(store, "bench", **lab.settings()).up()
            print(f"host up: {len(report.changes)} changes in {time.perf_counter() - t0:.1f} s")
            lab.start_sshd()
            floor(lab, args.workers)  # warm-up: first logins fill caches on both sides
            ours, base = [], []
            for _ in range(args.rounds):
                base.append(floor(lab, args.workers))
                t0 = time.perf_counter()
                results = check_seats(store, "bench", workers=args.workers, timeout=30)
                ours.append(time.perf_counter() - t0)
                ready = sum(r.ready for r in results)
                assert ready == args.seats, [r.reason for r in results if not r.ready][:3]
        b, o = statistics.median(base), statistics.median(ours)
        print(f"{args.seats} seats, {args.workers} at a time, median of {args.rounds} rounds")
        print(f"floor (parallel ssh … env):  {b:.2f} s  {[round(x, 2) for x in base]}")
        print(f"gpuseat seats check:         {o:.2f} s  {[round(x, 2) for x in ours]}  ({ready}/{args.seats} ready)")
        verdict = "met" if o / b <= 2 and o < 30 else "NOT met"
        print(f"ratio seats check / floor: {o / b:.2f}× (goal ≤ 2× and under 30 s: {verdict})")
    finally:
        lab.close()
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
