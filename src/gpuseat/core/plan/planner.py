"""The planner: the cheapest mix of offers that seats every participant, distinct alternatives, and
``--why OFFER``. Pure: the course, the offers, the catalog and the speeds all come in as arguments."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from gpuseat.catalog.offers import Offer, ProviderRules
from gpuseat.core.cost import Line, billing_months, line, money, num, published_rate
from gpuseat.core.course import Course, Group
from gpuseat.core.plan.fit import Fit, PlanContext, RejectedOffer, cloud_reason
from gpuseat.core.plan.perf import Speed
from gpuseat.core.plan.result import Plan, PlanOption, WhyAnswer
from gpuseat.core.plan.solve import Allocation, solve, tighten
from gpuseat.core.plan.table import GroupFits, OfferTable
from gpuseat.errors import Infeasible, InputError, NoOfferFits, did_you_mean

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

#: An offer priced more than this many days before the course starts is flagged as stale.
STALE_DAYS = 365


def select_offers(
    offers: Sequence[Offer],
    patterns: Sequence[str] = (),
    regions: Sequence[str] = (),
    providers: Mapping[str, ProviderRules] | None = None,
) -> list[Offer]:
    """Offers whose id matches any glob in ``patterns`` (case ignored: ``RunPod:*`` is every RunPod offer)
    and whose region matches any of ``regions`` (no patterns: every offer; no regions: every region); see
    :func:`region_matches`."""
    globs = [p.lower() for p in patterns]
    return [
        o
        for o in offers
        if (not globs or any(fnmatchcase(o.id.lower(), p) for p in globs))
        and (not regions or any(region_matches(o, r, providers) for r in regions))
    ]


def offer_matches(offer_id: str, pattern: str) -> bool:
    """Whether an offer id matches a glob of ``--offer`` or the course's ``offers`` (case ignored)."""
    return fnmatchcase(offer_id.lower(), pattern.lower())


def geographies(providers: Mapping[str, ProviderRules] | None) -> set[str]:
    """The geography names the providers map (``us``, ``eu``, ``asia``)."""
    return {g for p in (providers or {}).values() for g in p.regions}


def region_matches(offer: Offer, pattern: str, providers: Mapping[str, ProviderRules] | None) -> bool:
    """Whether ``offer`` is in ``pattern``: a geography (``us``, ``eu``, ``asia``) through its provider's
    own region names (Azure ``eastus``, RunPod ``US`` are in ``us``), or else a glob over the region."""
    region = offer.region or ""
    rules = (providers or {}).get(offer.provider)
    if pattern.lower() in geographies(providers):
        return rules is not None and any(fnmatchcase(region, g) for g in rules.regions.get(pattern.lower(), ()))
    return fnmatchcase(region, pattern)


def gpu_matches(offer: Offer, patterns: Sequence[str]) -> bool:
    """Whether the offer's GPU model id matches any glob (case ignored): ``A100*`` is every A100."""
    return any(fnmatchcase(offer.gpu.lower(), p.lower()) for p in patterns)


def filter_report(
    name: str, before: Sequence[Offer], after: Sequence[Offer], hint: str = "", by: str = "region"
) -> dict[str, object]:
    """What a filter dropped: counts and, per provider, which regions (or GPU models) went (the plan shows it)."""
    kept = {o.id for o in after}
    dropped = [o for o in before if o.id not in kept]
    groups: dict[str, Counter[str]] = defaultdict(Counter)
    for o in dropped:
        groups[o.provider][(o.region or "") if by == "region" else o.gpu] += 1
    examples = [
        f"{prov} ({', '.join(f'{k} ×{n}' if n > 1 else k for k, n in sorted(c.items()))})"
        for prov, c in sorted(groups.items())
    ]
    return {"filter": name, "kept": len(after), "dropped": len(dropped), "examples": examples, "hint": hint}


