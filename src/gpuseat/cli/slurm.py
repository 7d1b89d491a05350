"""CLI for ``gpuseat slurm config|enroll|sessions|status|check``: parse flags, call :mod:`gpuseat.engines.slurm`, print.

``enroll`` and ``sessions`` are the same thin alias of ``gpuseat apply --engine slurm``: their flags are
stored as the course's slurm settings first (so the agent uses them too), then the cluster is made to
match the course.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpuseat.cli._options import Commands, CourseOption, ForceFolderOption, ShortDbOption
from gpuseat.cli._output import Format, FormatOption, print_json, print_rows, stderr_console

if TYPE_CHECKING:
    from gpuseat.engines.slurm.config import GresDevice

slurm_app = typer.Typer(
    help="Seats on a Slurm cluster: gres.conf/slurm.conf/cgroup.conf, enrolment, session reservations, status.",
    no_args_is_help=True,
    cls=Commands,
)


class SlurmMode(StrEnum):
    """What Slurm schedules as one seat."""

    passthrough = "passthrough"
    mig = "mig"


SLURM_CONF = typer.Option(None, "--slurm-conf", help="slurm.conf of the cluster (default: SLURM_CONF or /etc/slurm).")


def _slurm(conf: Path | None) -> Any:
    from gpuseat.engines.runner import Runner
    from gpuseat.engines.slurm.adapter import Slurm

    return Slurm(Runner(), conf=_conf_file(conf))


def _conf_file(conf: Path | None) -> Path | None:
    """``--slurm-conf`` once it names a file: scontrol given one that is not there looks for the cluster
    in DNS (configless Slurm) for about a minute, then fails as if slurmctld were down (exit 1)."""
    from gpuseat.errors import InputError

    if conf is not None and not conf.is_file():
        what = "is a folder, not slurm.conf" if conf.is_dir() else "file not found"
        raise InputError(
            what,
            where=f"--slurm-conf {conf}",
            fix="give the cluster's slurm.conf (e.g. /etc/slurm/slurm.conf), or leave --slurm-conf out for SLURM_CONF",
        )
    return conf


def _mig_instances(text: str | None) -> dict[str, tuple[int, int]] | None:
    """``SEAT=GI[:CI],…`` → {seat: (gi, ci)}."""
    if text is None:
        return None
    from gpuseat.errors import InputError

    out = {}
    for item in text.split(","):
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]{1,64})=([0-9]{1,2})(?::([0-9]{1,2}))?\s*", item)  # not \d: ٧ was 7
        if m is None:
            raise InputError(
                f"{item!r} is not SEAT=GI[:CI]",
                where="--mig-instances",
                fix="list each MIG seat with its GPU instance id, e.g. seat-01=7,seat-02=8:0",
            )
        out[m.group(1)] = (int(m.group(2)), int(m.group(3) or 0))
    return out


def _devices(
    inventory: Path,
    mode: SlurmMode,
    profile: list[str],
    node: str,
    dev_root: str,
    mig_minors: Path | None,
    mig_instances: str | None,
) -> list[GresDevice]:
    from gpuseat.catalog.bundle import load_catalog
    from gpuseat.core.delivery import parse_mig_minors
    from gpuseat.engines.slurm import config, names
    from gpuseat.files import read_text
    from gpuseat.services.carving import carve_inventory, profiles_from_flags

    layout = carve_inventory(inventory, load_catalog(), mode=mode.value, profiles=profiles_from_flags(profile))
    minors = parse_mig_minors(read_text(mig_minors), where=str(mig_minors)) if mig_minors else None
    return config.devices_from_layout(
        layout,
        names.node_name(node, where="--node"),
        dev_root=dev_root,
        mig_minors=minors,
        mig_instances=_mig_instances(mig_instances),
    )


def _cores_per_seat(db: str | None, course: str | None, *, required: bool) -> int:
    """The course's ``cores_per_seat`` (Slurm engine setting). A preview (no ``--record``) takes 1 when the
    store or the course is not there (``--course`` then only names the partition)."""
    from gpuseat.engines.slurm.course import cores_per_seat
    from gpuseat.errors import InputError
    from gpuseat.store import open_store

    if not required and course is None:
        return 1
    try:
        with open_store(db) as store:
            return cores_per_seat(store, store.courses.get_course(course).key)
    except InputError:
        if required:
            raise
        return 1


@slurm_app.command("config")
def config_command(
    inventory: Path | None = typer.Option(
        None, "--inventory", help="Server inventory TOML (as for gpuseat carve); without it: the seats recorded."
    ),
    mode: SlurmMode = typer.Option(SlurmMode.passthrough, "--mode", help="Whole GPUs or MIG instances."),
    profile: list[str] = typer.Option([], "--profile", help="MIG profiles, one per seat (comma list)."),
    node: str | None = typer.Option(None, "--node", help="Slurm node name of this server (with --inventory)."),
    cpus: int | None = typer.Option(None, "--cpus", min=1, max=4096, help="The node's cores (one per seat at least)."),
    real_memory_mb: int | None = typer.Option(None, "--real-memory", min=1, max=2**31, help="RealMemory, MB."),
    dev_root: str = typer.Option("/dev", "--dev-root", help="Where the device files live."),
    mig_minors: Path | None = typer.Option(
        None, "--mig-minors", help="The host's /proc/driver/nvidia-caps/mig-minors."
    ),
    mig_instances: str | None = typer.Option(None, "--mig-instances", help="SEAT=GI[:CI],… of the created instances."),
    course: CourseOption = None,
    db: ShortDbOption = None,
    record: bool = typer.Option(False, "--record", help="Record each seat's Slurm device in the course store."),
    out: Path | None = typer.Option(None, "--out", help="Write the files here instead of printing them."),
    force: ForceFolderOption = False,
    conf_dir: Path | None = typer.Option(
        None,
        "--conf-dir",
        help="Also write job_submit.lua into slurm.conf's folder (do this before slurm.conf names "
        "JobSubmitPlugins=lua: slurmctld does not start without the script).",
    ),
) -> None:
    """Write gres.conf, the slurm.conf node/partition lines and cgroup.conf for the carved seats.

    With ``--inventory`` and ``--node`` the seats come from carving that server (``--record`` stores them
    as the course's Slurm seats); without, from the seats the course store already holds for Slurm. Each
    seat is bound to the course's ``cores_per_seat`` (Slurm engine setting) cores.
    """
    from gpuseat.engines.slurm import config
    from gpuseat.engines.slurm import course as slurm
    from gpuseat.errors import InputError

    keys: list[str] = []
    if inventory is None:
        if record:
            raise InputError("--record needs --inventory", where="--record", fix="give --inventory and --node")
        from gpuseat.store import open_store

        with open_store(db) as store:
            sc = slurm.slurm_course_from_store(store, course)
        if not sc.devices:
            raise InputError(
                f"course {sc.key} has no Slurm seats recorded",
                where="--course",
                fix="run gpuseat slurm config --inventory FILE --node NAME --record first",
            )
        devices, keys = list(sc.devices), [sc.key]
    elif node is None:
        raise InputError("--inventory needs --node", where="--node", fix="give the Slurm node name of this server")
    else:
        slots = _devices(inventory, mode, profile, node, dev_root, mig_minors, mig_instances)
        devices = config.seat_cores(slots, _cores_per_seat(db, course, required=record))
        if record:
            from gpuseat.store import open_store

            with open_store(db) as store:
                key = store.courses.get_course(course).key
                files = slurm.config_files(devices, [key], cpus=cpus, real_memory_mb=real_memory_mb)
                # the folders are checked before the store changes: a bad one stores nothing
                if conf_dir is not None:
                    slurm.lua_path(conf_dir)
                if out is not None:
                    slurm.write_files(files, out, force=force, check=True)
                recorded = slurm.record_config(store, key, slots)  # each seat's slot; its cores follow the setting
            keys = [key]
            stderr_console().print(f"recorded {len(recorded)} seat(s) of course {key} as Slurm seats", markup=False)
        elif course:
            keys = [course]
    files = slurm.config_files(devices, keys, cpus=cpus, real_memory_mb=real_memory_mb)
    if conf_dir is not None:
        from gpuseat.store import open_store

        with open_store(db) as store:
            every = slurm.courses_from_store(store)
        lua = slurm.write_job_submit(every, conf_dir)
        stderr_console().print(f"wrote {lua} ({sum(len(c.limits()) for c in every)} seat limit(s))", markup=False)
        include = conf_dir / "gpuseat-partitions.conf"
        if not include.exists():  # slurmctld does not start with an Include of a missing file
            from gpuseat.engines.slurm.config import INCLUDE_MARK
            from gpuseat.files import write_file

            write_file(include, INCLUDE_MARK + "\n")
        stderr_console().print(
            f"slurm.conf needs the line `Include {include}` (course partitions gpuseat apply creates live there)",
            markup=False,
        )
    if out is None:
        for name, text in files.items():
            print(f"# ---- {name}\n{text}", end="")
        return
    for path in slurm.write_files(files, out, force=force):
        print(path)


ACCOUNTING = typer.Option(
    None, "--accounting/--no-accounting", help="Use sacctmgr (slurmdbd); default: what the cluster runs."
)
CONF_DIR = typer.Option(None, "--conf-dir", help="Where job_submit.lua goes (slurm.conf's folder).")
PARTITIONS_CONF = typer.Option(
    None, "--partitions-conf", help="The slurm.conf include for course partitions (default: gpuseat-partitions.conf)."
)


@slurm_app.command("enroll")
def enroll_command(
    course: CourseOption = None,
    db: ShortDbOption = None,
    slurm_conf: Path | None = SLURM_CONF,
    conf_dir: Path | None = CONF_DIR,
    partitions_conf: Path | None = PARTITIONS_CONF,
    accounting: bool | None = ACCOUNTING,
    fmt: FormatOption = Format.table,
) -> None:
    """Same as ``gpuseat apply --engine slurm``: flags stored as the course's slurm settings, then the
    partition, limits, associations and session reservations made to match the seat holders."""
    _apply(course, db, fmt, slurm_conf=slurm_conf, conf_dir=conf_dir, partitions_conf=partitions_conf,
           accounting=accounting, where="gpuseat slurm enroll")  # fmt: skip


@slurm_app.command("sessions")
def sessions_command(
    course: CourseOption = None,
    db: ShortDbOption = None,
    slurm_conf: Path | None = SLURM_CONF,
    fmt: FormatOption = Format.table,
) -> None:
    """Same as ``gpuseat apply --engine slurm`` (the session reservations are part of the plan)."""
    _apply(course, db, fmt, slurm_conf=slurm_conf, where="gpuseat slurm sessions")


def _apply(course: str | None, db: str | None, fmt: Format, *, where: str, **flags: Any) -> None:
    from gpuseat.cli.apply import apply_engine

    _conf_file(flags.get("slurm_conf"))
    given = {k: (str(v) if isinstance(v, Path) else v) for k, v in flags.items() if v is not None}
    if given.get("slurm_conf") and not given.get("conf_dir"):
        given.setdefault("conf_dir", str(Path(given["slurm_conf"]).parent))
    apply_engine(
        course,
        db,
        "slurm",
        given,
        fmt,
        where=where,
        missing="course {key} has no Slurm seats",
        fix="record them first: gpuseat slurm config --inventory FILE --node NAME --course KEY --record",
    )


@slurm_app.command("status")
def status_command(
    course: CourseOption = None,
    db: ShortDbOption = None,
    slurm_conf: Path | None = SLURM_CONF,
    fmt: FormatOption = Format.table,
) -> None:
    """Each participant's jobs, Slurm's reason and GRES; the seats' engine state is recorded in the store.

    Who the cluster ties to their seat's type is read from the job_submit.lua where the Slurm engine
    writes it (its ``conf_dir`` setting, else slurm.conf's folder); the output names the file read."""
    from gpuseat.engines.slurm import course as slurm
    from gpuseat.store import open_store

    with open_store(db) as store:
        report = slurm.status_from_store(store, course, _slurm(slurm_conf), slurm_conf=slurm_conf)
    if fmt is Format.json:
        print_json(report.to_dict())
        return
    rows = []
    for m in report.members:
        jobs = "; ".join(
            f"{j['job_id']} {j['state']} {j['gres_idx'] or j['gres']}"
            + (f" ({j['reason']})" if j["reason"] not in ("None", "") else "")
            for j in m.jobs
        )
        rows.append(
            {
                "participant": m.participant,
                "unix_user": m.unix_user or "",
                "seat": m.seat or "",
                "gres": m.gres or "",
                "jobs": jobs or "-",
                "waiting": m.blocked_by or "",
            }
        )
    if fmt is Format.table:  # the warnings go with the table (stderr), not with CSV
        _print_warnings(report)
    cols = ["participant", "unix_user", "seat", "gres", "jobs", "waiting"]
    print_rows(rows, cols, fmt, title=f"slurm · {report.course} · {len(report.reservations)} session reservation(s)")


def _print_warnings(report: Any) -> None:
    """What ``slurm status`` must say beside its table: the job_submit.lua read, a missing partition, who
    waits and why, stray jobs."""
    lua = report.job_submit
    if lua is None:
        said = "no job_submit.lua read (the cluster runs no JobSubmitPlugins=lua, or slurm.conf's folder is unknown)"
    else:
        said = f"read from {lua}" if Path(lua).is_file() else f"{lua} is not there: nobody is tied to their seat's type"
    stderr_console().print(f"seat limits: {said}", markup=False)
    if not report.partition_exists:
        stderr_console().print(f"partition {report.partition} missing: run gpuseat apply --engine slurm", markup=False)
    for m in report.members:
        if m.blocked_by:
            stderr_console().print(f"{m.participant} waits: {m.blocked_by}", markup=False)
    for j in report.strays:
        stderr_console().print(
            f"{j['user']} {j['why']}: job {j['job_id']} {j['state']} {j['gres']} (gpuseat apply cancels it)",
            markup=False,
        )


@slurm_app.command("check")
def check_command(
    course: CourseOption = None,
    db: ShortDbOption = None,
    slurm_conf: Path | None = SLURM_CONF,
    participant: list[str] = typer.Option([], "--participant", help="Only these participants (key)."),
    out_dir: Path = typer.Option(Path("/tmp/gpuseat-slurm-check"), "--out-dir", help="Where the probe jobs write."),
    fmt: FormatOption = Format.table,
) -> None:
    """Run a one-GPU job as each participant in the session running now: the GPU it sees, or Slurm's refusal."""
    from gpuseat.engines.slurm import course as slurm
    from gpuseat.store import open_store

    with open_store(db) as store:
        sc = slurm.slurm_course_from_store(store, course)
    rows = slurm.check(_slurm(slurm_conf), sc, now=datetime.now(), out_dir=out_dir, participants=participant)
    cols = ["participant", "unix_user", "seat", "ok", "cuda_visible_devices", "slurm_job_gpus", "refusal"]
    print_rows([r.to_dict() for r in rows], cols, fmt, title=f"slurm check · {sc.key}")
    raise typer.Exit(0 if all(r.ok for r in rows) else 1)


def register(app: typer.Typer) -> None:
    """Add ``gpuseat slurm``."""
    app.add_typer(slurm_app, name="slurm")
