"""`seats add --cloud` warns when cloud seats would outnumber the plan option's cloud machines, and only then."""

from __future__ import annotations

from pathlib import Path
from typing import Any

LAB = Path(__file__).resolve().parents[2] / "examples" / "h200-lab"


def test_the_warning_counts_seats_it_adds_and_none_when_it_adds_none(tmp_path: Path, cli: Any) -> None:
    db = f"sqlite:///{tmp_path / 'c.db'}"
    assert cli("course", "create", LAB / "course.toml", "--key", "h200", "--plan-option", "1", "--db", db).code == 0
    assert cli("roster", "import", LAB / "roster.csv", "--db", db).code == 0
    over = cli("seats", "add", "--cloud", "--count", "12", "--db", db)
    assert over.code == 0 and "warning: 12 cloud seat(s) would make 12, but plan option 1 rents 10" in over.err
    again = cli("seats", "add", "--cloud", "--db", db)  # every cloud participant has a seat: nothing to add
    assert again.code == 0 and "no seats to add" in again.out + again.err
    assert "warning" not in again.err, again.err  # it said "0 cloud seat(s) would make 12, but … rents 10"
