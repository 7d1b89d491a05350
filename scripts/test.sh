#!/usr/bin/env bash
# The test command: set up everything, check lint, format and types, check that a plain non-root
# `pip install .` runs the main job, then run the whole suite (two workers on CI's 2 cores) against
# real SQLite and a throwaway PostgreSQL server, on every core, in random order.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
bash scripts/check_install.sh
pg=$(mktemp -d /tmp/gpuseat-pg.XXXXXX)
trap 'bash scripts/postgres.sh stop "$pg"' EXIT
eval "$(bash scripts/postgres.sh start "$pg")"
# xdist on every core (-n auto), tests in a new random order each run (pytest-randomly prints the seed;
# repeat an order with --randomly-seed=N, or --randomly-seed=last; -p no:randomly turns it off).
.venv/bin/python -m pytest -n auto --dist loadgroup -q --durations=30 "$@"
