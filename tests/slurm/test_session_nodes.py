"""A session reservation on other nodes than its seats', and the host lists ``scontrol show`` prints.

The real test cluster has one node, so the node comparison runs against the recording stand-in cluster of
``test_engine_plan.py``; the schedule changes (an end moved, a session moved or cancelled) run on the real
cluster in ``tests/conformance/test_slurm_after_day_one.py``.
"""

from __future__ import annotations

import pytest

from gpuseat.engines.slurm.reading import node_names

from .test_engine_plan import Lab, lab  # noqa: F401  (the stand-in cluster and its course c1, seats on gpu01)


@pytest.mark.parametrize(
    ("shown", "nodes"),
    [
        ("gpu01", ("gpu01",)),
        ("gpu[01-02,05],cpu1", ("cpu1", "gpu01", "gpu02", "gpu05")),
        ("rack[1-2]-n[08-09]", ("rack1-n08", "rack1-n09", "rack2-n08", "rack2-n09")),
        ("(null)", ()),
    ],
)
def test_a_host_list_is_read_as_its_nodes(shown: str, nodes: tuple[str, ...]) -> None:
    assert node_names(shown) == nodes


def test_a_session_on_other_nodes_than_its_seats_is_made_again(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The course's seats are on gpu01; a session reservation that holds gpu[01-02] (made when some seats were on
    gpu02) is deleted and made again on gpu01 (Slurm 22.05 changes no core reservation's nodes: "Core-based
    reservation can not be updated"), the other session, on gpu01, is left as it is. Before, only its users and
    core count were compared, so it held gpu02's cores for nothing."""
    assert not lab.apply().failed
    moved, kept = sorted(lab.fake.reservations)
    plain = lab.fake._scontrol

    def shown(args: tuple[str, ...]) -> tuple[int, str, str]:  # scontrol show reservation, with Nodes=
        rc, out, err = plain(args)
        if args[:3] == ("-o", "show", "reservation"):
            out = out.replace(f"ReservationName={moved} ", f"ReservationName={moved} Nodes=gpu[01-02] ")
            out = out.replace(f"ReservationName={kept} ", f"ReservationName={kept} Nodes=gpu01 ")
        return rc, out, err

    monkeypatch.setattr(lab.fake, "_scontrol", shown)
    (step,) = [s for s in lab.plan().steps if s.action.startswith("reservation.")]
    assert (step.action, step.target, step.why) == (
        "reservation.resize",
        moved,
        "nodes gpu01 for its seats, not gpu01,gpu02: made again",
    )
    assert "Nodes=gpu01" in step.data["words"]
