"""CLI for ``gpuseat apply``, ``gpuseat agent`` and ``gpuseat engines``: carry the store to the machines.

``apply`` prints each engine's plan like ``terraform plan`` (what, for whom, why), then applies it;
``--dry-run`` prints the plan and the commands it would run, and changes nothing. ``agent`` keeps
doing that as a service; ``engines`` lists the registry and keeps each engine's settings in the store.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuseat.cli._options import Commands, CourseOption, DbOption, add_group, changed
from gpuseat.cli._output import Format, FormatOption, print_json, print_rows
from gpuseat.cli.course import actor

if TYPE_CHECKING:
    from gpuseat.engines.agent import Held
    from gpuseat.engines.apply import Pass
    from gpuseat.errors import EngineError

#: ``--course``, ``--engine`` and ``--host`` of ``apply`` and ``agent``: what this machine's passes cover
EveryCourseOption = Annotated[str | None, typer.Option("--course", help="Only this course (default: every course).")]


def known_engine(value: str | None) -> str | None:
    """``--engine`` when the registry has it: a misspelt name planned for no seat and said "Plan: 0 to add,
    0 to change" (exit 0), as if the machines matched the store."""
    if value is not None:
        from gpuseat.engines import registry
        from gpuseat.errors import InputError

        try:
            registry.spec(value)
        except InputError as exc:
            raise InputError(exc.what, where="--engine", fix=exc.fix) from None
    return value


EngineOption = Annotated[
    str | None,
    typer.Option(
        "--engine", help="Only this engine (default: every engine of the course's seats).", callback=known_engine
    ),
]


def seat_host(value: str | None) -> str | None:
    """``--host`` when it can be a seat's host name (the one host rule, :mod:`gpuseat.core.hosts`): one
    that cannot matched no seat and the pass said "Plan: 0 to add" (exit 0). It only selects stored seats,
    so a host an older gpuseat stored (``STORED_BEFORE``: ``node-``, ``1234``) still names its server (an
    agent unit installed with it keeps starting); ``apply`` notes when no seat is on it (:func:`host_note`)."""
    if value is not None:
        from gpuseat.core.hosts import HOST_EXAMPLES, STORED_BEFORE, host_problem, normal_host
        from gpuseat.errors import InputError

        problem = host_problem(value)
        if problem is not None and STORED_BEFORE.fullmatch(value):
            return value
        if problem is not None:
            fix = f"give the host as the seats name it (gpuseat seats status), {HOST_EXAMPLES}"
            raise InputError(f"{value[:100]!r} is not a host name: {problem}", where="--host", fix=fix)
        return normal_host(value)
    return value


def host_note(store: Any, course: str | None, host: str) -> str | None:
    """What to say when no seat (nor any access still to revoke, a deleted course's too) is on ``host``:
    a typo (``gpu0l``) planned nothing and said only "Plan: 0", as if that machine matched the store. Not
    an error: a server between two courses has no seat either, and a script or timer runs ``apply`` there."""
    from gpuseat.errors import NotFound, did_you_mean

    if course is None:
        keys = [c.key for c in store.courses.list_courses()]
        holdings = store.agents.holdings()
    else:
        try:
            keys = [store.courses.get_course(course).key]
        except NotFound:  # deleted: only what it still holds on the machines
            keys = []
        holdings = store.agents.holdings(keys[0] if keys else course)
    hosts = {s.host for key in keys for s in store.seats.seats(key) if s.host}
    hosts |= {h["host"] for h in holdings if h.get("host")}
    if host in hosts:
        return None
    where = f"course {course}" if course is not None else "any course"
    known = f" (the seats' hosts: {', '.join(sorted(hosts))}.{did_you_mean(host, sorted(hosts))})" if hosts else ""
    return f"note: no seat of {where} is on host {host!r}{known}; nothing was planned for it"


MachineOption = Annotated[
    str | None,
    typer.Option(
        "--host", help="This machine's name in the seats (host engine: default the only one).", callback=seat_host
    ),
]
SET = typer.Option(
    None, "--set", help="ENGINE.SETTING=VALUE, stored as the course's engine setting first (repeatable)."
)


