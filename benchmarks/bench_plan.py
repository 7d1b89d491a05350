"""Plan 1,000 participants in 3 groups over a generated 20,000-offer catalog.

Prints gpuseat's planning time on the 20,000-offer catalog (goal: under 1 s), then, side by side in the
same run, gpuseat's planner (solver over the pruned candidates, which provably keep the optimum) against
the same solver over every usable offer (``plan(..., exhaustive=True)``), on a smaller catalog: both
times, the ratio, and whether both found the same optimum.
Usage: ``.venv/bin/python benchmarks/bench_plan.py [--offers 20000] [--compare-offers 2000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from datetime import date

from gpuseat.catalog.bundle import load_catalog
from gpuseat.catalog.offers import Offer
from gpuseat.core.course import Course
from gpuseat.core.plan import plan

CATALOG = load_catalog()

CONTEXT = CATALOG.offer_context()  # cloud offers take their provider's billing rules (rules.toml)
CLOUD_GPUS = [
    ("T4", 16, 0.35),
    ("L4", 24, 0.55),
    ("A10G", 24, 0.9),
    ("L40S", 48, 1.6),
    ("A100-40GB", 40, 2.5),
    ("H100-80GB", 80, 4.0),
    ("V100", 16, 2.0),
    ("RTX-A4000", 16, 0.22),
]
SERVERS = [("M60", 4, 2500), ("A100-80GB", 4, 9000), ("H200-141GB", 2, 9000), ("L40S", 4, 5000), ("A30", 2, 2500)]


def catalog(n: int, seed: int = 7) -> list[Offer]:
    """``n`` offers: mostly cloud instances over regions, plus bare-metal servers with availability limits."""
    rng = random.Random(seed)
    offers = []
    for i in range(n):
        if i % 10 == 0:
            gpu, chips, month = rng.choice(SERVERS)
            offers.append(
                Offer.model_validate(
                    dict(
                        id=f"bm{i % 7}:srv-{i}",
                        provider=f"bm{i % 7}",
                        kind="bare-metal",
                        instance_type=f"srv-{i}",
                        gpu=gpu,
                        gpu_count=chips,
                        vcpus=64,
                        ram_gb=512,
                        price_usd=round(month * rng.uniform(0.8, 1.4), 2),
                        billing=rng.choice(["month-whole", "month-prorated"]),
                        setup_fee_usd=rng.choice([0, 99, 250]),
                        disk_usd_per_gb_month=0,
                        available=rng.randint(1, 5),
                        source="generated",
                        as_of=date(2026, 12, 1),
                    ),
                    context=CONTEXT,
                )
            )
            continue
        gpu, mem, hourly = rng.choice(CLOUD_GPUS)
        offers.append(
            Offer.model_validate(
                dict(
                    id=f"c{i % 5}:it-{i}@r{i % 23}",
                    provider=rng.choice(["aws", "gcp", "azure", "lambda", "runpod"]),
                    kind="cloud",
                    instance_type=f"it-{i}",
                    region=f"r{i % 23}",
                    gpu=gpu,
                    gpu_count=1,
                    gpu_memory_gb=mem,
                    vcpus=rng.choice([4, 8, 16]),
                    ram_gb=rng.choice([16, 32, 64]),
                    price_usd=round(hourly * rng.uniform(0.8, 2.5), 4),
                    billing=rng.choice(["per-second", "per-minute", "per-hour"]),
                    min_charge_s=rng.choice([0, 60]),
                    disk_usd_per_gb_month=0.08,
                    stoppable=rng.random() < 0.8,
                    available=rng.choice([None, None, 20, 50]),
                    source="generated",
                    as_of=date(2026, 12, 1),
                ),
                context=CONTEXT,
            )
        )
    return offers


COURSE = Course.model_validate(
    {
        "name": "bench",
        "schedule": {"start": date(2026, 3, 2), "end": date(2026, 3, 20), "hours": "09:00-17:00"},
        "group": [
            {"name": "students", "count": 800, "min_gpu_memory_gb": 16, "min_vcpus": 4, "min_ram_gb": 16},
            {"name": "advanced", "count": 180, "min_gpu_memory_gb": 40},
            {"name": "staff", "count": 20, "min_gpu_memory_gb": 24, "isolation": "dedicated"},
        ],
        "costs": {"storage_gb_per_seat": 50},
    }
)


def best_of(repeat: int, fn: Callable[[], float]) -> tuple[float, float]:
    """(fastest seconds, result) over ``repeat`` runs."""
    times, total = [], 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        total = fn()
        times.append(time.perf_counter() - t0)
    return min(times), total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--offers", type=int, default=20000)
    ap.add_argument("--compare-offers", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    def gpuseat_plan(offers: list[Offer]) -> float:
        return plan(COURSE, offers, catalog=CATALOG, alternatives=0).options[0].total_usd

    def unpruned(offers: list[Offer]) -> float:
        return plan(COURSE, offers, catalog=CATALOG, alternatives=0, exhaustive=True).options[0].total_usd

    t0 = time.perf_counter()
    s = 0
    for i in range(10**7):
        s += i
    print(f"reference loop (10**7 additions, about 0.55 s on this VM when idle): {time.perf_counter() - t0:.2f} s")
    people = f"{sum(g.count for g in COURSE.groups)} participants in {len(COURSE.groups)} groups"
    big = catalog(args.offers)
    gpuseat_plan(big[:50])  # import the solver once, outside the timings
    seconds, total = best_of(args.repeat, lambda: gpuseat_plan(big))
    print(f"gpuseat plan, {len(big)} offers, {people}: best of {args.repeat}: {seconds:.3f} s  (${total:,.2f})")
    small = catalog(args.compare_offers)
    a, ta = best_of(args.repeat, lambda: gpuseat_plan(small))
    b, tb = best_of(1, lambda: unpruned(small))
    print(f"side by side on {len(small)} offers: gpuseat {a:.3f} s  vs  unpruned {b:.3f} s")
    print(f"ratio (unpruned / gpuseat): {b / a:.1f}x; same optimum: {abs(ta - tb) < 0.005} (${ta:,.2f} vs ${tb:,.2f})")


if __name__ == "__main__":
    main()
