"""CLI for ``gpuseat plan`` and ``gpuseat offers``: parse flags, call :mod:`gpuseat.services.planning`, print."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer

from gpuseat.cli import collect_later
from gpuseat.cli._options import add_group
from gpuseat.cli._output import Format, FormatOption, print_csv, print_json, print_rows, print_table, stderr_console

CATALOG_OPTION = typer.Option(
    None, "--catalog", help="Folder of catalog TOML files laid over the bundled ones (gpus, offers, providers, …)."
)


def _budget(value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and 0 < value <= 1e12):
        from gpuseat.errors import InputError

        raise InputError(f"{value!r} is not a budget", where="--budget", fix="give a positive amount in USD, e.g. 5000")
    return value


def _plan(
    course: Path = typer.Argument(..., help="Course file (TOML); see examples/course-2016.toml and docs/plan.md."),
    offers: list[Path] = typer.Option(
        [], "--offers", help="Offers file (TOML) added to the course's offers; repeatable."
    ),
    skypilot: list[str] = typer.Option([], "--skypilot", help="PROVIDER=PATH of a SkyPilot vms.csv; repeatable."),
    offer: list[str] = typer.Option([], "--offer", help="Only offers whose id matches this glob; repeatable."),
    region: list[str] = typer.Option(
        [], "--region", help="Only offers in a geography (us, eu, asia: each provider's own regions) or a region glob."
    ),
    catalog: Path | None = CATALOG_OPTION,
    alternatives: int = typer.Option(10, "--alternatives", min=0, max=100, help="How many distinct other mixes."),
    budget: float | None = typer.Option(None, "--budget", help="Mark options that cost more than this many USD."),
    why: str | None = typer.Option(None, "--why", help="Price this offer for the course and say why it is not first."),
    explain: bool = typer.Option(False, "--explain", help="Print every cost as a formula line."),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        help="Offers rejected and the server layouts passed over, with why (also with --explain).",
    ),
    fmt: FormatOption = Format.table,
) -> None:
    """Price the course across offers: the cheapest mix first, distinct alternatives, rejections explained."""
    with collect_later():  # a plan is a short run: what it loads lives until it exits
        from gpuseat.catalog.bundle import load_catalog
        from gpuseat.services.planning import plan_course, recorded_speeds

        result = plan_course(
            course,
            load_catalog(catalog),
            recorded=recorded_speeds(),
            offer_files=offers,
            skypilot=skypilot,
            patterns=offer,
            regions=region,
            alternatives=alternatives,
            budget_usd=_budget(budget),
            why=why,
        ).to_dict()
        if result["warnings"]:  # Rich only when there is something to say: JSON and CSV runs do not load it
            from rich.markup import escape

            err = stderr_console()
            for warning in result["warnings"]:
                err.print(f"[yellow]warning:[/] {escape(warning)}", markup=True, highlight=False)
        if fmt is Format.json:
            print_json(result)
            return
        if fmt is Format.csv:
            print_csv(_csv_rows(result), ["rank", "offers", "seats", "total_usd", "usd_per_seat_hour", "over_budget"])
            return
        from gpuseat.core.amounts import hours_text

        course_info = result["course"]
        title = (
            f"{course_info['name']}: {course_info['participants']} participants, "
            f"{course_info['period_days']} days, {hours_text(course_info['seat_hours_each'])} seat-hours each"
        )
        _print_options(_table_rows(result), title)
        from gpuseat.safe_text import clean  # course text (group names, quoted figures) reaches the terminal

        for text in summary_lines(result):
            typer.echo(clean(text))
        if why:
            _print_why(result["why"])
        if explain:
            for text in explain_lines(result, verbose=verbose):
                typer.echo(clean(text))
        elif verbose:
            for text in rejected_lines(result) + passed_over_lines(result):
                typer.echo(clean(text))
        elif not why:
            typer.echo("(--explain shows every figure; --why OFFER prices one offer; --format json gives all details)")


def _print_options(rows: list[dict[str, Any]], title: str) -> None:
    """The options table; when it must lose a column to fit the terminal, "per seat-hour" goes before the
    flags (what a budget-holder must not miss)."""
    columns = ["rank", "offers", "total", "per seat-hour", "flags"]
    print_table(rows, columns, title=title, drop=["per seat-hour"])


def _mix(option: dict[str, Any], sep: str = ", ") -> str:
    return sep.join(f"{x['count']}× {x['offer']}" for x in option["offers"])


def _csv_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    seat_hours = result["course"]["participants"] * result["course"]["seat_hours_each"]
    return [
        {
            "rank": o["rank"],
            "offers": _mix(o, " + "),
            "seats": o["seats"],
            "total_usd": o["total_usd"],
            "usd_per_seat_hour": round(o["total_usd"] / seat_hours, 4) if seat_hours else "",
            "over_budget": o.get("over_budget", ""),
        }
        for o in result["options"]
    ]


def _regions(option: dict[str, Any]) -> str:
    regions = option["also_in_regions"]
    if not regions:
        return ""
    shown = ", ".join(regions[:3]) + (f" +{len(regions) - 3}" if len(regions) > 3 else "")
    return f" (same price in {shown})"


def _per_seat_hour(option: dict[str, Any], labelled: bool) -> str:
    """Cost per seat-hour of each offer in the mix, labelled with its group(s) when the course has several."""
    parts = []
    for p in option["performance"]:
        figure = f"${p['usd_per_seat_hour']:.3f}"
        parts.append(f"{'+'.join(p.get('groups', []))}: {figure}" if labelled else figure)
    return ", ".join(parts)


def _flags(option: dict[str, Any]) -> str:
    """The option's warnings, short; ``--explain`` prints the line each abbreviates (``flag 'X': …``)."""
    return "; ".join(dict.fromkeys(f["flag"] for f in option.get("flags", [])))


