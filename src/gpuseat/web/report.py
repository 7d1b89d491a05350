"""The course report: one self-contained HTML file (inline CSS and SVG, no scripts, no links out).

The same page is served at ``/report`` and written by ``gpuseat report --out FILE``. Its one
``<style>`` element is allowed by hash, in the file's own CSP ``<meta>`` and in the portal's header.
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jinja2 import Environment

    from gpuseat.services.report import CourseDigest

HERE = Path(__file__).parent
PRINT_CSS = "body { background: #fff; }\nsection { page-break-inside: avoid; }\n"


@cache
def _env() -> Environment:
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    from gpuseat.web.formats import money_or_dash

    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True))
    env.filters["money"] = money_or_dash
    return env


@cache
def report_style() -> tuple[str, str]:
    """(the report's style sheet, its CSP source ``'sha256-…'``)."""
    css = (HERE / "static" / "portal.css").read_text(encoding="utf-8") + "\n" + PRINT_CSS
    digest = base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()
    return css, f"'sha256-{digest}'"


def report_csp(*, header: bool = False) -> str:
    """The policy of the report: nothing but its own style sheet and inline images.

    ``frame-ancestors`` counts only in a header (a ``<meta>`` policy may not carry it).
    """
    policy = f"default-src 'none'; style-src {report_style()[1]}; img-src data:; base-uri 'none'; form-action 'none'"
    return policy + ("; frame-ancestors 'none'" if header else "")


def render_report(digest: CourseDigest) -> str:
    """The report's HTML text."""
    css, _ = report_style()
    return _env().get_template("report.html").render(d=digest, css=css, csp=report_csp())
