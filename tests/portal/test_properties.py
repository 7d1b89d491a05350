"""Property tests: the survey form parser takes any form, the SVG charts stay well-formed XML for any text."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

from hypothesis import given
from hypothesis import strategies as st

from gpuseat.core import charts
from gpuseat.core.survey import OTHER, parse_answers
from gpuseat.errors import InputError
from gpuseat.services.survey import parse_template, template_text

T = parse_template(template_text("course-2016"), where="course-2016")
FIELDS = [f"q_{q.id}" for q in T.question] + [f"q_{q.id}_other" for q in T.question] + ["q_nope", "csrf"]
VALUES = st.one_of(
    st.text(max_size=30),
    st.integers(-5, 15).map(str),
    st.sampled_from([c for q in T.question for c in q.choices] + [OTHER]),
)


@given(st.dictionaries(st.sampled_from(FIELDS), st.lists(VALUES, max_size=4), max_size=12))
def test_any_form_is_answers_or_one_input_error(form):
    try:
        answers = parse_answers(T, form)
    except InputError as exc:
        assert exc.where and exc.where.startswith("field q_")
        return
    for q in T.question:
        a = answers.get(q.id)
        if q.kind == "scale":
            assert a in q.scale_values
        elif q.kind == "choice":
            assert a in q.choices or (isinstance(a, dict) and a[OTHER].strip())
        elif q.kind == "multi-choice" and a is not None:
            assert set(a["choices"]) <= set(q.choices) and (a["choices"] or a.get(OTHER))
    assert set(answers) <= {q.id for q in T.question}


TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=40)
NUM = st.floats(allow_nan=True, allow_infinity=True, width=32)


@given(st.lists(st.tuples(TEXT, NUM), max_size=8), TEXT)
def test_bar_charts_are_well_formed_for_any_text_and_number(items, title):
    svg = charts.bars([charts.Bar(label, v) for label, v in items], title=title, kind="k")
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg") and root.find("{http://www.w3.org/2000/svg}title").text == (title or None)
    widths = [float(r.get("width")) for r in root.iter("{http://www.w3.org/2000/svg}rect")]
    assert all(math.isfinite(w) and w >= 0 for w in widths)


@given(st.lists(st.tuples(TEXT, st.lists(st.tuples(NUM, NUM), max_size=5)), max_size=4), st.lists(TEXT, max_size=3))
def test_line_charts_and_heat_maps_are_well_formed(series, rows):
    svg = charts.lines(series, title="t", kind="k", x_labels=("<a>", "&b"))
    ET.fromstring(svg)
    assert "nan" not in svg and "inf" not in svg
    cols = ["<", ">", "&"]
    values = {(i, j): 0.5 for i in range(len(rows)) for j in range(len(cols))}
    ET.fromstring(charts.heatmap(rows, cols, values, title="t", kind="k"))


def test_chart_counts_are_integers_and_column_labels_never_overlap():
    import re

    from gpuseat.core import charts

    labels = [("I can train and evaluate neural networks myself", 3.0), ("I know how to run models on GPUs", 1.0)]
    labels += [(f"choice number {i} with a long wording", float(i)) for i in range(4)]
    svg = charts.columns(labels, title="t", kind="k", width=640)
    values = re.findall(r'text-anchor="middle"[^>]*>([^<]+)</text>', svg)
    assert "3" in values and "1" in values and not any(v.endswith(".00") for v in values)
    slot = (640 - 20) / len(labels)
    shown = re.findall(r"</title>([^<]+)</text>", svg)
    assert len(shown) == len(labels)
    assert all(len(s) * charts.CHAR_W <= slot - 4 for s in shown), shown  # each label fits its own column
    assert all(f"<title>{label}</title>" in svg for label, _ in labels)  # the full text is kept for hover
    assert ">1.50<" in charts.bars([charts.Bar("x", 1.5)], title="t", kind="k")  # non-counts keep decimals
