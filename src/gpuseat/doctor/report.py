"""The doctor's result: one row per check, grouped by GPU, with the JSON shape users script against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["ok", "warn", "fail", "skip"]
NO_GPU = "no NVIDIA GPU found"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Check:
    """One verdict: what was looked at (``evidence``: file and value) and how to put it right (``fix``)."""

    id: str
    status: Status
    gpu: str | None
    evidence: str
    fix: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON object for this check (keys in contract order)."""
        return {"id": self.id, "status": self.status, "gpu": self.gpu, "evidence": self.evidence, "fix": self.fix}


@dataclass(frozen=True)
class Report:
    """All checks for one host; ``gpus`` is ``(pci address, name)`` per NVIDIA GPU found."""

    gpus: tuple[tuple[str, str], ...]
    checks: tuple[Check, ...]

    @property
    def failed(self) -> bool:
        """Whether any check failed (exit code 1)."""
        return any(c.status == "fail" for c in self.checks)

    @property
    def exit_code(self) -> int:
        """0 when nothing fails, 1 when a check fails."""
        return 1 if self.failed else 0

    def to_dict(self) -> dict[str, Any]:
        """What ``doctor --format json`` prints: ``{"schema_version", "gpus": [{"pci", "name"}], "checks": […]}``."""
        return {
            "schema_version": SCHEMA_VERSION,
            "gpus": [{"pci": pci, "name": name} for pci, name in self.gpus],
            "checks": [c.as_dict() for c in self.checks],
        }

    def groups(self) -> list[tuple[str, list[Check]]]:
        """Checks grouped for display: ``Host`` first, then one group per GPU."""
        out: list[tuple[str, list[Check]]] = [("Host", [c for c in self.checks if c.gpu is None])]
        for pci, name in self.gpus:
            out.append((f"GPU {pci} · {name}", [c for c in self.checks if c.gpu == pci]))
        return [(title, rows) for title, rows in out if rows]

    def summary(self) -> str:
        """``12 ok, 1 warn, 1 fail, 3 skip``."""
        counts = {s: sum(c.status == s for c in self.checks) for s in ("ok", "warn", "fail", "skip")}
        return ", ".join(f"{n} {s}" for s, n in counts.items())