def apply_filters(
    offers: Sequence[Offer],
    *,
    regions: Sequence[str] = (),
    gpus: Sequence[str] = (),
    providers: Mapping[str, ProviderRules] | None = None,
) -> tuple[list[Offer], list[dict[str, object]]]:
    """The offers in ``regions`` with a GPU in ``gpus`` (no filter: all), and a report per filter."""
    out = list(offers)
    reports = []
    if gpus:
        kept = [o for o in out if gpu_matches(o, gpus)]
        reports.append(filter_report(f"gpu = {list(gpus)}", out, kept, by="gpu"))
        out = kept
    if regions:
        kept = [o for o in out if any(region_matches(o, r, providers) for r in regions)]
        hint = ""
        geos = geographies(providers)
        if not any(r.lower() in geos for r in regions):
            for geo in sorted(geos):
                extra = [o for o in out if o not in kept and region_matches(o, geo, providers)]
                if extra and any(fnmatchcase(geo, r.split("-")[0].lower()) for r in regions):
                    where = sorted({f"{o.provider} {o.region}" for o in extra})
                    hint = f"--region {geo} also keeps {', '.join(where[:4])} (each provider's own names for {geo})"
        reports.append(filter_report(f"--region {' '.join(regions)}", out, kept, hint))
        out = kept
    return out, reports


def plan(
    course: Course,
    offers: Sequence[Offer],
    *,
    catalog: Catalog,
    speeds: dict[str, Speed] | None = None,
    speeds_note: str = "shipped reference results only",
    alternatives: int = 10,
    budget_usd: float | None = None,
    why: str | None = None,
    where: str = "course",
    exhaustive: bool = False,
    hints: bool = False,
) -> Plan:
    """Price the course on ``offers``: the cheapest mix first, then distinct alternatives.

    ``where`` names the course in error messages (its file path, for the CLI). ``exhaustive`` solves
    over every fitting offer instead of the pruned candidates (same optimum, slower: for checks).
    ``hints`` also says when asking a little less GPU memory would allow a cheaper layout (see
    :func:`near_misses`; it plans the course again, so it is off by default).
    """
    offers = list(offers)
    ctx = PlanContext.of(course, catalog)
    table = OfferTable.of(offers, ctx)
    rejected: list[RejectedOffer] = []
    fits: dict[str, GroupFits] = {}
    for group in course.groups:
        fits[group.name], why_not = table.fits(group, ctx)
        rejected += why_not
        if not fits[group.name].bound:
            need = group.need
            common = Counter(r.reason for r in why_not if not r.detail).most_common(3)
            reasons = "; ".join(f"{reason} ({n} offer{'s' if n != 1 else ''})" for reason, n in common)
            raise NoOfferFits(
                f"no offer can seat group '{group.name}' (needs ≥ {num(need.min_gpu_memory_gb)} GB GPU memory, "
                f"{need.guest_os}, {need.isolation}); {len(offers)} offers were considered"
                + (f": {reasons}" if reasons else ""),
                where=f"{where}: group '{group.name}'",
                fix="lower the needs, or add offers (--offers FILE) that meet them; see 'rejected' in --format json",
            )
    n = course.participant_count
    if exhaustive:
        pools = {g.name: [f for i in fits[g.name].bound for f in fits[g.name].layouts(i)] for g in course.groups}
    else:
        pools = tighten(course, {g.name: fits[g.name].candidates(n) for g in course.groups})
    best = solve(course, pools)
    if best is None:
        raise Infeasible(
            "the offers' availability limits cannot seat every participant",
            where=where,
            fix="raise 'available' on some offers or add offers",
        )
    providers = catalog.providers
    options = [_option(best, providers, ctx)]
    seen = {options[0].key}
    for i in _alternative_offers(table, fits) if alternatives else []:
        if len(options) > alternatives:
            break
        alt = _forced(course, fits, pools, i)
        if alt is None:
            continue
        option = _option(alt, providers, ctx)
        if option.key not in seen:
            seen.add(option.key)
            options.append(option)
    options.sort(key=lambda o: o.total_usd)
    regions = _same_price_regions(table, fits, {a.fit.offer.id for o in options for a in o.allocations})
    for option in options:
        option.also_in = sorted({r for a in option.allocations for r in regions.get(a.fit.offer.id, [])})
    by_id = {o.id: o for o in offers}
    answer = _why(why, course, fits, pools, options[0], providers, ctx, by_id, rejected) if why else None
    return Plan(
        course,
        options,
        _dedupe(rejected),
        [],
        speeds or {},
        by_id,
        speeds_note=speeds_note,
        budget_usd=budget_usd,
        why=answer,
        passed_over=_passed_over(options, rejected),
        hints=near_misses(course, offers, catalog, options[0]) if hints else [],
    )


