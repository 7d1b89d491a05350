"""A ``[policy]`` stop that the seats' engine does not carry out is said in ``gpuseat apply``'s plan, once
per engine, naming the seats, never skipped in silence: on Slurm seats (the recording stand-in cluster of
test_engine_plan) idle stop and the never-connected stop are named (the seat-hour quota is carried out:
test_requests.py); a policy without them says nothing."""

from __future__ import annotations

import pytest

from gpuseat.cli.apply import render_plan
from gpuseat.engines.apply import one_pass

from .test_engine_plan import Lab, lab  # noqa: F401  (the lab fixture)

SEATS = "seat-01, seat-02, seat-03, seat-04"
SAID = [
    f"  note: idle stop ([policy] idle_minutes) is not carried out on slurm seats ({SEATS}): the slurm engine "
    "has no such stop yet; only host and JupyterHub seats are stopped when idle (docs/policy.md)",
    "  note: the never-connected stop ([policy] never_connected_hours) is not carried out on slurm seats "
    f"({SEATS}): the slurm engine has no such stop yet; only host and JupyterHub seats are stopped for it "
    "(docs/policy.md)",
]


@pytest.mark.parametrize(
    ("policy", "said"),
    [
        ("quota_hours = 40\nidle_minutes = 30\nnever_connected_hours = 48\n", SAID),
        ("idle_minutes = 30\n", SAID[:1]),
        ("lead_minutes = 20\nidle_gpu_percent = 3\n", []),
    ],
    ids=["all-three", "idle-only", "none-of-them"],
)
def test_a_policy_stop_slurm_does_not_carry_out_is_said_in_the_plan(
    lab: Lab,  # noqa: F811
    policy: str,
    said: list[str],
) -> None:
    store = lab.store
    text = store.courses.course_text("c1") + f"\n[policy]\n{policy}"  # type: ignore[attr-defined]
    store.courses.set_course_text("c1", text, changes=[])  # type: ignore[attr-defined]
    lines = render_plan(one_pass(store, course="c1", engine="slurm", runner=lab.runner), dry_run=False)  # type: ignore[arg-type]
    assert [x for x in lines if x.startswith("  note: ")] == said, lines