def parse_sets(values: list[str] | None) -> dict[str, dict[str, str]]:
    """``host.ssh_host=gpu1.example.org`` → ``{"host": {"ssh_host": "gpu1.example.org"}}``."""
    from gpuseat.errors import InputError

    out: dict[str, dict[str, str]] = {}
    for item in values or []:
        name, eq, value = item.partition("=")
        engine, dot, key = name.partition(".")
        if not (eq and dot and engine and key):
            raise InputError(
                f"--set {item!r}", where="--set", fix="write ENGINE.SETTING=VALUE, e.g. host.ssh_host=gpu1.lab.org"
            )
        out.setdefault(engine, {})[key] = value
    return out


def store_settings(store: Any, course: str | None, sets: dict[str, dict[str, Any]], who: str) -> list[str]:
    """Validate each engine's new settings with its model and store them; the names of those changed."""
    from gpuseat.engines import registry

    key = store.courses.get_course(course).key
    changed = []
    for engine, values in sets.items():
        merged = {**store.agents.engine_settings(key, engine), **values}
        checked = registry.validate_settings(engine, merged)
        clean = checked.model_dump(exclude_defaults=True) if checked is not None else {}
        if store.agents.set_engine_settings(key, engine, clean, actor=who):
            changed.append(engine)
    return changed


def render_plan(result: Pass, *, dry_run: bool) -> list[str]:
    """The plan (and what became of it) as lines a person reads, Terraform's way."""
    lines: list[str] = []
    outcomes = {id(o.step): o for r in result.reports for o in r.outcomes}
    by_step = {o.step.key: o for r in result.reports for o in r.outcomes}
    totals = {"+": 0, "~": 0, "-": 0}
    for p in result.planned:
        where = f"{p.engine_name}" + (f" on {p.host}" if p.host else "")
        if p.error:
            lines.append(f"course {p.course} · {where}: cannot plan: {p.error}")
            continue
        assert p.changes is not None
        if p.changes.empty:
            lines.append(f"course {p.course} · {where}: nothing to change")
        else:
            lines.append(f"course {p.course} · {where}:")
        for step in p.changes.ordered():
            totals[step.sign] += 1
            out = by_step.get(step.key) or outcomes.get(id(step))
            mark = ""
            if out is not None and not dry_run:
                mark = {"done": "  done", "failed": "  FAILED", "skipped": "  skipped"}[out.state]
                if out.message and out.state != "done":
                    mark += f": {out.message}"
            lines.append(f"  {step.sign} {step.action:<16} {step.target:<28} {step.why}{mark}")
            if dry_run and out is not None:
                lines += [f"      would run: {c.line}" for c in out.commands if c.dry]
                if out.message and not any(c.dry for c in out.commands):
                    lines.append(f"      ({out.message})")
        lines += [f"  note: {n}" for n in p.changes.notes]
    lines.append(f"Plan: {totals['+']} to add, {totals['~']} to change, {totals['-']} to take away.")
    if not dry_run and result.reports:
        done = sum(len(r.done) for r in result.reports)
        failed = sum(len(r.failed) for r in result.reports)
        skipped = sum(1 for r in result.reports for o in r.outcomes if o.state == "skipped")
        lines.append(f"Applied: {done} done, {failed} failed, {skipped} skipped.")
    for key in result.deleted:
        lines.append(f"course {key} deleted: no engine holds anything for it now")
    return lines


def raise_for(result: Pass, where: str, *, dry_run: bool = False) -> None:
    """One error for a pass with failed steps (each named on stderr first): exit 2 when every failure is
    the store's data (bad input: a roster name, a setting), else 1. Nothing failed: return. A dry run
    applies nothing: only an engine that could not plan counts."""
    from gpuseat.errors import EngineError, InputError

    failed = [f for f in result.failed if not dry_run or "step" not in f]
    if not failed:
        return
    for f in failed:
        print(f"error: {f['course']} {f['engine']}: {f.get('step') or 'plan'}: {f['error']}", file=sys.stderr)
    first = str(failed[0]["error"]).partition("\nTo fix: ")[0]  # its own fix is on its line above
    fix = "correct what each line above names, then apply again (done steps are not repeated)"
    if dry_run:
        error = InputError if all(f["exit_code"] == 2 for f in failed) else EngineError
        raise error(
            f"{len(failed)} engine(s) cannot plan (first: {first}); nothing was changed (--dry-run)",
            where=where,
            fix="correct what each line above names, then run the dry run again",
        )
    if all(f["exit_code"] == 2 for f in failed):
        raise InputError(
            f"{len(failed)} step(s) cannot be applied as the store says (first: {first}); the others were applied",
            where=where,
            fix=fix,
        )
    raise EngineError(
        f"{len(failed)} step(s) failed (first: {first}); the other steps were applied", where=where, fix=fix
    )