#: A requirement "misses by a little" when an offer or a layout has at least this share of it.
NEAR = 0.9


def near_misses(course: Course, offers: Sequence[Offer], catalog: Catalog, best: PlanOption) -> list[dict[str, object]]:
    """Where a group's GPU memory requirement misses a cheaper layout by a little (asking 20 GB where a
    19.5 GB MIG slice exists): for each group, the closest value within :data:`NEAR` of the asked one that
    some offer or layout gives, with what it would allow and the saving, found by planning again with it."""
    out: list[dict[str, object]] = []
    many = len(course.groups) > 1
    for group in course.groups:
        asked = group.min_gpu_memory_gb
        if not asked:
            continue
        for value in _near_values(group, offers, catalog)[:2]:
            relaxed = _relaxed(course, group.name, value)
            try:
                found = plan(relaxed, offers, catalog=catalog, alternatives=0).options[0]
            except (NoOfferFits, Infeasible, InputError):  # a hint never fails the plan
                continue
            saving = round(best.total_usd - found.total_usd, 2)
            if saving < 0.01:
                continue
            mine = [a for a in found.allocations if a.fit.group.name == group.name]
            allows = ", ".join(
                f"{a.units}× {a.fit.offer.id}"
                + (f" ({a.fit.mode} {a.fit.profile}, {a.fit.seats_per_unit} seats each)" if a.fit.profile else "")
                for a in mine
            )
            who = f" for group '{group.name}'" if many else ""
            text = (
                f"asking ≤ {value:g} GB of GPU memory{who} (not {asked:g} GB) would allow {allows}, "
                f"saving {money(saving)} ({money(found.total_usd)} instead of {money(best.total_usd)})"
            )
            out.append(
                {
                    "group": group.name,
                    "field": "min_gpu_memory_gb",
                    "asked": asked,
                    "value": value,
                    "total_usd": found.total_usd,
                    "saving_usd": saving,
                    "text": text,
                }
            )
            break
    return out


def _near_values(group: Group, offers: Sequence[Offer], catalog: Catalog) -> list[float]:
    """GPU memory sizes just under what ``group`` asks (within :data:`NEAR`) that a cloud offer or a
    server's layout gives, closest first."""
    from gpuseat.core.capacity import chip_options

    asked = group.min_gpu_memory_gb
    low = asked * NEAR
    found: set[float] = set()
    need = group.need
    gpus: set[str] = set()
    for offer in offers:
        gb = offer.memory_per_chip_gb
        if offer.kind != "cloud":
            gpus.add(offer.gpu)
        elif low <= gb < asked and cloud_reason(offer, need.model_copy(update={"min_gpu_memory_gb": gb})) is None:
            found.add(gb)
    free = need.model_copy(update={"min_gpu_memory_gb": 0.0})
    for name in sorted(gpus):
        gpu = catalog.find_gpu(name)
        if gpu is None:
            continue
        for option in chip_options(gpu, free, catalog.partitions)[0]:
            if not option.chip_gb and low <= option.memory_gb < asked:
                found.add(option.memory_gb)
    return sorted(found, reverse=True)


