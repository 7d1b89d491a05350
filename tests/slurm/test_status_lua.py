"""``gpuseat slurm status`` reads the seat limits from the job_submit.lua where the Slurm engine writes it
(its ``conf_dir`` setting), not only from slurm.conf's folder, and names the file it read; against the
recording stand-in cluster of test_engine_plan (no daemons)."""

from __future__ import annotations

from pathlib import Path

from gpuseat.engines.slurm import config
from gpuseat.engines.slurm import course as service
from gpuseat.engines.slurm.adapter import Slurm

from .test_engine_plan import Lab, lab  # noqa: F401  (the lab fixture)


def _settings(lab: Lab, **more: object) -> None:  # noqa: F811
    conf = str(lab.etc / "slurm.conf")
    lab.store.agents.set_engine_settings("c1", "slurm", {"slurm_conf": conf, "cancel_wait_s": 1, **more})  # type: ignore[attr-defined]


def test_status_reads_the_lua_in_the_engines_conf_dir(lab: Lab, tmp_path: Path) -> None:  # noqa: F811
    """slurm.conf's folder holds a job_submit.lua of gpuseat's with no limits; the engine, configured with
    another conf_dir, writes the seat limits there: status reads that one, so alice (tied to seat-01 by
    it) with a job on bob's seat is a stray that moved (read from slurm.conf's folder: nobody is tied, and
    Slurm may place her job on any GPU)."""
    limits = tmp_path / "limits"
    limits.mkdir()
    _settings(lab, conf_dir=str(limits))
    done = lab.apply()
    assert not done.failed, done.failed
    lua = limits / "job_submit.lua"
    assert {x.user for x in config.job_submit_limits(lua.read_text())} == {"alice", "bob"}
    assert config.job_submit_limits((lab.etc / "job_submit.lua").read_text()) == []
    lab.job(81, "alice", "seat-02")
    report = service.status_from_store(lab.store, "c1", Slurm(lab.runner))  # type: ignore[arg-type]
    assert report.job_submit == str(lua)
    assert [(s["job_id"], s["user"], s["why"]) for s in report.strays] == [
        (81, "alice", "moved: the job is on seat-02")
    ]
    assert report.to_dict()["job_submit"] == str(lua)


def test_status_without_conf_dir_reads_the_lua_beside_slurm_conf(lab: Lab) -> None:  # noqa: F811
    _settings(lab)
    assert not lab.apply().failed
    report = service.status_from_store(lab.store, "c1", Slurm(lab.runner))  # type: ignore[arg-type]
    assert report.job_submit == str(lab.etc / "job_submit.lua")
    lab.job(82, "alice", "seat-02")
    report = service.status_from_store(lab.store, "c1", Slurm(lab.runner))  # type: ignore[arg-type]
    assert [(s["job_id"], s["why"]) for s in report.strays] == [(82, "moved: the job is on seat-02")]
