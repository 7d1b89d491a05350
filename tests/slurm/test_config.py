"""Slurm config generation (pure): gres.conf, node lines, partitions, job_submit.lua, reservations, names."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core import logins
from gpuseat.core.carve import CarveRequest, carve
from gpuseat.core.delivery import parse_mig_minors
from gpuseat.core.inventory import server_from_toml
from gpuseat.core.needs import SeatNeed
from gpuseat.engines.slurm import config, names
from gpuseat.engines.slurm.adapter import explain
from gpuseat.errors import EngineError, InputError
from gpuseat.files import read_toml

EXAMPLES = Path(__file__).parents[2] / "examples"
# gpu0's part of /proc/driver/nvidia-caps/mig-minors in the driver's layout (config, monitor, then per GI
# its access minor and its 8 CIs'): gi7 → 66/67, gi8 → 75/76 as in a real site's MIG gres.conf.
MIG_MINORS = "config 1\nmonitor 2\n" + "".join(
    f"gpu0/gi{g}/access {3 + g * 9}\n" + "".join(f"gpu0/gi{g}/ci{c}/access {4 + g * 9 + c}\n" for c in range(8))
    for g in range(15)
)


def _layout(path: str, mode: str, **kw):
    catalog = load_catalog()
    server = server_from_toml(read_toml(EXAMPLES / path), catalog, where=path)
    return carve(server, CarveRequest(mode=mode, **kw), catalog)


def test_whole_gpus_one_line_each_bound_to_its_own_core() -> None:
    devices = config.devices_from_layout(
        _layout("ibm-2xM60.toml", "passthrough", need=SeatNeed(isolation="dedicated")), "gpu01"
    )
    text = config.gres_conf(devices)
    lines = [ln for ln in text.splitlines() if ln.startswith("NodeName=")]
    # each seat is its own GRES type: a job asking for it can only get that seat's device
    assert lines[0].startswith("NodeName=gpu01 Name=gpu Type=m60.seat-01 File=/dev/nvidia0 Cores=0")
    assert lines[3].startswith("NodeName=gpu01 Name=gpu Type=m60.seat-04 File=/dev/nvidia3 Cores=3")
    assert "AutoDetect=off" in text
    node = config.node_lines(devices, cpus=48, real_memory_mb=128000)
    assert node.strip() == (
        "NodeName=gpu01 CPUs=48 RealMemory=128000 "
        "Gres=gpu:m60.seat-01:1,gpu:m60.seat-02:1,gpu:m60.seat-03:1,gpu:m60.seat-04:1 State=UNKNOWN"
    )
    with pytest.raises(InputError, match="each bound to its own core"):
        config.node_lines(devices, cpus=2)


def test_mig_seats_are_typed_gres_with_multiple_files() -> None:
    layout = _layout("h200-2x-server.toml", "mig", profiles=("1g.18gb",) * 3)
    seats = [s.name for s in layout.slices]
    with pytest.raises(InputError, match="needs its device files"):
        config.devices_from_layout(layout, "gpu02")
    minors = parse_mig_minors(MIG_MINORS)
    devices = config.devices_from_layout(
        layout, "gpu02", mig_minors=minors, mig_instances={s: (7 + i, 0) for i, s in enumerate(seats)}
    )
    text = config.gres_conf(devices)
    assert (
        f"NodeName=gpu02 Name=gpu Type=1g.18gb.{seats[0]} MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap66,"
        "/dev/nvidia-caps/nvidia-cap67 Cores=0"
    ) in text
    gres = ",".join(f"gpu:1g.18gb.{s}:1" for s in seats)
    assert config.node_lines(devices, cpus=64).strip() == f"NodeName=gpu02 CPUs=64 Gres={gres} State=UNKNOWN"
    with pytest.raises(InputError, match="no capability"):
        config.mig_files("/dev", 0, minors, gi=20)


@given(st.text(max_size=60))
def test_mig_minors_parser_accepts_only_its_format(line: str) -> None:
    try:
        parsed = parse_mig_minors(line)
    except InputError as exc:
        assert "mig-minors" in exc.message
    else:
        assert all(isinstance(v, int) for v in parsed.values())


@pytest.mark.parametrize("bad", ["a,b", "x=y", "-p", "a b", "", "ä", "x" * 64, "a\nb"])
def test_names_that_could_become_options_are_refused(bad: str) -> None:
    with pytest.raises(InputError):
        names.slurm_name(bad)


@pytest.mark.parametrize(
    ("check", "good"),
    [(names.slurm_name, "lab"), (names.gres_type, "1g.10gb"), (names.node_name, "gpu1"),
     (names.device_path, "/dev/nvidia0")],
)  # fmt: skip
def test_a_trailing_newline_is_not_part_of_a_name(check: Any, good: str) -> None:
    """``$`` matches before a final newline: "lab\n" passed every Slurm name check and reached the
    generated slurm.conf and gres.conf lines."""
    assert check(good) == good
    with pytest.raises(InputError):
        check(good + "\n")


@pytest.mark.parametrize("bad", ["Root", "-u", "a,b", "a b", "a=b", "x" * 33, "1abc"])
def test_unix_users_checked(bad: str) -> None:
    with pytest.raises(InputError):
        logins.unix_user(bad)


def test_device_paths_never_escape() -> None:
    for bad in ("/dev/../etc/passwd", "dev/nvidia0", "/dev/nvidia0,/x", "/dev/a=b"):
        with pytest.raises(InputError):
            names.device_path(bad)


def test_job_submit_lua_holds_each_seat_once() -> None:
    part = names.course_partition("c2016")
    text = config.job_submit_lua(
        [config.SeatLimit(part, "alice", "m60", 1), config.SeatLimit(part, "bob", "1g.18gb", 1)]
    )
    assert '["gpuseat-c2016"] = {' in text
    assert '["alice"] = {type = "m60", seat = "m60", count = 1},' in text
    assert '["bob"] = {type = "1g.18gb", seat = "1g.18gb", count = 1},' in text
    assert "function slurm_job_modify" in text and "seat_rule(job_desc, job_rec" in text
    seated = config.job_submit_lua(
        [config.SeatLimit(part, "alice", "m60", 1, seat_type="m60.seat-01")], {"alice": 1001, "nobody": 7}
    )
    assert '["alice"] = {type = "m60", seat = "m60.seat-01", count = 1},' in seated
    assert '[1001] = "alice",' in seated and '"nobody"' not in seated  # only enrolled users' uids
    with pytest.raises(InputError, match="two seats"):
        config.job_submit_lua([config.SeatLimit(part, "alice", "m60", 1)] * 2)
    with pytest.raises(InputError):
        config.SeatLimit(part, 'x"] = nil --', "m60", 1)


def test_one_reservation_per_session_with_the_core_count_of_the_seats() -> None:
    devices = config.devices_from_layout(
        _layout("ibm-2xM60.toml", "passthrough", need=SeatNeed(isolation="dedicated")), "gpu01"
    )
    day = datetime(2026, 3, 2, 9)
    res = config.session_reservations(
        "c2016",
        [(day, day + timedelta(hours=8)), (day + timedelta(days=1), day + timedelta(days=1, hours=8))],
        ["bob", "alice", "bob"],
        devices,
    )
    assert [r.name for r in res] == ["gpuseat-c2016-20260302T0900", "gpuseat-c2016-20260303T0900"]
    assert res[0].words() == [
        "ReservationName=gpuseat-c2016-20260302T0900",
        "Users=alice,bob",
        "StartTime=2026-03-02T09:00:00",
        "Duration=480",
        "Nodes=gpu01",
        "CoreCnt=4",
        "PartitionName=gpuseat-c2016",
        "Flags=IGNORE_JOBS",
    ]
    with pytest.raises(InputError, match="unix user"):
        config.session_reservations("c2016", [(day, day + timedelta(hours=1))], [], devices)


def test_partition_and_cgroup_lines() -> None:
    assert config.partition_words("c2016", ["gpu01", "gpu02"]) == [
        "PartitionName=gpuseat-c2016",
        "Nodes=gpu01,gpu02",
        "ReqResv=YES",
        "MaxTime=INFINITE",
        "State=UP",
    ]
    assert "ConstrainDevices=yes" in config.cgroup_conf()
    assert "JobSubmitPlugins=lua" in config.cluster_settings()


def test_explain_adds_what_a_refusal_means() -> None:
    said = explain("sbatch: error: Batch job submission failed: Access denied to requested reservation\n")
    assert said.startswith("Batch job submission failed: Access denied to requested reservation (")
    assert "not on this session's reservation" in said


def test_a_seat_gres_type_names_one_device_on_the_whole_cluster() -> None:
    """Jobs are rewritten to the seat's own type: two devices with one type would let a job take either."""
    a = config.GresDevice(node="gpu01", gres_type="m60", files=("/dev/nvidia0",), core=0, seat="seat-01")
    b = config.GresDevice(node="gpu02", gres_type="m60", files=("/dev/nvidia0",), core=0, seat="seat-01")
    assert a.slurm_type == "m60.seat-01"
    with pytest.raises(InputError, match="would name two devices"):
        config.gres_conf([a, b])
    assert "Type=m60.seat-02" in config.gres_conf([a, b.model_copy(update={"seat": "seat-02"})])


