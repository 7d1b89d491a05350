"""Where seats come from: a carve layout, a plan's cloud option, or what ``nvidia-smi`` lists.

Each function turns one source into :class:`~gpuseat.store.SeatSpec` values that
``store.seats.add_seats`` stores in one transaction, so ``gpuseat seats add`` and the portal share one
answer. Nothing here writes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpuseat.core.seating import misfit, seat_keys
from gpuseat.errors import InputError
from gpuseat.store import CourseStore, SeatSpec

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog
    from gpuseat.catalog.offers import Offer
    from gpuseat.core.carve import Layout
    from gpuseat.core.listing import Listed
    from gpuseat.core.seating import EngineName
    from gpuseat.readings import Snapshot
    from gpuseat.store import SeatView

# carve mode → seat kind
KIND_OF_MODE = {"passthrough": "gpu", "mig": "mig", "vgpu": "vgpu", "timeslice": "shared", "mps": "shared"}
_HOSTLIKE = re.compile(r"[^A-Za-z0-9-]+")


def _host(name: str) -> str:
    """A seat host made from an inventory's ``name`` (a label in a file, ``IBM 2xM60``): each part
    between dots slugged, so that it passes the one host rule (:mod:`gpuseat.core.hosts`)."""
    from gpuseat.core.hosts import host_problem

    labels = (_HOSTLIKE.sub("-", part).strip("-")[:63].strip("-") for part in name.split("."))
    host = ".".join(label for label in labels if label)[:253].rstrip(".-")
    if host and host_problem(host) is None:
        return host
    flat = _HOSTLIKE.sub("-", name).strip("-")[:56].strip("-")  # all digits, or nothing left
    return f"server-{flat}" if flat else "server"


def next_number(keys: Sequence[str], prefix: str = "seat") -> int:
    """The number after the highest ``PREFIX-NN`` key (1 when there is none): where new seats go on."""
    pattern = re.compile(rf"{re.escape(prefix)}-(\d{{1,6}})")
    return 1 + max((int(m.group(1)) for k in keys if (m := pattern.fullmatch(k))), default=0)


def seats_from_layout(
    layout: Layout,
    *,
    engine: EngineName = "manual",
    host: str | None = None,
    groups: Sequence[str] = (),
    start: int = 1,
) -> list[SeatSpec]:
    """One seat per carved slice, keyed by the slice's name (``seat-01`` …, what ``vms`` and carve use).

    ``start`` > 1 (a course that has seats already, e.g. a second server) numbers on from there:
    ``seat-15`` … instead of the slice names, which restart at ``seat-01`` on every server.
    Whole GPUs keep their UUID (when the inventory gives one); MIG, vGPU and shared slices get theirs
    when they are created on the host (``seats`` records it through the engine's state changes).
    """
    where_host = host or _host(layout.server.name)
    keys = [s.name for s in layout.slices] if start == 1 else seat_keys("seat", len(layout.slices), start)
    out = []
    for key, s in zip(keys, layout.slices, strict=True):
        kind = KIND_OF_MODE[s.mode]
        out.append(
            SeatSpec(
                key=key,
                kind=kind,
                host=where_host,
                device_uuid=s.uuid if kind == "gpu" and s.uuid else None,
                profile=s.profile,
                memory_gb=s.memory_gb,
                groups=tuple(groups),
                engine=engine,
                engine_ref=f"pci={s.pci}" if s.pci and kind == "gpu" else None,
                state="planned",
            )
        )
    return out


def seats_from_nvidia_smi(
    snapshot: Snapshot | None = None,
    listing: Sequence[Listed] = (),
    *,
    host: str | None = None,
    prefix: str = "seat",
    start: int = 1,
) -> list[SeatSpec]:
    """One seat per MIG device (or per whole GPU without MIG), with the device UUIDs filled in.

    ``snapshot`` comes from ``nvidia-smi -q -x`` (memory sizes known), ``listing`` from ``nvidia-smi -L``.
    """
    found: dict[str, tuple[str, str | None, float | None]] = {}  # uuid → kind, profile, GB (first wins)
    missing = 0
    if snapshot is not None:
        for g in snapshot.gpus:
            if g.mig:
                for m in g.mig:
                    if not m.uuid:
                        missing += 1
                        continue
                    gb = m.memory_total_mib / 1024 if m.memory_total_mib else _profile_gb(m.profile)
                    found.setdefault(m.uuid, ("mig", m.profile, gb))
            else:
                gb = g.memory_total_mib / 1024 if g.memory_total_mib else None
                found.setdefault(g.uuid, ("gpu", None, gb))
    else:
        # a capture may list the same devices more than once (idle, under load): a GPU with MIG devices
        # in any listing is split, never a whole-GPU seat
        split = {listed.uuid for listed in listing if listed.mig}
        for listed in listing:
            for lm in listed.mig:
                found.setdefault(lm.uuid, ("mig", lm.profile, _profile_gb(lm.profile)))
            if listed.uuid not in split:
                found.setdefault(listed.uuid, ("gpu", None, None))
    if missing and not found:
        raise InputError(
            f"{missing} MIG device(s) without a UUID in this capture (older nvidia-smi -q -x omits them)",
            where="--from-nvidia-smi",
            fix="give the output of `nvidia-smi -L` instead: it lists every MIG device's UUID",
        )
    if not found:
        raise InputError(
            "no GPU or MIG device with a UUID in this capture",
            where="--from-nvidia-smi",
            fix="capture with `nvidia-smi -q -x > FILE` or `nvidia-smi -L > FILE` on the seat host",
        )
    from pydantic import ValidationError

    keys = seat_keys(prefix, len(found), start)
    out = []
    for key, (uuid, (kind, profile, gb)) in zip(keys, found.items(), strict=True):
        try:
            out.append(
                SeatSpec(
                    key=key,
                    kind=kind,
                    host=host,  # checked by the one host rule as given, never rewritten
                    device_uuid=uuid,
                    profile=profile,
                    memory_gb=round(gb, 2) if gb else None,
                    state="running",
                )
            )
        except ValidationError as exc:  # a name the capture gives (1g.٥gb): the capture's, not a flag's
            first = exc.errors()[0]
            if tuple(first["loc"])[:1] not in (("profile",), ("device_uuid",)):
                raise
            raise InputError(
                f"the capture's {first['loc'][0]} {str(first.get('input'))[:60]!r} of device {uuid[:60]!r}: "
                f"{first['msg']}",
                where="--from-nvidia-smi",
                fix="give the capture as nvidia-smi wrote it (`nvidia-smi -q -x > FILE` or `nvidia-smi -L > FILE`)",
            ) from None
    return out


def _profile_gb(profile: str | None) -> float | None:
    """``3g.40gb`` → 40.0 (the memory a MIG profile's name states)."""
    m = re.search(r"\.(\d+(?:\.\d+)?)gb$", profile or "")
    return float(m.group(1)) if m else None


def course_offers(store: CourseStore, course: str | None, catalog: Catalog | None = None) -> list[Offer]:
    """The offers a course's cloud seats may rent: those its plan was chosen from, gpuseat's catalog and
    the offers files stored with the course (:func:`gpuseat.services.planning.stored_course_offers`), so a
    seat on the course's own offer is added and launched as one on a bundled offer is."""
    from gpuseat.catalog.bundle import load_catalog
    from gpuseat.services.planning import stored_course_offers

    return stored_course_offers(store, course, catalog or load_catalog())


def unknown_offer_fix(store: CourseStore, course: str | None) -> str:
    """How to fix a course whose plan option or cloud seat names an offer :func:`course_offers` lacks:
    a course stored before gpuseat kept its offers files (their offers are missing) loads its file again."""
    key = store.courses.get_course(course).key
    kept = {name for name, _text in store.courses.offers_texts(key) or ()}
    lacking = [name for name in store.courses.course_file(key).offers_files if name not in kept]
    if lacking:
        return (
            f"the course was stored before gpuseat kept its offers files ({', '.join(lacking)}): load its course "
            f"file again beside them (gpuseat course update COURSE.toml --key {key} stores them with it)"
        )
    return (
        "the offer left gpuseat's catalog: choose a plan option on current offers (gpuseat plan COURSE.toml lists "
        f"them; gpuseat course update COURSE.toml --key {key} --plan-option N stores it)"
    )


def cloud_seats(
    store: CourseStore, course: str | None, offers: Sequence[Offer], *, count: int | None = None, prefix: str = "cloud"
) -> list[SeatSpec]:
    """Cloud seats from the course's chosen plan option: one per participant not yet covered.

    For each group the plan seats on a cloud offer, the seats to add are the group's participants
    (the roster, or the course file's count before a roster exists) minus the seats already stored
    that suit the group. ``count`` overrides that number (for a course with one cloud group).
    Seats are ``planned`` on engine ``skypilot`` with the offer id as profile. ``offers`` are the
    course's (:func:`course_offers`); a cloud group on an offer they lack is an input error.
    """
    view = store.courses.get_course(course)
    option = view.plan_option
    if not option:
        raise InputError(
            f"course {view.key!r} has no chosen plan option",
            where="--cloud",
            fix="create the course with --plan-option N (gpuseat plan COURSE.toml lists the options)",
        )
    by_id = {o.id: o for o in offers}
    for g in option.get("groups", ()):
        if g.get("mode") == "instance" and g.get("offer") and g["offer"] not in by_id:  # "instance": a cloud offer
            raise InputError(
                f"plan option {option.get('rank')} of course {view.key!r} rents cloud offer {g['offer']} for "
                f"group {g.get('group')}, which is neither in gpuseat's catalog nor in the offers files stored "
                "with the course",
                where="--cloud",
                fix=unknown_offer_fix(store, view.key),
            )
    cloud_groups = [
        g for g in option.get("groups", ()) if g.get("offer") in by_id and by_id[g["offer"]].kind == "cloud"
    ]
    if not cloud_groups:
        raise InputError(
            f"plan option {option.get('rank')} of course {view.key!r} rents no cloud offer",
            where="--cloud",
            fix="choose an option with a cloud offer (--plan-option N), or add seats from an inventory",
        )
    if count is not None and (count <= 0 or count > 100_000 or len(cloud_groups) > 1):
        raise InputError(
            f"--count {count}", where="--count", fix="give a positive count, for a course with one cloud group"
        )
    needs = {g["name"]: g for g in view.summary.get("groups", ())}
    people = store.roster.participants(view.key)
    stored = store.seats.seats(view.key)
    taken = {s.key for s in stored}
    start = 1 + max((int(k[len(prefix) + 1 :]) for k in taken if re.fullmatch(rf"{prefix}-\d+", k)), default=0)
    out: list[SeatSpec] = []
    for g in cloud_groups:
        name = g["group"]
        offer = by_id[g["offer"]]
        if count is not None:
            n = count
        else:
            members = sum(1 for p in people if p.group == name) or int(needs.get(name, {}).get("count", 0))
            suiting = sum(1 for s in stored if _suits(s, name, needs.get(name)))
            n = max(0, members - suiting)
        for key in seat_keys(prefix, n, start):
            out.append(
                SeatSpec(
                    key=key,
                    kind="cloud",
                    profile=offer.id,
                    memory_gb=offer.gpu_memory_gb,
                    groups=(name,),
                    engine="skypilot",
                    state="planned",
                )
            )
        start += n
    return out


def _suits(seat: object, group: str, need: dict[str, object] | None) -> bool:
    from gpuseat.core.needs import SeatNeed

    parsed = SeatNeed.model_validate({k: v for k, v in (need or {}).items() if k in SeatNeed.model_fields})
    return (
        misfit(
            kind=seat.kind,  # type: ignore[attr-defined]
            memory_gb=seat.memory_gb,  # type: ignore[attr-defined]
            engine=seat.engine,  # type: ignore[attr-defined]
            reserved_for=seat.groups,  # type: ignore[attr-defined]
            group=group,
            need=parsed if need else None,
        )
        is None
    )


def carve_counted(
    inventory: Path,
    catalog: Catalog,
    *,
    mode: str,
    count: int | None,
    min_mem: float,
    profiles: tuple[str, ...],
    guest: str,
    notes: list[str] | None = None,
) -> Layout:
    """Carve an inventory so that the seat count is what the organizer meant.

    One profile (``--profile 1g.18gb``) means "seats of this size": ``count`` of them, or as many as
    fit when no count is given (said in ``notes``, printed when None). Several profiles are taken as
    the exact list.
    """
    from gpuseat.services import carving

    if len(set(profiles)) == 1 and len(profiles) == 1:
        if count is not None:
            if not 0 < count <= 1024:
                raise InputError(f"--count {count}", where="--count", fix="give a count between 1 and 1024")
            return carving.carve_inventory(
                inventory, catalog, mode=mode, min_mem=min_mem, profiles=profiles * count, guest=guest
            )
        best: Layout | None = None
        for n in range(1, 8 * 64 + 1):  # at most 7 MIG instances per GPU, 64 GPUs per inventory
            try:
                best = carving.carve_inventory(
                    inventory, catalog, mode=mode, min_mem=min_mem, profiles=profiles * n, guest=guest
                )
            except InputError:
                if best is None:
                    raise
                break
        assert best is not None
        note = f"{len(best.slices)} seats of {profiles[0]} fit on {best.server.name}"
        if notes is None:
            print(f"{note} (use --count N for fewer)")
        else:
            notes.append(note)
        return best
    return carving.carve_inventory(
        inventory, catalog, mode=mode, seats=count, min_mem=min_mem, profiles=profiles, guest=guest
    )


def refuse_carved_again(have: Sequence[SeatView], specs: Sequence[SeatSpec], *, where: str) -> None:
    """A server is carved once per course: its GPUs carved again would back two seats each (MIG and vGPU
    slices have no UUID or PCI address until the engine makes them, so nothing else would notice)."""
    hosts = {s.host for s in specs if s.host}
    taken = [s for s in have if s.host in hosts]
    if taken:
        host = taken[0].host
        raise InputError(
            f"server {host} already backs {len(taken)} seat(s) of this course ({taken[0].key} …): carving it "
            "again would give each of its GPUs to two seats",
            where=where,
            fix=f"to carve it anew, remove its seats first (gpuseat seats remove); another server needs its own "
            f"name in its inventory or --host (gpuseat seats status lists {host}'s seats)",
        )


def inventory_access(inventory: Path) -> dict[str, object] | None:
    """The inventory's ``ssh_host``/``ssh_port``/``jump_host`` as an access dict (None without ssh_host)."""
    import tomllib

    from gpuseat.core.hosts import check_host, jump_target
    from gpuseat.files import read_text

    data = tomllib.loads(read_text(inventory))
    host = data.get("ssh_host")
    if not host:
        return None
    where = f"{inventory}: field"
    out: dict[str, object] = {"kind": "ssh", "host": check_host(str(host), field=f"{where} 'ssh_host'")}
    if data.get("ssh_port"):
        out["port"] = int(data["ssh_port"])
    if data.get("jump_host"):  # user@host[:port], each part checked and kept, as `seats connect --jump` does
        out["jump_host"] = jump_target(str(data["jump_host"]), field=f"{where} 'jump_host'")
    return out


def record_inventory_access(
    store: CourseStore, seats: Sequence[SeatView], inventory: Path, *, actor: str = "gpuseat"
) -> int:
    """Give new inventory seats the server's reachable address (the holder's user is added at delivery)."""
    from gpuseat.core.readiness import Access

    access = inventory_access(inventory)
    if access is None:
        return 0
    made = Access.from_dict(access)
    done = 0
    for s in seats:
        made_for_seat = Access.from_dict({**made.to_dict(), "device_uuid": s.device_uuid})
        done += store.delivery.record_delivery(s.course, s.key, access=made_for_seat, actor=actor)
    return done


def cloud_over_plan(store: CourseStore, course: str | None, adding: int) -> str | None:
    """A warning when cloud seats would outnumber the cloud machines of the chosen plan option."""
    view = store.courses.get_course(course)
    option = view.plan_option or {}
    planned = sum(int(g.get("seats") or 0) for g in option.get("groups", ()) if g.get("mode") == "instance")
    have = sum(1 for s in store.seats.seats(view.key) if s.kind == "cloud")
    if planned and adding and have + adding > planned:  # adding none: "0 cloud seat(s) would make …"
        return (
            f"{adding} cloud seat(s) would make {have + adding}, but plan option {option.get('rank')} rents "
            f"{planned} cloud machine(s); pass --count N to add fewer"
        )
    return None
