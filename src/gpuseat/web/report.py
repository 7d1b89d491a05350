"""The course report: one self-contained HTML file (inline CSS and SVG, no scripts, no links out).

The same page is served at ``/report`` and written by ``gpuseat report --out FILE``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jinja2 import Environment

    from gpuseat.services.report import CourseDigest

HERE = Path(__file__).parent


@cache
def _env() -> Environment:
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    return Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True))


def render_report(digest: CourseDigest) -> str:
    """The report's HTML text."""
    css = (HERE / "static" / "portal.css").read_text(encoding="utf-8")
    return _env().get_template("report.html").render(d=digest, css=css)
