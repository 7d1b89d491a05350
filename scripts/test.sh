#!/usr/bin/env bash
# The test command: set up everything, check lint, format and types, check that a plain non-root
# `pip install .` runs the main job, then run the whole suite (three workers on CI's 2 cores) against
# real SQLite and a throwaway PostgreSQL server, on every core, in random order.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# mypy and the install check side by side: each keeps one of CI's two cores busy for 20-30 s
.venv/bin/mypy &
mypy=$!
bash scripts/check_install.sh
wait "$mypy"
pg=$(mktemp -d /tmp/gpuseat-pg.XXXXXX)
trap 'bash scripts/postgres.sh stop "$pg"' EXIT
eval "$(bash scripts/postgres.sh start "$pg")"
# xdist with one and a half workers per core: much of the suite waits on daemons, child processes and held
# locks, and a third worker uses that time (2 cores: 643-655 s with 3 workers, 774 s with 2, one hour,
# 2026-12-07). Tests in a new random order each run (pytest-randomly prints the seed; repeat an order with
# --randomly-seed=N, or --randomly-seed=last; -p no:randomly turns it off).
workers=$(( ($(nproc) * 3 + 1) / 2 ))
.venv/bin/python -m pytest -n "$workers" --dist loadgroup -q --durations=30 "$@"
