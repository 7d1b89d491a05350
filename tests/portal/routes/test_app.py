"""The wiring: ``create_app`` stays short, and each concern is one ``APIRouter`` named ``router``."""

from __future__ import annotations

import importlib
import inspect

from fastapi import APIRouter
from fastapi.routing import APIRoute

from gpuseat.web.app import create_app

CONCERNS = ("participant", "organizer", "survey", "report", "health", "settings")


def test_create_app_only_wires_in_at_most_60_lines() -> None:
    lines = inspect.getsource(create_app).splitlines()
    assert len(lines) <= 60, f"create_app is {len(lines)} lines: move what is not wiring into a router or deps"


def test_each_concern_is_one_router_and_no_route_is_declared_twice() -> None:
    seen: dict[tuple[str, str], str] = {}
    for name in CONCERNS:
        router = importlib.import_module(f"gpuseat.web.routes.{name}").router
        assert isinstance(router, APIRouter), name
        routes = [r for r in router.routes if isinstance(r, APIRoute)]
        assert routes, name
        for route in routes:
            for method in route.methods:
                assert (method, route.path) not in seen, (name, seen[(method, route.path)], route.path)
                seen[(method, route.path)] = name
