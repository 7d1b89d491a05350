"""The survey editor: a template with new wording, written back as TOML (the form the store keeps).

Only texts change (title, intro, question texts and scale labels); ids, kinds and choices stay, so the
results and the NPS keep their meaning. The store refuses a new template once anyone has answered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpuseat.core.survey import Template

EDITABLE = ("text", "low_label", "high_label")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a valid TOML basic string


def to_toml(template: Template) -> str:
    """``template`` as a TOML file (only the fields that differ from their defaults)."""
    data = template.model_dump(exclude_defaults=True)
    questions = data.pop("question", [])
    lines = [f"{k} = {_value(v)}" for k, v in data.items()]
    for q in questions:
        lines += ["", "[[question]]", *(f"{k} = {_value(v)}" for k, v in q.items())]
    return "\n".join(lines) + "\n"


def _typed(value: str) -> str:
    """A field as typed: a browser sends a textarea's line breaks as CR LF (the model refuses a bare CR)."""
    return value.replace("\r\n", "\n").strip()


def edited(template: Template, form: Mapping[str, str]) -> Template:
    """``template`` with the texts from the editor's form (``title``, ``intro``, ``<id>.<field>``)."""
    data = template.model_dump()
    for key in ("title", "intro"):
        if key in form:
            data[key] = _typed(form[key])
    for q in data["question"]:
        for name in EDITABLE:
            value = form.get(f"{q['id']}.{name}")
            if value is not None:
                q[name] = _typed(value)
    return Template.model_validate(data)
