"""The planning service: read a course and offers, run the planner, shape the result.

The CLI (and later the portal) call these functions; the pure planner in :mod:`gpuseat.core.plan`
never reads files.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

from gpuseat.catalog import reference_results
from gpuseat.catalog.offers import (
    Offer,
    bundled_offers,
    check_offer_ids,
    load_offers_file,
    merge_offers,
    provider_rules,
)
from gpuseat.catalog.skypilot import import_skypilot
from gpuseat.core.course import Course
from gpuseat.core.plan import Plan, Speed, performance, plan, select_offers, speeds_from
from gpuseat.errors import InputError
from gpuseat.files import read_toml, validate


def load_course(path: Path) -> Course:
    """A course file, validated; errors name the file and field."""
    return validate(Course, read_toml(path), where=str(path))


def parse_skypilot_arg(arg: str) -> tuple[str, Path]:
    """``aws=path/vms.csv`` → ("aws", path)."""
    provider, sep, path = arg.partition("=")
    if not sep or not provider or not path:
        raise InputError(f"expected PROVIDER=PATH, got {arg!r}", where="--skypilot", fix="e.g. --skypilot aws=vms.csv")
    return provider, Path(path)


def gather_offers(
    course: Course, course_path: Path, offer_files: list[Path], skypilot: list[str], patterns: list[str]
) -> tuple[list[Offer], list[str]]:
    """Bundled offers + the course's and the command line's offers files + SkyPilot imports, filtered."""
    warnings: list[str] = []
    groups: list[list[Offer] | tuple[Offer, ...]] = [bundled_offers()]
    for name in course.offers_files:
        groups.append(load_offers_file((course_path.parent / name).resolve()))
    for path in offer_files:
        groups.append(load_offers_file(path))
    for arg in skypilot:
        provider, path = parse_skypilot_arg(arg)
        imported = import_skypilot(path, provider, as_of=date.today())
        warnings += imported.warnings
        groups.append(imported.offers)
    offers = merge_offers(*groups)
    chosen = patterns or list(course.offers)
    where = "--offer" if patterns else f"{course_path}: field 'offers'"
    check_offer_ids(chosen, offers, where=where)
    return select_offers(offers, chosen), warnings


def recorded_speeds() -> list[Speed]:
    """LeNet results recorded by ``gpuseat bench`` that may stand for a GPU model: full runs on whole GPUs
    (never a MIG slice or a short run), normalised to 10,000 iterations."""
    from gpuseat.bench.results import recorded_results, whole_gpu_speeds

    return [
        Speed(model, r.seconds_per_10k, f"gpuseat bench, {r.recorded_at:%Y-%m-%d}")
        for model, r in whole_gpu_speeds(recorded_results()).items()
    ]


def plan_course(
    course_path: Path,
    *,
    offer_files: list[Path] | None = None,
    skypilot: list[str] | None = None,
    patterns: list[str] | None = None,
    alternatives: int = 10,
) -> Plan:
    """Plan a course file end to end."""
    course = load_course(course_path)
    offers, warnings = gather_offers(course, course_path, offer_files or [], skypilot or [], patterns or [])
    reference = [Speed(r.gpu, r.seconds * 10000 / r.iterations, r.source) for r in reference_results()]
    result = plan(
        course,
        offers,
        providers=provider_rules(),
        speeds=speeds_from(reference, recorded_speeds()),
        alternatives=alternatives,
        where=str(course_path),
    )
    result.warnings[:0] = warnings
    return result


def plan_json(result: Plan) -> dict[str, Any]:
    """The JSON contract of ``gpuseat plan --format json``."""
    course = result.course
    return {
        "course": {
            "name": course.name,
            "participants": course.participant_count,
            "period_days": course.schedule.period_days,
            "seat_hours_each": round(course.schedule.in_use_hours(), 4),
            "groups": [{"name": g.name, "count": g.count, **g.need.model_dump()} for g in course.groups],
        },
        "options": [
            {
                "rank": i + 1,
                "offers": [{"offer": o, "count": n} for o, n in sorted(opt.offer_counts.items())],
                "seats": opt.seats,
                "total_usd": opt.total_usd,
                "lines": [ln.as_dict() for ln in opt.lines],
                "groups": [
                    {
                        "group": a.fit.group.name,
                        "offer": a.fit.offer.id,
                        "units": a.units,
                        "seats": a.seats,
                        "seats_per_unit": a.fit.seats_per_unit,
                        "mode": a.fit.mode,
                        "profile": a.fit.profile,
                    }
                    for a in opt.assignments
                ],
                "notes": opt.notes,
                "performance": performance(opt, course, result.speeds),
            }
            for i, opt in enumerate(result.options)
        ],
        "rejected": [
            {"offer": r.offer, "reason": r.reason, "group": r.group, "profile": r.profile} for r in result.rejected
        ],
        "warnings": result.warnings,
    }
