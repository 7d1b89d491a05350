"""``gpuseat slurm config`` through the real CLI (in-process)."""

from __future__ import annotations

import re
from pathlib import Path

EXAMPLES = Path(__file__).parents[2] / "examples"


def test_config_writes_the_three_files(cli, tmp_path: Path) -> None:
    r = cli(
        "slurm",
        "config",
        "--inventory",
        EXAMPLES / "ibm-2xM60.toml",
        "--node",
        "gpu01",
        "--cpus",
        "48",
        "--course",
        "c2016",
        "--out",
        tmp_path,
    )
    assert r.code == 0, r.err
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".gpuseat-manifest.json",
        "cgroup.conf",
        "gres.conf",
        "slurm.conf.gpuseat",
    ]
    assert "NodeName=gpu01 Name=gpu Type=m60.seat-04 File=/dev/nvidia3 Cores=3" in (tmp_path / "gres.conf").read_text()
    conf = (tmp_path / "slurm.conf.gpuseat").read_text()
    assert "NodeName=gpu01 CPUs=48 Gres=gpu:m60.seat-01:1,gpu:m60.seat-02:1," in conf
    assert "PartitionName=gpuseat-c2016 Nodes=gpu01 ReqResv=YES" in conf


def test_bad_input_is_one_message_exit_2(cli) -> None:
    inv = EXAMPLES / "ibm-2xM60.toml"
    r = cli("slurm", "config", "--inventory", inv, "--node", "gpu01,evil")
    assert r.code == 2 and "node name 'gpu01,evil' is not allowed" in r.err and "Traceback" not in r.err
    r = cli("slurm", "config", "--inventory", inv, "--node", "gpu01", "--cpus", "2")
    assert r.code == 2 and "each bound to its own core" in r.err
    r = cli("slurm", "config", "--inventory", inv, "--node", "gpu01", "--course", "c 1")
    assert r.code == 2 and "Slurm name" in r.err
    r = cli(
        "slurm",
        "config",
        "--inventory",
        EXAMPLES / "h200-2x-server.toml",
        "--mode",
        "mig",
        "--profile",
        "1g.18gb,1g.18gb",
        "--node",
        "gpu02",
    )
    assert r.code == 2 and "needs its device files" in r.err
    r = cli(
        "slurm",
        "config",
        "--inventory",
        EXAMPLES / "h200-2x-server.toml",
        "--mode",
        "mig",
        "--profile",
        "1g.18gb",
        "--node",
        "gpu02",
        "--mig-minors",
        inv,
        "--mig-instances",
        "seat-01=x",
    )
    assert r.code == 2


def test_config_never_overwrites_a_file_it_did_not_write(cli, tmp_path: Path) -> None:
    mine = tmp_path / "gres.conf"
    mine.write_text("# the site's own gres.conf\n")
    r = cli("slurm", "config", "--inventory", EXAMPLES / "ibm-2xM60.toml", "--node", "gpu01", "--out", tmp_path)
    assert r.code == 2 and "--force" in r.err
    assert mine.read_text() == "# the site's own gres.conf\n"