def test_a_slurm_command_that_times_out_is_one_clear_error() -> None:
    """Every Slurm command goes through the Runner: its time-out is an EngineError naming the command;
    a command as a participant runs as their uid directly (no ``runuser`` left behind to wait)."""
    import time

    from gpuseat.engines.runner import RecordingRunner, Runner
    from gpuseat.engines.slurm.adapter import Slurm

    started = time.monotonic()
    with pytest.raises(EngineError, match="did not finish within 1 s"):
        Slurm(Runner(), timeout_s=1).run("sleep", ["60"])
    assert time.monotonic() - started < 10
    rec = RecordingRunner(answers={("srun",): (0, "", "")})
    Slurm(rec, conf=Path("/etc/slurm/x.conf")).run("srun", ["--gres=gpu:1", "true"], as_user="alice")
    (ran,) = rec.take()
    assert ran.argv == ("srun", "--gres=gpu:1", "true") and ran.user == "alice"
    with pytest.raises(InputError, match="unix user"):
        Slurm(rec).run("srun", ["true"], as_user="alice,bob")
    with pytest.raises(EngineError, match="no unix user gsnobody-x on this machine"):
        Slurm(Runner()).run("true", [], as_user="gsnobody-x")


def test_seats_with_two_cores_take_consecutive_ranges_and_the_lua_says_so() -> None:
    """``cores_per_seat`` 2: seat i is bound to cores 2i and 2i+1 (gres.conf ``Cores=2-3``), the node needs
    seats × 2 cores (fewer: one message naming the numbers), a session reserves them all (``CoreCnt=8``), and
    each seat limit in job_submit.lua says ``cpus = 2`` (read back as written); with 1 nothing changes."""
    slots = config.devices_from_layout(
        _layout("ibm-2xM60.toml", "passthrough", need=SeatNeed(isolation="dedicated")), "gpu01"
    )
    assert config.seat_cores(slots, 1) == slots
    devices = config.seat_cores(slots, 2)
    lines = config.gres_conf(devices).splitlines()[3:]
    assert [ln.split(" Cores=")[1].split()[0] for ln in lines] == ["0-1", "2-3", "4-5", "6-7"]
    assert "Type=m60.seat-02 File=/dev/nvidia1 Cores=2-3  # seat seat-02" in lines[1]
    # each seat's cores one socket (``CPUs=N`` alone is N one-core sockets, and 22.05 binds a GPU to sockets)
    assert "NodeName=gpu01 CPUs=8 Sockets=4 CoresPerSocket=2 ThreadsPerCore=1 Gres=" in config.node_lines(devices)
    assert "CPUs=10 Sockets=5 CoresPerSocket=2 " in config.node_lines(devices, cpus=10)
    with pytest.raises(InputError, match="gpu01: 9 CPUs are no whole number of 2-core seats"):
        config.node_lines(devices, cpus=9)
    assert "NodeName=gpu01 CPUs=4 Gres=" in config.node_lines(slots)  # one core per seat: as before
    with pytest.raises(InputError, match=r"gpu01 has 7 CPUs but 4 seats, × 2 cores per seat = 8 cores") as e:
        config.node_lines(devices, cpus=7)
    assert "give at least 8 CPUs" in (e.value.fix or "")
    with pytest.raises(InputError, match="has 3 CPUs but 4 seats, each bound to its own core"):
        config.node_lines(slots, cpus=3)
    with pytest.raises(InputError, match="core 1 on gpu01 is bound to two seats"):  # ranges overlap
        config.gres_conf([devices[0], devices[1].model_copy(update={"core": 1})])
    day = datetime(2026, 3, 2, 9)
    (res,) = config.session_reservations("c2016", [(day, day + timedelta(hours=1))], ["alice"], devices)
    assert "CoreCnt=8" in res.words()
    with pytest.raises(InputError, match="cores up to 4097"):
        config.seat_cores([slots[0].model_copy(update={"core": 2048})], 2)
    part = names.course_partition("c2016")
    limits = [
        config.SeatLimit(part, "alice", "m60", 1, "m60.seat-01", cpus=2),
        config.SeatLimit(part, "bob", "m60", 1, "m60"),
    ]
    text = config.job_submit_lua(limits)
    assert '["alice"] = {type = "m60", seat = "m60.seat-01", count = 1, cpus = 2},' in text
    assert '["bob"] = {type = "m60", seat = "m60", count = 1},' in text  # one core: the row as before
    assert "local SEAT_CPUS = 1 " in text and "seat.cpus or SEAT_CPUS" in text
    assert config.job_submit_limits(text) == limits
    with pytest.raises(InputError, match="CPU count 0 out of range"):
        config.SeatLimit(part, "alice", "m60", 1, cpus=0)