def left_to_agents(left: list[Held], where: str) -> EngineError | None:
    """Each engine and host ``left`` to the live agent that holds its lease (``ApplyLease.held``), one line each
    on stderr, and the error to raise (exit 1) once the pass's own failures are (:func:`raise_for`); None when
    nothing was left. ``gpuseat apply`` and each engine's command (:func:`apply_engine`) say it so."""
    from gpuseat.errors import EngineError

    for h in left:
        at = f"{h.engine} on {h.host}" if h.host else h.engine
        print(f"error: {at}: not applied: agent {h.holder} holds lease {h.lease} and applies it within "
              "seconds (gpuseat agent status)", file=sys.stderr)  # fmt: skip
    if not left:
        return None
    return EngineError(
        f"{len(left)} engine(s) and host(s) left to the agent that runs there (named above); nothing was "
        "applied there, the rest was",
        where=where,
        fix="nothing to do: that agent applies the store within seconds (gpuseat agent status shows its "
        "last apply); to apply from here instead, stop that agent first (systemctl stop "
        "gpuseat-agent-ENGINE.service on that host), or see the plan with gpuseat apply --dry-run",
    )


def apply_engine(
    course: str | None,
    db: str | None,
    engine: str,
    settings: dict[str, Any],
    fmt: Format,
    *,
    where: str,
    missing: str,
    fix: str,
    host: str | None = None,
    revoke_all: bool = False,
    headline: bool = False,
) -> None:
    """One engine's command (``host up``, ``slurm enroll``, ``vms up`` …) is ``gpuseat apply --engine``:
    its flags stored as the course's settings, one pass, a course without such seats refused (``missing``,
    formatted with ``key``, and ``fix``), the plan printed (``headline``: a line with the host and the
    count of changes first), and a failed step raised as :func:`raise_for` says. As ``gpuseat apply``, the pass
    holds the agent leases, and an engine and host whose agent runs are left to it (:func:`left_to_agents`)."""
    from gpuseat.engines.agent import ApplyLease, leased_pass
    from gpuseat.engines.apply import targets
    from gpuseat.engines.runner import Runner
    from gpuseat.errors import InputError
    from gpuseat.store import open_store

    with open_store(db, create=False) as store:
        key = store.courses.get_course(course).key
        if settings and not targets(store, course=key, engine=engine, host=host):
            # refused before the flags are stored: exit 2 had left them as the course's settings
            raise InputError(missing.format(key=key), where="--course", fix=fix)
        if settings:
            store_settings(store, key, {engine: settings}, actor())
        lease = ApplyLease(store, host=host)
        result = leased_pass(store, lease, course=key, engine=engine, host=host, runner=Runner(), actor=actor(),
                             revoke_all=revoke_all)  # fmt: skip
    left = list(lease.held.values())
    if not result.planned and not left:
        raise InputError(missing.format(key=key), where="--course", fix=fix)
    errors = [p.error for p in result.planned if p.error]
    if errors:
        raise InputError(errors[0], where=where, fix="correct it and run again")
    if fmt is Format.json:
        print_json(
            {
                "plans": [p.to_dict() for p in result.planned],
                "reports": [r.to_dict() for r in result.reports],
                "left_to_agents": [h.to_dict() for h in left],
            }
        )
    else:
        if headline and result.planned:
            steps = sum(len(p.changes.steps) for p in result.planned if p.changes)
            print(
                f"course {key} on host {result.planned[0].host}: "
                + (f"{steps} change(s)" if steps else "nothing to change")
            )
        for line in render_plan(result, dry_run=False):
            print(line)
    refused = left_to_agents(left, where)
    raise_for(result, where)
    if refused is not None:
        raise refused


