"""One course at a glance: plan and cost so far, seats with live use and readiness, usage, benchmarks, survey.

The portal's organizer pages, ``/report`` and ``gpuseat report`` all show a :class:`CourseDigest`
built here from the course store, the monitor's tables (:mod:`gpuseat.store.activity`), the
benchmark results store and the survey, so the web page and the file always agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from gpuseat.core import charts
from gpuseat.core.spend import Spend, spend, spend_curve
from gpuseat.errors import NotFound
from gpuseat.services.survey import SurveyResults, SurveyService
from gpuseat.store.activity import OpenAlert, SeatDay, SeatLive

if TYPE_CHECKING:
    from gpuseat.bench.results import RecordedResult
    from gpuseat.catalog import ReferenceResult
    from gpuseat.catalog.bundle import Catalog
    from gpuseat.store import CourseStore, CourseView, ParticipantView, SeatView

REFERENCE_GREY = "#9a9a9a"
K520_DAY_H = 24.0  # "24 h of K520 work takes N h here"


@dataclass(frozen=True)
class SeatBench:
    """A benchmark run on one seat, compared with the 2016 references at the same iterations."""

    seat: str
    gpu_name: str
    iterations: int
    seconds: float
    recorded_at: datetime
    speedups: dict[str, float]  # reference GPU → reference seconds / this seconds

    def hours_for_k520_day(self) -> float | None:
        """How long 24 h of K520 work takes on this seat."""
        s = self.speedups.get("K520")
        return K520_DAY_H / s if s else None


@dataclass(frozen=True)
class SeatRow:
    """A seat with who holds it, what the monitor sees and its benchmark."""

    seat: SeatView
    live: SeatLive | None
    last_active: float | None
    bench: SeatBench | None


@dataclass(frozen=True)
class ParticipantUse:
    """GPU hours per participant: the minutes they held a seat (every seat they held), and the seat they hold now."""

    participant: str
    seat: str | None
    active_hours: float
    sampled_hours: float


@dataclass(frozen=True)
class SeatReadiness:
    """A seat's result in the last ``gpuseat seats check``: ready, broken (with why) or not checked."""

    seat: str
    participant: str | None
    state: str  # "ready", "broken" or "not checked"
    reason: str | None
    checked_at: str | None  # ISO time of the check


@dataclass(frozen=True)
class ReadinessSummary:
    """Readiness of every seat from the stored ``seats check`` results, and when the last one ran."""

    rows: list[SeatReadiness]
    checked_at: str | None  # the newest check of any seat (None: never checked)

    def count(self, state: str) -> int:
        """How many seats are in ``state``."""
        return sum(1 for r in self.rows if r.state == state)

    def checked_on(self) -> str | None:
        """The date and minute of the last check, for the report (``2026-09-06 18:02 UTC``)."""
        if not self.checked_at:
            return None
        try:
            at = datetime.fromisoformat(self.checked_at)
        except ValueError:
            return self.checked_at
        at = at if at.tzinfo else at.replace(tzinfo=UTC)
        return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def readiness_summary(store: CourseStore, course: str, seats: list[SeatView]) -> ReadinessSummary:
    """Each held (or checked) seat's last ``seats check`` result (stored by the check), in seat order."""
    checks = store.delivery.readiness_of(course)
    rows = []
    for s in seats:
        c = checks.get(s.key)
        if c is None and not s.participant:
            continue  # a free seat: seats check probes only the seats someone holds
        state = str(c.get("state")) if c and c.get("state") in ("ready", "broken") else "not checked"
        reason = (str(c.get("reason") or "broken") if state == "broken" else None) if c else None
        rows.append(
            SeatReadiness(
                seat=s.key,
                participant=s.participant,
                state=state,
                reason=reason,
                checked_at=str(c["checked_at"]) if c and c.get("checked_at") else None,
            )
        )
    times = sorted(r.checked_at for r in rows if r.checked_at)
    return ReadinessSummary(rows, times[-1] if times else None)


