"""The demo course behind ``gpuseat serve --demo``: the 2016 course, half-way through, in a fresh store.

What it seeds, through the same services the CLI uses: the 2016 course file and a plan option (one
IBM 2× M60 server for 4 participants, 12 AWS g2.2xlarge instances for the others, both priced by
the planner), 16 participants, 4 passthrough + 12 cloud seats, assignments, access links, an open
survey that half the participants answered, and benchmark results per seat. Monitor data: the last
three minutes go through the monitor's own path (snapshots → attribution → ``store.monitor``)
with alerts; the days before are one-minute aggregates of a deterministic lab-hours pattern between
08:00 and 19:00 UTC (a seat is busy in some of its owner's 09:00–18:00 minutes; two participants never
start). The demo's clock
stands at :data:`DEMO_NOW`, day 8 of 15, so cost so far and the charts are half-way.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from gpuseat.core.roster import RosterText

DEMO_KEY = "dl-2016"
DEMO_NOW = datetime(2016, 6, 13, 14, 0, tzinfo=UTC)
PEOPLE = (
    "Ada Lovelace", "Alan Turing", "Grace Hopper", "Edsger Dijkstra", "Barbara Liskov", "Donald Knuth",
    "Frances Allen", "John Backus", "Margaret Hamilton", "Ken Thompson", "Radia Perlman", "Tony Hoare",
    "Leslie Lamport", "Shafi Goldwasser", "Niklaus Wirth", "Karen Sparck Jones",
)  # fmt: skip
SERVER_HOST = "ibm-m60"
LIVE_STEPS = 18  # the last 3 minutes at 10 s go through the monitor's own write path
MONITORED = (8, 19)  # UTC hours the demo's monitor history covers (keeps seeding within seconds)
M60_MIB, K520_MIB = 8192, 4096


@dataclass
class Demo:
    """What ``serve --demo`` prints and serves."""

    folder: Path
    db_url: str
    course: str
    password: str
    links: dict[str, str]  # participant → access token
    bench_path: Path
    now: datetime = DEMO_NOW
    notes: list[str] = field(default_factory=list)


def _uuid(kind: str, n: int) -> str:
    return f"GPU-{kind}{n:04x}-2016-4000-8000-00000000{n:04x}"


def _plan_option(course_text: str) -> dict[str, Any]:
    """4 seats on one IBM 2× M60 server plus 12 AWS g2.2xlarge instances, priced with the planner's own
    rates (:class:`~gpuseat.core.plan.PlanContext`), in the shape of one ``plan --format json`` option."""
    import tomllib

    from gpuseat.catalog.bundle import load_catalog
    from gpuseat.core.cost import line
    from gpuseat.core.course import Course
    from gpuseat.core.plan import PlanContext

    catalog = load_catalog()
    offers = {o.id: o for o in catalog.offers}
    ctx = PlanContext.of(Course.model_validate(tomllib.loads(course_text)), catalog)
    server, cloud = offers["ibm:bm-2xM60"], offers["aws:g2.2xlarge"]
    lines = [
        line(ctx.usage_rate(server)[0], 1, offer=server.id, group="participants"),
        line(ctx.usage_rate(cloud)[0], 12, offer=cloud.id, group="participants"),
    ]
    return {
        "rank": 1,
        "offers": [{"offer": server.id, "count": 1}, {"offer": cloud.id, "count": 12}],
        "seats": 16,
        "total_usd": round(sum(ln.usd for ln in lines), 2),
        "lines": [ln.to_dict() for ln in lines],
        "groups": [
            {"group": "participants", "offer": server.id, "units": 1, "seats": 4, "mode": "passthrough"},
            {"group": "participants", "offer": cloud.id, "units": 12, "seats": 12, "mode": "instance"},
        ],
        "notes": ["demo: 4 passthrough seats on one IBM 2× M60 server, 12 AWS g2.2xlarge instances"],
    }


def _roster() -> str:
    lines = ["name,email,unix_user"]
    for name in PEOPLE:
        first, last = name.split(" ", 1)
        user = (first[0] + last.split()[-1]).lower()
        lines.append(f"{name},{user}@example.org,{user}")
    return "\n".join(lines) + "\n"


def seed_demo(folder: Path, *, history_days: float | None = None) -> Demo:
    """Create the demo store in ``folder`` (which must be empty or new)."""
    from gpuseat.bench.device import DeviceFacts
    from gpuseat.bench.results import RecordedResult
    from gpuseat.core.course import Course as CourseFile
    from gpuseat.monitor.runner import observe
    from gpuseat.readings import Alert, Gpu, GpuProcess, Snapshot
    from gpuseat.services.survey import SurveyService
    from gpuseat.store import open_store
    from gpuseat.store.accounts import generate_password
    from gpuseat.store.monitor import MinuteRow

    folder.mkdir(parents=True, exist_ok=True)
    db_url = f"sqlite:///{folder / 'demo.db'}"
    text = resources.files("gpuseat.catalog").joinpath("data", "demo", "course-2016.toml").read_text("utf-8")
    store = open_store(db_url, create=True)
    import tomllib

    course = CourseFile.model_validate(tomllib.loads(text))
    store.courses.create_course_from(
        course, key=DEMO_KEY, source_text=text, plan_option=_plan_option(text), actor="demo"
    )
    store.roster.import_roster(DEMO_KEY, RosterText(_roster(), where="demo roster"), actor="demo")
    specs: list[dict[str, Any]] = [
        {
            "key": f"m60-{i + 1}",
            "kind": "gpu",
            "host": SERVER_HOST,
            "device_uuid": _uuid("a", i),
            "profile": "M60",
            "memory_gb": 8.0,
            "engine": "libvirt",
            "state": "running",
        }
        for i in range(4)
    ]
    specs += [
        {
            "key": f"aws-{i + 1:02d}",
            "kind": "cloud",
            "host": f"ip-10-0-0-{10 + i}.ec2.internal",
            "device_uuid": _uuid("b", i),
            "profile": "g2.2xlarge",
            "memory_gb": 4.0,
            "engine": "skypilot",
            "state": "running",
        }
        for i in range(12)
    ]
    store.seats.add_seats(DEMO_KEY, specs, actor="demo")
    store.seats.assign_all(DEMO_KEY, actor="demo")
    tokens = {t.participant: t.token for t in store.tokens.issue_tokens(DEMO_KEY, actor="demo")}
    password = generate_password()
    store.accounts.set_password("admin", password)

    # monitor: live part through the monitor's own write path
    seats = {s.key: s for s in store.seats.seats(DEMO_KEY)}
    people = {p.key: p for p in store.roster.participants(DEMO_KEY)}
    rng = random.Random(2016)
    keen = {k: (0.0 if i in (5, 11) else 0.35 + 0.6 * rng.random()) for i, k in enumerate(sorted(people))}
    monitor = store.monitor.of_course(DEMO_KEY)
    seat_map = monitor.seat_map(course=DEMO_KEY)
    now = DEMO_NOW.timestamp()
    hosts: dict[str, list[Any]] = {}
    for s in seats.values():
        hosts.setdefault(s.host or "?", []).append(s)
    users: dict[int, str | None] = {}
    for step in range(LIVE_STEPS):
        t = now - 10 * LIVE_STEPS + 10 * step
        for host, host_seats in sorted(hosts.items()):
            gpus, procs = [], []
            for i, s in enumerate(sorted(host_seats, key=lambda x: x.key)):
                who = s.participant
                total = M60_MIB if s.kind == "gpu" else K520_MIB
                busy = who is not None and keen.get(who, 0) > 0.5
                used = int(total * (0.3 + 0.5 * keen[who])) if busy and who else 0
                gpus.append(
                    Gpu(i, s.device_uuid or "", "Tesla M60" if s.kind == "gpu" else "GRID K520",
                        memory_used_mib=float(used), memory_total_mib=float(total),
                        utilization_gpu=float(min(99, int(100 * keen[who]) + step % 7)) if busy and who else 0.0,
                        temperature_c=40.0 + (20 if busy else 0), power_w=60.0 + (80 if busy else 0))
                )  # fmt: skip
                if busy and who:
                    pid = 40_000 + 100 * len(users) + i
                    users[pid] = people[who].unix_user
                    procs.append(GpuProcess(pid, s.device_uuid or "", used_memory_mib=float(used), name="python"))
            snap = Snapshot(host, t, tuple(gpus), tuple(procs))
            _, states = observe(snap, seat_map, users=users)
            monitor.write(host, t, states)
    idle = [s for s in seats.values() if s.participant and keen.get(s.participant, 0) == 0.0]
    for s in idle:
        monitor.record_alert(
            Alert("idle", s.key, f"seat {s.key} idle for 48.0 h", now - 3600, True, s.key, s.participant)
        )
    hog = next(s for s in seats.values() if s.kind == "gpu" and s.participant and keen[s.participant] > 0.5)
    monitor.record_alert(
        Alert("foreign", f"{hog.key}:31337", f"pid 31337 of user mallory on seat {hog.key} of {hog.participant}",
              now - 900, True, hog.key, hog.participant)
    )  # fmt: skip

    # the days before: one-minute aggregates (what the monitor's rollup would have left)
    first_minute = int((DEMO_NOW - timedelta(days=history_days or 7.5)).timestamp()) // 60
    last_minute = int(now - 10 * LIVE_STEPS) // 60
    rows = []
    for s in seats.values():
        if not s.device_uuid or s.participant is None:
            continue
        total = M60_MIB if s.kind == "gpu" else K520_MIB
        k = keen[s.participant]
        draw = random.Random(s.key).random
        uuid, seat_id, person_id = s.device_uuid, s.id, people[s.participant].id
        in_use = (6, int(total * 0.7), int(total * 0.6), int(60 + 35 * k))
        # busy in a lab-hours minute (09:00-18:00 UTC) when the seat's own draw falls under its owner's
        # eagerness; one loop over the ~80k minutes, without a call per minute
        for m in range(first_minute, last_minute):
            hour = (m // 60) % 24
            if not MONITORED[0] <= hour < MONITORED[1]:
                continue
            if 9 <= hour < 18 and draw() < k:
                rows.append(MinuteRow(m, uuid, seat_id, person_id, 6, *in_use))
            else:
                rows.append(MinuteRow(m, uuid, seat_id, person_id, 6, 0, 0, 0, 0))
    store.monitor.of_course(DEMO_KEY).add_minutes(rows)

    # benchmarks recorded on each seat (the 2016 article's times, with a little spread)
    bench_path = folder / "bench-results.jsonl"
    with bench_path.open("w", encoding="utf-8") as fh:
        for i, s in enumerate(sorted(seats.values(), key=lambda x: x.key)):
            m60 = s.kind == "gpu"
            seconds = (26.73 if m60 else 45.5) * (0.97 + 0.06 * ((i * 7) % 10) / 10)
            device = DeviceFacts(kind="cuda", name="Tesla M60" if m60 else "GRID K520", index=0, uuid=s.device_uuid,
                                 memory_gb=8.0 if m60 else 4.0, torch="demo", cpu_model="demo", threads=8)  # fmt: skip
            rec = RecordedResult(
                gpu_name=device.name,
                gpu_model="M60" if m60 else "K520",
                iterations=10000,
                seconds=round(seconds, 2),
                recorded_at=DEMO_NOW - timedelta(days=6, hours=i),
                device=device,
            )
            fh.write(json.dumps(rec.model_dump(mode="json")) + "\n")

    # the survey: open, half the participants answered
    surveys = SurveyService(store)
    surveys.set_state(DEMO_KEY, "open", actor="demo")
    template = surveys.template(DEMO_KEY)
    result_choices = template.question[1].choices
    apply_choices = template.question[2].choices
    for n, who in enumerate(sorted(people)[::2]):
        form = {
            "q_expectations": [str(6 + n % 5)],
            "q_result": [result_choices[n % len(result_choices)]],
            "q_apply": [apply_choices[n % 3], apply_choices[(n + 1) % 3]],
            "q_format": [str(7 + n % 4)],
            "q_recommend": [str((10, 9, 9, 8, 10, 6, 9, 10)[n % 8])],
        }
        if n == 3:
            form["q_apply"].append("other")
            form["q_apply_other"] = ["teaching it to my team"]
        surveys.submit(DEMO_KEY, who, form)
    store.close()
    return Demo(folder, db_url, DEMO_KEY, password, tokens, bench_path)