def _relaxed(course: Course, name: str, gb: float) -> Course:
    """``course`` with group ``name`` asking ``gb`` of GPU memory."""
    groups = tuple(g.model_copy(update={"min_gpu_memory_gb": gb}) if g.name == name else g for g in course.groups)
    return course.model_copy(update={"participants": None, "needs": None, "group": groups})


def _passed_over(options: list[PlanOption], rejected: list[RejectedOffer]) -> list[RejectedOffer]:
    """The modes and profiles passed over on servers that seat a group: for a server in an option, why
    each lost to the layout that option rents (the one its note names); for the others, to the layout
    with the most seats."""
    out: dict[RejectedOffer, None] = {}
    used: set[tuple[str, str]] = set()
    for option in options:
        for a in option.allocations:
            used.add((a.fit.offer.id, a.fit.group.name))
            out.update(dict.fromkeys(a.fit.passed_over))
    out.update(dict.fromkeys(r for r in rejected if r.detail and (r.offer, r.group or "") not in used))
    return list(out)


def _forced(course: Course, fits: dict[str, GroupFits], pools: dict[str, list[Fit]], i: int) -> list[Allocation] | None:
    """The best mix that puts every group offer ``i`` can seat on offer ``i`` (or, when its availability
    is too small for that, that uses it at least once)."""
    allowed = {g.name: fits[g.name].layouts(i) or pools[g.name] for g in course.groups}
    found = solve(course, allowed)
    if found is not None:
        return found
    widened = {
        g.name: pools[g.name] + [f for f in fits[g.name].layouts(i) if f not in pools[g.name]] for g in course.groups
    }
    offer_id = next(f.offer.id for g in course.groups if (f := fits[g.name].fit(i)))
    return solve(course, widened, must_use=offer_id)


def _alternative_offers(table: OfferTable, fits: dict[str, GroupFits]) -> list[int]:
    """One offer per instance family (provider, instance type, billing), the cheapest per seat of it,
    cheapest families first: the alternatives are distinct mixes, not one mix region by region."""
    bound: dict[int, float] = {}
    for group_fits in fits.values():
        for i, b in group_fits.bound.items():
            if b < bound.get(i, math.inf):
                bound[i] = b
    best: dict[tuple[str, str, str], int] = {}
    rank = table.id_rank
    for i, b in bound.items():
        fam = table.families[i]
        j = best.get(fam)
        if j is None or (b, rank[i]) < (bound[j], rank[j]):
            best[fam] = i
    return sorted(best.values(), key=lambda i: (bound[i], rank[i]))


def _same_price_regions(table: OfferTable, fits: dict[str, GroupFits], used: set[str]) -> dict[str, list[str]]:
    """For each offer in ``used``, the other regions where the same instance family costs the same per seat
    for some group."""
    ids = {table.offers[i].id: i for gf in fits.values() for i in gf.bound if table.offers[i].id in used}
    wanted = {table.families[i] for i in ids.values()}
    members: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for i, fam in enumerate(table.families):
        if fam in wanted:
            members[fam].append(i)
    out: dict[str, list[str]] = {}
    for offer_id, i in ids.items():
        regions = set()
        for group_fits in fits.values():
            b = group_fits.bound.get(i)
            if b is None:
                continue
            for j in members[table.families[i]]:
                other = group_fits.bound.get(j)
                if j != i and other is not None and abs(other - b) < 1e-6:
                    regions.add(table.offers[j].region or "")
        out[offer_id] = sorted(regions - {table.offers[i].region or ""})
    return out


