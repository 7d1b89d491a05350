"""A session reservation on other nodes or cores than its seats', and the host and core lists ``scontrol show``
prints.

The real test cluster has one node, so the node and per-node core comparisons run against the recording stand-in cluster of
``test_engine_plan.py``; the schedule changes (an end moved, a session moved or cancelled) run on the real
cluster in ``tests/conformance/test_slurm_after_day_one.py``.
"""

from __future__ import annotations

import pytest

from gpuseat.engines.runner import RecordingRunner
from gpuseat.engines.slurm.adapter import Slurm
from gpuseat.engines.slurm.reading import core_ranges, cores_of, held_cores, node_names

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


@pytest.mark.parametrize(
    ("shown", "cores"),
    [("0-3", {0, 1, 2, 3}), ("0-1,4", {0, 1, 4}), ("0,2-3,5", {0, 2, 3, 5}), ("7", {7}), ("(null)", set())],
)
def test_a_core_list_is_read_as_its_cores_and_written_back(shown: str, cores: set[int]) -> None:
    assert cores_of(shown) == cores
    assert core_ranges(cores_of(shown)) == ("" if shown == "(null)" else shown)


@pytest.mark.parametrize("shown", ["0-", "a", "1-2-3", "0,,1"])
def test_a_core_list_slurm_never_prints_is_refused(shown: str) -> None:
    with pytest.raises(ValueError, match="not a Slurm core list"):
        cores_of(shown)


def _shown_with(lab: Lab, monkeypatch: pytest.MonkeyPatch, extra: dict[str, str]) -> None:  # noqa: F811
    """``scontrol -o show reservation`` as slurmctld prints it, with ``extra[name]`` after the name (its
    ``NodeName=… CoreIDs=…``, as slurmctld shows them a few seconds after it made one) and hand-made
    reservations ``extra`` names that the stand-in has not."""
    plain = lab.fake._scontrol

    def shown(args: tuple[str, ...]) -> tuple[int, str, str]:
        rc, out, err = plain(args)
        if args[:3] == ("-o", "show", "reservation"):
            for name, text in extra.items():
                row = f"ReservationName={name} "
                out = out.replace(row, row + text + " ") if row in out else out + f"{row}{text} Users=root\n"
        return rc, out, err

    monkeypatch.setattr(lab.fake, "_scontrol", shown)


def test_a_session_holding_other_cores_than_its_seats_is_made_again(
    lab: Lab,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The course's four seats are bound to cores 0-3 of gpu01. A session reservation that holds cores 1-4 there
    (made while a job with no time limit ran on core 0, before ``IGNORE_JOBS``: the GPU of seat-01's holder
    outside her session) is deleted and made again; the other, on cores 0-3, is left as it is; one that shows no
    ``CoreIDs`` yet (just made) is not made again (no loop). With a job in it, a note says so instead. While
    another reservation holds core 0 then, a new one would get other cores again: a note, no step. Before, only
    its ``CoreCnt`` was compared (4 both)."""
    assert not lab.apply().failed
    wrong, right = sorted(lab.fake.reservations)
    extra = {wrong: "NodeName=gpu01 CoreIDs=1-4", right: "NodeName=gpu01 CoreIDs=0-3"}
    _shown_with(lab, monkeypatch, extra)
    (step,) = [s for s in lab.plan().steps if s.action.startswith("reservation.")]
    assert (step.action, step.target) == ("reservation.resize", wrong)
    assert step.why == "cores 0-3 on gpu01 for its seats, not 1-4: made again" and "CoreCnt=4" in step.data["words"]
    lab.fake.jobs[9] = {"user": "alice", "state": "RUNNING", "gres": "gres:gpu:m60.seat-01:1",
                        "partition": "gpuseat-c1", "resv": wrong}  # fmt: skip
    changes = lab.plan()
    assert not [s for s in changes.steps if s.action.startswith("reservation.")]
    assert any(n.startswith(f"session {wrong} needs cores 0-3 on gpu01 for its seats, not 1-4; job(s) 9") for n in
               changes.notes), changes.notes  # fmt: skip
    del lab.fake.jobs[9]
    extra["blocker"] = "StartTime=2000-01-01T00:00:00 EndTime=2999-01-01T00:00:00 NodeName=gpu01 CoreIDs=0"
    changes = lab.plan()
    assert not [s for s in changes.steps if s.action.startswith("reservation.")]
    assert f"session {wrong} holds other cores than its seats', but reservation blocker holds its seats' cores " \
           "then: it stays as it is until that one is gone" in changes.notes  # fmt: skip
    del extra["blocker"]
    assert not lab.apply().failed
    del extra[wrong]  # made again: slurmctld shows no CoreIDs for a few seconds
    assert lab.plan().steps == []
    extra[wrong] = "NodeName=gpu01 CoreIDs=0-3"
    assert lab.plan().steps == []


def test_each_node_of_a_reservation_is_read_with_its_cores() -> None:
    """``scontrol -o show reservation`` prints ``NodeName=… CoreIDs=…`` once per node of a core reservation."""
    line = ("ReservationName=r StartTime=2026-12-08T09:00:00 EndTime=2026-12-08T12:00:00 Nodes=gpu[01-02],cpu1 "
            "NodeCnt=3 CoreCnt=6 Flags=SPEC_NODES   NodeName=gpu01 CoreIDs=0-1,4   NodeName=gpu02 CoreIDs=0 "
            "  NodeName=cpu1 CoreIDs=2-3 TRES=cpu=6 Users=root\nReservationName=whole Nodes=gpu03 CoreCnt=8 Users=x\n")  # fmt: skip
    slurm = Slurm(RecordingRunner(answers={("scontrol",): lambda _argv: (0, line, "")}))
    found = slurm.reservations()
    assert held_cores(found["r"]) == {"gpu01": {0, 1, 4}, "gpu02": {0}, "cpu1": {2, 3}}
    assert held_cores(found["whole"]) == {} and found["r"]["CoreCnt"] == "6"
