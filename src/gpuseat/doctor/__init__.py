"""``gpuseat doctor``: will passthrough, vGPU or MIG work on this host — and if not, exactly why.

:class:`~gpuseat.doctor.host.HostView` reads (and records) files under a root, :mod:`.facts`
turns them into values, :mod:`.checks` judges them, :mod:`.targets` picks which checks apply.
"""

from __future__ import annotations

from pathlib import Path

from gpuseat.catalog.bundle import Catalog
from gpuseat.catalog.doctor import doctor_catalog
from gpuseat.doctor.checks import TARGETS, Target
from gpuseat.doctor.facts import gather
from gpuseat.doctor.host import HostView
from gpuseat.doctor.report import NO_GPU, Check, Report
from gpuseat.doctor.targets import run_checks

__all__ = ["NO_GPU", "TARGETS", "Check", "HostView", "Report", "Target", "diagnose"]


def diagnose(
    root: Path = Path("/"), target: Target | None = None, catalog: Catalog | None = None
) -> tuple[Report, HostView]:
    """Read the host under ``root`` and run the checks for ``target`` (None: what the GPUs are set up for).

    ``catalog`` supplies the doctor facts (default: the bundled ones). Returns the report and the view,
    whose record ``--capture`` writes out.
    """
    facts_catalog = catalog.doctor if catalog is not None else doctor_catalog()
    view = HostView(root)
    facts = gather(view, facts_catalog)
    return run_checks(facts, facts_catalog, target), view
