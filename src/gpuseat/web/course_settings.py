"""The course settings page's form and the course file it writes: the ``[policy]`` table and each
group's ``[groups.<name>.policy]``, checked by the same model as the course file
(:class:`gpuseat.core.course.Policy`, then the whole :class:`~gpuseat.core.course.Course`).

The course lives in the store as its TOML text, which the agent reads; an edit replaces the policy
tables in that text and leaves every other line (comments included) as it was.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gpuseat.core.course import Course, Policy
from gpuseat.core.numbers import plain_number
from gpuseat.errors import InputError
from gpuseat.files import validate
from gpuseat.safe_text import clean
from gpuseat.web.security import CSRF_FIELD

FIELDS = tuple(Policy.model_fields)
INTEGERS = frozenset(n for n in FIELDS if n.endswith("_minutes"))
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


@dataclass
class Edit:
    """What the form asks for: the course's policy and each group's overrides (None: not set), the
    message for each field that is wrong and what was typed there (both keyed ``policy.<field>`` or
    ``groups.<name>.<field>``: the form shows the typed text again beside its message)."""

    course: dict[str, float | int | None]
    groups: dict[str, dict[str, float | int | None]]
    errors: dict[str, str] = field(default_factory=dict)
    typed: dict[str, str] = field(default_factory=dict)


def group_names(course: Course) -> list[str]:
    """The groups a policy may name: the course's ``[[group]]`` tables, and any group it already sets."""
    return sorted({g.name for g in course.group} | set(course.group_sections))


def current(course: Course) -> Edit:
    """The course file's policy as the form shows it."""
    own = {g: s.policy.model_dump() for g, s in course.group_sections.items()}
    return Edit(
        course.policy.model_dump(),
        {g: own.get(g, dict.fromkeys(FIELDS)) for g in group_names(course)},
    )


def _number(name: str, raw: str) -> float | int | None:
    """A form value as the course file would hold it (blank: not set); :class:`ValueError` with what is
    wrong and what to type if it is no plain number in the digits 0-9 (the CLI's numbers' one rule)."""
    text = raw.strip()
    if not text:
        return None
    if name in INTEGERS:
        return plain_number(text, whole=True, what="a whole number of minutes", example="30")
    return plain_number(text, whole=False, example="40 or 2.5")


def shown(value: float | int | None) -> str:
    """A stored value as the form shows it: the exact number in plain digits (``1e-05`` → ``0.00001``), so
    the form sends back what is stored and a save of another field does not fail on this one."""
    if value is None:
        return ""
    if isinstance(value, int) or not math.isfinite(value):
        return str(value)
    text = format(Decimal(repr(value if value else 0.0)), "f")
    return text if "." in text else text + ".0"


def _section(
    form: Mapping[str, str],
    prefix: str,
    stored: Mapping[str, float | int | None],
    errors: dict[str, str],
    typed: dict[str, str],
) -> dict[str, float | int | None]:
    """One policy table from the form, each field checked alone by :class:`Policy` (so each gets its message).

    A field the form does not carry keeps its stored value: the page sends every field (blank: not set), so
    a missing one is a page older than the course file (a group added since) or a script that sets one
    field, and neither may wipe the rest of the policy.
    """
    out: dict[str, float | int | None] = {}
    for name in FIELDS:
        key = f"{prefix}.{name}"
        if key not in form:
            out[name] = stored.get(name)
            continue
        raw = form[key]
        try:
            value = _number(name, raw)
            validate(Policy, {name: value}, where=key)
        except ValueError as exc:
            errors[key], typed[key] = f"{name}: {exc}", raw[:40]
            value = None
        except InputError as exc:
            errors[key], typed[key] = f"{name}: {exc.what}", raw[:40]
            value = None
        out[name] = value
    return out


