#!/usr/bin/env bash
# The test command: set up, lint, run the whole suite (two workers on CI's 2 cores) against real
# SQLite and a throwaway PostgreSQL server.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests benchmarks
pg=$(mktemp -d /tmp/gpuseat-pg.XXXXXX)
trap 'bash scripts/postgres.sh stop "$pg"' EXIT
eval "$(bash scripts/postgres.sh start "$pg")"
.venv/bin/python -m pytest -n 2 -q "$@"