def register(app: typer.Typer) -> None:
    """Add ``apply``, the ``agent`` group and the ``engines`` group."""

    @app.command("apply")
    def apply(
        course: EveryCourseOption = None,
        engine: EngineOption = None,
        host: MachineOption = None,
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and the commands; change nothing."),
        sets: list[str] | None = SET,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """Make the machines match the store now: each engine's plan, then each step (idempotent). An engine and
        host whose agent runs (it holds the agent lease) are left to it; the others' leases are held meanwhile."""
        from gpuseat.engines.agent import ApplyLease, leased_pass
        from gpuseat.engines.apply import one_pass
        from gpuseat.engines.runner import Runner
        from gpuseat.store import open_store

        wanted = parse_sets(sets)
        with open_store(db, create=False) as store:
            note = host_note(store, course, host) if host is not None else None
            if wanted:
                store_settings(store, course, wanted, actor())
            lease = ApplyLease(store, host=host)
            if dry_run:  # changes nothing: no lease, whatever agent runs
                result = one_pass(store, course=course, engine=engine, host=host, runner=Runner(dry_run=True),
                                  actor=actor())  # fmt: skip
            else:
                result = leased_pass(store, lease, course=course, engine=engine, host=host, runner=Runner(),
                                     actor=actor())  # fmt: skip
        left = list(lease.held.values())
        if fmt is Format.json:
            print_json(
                {
                    "dry_run": dry_run,
                    "plans": [p.to_dict() for p in result.planned],
                    "reports": [r.to_dict() for r in result.reports],
                    "deleted": result.deleted,
                    "left_to_agents": [h.to_dict() for h in left],
                }
            )
        else:
            for line in render_plan(result, dry_run=dry_run):
                print(line)
        if note is not None:
            print(note, file=sys.stderr)
        refused = left_to_agents(left, "gpuseat apply")
        raise_for(result, "gpuseat apply", dry_run=dry_run)
        if refused is not None:
            raise refused

    agent_app = typer.Typer(
        help="The agent: keeps this machine's seats true to the store (run as root on each engine host).",
        invoke_without_command=True,
        cls=Commands,
    )
    app.add_typer(agent_app, name="agent")

    @agent_app.callback()
    def agent(
        ctx: typer.Context,
        engine: EngineOption = None,
        host: MachineOption = None,
        course: EveryCourseOption = None,
        poll: float = typer.Option(1.0, "--poll", min=0.05, max=60, help="Seconds between looks at the store."),
        resync: float = typer.Option(300.0, "--resync", min=1, help="Seconds between full resyncs (undo drift)."),
        lease: float = typer.Option(15.0, "--lease", min=1, max=600, help="Seconds a lease lasts unrenewed."),
        install: bool = typer.Option(False, "--install", help="Write a systemd unit for this agent and stop."),
        unit_dir: Path = typer.Option(Path("/etc/systemd/system"), "--unit-dir", help="Where --install writes."),
        db: DbOption = None,
    ) -> None:
        """Run the agent (until SIGTERM), or with --install write its systemd unit."""
        if ctx.invoked_subcommand is not None:
            return
        if install:  # the unit runs the agent with the flags given here (--course once was left out unsaid)
            from gpuseat.core.seating import COURSE_KEY_PATTERN
            from gpuseat.errors import InputError

            if course is not None and not COURSE_KEY_PATTERN.fullmatch(course):
                raise InputError(f"{course[:100]!r} is not a course key", where="--course",
                                 fix="give the course's key (gpuseat course list), e.g. dl-2016")  # fmt: skip
            flags = changed("course", "poll", "resync", "lease")
            _install(engine, host, unit_dir, db, tuple(part for flag, v in flags for part in (flag, str(v))))
            return
        import signal
        import threading

        from gpuseat.engines.agent import Agent, AgentOptions
        from gpuseat.store import open_store

        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        options = AgentOptions(engine=engine, host=host, course=course, poll_s=poll, resync_s=resync, lease_s=lease)
        with open_store(db, create=False) as store:
            Agent(store, options, say=lambda line: print(line, flush=True)).run(stop)

    @agent_app.command("status")
    def status(db: DbOption = None, fmt: FormatOption = Format.table) -> None:
        """Each agent's last apply, pending and failed steps, who holds each lease, and every agent of each
        lease running now (leader and standbys: holder, role, seconds since it last reported)."""
        from gpuseat.store import open_store

        with open_store(db, create=False) as store:
            rows = store.agents.agent_statuses()
        if fmt is Format.json:
            print_json(rows)
            return

        def running(r: dict[str, Any]) -> list[str]:
            return [f"{a['holder']} {a['role']} (reported {a['reported_s_ago']} s ago)" for a in r["agents"]]

        table = [
            {
                **r,
                "failed": len(r["failed"]),
                "lease": f"{r['lease_holder'] or '-'} ({r['lease_expires_in_s']} s)",
                "running": "; ".join(running(r)),
            }
            for r in rows
        ]
        columns = ("name", "role", "holder", "last_apply_at", "pending", "failed", "lease")
        print_rows(table, (*columns, "running") if fmt is Format.csv else columns, fmt, title=f"{len(rows)} agent(s)")
        for r in rows if fmt is not Format.csv else []:  # every agent running for the lease, one line each
            for line in running(r):
                print(f"  {r['name']}: {line}")
        for r in rows:
            for f in r["failed"][:10]:
                print(f"  {r['name']}: {f['course']} {f['engine']} {f.get('step') or 'plan'}: {f['error']}")

    engines_app = add_group(app, "engines", "Seat engines: the registry, and each engine's settings per course.")

    @engines_app.command("list")
    def engines_list(fmt: FormatOption = Format.table) -> None:
        """Every engine gpuseat knows (built in, or registered by a plug-in)."""
        from gpuseat.engines import registry

        rows = [{"engine": s.name, "kinds": ", ".join(s.kinds), "about": s.doc} for s in registry.specs().values()]
        print_rows(rows, ("engine", "kinds", "about"), fmt, title=f"{len(rows)} engines")
        for why in registry.unusable().values():  # an installed plug-in that is not listed says why
            print(f"not listed: {why}", file=sys.stderr)

    @engines_app.command("settings")
    def engines_settings(
        engine: str = typer.Argument(..., help="Engine name (gpuseat engines list)."),
        values: list[str] | None = typer.Argument(None, help="SETTING=VALUE to store (SETTING= removes it)."),
        course: CourseOption = None,
        db: DbOption = None,
        fmt: FormatOption = Format.table,
    ) -> None:
        """Show an engine's settings for the course, or store new ones (checked by the engine first)."""
        from gpuseat.engines import registry
        from gpuseat.errors import InputError
        from gpuseat.store import open_store

        spec = registry.spec(engine)
        with open_store(db, create=False) as store:
            if values:
                sets: dict[str, Any] = {}
                for item in values:
                    key, eq, value = item.partition("=")
                    if not eq or not key:
                        raise InputError(f"{item!r}", where="SETTING=VALUE", fix="write e.g. ssh_host=gpu1.lab.org")
                    sets[key] = value if value != "" else None
                merged = {**store.agents.engine_settings(course, engine), **sets}
                merged = {k: v for k, v in merged.items() if v is not None}
                checked = registry.validate_settings(engine, merged)
                clean = checked.model_dump(exclude_defaults=True) if checked is not None else {}
                removed = {k: None for k in store.agents.engine_settings(course, engine) if k not in clean}
                store.agents.set_engine_settings(course, engine, {**clean, **removed}, actor=actor())
            stored = store.agents.engine_settings(course, engine)
        model = spec.settings_model()
        if fmt is Format.json:
            print_json(stored)
            return
        rows = []
        for name, f in model.model_fields.items() if model else []:
            rows.append(
                {"setting": name, "value": stored.get(name, f"(default {f.default})"), "about": f.description or ""}
            )
        print_rows(rows, ("setting", "value", "about"), fmt, title=f"{engine} settings")


def _install(engine: str | None, host: str | None, unit_dir: Path, db: str | None, options: tuple[str, ...]) -> None:
    """Write ``gpuseat-agent[-ENGINE].service`` and the environment file that names the store."""
    import shutil

    from gpuseat.engines.agent import unit_file
    from gpuseat.files import write_file

    beside = Path(sys.executable).parent / "gpuseat"  # the gpuseat of this very installation (a venv too)
    exe = str(beside) if beside.exists() else (shutil.which("gpuseat") or str(Path(sys.argv[0]).resolve()))
    default = unit_dir.absolute() == Path("/etc/systemd/system")  # else the environment file goes beside the unit
    env_file = "/etc/gpuseat/agent.env" if default else str(unit_dir.absolute() / "agent.env")
    name = f"gpuseat-agent{'-' + engine if engine else ''}.service"
    unit_dir.mkdir(parents=True, exist_ok=True)
    target = unit_dir / name
    write_file(target, unit_file(gpuseat=str(Path(exe).absolute()), engine=engine, host=host, env_file=env_file,
                                  options=options))  # fmt: skip
    print(f"wrote {target}")
    if db:
        env = Path(env_file)
        env.parent.mkdir(parents=True, exist_ok=True)
        write_file(env, f"GPUSEAT_DB_URL={db}\n", mode=0o600)
        print(f"wrote {env} (the store's URL, readable by root only)")
    print(f"next: systemctl daemon-reload && systemctl enable --now {name}")
