"""gpuseat: one GPU seat per course participant, at the lowest cost, known to work.

The public API is what ``__all__`` lists; everything else (``gpuseat.core``, ``gpuseat.render``, the
adapters) is internal and may change. A typical session::

    import gpuseat

    catalog = gpuseat.load_catalog()                       # or load_catalog("my-catalog/") to overlay
    plan = gpuseat.plan_course("course.toml", catalog)     # cheapest mix, every figure itemised
    layout = gpuseat.carve_inventory("server.toml", catalog, mode="passthrough")
    files = gpuseat.render_layout(layout, "libvirt", catalog)

Every result has one ``to_dict()`` that equals the CLI's ``--format json`` output; every error a
caller can get is a :class:`GpuseatError` with ``where``, ``what`` and ``fix``. Names are imported on
first use, so ``import gpuseat`` stays fast and optional dependencies load only when needed.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name → module that defines it
_EXPORTS: dict[str, str] = {
    # catalog
    "Catalog": "gpuseat.catalog.bundle",
    "load_catalog": "gpuseat.catalog.bundle",
    "Offer": "gpuseat.catalog.offers",
    "GpuModel": "gpuseat.catalog",
    # courses (the course file) and planning
    "Course": "gpuseat.core.course",
    "load_course": "gpuseat.services.planning",
    "plan_course": "gpuseat.services.planning",
    "Plan": "gpuseat.core.plan",
    "PlanOption": "gpuseat.core.plan",
    # carve and render
    "Server": "gpuseat.core.inventory",
    "CarveRequest": "gpuseat.core.carve",
    "Layout": "gpuseat.core.carve",
    "Slice": "gpuseat.core.carve",
    "load_server": "gpuseat.services.carving",
    "carve_layout": "gpuseat.services.carving",
    "carve_inventory": "gpuseat.services.carving",
    "render_layout": "gpuseat.services.carving",
    "write_artifacts": "gpuseat.services.carving",
    "assert_layout": "gpuseat.services.carving",
    "Artifact": "gpuseat.render.base",
    # doctor
    "diagnose": "gpuseat.doctor",
    "Report": "gpuseat.doctor",
    # bench
    "run_benchmark": "gpuseat.bench.run",
    "BenchOptions": "gpuseat.bench.run",
    "BenchResult": "gpuseat.bench.results",
    # monitor
    "MonitorSource": "gpuseat.services.monitoring",
    "snapshot_once": "gpuseat.services.monitoring",
    "run_monitor": "gpuseat.services.monitoring",
    "usage_report": "gpuseat.services.monitoring",
    "TickView": "gpuseat.services.monitoring",
    "UsageReport": "gpuseat.services.monitoring",
    # the course store (roster, seats, assignments, access links)
    "open_store": "gpuseat.store",
    "CourseStore": "gpuseat.store",
    "SeatSpec": "gpuseat.store",
    "SeatView": "gpuseat.store",
    "ParticipantView": "gpuseat.store",
    "CourseView": "gpuseat.store",
    # errors
    "GpuseatError": "gpuseat.errors",
    "InputError": "gpuseat.errors",
    "EngineError": "gpuseat.errors",
    "UnknownGpu": "gpuseat.errors",
    "NoOfferFits": "gpuseat.errors",
    "Infeasible": "gpuseat.errors",
    "StoreError": "gpuseat.errors",
    "DiskFull": "gpuseat.errors",
    "StoreBusy": "gpuseat.errors",
    "MissingDependency": "gpuseat.errors",
    "NotFound": "gpuseat.errors",
    "NoFreeSeat": "gpuseat.errors",
    "SeatTaken": "gpuseat.errors",
    "InvalidTransition": "gpuseat.errors",
}

#: public names whose attribute in the defining module is spelled differently
_ALIASES = {"MonitorSource": "Source"}

__all__ = [
    "Artifact",
    "BenchOptions",
    "BenchResult",
    "CarveRequest",
    "Catalog",
    "Course",
    "CourseStore",
    "CourseView",
    "DiskFull",
    "EngineError",
    "GpuModel",
    "GpuseatError",
    "Infeasible",
    "InputError",
    "InvalidTransition",
    "Layout",
    "MissingDependency",
    "MonitorSource",
    "NoFreeSeat",
    "NoOfferFits",
    "NotFound",
    "Offer",
    "ParticipantView",
    "Plan",
    "PlanOption",
    "Report",
    "SeatSpec",
    "SeatTaken",
    "SeatView",
    "Server",
    "Slice",
    "StoreBusy",
    "StoreError",
    "TickView",
    "UnknownGpu",
    "UsageReport",
    "__version__",
    "assert_layout",
    "carve_inventory",
    "carve_layout",
    "diagnose",
    "load_catalog",
    "load_course",
    "load_server",
    "open_store",
    "plan_course",
    "render_layout",
    "run_benchmark",
    "run_monitor",
    "snapshot_once",
    "usage_report",
    "write_artifacts",
]


def lazy_getattr(
    namespace: dict[str, Any], homes: dict[str, str], aliases: dict[str, str] | None = None
) -> Callable[[str], Any]:
    """A package's ``__getattr__`` (PEP 562) that imports a name's home module the first time the name is
    asked for and keeps it in ``namespace`` (the package's globals): ``gpuseat`` and ``gpuseat.store``
    re-export this way, so importing them loads none of the modules behind their names.

    ``homes`` maps each name to its module, ``aliases`` a name to its spelling there where that differs.
    """
    spelled = aliases or {}

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(import_module(home), spelled.get(name, name))
        namespace[name] = value
        return value

    return __getattr__


__getattr__ = lazy_getattr(globals(), _EXPORTS, _ALIASES)


def __dir__() -> list[str]:
    return sorted(__all__)


assert set(__all__) == {"__version__", *_EXPORTS}, "__all__ and _EXPORTS disagree"


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from gpuseat.bench.results import BenchResult
    from gpuseat.bench.run import BenchOptions, run_benchmark
    from gpuseat.catalog import GpuModel
    from gpuseat.catalog.bundle import Catalog, load_catalog
    from gpuseat.catalog.offers import Offer
    from gpuseat.core.carve import CarveRequest, Layout, Slice
    from gpuseat.core.course import Course
    from gpuseat.core.inventory import Server
    from gpuseat.core.plan import Plan, PlanOption
    from gpuseat.doctor import Report, diagnose
    from gpuseat.errors import (
        DiskFull,
        EngineError,
        GpuseatError,
        Infeasible,
        InputError,
        InvalidTransition,
        MissingDependency,
        NoFreeSeat,
        NoOfferFits,
        NotFound,
        SeatTaken,
        StoreBusy,
        StoreError,
        UnknownGpu,
    )
    from gpuseat.render.base import Artifact
    from gpuseat.services.carving import (
        assert_layout,
        carve_inventory,
        carve_layout,
        load_server,
        render_layout,
        write_artifacts,
    )
    from gpuseat.services.monitoring import Source as MonitorSource
    from gpuseat.services.monitoring import TickView, UsageReport, run_monitor, snapshot_once, usage_report
    from gpuseat.services.planning import load_course, plan_course
    from gpuseat.store import CourseStore, CourseView, ParticipantView, SeatSpec, SeatView, open_store