def _course(cli, tmp_path: Path, seats: int) -> str:
    """A store with course c1 and ``seats`` seats named like the carve of ibm-2xM60 (none for Slurm yet)."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    course = tmp_path / "c1.toml"
    course.write_text('name = "C1"\nparticipants = 2\n\n[schedule]\nstart = 2026-03-02\nend = 2026-03-03\n')
    r = cli("course", "create", course, "--key", "c1", "--db", url)
    assert r.code == 0, r.err
    if seats:
        from gpuseat.store import open_store

        with open_store(url) as st:
            st.seats.add_seats("c1", [{"key": f"seat-0{i + 1}", "kind": "gpu"} for i in range(seats)])
    return url


def test_record_with_no_matching_seat_and_enroll_without_slurm_seats_are_clear_errors(cli, tmp_path: Path) -> None:
    url = _course(cli, tmp_path, 0)
    inv = EXAMPLES / "ibm-2xM60.toml"
    r = cli("slurm", "config", "--inventory", inv, "--node", "gpu01", "--course", "c1", "--record", "--db", url)
    assert r.code == 2 and "Traceback" not in r.err
    assert "course c1 has no seat named like the carved ones (seat-01" in r.err and "seats add" in r.err
    r = cli("slurm", "enroll", "--course", "c1", "--db", url, "--conf-dir", tmp_path)
    assert r.code == 2 and "course c1 has no Slurm seats" in r.err and "--record" in r.err
    assert not (tmp_path / "job_submit.lua").exists()


def test_config_conf_dir_writes_job_submit_lua_first(cli, tmp_path: Path) -> None:
    url = _course(cli, tmp_path, 4)
    etc = tmp_path / "etc"
    etc.mkdir()
    inv = EXAMPLES / "ibm-2xM60.toml"
    args = ("--inventory", inv, "--node", "gpu01", "--course", "c1", "--db", url)
    r = cli("slurm", "config", *args, "--record", "--conf-dir", etc, "--out", tmp_path / "gen")
    assert r.code == 0, r.err
    assert f"Include {etc / 'gpuseat-partitions.conf'}" in r.err
    assert (etc / "gpuseat-partitions.conf").read_text().startswith("# gpuseat: course partitions")
    lua = (etc / "job_submit.lua").read_text()
    assert lua.startswith("-- gpuseat:") and "function slurm_job_modify" in lua
    assert "courses = {\n}" in lua  # seats recorded, nobody seated yet: no limits, but the plugin loads
    site = etc / "job_submit.lua"
    site.write_text("-- the site's own\n")
    r = cli("slurm", "config", *args, "--conf-dir", etc)
    assert r.code == 2 and "gpuseat did not write it" in r.err
    assert site.read_text() == "-- the site's own\n"


def test_record_with_a_bad_conf_dir_or_out_folder_stores_nothing(cli, tmp_path: Path) -> None:
    """``--record`` with a ``--conf-dir`` that is not a folder, or an ``--out`` folder holding the site's own
    files, is refused (exit 2) before the seats are recorded: the store is as it was."""
    from gpuseat.store import open_store

    url = _course(cli, tmp_path, 4)
    args = ("--inventory", EXAMPLES / "ibm-2xM60.toml", "--node", "gpu01", "--course", "c1", "--db", url, "--record")
    site = tmp_path / "site"
    site.mkdir()
    (site / "gres.conf").write_text("# the site's own\n")
    for extra, said in (
        (("--conf-dir", tmp_path / "no-such-dir"), "is not a folder"),
        (("--out", site), "gpuseat did not write it"),
    ):
        r = cli("slurm", "config", *args, *extra)
        assert r.code == 2 and said in r.err and "Traceback" not in r.err, r.err
        with open_store(url) as st:
            assert {s.engine for s in st.seats.seats("c1")} != {"slurm"}, extra
            assert not [e for e in st.events.events("c1") if "slurm" in str(e.to_dict())], extra
    assert (site / "gres.conf").read_text() == "# the site's own\n"


def test_config_binds_each_seat_to_the_courses_cores_per_seat(cli, tmp_path: Path) -> None:
    """``gpuseat engines settings slurm cores_per_seat=2``: ``slurm config`` (recording, previewing, and from
    the store) binds seat i to cores 2i-2i+1; a node with fewer than seats × 2 cores is refused naming the
    numbers, before anything is recorded; the store keeps each seat's slot (core=0…3)."""
    from gpuseat.store import open_store

    url = _course(cli, tmp_path, 4)
    r = cli("engines", "settings", "slurm", "cores_per_seat=0", "--course", "c1", "--db", url)
    assert r.code == 2 and "cores_per_seat" in r.err and "Traceback" not in r.err
    assert cli("engines", "settings", "slurm", "cores_per_seat=2", "--course", "c1", "--db", url).code == 0
    args = ("--inventory", EXAMPLES / "ibm-2xM60.toml", "--node", "gpu01", "--course", "c1", "--db", url)
    r = cli("slurm", "config", *args, "--record", "--cpus", "7")
    assert r.code == 2 and "gpu01 has 7 CPUs but 4 seats, × 2 cores per seat = 8 cores" in r.err, r.err
    assert "give at least 8 CPUs" in r.err and "Traceback" not in r.err
    with open_store(url) as st:
        assert {s.engine for s in st.seats.seats("c1")} != {"slurm"}
    for extra in (("--record", "--cpus", "8"), ("--cpus", "8")):
        r = cli("slurm", "config", *args, *extra)
        assert r.code == 0, r.err
        assert "File=/dev/nvidia3 Cores=6-7  # seat seat-04" in r.out and "NodeName=gpu01 CPUs=8 " in r.out
    r = cli("slurm", "config", "--course", "c1", "--db", url)
    assert r.code == 0 and "File=/dev/nvidia1 Cores=2-3  # seat seat-02" in r.out, r.err
    with open_store(url) as st:
        refs = [s.engine_ref or "" for s in st.seats.seats("c1")]
    assert [re.search(r"core=(\d+)", ref).group(1) for ref in refs] == ["0", "1", "2", "3"]  # type: ignore[union-attr]