def _table_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    labelled = len(result["course"]["groups"]) > 1
    people = result["course"]["participants"]
    return [
        {
            "rank": o["rank"],
            "offers": _mix(o) + (f" ({o['seats']} seats)" if o["seats"] != people else "") + _regions(o),
            "total": f"${o['total_usd']:,.2f}" + (" over budget" if o.get("over_budget") else ""),
            "per seat-hour": _per_seat_hour(o, labelled),
            "flags": _flags(o),
        }
        for o in result["options"]
    ]


def _short(source: str, width: int = 90) -> str:
    first = source.split(";")[0].strip()
    return first if len(first) <= width else first[: width - 1] + "…"


def summary_lines(result: dict[str, Any]) -> list[str]:
    """Under the table: currency and tax, each offer's price date and source, risks, the published figure."""
    out = ["All totals in USD, taxes not included."]
    taxes = {t["rule"]: t for o in result["options"] for t in o.get("taxes", [])}
    for t in taxes.values():
        rate = f"{t['pct']:g} %" if t.get("pct") is not None else "rate by billing address"
        out.append(f"  tax: {t['provider']} {t['text']} ({rate}; rule {t['rule']})")
    risks: dict[str, list[int]] = {}
    for o in result["options"]:
        for risk in o.get("risks", []):
            risks.setdefault(risk, []).append(o["rank"])
    seen: dict[str, dict[str, Any]] = {}
    for o in result["options"]:
        for p in o.get("prices", []):
            seen.setdefault(p["offer"], p)
    out.append("Prices (price, date, source, billing rules):")
    for p in seen.values():
        unit = "month" if p["unit"] == "month" else "h"
        rules = ", ".join(r["id"] for r in p["rules"]) or "none"
        price = f"${p['price_usd']:,.2f}" if unit == "month" else f"${p['price_usd']:g}"
        price += f"/{unit}"
        if p.get("currency", "USD") != "USD":
            rated = [r["as_of"] for r in p["rules"] if r["kind"] == "exchange-rate"]
            dated = f", rate of {rated[0]}" if rated else ""
            price += f" (= {p['price']:,.2f} {p['currency']}{dated})"
        out.append(f"  {p['offer']}: {price}, as of {p['as_of']}, {_short(p['source'])}; rules: {rules}")
    for risk, ranks in risks.items():
        out.append(f"Risk (option{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}): {risk}")
    for o in result["options"]:
        pub = o.get("published")
        if pub:
            same = abs(pub["usd"] - o["total_usd"]) < 0.005
            rule = "the same as the provider's rule" if same else f"the provider's rule bills ${o['total_usd']:,.2f}"
            out.append(f"Option {o['rank']}, by {pub['label'].split(':')[0]}: ${pub['usd']:,.2f} ({rule})")
    over = [str(o["rank"]) for o in result["options"] if o.get("over_budget")]
    if over:
        out.append(
            f"Over the budget of ${result['budget_usd']:,.2f}: option{'s' if len(over) > 1 else ''} {', '.join(over)}"
        )
    for hint in result.get("hints", []):
        out.append(f"Hint: {hint['text']}")
    for q in result.get("quoted", []):
        out.append(f"Quoted: {q['text']}")
    for f in result.get("filters", []):
        if f["dropped"]:
            out.append(f"Filter {f['filter']}: dropped {f['dropped']} offer(s): {', '.join(f['examples'])}")
            if f.get("hint"):
                out.append(f"  {f['hint']}")
    return out


