"""CLI for ``gpuseat report`` (the course report as one HTML file) and ``gpuseat survey open|close|report``."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuseat.cli._options import ForceReplaceOption, StoreCourseOption, StoreDbOption, add_group
from gpuseat.cli._output import Format, FormatOption, print_json, print_table
from gpuseat.errors import InputError


def write_new(path: Path, text: str, *, force: bool) -> None:
    """Write ``text`` to ``path``; an existing file needs ``force``, and a symlink or folder is refused."""
    from gpuseat.files import check_target, write_file

    check_target(path, where=f"--out {path}")
    if path.exists() and not force:
        raise InputError("exists already", where=str(path), fix="choose another --out, or add --force to replace it")
    if not path.parent.is_dir():
        raise InputError("its folder does not exist", where=str(path), fix="create the folder first")
    write_file(path, text, where=f"--out {path}")


def register(app: typer.Typer) -> None:
    """Add ``report`` and ``survey`` to the CLI."""

    @app.command()
    def report(
        out: Path = typer.Option(..., "--out", help="The HTML file to write (self-contained: inline CSS and SVG)."),
        course: StoreCourseOption = None,
        db: StoreDbOption = None,
        force: ForceReplaceOption = False,
    ) -> None:
        """Write the course report: plan and alternatives, cost, seats, utilisation, benchmarks, survey."""
        from gpuseat.catalog.bundle import load_catalog
        from gpuseat.cli.serve import need_portal
        from gpuseat.services.report import build_digest
        from gpuseat.services.survey import SurveyService
        from gpuseat.store import open_store

        need_portal()
        from gpuseat.web.report import render_report

        with open_store(db) as store:
            digest = build_digest(store, SurveyService(store), load_catalog(), course, with_alternatives=True)
            write_new(out, render_report(digest), force=force)
        print(out)

    survey = add_group(app, "survey", "The course survey: open, close, report.")

    def _state(course: str | None, db: str | None, state: str) -> None:
        from gpuseat.services.survey import SurveyService
        from gpuseat.store import open_store

        with open_store(db) as store:
            SurveyService(store).set_state(course, state)
            print(f"survey of {store.courses.get_course(course).key} is {state}")

    template = add_group(survey, "template", "Survey templates: the questions a course asks.")

    @template.command("apply")
    def template_apply(
        file: Path = typer.Argument(..., help="A survey template (.toml), or the key of a bundled one."),
        course: StoreCourseOption = None,
        db: StoreDbOption = None,
    ) -> None:
        """Use FILE's questions for the course survey (only while nobody has answered)."""
        from gpuseat.services.survey import SurveyService
        from gpuseat.store import open_store

        with open_store(db) as store:
            used = SurveyService(store).set_template(course, str(file))
            print(
                f"survey of {store.courses.get_course(course).key} now asks {len(used.question)} questions ({used.key})"
            )

    @survey.command("open")
    def survey_open(course: StoreCourseOption = None, db: StoreDbOption = None) -> None:
        """Open the survey: participants see it on their page and may change answers until it closes."""
        _state(course, db, "open")

    @survey.command("close")
    def survey_close(course: StoreCourseOption = None, db: StoreDbOption = None) -> None:
        """Close the survey (answers are kept)."""
        _state(course, db, "closed")

    @survey.command("report")
    def survey_report(
        course: StoreCourseOption = None, db: StoreDbOption = None, fmt: FormatOption = Format.table
    ) -> None:
        """Distributions, means, NPS with its 95 % interval, and free-text answers (``-f csv``: every answer, one
        row per response, as the portal's survey.csv)."""
        import sys

        from gpuseat.services.survey import SurveyService
        from gpuseat.store import open_store

        with open_store(db) as store:
            if fmt == Format.csv:  # a table under -f csv was no CSV for the script that asked for one
                sys.stdout.write(SurveyService(store).export_csv(course))
                return
            res = SurveyService(store).results(course)
        if fmt == Format.json:
            print_json(res.to_dict())
            return
        print(f"{res.template.title} — {res.responses} responses, survey {res.state or 'never opened'}")
        for n, r in enumerate(res.questions, start=1):
            head = f"{n}. {r.question.text} ({r.answered} answers"
            head += f", mean {r.mean:.1f})" if r.mean is not None else ")"
            rows = [{"answer": k, "count": v, "bar": "█" * v} for k, v in r.counts.items()]
            if rows:
                print_table(rows, ["answer", "count", "bar"], title=head)
            else:
                print(head)
            for text in r.others:
                print(f"   • {text}")
            if r.nps is not None:
                x = r.nps
                print(
                    f"   NPS {x.score:+.0f} (95 % interval {x.low:+.0f} to {x.high:+.0f}): "
                    f"{x.promoters} promoters, {x.passives} passives, {x.detractors} detractors"
                )