@dataclass
class CourseDigest:
    """Everything the organizer pages and the report show."""

    course: CourseView
    now: datetime
    participants: list[ParticipantView]
    seats: list[SeatRow]
    spend: Spend | None
    curve: list[tuple[datetime, float]]
    planned_curve: list[tuple[datetime, float]]
    alternatives: list[dict[str, Any]]
    usage: list[ParticipantUse]
    heat: tuple[list[str], list[str], dict[tuple[int, int], float]]
    references: list[ReferenceResult]
    survey: SurveyResults
    alerts: list[OpenAlert]
    notes: list[str] = field(default_factory=list)
    readiness: ReadinessSummary = field(default_factory=lambda: ReadinessSummary([], None))

    # -- charts (SVG strings) -----------------------------------------------------------------------

    def cost_chart(self) -> str:
        """Billed so far vs the plan, over the course."""
        title = "Cost to date vs plan (USD)"
        if not self.curve:
            return charts.empty(title, "cost", "no plan option chosen for this course")
        x = [(t.timestamp(), v) for t, v in self.curve]
        now = self.now.timestamp()
        so_far = [p for p in x if p[0] <= now] or x[:1]
        return charts.lines(
            [("plan", [(t.timestamp(), v) for t, v in self.planned_curve]), ("billed so far", so_far)],
            title=title,
            kind="cost",
            unit=" $",
            marker=now,
            x_labels=(self.curve[0][0].strftime("%Y-%m-%d"), self.curve[-1][0].strftime("%Y-%m-%d")),
        )

    def heat_chart(self) -> str:
        """Share of each day each seat was in use."""
        rows, cols, values = self.heat
        return charts.heatmap(rows, cols, values, title="Utilisation per seat per day", kind="utilisation")

    def bench_chart(self) -> str:
        """Benchmark seconds per seat against the K520 and M60 references (shorter is faster)."""
        bars = [
            charts.Bar(f"{r.name} (2016)", r.seconds * 10000 / r.iterations, REFERENCE_GREY) for r in self.references
        ]
        bars += [
            charts.Bar(b.seat, b.seconds * 10000 / b.iterations, note=f"({b.gpu_name})")
            for b in (row.bench for row in self.seats)
            if b is not None
        ]
        return charts.bars(bars, title="LeNet/MNIST, seconds per 10,000 iterations", kind="benchmark", unit=" s")

    def survey_charts(self) -> list[tuple[str, str]]:
        """One distribution chart per scale or choice question, plus the NPS split."""
        out = []
        for r in self.survey.questions:
            if r.question.kind == "text":
                continue
            colors = None
            if r.question.nps:
                colors = [("#d62728" if int(k) <= 6 else "#bcbd22" if int(k) <= 8 else "#2ca02c") for k in r.counts]
            out.append(
                (
                    r.question.id,
                    charts.columns(
                        list(r.counts.items())
                        if r.question.kind == "scale"
                        else [(_short(k), v) for k, v in r.counts.items()],
                        title=r.question.text,
                        kind=f"survey-{r.question.id}",
                        colors=colors,
                        width=420 if r.question.kind == "scale" else 640,
                    ),
                )
            )
        return out

    def nps_chart(self) -> str:
        """Promoters, passives and detractors."""
        nps = next((r.nps for r in self.survey.questions if r.nps is not None), None)
        if nps is None:
            return charts.empty("Net Promoter Score", "nps", "no answers yet")
        return charts.bars(
            [
                charts.Bar("promoters (9–10)", nps.promoters, "#2ca02c"),
                charts.Bar("passives (7–8)", nps.passives, "#bcbd22"),
                charts.Bar("detractors (0–6)", nps.detractors, "#d62728"),
            ],
            title=f"Net Promoter Score {nps.score:+.0f} (95 % interval {nps.low:+.0f} to {nps.high:+.0f})",
            kind="nps",
        )

    def nps(self) -> Any:
        """The NPS result, if any."""
        return next((r.nps for r in self.survey.questions if r.nps is not None), None)


def _short(text: str, n: int = 28) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _seat_benchmarks(
    seats: list[SeatView], results: list[RecordedResult], refs: list[ReferenceResult]
) -> dict[str, SeatBench]:
    """The newest result per seat whose device UUID is the seat's."""
    by_uuid = {s.device_uuid: s.key for s in seats if s.device_uuid}
    out: dict[str, SeatBench] = {}
    for r in sorted(results, key=lambda r: r.recorded_at):
        if r.device is None or r.device.uuid not in by_uuid:
            continue
        key = by_uuid[r.device.uuid]
        speedups = {ref.gpu: (ref.seconds * r.iterations / ref.iterations) / r.seconds for ref in refs}
        out[key] = SeatBench(key, r.gpu_name, r.iterations, r.seconds, r.recorded_at, speedups)
    return out


def _alternatives(store: CourseStore, course: str, catalog: Catalog, notes: list[str]) -> list[dict[str, Any]]:
    """The plan's options for the stored course, re-planned as ``gpuseat plan --alternatives 5`` plans its
    file: the catalog's offers and the course's own offers files as stored with it."""
    from gpuseat.errors import GpuseatError
    from gpuseat.services.planning import plan_stored_course

    try:
        result = plan_stored_course(store, course, catalog, alternatives=5)
    except GpuseatError as exc:
        notes.append(f"no alternatives: {exc.what}")
        return []
    notes += result.warnings
    return list(result.to_dict()["options"])


def _with_own_offers(store: CourseStore, course: str, catalog: Catalog) -> Catalog:
    """The catalog with the offers files stored with the course, so that the chosen option's lines on
    them are billed by their own rules (a monthly rent by the month), not in step with the hours."""
    from dataclasses import replace

    from gpuseat.errors import GpuseatError
    from gpuseat.services.planning import stored_course_offers

    try:
        return replace(catalog, offers=tuple(stored_course_offers(store, course, catalog)))
    except GpuseatError:  # an offers file the catalog no longer validates: the alternatives' note says so
        return catalog