def form_fields(course: Course, items: Iterable[tuple[str, object]]) -> tuple[dict[str, str], dict[str, str]]:
    """The form's policy fields, and a message for each name it cannot take: one this page has no field
    for (a typo, a group the course does not have), a field sent twice, a file instead of text. Each was
    dropped without a word ("nothing changed", or the last of two values saved)."""
    known = {f"policy.{n}" for n in FIELDS} | {f"groups.{g}.{n}" for g in group_names(course) for n in FIELDS}
    form: dict[str, str] = {}
    errors: dict[str, str] = {}
    for name, value in items:
        if name == CSRF_FIELD:
            continue
        shown = clean(name[:60], one_line=True)
        if name not in known:
            groups = ", ".join(group_names(course)) or "none"
            group, _dot, last = name.removeprefix("groups.").rpartition(".")
            errors[name] = (
                f"{shown}: no group {clean(group[:40], one_line=True)!r} in this course (its groups: {groups})"
                if name.startswith("groups.") and last in FIELDS
                else f"{shown!r}: no such field (policy.FIELD or groups.GROUP.FIELD, FIELD one of {', '.join(FIELDS)})"
            ) + ": reload the page"
        elif name in form or name in errors:
            errors[name] = f"{shown}: given more than once: send it once"
        elif not isinstance(value, str):
            errors[name] = f"{shown}: a file, not a number: type the number"
        else:
            form[name] = value
    for name in errors:
        form.pop(name, None)
    return form, errors


def parse(course: Course, form: Mapping[str, str]) -> Edit:
    """The edit the form asks for (a field it does not carry: as stored); fields that are wrong are in
    ``errors`` (and nothing may be stored)."""
    errors: dict[str, str] = {}
    typed: dict[str, str] = {}
    stored = current(course)
    mine = _section(form, "policy", stored.course, errors, typed)
    groups = {g: _section(form, f"groups.{g}", stored.groups.get(g, {}), errors, typed) for g in group_names(course)}
    return Edit(mine, groups, errors, typed)


def changes(before: Edit, after: Edit) -> list[dict[str, Any]]:
    """One entry per field whose value changes (what the events log records)."""
    out = [
        {"field": f"policy.{n}", "from": before.course.get(n), "to": after.course[n]}
        for n in FIELDS
        if before.course.get(n) != after.course[n]
    ]
    for group, values in after.groups.items():
        old = before.groups.get(group, {})
        out += [
            {"field": f"groups.{group}.policy.{n}", "from": old.get(n), "to": values[n]}
            for n in FIELDS
            if old.get(n) != values[n]
        ]
    return out


def _table(header: str, values: Mapping[str, float | int | None]) -> list[str]:
    lines = [f"{n} = {values[n]!r}" for n in FIELDS if values.get(n) is not None]
    return ["", f"[{header}]", *lines] if lines else []


def _key(name: str) -> str:
    """``name`` as a TOML key: bare when it may be, else a basic string (every control character and
    the quote and backslash escaped; any other character as itself, so an emoji stays one character:
    JSON's ``\\ud83d\\ude00`` pair is no TOML)."""
    if _BARE_KEY.fullmatch(name):
        return name
    out = [f"\\u{ord(c):04x}" if c < " " or c == "\x7f" else "\\" + c if c in '"\\' else c for c in name]
    return '"' + "".join(out) + '"'


def _policy_header(line: str) -> bool | None:
    """None when ``line`` opens no table; else whether the table it opens is a policy table (``[policy]``
    or ``[groups.<name>.policy]``, with the name in any of TOML's spellings: bare, quoted, spaced)."""
    text = line.strip()
    if not text.startswith("["):
        return None
    try:
        table: object = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    path = []
    while isinstance(table, dict) and len(table) == 1:
        ((name, table),) = table.items()
        path.append(name)
    return table == {} and (path == ["policy"] or (len(path) == 3 and path[0] == "groups" and path[2] == "policy"))


def rewritten(text: str, edit: Edit) -> tuple[str, Course]:
    """The course file's text with ``edit``'s policy tables in place of its own, and that file checked
    as a whole (:class:`InputError` naming the field if the course file would no longer be valid)."""
    kept: list[str] = []
    skipping = False
    for line in text.splitlines():
        header = _policy_header(line)
        if header is not None:
            skipping = header
        if not skipping:
            kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    added = _table("policy", edit.course)
    for group, values in sorted(edit.groups.items()):
        added += _table(f"groups.{_key(group)}.policy", values)
    new = "\n".join(kept + added) + "\n"
    try:
        data = tomllib.loads(new)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(
            f"the course file's policy is written in a form this page cannot edit ({exc})",
            where="course file",
            fix="edit [policy] in the course file and load it again (gpuseat course update FILE)",
        ) from None
    return new, validate(Course, data, where="course file", text=new)
