"""``never_connected_hours`` counted from when the rule was set for each holder (``policy_set_at``): a holder the
roster moves into a group whose rule differs from their old group's gets it at the move, as a rule set for them
then (moved on day 3 into a group with a 24 h rule, a holder seated on day 1 was stopped at the next pass). A move
between groups of the same rule, or a re-import that moves nobody, changes nothing. SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from gpuseat.core.roster import RosterText
from gpuseat.store import CourseStore

COURSE = """name = "lab"

[[group]]
name = "day"
count = 2

[[group]]
name = "night"
count = 2

[[group]]
name = "late"
count = 2

[schedule]
start = 2026-09-07
end = 2026-09-11

[groups.night.policy]
never_connected_hours = 24

[groups.late.policy]
never_connected_hours = 24
"""


def roster(store: CourseStore, ann: str, ben: str) -> None:
    text = f"email,name,group\nann@x.org,Ann,{ann}\nben@x.org,Ben,{ben}\n"
    store.roster.import_roster("lab", RosterText(text, "people.csv"))


def test_a_holder_moved_into_a_group_with_the_rule_counts_from_the_move(store: CourseStore, tmp_path: Path) -> None:
    (tmp_path / "lab.toml").write_text(COURSE)
    store.courses.create_course(tmp_path / "lab.toml")
    roster(store, "day", "night")
    assert store.requests.policy_set_at("lab", "never_connected_hours") == {}  # since the course was made
    roster(store, "night", "night")  # ann: from no rule to 24 h
    moved = [e.at for e in store.events.events("lab") if e.action == "roster.import"][-1]
    assert store.requests.policy_set_at("lab", "never_connected_hours") == {"ann": moved}
    roster(store, "night", "late")  # ben: 24 h to 24 h, no new rule for him; ann stays
    roster(store, "night", "late")
    assert store.requests.policy_set_at("lab", "never_connected_hours") == {"ann": moved}
    bad = {"groups": {"ben": "night", "ann": [["x"], None], "cy": [None, "night", "late"]}}  # an imported export's
    store.events.log("lab", "roster.import", detail=bad)
    assert store.requests.policy_set_at("lab", "never_connected_hours") == {"ann": moved}
