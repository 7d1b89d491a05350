"""``gpuseat slurm config`` through the real CLI (in-process)."""

from __future__ import annotations

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
    assert "NodeName=gpu01 Name=gpu Type=m60 File=/dev/nvidia3 Cores=3" in (tmp_path / "gres.conf").read_text()
    conf = (tmp_path / "slurm.conf.gpuseat").read_text()
    assert "NodeName=gpu01 CPUs=48 Gres=gpu:m60:4 State=UNKNOWN" in conf
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