def _option(allocations: list[Allocation], providers: Mapping[str, ProviderRules], ctx: PlanContext) -> PlanOption:
    course = ctx.course
    lines: list[Line] = []
    notes: list[str] = []
    gpus: dict[str, float] = defaultdict(float)
    for a in sorted(allocations, key=lambda a: (a.fit.group.name, a.fit.offer.id)):
        f = a.fit
        lines += [line(rate, a.units, offer=f.offer.id, group=f.group.name) for rate in f.unit_rates]
        lines += [line(rate, a.seats, offer=f.offer.id, group=f.group.name) for rate in f.seat_rates]
        notes += [n for n in f.notes if n not in notes]
        if a.seats < a.units * f.seats_per_unit:
            notes.append(f"{f.offer.id}: {a.units * f.seats_per_unit - a.seats} seat(s) left spare for {f.group.name}")
        age = (course.schedule.start - f.offer.as_of).days
        if age > STALE_DAYS:
            stale = f"{f.offer.id}: price as of {f.offer.as_of}, {age // 365} year(s) before the course: historical"
            if stale not in notes:
                notes.append(stale)
        gpus[f.offer.provider] += a.units * f.offer.gpu_count
    rules = providers
    flags: list[dict[str, str]] = []
    over = [(p, c) for p, c in sorted(gpus.items()) if p in rules and _over_quota(rules[p], c)]
    for provider, count in over:
        text = (
            f"{num(count)} GPUs on {provider}: more than its default quota of about "
            f"{rules[provider].default_gpu_quota}; request a quota increase weeks ahead"
        )
        notes.append(text)
        who = f" ({provider})" if len(over) > 1 else ""
        flags.append(_flag("quota", f"needs a quota request for {num(count)} GPUs{who}", text))
    if course.costs.support:
        lines += _support_lines(lines, rules, ctx)
    lines += _allowance_lines(allocations, lines, ctx)
    option = PlanOption(allocations, lines, notes, flags=flags)
    _annotate(option, ctx)
    return option


def _over_quota(rules: ProviderRules, gpus: float) -> bool:
    return rules.default_gpu_quota is not None and gpus > rules.default_gpu_quota


def _flag(kind: str, flag: str, text: str) -> dict[str, str]:
    """One of an option's warnings: ``flag`` is the table's short form of ``text``, its ``--explain`` line."""
    return {"kind": kind, "flag": flag, "text": text}


