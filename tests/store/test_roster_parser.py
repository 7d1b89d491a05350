"""Property tests of the roster parser: any well-formed roster round-trips; any bad cell names its place."""

from __future__ import annotations

import csv
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuseat.core.logins import SYSTEM_LOGINS
from gpuseat.core.roster import check_ssh_key, parse_roster
from gpuseat.errors import InputError
from gpuseat.safe_text import csv_value, has_control

from .conftest import EXAMPLES

KEYS = [line.split(",")[4] for line in (EXAMPLES / "roster-16.csv").read_text().splitlines()[1:]]
GROUPS = ("linux", "windows", "gpu-heavy")

#: a name as a cell holds it: ``'-x`` is read as ``-x``, the formula rule's apostrophe (safe_text.csv_value); no
#: bidi override (refused, tested elsewhere)
names = (
    st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=40)
    .map(str.strip)
    .filter(lambda n: csv_value(n) == n and not has_control(n))
)
#: a login gpuseat takes (``lp``, ``bin``: the machines' own accounts are refused, tested elsewhere)
users = st.from_regex(r"[a-z_][a-z0-9_-]{0,15}", fullmatch=True).filter(lambda u: u not in SYSTEM_LOGINS)
people = st.lists(
    st.tuples(names, users, st.sampled_from(GROUPS), st.sampled_from([*KEYS, ""])),
    min_size=1,
    max_size=20,
    unique_by=lambda t: t[1],
)


def to_csv(rows: list[list[str]], order: list[int], bom: bool, crlf: bool) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n" if crlf else "\n")
    header = ["name", "email", "group", "unix_user", "ssh_key"]
    writer.writerow([header[i] for i in order])
    for row in rows:
        writer.writerow([row[i] for i in order])
    return ("\ufeff" if bom else "") + buf.getvalue()


@settings(max_examples=60)
@given(people, st.permutations(range(5)), st.booleans(), st.booleans())
def test_well_formed_rosters_round_trip(rows, order, bom, crlf):
    table = [[n, f"{u.strip('_-') or 'x'}.{i}@example.org", g, u, k] for i, (n, u, g, k) in enumerate(rows)]
    parsed = parse_roster(to_csv(table, list(order), bom, crlf), groups=GROUPS, where="r.csv")
    assert [(p.name or "", p.email, p.group, p.unix_user, p.ssh_key or "") for p in parsed] == [
        (n, e.lower(), g, u, check_ssh_key(k) if k else "") for n, e, g, u, k in table
    ]
    assert len({p.key for p in parsed}) == len(parsed)
    lines = [p.line for p in parsed]
    assert lines == sorted(lines) and lines[0] >= 2


@settings(max_examples=60)
@given(people, st.integers(min_value=0, max_value=19), st.sampled_from(["email", "group", "unix_user", "ssh_key"]))
def test_one_bad_cell_is_named_by_line_and_column(rows, which, column):
    table = [[n, f"p{i}@example.org", g, u, k] for i, (n, u, g, k) in enumerate(rows)]
    row = which % len(table)
    col = ["name", "email", "group", "unix_user", "ssh_key"].index(column)
    table[row][col] = {
        "email": "no-at-sign",
        "group": "no-such-group",
        "unix_user": "Bad User",
        "ssh_key": "ssh-ed25519 AAAA",
    }[column]
    text = to_csv(table, [0, 1, 2, 3, 4], False, False)
    with pytest.raises(InputError) as info:
        parse_roster(text, groups=GROUPS, where="r.csv")
    line = 2 + row  # the header is line 1; names hold no line breaks
    assert info.value.where == f"r.csv:{line}:{col + 1}"
    assert column in info.value.what


@given(st.text(max_size=300))
def test_arbitrary_text_gives_rows_or_one_input_error(text):
    try:
        parse_roster(text, groups=GROUPS, where="r.csv")
    except InputError as exc:
        assert exc.where and exc.where.startswith("r.csv")