def _print_why(answer: dict[str, Any]) -> None:
    from gpuseat.safe_text import clean

    typer.echo(clean(f"Why not {answer['offer']}:"))
    for reason in answer["reasons"]:
        typer.echo(clean(f"  - {reason}"))
    if answer["option"]:
        for ln in answer["option"]["lines"]:
            typer.echo(clean(f"  {ln['offer']} [{ln['group']}] {ln['item']}: {ln['formula']}"))


def explain_lines(result: dict[str, Any], *, verbose: bool = False) -> list[str]:
    """The ``--explain`` text: every option's formula lines, notes and performance, then the rejections."""
    out: list[str] = []
    for o in result["options"]:
        over = " (over budget)" if o.get("over_budget") else ""
        out.append(f"Option {o['rank']}: ${o['total_usd']:,.2f}{over}")
        labelled = len(result["course"]["groups"]) > 1
        for ln in o["lines"]:
            group = f" [{ln['group']}]" if labelled else ""
            out.append(f"  {ln['offer']}{group} {ln['item']}: {ln['formula']}")
        flagged = {f["text"] for f in o.get("flags", [])}
        out += [f"  note: {note}" for note in o["notes"] if note not in flagged]
        out += [f"  risk: {risk}" for risk in o.get("risks", []) if risk not in flagged]
        out += [f"  flag '{f['flag']}': {f['text']}" for f in o.get("flags", [])]
        pub = o.get("published")
        if pub:
            out.append(f"  {pub['label'].split(':')[0]}: ${pub['usd']:,.2f} ({'; '.join(pub['formulas'])})")
        for p in o["performance"]:
            extra = p.get("time_saved") or p.get("note", "")
            run = f", ${p['usd_per_lenet_run']:.4f} per LeNet run" if "usd_per_lenet_run" in p else ""
            who = f" [{', '.join(p.get('groups', []))}]" if labelled else ""
            out.append(f"  speed{who}: ${p['usd_per_seat_hour']:.4f} per seat-hour{run}; {extra}")
    out.append(f"Speeds: {result['speeds']}")
    out += rejected_lines(result)
    if verbose:
        out += passed_over_lines(result)
    return out


def rejected_lines(result: dict[str, Any]) -> list[str]:
    """The offers that cannot seat a group, one line per reason."""
    out: list[str] = []
    if result["rejected"]:
        by_reason: dict[str, list[str]] = {}
        for r in result["rejected"]:
            name = r["offer"] + (f" (+{len(r['twins'])} twin)" if r["twins"] else "")
            groups = f" [{', '.join(r['groups'])}]" if len(result["course"]["groups"]) > 1 else ""
            by_reason.setdefault(r["reason"] + groups, []).append(name)
        out.append("Rejected (cannot seat a group):")
        for reason, names in by_reason.items():
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            out.append(f"  {shown}: {reason}")
    return out


def passed_over_lines(result: dict[str, Any]) -> list[str]:
    """``-v``: the modes and profiles passed over on servers that seat a group, under the layout the
    plan rents (as its note says: ``N seats per server (mode profile)``), each with why not."""
    if not result["passed_over"]:
        return []
    out = ["Passed over on servers that seat the group (profile choices):"]
    heads: dict[tuple[str, str | None, str | None], list[str]] = {}
    labelled = len(result["course"]["groups"]) > 1
    for r in result["passed_over"]:
        heads.setdefault((r["offer"], r.get("group"), r.get("chosen")), []).append(r["reason"])
    rented = {
        (g["offer"], g["group"], f"{g['mode']} {g['profile']}" if g["profile"] else g["mode"])
        for o in result["options"]
        for g in o["groups"]
    }
    for (offer, group, chosen), reasons in heads.items():
        who = f" [{group}]" if labelled and group else ""
        if chosen and (offer, group, chosen) in rented:
            head = f", seated with {chosen}:"
        else:
            head = f", in no option shown (it would be seated with {chosen}):" if chosen else ":"
        out.append(f"  {offer}{who}{head}")
        out += [f"    {reason}" for reason in reasons]
    return out