def _flag_option(option: PlanOption, ctx: PlanContext) -> None:
    """The warnings a budget-holder needs beside the total (the table's "flags"), each the short form of
    a line ``--explain`` prints: seats that cannot be stopped and are billed while idle, availability
    limits (the offer's own ``available``, a provider's stock note), a provider's spend limit, storage and
    egress billed apart from the instances, then the risks and taxes."""
    flags = option.flags
    providers = ctx.catalog.providers
    units: dict[str, int] = defaultdict(int)
    offers: dict[str, Offer] = {}
    for a in option.allocations:
        units[a.fit.offer.id] += a.units
        offers[a.fit.offer.id] = a.fit.offer
    idle = False
    for offer in offers.values():
        if offer.monthly or ctx.course.schedule.always_on or ctx.stopped_between_sessions(offer):
            continue
        note = ctx.billed_runs(offer)[1]
        if note and not offer.stoppable:
            if not idle:
                flags.append(_flag("idle", "cannot be stopped, billed while idle", note[0]))
                idle = True
            else:
                flags[-1] = _flag("idle", flags[-1]["flag"], f"{flags[-1]['text']}; {note[0]}")
    spend: dict[str, float] = defaultdict(float)
    stock: dict[tuple[str, str], list[str]] = defaultdict(list)  # (provider, region) → "N × offer"
    for oid, offer in offers.items():
        n = units[oid]
        rules = providers.get(offer.provider)
        if offer.available is not None:
            text = (
                f"{oid}: {n} of the {offer.available} unit(s) available: the offer's 'available' limit "
                f"(source: {_short_source(offer.source)})"
            )
            flags.append(_flag("availability", f"{n} of {offer.available} available", text))
        elif rules is not None and rules.stock_note and offer.kind == "cloud":
            stock[(offer.provider, offer.region or "")].append(f"{n} × {oid}")
        if not offer.monthly:
            spend[offer.provider] += n * offer.price_usd
    for (provider, region), rented in stock.items():
        n = sum(int(x.split(" ", 1)[0]) for x in rented)
        where = f" in {region}" if region else ""
        stock_note = providers[provider].stock_note
        text = (
            f"{', '.join(rented)}{where}, each pod of one GPU type: {stock_note} ({providers[provider].limits_as_of})"
        )
        flags.append(_flag("availability", f"{n} pod{'s' if n != 1 else ''}{where}: stock unknown", text))
    for provider, per_h in sorted(spend.items()):
        rules = providers.get(provider)
        limit = rules.spend_limit_usd_per_h if rules else None
        if rules is not None and limit is not None and per_h > limit:
            text = (
                f"{provider}: this option runs {money(per_h)}/h at once, over the account's default spend limit "
                f"of ${num(limit)}/h; have it raised before the course ({_short_source(rules.spend_limit_source)}, "
                f"{rules.limits_as_of})"
            )
            flags.append(_flag("spend-limit", f"over {provider}'s ${num(limit)}/h spend limit", text))
    billed = [ln for ln in option.lines if ln.item == "disk" or ln.item.startswith("egress")]
    usd = round(sum(ln.usd for ln in billed), 2)
    if billed and usd:
        words = "/".join(dict.fromkeys("storage" if ln.item == "disk" else "egress" for ln in billed))
        parts = "; ".join(f"{ln.offer} {ln.item}: {ln.formula}" for ln in billed)
        flags.append(_flag("storage", f"incl. {money(usd)} {words}", f"{words} billed apart from the seats: {parts}"))
    if ctx.course.costs.storage_gb_per_seat:
        for oid, offer in offers.items():
            rules = providers.get(offer.provider)
            if rules is not None and rules.storage_note and not offer.disk_usd_per_gb_month:
                text = f"{oid}: {rules.storage_note} ({_short_source(rules.storage_source)}, {rules.limits_as_of})"
                flags.append(_flag("storage", "extra storage billed apart", text))
    short = {"restart not guaranteed": "restart risk"}
    for risk in option.risks:
        head = risk.split(":", 1)[0]
        flags.append(_flag("risk", short.get(head, head), risk))
    for tax in option.taxes:
        rate = f"{tax['pct']:g} %" if tax.get("pct") is not None else "rate by billing address"
        flags.append(_flag("tax", "+tax", f"{tax['provider']} {tax['text']} ({rate}; rule {tax['rule']})"))
    flags[:] = list({f["text"]: f for f in flags}.values())


def _short_source(source: str) -> str:
    return source.split(";")[0].strip()


