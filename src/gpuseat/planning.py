"""Moved to :mod:`gpuseat.services.planning`; this name stays for callers that import it."""

from gpuseat.services.planning import load_course, plan_course

__all__ = ["load_course", "plan_course"]
