"""The store's reads of held seats across courses (``held_on_devices``, ``held_seats``, ``held_by_engine``) that
the engines' two-courses rule uses (``gpuseat.engines.other_courses``), on SQLite and PostgreSQL: held seats only,
of the engine asked, in courses not archived, oldest first, with their engine reference."""

from __future__ import annotations

from gpuseat.store import CourseStore

from .conftest import EXAMPLES


def _course(store: CourseStore, key: str, engine: str) -> list[str]:
    store.courses.create_course(EXAMPLES / "course-2016.toml", key=key)
    store.roster.import_roster(key, EXAMPLES / "roster-16.csv")
    seats = [{"key": f"seat-0{i}", "kind": "gpu", "engine": engine, "device_uuid": f"GPU-{i}"} for i in (1, 2)]
    store.seats.add_seats(key, seats)
    people = [p.key for p in store.roster.participants(key)[:2]]
    store.seats.assign(key, people[0], "seat-01")  # seat-02 is free
    return people


def test_held_seats_of_other_courses(store: CourseStore) -> None:
    jan = _course(store, "jan", "libvirt")
    _course(store, "feb", "libvirt")
    _course(store, "hub", "jupyterhub")
    rows = store.seats.held_seats([("jan", "seat-01"), ("jan", "seat-02"), ("feb", "seat-01"), ("hub", "seat-01")],
                                  "libvirt")  # fmt: skip
    assert [(r["course"], r["seat"], r["participant"]) for r in rows] == [("jan", "seat-01", jan[0]),
                                                                        ("feb", "seat-01", jan[0])]  # fmt: skip
    assert rows[0]["since"] <= rows[1]["since"] and rows[0]["since"].tzinfo is not None
    assert [r["seat"] for r in store.seats.held_on_devices(["GPU-1", "GPU-2"], "jupyterhub")] == ["seat-01"]
    assert {r["course"] for r in store.seats.held_by_engine("libvirt")} == {"jan", "feb"}
    assert all("engine_ref" in r for r in store.seats.held_by_engine("libvirt"))
    assert store.seats.held_seats([], "libvirt") == []
    store.lifecycle.archive_course("jan")
    assert [r["course"] for r in store.seats.held_seats([("jan", "seat-01"), ("feb", "seat-01")], "libvirt")] == ["feb"]


def test_held_seats_of_several_engines_on_one_gpu(store: CourseStore) -> None:
    """The engines that deliver a GPU of their server are compared together: one read gives the held seats of any
    of them on the UUIDs asked (with each seat's engine), and the libvirt engine's read adds them to its domains'."""
    jan = _course(store, "jan", "host")
    _course(store, "hub", "jupyterhub")
    _course(store, "vms", "libvirt")
    _course(store, "k8s", "kubernetes")
    local = ("host", "jupyterhub", "libvirt")
    rows = store.seats.held_on_devices(["GPU-1"], local)
    assert [(r["course"], r["engine"]) for r in rows] == [("jan", "host"), ("hub", "jupyterhub"), ("vms", "libvirt")]
    assert rows[0]["participant"] == jan[0] and store.seats.held_on_devices(["GPU-2"], local) == []
    rows = store.seats.held_seats([("vms", "seat-01")], "libvirt", ["GPU-1"], ("host", "jupyterhub"))
    assert [(r["course"], r["seat"]) for r in rows] == [("jan", "seat-01"), ("hub", "seat-01"), ("vms", "seat-01")]
    assert [r["course"] for r in store.seats.held_seats([], "libvirt", ["GPU-1"], ("host",))] == ["jan"]