def _annotate(option: PlanOption, ctx: PlanContext) -> None:
    """What a budget-holder reads beside the total: each offer's price date and source with its rules,
    risk flags (a stopped seat that may not restart, spot), taxes charged apart, and the figure a
    publication's simpler arithmetic gives for the same mix."""
    stops = len(ctx.runs) > 1  # seats are stopped between access windows
    closed = "the access window" if ctx.course.schedule.access else "sessions"
    seen: set[str] = set()
    published: list[tuple[str, float, float, str]] = []  # (rule id, billed rent, published rent, formula)
    label = ""
    source = ""
    for a in option.allocations:
        offer = a.fit.offer
        if offer.id not in seen:
            seen.add(offer.id)
            option.prices.append(
                {
                    "offer": offer.id,
                    "price_usd": offer.price_usd,
                    "currency": offer.currency,
                    "price": offer.price if offer.currency != "USD" else offer.price_usd,
                    "unit": "month" if offer.monthly else "hour",
                    "billing": ctx.effective(offer).billing,
                    "as_of": str(offer.as_of),
                    "source": offer.source,
                    "rules": [r.to_dict() for r in ctx.rules(offer)],
                }
            )
            for rule in ctx.rules(offer, "stop"):
                if offer.kind != "cloud" or not stops or not ctx.stopped_between_sessions(offer):
                    continue
                if not rule.get("restart_guaranteed", True):
                    option.risks.append(
                        f"restart not guaranteed: {offer.id} seats are stopped outside {closed}; {rule.text}"
                    )
                elif rule.get("stopped_state"):
                    option.notes.append(f"{offer.id}: stop seats as '{rule.get('stopped_state')}': {rule.text}")
            if offer.spot:
                option.risks.append(f"spot: {offer.id} can be interrupted at any time")
            for rule in ctx.rules(offer, "tax"):
                pct = rule.get("pct")
                option.taxes.append({"provider": offer.provider, "rule": rule.id, "pct": pct, "text": rule.text})
        for rule in ctx.rules(offer, "as-published"):
            runs = ctx.billed_runs(offer)[0]
            per = "seat" if offer.kind == "cloud" else "server"
            alt = published_rate(offer, runs, per=per)
            rent = ctx.usage_rate(offer)[0]
            published.append(
                (
                    rule.id,
                    round(rent.usd * a.units, 2),
                    round(alt.usd * a.units, 2),
                    f"{offer.id}: {alt.formula} × {a.units}",
                )
            )
            label, source = rule.text, rule.source
    _flag_option(option, ctx)
    if published:
        usd = round(option.total_usd - sum(p[1] for p in published) + sum(p[2] for p in published), 2)
        option.published = {
            "rule": published[0][0],
            "label": label,
            "usd": usd,
            "formulas": [p[3] for p in published],
            "source": source,
        }


def _allowance_lines(allocations: list[Allocation], lines: list[Line], ctx: PlanContext) -> list[Line]:
    """Free monthly allowances (AWS: 100 GB of egress a month per account), taken off after the mix is
    chosen: they are per account, not per seat."""
    gb_per_seat = ctx.course.costs.egress_gb_per_seat
    if not gb_per_seat:
        return []
    first, last = ctx.course.schedule.span_days()
    months = len(billing_months(first, last))
    out = []
    by_provider: dict[str, tuple[float, float, str]] = {}
    for a in allocations:
        offer = a.fit.offer
        for rule in ctx.rules(offer, "free-allowance"):
            if rule.get("item") != "egress" or not offer.egress_usd_per_gb:
                continue
            gb, usd, _ = by_provider.get(offer.provider, (0.0, 0.0, rule.id))
            by_provider[offer.provider] = (
                gb + a.seats * gb_per_seat,
                usd + a.seats * gb_per_seat * offer.egress_usd_per_gb,
                rule.id,
            )
    for provider, (gb, usd, rule_id) in sorted(by_provider.items()):
        rule = ctx.catalog.rules[rule_id]
        free_gb = min(gb, float(rule.get("gb_per_month")) * months)
        saved = round(usd * free_gb / gb, 2) if gb else 0.0
        if saved:
            formula = (
                f"-{num(rule.get('gb_per_month'))} GB/month × {months} month(s), {num(free_gb)} of {num(gb)} GB free "
                f"at {num(round(usd / gb, 6))} $/GB = -{money(saved)}"
            )
            out.append(Line(f"{provider}:free-egress", "all", "egress free allowance", 1, -saved, formula))
    return out


def _support_lines(lines: list[Line], providers: Mapping[str, ProviderRules], ctx: PlanContext) -> list[Line]:
    """Provider support plans: the greater of a monthly minimum and a share of the spend."""
    out = []
    first, last = ctx.course.schedule.span_days()
    months = len(billing_months(first, last))
    spend: dict[str, float] = defaultdict(float)
    for ln in lines:
        spend[ln.offer.split(":", 1)[0]] += ln.usd
    for provider, usd in sorted(spend.items()):
        rules = providers.get(provider)
        if rules is None or not (rules.support_min_usd_month or rules.support_pct):
            continue
        floor = rules.support_min_usd_month * months
        share = usd * rules.support_pct / 100
        cost = round(max(floor, share), 2)
        formula = (
            f"max({num(rules.support_min_usd_month)} $/month × {months} month(s), "
            f"{num(rules.support_pct)} % × {money(usd)}) = {money(cost)}"
        )
        out.append(Line(f"{provider}:support", "all", "support plan", 1, cost, formula))
    return out


