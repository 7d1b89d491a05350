"""The planning service: read a course and offers, run the planner, return a :class:`Plan`.

The CLI, the portal and the hooks call these functions; the pure planner in :mod:`gpuseat.core.plan`
never reads files. Everything that makes one machine's answer differ from another's comes in as an
argument: the catalog (with its overlay folder) and the recorded bench speeds.

Which offers a plan considers: every offer of the catalog, of the course's ``offers_files``, of
``--offers FILE`` and of ``--skypilot`` imports (an imported copy of a catalog offer — same provider,
instance type, region and billing rule — replaces it), chosen by ``--offer GLOB`` if given, else by the
course's ``offers = [...]`` globs (all of them when the course gives none), then filtered by
``--region`` (a geography, ``us``/``eu``/``asia``, mapped per provider in providers.toml, or a glob over
region names) and by the course's ``gpu = [...]`` globs over GPU models. What each filter dropped is
in the plan (``filters``). Offers of ``--offers``/``--skypilot`` that the course's globs leave out are
named in a warning, never dropped silently.

A course of the store is planned the same way from what ``course create`` stored: the course file's text
and the texts of its offers files (:func:`read_course_offers` reads and checks them, by the rule a plan of
the file applies), so the plan of a stored course needs no file on disk (:func:`plan_stored_course`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, Unpack

from gpuseat.catalog.bundle import Catalog
from gpuseat.catalog.offers import Offer, OffersFile, check_offer_ids, load_offers_file, merge_offers
from gpuseat.core.course import Course
from gpuseat.core.plan import Plan, Speed, apply_filters, plan, select_offers, speeds_from
from gpuseat.errors import InputError
from gpuseat.files import parse_toml, read_text, read_toml_model, validate

if TYPE_CHECKING:
    from gpuseat.store import CourseStore
    from gpuseat.store.courses import OffersText

#: The bench results file name (``gpuseat.bench.results.STORE_NAME``, checked by tests/plan/test_recorded_speeds.py).
RESULTS_FILE = "bench-results.jsonl"

__all__ = [
    "CourseFileRead",
    "OfferChoice",
    "gather_offers",
    "load_course",
    "parse_skypilot_arg",
    "plan_course",
    "plan_stored_course",
    "read_course_file",
    "read_course_offers",
    "recorded_speeds",
    "reference_speeds",
    "stored_course_offers",
]


class OfferChoice(TypedDict, total=False):
    """Which offers a plan considers besides the catalog's and the course's (the module docstring):
    :func:`plan_course` hands these keywords on to :func:`gather_offers` as they came (each one left out:
    none)."""

    offer_files: Sequence[Path]  # --offers FILE
    skypilot: Sequence[str]  # --skypilot PROVIDER=PATH
    patterns: Sequence[str]  # --offer GLOB
    regions: Sequence[str]  # --region


def load_course(path: Path) -> Course:
    """A course file, validated; errors name the file, the line and the field."""
    return read_toml_model(Course, path)


class CourseFileRead(NamedTuple):
    """A course file as ``course create`` and ``course update`` store it (:func:`read_course_file`)."""

    course: Course
    text: str  # the text checked, which is the text stored
    offers: list[OffersText]  # its own offers files, (name, text), checked as a plan reads them


def read_course_file(path: Path, catalog: Catalog | None = None) -> CourseFileRead:
    """The course file at ``path``, read once and checked as the store keeps it: the course file's own check,
    a ``[groups.X]`` section that names no group, and its offers files (:func:`read_course_offers`; the
    bundled catalog unless ``catalog`` is given). Each problem is one input error naming the file."""
    text = read_text(path)
    course = validate(Course, parse_toml(text, where=str(path)), where=str(path), text=text)
    stray = sorted(set(course.group_sections) - {g.name for g in course.groups})
    if stray and not course.group:  # with [[group]] tables the course file's own check names it
        # not in that check: a course stored with such a section must still read back
        raise InputError(
            f"[groups.{stray[0]}] names no group of this course: without [[group]] tables its one group is "
            "'participants', so that policy would apply to nobody",
            where=str(path),
            fix="put it in [policy] (the course's), name it [groups.participants], or add [[group]] tables",
        )
    if not course.offers_files:
        return CourseFileRead(course, text, [])
    if catalog is None:
        from gpuseat.catalog.bundle import load_catalog

        catalog = load_catalog()
    return CourseFileRead(course, text, read_course_offers(course, path, catalog))


def parse_skypilot_arg(arg: str) -> tuple[str, Path]:
    """``aws=path/vms.csv`` → ("aws", path)."""
    provider, sep, path = arg.partition("=")
    if not sep or not provider or not path:
        raise InputError(f"expected PROVIDER=PATH, got {arg!r}", where="--skypilot", fix="e.g. --skypilot aws=vms.csv")
    return provider, Path(path)


def offers_from_text(text: str, *, where: str, catalog: Catalog) -> list[Offer]:
    """The offers of an offers file's text: :func:`gpuseat.catalog.offers.load_offers_file` on text already
    read (the same parse and validation), so that the text checked is the text stored."""
    return validate(
        OffersFile, parse_toml(text, where=where), where=where, text=text, context=catalog.offer_context()
    ).offer


def some_offers(offers: list[Offer], *, where: str) -> list[Offer]:
    """The offers of a file the user names, when it has any: an empty file (or one with only
    ``schema_version``) was taken without a word, and the plan ran on the bundled offers alone."""
    if not offers:
        raise InputError(
            "no offers in this offers file",
            where=where,
            fix="list each offer as an [[offer]] table (see examples/offers-h200.toml), or leave the file out",
        )
    return offers


def read_course_offers(course: Course, course_path: Path, catalog: Catalog) -> list[OffersText]:
    """Each offers file the course names (relative to the course file's folder) as (name, text), after
    checking it as a plan reads it; a missing or invalid file is one input error naming the course file,
    the offers file and what is wrong."""
    return [(name, text) for name, text, _offers in _read_own_offers(course, course_path, catalog)]


def _read_own_offers(course: Course, course_path: Path, catalog: Catalog) -> list[tuple[str, str, list[Offer]]]:
    """:func:`read_course_offers` with each file's offers."""
    out: list[tuple[str, str, list[Offer]]] = []
    for name in course.offers_files:
        path = (course_path.parent / name).resolve()
        try:
            text = read_text(path)
            offers = some_offers(offers_from_text(text, where=str(path), catalog=catalog), where=str(path))
        except InputError as exc:
            missing = not path.exists()
            raise InputError(
                "offers file not found" if missing else exc.what,
                where=f"{course_path}: field 'offers_files': {exc.where or path}",
                fix=(
                    f"check '{name}' in offers_files: it is relative to the course file's folder "
                    f"({course_path.resolve().parent}); or remove it"
                    if missing
                    else exc.fix
                ),
            ) from None
        out.append((name, text, offers))
    return out


def gather_offers(
    course: Course,
    course_path: Path,
    catalog: Catalog,
    *,
    today: date | None = None,
    reports: list[dict[str, object]] | None = None,
    **choice: Unpack[OfferChoice],
) -> tuple[list[Offer], list[str]]:
    """The offers a plan considers (module docstring) and the import warnings; what the region and GPU
    filters dropped is appended to ``reports`` when given."""
    own = [offers for _name, _text, offers in _read_own_offers(course, course_path, catalog)]
    return _choose_offers(course, str(course_path), catalog, own, today=today, reports=reports, **choice)


def _choose_offers(
    course: Course,
    where_course: str,
    catalog: Catalog,
    own_files: Sequence[list[Offer]],
    *,
    today: date | None = None,
    reports: list[dict[str, object]] | None = None,
    **choice: Unpack[OfferChoice],
) -> tuple[list[Offer], list[str]]:
    """:func:`gather_offers` once the course's own offers files are read (``own_files``, from disk or the
    store); ``where_course`` names the course in messages."""
    offer_files, skypilot = choice.get("offer_files", ()), choice.get("skypilot", ())
    patterns, regions = choice.get("patterns", ()), choice.get("regions", ())
    warnings: list[str] = []
    own: list[list[Offer]] = [list(catalog.offers), *own_files]
    added: list[list[Offer]] = []
    for path in offer_files:
        added.append(some_offers(load_offers_file(path, catalog), where=f"--offers {path}"))
    for arg in skypilot:
        from gpuseat.catalog.skypilot import import_skypilot

        provider, path = parse_skypilot_arg(arg)
        imported = import_skypilot(path, provider, catalog=catalog, as_of=today or date.today())
        warnings += imported.warnings
        added.append(imported.offers)
    offers = merge_offers(*own, *added)
    chosen = list(patterns) or list(course.offers)
    where = "--offer" if patterns else f"{where_course}: field 'offers'"
    check_offer_ids(chosen, offers, where=where)
    for pattern in course.gpu:
        from fnmatch import fnmatchcase

        if not any(fnmatchcase(g.lower(), pattern.lower()) for g in catalog.gpus):
            raise InputError(
                f"no GPU model matches '{pattern}'",
                where=f"{where_course}: field 'gpu'",
                fix=f"use GPU model globs such as A100*, H100*; models: {', '.join(catalog.gpus)}",
            )
    selected, found = apply_filters(
        select_offers(offers, chosen), regions=regions, gpus=course.gpu, providers=catalog.providers
    )
    if reports is not None:
        reports += found
    if chosen and added:
        kept = {o.id for o in selected}
        left = [o.id for group in added for o in group if o.id not in kept]
        if left:
            warnings.append(
                f"{len(left)} offer(s) from --offers/--skypilot are not considered because the "
                f"{'--offer' if patterns else 'course'} globs {', '.join(chosen)} leave them out (e.g. {left[0]}); "
                "add their ids to the course's 'offers' or pass --offer GLOB"
            )
    if regions and not selected:
        raise InputError(
            f"no offer is in a region matching {', '.join(regions)}",
            where="--region",
            fix="give a geography (us, eu, asia) or a region glob; list regions with 'gpuseat offers list'",
        )
    if course.gpu and not selected:
        raise InputError(
            f"no offer has a GPU matching {', '.join(course.gpu)}",
            where=f"{where_course}: field 'gpu'",
            fix="widen the 'gpu' globs or the 'offers' globs",
        )
    return selected, warnings


def reference_speeds(catalog: Catalog) -> list[Speed]:
    """The shipped LeNet reference results, normalised to 10,000 iterations."""
    return [Speed(r.gpu, r.seconds * 10000 / r.iterations, r.source) for r in catalog.references]


def recorded_speeds() -> list[Speed]:
    """LeNet results recorded by ``gpuseat bench`` on this machine's store that may stand for a GPU model:
    full runs on whole GPUs (never a MIG slice or a short run), normalised to 10,000 iterations.

    Without a results file nothing is imported (the bench models cost start-up time; issue 25)."""
    from gpuseat.paths import data_dir

    if not (data_dir() / RESULTS_FILE).exists():
        return []
    from gpuseat.bench.results import recorded_results, whole_gpu_speeds

    return [
        Speed(model, r.seconds_per_10k, f"gpuseat bench, {r.recorded_at:%Y-%m-%d}")
        for model, r in whole_gpu_speeds(recorded_results()).items()
    ]


def plan_course(
    course_path: Path,
    catalog: Catalog,
    *,
    recorded: Sequence[Speed] = (),
    alternatives: int = 10,
    budget_usd: float | None = None,
    why: str | None = None,
    today: date | None = None,
    **choice: Unpack[OfferChoice],
) -> Plan:
    """Plan a course file end to end. ``recorded`` are bench speeds the caller chose to use (the CLI
    passes the local store's); without them the plan uses the shipped reference results only.
    ``choice``: ``offer_files``, ``skypilot``, ``patterns``, ``regions`` (:class:`OfferChoice`)."""
    course = load_course(course_path)
    reports: list[dict[str, object]] = []
    offers, warnings = gather_offers(course, course_path, catalog, today=today, reports=reports, **choice)
    ask = _Ask(recorded, alternatives, budget_usd, why)
    return _plan_offers(course, str(course_path), offers, warnings, reports, catalog, ask)


def plan_stored_course(
    store: CourseStore,
    course: str | None,
    catalog: Catalog,
    *,
    recorded: Sequence[Speed] = (),
    alternatives: int = 10,
    budget_usd: float | None = None,
    why: str | None = None,
) -> Plan:
    """Plan a course of the store as :func:`plan_course` plans its file: the stored course file with the
    offers files stored with it, so moving or changing the files on disk changes nothing. An offers file
    the course names but the store lacks (a course stored before gpuseat kept them) is left out, with a
    warning in the plan."""
    key = store.courses.get_course(course).key
    where = f"course {key}"
    cf = store.courses.course_file(key)
    own, lacking = _stored_own_offers(store, key, cf, catalog)
    reports: list[dict[str, object]] = []
    offers, warnings = _choose_offers(cf, where, catalog, own, reports=reports)
    if lacking:
        warnings.insert(
            0,
            f"the course's offers file(s) {', '.join(lacking)} are not stored with it (it was stored before "
            "gpuseat kept them): their offers are left out here; gpuseat plan on the course file reads them",
        )
    return _plan_offers(cf, where, offers, warnings, reports, catalog, _Ask(recorded, alternatives, budget_usd, why))


def stored_course_offers(store: CourseStore, course: str | None, catalog: Catalog) -> list[Offer]:
    """The offers a stored course's plan draws on before its globs choose: the catalog's and those of the
    offers files stored with it (to price its chosen plan option as the plan priced it)."""
    key = store.courses.get_course(course).key
    own, _lacking = _stored_own_offers(store, key, store.courses.course_file(key), catalog)
    return merge_offers(list(catalog.offers), *own)


def _stored_own_offers(
    store: CourseStore, key: str, cf: Course, catalog: Catalog
) -> tuple[list[list[Offer]], list[str]]:
    """The offers of each offers file the stored course names, from the store; and the names it lacks."""
    stored = dict(store.courses.offers_texts(key) or ())
    own: list[list[Offer]] = []
    lacking: list[str] = []
    for name in cf.offers_files:
        if name in stored:
            own.append(offers_from_text(stored[name], where=f"course {key}: offers file {name}", catalog=catalog))
        else:
            lacking.append(name)
    return own, lacking


class _Ask(NamedTuple):
    """What the caller asks of a plan besides the course and its offers (:func:`plan_course`'s and
    :func:`plan_stored_course`'s keywords, which mean the same in both)."""

    recorded: Sequence[Speed]
    alternatives: int
    budget_usd: float | None
    why: str | None


def _plan_offers(
    course: Course,
    where: str,
    offers: list[Offer],
    warnings: list[str],
    reports: list[dict[str, object]],
    catalog: Catalog,
    ask: _Ask,
) -> Plan:
    """Run the planner on the offers chosen for the course (``where`` names it in messages)."""
    recorded = ask.recorded
    gpus = sorted({s.gpu for s in recorded})
    note = (
        f"shipped reference results, and {len(recorded)} result(s) recorded by gpuseat bench ({', '.join(gpus)})"
        if recorded
        else "shipped reference results only"
    )
    result = plan(
        course,
        offers,
        catalog=catalog,
        speeds=speeds_from(reference_speeds(catalog), recorded),
        speeds_note=note,
        alternatives=ask.alternatives,
        budget_usd=ask.budget_usd,
        why=ask.why,
        where=where,
        hints=True,
    )
    result.warnings[:0] = warnings
    result.filters = reports
    return result


def plan_option_for(path: Path, rank: int, catalog: Catalog) -> dict[str, Any]:
    """Option ``rank`` (1 = cheapest) of ``gpuseat plan`` on a course file, as its JSON (to store with the course)."""
    if not 1 <= rank <= 1000:
        raise InputError(f"--plan-option {rank}", where="plan_option", fix="give a rank from 1 (the cheapest)")
    options = plan_course(path, catalog).to_dict()["options"]
    if rank > len(options):
        raise InputError(
            f"the plan has {len(options)} option(s), not {rank}",
            where="plan_option",
            fix=f"choose 1 to {len(options)} (gpuseat plan {path} lists them)",
        )
    return dict(options[rank - 1])