def _starts_with(path: Path, head: str) -> bool:
    """Whether the file at ``path`` begins with ``head`` (False when it cannot be read)."""
    try:
        with path.open("rb") as fh:
            return fh.read(len(head.encode())) == head.encode()
    except OSError:
        return False


def _offers_import(
    path: Path = typer.Argument(..., help="A SkyPilot catalog file (catalogs/v7|v8/<cloud>/vms.csv)."),
    provider: str = typer.Option(..., "--provider", help="aws, gcp, azure, lambda or runpod."),
    out: Path | None = typer.Option(None, "--out", help="Also write the offers as a TOML offers file."),
    force: bool = typer.Option(False, "--force", help="Let --out replace a file offers import did not write."),
    catalog: Path | None = CATALOG_OPTION,
    fmt: FormatOption = Format.table,
) -> None:
    """Read a SkyPilot vms.csv into offers (one per instance type and region, cheapest zone)."""
    from datetime import date

    from gpuseat.catalog.bundle import load_catalog
    from gpuseat.catalog.offers import OFFERS_HEADER, offers_toml
    from gpuseat.catalog.skypilot import import_skypilot
    from gpuseat.errors import InputError

    if out is not None and not force and (out.is_symlink() or (out.is_file() and not _starts_with(out, OFFERS_HEADER))):
        # it replaced any file without a word: a user's own offers file, a course file, a 5 MB log
        raise InputError(
            "exists and was not written by gpuseat offers import",
            where=f"--out {out}",
            fix="choose another name, or add --force to replace it",
        )
    result = import_skypilot(path, provider, catalog=load_catalog(catalog), as_of=date.today())
    from rich.markup import escape

    err = stderr_console()
    for warning in result.warnings:
        err.print(f"[yellow]warning:[/] {escape(warning)}")
    rows = [
        {
            "offer": o.id,
            "instance_type": o.instance_type,
            "region": o.region,
            "gpu": o.gpu,
            "gpu_count": o.gpu_count,
            "gpu_memory_gb": o.gpu_memory_gb,
            "usd_per_hour": o.price_usd,
        }
        for o in result.offers
    ]
    if out is not None:
        from gpuseat.files import write_file

        write_file(out, offers_toml(result.offers), where=f"--out {out}")
        err.print(f"wrote {len(result.offers)} offers to {out}")
    _emit(rows, fmt, title=f"{len(rows)} offers from {path}")


def _emit(rows: list[dict[str, Any]], fmt: Format, *, title: str) -> None:
    print_rows(rows, list(rows[0]) if rows else ["offer"], fmt, title=title)


def _offers_list(
    gpu: str | None = typer.Option(None, "--gpu", help="Only offers with this GPU model."),
    catalog: Path | None = CATALOG_OPTION,
    fmt: FormatOption = Format.table,
) -> None:
    """List the catalog's offers with their price, billing rule and source date."""
    from gpuseat.catalog.bundle import load_catalog

    cat = load_catalog(catalog)
    wanted = cat.resolve_gpu(gpu, where="--gpu").id if gpu else None
    rows = [
        {
            "offer": o.id,
            "kind": o.kind,
            "region": o.region,
            "gpu": f"{o.gpu_count:g}× {o.gpu}",
            "price_usd": o.price_usd,
            "billing": o.billing,
            "rules": ", ".join(o.rules),
            "as_of": o.as_of.isoformat(),
        }
        for o in cat.offers
        if wanted is None or o.gpu == wanted
    ]
    _emit(rows, fmt, title="offers" + (f" (with {catalog})" if catalog else ""))


def register(app: typer.Typer) -> None:
    """Add ``plan`` and the ``offers`` group."""
    app.command("plan")(_plan)
    offers_app = add_group(app, "offers", "List bundled offers and import SkyPilot catalogs.")
    offers_app.command("import")(_offers_import)
    offers_app.command("list")(_offers_list)