def _why(
    offer_id: str,
    course: Course,
    fits: dict[str, GroupFits],
    pools: dict[str, list[Fit]],
    best: PlanOption,
    providers: Mapping[str, ProviderRules],
    ctx: PlanContext,
    offers: dict[str, Offer],
    rejected: list[RejectedOffer],
) -> WhyAnswer:
    """Price ``offer_id`` for this course and say why it is not the first option."""
    if offer_id not in offers:  # ids are matched as --offer globs are: case ignored
        offer_id = {k.lower(): k for k in offers}.get(offer_id.lower(), offer_id)
    if offer_id not in offers:
        raise InputError(
            f"unknown offer id '{offer_id}'.{did_you_mean(offer_id, offers)}",
            where="--why",
            fix="give an offer id from 'gpuseat offers list' (after --offer/--region filters)",
        )
    index = list(offers).index(offer_id)
    cannot = [f"cannot seat group '{r.group}': {r.reason}" for r in rejected if r.offer == offer_id and not r.detail]
    if all(fits[g.name].fit(index) is None for g in course.groups):
        return WhyAnswer(offer_id, None, cannot or ["it seats no group of this course"])
    found = _forced(course, fits, pools, index)
    if found is None:
        return WhyAnswer(offer_id, None, [*cannot, "its availability cannot seat the groups it fits"])
    option = _option(found, providers, ctx)
    reasons = list(cannot)
    gap = round(option.total_usd - best.total_usd, 2)
    if gap <= 0:
        reasons.append(f"it is in the first option: {money(option.total_usd)} for the whole course")
        return WhyAnswer(offer_id, option, reasons)
    reasons.append(
        f"with it the course costs {money(option.total_usd)}, {money(gap)} "
        f"({gap / best.total_usd:.0%}) more than option 1 ({money(best.total_usd)})"
    )
    mine = next(a for a in option.allocations if a.fit.offer.id == offer_id)
    top = min(best.allocations, key=lambda a: a.fit.per_seat_bound())
    reasons.append(
        f"per seat when its units are full: {money(mine.fit.per_seat_bound())} on {offer_id} "
        f"({mine.fit.seats_per_unit} seat(s) per unit) vs {money(top.fit.per_seat_bound())} on {top.fit.offer.id}"
    )
    if mine.seats < mine.units * mine.fit.seats_per_unit:
        reasons.append(f"{mine.units * mine.fit.seats_per_unit - mine.seats} of its seats would stay empty")
    offer = ctx.effective(mine.fit.offer)
    if offer.billing == "month-whole":
        first, last = course.schedule.span_days()
        months = len(billing_months(first, last, anniversary=offer.month_start == "anniversary"))
        days = (last - first).days + 1
        reasons.append(f"it bills whole months: {months} full month(s) for {days} day(s) of use")
    elif offer.billing == "month-first-prorated":
        first, last = course.schedule.span_days()
        head = billing_months(first, last)[0]
        left = head.days - (first - head.start).days
        days = (last - first).days + 1
        reasons.append(
            f"its first month is billed from the order day to the month's end: {left} of "
            f"{head.start:%B}'s {head.days} days, for {days} day(s) of use"
        )
    elif not offer.monthly and not course.schedule.always_on and not ctx.stopped_between_sessions(offer):
        reasons.append("it is not stopped between sessions: billed from the first session's start to the last end")
    return WhyAnswer(offer_id, option, reasons)


def _dedupe(rejected: list[RejectedOffer]) -> list[RejectedOffer]:
    return list(dict.fromkeys(rejected))
