"""CLI for ``gpuseat plan`` and ``gpuseat offers``: parse flags, call :mod:`gpuseat.planning`, print."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gpuseat.cli._output import FORMAT_OPTION, Format, print_csv, print_json, print_table, stderr_console

offers_app = typer.Typer(help="List bundled offers and import SkyPilot catalogs.", no_args_is_help=True)


def _plan(
    course: Path = typer.Argument(..., help="Course file (TOML); see examples/course-2016.toml."),
    offers: list[Path] = typer.Option([], "--offers", help="Extra offers file (TOML); repeatable."),
    skypilot: list[str] = typer.Option([], "--skypilot", help="PROVIDER=PATH of a SkyPilot vms.csv; repeatable."),
    offer: list[str] = typer.Option([], "--offer", help="Only offers whose id matches this glob; repeatable."),
    alternatives: int = typer.Option(10, "--alternatives", min=0, help="How many next-best options to show."),
    explain: bool = typer.Option(False, "--explain", help="Print every cost as a formula line."),
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Price the course across offers: the cheapest mix first, alternatives ranked, rejections explained."""
    from gpuseat.planning import plan_course, plan_json

    result = plan_json(
        plan_course(course, offer_files=offers, skypilot=skypilot, patterns=offer, alternatives=alternatives)
    )
    err = stderr_console()
    for warning in result["warnings"]:
        err.print(f"[yellow]warning:[/] {warning}")
    if fmt is Format.json:
        print_json(result)
        return
    if fmt is Format.csv:
        participants = result["course"]["participants"]
        csv_rows = [
            {
                "rank": o["rank"],
                "offers": " + ".join(f"{x['count']}× {x['offer']}" for x in o["offers"]),
                "seats": o["seats"],
                "total_usd": o["total_usd"],
                "usd_per_seat_hour": round(o["total_usd"] / (participants * result["course"]["seat_hours_each"]), 4),
            }
            for o in result["options"]
        ]
        print_csv(csv_rows, ["rank", "offers", "seats", "total_usd", "usd_per_seat_hour"])
        return
    rows = [
        {
            "rank": o["rank"],
            "offers": ", ".join(f"{x['count']}× {x['offer']}" for x in o["offers"]),
            "seats": o["seats"],
            "total": f"${o['total_usd']:,.2f}",
            "per seat-hour": ", ".join(f"${p['usd_per_seat_hour']:.3f}" for p in o["performance"]),
        }
        for o in result["options"]
    ]
    columns = ["rank", "offers", "seats", "total", "per seat-hour"]
    course_info = result["course"]
    title = (f"{course_info['name']}: {course_info['participants']} participants, "
             f"{course_info['period_days']} days, {course_info['seat_hours_each']:g} seat-hours each")
    print_table(rows, columns, title=title)
    if explain:
        _print_explain(result)
    else:
        typer.echo("(--explain shows every figure; --format json gives all details and rejected offers)")


def _print_explain(result: dict[str, Any]) -> None:
    for o in result["options"]:
        typer.echo(f"\nOption {o['rank']}: ${o['total_usd']:,.2f}")
        for ln in o["lines"]:
            typer.echo(f"  {ln['offer']} [{ln['group']}] {ln['item']}: {ln['formula']}")
        for note in o["notes"]:
            typer.echo(f"  note: {note}")
        for p in o["performance"]:
            extra = p.get("time_saved") or p.get("note", "")
            run = f", ${p['usd_per_lenet_run']:.4f} per LeNet run" if "usd_per_lenet_run" in p else ""
            typer.echo(f"  perf: {p['offer']}: ${p['usd_per_seat_hour']:.4f} per seat-hour{run}; {extra}")
    if result["rejected"]:
        typer.echo("\nRejected:")
        for r in result["rejected"]:
            typer.echo(f"  {r['offer']}" + (f" [{r['group']}]" if r["group"] else "") + f": {r['reason']}")


def _offers_import(
    path: Path = typer.Argument(..., help="A SkyPilot catalog file (catalogs/v7|v8/<cloud>/vms.csv)."),
    provider: str = typer.Option(..., "--provider", help="aws, gcp, azure, lambda or runpod."),
    out: Path | None = typer.Option(None, "--out", help="Also write the offers as a TOML offers file."),
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Read a SkyPilot vms.csv into offers (one per instance type and region, cheapest zone)."""
    from datetime import date

    from gpuseat.catalog.offers import offers_toml
    from gpuseat.catalog.skypilot import import_skypilot

    result = import_skypilot(path, provider, as_of=date.today())
    err = stderr_console()
    for warning in result.warnings:
        err.print(f"[yellow]warning:[/] {warning}")
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
        out.write_text(offers_toml(result.offers), encoding="utf-8")
        err.print(f"wrote {len(result.offers)} offers to {out}")
    _emit(rows, fmt, title=f"{len(rows)} offers from {path}")


def _emit(rows: list[dict[str, Any]], fmt: Format, *, title: str) -> None:
    columns = list(rows[0]) if rows else ["offer"]
    if fmt is Format.json:
        print_json(rows)
    elif fmt is Format.csv:
        print_csv(rows, columns)
    else:
        print_table(rows, columns, title=title)


def _offers_list(
    gpu: str | None = typer.Option(None, "--gpu", help="Only offers with this GPU model."),
    fmt: Format = FORMAT_OPTION,
) -> None:
    """List the bundled offers with their price, billing rule and source date."""
    from gpuseat.catalog import resolve_gpu
    from gpuseat.catalog.offers import bundled_offers

    wanted = resolve_gpu(gpu, where="--gpu").id if gpu else None
    rows = [
        {
            "offer": o.id,
            "kind": o.kind,
            "gpu": f"{o.gpu_count:g}× {o.gpu}",
            "price_usd": o.price_usd,
            "billing": o.billing,
            "as_of": o.as_of.isoformat(),
        }
        for o in bundled_offers()
        if wanted is None or o.gpu == wanted
    ]
    _emit(rows, fmt, title="bundled offers")


def register(app: typer.Typer) -> None:
    """Add ``plan`` and the ``offers`` group."""
    app.command("plan")(_plan)
    offers_app.command("import")(_offers_import)
    offers_app.command("list")(_offers_list)
    app.add_typer(offers_app, name="offers")