def build_digest(
    store: CourseStore,
    surveys: SurveyService,
    catalog: Catalog,
    course: str | None = None,
    *,
    now: datetime | None = None,
    bench_results: list[RecordedResult] | None = None,
    with_alternatives: bool = False,
) -> CourseDigest:
    """Gather one course's digest (``with_alternatives`` re-runs the planner: the report wants it)."""
    from gpuseat.bench.results import recorded_results

    now = now or datetime.now(UTC)
    view = store.courses.get_course(course)
    key = view.key
    notes: list[str] = []
    participants = store.roster.participants(key)
    seat_views = store.seats.seats(key)
    activity = store.activity
    ids = {s.key: s.id for s in seat_views}  # seat keys are unique only within a course: go by id
    live = activity.live(seat_ids=ids.values())
    last = activity.last_active(seat_ids=ids.values())
    refs = list(catalog.references)
    results = recorded_results() if bench_results is None else bench_results
    benches = _seat_benchmarks(seat_views, results, refs)
    rows = [
        SeatRow(s, live.get(ids.get(s.key, -1)), last.get(ids.get(s.key, -1)), benches.get(s.key)) for s in seat_views
    ]

    option = view.plan_option
    cf = store.courses.course_file(key)
    priced = _with_own_offers(store, key, catalog) if option and cf.offers_files else catalog
    spent = spend(cf, option, priced, now) if option else None
    curve = list(spend_curve(cf, option, priced)) if option else []
    total = spent.planned_usd if spent else 0.0
    planned_curve = [(t, total * i / max(1, len(curve) - 1)) for i, (t, _) in enumerate(curve)]

    days = activity.daily(seat_ids=ids.values())
    by_id = {v: k for k, v in ids.items()}
    holder = {s.key: s.participant for s in seat_views}
    seat_keys = sorted(ids)
    day_list = sorted({d.day for d in days})
    if view.starts_on and view.ends_on:
        first = (datetime.combine(view.starts_on, datetime.min.time(), tzinfo=UTC).timestamp()) // 86400
        day_list = list(range(int(first), int(first) + (view.ends_on - view.starts_on).days + 1))
    col_index = {d: j for j, d in enumerate(day_list)}
    heat_values = {
        (seat_keys.index(by_id[d.seat_id]), col_index[d.day]): d.active_share
        for d in days
        if d.day in col_index and d.seat_id in by_id
    }
    heat_cols = [(datetime(1970, 1, 1, tzinfo=UTC) + timedelta(days=d)).strftime("%m-%d") for d in day_list]
    heat_rows = [f"{k} ({holder[k]})" if holder.get(k) else k for k in seat_keys]
    hours = activity.participant_hours(key)  # each minute of the one who held the seat then
    usage = sorted(
        (ParticipantUse(p.key, p.seat, *hours.get(p.key, (0.0, 0.0))) for p in participants),
        key=lambda u: (-u.active_hours, u.participant),
    )
    alternatives = _alternatives(store, key, catalog, notes) if with_alternatives else []
    return CourseDigest(
        course=view,
        now=now,
        participants=participants,
        seats=rows,
        spend=spent,
        curve=curve,
        planned_curve=planned_curve,
        alternatives=alternatives,
        usage=usage,
        heat=(heat_rows, heat_cols, heat_values),
        references=refs,
        survey=surveys.results(key),
        alerts=activity.open_alerts(seat_ids=ids.values()),
        notes=notes,
        readiness=readiness_summary(store, key, seat_views),
    )


def seat_id(store: CourseStore, course: str, seat: str) -> int | None:
    """The database id of a course's seat (the monitor's tables name seats by id); None when unknown."""
    try:
        return store.seats.get_seat(course, seat).id
    except NotFound:
        return None


def participant_view(
    store: CourseStore,
    catalog: Catalog,
    who: ParticipantView,
    seat: SeatView | None,
    *,
    bench_results: list[RecordedResult] | None = None,
    days: list[SeatDay] | None = None,
) -> tuple[SeatBench | None, ParticipantUse | None]:
    """The benchmark of ``who``'s seat and their use of it (only their own rows are read).

    The seat is read by the caller with the rest of the page, not taken from ``who``: the portal caches
    a link's participant for a few seconds, and a participant who has just claimed a seat (maybe in
    another server process) sees it. ``days``: the participant's daily use (:func:`~gpuseat.store.activity.daily_of`
    of their id: the minutes credited to them, on whichever seat) when the caller read it already."""
    from gpuseat.bench.results import recorded_results

    if seat is None:
        return None, None
    results = recorded_results() if bench_results is None else bench_results
    bench = _seat_benchmarks([seat], results, list(catalog.references)).get(seat.key)
    if days is None:
        use = ParticipantUse(
            who.key,
            seat.key,
            *store.activity.participant_hours(who.course, participant=who.key).get(who.key, (0.0, 0.0)),
        )
    else:
        use = ParticipantUse(who.key, seat.key, sum(d.active_hours for d in days), sum(d.sampled_hours for d in days))
    return bench, use
